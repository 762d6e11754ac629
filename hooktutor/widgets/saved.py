"""``saved_tensors_toggle``: one checkbox that keeps the activations autograd saves for backward in
bfloat16, with ``torch.autograd.graph.saved_tensors_hooks``, and a chart of the memory they take,
layer by layer (``09_autograd_graph_hooks.ipynb``, "Try it live").

After every click the widget runs one forward and backward pass of its copy of the model, with
the pack/unpack pair on or off, and compares the output and the gradients with a plain float32
pass. What it shows is measured on what autograd keeps: the storages of the tensors that ``pack``
returned, each counted once (autograd saves a ReLU's output twice, for the ReLU and for the next
Linear: one storage), by its ``nbytes()``. The pair makes one bfloat16 copy per storage, however
often and through whatever views it is saved (a copy per save would cost as much memory as it saves,
and so would a copy per tensor object on a contiguous 3-D input, of which each Linear saves a flattened
view: another object over the same storage). Weights are saved too, but a model keeps them anyway:
they are not packed and not counted. The model passed in is never modified.
"""

from __future__ import annotations

import copy
import html
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..i18n import tr_line
from ..selection import check_model
from ._base import CheckboxWidget, left_aligned
from ._render import PngView, fingerprint, style


@dataclass
class SavedRun:
    """One forward and backward pass (``09_autograd_graph_hooks.ipynb``): ``per_layer``, the bytes of
    memory that what autograd keeps of the activations takes, each storage counted once, in the layer
    that saved it first (0 for a layer that only saved tensors saved before); ``handed``, the bytes
    of the activations handed to ``pack``, counted at each save; the output; the gradients."""

    per_layer: dict[str, int]
    handed: int
    output: torch.Tensor
    grads: list[torch.Tensor]

    @property
    def total(self) -> int:
        return sum(self.per_layer.values())


def memory_by_layer(kept: list[tuple[str, torch.Tensor]]) -> dict[str, int]:
    """``{layer: bytes}`` for ``(layer, tensor)`` pairs that are all alive: each tensor's storage
    (``untyped_storage().nbytes()``) counted once, in the first layer that holds it."""
    first: dict[int, tuple[str, int]] = {}
    per_layer: dict[str, int] = {}
    for layer, tensor in kept:
        storage = tensor.untyped_storage()
        per_layer.setdefault(layer, 0)
        first.setdefault(storage.data_ptr(), (layer, storage.nbytes()))
    for layer, nbytes in first.values():
        per_layer[layer] += nbytes
    return per_layer


def saved_run(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, *, bfloat16: bool) -> SavedRun:
    """One cross-entropy forward and backward pass of ``model``, with the activations it saves kept in
    bfloat16 (one copy per storage) or not. What autograd keeps of each activation goes to the leaf module
    that ran last (a forward pre-hook on each leaf says which); ``model``'s ``.grad`` is left as it was.
    ``09_autograd_graph_hooks.ipynb``."""
    running = [""]
    leaves = [(n, m) for n, m in model.named_modules() if not list(m.children())]
    handles = [m.register_forward_pre_hook(lambda mod, args, n=n: running.__setitem__(0, n)) for n, m in leaves]
    kept: list[tuple[str, torch.Tensor]] = []  # alive until counted, so that no address is reused
    handed = [0]

    def keep(tensor: torch.Tensor, stored: torch.Tensor) -> None:
        handed[0] += tensor.numel() * tensor.element_size()
        kept.append((running[0], stored))

    saved_grads = [p.grad for p in model.parameters()]
    try:
        for p in model.parameters():
            p.grad = None
        with _counted(keep, bfloat16, model):
            output = model(inputs)
        per_layer = memory_by_layer(kept)
        kept.clear()
        nn.functional.cross_entropy(output, targets).backward()  # the loss's own saved tensors: not counted
        grads = [p.grad.detach().clone() for p in model.parameters()]
    finally:
        for h in handles:
            h.remove()
        for p, g in zip(model.parameters(), saved_grads):
            p.grad = g
    return SavedRun(per_layer, handed[0], output.detach(), grads)


@contextmanager
def _counted(keep: Callable[[torch.Tensor, torch.Tensor], None], bfloat16: bool,
             model: nn.Module) -> Iterator[None]:
    """``saved_tensors_hooks`` that call ``keep(activation, what autograd stores of it)`` for each
    activation saved (not the model's parameters, which it keeps anyway: they are stored as they are).
    With ``bfloat16``, a float32 activation is stored as a view of a bfloat16 copy of its whole storage,
    one copy per storage and version however often and through whatever views it is saved (of a contiguous
    3-D input a Linear saves a flattened view: another tensor object over the same memory),
    and turned back into float32 when backward needs it."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    # (storage address, version) -> (a weak reference to the tensor that owns the storage, its bfloat16 copy)
    copies: dict[tuple[int, int], tuple[weakref.ref, torch.Tensor]] = {}

    def pack(tensor: torch.Tensor) -> Any:
        storage = tensor.untyped_storage()
        if storage.data_ptr() in params:
            return tensor
        if not bfloat16 or tensor.dtype != torch.float32:
            keep(tensor, tensor)
            return tensor
        # an in-place edit bumps the version (shared by all views): the edited memory gets a new copy
        key = (storage.data_ptr(), tensor._version)
        if key not in copies:
            whole = tensor.new_empty(0).set_(storage)  # the whole storage, as a flat float32 tensor
            # the entry goes when the owner dies (a view's base, or the tensor): until then the storage lives,
            # so no other storage can have its address
            owner = tensor if tensor._base is None else tensor._base
            copies[key] = (weakref.ref(owner, lambda _: copies.pop(key, None)), whole.to(torch.bfloat16))
        small = copies[key][1].as_strided(tensor.shape, tensor.stride(), tensor.storage_offset())
        keep(tensor, small)
        return (tensor.dtype, small)

    def unpack(packed: Any) -> torch.Tensor:
        return packed if isinstance(packed, torch.Tensor) else packed[1].to(packed[0])

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        yield


def relative_error(got: list[torch.Tensor], want: list[torch.Tensor]) -> float:
    """``||got - want|| / ||want||`` over all the tensors together (``09_autograd_graph_hooks.ipynb``)."""
    num = torch.stack([(a - b).pow(2).sum() for a, b in zip(got, want)]).sum().sqrt()
    den = torch.stack([b.pow(2).sum() for b in want]).sum().sqrt()
    return float(num / den)


class SavedTensorsToggle(CheckboxWidget):
    """A checkbox for a bfloat16 pack/unpack pair (one copy per storage) around one training step; see
    :func:`saved_tensors_toggle`.

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
        text = (f"bfloat16 {'on' if self.value else 'off'} · saved activations in memory: {self.run.total:,} "
                f"bytes (float32: {self.reference.total:,}; handed to pack, each save counted: "
                f"{self.run.handed:,}) · forward output {'identical' if same else 'changed'} · "
                f"gradients off by {self.error:.2%}")
        self.status_text = text
        self.status.value = left_aligned(f"<span class='hooktutor-saved'>{html.escape(tr_line(text))}</span>")
        self._view.show(fingerprint("saved", self.layers, self.run.per_layer), self._draw,
                        "memory of the saved activations per layer")

    def _draw(self) -> bytes:
        from ..plots import LiveGradientFlow

        title = "memory of the activations\nkept for backward, per layer"
        fig = self._view.figure("bytes", lambda: LiveGradientFlow(self.layers, color="tab:green", title=title,
                                                                  **style("bars per layer")))
        return fig.png({n: float(self.run.per_layer.get(n, 0)) for n in self.layers}, title)

    def _short(self) -> str:
        return f"SavedTensorsToggle(bfloat16 {'on' if self.value else 'off'}, {len(self.layers)} layers)"


def saved_tensors_toggle(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, *,
                         name: str | None = None) -> SavedTensorsToggle:
    """A checkbox that keeps the activations autograd saves for backward in bfloat16, one copy per storage
    (ticked), or in float32 (unticked), with ``torch.autograd.graph.saved_tensors_hooks``, and a chart of
    the memory they take per layer (each storage counted once, measured); the status line compares the
    output and the gradients with float32. One
    cross-entropy step of a copy of ``model`` on ``inputs`` and ``targets`` per click; ``toggle.value = True``
    clicks it from code; creating one under the same ``name`` replaces the old one.
    ``09_autograd_graph_hooks.ipynb``.
    """
    return SavedTensorsToggle(model, inputs, targets, name=name)
