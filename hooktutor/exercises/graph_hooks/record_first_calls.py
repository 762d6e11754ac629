"""09_autograd_graph_hooks, exercise: record the forward pass, not the checkpoint's recomputation.

Half-right answers an examiner expects, by kit dimension (``kit.DIMENSIONS``):

- technique: records every call, the recomputation during backward too; filters with
  ``torch.is_grad_enabled()`` (True in both calls of the non-reentrant checkpoint); replaces each
  module's ``forward`` instead of registering a hook;
- twice: keeps the first call of each module only (a layer called twice in the forward loses its
  second call); tells the recomputation apart by its value, dropping an output equal to one
  already recorded (a layer called twice on the same input loses its second call); records every
  call and keeps the first half of each list (a layer called twice outside the checkpoint is not
  recomputed: it loses its second call);
- repeat: records in a first run under ``no_grad``, then runs ``model(x).sum().backward()`` again
  (two forward passes: the records are not those of the pass backward used);
- inplace_after: stores a bare ``detach()``, which the in-place ReLU after the layer overwrites;
- detached: stores ``output.clone()``, which keeps the autograd graph of the step alive;
- raises: removes the hooks without ``finally:``;
- nested, dtype, repeat: the layers of a Sequential inside the model, in float64, the same model
  recorded twice in a row (each run's records start empty).

The phase flag of the solution is set by the answer itself, around ``backward()``; no
push/pop of module names, so a forward hook that never fires (a module that raised) leaves
nothing behind.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from ...models import seeded
from .. import kit
from ..core import Exercise, Tester
from ._shared import _expect_no_hooks_left


def record_first_calls(model, x):
    """{module path: [output of each call in the forward pass]}, the recomputation left out."""
    ### BEGIN SOLUTION
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
    ### END SOLUTION


def _leaves(model: nn.Module) -> list[tuple[str, nn.Module]]:
    return [(n, m) for n, m in model.named_modules() if not list(m.children())]


exercise = Exercise(
    "graph_hooks.record_first_calls", "Record the forward pass, not the recomputation",
    task=("`model` runs part of its forward under torch.utils.checkpoint. Write record_first_calls(model, x) "
          "that runs model(x).sum().backward() once and, with a forward hook on every module that has no "
          "children (each returns a tensor), records a detached copy of each module's output in the forward "
          "pass only, not when checkpointing recomputes it during backward. Return a dict: module path -> list "
          "of outputs, one per call in the forward pass; remove every hook"),
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
    solution=record_first_calls,
    guide="""recording every call (the checkpoint's recomputation shows up twice); filtering with
    `torch.is_grad_enabled()` (true in both runs of the non-reentrant variant); a bare
    `detach()` before an in-place ReLU; no `finally:`; replacing each module's `forward`
    instead of registering a hook; keeping only the first call of each module (a layer
    called twice in the forward loses its second call); `clone()` without `detach()` (the
    records keep the autograd graph of the step alive); telling the recomputation apart by
    its value (a layer called twice on the same input loses its second call); recording every
    call and keeping the first half of each list (a layer called twice outside the checkpoint,
    never recomputed, loses its second call); recording in a
    first run under `no_grad`, then backpropagating a second run (the records are not those
    of the pass backward used).""",
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


def _records_case(answer: Callable, t: Tester, build: Callable[[], nn.Module], x: torch.Tensor, what: str,
                  runs: int = 1) -> None:
    """``answer(model, x)`` on a fresh model from ``build``, ``runs`` times in a row on the same model
    (each run's records must be those of its own forward pass)."""
    want = _expected_records(build(), x)
    reference = build()
    reference(x).sum().backward()   # the gradients one model(x).sum().backward() gives
    model = t.track(build(), "the model")
    for run in range(runs):
        with kit.HookWitness([*_leaves(model), (_ROOT, model)]) as witness:
            got = answer(model, x)
        _expect_records(t, model, got, want, witness, what if not run else f"{what}, run again on the same model")
        for (name, p), r in zip(model.named_parameters(), reference.parameters()):
            t.expect(torch.allclose(p.grad, (run + 1) * r.grad, rtol=1e-4, atol=1e-6),
                     what=f"{name}.grad after your call", expected="the gradient of model(x).sum()",
                     got="another gradient", nudge=(
                         "run exactly model(x).sum().backward(): the task's backward, whose recomputation "
                         "you record (not a scaled or another loss)"))


_ROOT = "<the model>"   # the witness's name for the model itself (no module path has angle brackets)


def _expect_records(t: Tester, model: nn.Module, got: object, want: dict, witness: kit.HookWitness,
                    what: str) -> None:
    t.expect_type(got, dict, what=what, nudge="a dict: module path -> list of outputs")
    unhooked = [name for name, _ in _leaves(model) if not witness.fired(name, "forward")]
    t.expect(not unhooked, what="forward hooks on the modules while the model ran", expected="one on each",
             got=f"none on {', '.join(unhooked)}", nudge=(
                 "record with a hook: module.register_forward_hook(hook) on every module without children, "
                 "removed afterwards (not a replaced forward method)"))
    t.expect(witness.calls[_ROOT] == 1, what="calls of model(x) during your answer", expected=1,
             got=witness.calls[_ROOT], nudge=(
                 "run the model once, model(x).sum().backward(), and record in that forward pass: a second run "
                 "(one to record, one to backpropagate) records outputs that are not those backward used (dropout, "
                 "batch statistics) and updates a BatchNorm's running statistics twice"))
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
            kit.expect_detached(t, a, what=f"{what}[{name!r}][{i}]")


@exercise.case("non-reentrant checkpoint over Linear, ReLU(inplace=True), Linear, Tanh")
def _(answer, t: Tester) -> None:
    _records_case(answer, t, lambda: _Checkpointed(_body(10, inplace=True), reentrant=False, seed=10),
                  kit.randn(3, 4, seed=10), "record_first_calls(model, x)")


@exercise.case("reentrant checkpoint (its first call runs under no_grad)")
def _(answer, t: Tester) -> None:
    _records_case(answer, t, lambda: _Checkpointed(_body(11), reentrant=True, seed=11), kit.randn(2, 4, seed=11),
                  "record_first_calls(model, x)")


@exercise.case("a model that raises halfway: no hook may stay")
def _(answer, t: Tester) -> None:
    model = t.track(kit.Raising(seed=12), "a model that raises halfway (after fc1)")
    kit.call_expecting_kit_error(answer, model, kit.randn(2, 4, seed=12))
    _expect_no_hooks_left(t, model)


@exercise.case("one Linear called twice inside the checkpointed part", hidden=True)
def _(answer, t: Tester) -> None:
    _records_case(answer, t, lambda: _Checkpointed(_SharedBody(13), reentrant=False, seed=13),
                  kit.randn(2, 4, seed=13), "record_first_calls(model, x)")


class _SameInputTwice(nn.Module):
    """``tanh(lin(x)) * lin(x)``: one Linear called twice on the same input, two equal outputs."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        with seeded(seed):
            self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.lin(x)) * self.lin(x)


@exercise.case("one Linear called twice on the same input inside the checkpointed part (two equal outputs)",
               hidden=True)
def _(answer, t: Tester) -> None:
    _records_case(answer, t, lambda: _Checkpointed(_SameInputTwice(15), reentrant=False, seed=15),
                  kit.randn(2, 4, seed=15), "record_first_calls(model, x)")


class _StemTwice(_Checkpointed):
    """``head(checkpoint(body, stem(tanh(stem(x)))))``: the stem, outside the checkpoint, runs twice in the
    forward pass and never during backward."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.stem(torch.tanh(self.stem(x)))
        return self.head(checkpoint(self.body, h, use_reentrant=self.reentrant))


@exercise.case("a Linear called twice outside the checkpointed part (not recomputed)", hidden=True)
def _(answer, t: Tester) -> None:
    _records_case(answer, t, lambda: _StemTwice(_body(16), reentrant=False, seed=16),
                  kit.randn(2, 4, seed=16), "record_first_calls(model, x)")


@exercise.case("a nested body in float64, the same model recorded twice in a row", hidden=True)
def _(answer, t: Tester) -> None:
    _records_case(answer, t, lambda: _Checkpointed(_body(14), reentrant=False, seed=14).to(torch.float64),
                  kit.randn(3, 4, seed=14).double(), "record_first_calls(model, x)", runs=2)


def _recorder(model, x, keep: Callable[[str, dict], bool], copy: Callable[[torch.Tensor], torch.Tensor],
              use_finally: bool = True, phase_flag: bool = True, loss_scale: float = 1.0) -> dict:
    """One factory for the near-copy wrong answers: which calls are kept (``keep(name, records)``,
    and only in the forward phase when ``phase_flag``), how the output is copied, whether the
    hooks are removed in a ``finally:``, and what multiplies the loss before backward."""
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
        (loss_scale * out.sum()).backward()
        for h in handles:
            h.remove()
        return records
    try:
        out = model(x)
        phase["forward"] = False
        (loss_scale * out.sum()).backward()
    finally:
        for h in handles:
            h.remove()
    return records


def _clone(t: torch.Tensor) -> torch.Tensor:
    return t.detach().clone()


@exercise.wrong("records every call, the recomputation too", mentions="recomputed this module")
def _every_call(model, x):
    return _recorder(model, x, lambda n, r: True, _clone, phase_flag=False)


@exercise.wrong("records only while torch.is_grad_enabled()", mentions="torch.is_grad_enabled() is True")
def _grad_enabled(model, x):
    return _recorder(model, x, lambda n, r: torch.is_grad_enabled(), _clone, phase_flag=False)


@exercise.wrong("stores a bare detach()", mentions="detach().clone()")
def _bare_detach(model, x):
    return _recorder(model, x, lambda n, r: True, lambda t: t.detach())


@exercise.wrong("stores output.clone(), with its autograd graph", mentions="holds the autograd graph")
def _with_graph(model, x):
    return _recorder(model, x, lambda n, r: True, lambda t: t.clone())


@exercise.wrong("removes the hooks without finally:", mentions="finally:")
def _records_no_finally(model, x):
    return _recorder(model, x, lambda n, r: True, _clone, use_finally=False)


@exercise.wrong("replaces each module's forward instead of registering a hook",
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


@exercise.wrong("keeps the first call of each module only", mentions="gets two entries", hidden=True)
def _first_only(model, x):
    return _recorder(model, x, lambda n, r: n not in r, _clone, phase_flag=False)


@exercise.wrong("tells the recomputation apart by its value: skips an output equal to one already recorded",
                mentions="gets two entries", hidden=True)
def _skips_repeats(model, x):
    records = _recorder(model, x, lambda n, r: True, _clone, phase_flag=False)   # the recomputation too
    kept = {}
    for name, outputs in records.items():
        for out in outputs:
            if not any(torch.equal(out, seen) for seen in kept.get(name, [])):
                kept.setdefault(name, []).append(out)
    return kept


@exercise.wrong("records every call, then keeps the first half of each module's list",
                mentions="gets two entries", hidden=True)
def _first_half(model, x):
    records = _recorder(model, x, lambda n, r: True, _clone, phase_flag=False)   # the recomputation too
    return {name: outputs[:(len(outputs) + 1) // 2] for name, outputs in records.items()}


@exercise.wrong("records in a first run under no_grad, then runs model(x).sum().backward() again",
                mentions="run the model once")
def _two_runs(model, x):
    records = {}
    handles = [m.register_forward_hook(lambda mod, a, o, n=n: records.setdefault(n, []).append(o.detach().clone()))
               for n, m in _leaves(model)]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in handles:
            h.remove()
    model(x).sum().backward()
    return records


@exercise.wrong("backpropagates 0 * the loss", mentions="not a scaled or another loss")
def _zero_loss(model, x):
    return _recorder(model, x, lambda n, r: True, _clone, loss_scale=0.0)
