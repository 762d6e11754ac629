"""What the exercises of ``08_training_hooks.ipynb`` share: small seeded models, a training loop
that only calls ``optimizer.step()``, and the optimizer's hooks counted.

A general builder other lessons could use: :func:`train` with :func:`loss` trains any model whose
first ``Linear`` reads the features of :func:`hooktutor.data.blobs`, in the model's own dtype.
"""

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


def mlp(seed: int) -> nn.Module:
    return MLP(seed=seed)


def nested(seed: int) -> nn.Module:
    """kit.Nested (layers two levels down) followed by a head: input (N, 4), output (N, 3)."""
    with seeded(seed):
        head = nn.Linear(3, 3)
    return nn.Sequential(OrderedDict(body=kit.Nested(seed=seed), head=head))


def in_float64(build: Callable[[int], nn.Module]) -> Callable[[int], nn.Module]:
    """Dimension ``dtype``: the same builder, its model in float64."""
    def build64(seed: int) -> nn.Module:
        return build(seed).to(torch.float64)
    return build64


def loss(model: nn.Module, step: int, seed: int) -> torch.Tensor:
    """The loss of training step ``step``: a cross-entropy on seeded data as wide as the model's
    first Linear, in the model's dtype."""
    first = next(m for m in model.modules() if isinstance(m, nn.Linear))
    x, y = blobs(16, features=first.in_features, seed=seed + step)
    return nn.functional.cross_entropy(model(x.to(first.weight.dtype)), y)


def train(model: nn.Module, optimizer: torch.optim.Optimizer, steps: int, seed: int) -> None:
    """``steps`` steps of a plain loop: zero_grad, backward, ``optimizer.step()``; nothing else."""
    for step in range(steps):
        optimizer.zero_grad()
        loss(model, step, seed).backward()
        optimizer.step()


def params(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """Every parameter of ``optimizer``, group by group, in order."""
    return [p for group in optimizer.param_groups for p in group["params"]]


def user_hooks(optimizer: torch.optim.Optimizer, kind: str) -> int:
    """How many hooks of ``kind`` (``step_pre``, ``step_post``) not PyTorch's sit on ``optimizer``."""
    return len(list_hooks(optimizer, include_global=False).where(kind=kind, owner="user"))


def remove_all(handles: object) -> None:
    """Remove a handle, or every handle in a list/tuple (what an answer returned)."""
    for h in handles if isinstance(handles, (list, tuple)) else [handles]:
        if callable(getattr(h, "remove", None)):
            try:
                h.remove()
            except Exception:  # noqa: S110 - a learner's handle that cannot remove: the leak check reports it
                pass
