"""Matplotlib figures for what hooks saw. matplotlib is imported on first use only.

Each function returns a closed ``Figure`` (so nothing piles up in pyplot's state);
display it as a cell's last expression, or turn it into PNG bytes with :func:`to_png`.

* :func:`histogram` — an activation's values (lessons 02, 05, the lab).
* :func:`feature_maps` — a conv output's channels as images (lesson 05, the lab).
* :func:`gradient_flow` — the gradient norm per layer (lesson 04, the lab).
* :func:`hook_timeline` — a :class:`hooktutor.trace.HookTrace` drawn (lessons 02 and 04).
* :func:`heatmaps` — images with an overlay such as Grad-CAM (the capstone).
* :func:`line_plot` — named series over steps (the capstone's activation statistics).
* :func:`grid` — a matrix of numbers as colours with the numbers written in (lesson 10's
  activation-patching map: module x position).
* :class:`LiveHistogram`, :class:`LiveGradientFlow`, :class:`LiveFeatureMaps` — figures
  redrawn in place, cheap enough for a widget to redraw on every click (the widgets).
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

import torch


def _plt():
    import matplotlib

    if matplotlib.get_backend().lower() not in {"agg", "module://matplotlib_inline.backend_inline"}:
        try:
            from IPython import get_ipython
            if get_ipython() is None:
                matplotlib.use("Agg")
        except ImportError:
            matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _new(nrows: int = 1, ncols: int = 1, size: tuple[float, float] = (5.0, 3.0), ax: Any = None):
    plt = _plt()
    if ax is not None:
        return ax.figure, ax
    fig, axes = plt.subplots(nrows, ncols, figsize=size, squeeze=False)
    plt.close(fig)
    return fig, axes


def to_png(fig: Any, dpi: int = 72) -> bytes:
    """The figure as PNG bytes (for ``IPython.display.Image`` or a widget)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    return buf.getvalue()


def histogram(values: torch.Tensor, *, title: str = "activations", bins: int = 40, ax: Any = None,
              color: str = "tab:blue"):
    """Histogram of a tensor's values, with the fraction of exact zeros in the title."""
    data = values.detach().float().flatten().cpu()
    fig, axes = _new(ax=ax)
    a = axes if ax is not None else axes[0][0]
    a.hist(data.numpy(), bins=bins, color=color)
    zeros = float((data == 0).float().mean()) if data.numel() else 0.0
    a.set_title(f"{title}  (min {float(data.min()) + 0.0:.2f}, zeros {zeros:.0%})" if data.numel() else title,
                fontsize=9)
    a.set_xlabel("value")
    a.set_ylabel("count")
    return fig


def feature_maps(maps: torch.Tensor, *, title: str = "feature maps", max_maps: int = 8, ax: Any = None):
    """The first ``max_maps`` channels of one image's conv output ``(C, H, W)`` or ``(N, C, H, W)``."""
    t = maps.detach().float().cpu()
    if t.dim() == 4:
        t = t[0]
    if t.dim() != 3:
        raise ValueError(f"feature_maps() wants a (C, H, W) or (N, C, H, W) tensor, got shape {tuple(maps.shape)}")
    n = min(max_maps, t.shape[0])
    fig, axes = _new(1, n, size=(1.2 * n, 1.6))
    lo, hi = float(t[:n].min()), float(t[:n].max())
    for i in range(n):
        a = axes[0][i]
        a.imshow(t[i].numpy(), cmap="RdBu_r" if lo < 0 else "viridis", vmin=min(lo, -hi) if lo < 0 else lo,
                 vmax=max(hi, -lo) if lo < 0 else hi)
        a.set_xticks([])
        a.set_yticks([])
        a.set_title(str(i), fontsize=7)
    fig.suptitle(title, fontsize=9)
    return fig


def gradient_flow(norms: Mapping[str, float], *, title: str = "gradient norm per layer", ax: Any = None,
                  log: bool = True):
    """Bar chart of a gradient norm per layer, in model order (the gradient-flow chart)."""
    fig, axes = _new(size=(5.5, 3.0), ax=ax)
    a = axes if ax is not None else axes[0][0]
    names = list(norms)
    vals = [max(float(norms[n]), 1e-12) for n in names]
    a.bar(range(len(names)), vals, color="tab:orange")
    a.set_xticks(range(len(names)))
    a.set_xticklabels(names, rotation=45, ha="right", fontsize=7)
    if log:
        a.set_yscale("log")
    a.set_title(title, fontsize=9)
    return fig


def hook_timeline(trace: Any, ax: Any = None):
    """Draw a hook trace: modules on the y axis, firing order on the x axis."""
    events = list(trace)
    paths: list[str] = []
    for e in events:
        if e.path not in paths:
            paths.append(e.path)
    markers = {"forward_pre": ("tab:blue", ">"), "forward": ("tab:blue", "o"),
               "backward_pre": ("tab:red", "<"), "backward": ("tab:red", "o"),
               "tensor": ("tab:purple", "s"), "post_accumulate": ("tab:green", "D"),
               "node_pre": ("tab:brown", "<"), "node": ("tab:brown", "o")}
    fig, axes = _new(size=(max(5.0, 0.18 * len(events) + 2), 0.35 * len(paths) + 1.2), ax=ax)
    a = axes if ax is not None else axes[0][0]
    for kind, (color, marker) in markers.items():
        xs = [e.step for e in events if e.kind == kind]
        ys = [paths.index(e.path) for e in events if e.kind == kind]
        if xs:
            a.scatter(xs, ys, c=color, marker=marker, label=kind, s=30)
    a.set_yticks(range(len(paths)))
    a.set_yticklabels(paths, fontsize=7)
    a.invert_yaxis()
    a.set_xlabel("firing order")
    from matplotlib.ticker import MaxNLocator

    a.xaxis.set_major_locator(MaxNLocator(integer=True))
    a.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    a.set_title(f"hook firing order in {trace.model_name}", fontsize=9)
    return fig


def heatmaps(images: torch.Tensor, maps: torch.Tensor, *, titles: Sequence[str] | None = None,
             alpha: float = 0.5):
    """Each image (``(N, 1, H, W)``) with a heatmap (``(N, H, W)``) over it."""
    imgs = images.detach().float().cpu()
    hm = maps.detach().float().cpu()
    n = imgs.shape[0]
    fig, axes = _new(1, n, size=(1.6 * n, 1.9))
    for i in range(n):
        a = axes[0][i]
        a.imshow(imgs[i, 0].numpy(), cmap="gray")
        extent = (-0.5, imgs.shape[-1] - 0.5, imgs.shape[-2] - 0.5, -0.5)
        a.imshow(hm[i].numpy(), cmap="jet", alpha=alpha, extent=extent)
        a.set_xticks([])
        a.set_yticks([])
        if titles is not None:
            a.set_title(titles[i], fontsize=7)
    return fig


def line_plot(series: Mapping[str, Sequence[float]], *, title: str = "", xlabel: str = "step",
              ylabel: str = "", ax: Any = None):
    """One line per named series (for statistics recorded over training)."""
    fig, axes = _new(size=(5.0, 3.0), ax=ax)
    a = axes if ax is not None else axes[0][0]
    for name, values in series.items():
        a.plot(list(values), label=name)
    a.set_title(title, fontsize=9)
    a.set_xlabel(xlabel)
    a.set_ylabel(ylabel)
    if series:
        a.legend(fontsize=7)
    return fig


def grid(values: torch.Tensor, *, rows: Sequence[str], cols: Sequence[str], title: str = "",
         xlabel: str = "", decimals: int = 1, vmin: float = 0.0, vmax: float = 1.0):
    """A 2-D tensor as a coloured grid, each cell labelled with its value at ``decimals``
    (the colours are drawn from the rounded values too, so the picture is the same on every
    CPU). ``10_transformer_hooks.ipynb``: how much of the clean answer patching brings back."""
    shown = torch.round(values.detach().float().cpu() * 10 ** decimals) / 10 ** decimals + 0.0
    fig, axes = _new(size=(0.6 * len(cols) + 1.8, 0.45 * len(rows) + 1.0))
    a = axes[0][0]
    image = a.imshow(shown.numpy(), cmap="Blues", vmin=vmin, vmax=vmax, aspect="auto")
    a.set_xticks(range(len(cols)))
    a.set_xticklabels(list(cols), fontsize=8)
    a.set_yticks(range(len(rows)))
    a.set_yticklabels(list(rows), fontsize=8)
    for i in range(shown.shape[0]):
        for j in range(shown.shape[1]):
            v = float(shown[i, j])
            a.text(j, i, f"{v:.{decimals}f}", ha="center", va="center", fontsize=7,
                   color="white" if v > (vmin + vmax) / 2 else "black")
    a.set_xlabel(xlabel, fontsize=8)
    a.set_title(title, fontsize=9)
    fig.colorbar(image, ax=a, fraction=0.05)
    return fig


# -- Live figures: redrawn in place for the widgets (hooktutor.widgets) ----------------------
# A widget redraws its views on every click. Building a new figure each time costs
# 50-250 ms on a small CPU; these keep one figure (no pyplot state, fixed layout, fixed low
# dpi) and only update its artists, which is several times cheaper. Used by the widgets of
# lessons 01-05 and the panel of ``06_hook_lab.ipynb``.

# What a widget draws must be legible on a laptop (1366x768): text at least as large as the
# notebook's code font (about 13 px). 10 pt at 100 dpi is 13.9 px, and the widgets show their
# pictures at their natural size. One place for both numbers: tests/browser/test_learner_hour.py
# checks them on the page.
WIDGET_DPI = 100
WIDGET_FONT_PT = 10.0


def widget_text_px(scale: float = 1.0) -> float:
    """The height in CSS pixels of a widget's text, shown at ``scale`` times its natural size."""
    return WIDGET_FONT_PT * WIDGET_DPI / 72 * scale


def _agg_figure(size: tuple[float, float], dpi: int):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, dpi=dpi)
    FigureCanvasAgg(fig)
    return fig


def _png_of(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=fig.dpi)
    return buf.getvalue()


class LiveHistogram:
    """A histogram redrawn in place: ``png(values, title)`` returns PNG bytes.

    The title carries the minimum and the fraction of exact zeros, like :func:`histogram`.
    """

    def __init__(self, *, bins: int = 30, size: tuple[float, float] = (4.4, 2.2), dpi: int = WIDGET_DPI,
                 color: str = "tab:blue"):
        import numpy as np

        self.bins = bins
        self.fig = _agg_figure(size, dpi)
        self.ax = self.fig.add_axes((0.12, 0.15, 0.85, 0.72))
        self.bars = self.ax.bar(np.arange(bins), np.zeros(bins), width=1.0, align="edge", color=color)
        self.ax.tick_params(labelsize=WIDGET_FONT_PT)
        self.title = self.ax.set_title("", fontsize=WIDGET_FONT_PT)

    def png(self, values: torch.Tensor, title: str = "activations") -> bytes:
        import numpy as np

        data = values.detach().float().flatten().cpu().numpy()
        if data.size == 0:
            data = np.zeros(1, dtype=np.float32)
        lo, hi = float(data.min()), float(data.max())
        if hi - lo < 1e-12:
            lo, hi = lo - 0.5, hi + 0.5
        counts, edges = np.histogram(data, bins=self.bins, range=(lo, hi))
        width = edges[1] - edges[0]
        for bar, c, x0 in zip(self.bars, counts, edges[:-1]):
            bar.set_x(float(x0))
            bar.set_width(float(width))
            bar.set_height(float(c))
        self.ax.set_xlim(lo, hi)
        self.ax.set_ylim(0, max(1.0, float(counts.max()) * 1.05))
        zeros = float((data == 0).mean())
        self.title.set_text(f"{title}  (min {float(data.min()) + 0.0:.2f}, zeros {zeros:.0%})")
        return _png_of(self.fig)


class LiveGradientFlow:
    """The gradient-flow chart redrawn in place: one horizontal bar per layer (log scale),
    ``png(norms, title)`` returns PNG bytes. A layer whose gradient is exactly zero is marked
    ``= 0`` next to its name."""

    def __init__(self, names: Sequence[str], *, size: tuple[float, float] | None = None, dpi: int = WIDGET_DPI,
                 color: str = "tab:orange"):
        import numpy as np
        from matplotlib.ticker import LogLocator, NullLocator

        self.names = list(names)
        n = max(1, len(self.names))
        height = 0.8 + 0.22 * n
        self.fig = _agg_figure(size or (4.6, height), dpi)
        self.ax = self.fig.add_axes((0.34, 0.45 / height, 0.61, 1 - 0.8 / height))
        self.bars = self.ax.barh(np.arange(n), np.ones(n), color=color)
        self.ax.set_yticks(np.arange(n))
        self.ax.set_ylim(n - 0.5, -0.5)
        self.ax.set_xscale("log")
        self.ax.xaxis.set_major_locator(LogLocator(numticks=5))
        self.ax.xaxis.set_minor_locator(NullLocator())
        self.ax.tick_params(labelsize=WIDGET_FONT_PT)
        self.title = self.ax.set_title("", fontsize=WIDGET_FONT_PT)

    def png(self, norms: Mapping[str, float], title: str = "gradient norm per layer") -> bytes:
        import math

        vals = [float(norms.get(n, 0.0)) for n in self.names]
        positive = [v for v in vals if v > 0 and math.isfinite(v)]
        top = 10 ** math.ceil(math.log10(max(positive))) if positive else 1.0
        bottom = 10 ** math.floor(math.log10(min(positive))) if positive else top / 1e3
        bottom = min(bottom, top / 100)
        for bar, v in zip(self.bars, vals):
            bar.set_x(bottom)
            bar.set_width(max(v - bottom, 0.0) if math.isfinite(v) else 0.0)
        self.ax.set_xlim(bottom, top)
        self.ax.set_yticklabels([n if v > 0 else f"{n} = 0" for n, v in zip(self.names, vals)])
        self.title.set_text(title)
        return _png_of(self.fig)


class LiveFeatureMaps:
    """The first ``max_maps`` channels of image 0 of a conv output, redrawn in place."""

    def __init__(self, *, max_maps: int = 8, size: tuple[float, float] = (4.8, 1.0), dpi: int = WIDGET_DPI):
        import numpy as np

        self.max_maps = max_maps
        self.fig = _agg_figure(size, dpi)
        self.axes = [self.fig.add_axes((i / max_maps + 0.005, 0.02, 1 / max_maps - 0.01, 0.72))
                     for i in range(max_maps)]
        self.images = []
        for a in self.axes:
            self.images.append(a.imshow(np.zeros((2, 2)), cmap="RdBu_r", vmin=-1, vmax=1))
            a.set_axis_off()
        self.title = self.fig.suptitle("", fontsize=WIDGET_FONT_PT)

    def png(self, maps: torch.Tensor, title: str = "feature maps") -> bytes:
        t = maps.detach().float().cpu()
        if t.dim() == 4:
            t = t[0]
        if t.dim() != 3:
            raise ValueError(f"feature maps need a (C, H, W) or (N, C, H, W) tensor, got shape {tuple(maps.shape)}")
        n = min(self.max_maps, t.shape[0])
        lim = max(float(t[:n].abs().max()), 1e-6)
        for i, (a, im) in enumerate(zip(self.axes, self.images)):
            a.set_visible(i < n)
            if i < n:
                im.set_data(t[i].numpy())
                im.set_extent((-0.5, t.shape[2] - 0.5, t.shape[1] - 0.5, -0.5))
                im.set_clim(-lim, lim)
        self.title.set_text(title)
        return _png_of(self.fig)
