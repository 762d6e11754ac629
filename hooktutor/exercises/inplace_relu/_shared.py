"""Helpers shared by several exercises of 05_inplace_relu_pitfall.ipynb."""

from __future__ import annotations

import copy
from collections import OrderedDict

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from ...models import SmallCNN, seeded, set_inplace
from .. import kit


def _reference(seed: int, x: torch.Tensor, y: torch.Tensor, names: list[str]
               ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Outputs and gradients of ``cross_entropy`` w.r.t. the outputs of ``names``, computed
    on a SmallCNN without in-place ReLUs (nothing is overwritten there)."""
    model = SmallCNN(inplace=False, seed=seed)
    outs: dict[str, torch.Tensor] = {}
    handles = [model.get_submodule(n).register_forward_hook(
        lambda m, a, o, n=n: outs.__setitem__(n, o)) for n in names]
    try:
        loss = F.cross_entropy(model(x), y)
    finally:
        for h in handles:
            h.remove()
    grads = torch.autograd.grad(loss, [outs[n] for n in names])
    return ({n: outs[n].detach().clone() for n in names},
            {n: g.detach().clone() for n, g in zip(names, grads)})


def _reference_any(model: nn.Module, x: torch.Tensor, y: torch.Tensor, name: str) -> torch.Tensor:
    """The gradient of ``cross_entropy`` w.r.t. the output of ``name`` for any model, computed
    on a copy with every in-place flag off (nothing is overwritten there)."""
    model = copy.deepcopy(model)
    set_inplace(model, False)
    outs: dict[str, torch.Tensor] = {}
    handle = model.get_submodule(name).register_forward_hook(lambda m, a, o: outs.__setitem__("out", o))
    try:
        loss = F.cross_entropy(model(x), y)
    finally:
        handle.remove()
    (grad,) = torch.autograd.grad(loss, outs["out"])
    return grad.detach().clone()


class _RaisingInplace(nn.Module):
    """``body = Sequential(Linear(4, 4), ReLU(inplace=True))`` runs, then the forward raises
    :class:`kit.KitError` before ``head``: the run fails with in-place flags switched off."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        with seeded(seed):
            self.body = nn.Sequential(nn.Linear(4, 4), nn.ReLU(inplace=True))
            self.head = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.body(x)
        raise kit.KitError("the check's model raised halfway through its forward (on purpose)")
        return self.head(h)  # pragma: no cover


class _Swish(nn.Module):
    """A home-made activation with its own ``inplace`` switch (not a torch class)."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mul_(torch.sigmoid(x)) if self.inplace else x * torch.sigmoid(x)


def _other_classes_model(seed: int) -> nn.Module:
    """A nested 4-D model whose in-place modules are neither ReLU nor Dropout: LeakyReLU,
    Hardtanh, ELU, a home-made _Swish; an nn.SiLU that is not in-place."""
    with seeded(seed):
        features = nn.Sequential(OrderedDict([
            ("conv1", nn.Conv2d(1, 4, 3, padding=1)), ("leaky", nn.LeakyReLU(0.1, inplace=True)),
            ("conv2", nn.Conv2d(4, 4, 3, padding=1)), ("clip", nn.Hardtanh(inplace=True)),
            ("block", nn.Sequential(OrderedDict([
                ("conv", nn.Conv2d(4, 4, 1)), ("elu", nn.ELU(inplace=True)), ("swish", _Swish(inplace=True)),
                ("silu", nn.SiLU(inplace=False))]))),
        ]))
        head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3))
    return nn.Sequential(OrderedDict([("features", features), ("head", head)]))


