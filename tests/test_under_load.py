"""A part of the suite stays green with a CPU-bound process on every core beside it.

A learner's laptop compiles, indexes and plays video while the lessons run, and CI shares its cores
with other jobs: no test may assert on wall time (how fast things are is benchmarks/'s business:
check_times.py, widget_latency.py, notebook_times.py). This test keeps that true where it is most
tempting: a lesson under strict nbval (its exercise checks, which stop a learner's code after a
time limit, included) and the widget tests whose clicks were once timed, each run in a fresh pytest
while one busy-looping process per core competes for the CPU. It is kept cheap: one short lesson
and two widget tests (about 15 s on 2 idle cores).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PART = ["notebooks/00_start_here.ipynb",
        "tests/test_widget_saved.py::test_every_click_redraws_and_the_model_passed_in_is_never_changed",
        "tests/test_widget_patching.py::test_the_controls_redraw_and_every_pick_redraws"]
BUSY = "while True: pass"


@pytest.mark.course_env  # strict nbval compares the stored outputs: the pinned environment's
def test_a_lesson_and_the_widget_tests_pass_beside_a_busy_process_on_every_core():
    busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(os.cpu_count() or 1)]
    try:
        run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-q", *PART], cwd=ROOT,
                             capture_output=True, text=True, timeout=900)  # only a hang gets near it
    finally:
        for process in busy:
            process.kill()
            process.wait()
    assert all(p.returncode is not None for p in busy)
    assert run.returncode == 0, f"under load:\n{run.stdout[-4000:]}\n{run.stderr[-2000:]}"
    assert " passed" in run.stdout and "failed" not in run.stdout
