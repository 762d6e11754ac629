"""A part of the suite stays green with a CPU-bound process on every core beside it.

A learner's laptop compiles, indexes and plays video while the lessons run, and CI shares its cores
with other jobs: no test may assert on wall time (how fast things are is benchmarks/'s business:
check_times.py, widget_latency.py, notebook_times.py). This test keeps that true where it is most
tempting: a lesson under strict nbval (its exercise checks, which stop a learner's code after a
time limit, included) and the widget tests whose clicks were once timed, each run in a fresh pytest
that shares its core with a busy-looping process (``_busy.busy_core``: the pytest, its kernel and
the busy process pinned to one core; the suite's other worker keeps the other). It is kept cheap:
one short lesson and two widget tests.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from _busy import busy_core

ROOT = Path(__file__).resolve().parent.parent
PART = ["notebooks/00_start_here.ipynb",
        "tests/test_widget_saved.py::test_every_click_redraws_and_the_model_passed_in_is_never_changed",
        "tests/test_widget_patching.py::test_the_controls_redraw_and_every_pick_redraws"]


@pytest.mark.course_env  # strict nbval compares the stored outputs: the pinned environment's
def test_a_lesson_and_the_widget_tests_pass_beside_a_busy_process_on_their_core():
    with busy_core() as busy:
        assert busy >= 1
        run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-q", *PART], cwd=ROOT,
                             capture_output=True, text=True, timeout=900)  # only a hang gets near it
    assert run.returncode == 0, f"under load:\n{run.stdout[-4000:]}\n{run.stderr[-2000:]}"
    assert " passed" in run.stdout and "failed" not in run.stdout
