"""Helpers shared by several exercises of 10_transformer_hooks.ipynb."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from ...models import TinyTransformer, seeded


def _tiny(seed: int) -> TinyTransformer:
    return TinyTransformer(seed=seed).eval()


def _outputs(model: nn.Module, tokens: torch.Tensor, names: list[str]) -> tuple[torch.Tensor, dict]:
    """The check's own run: the logits and a copy of each named module's output (of a tuple, its
    first element), for the modules that ran."""
    kept: dict[str, torch.Tensor] = {}

    def keep(name: str) -> Callable:
        def hook(module, args, output):
            kept[name] = (output[0] if isinstance(output, tuple) else output).detach().clone()
        return hook

    handles = [model.get_submodule(n).register_forward_hook(keep(n)) for n in names]
    try:
        logits = model(tokens).detach()
    finally:
        for h in handles:
            h.remove()
    return logits, kept


def _with_hook(model: nn.Module, tokens: torch.Tensor, module: nn.Module, hook: Callable) -> torch.Tensor:
    with module.register_forward_hook(hook):
        return model(tokens).detach()


def _hook_run(model, tokens, module, hook, *, pre: bool = False):
    """model(tokens) with ``hook`` on ``module`` (a forward pre-hook when ``pre``), removed after."""
    handle = module.register_forward_pre_hook(hook) if pre else module.register_forward_hook(hook)
    try:
        return model(tokens)
    finally:
        handle.remove()


class _DropoutSkip(nn.Module):
    """Dimension ``alias``: ``head(body(drop(fc(x))) + fc(x))`` in eval mode. A Dropout in eval mode
    hands back its input itself, so ``drop``'s output IS ``fc``'s, which the skip connection uses
    again after ``drop`` ran: a hook that edits ``drop``'s output in place changes the skip branch
    too; one that returns a new tensor does not. Input ``(N, L, 4)``, outputs ``(N, L, 4)`` and
    ``(N, L, 2)``."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        with seeded(seed):
            self.fc = nn.Linear(4, 4)
            self.drop = nn.Dropout(0.1)
            self.body = nn.Linear(4, 4)
            self.head = nn.Linear(4, 2)
        self.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        return self.head(torch.tanh(self.body(self.drop(h))) + h)
