"""Shared by the benchmark modules: interleaved timing, medians and the machine description.

Every comparison in ``benchmarks/`` is a ratio taken inside one run: the configurations
being compared are timed round-robin (round 1: A B C, round 2: B C A, ...), so a burst of
load from another program hits all of them alike, and a ratio is the median over rounds of
the ratio of the two samples taken in the same round.
"""

from __future__ import annotations

import gc
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def median(values: list[float]) -> float:
    return statistics.median(values)


def paired_ratio(a: list[float], b: list[float]) -> float:
    """Median over rounds of ``a[i] / b[i]``: the two samples of a round ran back to back."""
    return statistics.median(x / y for x, y in zip(a, b))


CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}


def interleaved(configs: dict[str, Callable[[], object]], *, rounds: int, inner: int,
                warmup: int = 3, clock: str = "cpu") -> dict[str, list[float]]:
    """Seconds per call of every configuration, one sample per round, configs round-robin.

    Each sample times ``inner`` calls in a row and divides; the order of the configurations
    rotates from round to round so none always runs right after the same neighbour.
    ``clock="cpu"`` counts the CPU time of this process (user + system), which other
    programs on a busy machine do not inflate; ``clock="wall"`` counts elapsed time.
    """
    names = list(configs)
    for name in names:
        for _ in range(warmup):
            configs[name]()
    samples: dict[str, list[float]] = {n: [] for n in names}
    clock = CLOCKS[clock]
    for r in range(rounds):
        gc.collect()
        k = r % len(names)
        for name in names[k:] + names[:k]:
            fn = configs[name]
            t0 = clock()
            for _ in range(inner):
                fn()
            samples[name].append((clock() - t0) / inner)
    return samples


def calibrate(fn: Callable[[], object], target_s: float) -> int:
    """How many calls of ``fn`` take about ``target_s`` seconds (at least one)."""
    fn()
    n, elapsed = 1, 0.0
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        elapsed = time.perf_counter() - t0
        if elapsed >= target_s / 4 or n >= 1 << 16:
            break
        n *= 2
    return max(1, round(n * target_s / max(elapsed, 1e-9)))


def children_cpu() -> float | None:
    """CPU seconds (user + system) used so far by finished child processes, if known."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_timed(cmd: list[str], *, cwd: Path = ROOT, timeout: float = 600, env: dict | None = None
              ) -> tuple[float, float | None, subprocess.CompletedProcess]:
    """Wall time and CPU time of a whole process (with its children), and the process."""
    cpu0 = children_cpu()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})
    wall = time.perf_counter() - t0
    cpu1 = children_cpu()
    return wall, (None if cpu0 is None or cpu1 is None else cpu1 - cpu0), proc


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def load_average() -> str:
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except (OSError, AttributeError):
        return "n/a"


def machine() -> dict[str, str]:
    """What the numbers were taken on: CPU, cores, OS, Python, torch, date, load."""
    import torch

    return {
        "cpu": cpu_model(),
        "cores": str(os.cpu_count()),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "threads": str(torch.get_num_threads()),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "load": load_average(),
    }
