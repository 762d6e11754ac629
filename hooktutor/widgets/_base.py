"""What every hooktutor widget shares: a named HookSet, one live widget per name, a short
deterministic text repr, and Output widgets filled from the kernel (never ``with out:``).

ipywidgets is imported on first use, so ``import hooktutor.widgets`` stays light.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from ..hookset import HookSet
from ..i18n import tr

# One live widget per name: creating a widget under a name that is in use (the cell that
# made it was run again) closes the old one first, so its hooks never pile up.
_LIVE: dict[str, "HookWidget"] = {}


def ipw():
    """The ipywidgets module, imported on first use."""
    import ipywidgets

    return ipywidgets


def show_png(out: Any, png: bytes, alt: str) -> None:
    """Replace what the Output widget ``out`` shows with one PNG image, in one update.

    The same content as ``out.outputs = (); out.append_display_data(Image(png))`` but sent
    to the page as a single change, with a fixed ``text/plain`` (``alt``).
    """
    out.outputs = ({"output_type": "display_data",
                    "data": {"image/png": base64.b64encode(png).decode("ascii"), "text/plain": alt},
                    "metadata": {}},)


def show_text(out: Any, text: str) -> None:
    """Replace what the Output widget ``out`` shows with plain text."""
    out.outputs = ({"output_type": "stream", "name": "stdout", "text": text},)


def call_model(model: nn.Module, inputs: Any):
    """``model(inputs)``, or ``model(*inputs)`` when ``inputs`` is a tuple or list."""
    if isinstance(inputs, (tuple, list)):
        return model(*inputs)
    return model(inputs)


@contextmanager
def buffers_kept(model: nn.Module) -> Iterator[None]:
    """Restore the model's buffers after the block (BatchNorm statistics must not drift per click)."""
    saved = [(b, b.detach().clone()) for b in model.buffers()]
    try:
        yield
    finally:
        with torch.no_grad():
            for b, value in saved:
                b.copy_(value)


def left_aligned(inner: str) -> str:
    """A status line's HTML: left-aligned when it wraps (an ipywidgets HTML next to a checkbox
    centres its second line otherwise), with room between the lines."""
    return f"<div style='text-align:left;line-height:1.4'>{inner}</div>"


def checkbox_view(description: str, value: bool, css: str, *, side_by_side: bool) -> tuple[Any, Any, Any, Any]:
    """The parts of a one-checkbox widget: ``(checkbox, status HTML, view Output, container)``."""
    w = ipw()
    checkbox = w.Checkbox(value=value, description=tr(description), indent=False, layout=w.Layout(width="auto"))
    status = w.HTML()
    out = w.Output(layout=w.Layout(min_height="40px"))
    checkbox.add_class("hooktutor-toggle")
    status.add_class("hooktutor-status")
    out.add_class("hooktutor-view")
    box = w.VBox([w.HBox([checkbox, status]), out] if side_by_side else [checkbox, status, out])
    box.add_class(css)
    return checkbox, status, out, box


class HookWidget:
    """Base class: ``name``, ``hooks`` (a :class:`hooktutor.HookSet` of that name),
    ``widget`` (the ipywidgets container), ``close()`` and the display protocol."""

    kind = "HookWidget"

    def __init__(self, name: str):
        if not isinstance(name, str) or not name:
            raise TypeError(f"a widget name must be a non-empty str, got {name!r}")
        old = _LIVE.get(name)
        if old is not None:
            old.close()
        self.name = name
        self.hooks = HookSet(name)
        self.closed = False
        self.widget: Any = None
        _LIVE[name] = self

    # -- display --------------------------------------------------------------------
    def _short(self) -> str:  # the text/plain repr; subclasses describe their state
        return self.kind

    def __repr__(self) -> str:
        return self._short()

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None, **kwargs: Any):
        data = {"text/plain": self._short()}
        if self.widget is not None and not self.closed:
            bundle = self.widget._repr_mimebundle_(include=include, exclude=exclude, **kwargs)
            if isinstance(bundle, tuple):  # (data, metadata)
                bundle = bundle[0]
            data.update({k: v for k, v in (bundle or {}).items() if k != "text/plain"})
        return data

    # -- cleanup --------------------------------------------------------------------
    def _cleanup(self) -> None:  # subclasses undo their own changes (e.g. in-place flags)
        pass

    def close(self) -> None:
        """Remove every hook this widget attached and undo its changes to the model.

        What it shows stays on the page, its controls disabled and a line saying it is closed,
        so a lesson's clean-up cell does not blank the "Try it live" output above it. Run the
        widget's cell again to use it again."""
        self.hooks.clear()
        if not self.closed:
            self.closed = True
            self._cleanup()
            if self.widget is not None:
                _freeze(self.widget)
        if _LIVE.get(self.name) is self:
            del _LIVE[self.name]


CLOSED_NOTE = "closed: its hooks are removed and its controls off; run its cell again to use it"


def _freeze(widget: Any) -> None:
    """Disable every control of ``widget`` and add the closed note; what it shows stays."""
    def disable(w: Any) -> None:
        for child in getattr(w, "children", ()):
            disable(child)
        if hasattr(w, "disabled"):
            w.disabled = True
    disable(widget)
    import ipywidgets as w

    if hasattr(widget, "children"):
        note = w.HTML(f"<span style='color:#666;font-style:italic'>{CLOSED_NOTE}</span>")
        note.add_class("hooktutor-closed")
        widget.children = (*widget.children, note)


def close_all() -> int:
    """Close every live hooktutor widget; return how many were closed."""
    widgets = list(_LIVE.values())
    for w in widgets:
        w.close()
    return len(widgets)


class CheckboxWidget(HookWidget):
    """A widget built around one checkbox (:func:`checkbox_view`): ``value`` reads it, and
    setting it clicks it, so the observer ``_on_change`` attaches, detaches and redraws."""

    def _build(self, description: str, value: bool, css: str, *, side_by_side: bool) -> None:
        self.checkbox, self.status, self.out, self.widget = checkbox_view(
            description, value, css, side_by_side=side_by_side)
        self.checkbox.observe(self._on_change, names="value")

    def _on_change(self, change: dict) -> None:  # subclasses react to a click
        raise NotImplementedError

    @property
    def value(self) -> bool:
        return bool(self.checkbox.value)

    @value.setter
    def value(self, on: bool) -> None:
        self.checkbox.value = bool(on)
