"""A learner's two Run Alls of every lesson in one kernel: first the workbook as it comes (every
exercise blank), then the lesson solved (the notebook as stored). No cell leaves a hook behind.

The first Run All reaches the end: only the cells that show an error on purpose raise, each
check says "not written yet", and every cell that is not an exercise prints its stored output,
since no cell depends on a learner's answer. The second Run All runs every cell again in the
same kernel, and each must print its stored output: this is the "run it again while
debugging" promise (no hook accumulates, no state leaks from one run into the next), and the
solutions pass their checks.

The kernel computes as an AVX2 laptop would (``cpu_profiles.RERUN_PROFILE``): with nbval (this
CPU) and the browser's Run All (``default``), every stored output is checked as three CPUs
compute it. Outputs are compared the way nbval compares them (text only, after the sanitize
file); cells tagged nbval-ignore-output are skipped.

After every cell of both runs a probe lists the hooks left on every model, layer, tensor and
optimizer the notebook's namespace holds, and the global hooks: there must be none (hooks that
PyTorch or a library such as transformers installed for a model are the model's own and do not
count). This is the course-wide form of the "no hook left" asserts a lesson would otherwise
repeat after each ``with`` block; a cell whose point is a hook left attached is tagged
``hooks-left``.
"""


from __future__ import annotations

import copy
import warnings
from pathlib import Path

import nbformat
import pytest
from _notebook_outputs import comparable, sanitizers
from nbclient import NotebookClient

from hooktutor.course import student
from hooktutor.course.cpu_profiles import RERUN_PROFILE, profile_environment
from hooktutor.course.other_torches import outputs_not_comparable

pytestmark = pytest.mark.course_env

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


HOOKS_LEFT_TAG = "hooks-left"
PROBE = """\
def _hooktutor_probe():
    import json, torch
    from hooktutor.inventory import global_hook_ids, hook_ids, list_hooks

    def hooks_on_tensor(t):   # a leaf's hooks fire again; an intermediate's graph is spent
        return len(hook_ids(t, "tensor")) + len(hook_ids(t, "post_accumulate")) if t.is_leaf else 0
    import sys
    widgets = sys.modules.get("hooktutor.widgets._base")
    live_ids = {getattr(h, "id", None) for w in (widgets._LIVE.values() if widgets else ())
                for _k, _w, h, _f in w.hooks._hooks.values()}
    seen, left = set(), []
    for name, value in list(globals().items()):
        if name.startswith("_"):
            continue
        items = (list(value.values()) if isinstance(value, dict)
                 else value if isinstance(value, (list, tuple)) else [value])
        for item in items:
            if id(item) in seen:
                continue
            seen.add(id(item))
            if isinstance(item, (torch.nn.Module, torch.optim.Optimizer)):
                left += [f"{name}: a {r.kind} hook on {r.path} ({r.function})"
                         for r in list_hooks(item, include_global=False)
                         if r.owner == "user" and r.handle_id not in live_ids]   # a live widget's are shown
            elif isinstance(item, torch.Tensor) and hooks_on_tensor(item):
                left.append(f"{name}: {hooks_on_tensor(item)} tensor hook(s)")
    if global_hook_ids():
        left.append(f"{len(global_hook_ids())} global hook(s)")
    print(json.dumps(left))
_hooktutor_probe()
"""


def hooks_left(client: NotebookClient) -> list[str]:
    """What the probe finds in the kernel right now."""
    import json

    probe = nbformat.v4.new_code_cell(PROBE)
    client.execute_cell(probe, 0, store_history=False)
    text = "".join(o.get("text", "") for o in probe.outputs if o.output_type == "stream")
    return json.loads(text.strip().splitlines()[-1]) if text.strip() else ["the probe printed nothing"]


def run_cells(client: NotebookClient, cells: list, leftovers: list | None = None) -> list:
    done = []
    for index, cell in enumerate(cells):
        cell = copy.deepcopy(cell)
        if cell.cell_type == "code":
            client.execute_cell(cell, index)
            if leftovers is not None and HOOKS_LEFT_TAG not in cell.metadata.get("tags", []):
                left = hooks_left(client)
                if left:
                    leftovers.append((index, cell.source[:120], left))
        done.append(cell)
    return done


@pytest.fixture(scope="module")
def workbook(tmp_path_factory) -> Path:
    """The learner's edition of every lesson (exercises blank), as `course.py lab` writes it."""
    out = tmp_path_factory.mktemp("workbook")
    for path in NOTEBOOKS:
        edition, _ = student.convert(nbformat.read(path, as_version=4), path.stem, keep_solutions=False)
        nbformat.write(edition, out / path.name)
    return out


class Clients:
    """The client of each lesson's workbook, its kernel started one lesson ahead: while one
    lesson runs, the next lesson's kernel boots (started as ``setup_kernel`` would start it,
    under ``RERUN_PROFILE``); ``setup_kernel`` then finds it running. Kernels a test did not
    take are shut down with the module."""

    def __init__(self, workbook: Path):
        self.workbook, self.started = workbook, {}

    def start(self, path: Path) -> None:
        if path in self.started:
            return
        blank = nbformat.read(self.workbook / path.name, as_version=4)
        client = NotebookClient(blank, timeout=120, kernel_name="python3", allow_errors=True,
                                shutdown_kernel="immediate", resources={"metadata": {"path": str(self.workbook)}})
        client.km = client.create_kernel_manager()
        with profile_environment(RERUN_PROFILE):
            client.start_new_kernel()
        self.started[path] = client

    def take(self, path: Path) -> NotebookClient:
        self.start(path)
        return self.started.pop(path)

    def shutdown(self) -> None:
        for client in self.started.values():
            client._cleanup_kernel()


@pytest.fixture(scope="module")
def clients(workbook):
    ahead = Clients(workbook)
    yield ahead
    ahead.shutdown()


def lesson_after(request) -> Path | None:
    """The lesson of the next test of this module that this session runs, if any."""
    items = request.session.items
    for item in items[items.index(request.node) + 1:]:
        callspec = getattr(item, "callspec", None)
        if callspec and item.module.__name__ == __name__ and "path" in callspec.params:
            return callspec.params["path"]
    return None


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_run_all_blank_then_solved_in_one_kernel_prints_the_stored_outputs(path, clients, request):
    stored = nbformat.read(path, as_version=4).cells
    client = clients.take(path)
    blank = client.nb
    if (following := lesson_after(request)) is not None:
        clients.start(following)
    subs = sanitizers()
    leftovers: list = []
    with profile_environment(RERUN_PROFILE), client.setup_kernel():
        first = run_cells(client, blank.cells, leftovers)
        second = run_cells(client, stored, leftovers)
    assert not leftovers, (f"{path.name}: cells that leave hooks attached (index, source, hooks): "
                           f"{leftovers[:5]}; remove them in the cell (with / finally), or tag the cell "
                           f"'{HOOKS_LEFT_TAG}' if a hook left attached is its point")
    stopped = [(i, o.ename, o.evalue) for i, c in enumerate(first) if c.cell_type == "code"
               and "raises-exception" not in c.metadata.get("tags", [])
               for o in c.outputs if o.output_type == "error"]
    assert not stopped, f"{path.name}: cells that stop Run All while the exercises are blank: {stopped}"
    why = outputs_not_comparable(path)   # lesson 12 on Python 3.10 (conftest.py does the same for nbval)
    if why:
        warnings.warn(pytest.PytestWarning(f"{path.name}: outputs not compared here: {why}"), stacklevel=1)
        return
    where = f"on a CPU computing as {RERUN_PROFILE} does (see hooktutor/course/cpu_profiles.py)"
    for index, (source, a, b) in enumerate(zip(stored, first, second, strict=True)):
        if source.cell_type != "code" or "nbval-ignore-output" in source.metadata.get("tags", []):
            continue
        if a.metadata.get("nbgrader", {}).get("grade"):
            shown = "".join(o.get("data", {}).get("text/plain", "") for o in a.outputs)
            assert "is not written yet" in shown, f"{path.name}, code cell {index}:\n{a.source[:300]}"
        elif not a.metadata.get("nbgrader"):
            assert comparable(a.outputs, subs) == comparable(source.outputs, subs), (
                f"{path.name}, code cell at index {index}, exercises blank, printed other than its "
                f"stored output {where} (a cell that depends on an answer, or a number that differs "
                f"on that CPU):\n{a.source[:300]}")
        assert comparable(b.outputs, subs) == comparable(source.outputs, subs), (
            f"{path.name}, code cell at index {index}, run again with the solutions, printed other "
            f"than its stored output {where}:\n{b.source[:300]}")
