"""``patch_picker``: pick a module and a position, patch that one activation from the clean run
into the corrupted one, and watch the logits move (``10_transformer_hooks.ipynb``, "Try it live").

The clean run is cached once, when the widget is made (a forward hook per module, copies).
Each pick then costs one forward of the corrupted batch with one short-lived forward hook
(removed in a ``finally`` before anything is drawn) and one redraw of a small bar chart.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from ..i18n import tr, tr_line
from ..selection import check_model
from ._base import HookWidget, ipw, left_aligned
from ._render import PngView, fingerprint, style

NO_PATCH = "(no patch)"


def cache_outputs(model: nn.Module, tokens: torch.Tensor, names: Sequence[str]) -> tuple[torch.Tensor, dict]:
    """``(logits, {name: a copy of that module's output})`` of one run; every hook removed after."""
    cache: dict[str, torch.Tensor] = {}
    handles = [model.get_submodule(n).register_forward_hook(
        lambda m, a, o, n=n: cache.__setitem__(n, o.detach().clone())) for n in names]
    try:
        with torch.no_grad():
            logits = model(tokens)
    finally:
        for h in handles:
            h.remove()
    return logits, cache


def patched_logits(model: nn.Module, tokens: torch.Tensor, module: nn.Module, position: int,
                   clean: torch.Tensor) -> torch.Tensor:
    """The logits of ``model(tokens)`` with ``module``'s output at ``position`` replaced by ``clean``'s."""
    def patch(mod: nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor:
        out = output.clone()
        out[:, position] = clean[:, position]
        return out

    handle = module.register_forward_hook(patch)
    try:
        with torch.no_grad():
            return model(tokens)
    finally:
        handle.remove()


def recovery(logits: torch.Tensor, clean_logits: torch.Tensor, corrupt_logits: torch.Tensor,
             right: torch.Tensor, wrong: torch.Tensor) -> float:
    """How much of the clean answer a patched run gets back, at the last position: the mean logit
    difference ``logit[right] - logit[wrong]`` moved from the corrupted run's (0) to the clean
    run's (1); ``nan`` when the clean and corrupted runs give the same difference."""
    def diff(out: torch.Tensor) -> torch.Tensor:
        last = out[:, -1]
        return (last.gather(1, right[:, None]) - last.gather(1, wrong[:, None])).mean()

    base, span = diff(corrupt_logits), diff(clean_logits) - diff(corrupt_logits)
    if abs(float(span)) < 1e-6:  # the two runs answer alike: nothing to recover
        return float("nan")
    return float((diff(logits) - base) / span)


class _LogitBars:
    """Grouped bars, redrawn in place: the last position's logits of one example in the clean,
    corrupted and patched runs."""

    SERIES = ("clean", "corrupted", "patched")

    def __init__(self, vocab: int, *, size: tuple[float, float], dpi: int, fontsize: float):
        import numpy as np

        from ..plots import _agg_figure, _fit

        self.fig = _agg_figure(size, dpi)
        self.ax = self.fig.add_subplot()
        x = np.arange(vocab)
        self.bars = [self.ax.bar(x + (i - 1) * 0.27, np.zeros(vocab), width=0.27, label=label)
                     for i, label in enumerate(self.SERIES)]
        self.ax.set_xticks(x)
        self.ax.set_xticklabels([f"token {i}" for i in range(vocab)])
        self.ax.axhline(0, color="black", linewidth=0.5)
        self.ax.tick_params(labelsize=fontsize)
        self.ax.legend(fontsize=fontsize, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        self.title = self.ax.set_title("last position, example 0:\nclean answer 0, corrupted 0", fontsize=fontsize)
        self.ax.set_ylim(-88.8, 88.8)  # the widest labels, for the layout
        _fit(self.fig)

    def png(self, rows: Sequence[torch.Tensor], title: str) -> bytes:
        from ..plots import _png_of

        top = max(1.0, max(float(r.abs().max()) for r in rows)) * 1.1
        for bars, row in zip(self.bars, rows):
            for bar, value in zip(bars, row.tolist()):
                bar.set_height(value)
        self.ax.set_ylim(-top, top)
        self.title.set_text(title)
        return _png_of(self.fig)


class PatchPicker(HookWidget):
    """A module dropdown and a position slider for activation patching; see :func:`patch_picker`.

    ``pick(name, position)`` does what the controls do. After each pick: ``recovery`` (the share of
    the clean answer back, over the whole batch), ``logits`` (the last position's logits of
    example ``example`` in the clean, corrupted and patched runs) and ``status_text``.
    """

    kind = "PatchPicker"

    def __init__(self, model: nn.Module, clean_tokens: torch.Tensor, corrupt_tokens: torch.Tensor,
                 names: Sequence[str], *, example: int = 0, name: str | None = None):
        check_model(model, "patch_picker")
        if clean_tokens.shape != corrupt_tokens.shape or clean_tokens.dim() != 2:
            raise ValueError("clean_tokens and corrupt_tokens must be (N, L) token ids of the same shape, got "
                             f"{tuple(clean_tokens.shape)} and {tuple(corrupt_tokens.shape)}")
        names = list(names)
        for n in names:
            model.get_submodule(n)  # an unknown name fails here, with torch's message
        super().__init__(name or f"patch_picker:{type(model).__name__}")
        self.model, self.names, self.example = model, names, example
        self.clean_tokens, self.corrupt_tokens = clean_tokens, corrupt_tokens
        self.right, self.wrong = clean_tokens[:, 0], corrupt_tokens[:, 0]
        self.clean_logits, self.cache = cache_outputs(model, clean_tokens, names)  # the cached clean run
        with torch.no_grad():
            self.corrupt_logits = model(corrupt_tokens)
        self.recovery = 0.0
        self.logits: dict[str, torch.Tensor] = {}
        self.status_text = ""
        w = ipw()
        self.dropdown = w.Dropdown(options=[NO_PATCH, *names], value=NO_PATCH, description=tr("patch"),
                                   layout=w.Layout(width="220px"))
        self.slider = w.IntSlider(value=0, min=0, max=clean_tokens.shape[1] - 1, description=tr("position"),
                                  continuous_update=False, layout=w.Layout(width="300px"))
        self.status = w.HTML()
        self.out = w.Output(layout=w.Layout(min_height="40px"))
        for part, css in ((self.dropdown, "hooktutor-toggle"), (self.slider, "hooktutor-toggle"),
                          (self.status, "hooktutor-status"), (self.out, "hooktutor-view")):
            part.add_class(css)
        self.widget = w.VBox([w.HBox([self.dropdown, self.slider]), self.status, self.out])
        self.widget.add_class("hooktutor-patch-picker")
        self._view = PngView(self.out)
        vocab = int(self.clean_logits.shape[-1])
        self._bars = self._view.figure("logits", lambda: _LogitBars(vocab, **style("logits")))
        self._setting = False
        self.dropdown.observe(self._on_change, names="value")
        self.slider.observe(self._on_change, names="value")
        self.refresh()

    def _on_change(self, change: dict) -> None:
        if not self.closed and not self._setting:
            self.refresh()

    def pick(self, name: str, position: int) -> float:
        """Patch module ``name`` (or ``"(no patch)"``) at ``position``; return the recovery."""
        self._setting = True  # both controls change: one run, not two
        try:
            self.slider.value = position
            self.dropdown.value = name
        finally:
            self._setting = False
        self.refresh()
        return self.recovery

    def refresh(self) -> None:
        """Run the corrupted batch with the picked patch and redraw."""
        if self.closed:
            return
        name, position = self.dropdown.value, int(self.slider.value)
        if name == NO_PATCH:
            logits = self.corrupt_logits
            what = "no patch: the corrupted run"
        else:
            logits = patched_logits(self.model, self.corrupt_tokens, self.model.get_submodule(name), position,
                                    self.cache[name])
            what = f"{name} patched at position {position}"
        self.recovery = recovery(logits, self.clean_logits, self.corrupt_logits, self.right, self.wrong)
        i = self.example
        self.logits = {"clean": self.clean_logits[i, -1], "corrupted": self.corrupt_logits[i, -1],
                       "patched": logits[i, -1]}
        back = "undefined (the clean and corrupted runs answer alike)" if self.recovery != self.recovery \
            else f"{self.recovery:.0%} (mean over {len(logits)} pairs)"
        self.status_text = f"{what} · clean answer back: {back}"
        shown = html.escape(tr_line(self.status_text))
        self.status.value = left_aligned(f"<span class='hooktutor-recovery'>{shown}</span>")
        title = (f"last position, example {i}:\nclean answer {int(self.right[i])}, "
                 f"corrupted {int(self.wrong[i])}")
        rows = [self.logits[k] for k in _LogitBars.SERIES]
        self._view.show(fingerprint("patch", name, position, *rows), lambda: self._bars.png(rows, title),
                        "logits at the last position")

    def _short(self) -> str:
        picked = self.dropdown.value if self.dropdown.value == NO_PATCH else \
            f"{self.dropdown.value} @ {int(self.slider.value)}"
        return f"PatchPicker({len(self.names)} modules, {self.clean_tokens.shape[1]} positions, {picked})"


def patch_picker(model: nn.Module, clean_tokens: torch.Tensor, corrupt_tokens: torch.Tensor,
                 names: Sequence[str], *, example: int = 0, name: str | None = None) -> Any:
    """A dropdown of ``names`` (modules whose output is ``(N, L, width)``) and a position slider:
    each pick runs ``corrupt_tokens`` with that module's output at that position taken from the
    cached run on ``clean_tokens``, shows how much of the clean answer (the first token, read at
    the last position) comes back over the batch, and draws the last position's logits of one
    example in the clean, corrupted and patched runs. ``picker.pick("blocks.0", 0)`` picks from
    code; ``close()`` ends it. ``10_transformer_hooks.ipynb``.
    """
    return PatchPicker(model, clean_tokens, corrupt_tokens, names, example=example, name=name)
