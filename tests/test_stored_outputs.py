"""No stored output names a path of the machine that ran ``regen``.

A traceback in a ``raises-exception`` cell lists the files of its frames, the doctor's report
names the Python it runs: stored as they came, they would show the author's checkout and virtual
environment to every learner (and differ on every machine). ``regen`` stores them relative to the
checkout or the environment (``hooktutor/course/regen.py``).
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from hooktutor.course.regen import absolute_paths, normalise, output_texts

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_no_stored_output_holds_an_absolute_path(path):
    nb = nbformat.read(path, as_version=4)
    found = [(index, hit) for index, cell in enumerate(nb.cells) if cell.cell_type == "code"
             for out in cell.outputs for text in output_texts(out) for hit in absolute_paths(text)]
    assert not found, (f"{path.name}: stored outputs name paths of the machine that made them "
                       f"(cell index, path): {found[:5]}; re-run `python3 course.py regen {path.name}`")


@pytest.mark.parametrize("text, paths", [
    ("File \x1b[0;32m/home/ada/hooktutor/.venv/lib/python3.11/site-packages/torch/_tensor.py:648\x1b[0m",
     ["/home/ada/hooktutor/.venv/lib/python3.11/site-packages/torch/_tensor.py"]),
    ("Python: 3.11.7 at /usr/bin/python3", ["/usr/bin/python3"]),
    (r"File C:\Users\ada\hooktutor\hooktutor\capture.py:12", [r"C:\Users\ada\hooktutor\hooktutor\capture.py"]),
    ("see https://docs.pytorch.org/docs/stable/notes/autograd.html", []),
    ("fwd/bwd: 1/3 of the steps, 0/0 is nan, ./notebooks/00_start_here.ipynb", []),
    ("<site-packages>/torch/nn/modules/module.py:1775, <env>/bin/python, hooktutor/capture.py:3", []),
])
def test_absolute_paths_finds_machine_paths_and_nothing_else(text, paths):
    assert absolute_paths(text) == paths


def test_normalise_stores_paths_relative_to_the_checkout_and_the_environment(tmp_path):
    import sys
    import sysconfig

    site_packages = sysconfig.get_paths()["purelib"]
    root = tmp_path / "course"
    root.mkdir()
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("1/0")
    cell.outputs = [
        nbformat.v4.new_output("error", ename="ZeroDivisionError", evalue="division by zero", traceback=[
            f"File \x1b[0;32m{root}/hooktutor/capture.py:12\x1b[0m, in capture",
            f"File \x1b[0;32m{site_packages}/torch/nn/modules/module.py:1775\x1b[0m, in _call_impl"]),
        nbformat.v4.new_output("stream", name="stderr",
                               text="/tmp/ipykernel_4242/1234567.py:3: UserWarning: careful\n"),
        nbformat.v4.new_output("execute_result", data={"text/plain": f"Python: at {sys.prefix}/bin/python"}),
    ]
    nb.cells.append(cell)
    normalise(nb, root=root)
    error, stream, result = nb.cells[0].outputs
    assert "hooktutor/capture.py:12" in error.traceback[0] and str(root) not in error.traceback[0]
    assert "<site-packages>/torch/nn/modules/module.py:1775" in error.traceback[1]
    assert stream.text == "<ipython-cell>:3: UserWarning: careful\n"
    assert result.data["text/plain"] == "Python: at <env>/bin/python"
    assert not [p for out in nb.cells[0].outputs for t in output_texts(out) for p in absolute_paths(t)]


def test_the_sanitize_file_reads_stored_and_fresh_paths_alike():
    """nbval compares a fresh output (absolute paths) with the stored one (relative): both must
    sanitize to the same text."""
    text = (ROOT / "tests" / "sanitize.cfg").read_text()
    rules = [(re.compile(r), s) for r, s in re.findall(r"^regex: (.*)$\n^replace: (.*)$", text, flags=re.M)]

    def clean(line):
        for pattern, replacement in rules:
            line = pattern.sub(replacement, line)
        return line

    pairs = [
        ("/home/ada/c/.venv/lib/python3.11/site-packages/torch/nn/modules/module.py:1775: UserWarning",
         "<site-packages>/torch/nn/modules/module.py:1775: UserWarning"),
        ("/tmp/ipykernel_4242/1234567.py:3: UserWarning", "<ipython-cell>:3: UserWarning"),
        ("/home/ada/c/hooktutor/capture.py:12: UserWarning", "hooktutor/capture.py:12: UserWarning"),
    ]
    for fresh, stored in pairs:
        assert clean(fresh) == clean(stored), (fresh, stored)
