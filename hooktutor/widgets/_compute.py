"""One forward and backward pass of a model for the widget views, leaving no trace.

The pass records the selected layers' outputs and output gradients with
:func:`hooktutor.capture` (its hooks are removed before this returns), computes gradients
with ``torch.autograd.grad`` (so no parameter's ``.grad`` changes) and restores the
model's buffers afterwards (so BatchNorm running statistics do not drift with every click).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..capture import RecordNotFound, capture
from ._base import buffers_kept, call_model


@dataclass
class Snapshot:
    """What one pass produced: output, loss, recorded activations and gradient norms."""

    output: torch.Tensor | None = None
    loss: float | None = None
    loss_name: str = ""
    activations: dict[str, torch.Tensor] = field(default_factory=dict)
    grad_norms: dict[str, float] = field(default_factory=dict)
    error: str | None = None

    def loss_text(self) -> str:
        """One short deterministic line: the loss and what the output looks like."""
        if self.error is not None:
            return f"error: {self.error}"
        out = self.output
        parts = [f"loss {self.loss:.4f} ({self.loss_name})"]
        if out is not None:
            parts.append(f"output {tuple(out.shape)}, mean {float(out.float().mean()):.4f}")
            if out.dim() == 2 and out.shape[1] > 1:
                counts = torch.bincount(out.argmax(1), minlength=out.shape[1]).tolist()
                parts.append("predicted classes " + "/".join(str(c) for c in counts))
        return " · ".join(parts)


def compute_loss(output: torch.Tensor, targets: Any, loss_fn: Any) -> tuple[torch.Tensor, str]:
    """The loss a widget shows: ``loss_fn``, else cross-entropy for class labels, MSE for
    float targets, or the sum of the output when there are no targets."""
    if loss_fn is not None:
        value = loss_fn(output, targets) if targets is not None else loss_fn(output)
        return value, getattr(loss_fn, "__name__", type(loss_fn).__name__)
    if targets is None:
        return output.sum(), "sum of output"
    if not torch.is_floating_point(targets):
        return F.cross_entropy(output, targets), "cross-entropy"
    return F.mse_loss(output, targets), "mse"


def run(model: nn.Module, inputs: Any, targets: Any = None, loss_fn: Any = None, *,
        layers: list[str], keep: tuple[str, ...] = (), grads: bool = True) -> Snapshot:
    """Run ``model`` once; return the loss, the outputs of ``keep`` and the gradient norm
    (w.r.t. each layer's output) of every layer in ``layers``."""
    snap = Snapshot()
    params = [p for p in model.parameters() if p.requires_grad]
    watched = list(dict.fromkeys([*layers, *keep]))
    try:
        with buffers_kept(model), torch.enable_grad(), capture(model, watched, grads=grads and bool(params)) as rec:
            output = call_model(model, inputs)
            if not isinstance(output, torch.Tensor):
                raise TypeError(f"the widgets need a model that returns one tensor, got {type(output).__name__}")
            loss, snap.loss_name = compute_loss(output, targets, loss_fn)
            if loss.numel() != 1:
                raise ValueError(f"the loss must be a single number, got shape {tuple(loss.shape)}")
            snap.output = output.detach().clone()
            snap.loss = float(loss.detach())
            if grads and params and loss.requires_grad:
                torch.autograd.grad(loss, params, allow_unused=True)
        for name in keep:
            if rec.n_calls(name):
                value = rec.outputs.calls(name)[-1]
                if isinstance(value, torch.Tensor):
                    snap.activations[name] = value
        if grads and params:
            for name in layers:
                try:
                    g = rec.grads.calls(name)[-1]
                except RecordNotFound:
                    continue
                if isinstance(g, torch.Tensor):
                    snap.grad_norms[name] = float(g.norm())
    except (RuntimeError, ValueError, TypeError) as exc:
        snap.error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    return snap
