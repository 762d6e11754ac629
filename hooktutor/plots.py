"""Matplotlib figures for what hooks saw. matplotlib is imported on first use only.

Each function returns a closed ``Figure`` (so nothing piles up in pyplot's state);
display it as a cell's last expression, or turn it into PNG bytes with :func:`to_png`.

* :func:`histogram` — an activation's values (lessons 02, 05, the lab).
* :func:`feature_maps` — a conv output's channels as images (lesson 05, the lab).
* :func:`gradient_flow` — the gradient norm per layer (lesson 04, the lab).
* :func:`hook_timeline` — a :class:`hooktutor.trace.HookTrace` drawn (lessons 02 and 04).
* :func:`heatmaps` — images with an overlay such as Grad-CAM (the capstone).
* :func:`line_plot` — named series over steps (the capstone's activation statistics).
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
    a.set_title(f"{title}  (min {float(data.min()):.2f}, zeros {zeros:.0%})" if data.numel() else title,
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
               "tensor": ("tab:purple", "s"), "post_accumulate": ("tab:green", "D")}
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
