"""11_compile_and_export, exercise: attach a forward hook to a layer of a model that is already
compiled and called, so that the compiled model runs it.

Half-right answers an examiner expects, by kit dimension (``kit.DIMENSIONS``):

- technique: registers the hook and nothing else (the compiled code, made while the layer had no
  hook, does not guard on its hooks: the hook is skipped); registers it on the compiled wrapper
  (it fires once per call with the model's output, not the layer's); compiles the model again
  with ``torch.compile`` (the learner's ``compiled`` object still runs its old code); makes
  ``compiled`` run uncompiled (its forward replaced by the original module's call); calls the
  model once to "warm it up" (a call the learner did not ask for, with the hook firing in it);
- reattach: two hooks attached one after the other to two layers: both must fire (the second
  reset must not be the only one that counts);
- nested, dtype: a layer inside a nested ``Sequential``, a float64 model;
- left_as_found: forces the recompile by changing a guarded part of the model instead of resetting
  (``layer.weight.requires_grad_(False)``): the next call compiles again, but the caller's model stays
  changed; ``eval()`` does that only where the forward reads ``self.training`` (a ``Dropout``): on
  ``Linear``/``ReLU`` layers nothing reads it, nothing compiles again, and the hook is skipped;
- technique: replaces ``layer.forward`` by a function that calls the hook (and resets), returning a
  handle of its own: the output is right, but it is not a forward hook;
- detached / returns: returns the handle, so that ``handle.remove()`` takes the hook off again
  (and the compiled model stops running it).
"""

from __future__ import annotations

import weakref

import torch
import torch._dynamo
from torch import nn
from torch.utils.hooks import RemovableHandle

from ...course import claims
from ...inventory import remove_row
from .. import kit
from ..core import Exercise, Tester, learners_hooks
from ._shared import compiling, mlp


def hook_compiled(compiled, layer, hook):
    """Attach `hook` to `layer` so that `compiled(...)` runs it; return the handle."""
    ### BEGIN SOLUTION
    handle = layer.register_forward_hook(hook)
    torch._dynamo.reset()  # forget the code compiled without the hook: the next call traces again
    return handle
    ### END SOLUTION


exercise = Exercise(
    "compile_hooks.hook_compiled", "Hook a layer of a model that is already compiled",
    task=("`compiled = torch.compile(model, backend=\"eager\")` has been called at least once, while `layer` (a "
          "submodule of model) had no hook. Write hook_compiled(compiled, layer, hook) that attaches `hook` as a "
          "forward hook of `layer` so that the next calls of `compiled` run it (and use what it returns), without "
          "calling the model yourself. Return the handle: handle.remove() must take the hook off again"),
    hints=[
        "Register it as usual: layer.register_forward_hook(hook). Then call compiled(x) and see whether it fires: "
        "the code compiled on the first call does not check the hooks of a layer that had none.",
        "torch._dynamo.reset() forgets every compiled code; the next call of `compiled` traces the model again, "
        "with the hook in place.",
        "Do not compile again with torch.compile: the caller keeps calling its own `compiled`. Return the handle "
        "that register_forward_hook gave you.",
    ],
    solution=hook_compiled,
    guide="""registering the hook and nothing else (the compiled code does not guard the empty hook
    dicts of submodules, and since torch 2.5 it inlines built-in layers: the hook is silently
    skipped); registering it on
    the compiled wrapper (it fires with the whole model's output); calling `torch.compile`
    again (the caller's object keeps its code); calling the model to "warm it up" (a call
    nobody asked for); returning nothing, so the hook cannot be taken off.""",
)


_SKIPPED = ("the compiled model did not run your hook: its code was compiled while the layer had no hook, and it "
            "does not check the hooks of such a layer. The hook is registered; what is missing is a next call "
            "that compiles again and so traces it in")


def _with_hooks(model: nn.Module, x: torch.Tensor, hooks: dict) -> torch.Tensor:
    """The plain model's output with ``hooks`` ({module: hook}) attached."""
    handles = [module.register_forward_hook(hook) for module, hook in hooks.items()]
    try:
        with torch.no_grad():
            return model(x)
    finally:
        for h in handles:
            h.remove()


def _state(model: nn.Module) -> dict[str, object]:
    """What an answer must leave as it was: each module's train/eval flag and whether it has a
    ``forward`` of its own (an instance attribute replacing its class's), each parameter's
    ``requires_grad`` and values."""
    state: dict[str, object] = {}
    for n, m in model.named_modules():
        state[f"{n or 'the model'}.training"] = m.training
        state[f"{n or 'the model'}.forward replaced"] = "forward" in vars(m)
    for n, p in model.named_parameters():
        state[f"{n}.requires_grad"] = p.requires_grad
        state[f"{n} (values)"] = p.detach().clone()
    return state


def _expect_as_found(t: Tester, before: dict, after: dict) -> None:
    changed = [k for k in before if k not in after or not (
        torch.equal(after[k], before[k]) if isinstance(before[k], torch.Tensor) else after[k] == before[k])]
    if changed:
        first = changed[0]
        t.expect(False, what=f"{first} after your answer", expected=before[first], got=after.get(first), nudge=(
            "leave the model as it was: changing it (requires_grad, train/eval, a replaced forward, the "
            "weights) may make the next call compile again, but it changes the caller's model for good: "
            "make the compiled model forget its code instead, which changes nothing in the model"))


def _expect_forward_hook(t: Tester, layer: nn.Module, handle: object) -> None:
    """The handle must be one that ``layer.register_forward_hook`` gave: its id is a key of the
    layer's forward hooks."""
    real = isinstance(handle, RemovableHandle) and handle.id in layer._forward_hooks
    t.expect(real, what="the handle hook_compiled returns", expected="layer.register_forward_hook(hook)'s handle",
             got="a forward hook's handle" if real else (
                 "a handle, but not of a forward hook on the layer"
                 if isinstance(handle, RemovableHandle) else f"a {type(handle).__name__}, not a hook's handle"),
             nudge=("attach the hook with layer.register_forward_hook(hook) and return its handle: a replaced "
                    "forward or a wrapper of your own is not a forward hook (other hooks and tools would not see it)"))


def _run(answer, t: Tester, model: nn.Module, name: str, x: torch.Tensor, *, second: str | None = None,
         after_removal: bool = False) -> None:
    """Compile ``model``, call it once, attach a hook through the answer (then, after another call,
    a second one on ``second``); each next compiled call must give what the plain model gives with
    the same hooks, and ``handle.remove()`` must take them off (no hook left; with
    ``after_removal`` the compiled model called once more must give the plain output, one more
    compile). The hooks have no side effects (a hook that appends to a list makes every call
    compile again, which would hide the mistake): what they return is how the check sees that
    they ran."""
    layer = model.get_submodule(name)

    def zero(module, args, output):
        return output * 0

    def shift(module, args, output):
        return output + 1

    plain = _with_hooks(model, x, {})
    zeroed = _with_hooks(model, x, {layer: zero})
    other = model.get_submodule(second) if second else None
    both = _with_hooks(model, x, {layer: zero, other: shift}) if second else None
    runs = []   # one item per run of compiled code: the model must stay compiled

    def backend(gm, example_inputs):   # the "eager" backend, counting the runs of its graphs
        def run(*args):
            runs.append(1)
            return gm.forward(*args)
        return run

    with compiling():
        torch._dynamo.reset()
        compiled = torch.compile(model, backend=backend)
        with torch.no_grad():
            compiled(x)
            # (no t.track(model): its stand-in hooks on every module would be compiled in at the next
            # compile, and a hook added to a module that has hooks is guarded; leaks are checked below)
            state = _state(model)
            with kit.HookWitness({name: layer}) as witness:
                handle = answer(compiled, layer, zero)
            changed = _state(model)
            t.expect(witness.calls[name] == 0, what=f"calls of {name} during your answer", expected=0,
                     got=witness.calls[name], nudge="attach the hook without calling the model: the caller calls it")
            before = len(runs)
            got = compiled(x)
            t.expect(len(runs) > before, what="compiled code run by compiled(x) after your answer",
                     expected="at least one graph", got="none: the model ran uncompiled", nudge=(
                         "keep `compiled` compiled: do not replace its forward or unwrap it; make its next "
                         "call compile again instead, so that it traces the hook in"))
            # the compiled model runs the same operations as the plain one: equal up to float rounding (1e-6);
            # a skipped or misplaced hook changes the output by 1e-2 and more
            t.expect_close(got, zeroed, what=f"compiled(x) with your hook zeroing the output of layer {name!r}",
                           atol=1e-6, rtol=1e-5,
                           nudge="the compiled model must run the hook on the layer and use what it returns",
                           wrong={"skipped": (plain, _SKIPPED), "wrapper": (torch.zeros_like(plain), (
                               "the whole model's output was zeroed: register the hook on the layer itself, "
                               "not on the compiled wrapper"))})
            _expect_forward_hook(t, layer, handle)
            _expect_as_found(t, state, changed)
            handles = [handle]
            if second:   # a second hook, after the compiled model ran with the first
                state = _state(model)
                handles.append(answer(compiled, other, shift))
                _expect_forward_hook(t, other, handles[-1])
                _expect_as_found(t, state, _state(model))
                t.expect_close(compiled(x), both, atol=1e-6,
                               rtol=1e-5, what=f"compiled(x) with a second hook, on layer {second!r}", wrong={
                                   "skipped": (zeroed, _SKIPPED + ", for every hook you attach")},
                               nudge="each hook you attach must run in the compiled model")
            t.expect(all(hasattr(h, "remove") for h in handles), what="what hook_compiled returns",
                     expected="the hook's handle", got=type(handle).__name__,
                     nudge="return the handle register_forward_hook gave you")
            for h in handles:
                h.remove()
            after = compiled(x) if after_removal else None
        torch._dynamo.reset()
    left = learners_hooks(model)
    for row in left:
        remove_row(model, row)
    t.expect(not left, what="hooks left after removing the handles you returned", expected="none",
             got=f"{len(left)} hook(s)", nudge="attach one hook and return its handle")
    if after_removal:
        t.expect_close(after, plain, what="compiled(x) after handle.remove()", atol=1e-6, rtol=1e-5,
                       nudge="handle.remove() must give back the model without the hook: return that hook's handle")


# a check that compiles (eight compiles in all with the "eager" backend, about 0.05 s each on an
# idle laptop core) takes longer than one that only runs hooks
exercise.check_budget_s = 5.0
exercise.time_limit = 10.0   # per case: a first compile on a busy machine can pass the usual 2 s


@exercise.case("an MLP compiled and called; a hook on its first Linear")
def _(answer, t: Tester) -> None:
    _run(answer, t, mlp(30), "0", kit.randn(2, 4, seed=30), after_removal=True)


@exercise.case("a layer inside a nested Sequential (encoder.body.2)")
def _(answer, t: Tester) -> None:
    _run(answer, t, kit.Nested(seed=31), "encoder.body.2", kit.randn(3, 4, seed=31))


@exercise.case("two hooks attached one after the other, in float64", hidden=True)
def _(answer, t: Tester) -> None:
    model, x = kit.in_dtype(mlp(32), kit.randn(2, 4, seed=32))
    _run(answer, t, model, "0", x, second="2")


# before torch 2.5 a hook added late fires (claims.py, compile-skips-late-hook): these three are wrong since then
@exercise.wrong("registers the hook and nothing else", mentions="a next call that compiles again",
                since="compile-skips-late-hook")
def _register_only(compiled, layer, hook):
    return layer.register_forward_hook(hook)


@exercise.wrong("registers the hook on the compiled wrapper", mentions="not on the compiled wrapper")
def _on_wrapper(compiled, layer, hook):
    torch._dynamo.reset()
    return compiled.register_forward_hook(hook)


@exercise.wrong("compiles the model again instead of resetting", mentions="a next call that compiles again",
                since="compile-skips-late-hook")
def _compile_again(compiled, layer, hook):
    handle = layer.register_forward_hook(hook)
    torch.compile(compiled._orig_mod, backend="eager")
    return handle


@exercise.wrong("makes the compiled model run uncompiled", mentions="do not replace its forward")
def _uncompile(compiled, layer, hook):
    handle = layer.register_forward_hook(hook)
    compiled.forward = compiled._orig_mod.__call__   # compiled(x) now runs the model eagerly, for good
    return handle


# Where the guards check a parameter's requires_grad (the 2.12.1 and 2.13.0 wheels; not the 2.11.0
# wheel, Colab's), the next call compiles again and the hook runs, but the layer is left frozen; where they
# do not, nothing compiles again and the hook is skipped. Rejected on both, for the reason each gives
# (tests/test_rules_11.py holds the two behaviours).
GUARDS_REQUIRES_GRAD = claims.version_tuple(torch.__version__) >= (2, 12, 0)


@exercise.wrong("freezes the layer's weight to force a recompile, no reset",
                mentions="leave the model as it was" if GUARDS_REQUIRES_GRAD else "a next call that compiles again")
def _freezes(compiled, layer, hook):
    handle = layer.register_forward_hook(hook)
    layer.weight.requires_grad_(False)   # a guarded flag since 2.12: the next call compiles again, frozen
    return handle


@exercise.wrong("switches the model to eval() to force a recompile", mentions="a next call that compiles again",
                since="compile-skips-late-hook")
def _toggles_eval(compiled, layer, hook):
    handle = layer.register_forward_hook(hook)
    compiled.eval()   # no layer of these models reads self.training: no guard fails, nothing compiles again
    return handle


class _PatchHandle:
    def __init__(self, layer):
        self.layer = layer

    def remove(self):
        vars(self.layer).pop("forward", None)


@exercise.wrong("replaces the layer's forward instead of registering a hook", mentions="register_forward_hook(hook)")
def _patches_forward(compiled, layer, hook):
    original = layer.forward

    def forward(*args):
        out = original(*args)
        result = hook(layer, args, out)
        return out if result is None else result

    layer.forward = forward
    torch._dynamo.reset()
    return _PatchHandle(layer)


@exercise.wrong("resets only once, on the first hook it attaches", mentions="for every hook you attach", hidden=True,
                since="compile-skips-late-hook")
def _reset_once(compiled, layer, hook, _done=weakref.WeakSet()):   # noqa: B006 - state kept across calls is the mistake
    handle = layer.register_forward_hook(hook)
    if compiled not in _done:   # (a WeakSet: an id() could be reused by the next check's model)
        _done.add(compiled)
        torch._dynamo.reset()
    return handle
