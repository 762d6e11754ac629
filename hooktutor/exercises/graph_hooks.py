"""Exercises of ``09_autograd_graph_hooks.ipynb``: hooks on the autograd graph, written by the learner.

* :data:`checkpoint_calls` — predict, then run: how often a forward hook and a forward
  pre-hook fire under activation checkpointing, and whether grad is enabled in the first call.
* :data:`saved_bytes` — the bytes autograd saves for backward, module by module, counted with
  ``torch.autograd.graph.saved_tensors_hooks``.
* :data:`record_first_calls` — record each layer's output in the forward pass only, not again
  when checkpointing recomputes it during backward.
* :data:`watch_grad_norm` — the norm of a group of gradients, once per backward pass, from one
  ``torch.autograd.graph.register_multi_grad_hook``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

import torch
from torch import nn
from torch.autograd.graph import register_multi_grad_hook, saved_tensors_hooks
from torch.utils.checkpoint import checkpoint

from ..inventory import list_hooks
from ..models import MLP, seeded
from . import kit
from .core import Exercise, Tester
from .predict import Prediction

# The first checkpoint in a process imports torch._dynamo (about a second); do it at import time,
# so that a check's time is the check's own.
checkpoint(nn.Identity(), torch.zeros(1, requires_grad=True), use_reentrant=False)

# DIMENSIONS (kit.py) that apply here: nested (modules inside modules: every module must be
# hooked, and a parent's own operations belong to the parent), twice (a module called twice in
# one forward), raises (the model raises: no hook may stay), inplace_after (an in-place ReLU
# after a recorded output), technique (the saved tensors reached the learner's pack hook, not the
# check's; one multi-grad hook per pass, not one hook per tensor).


def _leaves(model: nn.Module) -> list[tuple[str, nn.Module]]:
    return [(n, m) for n, m in model.named_modules() if not list(m.children())]


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _expect_no_hooks_left(t: Tester, model: nn.Module) -> None:
    left = [r for r in list_hooks(model, include_global=False) if not r.is_pytorch]
    t.expect(not left, what="hooks left on the model after it raised", expected="none", got=f"{len(left)} hook(s)",
             nudge="model(x) raised, and your hooks stayed: remove them in the finally: of a try: around model(x)")


# --------------------------------------------------------------------------------------
# 1. saved_bytes
# --------------------------------------------------------------------------------------

def _saved_bytes_solution(model: nn.Module, x: torch.Tensor) -> dict:
    running, saved = [], {}

    def pack(tensor):
        name = running[-1] if running else ""
        saved[name] = saved.get(name, 0) + tensor.numel() * tensor.element_size()
        return tensor

    def enter(name):
        return lambda module, args: running.append(name)

    def leave(module, args, output):
        running.pop()

    handles = []
    try:
        for name, module in model.named_modules():
            handles.append(module.register_forward_pre_hook(enter(name)))
            handles.append(module.register_forward_hook(leave))
        with saved_tensors_hooks(pack, lambda tensor: tensor):
            model(x)
    finally:
        for handle in handles:
            handle.remove()
    return saved


saved_bytes = Exercise(
    "graph_hooks.saved_bytes", "The bytes autograd saves, module by module",
    task=("write saved_bytes(model, x) that runs model(x) once and returns a dict: module path (as in "
          "model.named_modules(), '' for the model itself) -> the bytes (numel * element_size) of the tensors "
          "autograd saved for backward while that module was the innermost module running. Count them in the "
          "pack hook of torch.autograd.graph.saved_tensors_hooks; leave out modules that saved nothing, and "
          "remove every hook you add"),
    hints=[
        "with torch.autograd.graph.saved_tensors_hooks(pack, unpack): model(x) calls pack(tensor) for every "
        "tensor an operation saves for backward; pack returns what is stored (return the tensor itself), and "
        "unpack(stored) gives it back in backward.",
        "Which module is running? A forward pre-hook on every module (model.named_modules()) pushes its name on "
        "a list, a forward hook pops it: the last name is the innermost module. A parent that computes "
        "something itself after its children gets those tensors.",
        "In pack: saved[name] = saved.get(name, 0) + tensor.numel() * tensor.element_size(). A module called "
        "twice adds up both calls. Remove the module hooks in a finally:.",
    ],
    solution=_saved_bytes_solution,
)


class _Gated(nn.Module):
    """``tanh(lin(x)) * gate``: the block itself saves tensors (tanh's output, the gate) after its child."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        with seeded(seed):
            self.lin = nn.Linear(4, 4)
            self.gate = nn.Parameter(torch.rand(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.lin(x)) * self.gate


def _gated_model(seed: int) -> nn.Module:
    with seeded(seed):
        head = nn.Linear(4, 2)
    return nn.Sequential(OrderedDict(block=_Gated(seed), head=head))


def _what_else(model: nn.Module, x: torch.Tensor, variant: str) -> dict:
    """What a typical mistake returns: ``parameters`` (the bytes of each module's own parameters) or
    ``outputs`` (the bytes of each module's outputs, added up over calls)."""
    if variant == "parameters":
        out = {n: sum(_nbytes(p) for p in m.parameters(recurse=False)) for n, m in model.named_modules()}
        return {n: b for n, b in out.items() if b}
    seen: dict[str, int] = {}
    handles = [m.register_forward_hook(lambda mod, a, o, n=n: seen.__setitem__(n, seen.get(n, 0) + _nbytes(o)))
               for n, m in model.named_modules()]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in handles:
            h.remove()
    return seen


def _bytes_case(answer: Callable, t: Tester, build: Callable[[], nn.Module], x: torch.Tensor, what: str) -> None:
    want = _saved_bytes_solution(build(), x)
    model = t.track(build(), "the model")
    reached: list[int] = []  # tensors that reached the check's own pack hook: the answer's was not active
    with saved_tensors_hooks(lambda tensor: reached.append(1) or tensor, lambda tensor: tensor):
        got = answer(model, x)
    t.expect_type(got, dict, what=what, nudge="a dict: module path -> bytes")
    clean = {k: v for k, v in got.items() if v}
    mistakes = {
        "parameters": "these are the bytes of each module's parameters; count what autograd saves instead: the "
                      "tensors the pack hook of saved_tensors_hooks receives (inputs, outputs, weights, ...)",
        "outputs": "these are the bytes of each module's output; count what autograd saves instead: the tensors "
                   "the pack hook of saved_tensors_hooks receives (a Linear saves its input and its weight)",
    }
    for variant, nudge in mistakes.items():
        if clean == _what_else(build(), x, variant) and clean != want:
            t.expect(False, what=what, expected=want, got=got, nudge=nudge)
    t.expect(not reached, what="the saved tensors of model(x)", expected="all in your pack hook",
             got=f"{len(reached)} tensor(s) saved while no pack hook of yours was active", nudge=(
                 "call model(x) inside `with torch.autograd.graph.saved_tensors_hooks(pack, unpack):` and count "
                 "in pack"))
    t.expect(sorted(clean) == sorted(want), what=f"the module paths in {what}", expected=sorted(want),
             got=sorted(clean), nudge=(
                 "give each saved tensor to the innermost module running: hook every module of "
                 "model.named_modules() (nested ones too) with a forward pre-hook that pushes its name and a "
                 "forward hook that pops it; a parent's own operations after its children belong to the parent"))
    for name, value in want.items():
        t.expect(clean[name] == value, what=f"{what}[{name!r}]", expected=value, got=clean[name], nudge=(
            "add numel() * element_size() of every tensor pack receives while this module is the innermost one "
            "running; a module called twice saves twice"))


@saved_bytes.case("an MLP (fc1, act1, fc2, act2, head) on a batch of 4 that needs no grad")
def _(answer, t: Tester) -> None:
    _bytes_case(answer, t, lambda: MLP(seed=1), kit.randn(4, 8, seed=1), "saved_bytes(mlp, x)")


@saved_bytes.case("a nested model: the layers sit two levels down (encoder.body.0, ...)")
def _(answer, t: Tester) -> None:
    _bytes_case(answer, t, lambda: kit.Nested(seed=2), kit.randn(3, 4, seed=2), "saved_bytes(nested, x)")


@saved_bytes.case("a Linear called twice in one forward, with a tanh computed by the model itself in between")
def _(answer, t: Tester) -> None:
    _bytes_case(answer, t, lambda: kit.Twice(seed=3), kit.randn(2, 4, seed=3).requires_grad_(),
                "saved_bytes(twice, x)")


@saved_bytes.case("a model that raises halfway: no hook may stay")
def _(answer, t: Tester) -> None:
    model = t.track(kit.Raising(seed=4), "a model that raises halfway (after fc1)")
    kit.call_expecting_kit_error(answer, model, kit.randn(2, 4, seed=4))
    _expect_no_hooks_left(t, model)


@saved_bytes.case("a block that computes tanh(lin(x)) * gate itself, inside a model", hidden=True)
def _(answer, t: Tester) -> None:
    _bytes_case(answer, t, lambda: _gated_model(5), kit.randn(3, 4, seed=5), "saved_bytes(gated, x)")


# Half-right answers (DIMENSIONS: nested, twice, raises, technique): the parameters' bytes; the
# outputs' bytes; hooks on the top-level children only; one value per module instead of a sum
# (the module called twice); hooks removed without finally; the current module set by the
# pre-hook and reset to the model by the forward hook, no stack (hidden: a block that computes
# after its child).

def _count_with(model: nn.Module, x: torch.Tensor, modules: list[tuple[str, nn.Module]], *, accumulate: bool = True,
                stack: bool = True, use_finally: bool = True) -> dict:
    running, saved = [""], {}

    def pack(tensor):
        name = running[-1]
        saved[name] = (saved.get(name, 0) if accumulate else 0) + _nbytes(tensor)
        return tensor

    def enter(name):
        return lambda module, args: running.append(name) if stack else running.__setitem__(-1, name)

    def leave(module, args, output):
        if stack:
            running.pop()
        else:
            running[-1] = ""

    handles = []
    for name, module in modules:
        handles += [module.register_forward_pre_hook(enter(name)), module.register_forward_hook(leave)]
    if not use_finally:
        with saved_tensors_hooks(pack, lambda tensor: tensor):
            model(x)
        for h in handles:
            h.remove()
        return saved
    try:
        with saved_tensors_hooks(pack, lambda tensor: tensor):
            model(x)
    finally:
        for h in handles:
            h.remove()
    return saved


@saved_bytes.wrong("adds up the bytes of each module's parameters", mentions="bytes of each module's parameters")
def _parameter_bytes(model, x):
    return {n: sum(p.numel() * p.element_size() for p in m.parameters(recurse=False))
            for n, m in model.named_modules() if list(m.parameters(recurse=False))}


@saved_bytes.wrong("adds up the bytes of each module's outputs", mentions="bytes of each module's output")
def _output_bytes(model, x):
    seen = {}
    handles = [m.register_forward_hook(lambda mod, a, o, n=n: seen.__setitem__(n, seen.get(n, 0) + o.numel() * 4))
               for n, m in model.named_modules()]
    try:
        model(x)
    finally:
        for h in handles:
            h.remove()
    return seen


@saved_bytes.wrong("hooks the top-level children only", mentions="nested ones too")
def _children_only(model, x):
    return _count_with(model, x, [("", model), *model.named_children()])


@saved_bytes.wrong("keeps the last call's bytes instead of adding up", mentions="a module called twice saves twice")
def _no_sum(model, x):
    return _count_with(model, x, list(model.named_modules()), accumulate=False)


@saved_bytes.wrong("removes the hooks without finally:", mentions="finally:")
def _no_finally(model, x):
    return _count_with(model, x, list(model.named_modules()), use_finally=False)


@saved_bytes.wrong("no stack: the pre-hook names the module, the forward hook resets to the model",
                   mentions="a parent's own operations", hidden=True)
def _no_stack(model, x):
    return _count_with(model, x, list(model.named_modules()), stack=False)


# --------------------------------------------------------------------------------------
# 2. record_first_calls
# --------------------------------------------------------------------------------------

def _record_first_calls_solution(model: nn.Module, x: torch.Tensor) -> dict:
    records, phase = {}, {"forward": True}

    def make(name):
        def hook(module, args, output):
            if phase["forward"]:  # a checkpoint's recomputation runs during backward
                records.setdefault(name, []).append(output.detach().clone())
        return hook

    handles = [module.register_forward_hook(make(name))
               for name, module in model.named_modules() if not list(module.children())]
    try:
        out = model(x)
        phase["forward"] = False
        out.sum().backward()
    finally:
        for handle in handles:
            handle.remove()
    return records


record_first_calls = Exercise(
    "graph_hooks.record_first_calls", "Record the forward pass, not the recomputation",
    task=("`model` runs part of its forward under torch.utils.checkpoint. Write record_first_calls(model, x) that "
          "runs model(x).sum().backward() once and, with a forward hook on every module that has no children, "
          "records a copy of each module's output in the forward pass only, not when checkpointing recomputes it "
          "during backward. Return a dict: module path -> list of outputs, one per call in the forward pass; "
          "remove every hook"),
    hints=[
        "Checkpointing calls the modules of the checkpointed part again during backward, so their forward hooks "
        "fire again there. torch.is_grad_enabled() does not tell the two calls apart: the non-reentrant variant "
        "runs both with grad enabled.",
        "You run the forward and the backward yourself: keep a flag that says which phase runs, set it before "
        "out.sum().backward(), and record only while it says forward. (On torch 2.4 and newer, "
        "torch.utils.module_tracker.ModuleTracker's is_bw says the same from inside a hook.)",
        "Store output.detach().clone(): an in-place ReLU after a layer would change a bare detach(). A module "
        "called twice in the forward gets two entries. Remove the hooks in a finally:.",
    ],
    solution=_record_first_calls_solution,
)


class _Checkpointed(nn.Module):
    """``head(checkpoint(body, stem(x)))``: ``body`` runs again during backward."""

    def __init__(self, body: nn.Module, reentrant: bool, seed: int) -> None:
        super().__init__()
        with seeded(seed):
            self.stem = nn.Linear(4, 4)
            self.body = body
            self.head = nn.Linear(4, 2)
        self.reentrant = reentrant

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = checkpoint(self.body, self.stem(x), use_reentrant=self.reentrant)
        return self.head(h)


def _body(seed: int, inplace: bool = False) -> nn.Module:
    with seeded(seed):
        return nn.Sequential(nn.Linear(4, 4), nn.ReLU(inplace=inplace), nn.Linear(4, 4), nn.Tanh())


class _SharedBody(nn.Module):
    """``lin(tanh(lin(x)))``: one Linear called twice inside the checkpointed part."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        with seeded(seed):
            self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(torch.tanh(self.lin(x)))


def _expected_records(model: nn.Module, x: torch.Tensor) -> dict[str, list[torch.Tensor]]:
    """Each leaf's outputs in one forward pass, without a backward (so no recomputation)."""
    seen: dict[str, list[torch.Tensor]] = {}
    handles = [m.register_forward_hook(lambda mod, a, o, n=n: seen.setdefault(n, []).append(o.detach().clone()))
               for n, m in _leaves(model)]
    try:
        model(x)
    finally:
        for h in handles:
            h.remove()
    return seen


def _records_case(answer: Callable, t: Tester, build: Callable[[], nn.Module], x: torch.Tensor, what: str) -> None:
    want = _expected_records(build(), x)
    model = t.track(build(), "the model")
    with kit.HookWitness(_leaves(model)) as witness:
        got = answer(model, x)
    t.expect_type(got, dict, what=what, nudge="a dict: module path -> list of outputs")
    unhooked = [name for name, _ in _leaves(model) if not witness.fired(name, "forward")]
    t.expect(not unhooked, what="forward hooks on the modules while the model ran", expected="one on each",
             got=f"none on {', '.join(unhooked)}", nudge=(
                 "record with a hook: module.register_forward_hook(hook) on every module without children, "
                 "removed afterwards (not a replaced forward method)"))
    t.expect(sorted(got) == sorted(want), what=f"the module paths in {what}", expected=sorted(want), got=sorted(got),
             nudge="hook every module without children (model.named_modules(), nested ones too)")
    t.expect(all(p.grad is not None for p in model.parameters()), what="the parameters' .grad after your call",
             expected="filled by model(x).sum().backward()", got="some None",
             nudge="run model(x).sum().backward() once: the recomputation happens during backward")
    for name, outputs in want.items():
        calls = got[name]
        t.expect_type(calls, list, what=f"{what}[{name!r}]", nudge="a list of outputs, one per call")
        t.expect(len(calls) == len(outputs), what=f"len({what}[{name!r}])", expected=len(outputs), got=len(calls),
                 nudge=("the checkpoint recomputed this module during backward and your hook recorded that call "
                        "too: record only while the forward pass runs (torch.is_grad_enabled() is True in both "
                        "calls of the non-reentrant variant)") if len(calls) > len(outputs) else
                 "a module called twice in the forward pass gets two entries: append every call of the forward")
        for i, (a, b) in enumerate(zip(calls, outputs)):
            # the same operations on the same inputs: exact up to float32 rounding (1e-6); a changed copy
            # (an in-place ReLU after a bare detach()) differs by 1e-1 and more
            t.expect_close(a, b, what=f"{what}[{name!r}][{i}]", atol=1e-6, rtol=1e-5, nudge=(
                "store output.detach().clone(): an in-place operation after the call changes a bare detach()"))


@record_first_calls.case("non-reentrant checkpoint over Linear, ReLU(inplace=True), Linear, Tanh")
def _(answer, t: Tester) -> None:
    _records_case(answer, t, lambda: _Checkpointed(_body(10, inplace=True), reentrant=False, seed=10),
                  kit.randn(3, 4, seed=10), "record_first_calls(model, x)")


@record_first_calls.case("reentrant checkpoint (its first call runs under no_grad)")
def _(answer, t: Tester) -> None:
    _records_case(answer, t, lambda: _Checkpointed(_body(11), reentrant=True, seed=11), kit.randn(2, 4, seed=11),
                  "record_first_calls(model, x)")


@record_first_calls.case("a model that raises halfway: no hook may stay")
def _(answer, t: Tester) -> None:
    model = t.track(kit.Raising(seed=12), "a model that raises halfway (after fc1)")
    kit.call_expecting_kit_error(answer, model, kit.randn(2, 4, seed=12))
    _expect_no_hooks_left(t, model)


@record_first_calls.case("one Linear called twice inside the checkpointed part", hidden=True)
def _(answer, t: Tester) -> None:
    _records_case(answer, t, lambda: _Checkpointed(_SharedBody(13), reentrant=False, seed=13),
                  kit.randn(2, 4, seed=13), "record_first_calls(model, x)")


# Half-right answers (DIMENSIONS: twice, raises, inplace_after, technique): records every call
# (the recomputation too); filters with torch.is_grad_enabled(); a bare detach(); no finally;
# keeps only the first call of each module (hidden: a module called twice in the forward).

def _recorder(model, x, keep: Callable[[str, dict], bool], copy: Callable[[torch.Tensor], torch.Tensor],
              use_finally: bool = True, phase_flag: bool = True) -> dict:
    records, phase = {}, {"forward": True}

    def make(name):
        def hook(module, args, output):
            if (phase["forward"] or not phase_flag) and keep(name, records):
                records.setdefault(name, []).append(copy(output))
        return hook

    handles = [m.register_forward_hook(make(n)) for n, m in model.named_modules() if not list(m.children())]
    if not use_finally:
        out = model(x)
        phase["forward"] = False
        out.sum().backward()
        for h in handles:
            h.remove()
        return records
    try:
        out = model(x)
        phase["forward"] = False
        out.sum().backward()
    finally:
        for h in handles:
            h.remove()
    return records


def _clone(t: torch.Tensor) -> torch.Tensor:
    return t.detach().clone()


@record_first_calls.wrong("records every call, the recomputation too", mentions="recomputed this module")
def _every_call(model, x):
    return _recorder(model, x, lambda n, r: True, _clone, phase_flag=False)


@record_first_calls.wrong("records only while torch.is_grad_enabled()", mentions="torch.is_grad_enabled() is True")
def _grad_enabled(model, x):
    return _recorder(model, x, lambda n, r: torch.is_grad_enabled(), _clone, phase_flag=False)


@record_first_calls.wrong("stores a bare detach()", mentions="detach().clone()")
def _bare_detach(model, x):
    return _recorder(model, x, lambda n, r: True, lambda t: t.detach())


@record_first_calls.wrong("removes the hooks without finally:", mentions="finally:")
def _records_no_finally(model, x):
    return _recorder(model, x, lambda n, r: True, _clone, use_finally=False)


@record_first_calls.wrong("replaces each module's forward instead of registering a hook",
                          mentions="register_forward_hook")
def _patched_forward(model, x):
    records, phase, originals = {}, {"forward": True}, {}

    def patched(name, module):
        original = module.forward

        def forward(*args, **kwargs):
            out = original(*args, **kwargs)
            if phase["forward"]:
                records.setdefault(name, []).append(out.detach().clone())
            return out
        return original, forward

    for name, module in model.named_modules():
        if not list(module.children()):
            originals[name], module.forward = patched(name, module)
    try:
        out = model(x)
        phase["forward"] = False
        out.sum().backward()
    finally:
        for name, module in model.named_modules():
            if name in originals:
                del module.forward  # the class's forward again
    return records


@record_first_calls.wrong("keeps the first call of each module only", mentions="gets two entries", hidden=True)
def _first_only(model, x):
    return _recorder(model, x, lambda n, r: n not in r, _clone, phase_flag=False)


# --------------------------------------------------------------------------------------
# 3. watch_grad_norm
# --------------------------------------------------------------------------------------

def _watch_grad_norm_solution(tensors: list):
    norms = []

    def total_norm(grads):
        squares = [g.pow(2).sum() for g in grads if g is not None]  # None: not reached by this pass
        norms.append(torch.stack(squares).sum().sqrt().item())

    return norms, torch.autograd.graph.register_multi_grad_hook(tensors, total_norm)


_NONE_NUDGE = ("a tensor that this backward pass did not reach gets None in the list the hook receives: skip it "
               "(it counts as zero)")

watch_grad_norm = Exercise(
    "graph_hooks.watch_grad_norm", "One hook for a group of gradients",
    task=("write watch_grad_norm(tensors) that registers ONE torch.autograd.graph.register_multi_grad_hook on "
          "`tensors`; once per backward pass, when all their gradients of that pass are computed, it appends the "
          "L2 norm of all of them together (sqrt of the sum of every element squared; a tensor the pass did not "
          "reach counts as zero) as a float to a list. Return (the list, the hook's handle)"),
    hints=[
        "torch.autograd.graph.register_multi_grad_hook(tensors, fn) calls fn(grads) once per backward pass, with "
        "one gradient per tensor, in order, after all of them are computed; it returns a handle.",
        "The gradients fn receives are those of this pass. .grad is not: it adds up over passes until zero_grad(). "
        "A tensor the pass did not reach is None in the list.",
        "In fn: norms.append(torch.stack([g.pow(2).sum() for g in grads if g is not None]).sum().sqrt().item()).",
    ],
    solution=_watch_grad_norm_solution,
    errors={"'NoneType' object has no attribute": _NONE_NUDGE, "unsupported operand type(s)": _NONE_NUDGE},
)


def _pass_norms(losses: list[Callable[[], torch.Tensor]], tensors: list[torch.Tensor]) -> list[float]:
    """The norm of the gradients of each pass, from torch.autograd.grad (no hook)."""
    out = []
    for loss in losses:
        grads = torch.autograd.grad(loss(), tensors, allow_unused=True)
        out.append(torch.stack([g.pow(2).sum() for g in grads if g is not None]).sum().sqrt().item())
    return out


def _norm_case(answer: Callable, t: Tester, model: nn.Module, tensors: list[torch.Tensor],
               losses: list[Callable[[], torch.Tensor]], what: str) -> None:
    want = _pass_norms(losses, tensors)
    t.track(model, "the model")
    got = answer(tensors)
    t.expect_type(got, tuple, what=what, nudge="return the pair (norms, handle)")
    t.expect(len(got) == 2, what=f"len({what})", expected=2, got=len(got), nudge="return (norms, handle)")
    norms, handle = got
    t.expect(hasattr(handle, "remove"), what="the handle", expected="a handle with .remove()", got=handle,
             nudge="return the handle register_multi_grad_hook gave you")
    try:
        t.expect_type(norms, list, what="the norms", nudge="a list that the hook appends to")
        for loss in losses:
            loss().backward()  # no zero_grad in between: .grad adds up, the hook's gradients do not
    finally:
        handle.remove()
    t.expect(len(norms) == len(want), what=f"len(norms) after {len(losses)} backward passes", expected=len(want),
             got=len(norms), nudge=(
                 "one entry per backward pass: register ONE multi-grad hook on all the tensors (not one hook per "
                 "tensor); it fires once, after all their gradients of the pass are computed")
             if len(norms) > len(want) else "append once per backward pass, in the multi-grad hook")
    for i, (a, b) in enumerate(zip(norms, want)):
        t.expect(isinstance(a, float), what=f"norms[{i}]", expected="a float", got=a, nudge="append .item()")
        # the same sums in another order: 1e-5 relative, far below what a mistake changes (a second pass
        # that adds the first's gradients, one tensor instead of all: 1e-1 and more here)
        if abs(a - b) > 1e-5 * abs(b):
            nudge = ("one gradient only: mode='any' fires with the first gradient computed; the default mode='all' "
                     "gives them all") if any(abs(a - n) <= 1e-5 * n for n in _single_norms(losses[i], tensors)) \
                else ("pass {i}: the norm of this pass's gradients, those the hook receives; .grad adds up over "
                      "passes").replace("{i}", str(i + 1))
            t.expect(False, what=f"norms[{i}]", expected=round(b, 6), got=a, nudge=nudge)
    loss = losses[0]
    loss().backward()
    t.expect(len(norms) == len(want), what="len(norms) after handle.remove() and one more backward",
             expected=len(want), got=len(norms), nudge="the handle you return must remove the hook")


def _single_norms(loss: Callable[[], torch.Tensor], tensors: list[torch.Tensor]) -> list[float]:
    grads = torch.autograd.grad(loss(), tensors, allow_unused=True)
    return [g.norm().item() for g in grads if g is not None]


def _mlp_losses(model: nn.Module) -> list[Callable[[], torch.Tensor]]:
    return [lambda s=s: model(kit.randn(4, 8, seed=s)).pow(2).sum() for s in (20, 21)]


@watch_grad_norm.case("the parameters of an MLP, two backward passes without zero_grad")
def _(answer, t: Tester) -> None:
    model = MLP(seed=20)
    _norm_case(answer, t, model, list(model.parameters()), _mlp_losses(model), "watch_grad_norm(parameters)")


@watch_grad_norm.case("two tensors of a nested model's graph, three passes")
def _(answer, t: Tester) -> None:
    model = kit.Nested(seed=21)
    params = [model.encoder.body[0].weight, model.head.bias]
    losses = [lambda s=s: model(kit.randn(2, 4, seed=s)).sum() for s in (22, 23, 24)]
    _norm_case(answer, t, model, params, losses, "watch_grad_norm([weight, bias])")


class _Branches(nn.Module):
    """``a(x)`` or ``b(x)``: a pass through one branch does not reach the other's parameters."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        with seeded(seed):
            self.a, self.b = nn.Linear(3, 2), nn.Linear(3, 2)

    def forward(self, x: torch.Tensor, branch: str) -> torch.Tensor:
        return (self.a if branch == "a" else self.b)(x)


@watch_grad_norm.case("a model with two branches: each pass reaches only one", hidden=True)
def _(answer, t: Tester) -> None:
    model = _Branches(seed=25)
    losses = [lambda br=br, s=s: model(kit.randn(2, 3, seed=s), br).pow(2).sum() for br, s in (("a", 26), ("b", 27))]
    _norm_case(answer, t, model, list(model.parameters()), losses, "watch_grad_norm(parameters)")


# Half-right answers (DIMENSIONS: technique, repeat): a hook per tensor (an entry per tensor);
# reading .grad (it adds up over passes); mode="any"; g.norm() on a None gradient (hidden: a pass
# that does not reach every tensor).

@watch_grad_norm.wrong("registers a tensor hook on every tensor", mentions="not one hook per tensor")
def _hook_per_tensor(tensors):
    norms = []
    handles = [t.register_hook(lambda g: norms.append(g.norm().item())) for t in tensors]

    class Handle:
        def remove(self):
            for h in handles:
                h.remove()

    return norms, Handle()


@watch_grad_norm.wrong("reads .grad after the last tensor's gradient is accumulated", mentions=".grad adds up")
def _reads_dot_grad(tensors):
    norms, count = [], [0]

    def hook(tensor):
        count[0] += 1
        if count[0] % len(tensors) == 0:
            norms.append(sum(float(t.grad.pow(2).sum()) for t in tensors) ** 0.5)

    handles = [t.register_post_accumulate_grad_hook(hook) for t in tensors]

    class Handle:
        def remove(self):
            for h in handles:
                h.remove()

    return norms, Handle()


@watch_grad_norm.wrong("uses mode='any'", mentions="mode")
def _mode_any(tensors):
    norms = []
    return norms, register_multi_grad_hook(tensors, lambda g: norms.append(g.norm().item()), mode="any")


@watch_grad_norm.wrong("calls .pow on every gradient, None included", mentions="gets None", hidden=True)
def _none_crash(tensors):
    norms = []
    return norms, register_multi_grad_hook(
        tensors, lambda grads: norms.append(torch.stack([g.pow(2).sum() for g in grads]).sum().sqrt().item()))


# --------------------------------------------------------------------------------------
# Predict, then run: hooks under activation checkpointing
# --------------------------------------------------------------------------------------

CHECKPOINT_KEYS = ("first layer's forward hook, no checkpoint", "first layer's forward hook, non-reentrant",
                   "block's forward hook, non-reentrant", "block's forward hook, reentrant",
                   "grad enabled in the block's first call, reentrant")
_COUNTS = (0, 1, 2, 3)


def _observe_checkpoint_calls() -> dict:
    """A block ``Linear, Tanh, Linear`` run once, forward and backward, without a checkpoint and under each
    variant; forward hooks on the block and on its first layer count their calls."""
    with seeded(0):
        block = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 4))
    calls: dict[str, list[bool]] = {}

    def note(label: str) -> Callable:
        return lambda module, args, output: calls.setdefault(label, []).append(torch.is_grad_enabled())

    truth = {}
    for variant in (None, False, True):
        calls.clear()
        x = torch.ones(2, 4, requires_grad=True)
        with block.register_forward_hook(note("block")), block[0].register_forward_hook(note("first")):
            out = block(x) if variant is None else checkpoint(block, x, use_reentrant=variant)
            out.sum().backward()
        if variant is None:
            truth[CHECKPOINT_KEYS[0]] = len(calls["first"])
        elif variant is False:
            truth[CHECKPOINT_KEYS[1]] = len(calls["first"])
            truth[CHECKPOINT_KEYS[2]] = len(calls["block"])
        else:
            truth[CHECKPOINT_KEYS[3]] = len(calls["block"])
            truth[CHECKPOINT_KEYS[4]] = "yes" if calls["block"][0] else "no"
    return {k: truth[k] for k in CHECKPOINT_KEYS}


checkpoint_calls = Prediction(
    "graph_hooks.checkpoint_calls", "Predict: forward hooks under activation checkpointing",
    task=("a dict with one entry per key: " + "; ".join(CHECKPOINT_KEYS) + ". The counts are 0, 1, 2 or 3 calls "
          "in one forward and backward; the last entry is 'yes' or 'no'"),
    answer_name="predict_checkpoint_calls",
    observe=_observe_checkpoint_calls,
    choices={**{k: _COUNTS for k in CHECKPOINT_KEYS[:4]}, CHECKPOINT_KEYS[4]: ("yes", "no")},
    hints=["Checkpointing keeps only the block's input and runs the block again during backward to get what it "
           "did not save. Does running it again call the modules' __call__, hooks included?",
           "The non-reentrant variant stops the recomputation as soon as it has recomputed the last tensor "
           "backward needs, inside the last layer. The reentrant variant runs the whole block again, and its "
           "first run happens under torch.no_grad()."],
    explain={
        CHECKPOINT_KEYS[0]: "without a checkpoint nothing runs again: one forward, one call.",
        CHECKPOINT_KEYS[1]: "the recomputation during backward calls the first layer again, through __call__: its "
                            "forward hook fires a second time.",
        CHECKPOINT_KEYS[2]: "the non-reentrant checkpoint stops recomputing as soon as it has the last saved tensor, "
                            "inside the last layer's forward: neither that layer's forward hook nor the block's "
                            "fires again (its pre-hook does).",
        CHECKPOINT_KEYS[3]: "the reentrant checkpoint runs the whole block again during backward: its forward hook "
                            "fires twice.",
        CHECKPOINT_KEYS[4]: "the reentrant checkpoint runs the first forward under torch.no_grad() (it saves nothing "
                            "there) and the recomputation with grad enabled.",
    },
    summary=("a checkpointed block runs again during backward, hooks included: all of it in the reentrant variant "
             "(whose first run is under no_grad), up to the last saved tensor in the non-reentrant one."),
)
checkpoint_calls.wrong("checkpointing is invisible to hooks",
                       dict(zip(CHECKPOINT_KEYS, (1, 1, 1, 1, "yes"))), "calls the first layer again")
checkpoint_calls.wrong("every hook in the block fires twice in both variants",
                       dict(zip(CHECKPOINT_KEYS, (1, 2, 2, 2, "no"))), "stops recomputing")
checkpoint_calls.wrong("the reentrant variant's first run keeps grad on",
                       dict(zip(CHECKPOINT_KEYS, (1, 2, 1, 2, "yes"))), "under torch.no_grad()")
