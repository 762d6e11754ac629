"""A CPU-bound process beside a test, on the core the test runs on.

``busy_core()`` pins this process to one of its cores and starts one busy-looping process pinned
to the same core, so the code under test (and every process it starts: kernels, pytest, DDP
workers, which inherit the pinning) gets half a core, as on a laptop whose every core is busy.
The suite's other worker keeps the other cores, so the load slows only the test that asks for it.
Where a process cannot be pinned (macOS, Windows), one busy process per core runs instead.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator

BUSY = "while True: pass"


@contextlib.contextmanager
def busy_core() -> Iterator[int]:
    """Yields the number of busy processes started; kills them and restores the pinning after."""
    pin = getattr(os, "sched_setaffinity", None)
    mask = os.sched_getaffinity(0) if pin else None
    if pin and mask:
        core = max(mask)
        pin(0, {core})
        spinners = [subprocess.Popen([sys.executable, "-c", BUSY])]   # inherits the pinning
    else:
        spinners = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(os.cpu_count() or 1)]
    try:
        yield len(spinners)
    finally:
        for process in spinners:
            process.kill()
            process.wait()
        if pin and mask:
            pin(0, mask)
