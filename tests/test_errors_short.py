"""Errors in a lesson are shown short: the type, the message and the lesson's own lines
(hooktutor.course.errors), in a real kernel, as a learner sees them."""

from __future__ import annotations

import re

import nbformat
from nbclient import NotebookClient

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _run(*sources: str):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    NotebookClient(nb, timeout=60, kernel_name="python3", allow_errors=True, shutdown_kernel="immediate").execute()
    errors = []
    for cell in nb.cells[1:]:
        (error,) = [o for o in cell.outputs if o.output_type == "error"]
        errors.append((error.ename, error.evalue, ANSI.sub("", "\n".join(error.traceback))))
    return errors


def test_an_error_shows_its_type_its_message_and_the_lines_of_the_lesson_only():
    setup = "import torch\nfrom hooktutor.course.errors import show_errors_short\nshow_errors_short()"
    direct = "data = torch.tensor([1.0, 2.0])\ndata.register_hook(lambda grad: grad)"
    in_hook = ("x = torch.ones(2, requires_grad=True)\ndef bad(g):\n    return g.view(5)\n"
               "y = x * 2\ny.register_hook(bad)\ny.sum().backward()")
    full = "show_errors_short(False)\ndata.register_hook(lambda grad: grad)"
    (e1, m1, t1), (e2, m2, t2), (e3, m3, t3) = _run(setup, direct, in_hook, full)
    assert (e1, m1) == ("RuntimeError", "cannot register a hook on a tensor that doesn't require gradient")
    assert "data.register_hook(lambda grad: grad)" in t1 and "_tensor.py" not in t1
    assert "of library code (torch, IPython, ...) left out" in t1 and len(t1.splitlines()) < 10
    # an error in a hook of the learner's, raised deep inside backward(): both of their lines
    assert e2 == "RuntimeError" and "y.sum().backward()" in t2 and "return g.view(5)" in t2
    assert "torch/autograd" not in t2 and "graph.py" not in t2
    # switched off: torch's frames are back
    assert (e3, m3) == (e1, m1) and "_tensor.py" in t3
