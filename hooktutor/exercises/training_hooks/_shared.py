"""Helpers shared by several exercises of 08_training_hooks.ipynb."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

import torch
from torch import nn

from ...data import blobs
from ...inventory import list_hooks
from ...models import MLP, seeded
from .. import kit

# The first optimizer made in a process imports torch._dynamo (about a second); do it at import
# time, so that a check's time is the check's own.
torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)


def _mlp(seed: int) -> nn.Module:
    return MLP(seed=seed)


def _nested(seed: int) -> nn.Module:
    """kit.Nested (layers two levels down) followed by a head: input (N, 4), output (N, 3)."""
    with seeded(seed):
        head = nn.Linear(3, 3)
    return nn.Sequential(OrderedDict(body=kit.Nested(seed=seed), head=head))


def _loss(model: nn.Module, step: int, seed: int) -> torch.Tensor:
    """The loss of training step ``step``: a cross-entropy on seeded data of the model's width."""
    features = 4 if isinstance(model, nn.Sequential) and "body" in model._modules else 8
    x, y = blobs(16, features=features, seed=seed + step)
    return nn.functional.cross_entropy(model(x), y)


def _train(model: nn.Module, optimizer: torch.optim.Optimizer, steps: int, seed: int,
           after_step: Callable[[], None] | None = None) -> None:
    for step in range(steps):
        optimizer.zero_grad()
        _loss(model, step, seed).backward()
        optimizer.step()
        if after_step is not None:
            after_step()


def _user_hooks(optimizer: torch.optim.Optimizer, kind: str) -> int:
    return len(list_hooks(optimizer, include_global=False).where(kind=kind, owner="user"))


def _remove_all(handles: object) -> None:
    """Remove a handle, or every handle in a list/tuple (what an answer returned)."""
    for h in handles if isinstance(handles, (list, tuple)) else [handles]:
        if hasattr(h, "remove"):
            h.remove()


