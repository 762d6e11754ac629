"""``trace_hooks``: which hook of which module fires when, forward and backward.

Taught in ``02_forward_hooks.ipynb`` (forward order across nested modules) and
``04_backward_hooks.ipynb`` (backward order); the hooks on each output's backward node
(``kinds`` ``node_pre`` and ``node``) in ``09_autograd_graph_hooks.ipynb``. It attaches a probe of every kind to every
module (and parameter), runs one forward and one backward, removes every probe in a
``finally`` and returns the ordered events.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ._tree import iter_tensors, map_tensors
from .models import inplace_modules
from .selection import check_model

FORWARD_KINDS = ("forward_pre", "forward")
BACKWARD_KINDS = ("backward_pre", "backward", "tensor", "post_accumulate")
ALL_KINDS = FORWARD_KINDS + BACKWARD_KINDS
# hooks on the backward node (grad_fn) of each module output: asked for by name, not in the default
NODE_KINDS = ("node_pre", "node")


@dataclass(frozen=True)
class HookEvent:
    """One hook firing: its position, phase, kind and the module (or parameter) path."""

    step: int
    phase: str  # "forward" or "backward"
    kind: str
    path: str
    module_type: str

    @property
    def label(self) -> str:
        return f"{self.kind} {self.path}"


class HookTrace:
    """The ordered :class:`HookEvent` list of one forward and backward pass.

    Prints as a timeline; ``.labels()`` gives ``["forward_pre <root>", ...]`` for asserts;
    ``.where(kind=..., phase=...)`` filters; ``.plot()`` draws the timeline.
    """

    def __init__(self, events: list[HookEvent], model_name: str, caught: list[str]):
        self.events = events
        self.model_name = model_name
        self.warnings = caught

    def __len__(self) -> int:
        return len(self.events)

    def __iter__(self) -> Iterator[HookEvent]:
        return iter(self.events)

    def __getitem__(self, i: int) -> HookEvent:
        return self.events[i]

    def where(self, *, kind: str | tuple[str, ...] | None = None, phase: str | None = None) -> "HookTrace":
        kinds = (kind,) if isinstance(kind, str) else kind
        events = [e for e in self.events
                  if (kinds is None or e.kind in kinds) and (phase is None or e.phase == phase)]
        return HookTrace(events, self.model_name, self.warnings)

    def labels(self) -> list[str]:
        return [e.label for e in self.events]

    def __repr__(self) -> str:
        lines = [f"Hook trace of {self.model_name}: {len(self)} events"]
        phase = None
        width = max((len(e.kind) for e in self.events), default=0)
        for e in self.events:
            if e.phase != phase:
                phase = e.phase
                lines.append(f" {phase}")
            lines.append(f"  {e.step:3d}  {e.kind.ljust(width)}  {e.path}  ({e.module_type})")
        return "\n".join(lines)

    def plot(self, ax: Any = None):
        """A timeline figure: one row per module, one marker per hook firing."""
        from .plots import hook_timeline
        return hook_timeline(self, ax=ax)


def _default_loss(output: Any) -> torch.Tensor:
    tensors = [t for _, t in iter_tensors(output) if t.is_floating_point()]
    if not tensors:
        raise TypeError("trace_hooks() found no floating-point tensor in the model's output; "
                        "pass loss_fn=lambda out: ... returning a scalar")
    return sum(t.sum() for t in tensors)


def trace_hooks(model: nn.Module, inputs: Any, loss_fn: Callable[[Any], torch.Tensor] | None = None,
                *, kinds: tuple[str, ...] = ALL_KINDS, kwargs: dict | None = None) -> HookTrace:
    """Run ``model(*inputs)`` and a backward pass with probe hooks; return the firing order.

    ``inputs`` is a tensor or a tuple of them (floating-point tensors are cloned to require
    grad, so the first layer's backward hooks fire normally). ``loss_fn(output)`` gives the
    scalar to differentiate; by default the sum of the output. ``kinds`` limits the probes,
    for example ``kinds=("forward_pre", "forward")`` for a forward-only picture. ``"node_pre"``
    and ``"node"`` (not in the default) add ``grad_fn.register_prehook`` and ``register_hook``
    probes on the backward node of each module output; their events name the node.

    Taught in ``02_forward_hooks.ipynb``, ``04_backward_hooks.ipynb`` and (the node kinds)
    ``09_autograd_graph_hooks.ipynb``.
    """
    check_model(model, "trace_hooks")
    unknown = set(kinds) - set(ALL_KINDS + NODE_KINDS)
    if unknown:
        raise ValueError(f"unknown kind(s) {sorted(unknown)}; choose from {ALL_KINDS + NODE_KINDS}")
    if "backward" in kinds or "backward_pre" in kinds:
        culprits = inplace_modules(model)
        if culprits and torch.is_grad_enabled():
            raise ValueError(
                f"trace_hooks() attaches full backward hooks, which fail on in-place modules "
                f"({', '.join(culprits)}): 'Output 0 of BackwardHookFunction is a view and is "
                "being modified inplace'. Pass kinds without 'backward'/'backward_pre', or switch "
                "them off with hooktutor.models.set_inplace(model, False). "
                "05_inplace_relu_pitfall.ipynb explains why.")
    args = inputs if isinstance(inputs, tuple) else (inputs,)
    args = map_tensors(args, lambda t: t.detach().clone().requires_grad_(True)
                       if t.is_floating_point() else t)
    events: list[HookEvent] = []
    handles: list[Any] = []
    names = {m: (n or "<root>") for n, m in model.named_modules()}

    def record(phase: str, kind: str, path: str, mtype: str) -> None:
        events.append(HookEvent(len(events) + 1, phase, kind, path, mtype))

    reach_outputs = [k for k in ("tensor", *NODE_KINDS) if k in kinds]

    def output_probes(module: nn.Module, output: Any) -> None:
        """Tensor and node probes on each output that needs a gradient (removed with the others)."""
        path, mtype = names[module], type(module).__name__
        for _, t in iter_tensors(output):
            if not t.requires_grad:
                continue
            if "tensor" in kinds:
                handles.append(t.register_hook(lambda g, p=path, m=mtype: record("backward", "tensor", p, m)))
            node = t.grad_fn
            if node is not None and "node_pre" in kinds:
                handles.append(node.register_prehook(
                    lambda grad_outputs, p=path, n=node.name(): record("backward", "node_pre", p, n)))
            if node is not None and "node" in kinds:
                handles.append(node.register_hook(
                    lambda grad_inputs, grad_outputs, p=path, n=node.name(): record("backward", "node", p, n)))

    def module_probe(kind: str, phase: str) -> Callable:
        def probe(module, *rest):
            record(phase, kind, names[module], type(module).__name__)
            if kind == "forward" and reach_outputs and torch.is_grad_enabled():
                output_probes(module, rest[-1])
        probe.__qualname__ = f"trace_hooks.{kind}"
        return probe

    caught: list[str] = []
    saved_grads = {p: p.grad for p in model.parameters()}  # the trace must not touch .grad
    try:
        for module in names:
            if "forward_pre" in kinds:
                handles.append(module.register_forward_pre_hook(module_probe("forward_pre", "forward")))
            if "forward" in kinds or reach_outputs:
                handles.append(module.register_forward_hook(module_probe("forward", "forward")))
            if "backward_pre" in kinds:
                handles.append(module.register_full_backward_pre_hook(
                    module_probe("backward_pre", "backward")))
            if "backward" in kinds:
                handles.append(module.register_full_backward_hook(module_probe("backward", "backward")))
        if "post_accumulate" in kinds:
            for pname, p in model.named_parameters():
                if p.requires_grad:
                    handles.append(p.register_post_accumulate_grad_hook(
                        lambda t, pname=pname: record("backward", "post_accumulate", pname, "Parameter")))
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            output = model(*args, **(kwargs or {}))
            if any(k in kinds for k in BACKWARD_KINDS + NODE_KINDS):
                loss = (loss_fn or _default_loss)(output)
                loss.backward()
        caught = [str(w.message) for w in seen]
    finally:
        for h in handles:
            h.remove()
        for p, g in saved_grads.items():
            p.grad = g
    # the "forward" probe may be attached only to reach output tensors; drop its events then
    if "forward" not in kinds:
        events = [e for e in events if e.kind != "forward"]
    events = [HookEvent(i + 1, e.phase, e.kind, e.path, e.module_type) for i, e in enumerate(events)]
    return HookTrace(events, type(model).__name__, caught)
