"""``ema_toggle``: one checkbox that registers or removes an optimizer step post-hook keeping an
exponential moving average (EMA) of the weights, and a loss curve redrawn on every click
(``08_training_hooks.ipynb``, "Try it live").

After every click the widget trains a copy of the model for ``steps`` SGD steps from the same
start, with a loop that knows nothing about the average: only ``optimizer.step()``. With the
hook on, the curve of the averaged weights' loss appears next to the live weights' one, which
does not change (the hook only reads the weights). The model passed in is never modified.
"""

from __future__ import annotations

import copy
import html
from typing import Any

import torch
from torch import nn

from ..i18n import fmt, tr_line
from ..inventory import list_hooks
from ..selection import check_model
from ._base import CheckboxWidget, left_aligned
from ._render import PngView, fingerprint, style


def ema_hook(averages: list[torch.Tensor], params: list[torch.Tensor], decay: float):
    """A step post-hook: ``avg = decay * avg + (1 - decay) * p`` for every parameter, in place."""
    def ema_update(optimizer: torch.optim.Optimizer, args: tuple, kwargs: dict) -> None:
        with torch.no_grad():
            for avg, p in zip(averages, params):
                avg.mul_(decay).add_(p, alpha=1 - decay)
    return ema_update


class EmaToggle(CheckboxWidget):
    """A checkbox for an EMA step post-hook on an SGD optimizer; see :func:`ema_toggle`.

    ``value`` is the checkbox; setting it registers or removes the hook and retrains at once.
    ``optimizer`` is the widget's optimizer (the hook lives there), ``losses`` the last run's
    curves (``"weights"``, and ``"EMA"`` while the hook is on), ``status_text`` the status line.
    """

    kind = "EmaToggle"

    def __init__(self, model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, *, steps: int = 30,
                 lr: float = 0.5, decay: float = 0.8, batch: int = 4, name: str | None = None):
        check_model(model, "ema_toggle")
        if not (isinstance(steps, int) and steps >= 1):
            raise ValueError(f"steps must be a positive int, got {steps!r}")
        if not 0.0 <= float(decay) < 1.0:
            raise ValueError(f"decay must be in [0, 1), got {decay!r}")
        super().__init__(name or f"ema_toggle:{type(model).__name__}")
        self.model = copy.deepcopy(model)  # the widget trains its own copy, from this start
        self._start = copy.deepcopy(self.model.state_dict())
        self.inputs, self.targets = inputs, targets
        self.steps, self.decay, self.batch = steps, float(decay), batch
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=lr)
        self._optimizer_start = copy.deepcopy(self.optimizer.state_dict())
        self.params = [p for group in self.optimizer.param_groups for p in group["params"]]
        self.averages: list[torch.Tensor] = []
        self._handle: Any = None
        self.losses: dict[str, list[float]] = {}
        self.status_text = ""
        self._build(f"keep an EMA of the weights (decay {self.decay:g}) in a step post-hook", False,
                    "hooktutor-ema-toggle", side_by_side=True)
        self._view = PngView(self.out)
        self.refresh()

    # -- state ----------------------------------------------------------------------

    def _on_change(self, change: dict) -> None:
        if self.closed:
            return
        self._detach()
        if change["new"]:
            self.averages = [p.detach().clone() for p in self.params]
            self._handle = self.optimizer.register_step_post_hook(ema_hook(self.averages, self.params, self.decay))
        self.refresh()

    def _detach(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def _loss(self, params: list[torch.Tensor] | None = None) -> float:
        with torch.no_grad():
            if params is None:
                out = self.model(self.inputs)
            else:
                named = dict(zip([n for n, _ in self.model.named_parameters()], params))
                out = torch.func.functional_call(self.model, named, (self.inputs,))
            return float(nn.functional.cross_entropy(out, self.targets))

    def train(self) -> dict[str, list[float]]:
        """Train from the start for ``steps`` steps with a plain loop (one small batch of ``inputs``
        per step, in order); return the loss on all of ``inputs`` after each step."""
        self.model.load_state_dict(self._start)
        self.optimizer.load_state_dict(self._optimizer_start)
        if self._handle is not None:
            for avg, p in zip(self.averages, self.params):
                avg.copy_(p.detach())
        curves: dict[str, list[float]] = {"weights": []}
        if self._handle is not None:
            curves["EMA"] = []
        n = len(self.inputs)
        for step in range(self.steps):
            rows = slice((step * self.batch) % n, (step * self.batch) % n + self.batch)  # a small, noisy batch
            self.optimizer.zero_grad()
            nn.functional.cross_entropy(self.model(self.inputs[rows]), self.targets[rows]).backward()
            self.optimizer.step()  # the only line that knows about training; the hook does the rest
            curves["weights"].append(self._loss())
            if "EMA" in curves:
                curves["EMA"].append(self._loss(self.averages))
        return curves

    def refresh(self) -> None:
        """Train once and redraw the status line and the curve."""
        if self.closed:
            return
        self.losses = self.train()
        n = len(list_hooks(self.optimizer, include_global=False).where(kind="step_post"))
        text = f"hook {'on' if self.value else 'off'} · loss after {self.steps} steps: weights " \
               f"{self.losses['weights'][-1]:.4f}"
        if "EMA" in self.losses:
            text += f", EMA {self.losses['EMA'][-1]:.4f}"
        self.status_text = text
        on_optimizer = fmt("{n} step post-hook on the optimizer", n=n) if n == 1 else \
            fmt("{n} step post-hooks on the optimizer", n=n)
        self.status.value = left_aligned(
            f"<span class='hooktutor-loss'>{html.escape(tr_line(text))}</span>"
            f" <small>({html.escape(on_optimizer)})</small>")
        self._view.show(fingerprint("ema", self.losses), self._draw, "loss per step")

    def _draw(self) -> bytes:
        from ..plots import LiveLines

        fig = self._view.figure("lines", lambda: LiveLines(["weights", "EMA"], ylabel="loss", **style("lines")))
        return fig.png(self.losses, "cross-entropy after each step")

    def _cleanup(self) -> None:
        self._detach()

    def _short(self) -> str:
        return f"EmaToggle(decay={self.decay:g}, steps={self.steps}, {'on' if self.value else 'off'})"


def ema_toggle(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, *, steps: int = 30,
               lr: float = 0.5, decay: float = 0.8, batch: int = 4, name: str | None = None) -> EmaToggle:
    """A checkbox that registers (ticked) or removes (unticked) an optimizer step post-hook that
    keeps an exponential moving average of the weights, and a loss curve redrawn after every
    click: ``steps`` SGD steps (``lr``, ``batch`` rows of ``inputs`` each, in order) on a copy of
    ``model`` from the same start, the loss on all of ``inputs`` of
    the live weights and, with the hook on, of the averaged ones. ``toggle.value = True`` clicks
    it from code; ``toggle.close()`` removes the hook; creating one under the same ``name``
    replaces the old one. ``08_training_hooks.ipynb``.
    """
    return EmaToggle(model, inputs, targets, steps=steps, lr=lr, decay=decay, batch=batch, name=name)
