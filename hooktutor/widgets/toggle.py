"""``hook_toggle``: one checkbox that attaches or detaches one hook on one layer, and a view
that is redrawn on every click. The one-line widget of lessons 01-05 ("Try it live")."""

from __future__ import annotations

import html
from typing import Any

from torch import nn

from ..i18n import fmt, tr_line
from ..inventory import list_hooks
from ..selection import check_model, get_layer, select_layers
from ._base import CheckboxWidget, left_aligned
from ._compute import Snapshot, run
from ._modes import DESCRIPTIONS, attach, check_mode, check_scale
from ._render import PngView, show_activation, show_gradients

VIEWS: tuple[str, ...] = ("histogram", "gradients", "loss")


class HookToggle(CheckboxWidget):
    """A checkbox for one hook (``mode``) on one layer, plus a view; see :func:`hook_toggle`.

    ``value`` (True/False) is the checkbox; setting it attaches or detaches the hook and
    redraws at once. ``snapshot`` holds what the last pass saw (``loss``, ``activations``,
    ``grad_norms``), ``loss_text`` the status line, ``out`` the view's Output widget.
    """

    kind = "HookToggle"

    def __init__(self, model: nn.Module, inputs: Any, layer: str, *, mode: str = "zero", scale: float = 2.0,
                 targets: Any = None, loss_fn: Any = None, view: str | None = None, name: str | None = None):
        check_model(model, "hook_toggle")
        if view is None:  # the view where the mode's effect shows
            view = "gradients" if mode == "scale_grad" else "histogram"
        self.module = get_layer(model, layer)
        check_mode(mode, allow_off=False)
        scale = check_scale(scale)
        if view not in VIEWS:
            raise ValueError(f"unknown view {view!r}; use one of {', '.join(repr(v) for v in VIEWS)}")
        super().__init__(name or f"hook_toggle:{type(model).__name__}:{layer}")
        self.model, self.inputs, self.layer = model, inputs, layer
        self.mode, self.scale, self.targets, self.loss_fn, self.view = mode, scale, targets, loss_fn, view
        self.grad_layers = [n for n, _ in select_layers(model, None, func="hook_toggle") if n]
        self.observed: dict[str, dict[str, Any]] = {}
        self.snapshot = Snapshot()
        self.loss_text = ""

        what = DESCRIPTIONS[mode] + (f" x{scale:g}" if mode in ("scale", "scale_grad") else "")
        self._build(f"{what} of {layer}", False, "hooktutor-hook-toggle", side_by_side=True)
        self._view = PngView(self.out)
        self.refresh()

    # -- state ----------------------------------------------------------------------

    def _on_change(self, change: dict) -> None:
        if self.closed:
            return
        mode = self.mode if change["new"] else "off"
        attach(self.hooks, self.layer, self.module, mode, self.scale, layer=self.layer, observed=self.observed)
        self.refresh()

    def refresh(self) -> None:
        """Run the model once and redraw the status line and the view."""
        if self.closed:
            return
        keep = (self.layer,) if self.view == "histogram" else ()
        snap = run(self.model, self.inputs, self.targets, self.loss_fn, layers=self.grad_layers
                   if self.view == "gradients" else [self.layer], keep=keep)
        self.snapshot = snap
        n = len(list_hooks(self.model).where(path=self.layer))
        state = "on" if self.value else "off"
        self.loss_text = f"hook {state} · {snap.loss_text()}"
        if self.observed.get(self.layer):
            o = self.observed[self.layer]
            self.loss_text += f" · observed mean {o['mean']:.4f}, zeros {o['zeros']:.0%}"
        on_layer = fmt("{n} hook on {layer}", n=n, layer=self.layer) if n == 1 else \
            fmt("{n} hooks on {layer}", n=n, layer=self.layer)
        self.status.value = left_aligned(
            f"<span class='hooktutor-loss'>{html.escape(tr_line(self.loss_text))}</span>"
            f" <small>({html.escape(on_layer)})</small>")
        if snap.error is not None:
            self._view.text(snap.error)
        elif self.view == "histogram" and self.layer in snap.activations:
            show_activation(self._view, self.layer, snap.activations[self.layer])
        elif self.view == "gradients":
            show_gradients(self._view, self.grad_layers, snap.grad_norms)
        else:
            self._view.text(self._loss_comparison(snap))

    def _loss_comparison(self, snap: Any) -> str:
        """The loss view: the loss with the hook against the loss without it (the status line
        already has the rest)."""
        if not self.value:
            self._loss_off = snap.loss
            return f"loss without the hook: {snap.loss:.4f}; tick the box to compare"
        off = getattr(self, "_loss_off", None)
        if off is None:
            return f"loss with the hook: {snap.loss:.4f}"
        return f"loss with the hook: {snap.loss:.4f} · without it: {off:.4f} · change {snap.loss - off:+.4f}"

    def _short(self) -> str:
        return f"HookToggle({self.layer}, mode={self.mode!r}, {'on' if self.value else 'off'})"

    def __repr__(self) -> str:
        return self._short()


def hook_toggle(model: nn.Module, inputs: Any, layer: str, *, mode: str = "zero", scale: float = 2.0,
                targets: Any = None, loss_fn: Any = None, view: str | None = None,
                name: str | None = None) -> HookToggle:
    """A checkbox that attaches (ticked) or removes (unticked) ONE hook on ONE layer, and a
    view redrawn after every click. The last expression of a cell displays it.

    ``mode``: ``"observe"``, ``"zero"``, ``"scale"`` (forward hooks; the last two replace the
    output) or ``"scale_grad"`` (a tensor hook on the layer's output scaling the gradient
    flowing back). ``view``: ``"histogram"`` (the layer's output), ``"gradients"`` (gradient
    norm per layer) or ``"loss"``; by default ``"gradients"`` for ``scale_grad``, else
    ``"histogram"``. The loss is ``loss_fn(output, targets)``, cross-entropy
    when only ``targets`` is given, or the sum of the output. Set ``toggle.value`` from code
    to click it; ``toggle.close()`` removes the hook. Its hooks live in the
    :class:`hooktutor.HookSet` called ``name`` (default ``hook_toggle:<Model>:<layer>``), so
    running the cell again replaces the old toggle instead of adding a second hook.

    Dropped into lessons 01-05 ("Try it live"); the full panel is in ``06_hook_lab.ipynb``.
    """
    return HookToggle(model, inputs, layer, mode=mode, scale=scale, targets=targets, loss_fn=loss_fn,
                      view=view, name=name)
