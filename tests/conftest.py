"""Shared fixtures. Torch uses one thread so the library tests behave the same on every
machine. (Matplotlib picks its off-screen backend in hooktutor.plots; no MPLBACKEND here,
because the notebook kernels nbval starts would inherit it and stop showing figures.)"""

from __future__ import annotations

import pytest
import torch

torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _no_global_hook_leaks():
    """Every library test must leave the global module hooks as it found them."""
    from hooktutor.inventory import global_hook_ids, remove_global_hooks

    before = global_hook_ids()
    yield
    leaked = global_hook_ids() - before
    if leaked:
        remove_global_hooks(only=leaked)
        pytest.fail(f"the test left {len(leaked)} global module hook(s) registered")


def run_in_a_process_of_its_own(code: str, timeout: float = 300) -> str:
    """Run ``code`` in a new Python at the repository's root; fail with its stderr if it fails;
    return its stdout. For tests that call ``torch.compile``: on torch 2.1 the first compile
    wraps every optimizer's ``step`` so that its step hooks never fire again in that process,
    which would fail the optimizer-hook tests that run after it."""
    import subprocess
    import sys
    from pathlib import Path

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                          cwd=Path(__file__).resolve().parent.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.fixture
def in_a_process_of_its_own():
    """``run_in_a_process_of_its_own``, for a test that compiles."""
    return run_in_a_process_of_its_own


def pytest_collection_modifyitems(config, items):
    """A lesson that names a torch floor of its own (its notebook's metadata ``needs_torch``,
    where a library it teaches needs a newer torch than the course) is not admitted below it:
    there its exercises' tests are skipped, saying why, as compat reports the lesson."""
    from pathlib import Path

    from hooktutor.course.other_torches import not_admitted
    from hooktutor.exercises import LESSON_MODULES

    notebooks = Path(__file__).resolve().parent.parent / "notebooks"
    skips = {}
    for stem, package in LESSON_MODULES.items():
        if not (notebooks / f"{stem}.ipynb").exists():   # a lesson whose exercises come before its notebook
            continue
        why = not_admitted(notebooks / f"{stem}.ipynb", torch.__version__)
        if why:
            skips[f"[{package}."] = pytest.mark.skip(reason=f"{stem} {why}")
    for item in items:
        for marker, skip in skips.items():
            if marker in item.nodeid:
                item.add_marker(skip)
