"""Cheap PNG views: one live figure per view (see ``hooktutor.plots.Live*``), a fixed dpi,
and a fingerprint so a view whose data did not change is not drawn again (a click usually
changes one or two views, not all).

The size of every widget picture is chosen here, in one place: ``DPI``, ``FONT_PT`` (every
text in every picture) and ``SIZES`` (inches). A picture is shown at its natural size, so its
text is ``FONT_PX`` pixels high on the page: at 100 dpi and 10 pt, 13.9 px, a little more
than JupyterLab's 13 px code font (checked in Chromium at 1366x768 by
``tests/browser/test_widget_text.py``). Two charts side by side (the HookPanel's) take
``2 * 3.4 * DPI`` = 680 px, which fits beside the panel's controls in a 1366 px wide Lab
with the file browser open."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import torch

from ..i18n import tr
from ._base import show_png, show_text

DPI = 100  # fixed, so the same data always gives the same picture
FONT_PT = 10.0  # every text of every widget picture: titles, ticks, labels, legends
FONT_PX = FONT_PT * DPI / 72  # its height in the PNG (13.9 px), and on the page at natural size

# figure sizes in inches at DPI; a height of None: as tall as the chart's rows need
SIZES: dict[str, tuple[float, float | None]] = {
    "histogram": (3.4, 2.2),  # an activation's values (hook_toggle, inplace_switch, HookPanel)
    "feature maps": (3.4, 2.2),  # 8 channels in 2 rows (HookPanel)
    "bars per layer": (3.4, None),  # gradient norm / bytes saved per layer (hook_toggle, HookPanel, saved)
    "lines": (4.8, 2.6),  # loss per step (ema_toggle)
    "logits": (5.2, 2.6),  # grouped logit bars with a legend (patch_picker)
}


def style(kind: str) -> dict[str, Any]:
    """The keyword arguments of a ``hooktutor.plots.Live*`` figure of ``kind`` (see ``SIZES``)."""
    return {"size": SIZES[kind], "dpi": DPI, "fontsize": FONT_PT}


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
        self.current: Any = None  # the live figure asked for last (the one drawn, or about to be)

    def figure(self, kind: str, make: Callable[[], Any]) -> Any:
        """The live figure of ``kind``, made by ``make()`` on first use and reused after."""
        if kind not in self._figures:
            self._figures[kind] = make()
        self.current = self._figures[kind]
        return self.current

    def text_px(self) -> float | None:
        """The smallest text of the picture shown, in pixels of the PNG (``None`` while it
        shows text, not a picture). Times the page's scale of the image: the size on screen."""
        if not self.png or self.current is None:
            return None
        from ..plots import smallest_text_px

        return smallest_text_px(self.current.fig)

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
            self.current = None
            show_text(self.out, tr(message))


def show_activation(view: PngView, name: str, act: torch.Tensor, kind: str = "histogram") -> bool:
    """A histogram of ``act``, or (``kind="feature maps"`` and a 4-D ``act``) its channels."""
    from .. import plots

    if kind == "feature maps" and act.dim() == 4:
        fig = view.figure("maps", lambda: plots.LiveFeatureMaps(**style("feature maps")))
        return view.show(fingerprint("maps", name, act), lambda: fig.png(act, f"{name}\nimage 0, channels 0-7"),
                         f"feature maps of {name}")
    fig = view.figure("hist", lambda: plots.LiveHistogram(**style("histogram")))
    return view.show(fingerprint("hist", name, act), lambda: fig.png(act, name), f"histogram of {name}")


def show_gradients(view: PngView, names: list[str], norms: dict[str, float],
                   title: str = "gradient norm per layer") -> bool:
    """The gradient-flow chart of ``norms`` over the layers ``names``."""
    from .. import plots

    fig = view.figure("grads:" + ",".join(names),
                      lambda: plots.LiveGradientFlow(names, title=title, **style("bars per layer")))
    return view.show(fingerprint("grads", names, norms, title), lambda: fig.png(norms, title),
                     "gradient norm per layer")
