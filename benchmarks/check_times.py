#!/usr/bin/env python3
"""Check times: how long each exercise check takes on its solution, and lesson 10's training.

    python benchmarks/check_times.py            # 3 rounds
    python benchmarks/check_times.py --quick    # 1 round, a rough number while you work

The tests never assert on wall time (a machine shared with other work would fail right answers):
these figures are where speed is watched instead. Each check runs its visible and hidden cases on
the exercise's solution (``ex.check(ex.reference, hidden=True)``), and lesson 10's
``train_first_token`` trains the ``TinyTransformer`` for the lesson's 40 steps. Right before each
sample, a **unit** is timed: one SGD step (forward, backward, update) of the course's ``SmallCNN``
on a batch of 16 ``shapes`` images, repeated for about 20 ms. A figure is printed in milliseconds
and as a ratio to that unit, the median over rounds of the ratio of the two samples taken back to
back: the milliseconds depend on the machine and its load, the ratio much less. Wall clock (a check
that starts processes spends its time in them), one torch thread as the checks use.

Goals, the budgets the tests used to assert: each check under 1 s, one that starts processes or
compiles (``check_budget_s`` on the exercise) under its budget; the training in about a second
(under 3 s). ``measure(rounds, keys)`` returns the numbers as a dict for ``benchmarks/run.py``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository's hooktutor

CHECK_BUDGET_S = 1.0       # an exercise without check_budget_s
TRAINING_BUDGET_S = 3.0    # lesson 10 trains in about a second
TRAINING = "lesson 10: train_first_token (40 steps)"


def unit_step() -> Callable[[], None]:
    """One SGD step of SmallCNN on 16 images: the yardstick every figure is divided by."""
    import torch

    import hooktutor as ht

    model = ht.models.SmallCNN(seed=0)
    x, y = ht.data.shapes(16, seed=1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step() -> None:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    return step


def _unit_seconds(step: Callable[[], None], inner: int) -> float:
    t0 = time.perf_counter()
    for _ in range(inner):
        step()
    return (time.perf_counter() - t0) / inner


def jobs(keys: list[str] | None = None) -> dict[str, tuple[Callable[[], object], float]]:
    """``{label: (run once, budget in seconds)}``: every exercise check (or those in ``keys``) and
    the training."""
    import hooktutor as ht
    from hooktutor.exercises import load_all

    out: dict[str, tuple[Callable[[], object], float]] = {}
    for key, ex in sorted(load_all().items()):
        if keys is not None and key not in keys:
            continue

        def check(ex=ex) -> None:
            report = ex.check(ex.reference, hidden=True)
            if not report.passed:
                raise RuntimeError(f"{ex.key}: the solution failed its check; the benchmark would time a failure")

        out[key] = (check, float(getattr(ex, "check_budget_s", CHECK_BUDGET_S)))
    if keys is None or TRAINING in keys:
        data = ht.data.first_token(256, seed=0)
        out[TRAINING] = (lambda: ht.models.train_first_token(ht.models.TinyTransformer(seed=0), *data, steps=40),
                         TRAINING_BUDGET_S)
    return out


def measure(rounds: int = 3, keys: list[str] | None = None, progress: Callable[[str], None] | None = None) -> dict:
    """``{"unit_ms": ..., "rounds": ..., "jobs": {label: {"ms", "ratio", "budget_s"}}}``; the jobs
    take turns (a different one first in each round) after one warm-up each."""
    import torch

    torch.set_num_threads(1)
    todo = jobs(keys)
    step = unit_step()
    for _ in range(3):
        step()
    inner = max(1, round(0.02 / max(_unit_seconds(step, 3), 1e-6)))
    for label, (fn, _) in todo.items():  # warm-up: imports, first compiles, caches
        if progress:
            progress(f"checks: warm-up {label}")
        fn()
    names = list(todo)
    samples: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
    units: list[float] = []
    for r in range(rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            unit = _unit_seconds(step, inner)
            t0 = time.perf_counter()
            todo[name][0]()
            samples[name].append((time.perf_counter() - t0, unit))
            units.append(unit)
    return {"unit_ms": statistics.median(units) * 1000, "rounds": rounds, "unit_inner": inner,
            "jobs": {n: {"ms": statistics.median(s for s, _ in samples[n]) * 1000,
                         "ratio": statistics.median(s / u for s, u in samples[n]),
                         "budget_s": todo[n][1]} for n in names}}


def over_budget(results: dict) -> list[str]:
    return [n for n, d in results["jobs"].items() if d["ms"] >= d["budget_s"] * 1000]


def table(results: dict) -> str:
    rows = sorted(results["jobs"].items(), key=lambda kv: -kv[1]["ms"] / (kv[1]["budget_s"] * 1000))
    width = max(len(n) for n in results["jobs"])
    lines = [f"Check times (solution, visible and hidden cases; median of {results['rounds']} round(s), "
             f"1 torch thread); unit: one SmallCNN SGD step on 16 images, {results['unit_ms']:.2f} ms here"]
    for name, d in rows:
        lines.append(f"  {name:<{width}}  {d['ms']:8.1f} ms  {d['ratio']:7.0f} units  budget {d['budget_s']:g} s  "
                     f"{'met' if d['ms'] < d['budget_s'] * 1000 else 'NOT MET'}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 round instead of 3")
    parser.add_argument("--only", default="", help="comma-separated exercise keys (and/or the training's label)")
    args = parser.parse_args(argv)
    keys = [k.strip() for k in args.only.split(",") if k.strip()] or None
    print(table(measure(1 if args.quick else 3, keys)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
