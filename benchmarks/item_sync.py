#!/usr/bin/env python3
"""On a GPU: ``.item()`` in every layer's forward hook against tensors converted once per step.

    python benchmarks/item_sync.py            # needs a CUDA device; elsewhere it says so, exit 0
    python benchmarks/item_sync.py --quick    # fewer rounds

Lesson 04 (*`.item()` and `.cpu()` in a hook: a sync point on a GPU*) says that on a GPU torch
queues each operation and Python moves on, that ``.item()`` makes Python wait until the queue is
done, so a hook calling it on every layer adds one wait per layer and per step, and that keeping
the tensors and converting them once after the step waits once. The lesson runs on a CPU and
cannot show it; this script checks it on a CUDA device, in two parts:

- **counted** (the check): under ``torch.cuda.set_sync_debug_mode("warn")`` torch warns at every
  call that makes the host wait for the GPU. One step with ``.item()`` in the hook of each of the
  ``N`` Linear layers must warn ``N`` times, the step that keeps tensors and converts them with
  one ``torch.stack(...).tolist()`` once. The script exits with status 1 when a count differs.
- **timed** (an illustration, never a check): both steps and a step without hooks take turns,
  round-robin, on the wall clock (the GPU's idle time is the point); each ratio is the median
  over rounds of two samples taken back to back (``_common.paired_ratio``). Ratios depend on the
  GPU, the CPU and the layer sizes: compare them within one run only.
"""

from __future__ import annotations

import argparse
import sys
import warnings

import torch
from torch import nn

try:
    from ._common import interleaved, paired_ratio
except ImportError:  # run as a script from benchmarks/
    from _common import interleaved, paired_ratio


def make_model(depth: int, width: int, device: str) -> nn.Sequential:
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers).to(device)


def steps(model: nn.Sequential, x: torch.Tensor) -> dict[str, object]:
    """``name -> step()``; each step attaches its hooks, runs ``model(x)``, removes them and
    returns the host values it produced (a list of floats, or None)."""
    linears = [m for m in model if isinstance(m, nn.Linear)]

    def run(hook, finish):
        kept: list = []
        handles = [m.register_forward_hook(lambda m, args, out: kept.append(hook(out)))
                   for m in linears] if hook else []
        try:
            with torch.no_grad():
                model(x)
        finally:
            for handle in handles:
                handle.remove()
        return finish(kept)

    return {
        "no hooks": lambda: run(None, lambda kept: None),
        ".item() in every hook": lambda: run(lambda out: out.norm().item(), lambda kept: kept),
        "tensors, one .tolist() after the step": lambda: run(
            lambda out: out.norm(), lambda kept: torch.stack(kept).tolist()),
    }


def count_syncs(step) -> int:
    """How many synchronizing CUDA calls one ``step()`` makes (torch's sync debug mode)."""
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    # (the first call also warns that the debug mode is a prototype: not a sync, not counted)
    return sum("called a synchronizing CUDA operation" in str(w.message) for w in caught)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--depth", type=int, default=24, help="number of Linear layers")
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=256)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("item_sync: no CUDA device here; the sync count and the timing need a GPU (skipped)")
        return 0
    model = make_model(args.depth, args.width, "cuda")
    x = torch.randn(args.batch, args.width, device="cuda")
    configs = steps(model, x)
    print(f"item_sync on {torch.cuda.get_device_name()}, torch {torch.__version__}: "
          f"{args.depth} Linear({args.width}, {args.width}) + ReLU, batch {args.batch}, no_grad")

    # the check: counted, the same on every GPU
    want = {".item() in every hook": args.depth, "tensors, one .tolist() after the step": 1}
    ok = True
    for name, expected in want.items():
        got = count_syncs(configs[name])
        ok &= got == expected
        print(f"  synchronizing calls per step, {name:38s} {got:3d} (expected {expected})")

    # the illustration: timed, ratios within this run
    rounds = 15 if args.quick else 101
    samples = interleaved({n: (lambda f=f: (f(), torch.cuda.synchronize())) for n, f in configs.items()},
                          rounds=rounds, inner=5, clock="wall")
    base = samples["no hooks"]
    print(f"  wall time per step, median of {rounds} interleaved rounds; ratio to 'no hooks', paired:")
    for name, values in samples.items():
        med = sorted(values)[len(values) // 2]
        print(f"    {name:40s} {med * 1e6:9.0f} µs  {paired_ratio(values, base):6.2f}x")
    item, once = samples[".item() in every hook"], samples["tensors, one .tolist() after the step"]
    print(f"  .item() in every hook / one conversion after the step: {paired_ratio(item, once):.2f}x")
    print("item_sync: sync counts as the lesson says" if ok else
          "item_sync: a sync count differs from what lesson 04 says (see above)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
