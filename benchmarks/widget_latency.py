#!/usr/bin/env python3
"""Widget latency: the time from a toggle to updated views, on the kernel side.

    python benchmarks/widget_latency.py            # 30 timed toggles per widget after 5 warm-up
    python benchmarks/widget_latency.py --quick    # 8 after 2: a rough number while you work

Each widget of lessons 02-06 is built on ``SmallCNN`` with a batch of 32 ``shapes`` images,
those of lessons 08-10 on the model and data their lesson uses, and toggled the way
a click does it (``toggle.value = ...``, a dropdown's ``value = ...``), alternating on
and off so every toggle really attaches or removes a hook, re-runs the model forward and
backward and redraws the views. One toggle is timed from setting the value until the
observer returned, i.e. until the new PNGs and texts sit in the widgets (wall clock, one torch
thread). Sending them to the browser is not included. Goal: median under 100 ms.

Prints a small table (slowest widget first) and writes nothing. ``benchmarks/run.py`` runs
this file and takes the first ``median ... ms`` of the table; ``measure(quick)`` returns
the numbers as a dict for use from Python.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository's hooktutor

GOAL_MS = 100.0
BATCH = 32


def _p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, -(-9 * len(ordered) // 10) - 1)]  # nearest rank


def _time_toggles(flip: Callable[[bool], object], redrawn: Callable[[], int], *, repeats: int,
                  warmup: int) -> list[float]:
    """Milliseconds per call of ``flip(on)``, alternating on/off; checks each one redrew."""
    on = False
    for _ in range(warmup):
        on = not on
        flip(on)
    samples = []
    for _ in range(repeats):
        on = not on
        before = redrawn()
        t0 = time.perf_counter()
        flip(on)
        samples.append((time.perf_counter() - t0) * 1000)
        if redrawn() <= before:
            raise RuntimeError("a toggle did not redraw its view; the benchmark would time nothing")
    flip(False)
    return samples


def _cases():
    """(label, make) pairs; make() returns (flip, redrawn, close) for one widget on a fresh model."""
    import hooktutor as ht
    from hooktutor.widgets import hook_toggle, inplace_switch

    def data():
        return ht.models.SmallCNN(seed=0), *ht.data.shapes(BATCH, seed=1)

    def toggle(view: str, layer: str):
        def make():
            model, x, y = data()
            t = hook_toggle(model, x, layer, mode="zero", targets=y, view=view, name=f"bench-{view}")
            return (lambda on: setattr(t, "value", on)), (lambda: t._view.renders), t.close
        return make

    def switch():
        model, x, _ = data()
        s = inplace_switch(model, x, "features.1", name="bench-inplace")
        return (lambda on: setattr(s, "value", on)), (lambda: s._view.renders), s.close

    def ema():  # lesson 08: a step post-hook, 30 SGD steps of an MLP per click
        from hooktutor.widgets import ema_toggle

        xs, ys = ht.data.blobs(32, seed=0, spread=2.0)
        t = ema_toggle(ht.models.MLP(seed=0), xs, ys, steps=30, lr=0.5, decay=0.8, name="bench-ema")
        return (lambda on: setattr(t, "value", on)), (lambda: t._view.renders), t.close

    def saved():  # lesson 09: the bfloat16 pack/unpack pair around one step of a 9-layer MLP
        from hooktutor.widgets import saved_tensors_toggle

        xs, ys = ht.data.blobs(32, seed=0)
        t = saved_tensors_toggle(ht.models.deep_mlp(depth=4, width=64, seed=0), xs, ys, name="bench-saved")
        return (lambda on: setattr(t, "value", on)), (lambda: t._view.renders), t.close

    def patch():  # lesson 10: one activation patched into the corrupted run of a small transformer
        from hooktutor.widgets import patch_picker

        clean = ht.data.first_token(64, seed=1)[0]
        picker = patch_picker(ht.models.TinyTransformer(seed=0), clean, ht.data.corrupt_first(clean, seed=1),
                              ["embed", "blocks.0", "blocks.1"], name="bench-patch")

        def flip(on: bool) -> None:
            picker.dropdown.value = "blocks.0" if on else "(no patch)"  # what choosing it on the page does

        return flip, (lambda: picker._view.renders), picker.close

    cases = [("hook_toggle, histogram view (zero features.0)", toggle("histogram", "features.0")),
             ("hook_toggle, gradients view (zero features.4)", toggle("gradients", "features.4")),
             ("inplace_switch (ReLUs in place)", switch),
             ("ema_toggle (lesson 08: EMA step post-hook, 30 steps)", ema),
             ("saved_tensors_toggle (lesson 09: bfloat16 pack hook)", saved),
             ("patch_picker (lesson 10: patch blocks.0 <-> no patch)", patch)]
    try:
        from hooktutor.widgets import HookPanel
    except ImportError:
        return cases

    def panel():
        model, x, y = data()
        p = HookPanel(model, x, y, name="bench-panel")
        dropdown = p.selectors["features.0"]  # the layer its activation view shows

        def flip(on: bool) -> None:
            dropdown.value = "zero" if on else "off"  # what choosing it on the page does

        return flip, (lambda: p._act_view.renders + p._grad_view.renders), p.close

    return [("HookPanel, dropdown (zero features.0 <-> off)", panel), *cases]


def run(quick: bool = False) -> list[tuple[str, float, float]]:
    """[(widget, median ms, p90 ms)], slowest median first."""
    import torch

    torch.set_num_threads(1)
    repeats, warmup = (8, 2) if quick else (30, 5)
    rows = []
    for label, make in _cases():
        flip, redrawn, close = make()
        try:
            samples = _time_toggles(flip, redrawn, repeats=repeats, warmup=warmup)
        finally:
            close()
        rows.append((label, statistics.median(samples), _p90(samples)))
    return sorted(rows, key=lambda r: -r[1])


def _key(label: str) -> str:
    return label.split(" (")[0].replace(", ", "_").replace(" ", "_").lower()


def measure(quick: bool) -> dict[str, float]:
    """``{"<widget>_median_ms": ..., "<widget>_p90_ms": ...}`` for every widget, plus
    ``median_ms`` (the slowest widget's median, the number compared with the goal)."""
    rows = run(quick)
    out = {"median_ms": rows[0][1]}
    for label, med, p90 in rows:
        out[f"{_key(label)}_median_ms"] = med
        out[f"{_key(label)}_p90_ms"] = p90
    return out


def table(rows: list[tuple[str, float, float]], quick: bool) -> str:
    """The printed table. Its first "median ... ms" is the slowest widget's (benchmarks/run.py
    reads that one), so the title and the goal column carry no number in ms after "median"."""
    n = "8 toggles after 2 warm-up, --quick" if quick else "30 toggles after 5 warm-up"
    width = max(len(r[0]) for r in rows)
    lines = [f"Widget latency, toggle to updated views (each widget on its lesson's model, 1 torch thread, {n}; "
             f"goal: {GOAL_MS:.0f} ms for the median)"]
    for label, med, p90 in rows:
        lines.append(f"  {label:<{width}}  median {med:6.1f} ms  p90 {p90:6.1f} ms  "
                     f"goal met: {'yes' if med < GOAL_MS else 'NO'}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="8 toggles per widget instead of 30")
    args = parser.parse_args(argv)
    print(table(run(args.quick), args.quick))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
