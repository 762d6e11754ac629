"""What ``import hooktutor`` adds to ``import torch``, measured as whole processes.

Two commands run in turns, ``python -c "import torch"`` and ``python -c "import torch,
hooktutor"``; the cost is the median over rounds of the difference between the two
processes of a round, in wall time and in CPU time (the CPU time is not inflated when other
programs compete for the cores). As a cross-check, a third process imports torch and then
times ``import hooktutor`` from inside. It also reports which heavy libraries ``import
hooktutor`` loaded: matplotlib and ipywidgets should load only when a plot or widget is used.
"""

from __future__ import annotations

import json
import statistics
import sys

try:
    from ._common import ROOT, run_timed
except ImportError:  # run as a script from benchmarks/
    from _common import ROOT, run_timed

HEAVY = ("matplotlib", "ipywidgets", "IPython", "pandas", "scipy", "nbformat")

_INSIDE = f"""
import json, sys, time
import torch
before = set(sys.modules)
t0 = time.perf_counter()
import hooktutor
dt = time.perf_counter() - t0
print(json.dumps({{"seconds": dt, "heavy": [m for m in {HEAVY!r} if m in sys.modules and m not in before]}}))
"""


def _run(cmd: list[str]) -> tuple[float, float | None, str]:
    wall, cpu, proc = run_timed(cmd, cwd=ROOT)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[1:])!r} failed:\n{proc.stderr[-2000:]}")
    return wall, cpu, proc.stdout


def measure(*, rounds: int = 15, python: str = sys.executable) -> dict:
    """Medians in ms: ``torch_ms``, ``both_ms``, ``added_ms`` (wall), ``added_cpu_ms``,
    ``inside_ms``; ``heavy``: heavy modules that ``import hooktutor`` loaded."""
    torch_only = [python, "-c", "import torch"]
    both = [python, "-c", "import torch, hooktutor"]
    inside = [python, "-c", _INSIDE]
    for cmd in (torch_only, both):  # warm the file cache once
        _run(cmd)
    wall: dict[str, list[float]] = {"torch": [], "both": []}
    cpu: dict[str, list[float | None]] = {"torch": [], "both": []}
    t_inside: list[float] = []
    heavy: list[str] = []
    for r in range(rounds):
        order = [("torch", torch_only), ("both", both)]
        for key, cmd in (order if r % 2 == 0 else order[::-1]):
            w, c, _ = _run(cmd)
            wall[key].append(w)
            cpu[key].append(c)
        _, _, out = _run(inside)
        report = json.loads(out.strip().splitlines()[-1])
        t_inside.append(report["seconds"])
        heavy = report["heavy"]
    have_cpu = all(c is not None for c in cpu["torch"] + cpu["both"])
    return {
        "rounds": rounds,
        "torch_ms": statistics.median(wall["torch"]) * 1e3,
        "both_ms": statistics.median(wall["both"]) * 1e3,
        "added_ms": statistics.median(b - a for a, b in zip(wall["torch"], wall["both"])) * 1e3,
        "added_cpu_ms": (statistics.median(b - a for a, b in zip(cpu["torch"], cpu["both"])) * 1e3
                         if have_cpu else None),
        "inside_ms": statistics.median(t_inside) * 1e3,
        "heavy": heavy,
    }


if __name__ == "__main__":
    print(json.dumps(measure(rounds=int(sys.argv[1]) if len(sys.argv) > 1 else 5), indent=1))
