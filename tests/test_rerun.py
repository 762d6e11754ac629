"""Every notebook gives the same outputs when it is run twice in one kernel, and no cell leaves
a hook behind.

The kernel computes as an AVX2 laptop would (``cpu_profiles.RERUN_PROFILE``), and the first run
is also compared with the outputs stored in the notebook: that is the AVX2 profile's strict
check, so nbval needs no third run of every notebook (it runs them natively and under
``default``).

This is the "re-run a cell while debugging" promise: no hook accumulates, no state leaks
from the first run into the second. Outputs are compared the way nbval compares them (text
only, after the sanitize file); cells tagged nbval-ignore-output are skipped.

After every cell of both runs a probe lists the hooks left on every model, layer, tensor and
optimizer the notebook's namespace holds, and the global hooks: there must be none (hooks that
PyTorch installed for a model, such as pruning's, are the model's own and do not count). This is
the course-wide form of the "no hook left" asserts a lesson would otherwise repeat after each
``with`` block; a cell whose point is a hook left attached is tagged ``hooks-left``.
"""

from __future__ import annotations

import copy
from pathlib import Path

import nbformat
import pytest
from _notebook_outputs import comparable, sanitizers
from nbclient import NotebookClient

from hooktutor.course.cpu_profiles import RERUN_PROFILE, profile_environment

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


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_twice_in_one_kernel_gives_the_same_outputs(path):
    nb = nbformat.read(path, as_version=4)
    stored_cells = copy.deepcopy(nb.cells)   # nbclient writes each executed cell back into nb
    client = NotebookClient(nb, timeout=120, kernel_name="python3", shutdown_kernel="immediate",
                            resources={"metadata": {"path": str(path.parent)}})
    subs = sanitizers()
    leftovers: list = []
    with profile_environment(RERUN_PROFILE), client.setup_kernel():
        first = run_cells(client, nb.cells, leftovers)
        second = run_cells(client, nb.cells, leftovers)
    assert not leftovers, (f"{path.name}: cells that leave hooks attached (index, source, hooks): "
                           f"{leftovers[:5]}; remove them in the cell (with / finally), or tag the cell "
                           f"'{HOOKS_LEFT_TAG}' if a hook left attached is its point")
    for index, (stored, a, b) in enumerate(zip(stored_cells, first, second)):
        if a.cell_type != "code" or "nbval-ignore-output" in a.metadata.get("tags", []):
            continue
        assert comparable(a.outputs, subs) == comparable(stored.outputs, subs), (
            f"{path.name}, code cell at index {index} printed other than its stored output on a "
            f"CPU computing as {RERUN_PROFILE} does (see hooktutor/course/cpu_profiles.py):\n"
            f"{a.source[:300]}")
        assert comparable(b.outputs, subs) == comparable(a.outputs, subs), (
            f"{path.name}, code cell at index {index} gave a different output the second time:\n"
            f"{a.source[:300]}")
