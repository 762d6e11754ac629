"""The two Run Alls of every lesson under nbval (hooktutor/course/nbval_twice.py), and its edition's
third, catch what they promise to: a cell that leaves a hook attached, a cell that prints otherwise when run a second
time, a cell that depends on a learner's answer, a check cell that does not say "not written yet"
while its exercise is blank; and they let pass a hook left on purpose (``hooks-left``). Run on
notebooks written for the test, by pytest in a process of its own with the course's conftest."""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from hooktutor.course.cpu_profiles import nbval_profile

pytestmark = pytest.mark.course_env

ROOT = Path(__file__).resolve().parent.parent


def code(source: str, *, out: str | None = "", tags: tuple[str, ...] = ()):
    cell = nbformat.v4.new_code_cell(source, execution_count=1)
    cell.metadata["tags"] = list(tags)
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=out)] if out else []
    return cell


def outcomes(*notebooks: Path) -> dict[str, str]:
    """``{"zz.ipynb::blank Cell 1": "PASSED", ...}`` from one pytest run over ``notebooks``."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "conftest", "-rA", "-q",
         f"--rootdir={notebooks[0].parent.parent}", "-c", str(ROOT / "pyproject.toml"),
         *map(str, notebooks)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    found = {}
    for line in done.stdout.splitlines():
        m = re.match(r"(PASSED|FAILED) (\S+\.ipynb::(?:blank |zh_CN )?Cell \d+)", line)
        if m:
            found[m.group(2).split("/")[-1]] = m.group(1)
    assert found, done.stdout[-3000:] + done.stderr[-3000:]
    return found


def test_a_hook_left_a_second_run_an_answer_depended_on_and_a_silent_check_each_fail(tmp_path):
    plain = tmp_path / "plain" / "zz_probe.ipynb"
    plain.parent.mkdir()
    nbformat.write(nbformat.v4.new_notebook(cells=[
        code('import os\nprint(os.environ.get("ATEN_CPU_CAPABILITY"))', out=f"{nbval_profile() or None}\n"),
        code("import torch\nlayer = torch.nn.Linear(2, 2)\nhandle = layer.register_forward_hook(lambda m, a, o: None)"),
        code("again = layer.register_forward_hook(lambda m, a, o: None)", tags=("hooks-left",)),
        code("layer._forward_hooks.clear()"),
        code('counter = globals().get("counter", 0) + 1\nprint(counter)', out="1\n"),
    ]), plain)
    lesson = tmp_path / "lesson" / "00_start_here.ipynb"
    lesson.parent.mkdir()
    nb = nbformat.read(ROOT / "notebooks" / "00_start_here.ipynb", as_version=4)
    code_cells = [c for c in nb.cells if c.cell_type == "code"]
    check = next(c for c in code_cells if "check" in c.metadata.get("tags", []))
    # a check that passes whatever the learner wrote: it says "correct" in the blank run too
    check.source = "from hooktutor.exercises import start_here as ex\n\nex.registered_twice.check(lambda: 2)"
    depends = copy.deepcopy(code("print(predict_calls())", out="2\n"))
    nb.cells.insert(nb.cells.index(check) + 1, depends)
    nbformat.write(nb, lesson)
    n_check = [c for c in nb.cells if c.cell_type == "code"].index(check)

    got = outcomes(plain, lesson)
    want = {f"zz_probe.ipynb::{run}Cell {i}": verdict for run in ("blank ", "")
            for i, verdict in enumerate(["PASSED", "FAILED", "PASSED", "PASSED", "PASSED"])}
    want["zz_probe.ipynb::Cell 4"] = "FAILED"   # the second Run All prints 2
    assert {k: v for k, v in got.items() if k.startswith("zz_probe")} == want
    for run, verdicts in (("blank ", ("FAILED", "FAILED")), ("", ("PASSED", "PASSED"))):
        assert (got[f"00_start_here.ipynb::{run}Cell {n_check}"],
                got[f"00_start_here.ipynb::{run}Cell {n_check + 1}"]) == verdicts, run
    others = {k: v for k, v in got.items() if k.startswith("00_start_here")
              and not k.endswith((f"Cell {n_check}", f"Cell {n_check + 1}"))}
    assert set(others.values()) == {"PASSED"}, others


def test_an_edition_runs_third_in_its_sources_kernel_against_its_own_stored_outputs(tmp_path):
    """The edition's cells run after the source's two Run Alls, in that kernel (a counter kept in
    the kernel reads 3), each held to the edition's stored outputs (a changed one fails)."""
    source = tmp_path / "notebooks" / "zz_source.ipynb"
    source.parent.mkdir()
    counter = 'counter = globals().get("counter", 0) + 1\nprint(counter > 0)'
    nbformat.write(nbformat.v4.new_notebook(cells=[code(counter, out="True\n"), code("print('hi')", out="hi\n")]),
                   source)
    edition = tmp_path / "notebooks" / "zh_CN" / "zz_source.ipynb"
    edition.parent.mkdir()
    nb = nbformat.v4.new_notebook(cells=[code(counter, out="True\n"), code("print('hi')", out="hello\n"),
                                         code("print(counter)", out="3\n")])
    nb.metadata["hooktutor"] = {"edition": {"language": "zh_CN", "source": "notebooks/zz_source.ipynb"}}
    nbformat.write(nb, edition)

    got = outcomes(source, edition)
    assert {k: v for k, v in got.items() if "zh_CN" in k} == {
        "zz_source.ipynb::zh_CN Cell 0": "PASSED",
        "zz_source.ipynb::zh_CN Cell 1": "FAILED",   # "hello" stored, "hi" printed
        "zz_source.ipynb::zh_CN Cell 2": "PASSED",   # the third Run All in the source's kernel
    }, got
