"""Cheap PNG views: one live figure per view (see ``hooktutor.plots.Live*``), a fixed low
dpi, and a fingerprint so a view whose data did not change is not drawn again (a click
usually changes one or two views, not all)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import torch

from ..plots import WIDGET_DPI as DPI  # fixed, so the same data always gives the same picture
from ._base import show_png, show_text


def fingerprint(*parts: Any) -> str:
    """A key that changes whenever any tensor value, number or string in ``parts`` changes."""
    h = hashlib.blake2b(digest_size=16)
    for p in parts:
        if isinstance(p, torch.Tensor):
            t = p.detach().cpu().contiguous()
            h.update(str((tuple(t.shape), t.dtype)).encode())
            h.update(t.numpy().tobytes())
        else:
            h.update(repr(p).encode())
        h.update(b"|")
    return h.hexdigest()


class PngView:
    """An Output widget showing one picture (or a line of text), redrawn only on change."""

    def __init__(self, out: Any):
        self.out = out
        self.key: str | None = None
        self.png: bytes = b""
        self.renders = 0  # how many pictures were actually drawn
        self._figures: dict[str, Any] = {}

    def figure(self, kind: str, make: Callable[[], Any]) -> Any:
        """The live figure of ``kind``, made by ``make()`` on first use and reused after."""
        if kind not in self._figures:
            self._figures[kind] = make()
        return self._figures[kind]

    def show(self, key: str, draw: Callable[[], bytes], alt: str) -> bool:
        """Show ``draw()`` (PNG bytes) unless ``key`` is already shown; return whether it changed."""
        if key == self.key:
            return False
        self.png = draw()
        self.renders += 1
        self.key = key
        show_png(self.out, self.png, alt)
        return True

    def text(self, message: str) -> None:
        key = "text:" + message
        if key != self.key:
            self.key = key
            self.png = b""
            show_text(self.out, message)


def show_activation(view: PngView, name: str, act: torch.Tensor, kind: str = "histogram") -> bool:
    """A histogram of ``act``, or (``kind="feature maps"`` and a 4-D ``act``) its channels."""
    from .. import plots

    if kind == "feature maps" and act.dim() == 4:
        fig = view.figure("maps", lambda: plots.LiveFeatureMaps(dpi=DPI))
        return view.show(fingerprint("maps", name, act), lambda: fig.png(act, f"{name}: image 0, channels 0-7"),
                         f"feature maps of {name}")
    fig = view.figure("hist", lambda: plots.LiveHistogram(dpi=DPI))
    return view.show(fingerprint("hist", name, act), lambda: fig.png(act, name), f"histogram of {name}")


def show_gradients(view: PngView, names: list[str], norms: dict[str, float],
                   title: str = "gradient norm per layer") -> bool:
    """The gradient-flow chart of ``norms`` over the layers ``names``."""
    from .. import plots

    fig = view.figure("grads:" + ",".join(names), lambda: plots.LiveGradientFlow(names, dpi=DPI))
    return view.show(fingerprint("grads", names, norms, title), lambda: fig.png(norms, title),
                     "gradient norm per layer")
