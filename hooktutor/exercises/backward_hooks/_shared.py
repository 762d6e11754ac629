"""Helpers shared by several exercises of 04_backward_hooks.ipynb."""

from __future__ import annotations

import copy
import warnings
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from ...models import seeded

# The two warnings a learner's (or a typical wrong) answer may trigger; a check reports the
# mistake itself, so they are not printed again (with file paths) below the check cell.
_EXPECTED_WARNINGS = ("Full backward hook is firing", "Using a non-full backward hook")


@contextmanager
def _quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        for text in _EXPECTED_WARNINGS:
            warnings.filterwarnings("ignore", message=text)
        yield


def _sigmoid_stack(depth: int, width: int = 16, *, seed: int) -> nn.Sequential:
    """``fc1 act1 ... fcN actN head``: Linear + Sigmoid layers, where gradients vanish."""
    layers: OrderedDict[str, nn.Module] = OrderedDict()
    with seeded(seed):
        for i in range(1, depth + 1):
            layers[f"fc{i}"] = nn.Linear(8 if i == 1 else width, width)
            layers[f"act{i}"] = nn.Sigmoid()
        layers["head"] = nn.Linear(width, 1)
    return nn.Sequential(layers)


def _linear_output_norms(model: nn.Module, x: torch.Tensor) -> dict[str, float]:
    """Norm of d(model(x).sum())/d(output) of every nn.Linear of any model (nested ones too),
    from retain_grad() on a copy: no hook of the learner's kind is involved."""
    model = copy.deepcopy(model)
    outs: dict[str, torch.Tensor] = {}

    def keep(name: str):
        def hook(module, args, output):
            output.retain_grad()
            outs[name] = output
        return hook

    handles = [m.register_forward_hook(keep(n)) for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    try:
        model(x).sum().backward()
    finally:
        for h in handles:
            h.remove()
    return {name: float(out.grad.norm()) for name, out in outs.items()}


