"""``saved_tensors_toggle``: one checkbox that packs the activations autograd saves for backward
into bfloat16, with ``torch.autograd.graph.saved_tensors_hooks``, and a chart of the bytes each
layer saves (``09_autograd_graph_hooks.ipynb``, "Try it live").

After every click the widget runs one forward and backward pass of its copy of the model, with
the pack/unpack pair on or off, counts the bytes each layer's saved activations take (weights
are saved too, but a model keeps them anyway: they are not packed and not counted), and compares
the output and the gradients with a plain float32 pass. The model passed in is never modified.
"""

from __future__ import annotations

import copy
import html
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..selection import check_model
from ._base import CheckboxWidget
from ._render import PngView, fingerprint, style


@dataclass
class SavedRun:
    """One forward and backward pass: the bytes of activations each layer saved (as stored, after
    packing), the output, and the gradients of the parameters (``09_autograd_graph_hooks.ipynb``)."""

    per_layer: dict[str, int]
    output: torch.Tensor
    grads: list[torch.Tensor]

    @property
    def total(self) -> int:
        return sum(self.per_layer.values())


def saved_run(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, *, bfloat16: bool) -> SavedRun:
    """One cross-entropy forward and backward pass of ``model``, with the activations it saves packed into
    bfloat16 or not. The bytes of each activation, as stored, go to the leaf module that ran last (a forward
    pre-hook on each leaf says which); ``model``'s ``.grad`` is left as it was. ``09_autograd_graph_hooks.ipynb``."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    per_layer: dict[str, int] = {}
    running = [""]
    leaves = [(n, m) for n, m in model.named_modules() if not list(m.children())]
    handles = [m.register_forward_pre_hook(lambda mod, args, n=n: running.__setitem__(0, n)) for n, m in leaves]

    def count(tensor: torch.Tensor) -> None:
        if tensor.untyped_storage().data_ptr() not in params:
            per_layer[running[0]] = per_layer.get(running[0], 0) + tensor.numel() * tensor.element_size()

    saved_grads = [p.grad for p in model.parameters()]
    try:
        for p in model.parameters():
            p.grad = None
        with _counted(count, bfloat16, model):
            output = model(inputs)
        nn.functional.cross_entropy(output, targets).backward()  # the loss's own saved tensors: not counted
        grads = [p.grad.detach().clone() for p in model.parameters()]
    finally:
        for h in handles:
            h.remove()
        for p, g in zip(model.parameters(), saved_grads):
            p.grad = g
    return SavedRun(per_layer, output.detach(), grads)


@contextmanager
def _counted(count: Any, bfloat16: bool, model: nn.Module) -> Iterator[None]:
    """``saved_tensors_hooks`` that pass each saved tensor, as it will be stored, to ``count``; with
    ``bfloat16``, float32 activations (not the model's parameters, which it keeps anyway) are stored in
    bfloat16 and turned back into float32 when backward needs them."""
    if not bfloat16:
        def pack(tensor: torch.Tensor) -> torch.Tensor:
            count(tensor)
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            yield
        return
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}

    def pack16(tensor: torch.Tensor) -> Any:
        if tensor.dtype != torch.float32 or tensor.untyped_storage().data_ptr() in params:
            count(tensor)
            return tensor
        small = tensor.to(torch.bfloat16)
        count(small)
        return (tensor.dtype, small)

    def unpack16(packed: Any) -> torch.Tensor:
        return packed if isinstance(packed, torch.Tensor) else packed[1].to(packed[0])

    with torch.autograd.graph.saved_tensors_hooks(pack16, unpack16):
        yield


def relative_error(got: list[torch.Tensor], want: list[torch.Tensor]) -> float:
    """``||got - want|| / ||want||`` over all the tensors together (``09_autograd_graph_hooks.ipynb``)."""
    num = torch.stack([(a - b).pow(2).sum() for a, b in zip(got, want)]).sum().sqrt()
    den = torch.stack([b.pow(2).sum() for b in want]).sum().sqrt()
    return float(num / den)


class SavedTensorsToggle(CheckboxWidget):
    """A checkbox for a bfloat16 pack/unpack pair around one training step; see :func:`saved_tensors_toggle`.

    ``value`` is the checkbox; setting it reruns the step at once. ``run`` is the last step's
    :class:`SavedRun`, ``reference`` the plain float32 one, ``error`` the gradients' relative error,
    ``status_text`` the status line.
    """

    kind = "SavedTensorsToggle"

    def __init__(self, model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, *, name: str | None = None):
        check_model(model, "saved_tensors_toggle")
        super().__init__(name or f"saved_tensors_toggle:{type(model).__name__}")
        self.model = copy.deepcopy(model)  # the widget's own copy: the model passed in is never touched
        self.inputs, self.targets = inputs, targets
        self.layers = [n for n, m in self.model.named_modules() if not list(m.children())]
        self.reference = saved_run(self.model, inputs, targets, bfloat16=False)
        self.run = self.reference
        self.error = 0.0
        self.status_text = ""
        self._build("keep the saved activations in bfloat16 (a pack/unpack pair)", False,
                    "hooktutor-saved-toggle", side_by_side=True)
        self._view = PngView(self.out)
        self.refresh()

    def _on_change(self, change: dict) -> None:
        if not self.closed:
            self.refresh()

    def refresh(self) -> None:
        """Run the step with the checkbox's setting and redraw the status line and the chart."""
        if self.closed:
            return
        self.run = saved_run(self.model, self.inputs, self.targets, bfloat16=self.value) if self.value \
            else self.reference
        self.error = relative_error(self.run.grads, self.reference.grads)
        same = torch.equal(self.run.output, self.reference.output)
        text = (f"bfloat16 {'on' if self.value else 'off'} · activations saved: {self.run.total:,} bytes "
                f"(float32: {self.reference.total:,}) · forward output {'identical' if same else 'changed'} · "
                f"gradients off by {self.error:.2%}")
        self.status_text = text
        self.status.value = f"<span class='hooktutor-saved'>{html.escape(text)}</span>"
        self._view.show(fingerprint("saved", self.layers, self.run.per_layer), self._draw, "bytes saved per layer")

    def _draw(self) -> bytes:
        from ..plots import LiveGradientFlow

        title = "bytes of activations saved\nfor backward, per layer"
        fig = self._view.figure("bytes", lambda: LiveGradientFlow(self.layers, color="tab:green", title=title,
                                                                  **style("bars per layer")))
        return fig.png({n: float(self.run.per_layer.get(n, 0)) for n in self.layers}, title)

    def _short(self) -> str:
        return f"SavedTensorsToggle(bfloat16 {'on' if self.value else 'off'}, {len(self.layers)} layers)"


def saved_tensors_toggle(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, *,
                         name: str | None = None) -> SavedTensorsToggle:
    """A checkbox that packs the activations autograd saves for backward into bfloat16 (ticked) or keeps
    them in float32 (unticked), with ``torch.autograd.graph.saved_tensors_hooks``, and a chart of the bytes
    each layer saves; the status line compares the output and the gradients with float32. One
    cross-entropy step of a copy of ``model`` on ``inputs`` and ``targets`` per click; ``toggle.value = True``
    clicks it from code; creating one under the same ``name`` replaces the old one.
    ``09_autograd_graph_hooks.ipynb``.
    """
    return SavedTensorsToggle(model, inputs, targets, name=name)
