"""What several exercises of ``05_inplace_relu_pitfall.ipynb`` share: reference gradients computed
without in-place ops, and the small models of their cases."""

from __future__ import annotations

import copy
from collections import OrderedDict
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from ...models import SmallCNN, seeded, set_inplace
from .. import kit


def reference(seed: int, x: torch.Tensor, y: torch.Tensor, names: list[str]
              ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Outputs and gradients of ``cross_entropy`` w.r.t. the outputs of ``names``, computed
    on a SmallCNN without in-place ReLUs (nothing is overwritten there)."""
    model = SmallCNN(inplace=False, seed=seed)
    outs: dict[str, torch.Tensor] = {}
    handles = [model.get_submodule(n).register_forward_hook(
        lambda m, a, o, n=n: outs.__setitem__(n, o)) for n in names]
    try:
        logits = model(x)
        loss = F.cross_entropy(logits, y)
    finally:
        for h in handles:
            h.remove()
    grads = torch.autograd.grad(loss, [outs[n] for n in names])
    return ({n: outs[n].detach().clone() for n in names},
            {n: g.detach().clone() for n, g in zip(names, grads)})


def reference_any(model: nn.Module, x: torch.Tensor, y: torch.Tensor, name: str, output: int = 0) -> torch.Tensor:
    """The gradient of ``cross_entropy`` w.r.t. output ``output`` of layer ``name`` (its only
    output, or one of the tensors it returns) for any model, computed on a copy with every
    in-place flag off (nothing is overwritten there)."""
    model = copy.deepcopy(model)
    set_inplace(model, False)
    outs: dict[str, torch.Tensor] = {}

    def keep(m, a, o):
        outs["out"] = o[output] if isinstance(o, tuple) else o
    handle = model.get_submodule(name).register_forward_hook(keep)
    try:
        logits = model(x)
        loss = F.cross_entropy(logits, y)
    finally:
        handle.remove()
    (grad,) = torch.autograd.grad(loss, outs["out"])
    return grad.detach().clone()


class Accumulated:
    """Around the answer: ``param`` holds a gradient the caller accumulated before (ones); afterwards its
    ``.grad`` must be that plus the gradient of this one backward (``want``): an answer that calls
    ``model.zero_grad()`` first wipes the caller's gradients."""

    def __init__(self, t: Any, param: torch.Tensor, want: torch.Tensor, name: str) -> None:
        self.t, self.param, self.want, self.name = t, param, want, name

    def __enter__(self) -> Accumulated:
        self.param.grad = torch.ones_like(self.param)
        return self

    def __exit__(self, kind: Any, *exc: Any) -> None:
        if kind is not None:
            return
        grad = self.param.grad
        added = None if grad is None else grad - 1.0
        ok = added is not None and torch.allclose(added, self.want, atol=1e-6, rtol=1e-4)
        self.t.expect(ok, what=f"{self.name}.grad after your answer (it held ones before)",
                      expected="ones + the gradient of this backward", got="None" if grad is None else grad, nudge=(
                          "backward() adds to .grad, and the gradients the caller had accumulated before must "
                          "stay: do not call model.zero_grad() (or set .grad to None) in your answer"))


def param_grad(model: nn.Module, x: torch.Tensor, y: torch.Tensor, param: str) -> torch.Tensor:
    """The gradient of ``cross_entropy`` w.r.t. parameter ``param``, on a copy without in-place ops."""
    model = copy.deepcopy(model)
    set_inplace(model, False)
    (grad,) = torch.autograd.grad(F.cross_entropy(model(x), y), model.get_parameter(param))
    return grad


class RaisingInplace(nn.Module):
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


class Swish(nn.Module):
    """A home-made activation with its own ``inplace`` switch (not a torch class)."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mul_(torch.sigmoid(x)) if self.inplace else x * torch.sigmoid(x)


def other_classes_model(seed: int) -> nn.Module:
    """A nested 4-D model whose in-place modules are neither ReLU nor Dropout: LeakyReLU,
    Hardtanh, ELU, a home-made Swish; an nn.SiLU that is not in-place."""
    with seeded(seed):
        features = nn.Sequential(OrderedDict([
            ("conv1", nn.Conv2d(1, 4, 3, padding=1)), ("leaky", nn.LeakyReLU(0.1, inplace=True)),
            ("conv2", nn.Conv2d(4, 4, 3, padding=1)), ("clip", nn.Hardtanh(inplace=True)),
            ("block", nn.Sequential(OrderedDict([
                ("conv", nn.Conv2d(4, 4, 1)), ("elu", nn.ELU(inplace=True)), ("swish", Swish(inplace=True)),
                ("silu", nn.SiLU(inplace=False))]))),
        ]))
        head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3))
    return nn.Sequential(OrderedDict([("features", features), ("head", head)]))
