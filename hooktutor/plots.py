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
    """Histogram of a tensor's values, with the fraction of exact zeros in the title (and the
    number of inf and nan values, which have no bin)."""
    data = values.detach().float().flatten().cpu()
    finite = torch.isfinite(data)
    bad = int(data.numel() - finite.sum())
    data = data[finite]
    fig, axes = _new(ax=ax)
    a = axes if ax is not None else axes[0][0]
    a.hist(data.numpy(), bins=bins, color=color)
    zeros = float((data == 0).float().mean()) if data.numel() else 0.0
    note = f", {bad} inf/nan" if bad else ""
    a.set_title(f"{title}  (min {float(data.min()) + 0.0:.2f}, zeros {zeros:.0%}{note})" if data.numel()
                else f"{title}  ({bad} inf/nan)" if bad else title, fontsize=11)
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
        a.set_title(str(i), fontsize=10)
    fig.suptitle(title, fontsize=11)
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
    a.set_xticklabels(names, rotation=45, ha="right", fontsize=10)
    if log:
        a.set_yscale("log")
    a.set_title(title, fontsize=11)
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
    a.set_yticklabels(paths, fontsize=10)
    a.invert_yaxis()
    a.set_xlabel("firing order")
    from matplotlib.ticker import MaxNLocator

    a.xaxis.set_major_locator(MaxNLocator(integer=True))
    a.legend(fontsize=10, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    a.set_title(f"hook firing order in {trace.model_name}", fontsize=11)
    return fig


def heatmaps(images: torch.Tensor, maps: torch.Tensor, *, titles: Sequence[str] | None = None,
             alpha: float = 0.5):
    """Each image (``(N, 1, H, W)``) with a heatmap (``(N, H, W)``) over it."""
    imgs = images.detach().float().cpu()
    hm = maps.detach().float().cpu()
    n = imgs.shape[0]
    # at most 900 px wide at 100 dpi (a laptop's notebook column, 930 px, shows it unscaled), titles
    # in 10 points (14 px, the notebook's code font)
    width = min(1.6 * n, 9.0)
    fig, axes = _new(1, n, size=(width, width / n + 0.35))
    fig.subplots_adjust(left=0.005, right=0.995, bottom=0.01, top=1 - 0.3 / (width / n + 0.35), wspace=0.06)
    for i in range(n):
        a = axes[0][i]
        a.imshow(imgs[i, 0].numpy(), cmap="gray")
        extent = (-0.5, imgs.shape[-1] - 0.5, imgs.shape[-2] - 0.5, -0.5)
        a.imshow(hm[i].numpy(), cmap="jet", alpha=alpha, extent=extent)
        a.set_xticks([])
        a.set_yticks([])
        if titles is not None:
            a.set_title(titles[i], fontsize=10)
    return fig


def line_plot(series: Mapping[str, Sequence[float]], *, title: str = "", xlabel: str = "step",
              ylabel: str = "", ax: Any = None):
    """One line per named series (for statistics recorded over training)."""
    fig, axes = _new(size=(5.0, 3.0), ax=ax)
    a = axes if ax is not None else axes[0][0]
    for name, values in series.items():
        a.plot(list(values), label=name)
    a.set_title(title, fontsize=11)
    a.set_xlabel(xlabel)
    a.set_ylabel(ylabel)
    if series:
        a.legend(fontsize=10)
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
    a.set_xticklabels(list(cols), fontsize=10)
    a.set_yticks(range(len(rows)))
    a.set_yticklabels(list(rows), fontsize=10)
    for i in range(shown.shape[0]):
        for j in range(shown.shape[1]):
            v = float(shown[i, j])
            a.text(j, i, f"{v:.{decimals}f}", ha="center", va="center", fontsize=10,
                   color="white" if v > (vmin + vmax) / 2 else "black")
    a.set_xlabel(xlabel, fontsize=10)
    a.set_title(title, fontsize=11)
    fig.colorbar(image, ax=a, fraction=0.05)
    return fig


# -- Live figures: redrawn in place for the widgets (hooktutor.widgets) ----------------------
# A widget redraws its views on every click. Building a new figure each time costs
# 50-250 ms on a small CPU; these keep one figure (no pyplot state, a layout fixed when the
# figure is made, a fixed dpi) and only update its artists, which is several times cheaper.
# Every text in them is ``fontsize`` points: ``hooktutor.widgets._render`` picks the dpi,
# the font size and the figure sizes of every widget picture in one place. Used by the
# widgets of lessons 01-05 and 08-10 and the panel of ``06_hook_lab.ipynb``.

def _agg_figure(size: tuple[float, float], dpi: int):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, dpi=dpi)
    FigureCanvasAgg(fig)
    return fig


def _png_of(fig: Any) -> bytes:
    buf = io.BytesIO()
    # zlib level 1: a few kB larger than the default 6, and several ms faster per picture
    fig.savefig(buf, format="png", dpi=fig.dpi, pil_kwargs={"compress_level": 1})
    return buf.getvalue()


def _fit(fig: Any, pad: float = 0.4) -> None:
    """Place the figure's axes once so that what they show now (ticks, labels, title, legend)
    fits inside it: a Live figure is laid out when it is made, with its widest labels in place,
    and never again (the same data then always gives the same picture, and no redraw pays for a
    layout)."""
    import matplotlib

    fig.tight_layout(pad=pad)  # pad: a fraction of matplotlib's font size
    # tight_layout leaves a placeholder layout engine, and savefig draws a figure that has one
    # twice (a layout pass first): no engine at all, since the layout is done
    with matplotlib.rc_context({"figure.autolayout": False, "figure.constrained_layout.use": False}):
        fig.set_layout_engine(None)


def _count_label(value: float, _pos: Any = None) -> str:
    """An axis count short enough for a narrow chart: 800, 2.5k, 1.2M."""
    if abs(value) >= 1e6:
        return f"{value / 1e6:g}M"
    if abs(value) >= 1e3:
        return f"{value / 1e3:g}k"
    return f"{value:g}"


def _power_label(value: float, _pos: Any = None) -> str:
    """A log axis tick in plain text (no superscripts, which matplotlib draws at 70 % size):
    0.01, 0.1, 1, 10, 100, else 1e-3, 1e5."""
    import math

    if value <= 0:
        return ""
    exp = round(math.log10(value))
    return f"{10.0 ** exp:g}" if -2 <= exp <= 2 else f"1e{exp}"


def all_texts(fig: Any) -> list[Any]:
    """Every text the figure draws (visible, not empty, not on a hidden axis): titles, tick
    labels, axis labels, legends."""
    from matplotlib.text import Text

    def drawn(t: Any) -> bool:
        ax = t.axes
        if ax is None:
            return True
        if not ax.get_visible():
            return False
        return ax.axison or not any(t in axis.findobj(Text) for axis in (ax.xaxis, ax.yaxis))

    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip() and drawn(t)]


def smallest_text_px(fig: Any) -> float:
    """The height in pixels (of the PNG, at the figure's dpi) of the smallest font the figure
    uses: its smallest font size in points times dpi / 72."""
    sizes = [t.get_fontsize() for t in all_texts(fig)]
    return min(sizes) * fig.dpi / 72 if sizes else float("inf")


class LiveHistogram:
    """A histogram redrawn in place: ``png(values, title)`` returns PNG bytes.

    The title carries the minimum and the fraction of exact zeros (on a second line), like
    :func:`histogram`.
    """

    def __init__(self, *, bins: int = 30, size: tuple[float, float] = (3.4, 2.2), dpi: int = 100,
                 fontsize: float = 10.0, color: str = "tab:blue"):
        import numpy as np
        from matplotlib.ticker import FuncFormatter, MaxNLocator

        self.bins = bins
        self.fig = _agg_figure(size, dpi)
        self.ax = self.fig.add_subplot()
        self.bars = self.ax.bar(np.arange(bins), np.zeros(bins), width=1.0, align="edge", color=color)
        self.ax.tick_params(labelsize=fontsize)
        self.ax.xaxis.set_major_locator(MaxNLocator(nbins=5))
        self.ax.yaxis.set_major_locator(MaxNLocator(nbins=4))
        self.ax.yaxis.set_major_formatter(FuncFormatter(_count_label))
        self.title = self.ax.set_title("features.0\nmin -0.00, zeros 100%", fontsize=fontsize)
        self.ax.set_xlim(-10.0, 10.0)  # the widest labels a histogram shows, for the layout
        self.ax.set_ylim(0, 17_500)
        _fit(self.fig)

    def png(self, values: torch.Tensor, title: str = "activations") -> bytes:
        import numpy as np

        data = values.detach().float().flatten().cpu().numpy()
        finite = np.isfinite(data)
        bad = int(data.size - finite.sum())   # inf and nan have no bin: counted in the title
        data = data[finite]
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
        note = f", {bad} inf/nan" if bad else ""
        self.title.set_text(f"{title}\nmin {float(data.min()) + 0.0:.2f}, zeros {zeros:.0%}{note}")
        return _png_of(self.fig)


class LiveGradientFlow:
    """The gradient-flow chart redrawn in place: one horizontal bar per layer (log scale),
    ``png(norms, title)`` returns PNG bytes. A layer whose gradient is exactly zero is marked
    ``= 0`` next to its name. Without ``size`` (or with a height of ``None``) the figure is as
    tall as its rows need at ``fontsize``."""

    def __init__(self, names: Sequence[str], *, size: tuple[float, float | None] | None = None,
                 dpi: int = 100, fontsize: float = 10.0, color: str = "tab:orange",
                 title: str = "gradient norm per layer"):
        import numpy as np
        from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

        self.names = list(names)
        n = max(1, len(self.names))
        width, height = size or (3.4, None)
        if height is None:  # a row per layer of 1.6 lines of text, 3.3 lines for the axis, 1.2 per title line
            height = (1.6 * n + 3.3 + 1.2 * (title.count("\n") + 1)) * fontsize / 72
        self.fig = _agg_figure((width, height), dpi)
        self.ax = self.fig.add_subplot()
        self.bars = self.ax.barh(np.arange(n), np.ones(n), color=color)
        self.ax.set_yticks(np.arange(n))
        self.ax.set_ylim(n - 0.5, -0.5)
        self.ax.set_xscale("log")
        self.ax.xaxis.set_major_locator(LogLocator(numticks=4))
        self.ax.xaxis.set_minor_locator(NullLocator())
        self.ax.xaxis.set_major_formatter(FuncFormatter(_power_label))
        self.ax.tick_params(labelsize=fontsize)
        self.title = self.ax.set_title(title, fontsize=fontsize)  # the title's lines, for the layout
        self.ax.set_yticklabels([f"{name} = 0" for name in self.names])  # the widest labels, for the layout
        self.ax.set_xlim(1e-10, 1e5)
        _fit(self.fig)

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
    """The first ``max_maps`` channels of image 0 of a conv output, redrawn in place, in
    ``rows`` rows."""

    def __init__(self, *, max_maps: int = 8, rows: int = 2, size: tuple[float, float] = (3.4, 2.2),
                 dpi: int = 100, fontsize: float = 10.0):
        import numpy as np

        self.max_maps = max_maps
        self.fig = _agg_figure(size, dpi)
        cols = -(-max_maps // rows)
        top = 1 - 2.0 * fontsize / 72 / size[1]  # room for the title: two lines of text
        self.axes = [self.fig.add_axes((c / cols + 0.01, top * (1 - (r + 1) / rows) + 0.01,
                                        1 / cols - 0.02, top / rows - 0.02))
                     for r in range(rows) for c in range(cols)][:max_maps]
        self.images = []
        for a in self.axes:
            self.images.append(a.imshow(np.zeros((2, 2)), cmap="RdBu_r", vmin=-1, vmax=1))
            a.set_axis_off()
        self.title = self.fig.suptitle("", fontsize=fontsize, y=1 - 0.4 * fontsize / 72 / size[1], va="top")

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


class LiveLines:
    """Named series over steps (1, 2, ...), redrawn in place: ``png(series, title)`` returns PNG
    bytes. ``names`` are every series it may show, in order (each keeps its colour); a series
    missing from ``series`` is hidden, and so is its legend entry."""

    def __init__(self, names: Sequence[str], *, size: tuple[float, float] = (4.8, 2.6), dpi: int = 100,
                 fontsize: float = 10.0, xlabel: str = "step", ylabel: str = ""):
        from matplotlib.ticker import MaxNLocator

        self.names = list(names)
        self.fontsize = fontsize
        self.fig = _agg_figure(size, dpi)
        self.ax = self.fig.add_subplot()
        self.lines = {name: self.ax.plot([], [], label=name)[0] for name in self.names}
        self.ax.tick_params(labelsize=fontsize)
        self.ax.xaxis.set_major_locator(MaxNLocator(nbins=6, integer=True))
        self.ax.yaxis.set_major_locator(MaxNLocator(nbins=4))
        self.ax.set_xlabel(xlabel, fontsize=fontsize)
        self.ax.set_ylabel(ylabel, fontsize=fontsize)
        self.title = self.ax.set_title("title", fontsize=fontsize)
        self.ax.set_xlim(0, 100)  # the widest labels, for the layout
        self.ax.set_ylim(-0.0001, 0.0001)
        self.legend = self.ax.legend(fontsize=fontsize, loc="upper right")
        _fit(self.fig)

    def png(self, series: Mapping[str, Sequence[float]], title: str = "") -> bytes:
        import math

        shown = [name for name in self.names if name in series]
        lo = hi = None
        steps = 1
        for name, line in self.lines.items():
            values = [float(v) for v in series.get(name, ())]
            line.set_visible(name in series)
            line.set_data(range(1, len(values) + 1), values)
            finite = [v for v in values if math.isfinite(v)]
            if finite:
                lo = min(finite) if lo is None else min(lo, min(finite))
                hi = max(finite) if hi is None else max(hi, max(finite))
            steps = max(steps, len(values))
        lo, hi = (0.0, 1.0) if lo is None else (lo, hi)
        margin = max(hi - lo, 1e-6) * 0.05
        self.ax.set_xlim(0.5, steps + 0.5)
        self.ax.set_ylim(lo - margin, hi + margin)
        self.legend.remove()
        self.legend = self.ax.legend(handles=[self.lines[n] for n in shown], fontsize=self.fontsize,
                                     loc="upper right")
        self.title.set_text(title)
        return _png_of(self.fig)
