"""``inplace_switch``: flip a model's ReLUs between ``inplace=True`` and ``False`` and watch
two hooks change their story (``05_inplace_relu_pitfall.ipynb``).

After every flip the widget runs the model once with two short-lived hooks on ``layer``
(both removed in a ``finally`` before the view is drawn):

* a naive forward hook that stores ``output.detach()`` (no copy) next to a real copy; with
  in-place ReLUs after ``layer`` the stored tensor loses its negative values;
* a full backward hook; with an in-place op after ``layer`` the forward raises
  "Output 0 of BackwardHookFunction is a view and is being modified inplace".
"""

from __future__ import annotations

import html
import warnings
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..i18n import tr_line
from ..inventory import reset_backward_flag
from ..models import inplace_modules, set_inplace
from ..selection import check_model, get_layer
from ._base import CheckboxWidget, buffers_kept, call_model, left_aligned
from ._render import PngView, show_activation


@dataclass
class InplaceOutcome:
    """What one run with the ReLUs in place (or not) showed."""

    inplace: bool
    stored_min: float
    true_min: float
    stored_negative: float  # fraction of negative values in the stored (uncopied) tensor
    true_negative: float  # ... and in a real copy taken at the same moment
    backward_error: str | None  # the full backward hook's error, or None when it worked

    @property
    def corrupted(self) -> bool:
        return self.stored_negative < self.true_negative

    def text(self) -> str:
        stored = (f"stored output.detach(): min {self.stored_min:.3f}, negatives {self.stored_negative:.0%} "
                  f"(a clone: min {self.true_min:.3f}, negatives {self.true_negative:.0%})")
        backward = ("full backward hook: works" if self.backward_error is None
                    else f"full backward hook: {self.backward_error}")
        where = "ReLUs in place: yes" if self.inplace else "ReLUs in place: no"
        return f"{where} · {stored} · {backward}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0]
    return f"{type(exc).__name__}: {text[:110]}{'...' if len(text) > 110 else ''}"


def kept_without_copy(model: nn.Module, inputs: Any, module: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """Run ``model`` once with a hook on ``module`` that keeps its output two ways:
    ``output.detach()`` (the trap: no copy) and ``output.detach().clone()``. Returns both as
    they are after the forward; the hook is removed, and buffers restored, before this returns.
    """
    kept: dict[str, torch.Tensor] = {}

    def naive(mod: nn.Module, args: tuple, output: torch.Tensor) -> None:
        kept["stored"] = output.detach()
        kept["copy"] = output.detach().clone()

    naive.__qualname__ = "inplace_switch.naive_store"
    handle = module.register_forward_hook(naive)
    try:
        with torch.no_grad(), buffers_kept(model):
            call_model(model, inputs)
    finally:
        handle.remove()
    if "stored" not in kept:
        raise ValueError(f"{type(module).__name__} did not run in the forward pass, or returned no tensor")
    return kept["stored"], kept["copy"]


def probe(model: nn.Module, inputs: Any, layer: str) -> tuple[InplaceOutcome, torch.Tensor]:
    """Run the two hooks of the widget once; return the outcome and the stored tensor."""
    module = get_layer(model, layer)
    stored, copy = kept_without_copy(model, inputs, module)
    error = None
    bhandle = module.register_full_backward_hook(lambda m, gi, go: None)
    params = [p for p in model.parameters() if p.requires_grad]
    try:
        with torch.enable_grad(), warnings.catch_warnings(), buffers_kept(model):
            warnings.simplefilter("ignore")  # "Full backward hook is firing ..." on a first layer
            out = call_model(model, inputs)
            torch.autograd.grad(out.sum(), params, allow_unused=True)  # leaves every .grad alone
    except RuntimeError as exc:
        error = _first_line(exc)
    finally:
        bhandle.remove()
        reset_backward_flag(module)
    outcome = InplaceOutcome(
        inplace=bool(inplace_modules(model)),
        stored_min=float(stored.min()), true_min=float(copy.min()),
        stored_negative=float((stored < 0).float().mean()), true_negative=float((copy < 0).float().mean()),
        backward_error=error)
    return outcome, stored


class InplaceSwitch(CheckboxWidget):
    """A checkbox for ``inplace=True`` on every in-place-capable module; see :func:`inplace_switch`."""

    kind = "InplaceSwitch"

    def __init__(self, model: nn.Module, inputs: Any, layer: str, *, name: str | None = None):
        check_model(model, "inplace_switch")
        get_layer(model, layer)
        if not any(isinstance(getattr(m, "inplace", None), bool) for m in model.modules()):
            raise ValueError(f"{type(model).__name__} has no module with an `inplace` switch (such as nn.ReLU); "
                             "inplace_switch needs one after the layer it watches")
        super().__init__(name or f"inplace_switch:{type(model).__name__}:{layer}")  # closes a previous one
        self._original = {n: m.inplace for n, m in model.named_modules()
                          if isinstance(getattr(m, "inplace", None), bool)}
        self.model, self.inputs, self.layer = model, inputs, layer
        self.outcome: InplaceOutcome | None = None
        self._build("ReLUs in place (inplace=True)", bool(inplace_modules(model)), "hooktutor-inplace-switch",
                    side_by_side=False)
        self._view = PngView(self.out)
        self.refresh()

    def _on_change(self, change: dict) -> None:
        if self.closed:
            return
        set_inplace(self.model, bool(change["new"]))
        self.refresh()

    def refresh(self) -> None:
        """Run the model once with both hooks and redraw."""
        if self.closed:
            return
        self.outcome, stored = probe(self.model, self.inputs, self.layer)
        lines = tr_line(self.outcome.text()).split(" · ")
        self.status.value = left_aligned("<br>".join(html.escape(line) for line in lines))
        show_activation(self._view, f"{self.layer} as stored by the hook", stored)

    def _cleanup(self) -> None:
        for name, flag in self._original.items():
            self.model.get_submodule(name).inplace = flag

    def _short(self) -> str:
        return f"InplaceSwitch({self.layer}, inplace={'on' if self.value else 'off'})"

    def __repr__(self) -> str:
        return self._short()


def inplace_switch(model: nn.Module, inputs: Any, layer: str = "features.1", *, name: str | None = None
                   ) -> InplaceSwitch:
    """A checkbox that switches every ``inplace`` module of ``model`` (its ReLUs) on or off,
    and shows, after each flip, what a hook on ``layer`` that stored ``output.detach()`` kept
    (its negative values vanish when the ReLUs work in place) and whether a full backward
    hook on ``layer`` works or raises the BackwardHookFunction error.

    ``switch.value = True`` flips it from code; ``switch.outcome`` holds the numbers;
    ``switch.close()`` restores the model's original ``inplace`` flags. The hooks it uses are
    removed before each redraw, so ``list_hooks(model)`` stays empty.

    Taught in ``05_inplace_relu_pitfall.ipynb``.
    """
    return InplaceSwitch(model, inputs, layer, name=name)
