"""``HookPanel``: the hook control panel of ``06_hook_lab.ipynb``.

One mode selector per layer (off / observe / zero / scale / scale_grad) attaches or
detaches a real hook at once; every change re-runs the model and redraws what changed:
the chosen layer's activations (histogram or feature maps), the gradient norm per layer,
the output and loss, and the table of hooks attached right now (``list_hooks``). For models
with in-place modules (the CNN's ReLUs) a switch flips them, and the activation view can
show what a hook that stored ``output.detach()`` without copying kept.
"""

from __future__ import annotations

import html
from typing import Any

import torch
from torch import nn

from ..i18n import tr
from ..inventory import HookTable, list_hooks
from ..models import inplace_modules, set_inplace
from ..selection import LayerSpec, check_model, get_layer, select_layers
from ._base import HookWidget, ipw
from ._compute import Snapshot, run
from ._modes import MODES, attach, check_mode, check_scale
from ._render import PngView, show_activation, show_gradients
from .inplace import kept_without_copy

STORE_COPY = "a copy (clone)"
STORE_DETACH = "output.detach()"
# the status lines and the hook table: lines of text 1.4 high, not the 28 px of a widget's row
COMPACT = "line-height: 1.4; margin: 4px 0"
TABLE_CSS = ("<style>.hooktutor-panel .hooktutor-table p {margin: 0 0 2px} "
             ".hooktutor-panel .hooktutor-table th, .hooktutor-panel .hooktutor-table td "
             "{padding: 0 10px 0 0; text-align: left}</style>")


class HookPanel(HookWidget):
    """A hook mode per layer and live views; see the module docstring and ``06_hook_lab.ipynb``.

    ``set_mode(layer, mode, scale=None)`` does what the dropdown does; ``snapshot`` holds the
    last pass (``loss``, ``activations``, ``grad_norms``), ``loss_text`` the status line,
    ``table`` the :class:`hooktutor.HookTable` last shown; ``close()`` removes every hook and
    restores the model's in-place flags.
    """

    kind = "HookPanel"

    def __init__(self, model: nn.Module, inputs: Any, targets: Any = None, *, loss_fn: Any = None,
                 layers: LayerSpec = None, name: str | None = None, scale: float = 2.0):
        check_model(model, "HookPanel")
        chosen = [n for n, _ in select_layers(model, layers, func="HookPanel") if n]
        if not chosen:
            raise ValueError(f"{type(model).__name__} has no submodule to put hooks on")
        scale = check_scale(scale)
        super().__init__(name or f"HookPanel:{type(model).__name__}")
        self.model, self.inputs, self.targets, self.loss_fn = model, inputs, targets, loss_fn
        self.layers = chosen
        self.modules = {n: get_layer(model, n) for n in chosen}
        self.modes = dict.fromkeys(chosen, "off")
        self.observed: dict[str, dict[str, Any]] = {}
        self.snapshot = Snapshot()
        self.loss_text = ""
        self.table: HookTable = list_hooks(model)
        self._original_inplace = {n: m.inplace for n, m in model.named_modules()
                                  if isinstance(getattr(m, "inplace", None), bool)}
        self._quiet = False
        self.shown_activation: torch.Tensor | None = None  # what the activation view shows

        w = ipw()
        # Laid out for a laptop (1366x768, Lab's file browser open: a 930 px wide output): the
        # controls in a narrow column on the left, and beside them everything a control
        # changes (the loss, the two charts side by side, the hook table), so the whole panel is
        # about as tall as its list of layers and a click never sends its effect off screen.
        label = 8 * max(len(n) for n in chosen) + 12  # px: each layer's name in full, at Lab's 13 px
        self.selectors: dict[str, Any] = {}
        for layer in chosen:
            dd = w.Dropdown(options=list(MODES), value="off", description=layer,
                            style={"description_width": f"{label}px"}, layout=w.Layout(width=f"{label + 130}px"))
            dd.add_class("hooktutor-mode")
            dd.observe(lambda change, layer=layer: self._on_mode(layer, change["new"]), names="value")
            self.selectors[layer] = dd
        self.scale_slider = w.FloatSlider(value=scale, min=min(0.0, scale), max=max(4.0, scale), step=0.25,
                                          description=tr("scale"), style={"description_width": "initial"},
                                          layout=w.Layout(width=f"{label + 130}px"))
        self.scale_slider.add_class("hooktutor-scale")
        self.scale_slider.observe(self._on_scale, names="value")
        controls = [w.HTML(f"<b>HookPanel: {html.escape(type(model).__name__)}</b><br>hook on each layer",
                           layout=w.Layout(width="auto")), *self.selectors.values(), self.scale_slider]
        self.inplace_box = None
        if self._original_inplace:
            self.inplace_box = w.Checkbox(value=bool(inplace_modules(model)), description=tr("ReLUs in place"),
                                          indent=False, layout=w.Layout(width="auto"))
            self.inplace_box.add_class("hooktutor-inplace")
            self.inplace_box.observe(self._on_inplace, names="value")
            controls.append(self.inplace_box)

        self.show_layer = w.Dropdown(options=chosen, value=chosen[0], description=tr("show"),
                                     style={"description_width": "initial"}, layout=w.Layout(width="150px"))
        # button_width "auto": each button as wide as its text, so no choice is cut off
        self.show_kind = w.ToggleButtons(options=["histogram", "feature maps"], value="histogram",
                                         style={"button_width": "auto"})
        self.store = w.ToggleButtons(options=[STORE_COPY, STORE_DETACH], value=STORE_COPY,
                                     description=tr("a hook stored"), style={"button_width": "auto",
                                                                         "description_width": "initial"})
        for ctrl in (self.show_layer, self.show_kind, self.store):
            ctrl.observe(self._on_view, names="value")
        self.act_out = w.Output(layout=w.Layout(min_height="60px"))
        self.grad_out = w.Output(layout=w.Layout(min_height="60px"))
        self.act_out.add_class("hooktutor-activation")
        self.grad_out.add_class("hooktutor-gradients")
        self.loss_html = w.HTML()
        self.loss_html.add_class("hooktutor-loss")
        self.table_html = w.HTML()
        self.table_html.add_class("hooktutor-table")
        # what the in-place switch did, whatever the activation view stores (empty without one)
        self.inplace_html = w.HTML()
        self.inplace_html.add_class("hooktutor-panel-status")
        self.inplace_text = ""
        self._act_view = PngView(self.act_out)
        self._grad_view = PngView(self.grad_out)
        wrap = w.Layout(flex_flow="row wrap", align_items="center")
        charts = w.HBox([self.act_out, self.grad_out], layout=w.Layout(flex_flow="row wrap"))
        # the in-place switch's status right under the loss line, at the top of the results: the
        # switch changes no picture when the hook stores a copy, so this line is where its effect
        # shows, and it must be in view on a laptop screen without scrolling
        results = w.VBox([self.loss_html, self.inplace_html,
                          w.HBox([self.show_layer, self.show_kind, self.store], layout=wrap),
                          charts, self.table_html], layout=w.Layout(flex="1 1 0", min_width="0"))
        results.add_class("hooktutor-results")
        left = w.VBox(controls, layout=w.Layout(flex="0 0 auto"))
        left.add_class("hooktutor-controls")
        self.widget = w.VBox([w.HBox([left, results])])
        self.widget.add_class("hooktutor-panel")
        self.refresh()

    # -- changes ----------------------------------------------------------------------
    def _on_mode(self, layer: str, mode: str) -> None:
        if self.closed:
            return
        self.modes[layer] = mode
        attach(self.hooks, layer, self.modules[layer], mode, self.scale_slider.value, layer=layer,
               observed=self.observed)
        if not self._quiet:
            self.refresh()

    def _on_scale(self, change: dict) -> None:
        if self.closed:
            return
        for layer, mode in self.modes.items():
            if mode in ("scale", "scale_grad"):
                attach(self.hooks, layer, self.modules[layer], mode, change["new"], layer=layer,
                       observed=self.observed)
        if not self._quiet:
            self.refresh()

    def _on_inplace(self, change: dict) -> None:
        if self.closed:
            return
        set_inplace(self.model, bool(change["new"]))
        if not self._quiet:
            self.refresh()

    def _on_view(self, change: dict) -> None:
        if not self.closed and not self._quiet:
            self.refresh()

    def set_mode(self, layer: str, mode: str, scale: float | None = None) -> None:
        """Switch ``layer``'s hook to ``mode`` (and the scale), exactly as the controls do.

        The panel has one scale, shared by every layer in a ``scale`` or ``scale_grad`` mode:
        changing it re-attaches those hooks with the new factor.
        """
        if layer not in self.selectors:
            get_layer(self.model, layer)  # a helpful error for a misspelt name
            raise ValueError(f"{layer!r} is not one of this panel's layers: {', '.join(self.layers)}")
        check_mode(mode)
        self._quiet = True
        try:
            if scale is not None:
                scale = check_scale(scale)
                slider = self.scale_slider  # widen the slider rather than clamp the value silently
                slider.min, slider.max = min(slider.min, scale), max(slider.max, scale)
                slider.value = scale
            self.selectors[layer].value = mode
        finally:
            self._quiet = False
        self.refresh()

    def reset(self) -> None:
        """Every hook off, the in-place flags as the model had them, the views as at the start."""
        self._quiet = True
        try:
            for dd in self.selectors.values():
                dd.value = "off"
            if self.inplace_box is not None:
                self.inplace_box.value = any(self._original_inplace.values())
            for name, flag in self._original_inplace.items():
                self.model.get_submodule(name).inplace = flag
            self.store.value = STORE_COPY
            self.show_kind.value = "histogram"
            self.show_layer.value = self.layers[0]
        finally:
            self._quiet = False
        self.refresh()

    def set_inplace(self, on: bool) -> None:
        """Flip the model's in-place modules, as the checkbox does."""
        if self.inplace_box is None:
            raise ValueError(f"{type(self.model).__name__} has no in-place modules to switch")
        self.inplace_box.value = bool(on)

    # -- views ------------------------------------------------------------------------
    def refresh(self) -> None:
        """Run the model once and redraw every view whose content changed."""
        if self.closed:
            return
        layer = self.show_layer.value
        snap = run(self.model, self.inputs, self.targets, self.loss_fn, layers=self.layers, keep=(layer,))
        self.snapshot = snap
        on = {n: m for n, m in self.modes.items() if m != "off"}
        self.loss_text = snap.loss_text()
        if self.observed:
            self.loss_text += " · observed " + ", ".join(
                f"{n}: mean {o['mean']:.4f}" for n, o in sorted(self.observed.items()))
        hooks_on = ", ".join(f"{n}={m}" for n, m in on.items()) or "none"
        scaled = [n for n, m in on.items() if m in ("scale", "scale_grad")]
        scale_note = (f"scale x{self.scale_slider.value:g}"
                      + (f" (on {', '.join(scaled)})" if scaled else " (used by the scale and scale_grad modes)"))
        self.loss_html.value = (f"<div style='{COMPACT}'><div class='hooktutor-loss-text'>"
                                f"{html.escape(self.loss_text)}</div>"
                                f"<div><small>hooks switched on: {html.escape(hooks_on)} · "
                                f"{html.escape(scale_note)}</small></div></div>")
        self.table = list_hooks(self.model)
        self.table_html.value = f"{TABLE_CSS}<div style='{COMPACT}'>{self.table._repr_html_()}</div>"
        kept = None
        if self._original_inplace and snap.error is None and snap.activations.get(layer) is not None:
            kept = kept_without_copy(self.model, self.inputs, self.modules[layer])
        self.inplace_text = self._describe_inplace(layer, kept)
        self.inplace_html.value = (f"<div class='hooktutor-inplace-text' style='line-height: 1.3; margin: 0'>"
                                   f"{html.escape(self.inplace_text)}</div>" if self.inplace_text else "")
        if snap.error is not None:
            self._act_view.text(snap.error)
            self._grad_view.text("")
            return
        act = snap.activations.get(layer)
        title = layer
        if self.store.value == STORE_DETACH:
            act = None if kept is None else kept[0]
            title = f"{layer}, kept as output.detach()"
        self.shown_activation = act
        if act is not None:
            show_activation(self._act_view, title, act, self.show_kind.value)
        else:
            self._act_view.text(f"{layer} did not produce a tensor")
        show_gradients(self._grad_view, self.layers, snap.grad_norms)

    def _describe_inplace(self, layer: str, kept: tuple[torch.Tensor, torch.Tensor] | None) -> str:
        """The status line of the in-place switch: how many modules work in place, and what
        that does to a stored copy and to a stored ``output.detach()`` of the layer shown."""
        if not self._original_inplace:
            return ""
        total = len(self._original_inplace)
        now = len(inplace_modules(self.model))
        text = f"in place: {now} of {total} ReLU{'s' if total != 1 else ''} (inplace={'True' if now else 'False'})"
        if kept is None:
            return text
        stored, copy = kept
        neg_copy, neg_stored = float((copy < 0).float().mean()), float((stored < 0).float().mean())
        overwritten = not torch.equal(stored, copy)
        if self.store.value == STORE_COPY:
            text += f" · the copy of {layer} shown is unaffected (negatives {neg_copy:.0%})"
            text += (f"; a stored output.detach() would now be overwritten (negatives {neg_stored:.0%})"
                     if overwritten else "; a stored output.detach() would be intact too")
        else:
            text += (f" · the output.detach() of {layer} shown is overwritten in place (negatives {neg_stored:.0%}, "
                     f"a copy keeps {neg_copy:.0%})" if overwritten
                     else f" · the output.detach() of {layer} shown is intact (negatives {neg_stored:.0%})")
        return text

    def _cleanup(self) -> None:
        for name, flag in self._original_inplace.items():
            self.model.get_submodule(name).inplace = flag

    def _short(self) -> str:
        n = sum(1 for m in self.modes.values() if m != "off")
        return f"HookPanel({type(self.model).__name__}, {len(self.layers)} layers, {n} hook{'s' if n != 1 else ''} on)"

    def __repr__(self) -> str:
        return self._short()
