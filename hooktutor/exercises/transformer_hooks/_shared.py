"""Helpers shared by several exercises of 10_transformer_hooks.ipynb."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from ...models import TinyTransformer


def _tiny(seed: int) -> TinyTransformer:
    return TinyTransformer(seed=seed).eval()


def _outputs(model: nn.Module, tokens: torch.Tensor, names: list[str]) -> tuple[torch.Tensor, dict]:
    """The check's own run: the logits and a copy of each named module's output."""
    kept: dict[str, torch.Tensor] = {}
    handles = [model.get_submodule(n).register_forward_hook(
        lambda m, a, o, n=n: kept.__setitem__(n, o.detach().clone())) for n in names]
    try:
        logits = model(tokens).detach()
    finally:
        for h in handles:
            h.remove()
    return logits, kept


def _with_hook(model: nn.Module, tokens: torch.Tensor, module: nn.Module, hook: Callable) -> torch.Tensor:
    with module.register_forward_hook(hook):
        return model(tokens).detach()


def _hook_run(model, tokens, module, hook):
    handle = module.register_forward_hook(hook)
    try:
        return model(tokens)
    finally:
        handle.remove()


