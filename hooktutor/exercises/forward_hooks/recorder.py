"""02_forward_hooks, exercise: write a recording context manager (section 6, before ``capture``).

Half-right answers an examiner expects, by kit dimension (``kit.DIMENSIONS``):

- inplace_after / alias: keeps a bare ``output.detach()`` (or the output itself), which the
  in-place ReLU after the layer, or a residual added in place, rewrites;
- detached: keeps ``output.clone()``, which holds the autograd graph of the whole forward;
- twice: keeps one entry per name, so a layer called twice keeps only its last call;
- raises: ``__exit__`` returns True and hides the model's error; one ``self.handle`` reused in
  the loop leaves every hook but the last;
- nested: looks the names up in ``named_children()``, missing dotted names;
- technique: attaches the hooks in ``__init__`` instead of ``__enter__``;
- alias (hidden): a module held under two names; handles kept in a dict keyed by module lose one;
- dtype (hidden): converts what it keeps to float32;
- left_as_found: switches the model to eval() and back to train(); clears the modules' hook
  dicts or calls ``remove_hooks(model)``, which removes the caller's own hooks too;
- hidden: two recorders on one model at once (an ``__exit__`` that removes every hook of the
  model wipes the other recorder's hooks too).
"""

from __future__ import annotations

import torch
from torch import nn

from ...inventory import remove_hooks
from ...models import MLP
from .. import kit
from ..core import Exercise, Tester, learners_hooks
from ._shared import CallerHooks


class Recorder:
    """with Recorder(model, names) as rec: model(x)
    ->  rec.outputs[name]: a copy of each call's output."""

    def __init__(self, model, names):
        self.model, self.names = model, list(names)
        self.outputs = {name: [] for name in self.names}
        self.handles = []

    def __enter__(self):
        ### BEGIN SOLUTION
        for name in self.names:
            def keep(module, args, output, name=name):
                self.outputs[name].append(output.detach().clone())
            self.handles.append(self.model.get_submodule(name).register_forward_hook(keep))
        ### END SOLUTION
        return self

    def __exit__(self, *exc):
        ### BEGIN SOLUTION
        for handle in self.handles:
            handle.remove()
        self.handles.clear()
        ### END SOLUTION
        return False


exercise = Exercise(
    "forward_hooks.recorder", "Write a recording context manager",
    task=("complete the class Recorder: `with Recorder(model, names) as rec: model(x)` attaches a "
          "forward hook to each named layer on entering (keeping a detached copy of every call's "
          "output in rec.outputs[name]), and removes every hook it attached on leaving, also when the block "
          "raises, letting the error through. Each named layer returns one tensor (not a tuple, as "
          "nn.LSTM or nn.GRU do)"),
    hints=[
        "In __enter__: for each name, module = self.model.get_submodule(name); keep the handle that "
        "module.register_forward_hook(hook) returns in self.handles; return self.",
        "The hook appends output.detach().clone() to self.outputs[name]: a list, so a layer called "
        "twice keeps both outputs; a copy, so a later in-place op cannot change it. Bind the name "
        "with a default argument (def keep(module, args, output, name=name)) or a factory.",
        "In __exit__(self, *exc): remove every handle in self.handles, then return False (or None), "
        "so that an error raised inside the with block still reaches the caller.",
    ],
    solution=Recorder,
    answer_name="Recorder",
    errors={"'encoder.body.0'": (
        "model.named_children() (or model[i]) lists only the top-level children; a layer inside a "
        "child has a dotted name such as 'encoder.body.0', and model.get_submodule(name) finds it")},
    equivalent_mutants={
        "drop@23: self.handles.clear() -> <dropped>": (
            "removing a removed handle does nothing: a recorder entered again adds its new handles and "
            "removes them all on leaving, so the hooks on the model are the same at every moment"),
        "early-return@23: __exit__: before `self.handles.clear()` -> return None": (
            "returns None instead of False after removing every handle: both let the error through, and "
            "the handles kept are already removed (removing them again does nothing)"),
    },
    guide="""(section 6, before `capture` is used) a bare `output.detach()` (the in-place ReLU case), or
    `output.clone()`, which keeps the
    autograd graph; one entry per name, so a layer called twice keeps one call; `__exit__`
    returning `True`, which hides the model's error; one `self.handle` reused in the loop, so all
    hooks but the last stay; hooks attached in `__init__` instead of `__enter__`;
    `named_children()` instead of `get_submodule`; an `__exit__` that clears the modules' hook dicts
    or calls `remove_hooks(model)`, which removes the caller's own hooks (and another recorder's)
    too; switching the model to `eval()` and back to `train()`. Caught at grading: a float32
    copy of a float64 output; handles kept in a dict keyed by module, which loses one for a module
    held under two names.""",
)


def _record(t: Tester, answer, model: nn.Module, x: torch.Tensor, names: list[str]) -> object:
    rec = answer(model, names)
    t.expect(not learners_hooks(model, include_global=True), what="hooks attached by Recorder(model, names)",
             expected="none before the with block", got="hooks already attached", nudge=(
                 "attach the hooks in __enter__, not in __init__: a Recorder that is created but "
                 "never entered (or entered later) must not change the model"))
    with kit.HookWitness({n: model.get_submodule(n) for n in names}) as seen:
        with rec as entered:
            model(x)
    t.expect(entered is rec, what="what `with Recorder(...) as rec` gives", expected="the Recorder itself",
             got=type(entered).__name__, nudge="__enter__ must end with `return self`")
    for n in names:
        t.expect(seen.fired(n, "forward") > 0, what=f"forward hooks on {n!r} while it ran",
                 expected="yours", got="none",
                 nudge=f"{n!r} ran without your forward hook: attach it in __enter__ with register_forward_hook")
    outputs = getattr(rec, "outputs", None)
    t.expect_type(outputs, dict, what="rec.outputs", nudge="keep the {name: [outputs]} dict of __init__")
    return outputs


def _expect_calls(t: Tester, outputs: dict, name: str, expected: list[torch.Tensor], nudge: str) -> None:
    got = outputs.get(name)
    t.expect_type(got, list, what=f"rec.outputs[{name!r}]", nudge="append to the list of that name, one entry per call")
    t.expect(len(got) == len(expected), what=f"the calls recorded for {name!r}", expected=len(expected),
             got=len(got), nudge=("a layer called twice in one forward fires its hook twice: append every "
                                  "call's output, do not replace the list"))
    for i, (g, e) in enumerate(zip(got, expected)):
        t.expect_close(g, e, what=f"rec.outputs[{name!r}][{i}]", nudge=nudge, atol=0, rtol=0)
        t.expect(g.dtype == e.dtype, what=f"the dtype of rec.outputs[{name!r}][{i}]", expected=e.dtype, got=g.dtype,
                 nudge="keep the output as the layer produced it, dtype included: output.detach().clone()")
        kit.expect_detached(t, g, what=f"rec.outputs[{name!r}][{i}]")


@exercise.case("an MLP: fc1 and act2, called once each")
def _(answer, t: Tester) -> None:
    model, x = t.track(MLP(seed=5), "the MLP"), torch.randn(3, 8, generator=torch.Generator().manual_seed(5))
    outputs = _record(t, answer, model, x, ["fc1", "act2"])
    _, ref = model.forward_with_intermediates(x)
    for n in ("fc1", "act2"):
        _expect_calls(t, outputs, n, [ref[n]], "store the layer's output as it left the layer: output.detach().clone()")


@exercise.case("a nested model in eval mode: layers named encoder.body.0 and head")
def _(answer, t: Tester) -> None:
    model, x = t.track(kit.Nested(seed=6).eval(), "a nested model"), kit.randn(2, 4, seed=6)
    with kit.LeftAsFound(t, model, name="the nested model (in eval mode)"):
        outputs = _record(t, answer, model, x, ["encoder.body.0", "head"])
    ref = model.intermediates(x)
    for n in ("encoder.body.0", "head"):
        _expect_calls(t, outputs, n, [ref[n]],
                      "find each layer with model.get_submodule(name): it follows dotted names")


@exercise.case("a layer called twice in one forward")
def _(answer, t: Tester) -> None:
    model, x = t.track(kit.Twice(seed=7), "a model that calls one Linear twice"), kit.randn(2, 4, seed=7)
    outputs = _record(t, answer, model, x, ["block"])
    _expect_calls(t, outputs, "block", [out for _, out in model.block_calls(x)],
                  "keep every call's output, in calling order")


@exercise.case("an in-place ReLU right after the layer")
def _(answer, t: Tester) -> None:
    model, x = t.track(kit.InplaceAfter(seed=8), "a Linear followed by ReLU(inplace=True)"), kit.randn(4, 3, seed=8)
    outputs = _record(t, answer, model, x, ["lin"])
    _expect_calls(t, outputs, "lin", [model.lin.forward(x).detach()], (
        "the in-place ReLU wrote into the tensor you kept: output.detach() shares its memory. "
        "Store output.detach().clone(), a copy"))


@exercise.case("the model raises inside the with block")
def _(answer, t: Tester) -> None:
    model = t.track(kit.Raising(seed=9), "a model that raises halfway (after fc1)")
    raised = False
    with CallerHooks(t, {"fc1": model.fc1}):
        try:
            with answer(model, ["fc1"]):
                model(torch.zeros(1, 4))
        except kit.KitError:
            raised = True
    t.expect(raised, what="the model's error", expected="raised out of the with block", got="swallowed",
             nudge="__exit__ returned True, which tells Python to hide the error; return False (or "
                   "nothing) after removing the hooks, so the caller sees what went wrong")
    left = learners_hooks(model, include_global=True)
    t.expect(not left, what="hooks left on the model after the with block", expected="none",
             got=f"{len(left)} hook(s)", nudge="remove every handle you kept in __exit__")


@exercise.case("two recorders on one model at once: leaving the inner one keeps the outer one", hidden=True)
def _(answer, t: Tester) -> None:
    model, x = t.track(MLP(seed=10), "the MLP"), torch.ones(1, 8)
    outer_rec, inner_rec = answer(model, ["fc1"]), answer(model, ["fc1", "fc2"])
    with outer_rec:
        with inner_rec:
            model(x)
        model(x)      # the outer recorder is still on: it must see this call too
    outer = getattr(outer_rec, "outputs", {}).get("fc1", [])
    t.expect(len(outer) == 2, what="calls of fc1 the outer recorder kept", expected=2, got=len(outer), nudge=(
        "leaving the inner recorder removed the outer one's hook too: remove only the handles this "
        "recorder attached (handle.remove()), never every hook of the module"))


@exercise.case("a module held under two names (block and alias), called twice", hidden=True)
def _(answer, t: Tester) -> None:
    model = kit.Twice(seed=12)
    model.alias = model.block          # the same Linear, registered a second time
    t.track(model, "a model holding `block` also as `alias`")
    x = kit.randn(2, 4, seed=12)
    outputs = _record(t, answer, model, x, ["block", "alias"])
    calls = [out for _, out in model.block_calls(x)]
    for n in ("block", "alias"):
        _expect_calls(t, outputs, n, calls, "keep every call's output under each name, in calling order")


@exercise.case("a residual model in float64: the output of `body` is added to in place after its hook ran",
               hidden=True)
def _(answer, t: Tester) -> None:
    model, x = kit.in_dtype(kit.Residual(seed=11), kit.randn(2, 4, seed=11))
    t.track(model, "a residual model in float64")
    want = model.outputs(x)
    outputs = _record(t, answer, model, x, ["fc", "body"])
    for n in ("fc", "body"):
        _expect_calls(t, outputs, n, [want[n]], (
            "what you kept changed after the hook ran (the model added to the output in place), or lost "
            "its dtype: keep output.detach().clone(), a copy as the layer produced it"))


# -- the wrong answers peculiar to this exercise -------------------------------------------------

def _recorder(*, keep=lambda output: output.detach().clone(), append=True, lookup="get_submodule"):
    """One factory for the near-copy wrong answers: what the hook keeps (``keep(output)``),
    whether it appends or replaces the list, and how a name finds its layer."""
    class Wrong(Recorder):
        def __enter__(self):
            children = dict(self.model.named_children())
            for name in self.names:
                def hook(module, args, output, name=name):
                    if append:
                        self.outputs[name].append(keep(output))
                    else:
                        self.outputs[name] = [keep(output)]
                layer = self.model.get_submodule(name) if lookup == "get_submodule" else children[name]
                self.handles.append(layer.register_forward_hook(hook))
            return self
    return Wrong


exercise.wrong("stores output.detach() without a copy", mentions="shares its memory")(
    _recorder(keep=lambda output: output.detach()))
exercise.wrong("keeps one entry per name", mentions="fires its hook twice")(_recorder(append=False))
exercise.wrong("looks the names up in model.named_children()", mentions="get_submodule")(
    _recorder(lookup="named_children"))


@exercise.wrong("__exit__ returns True", mentions="hide the error")
class _Swallows(Recorder):
    def __exit__(self, *exc):
        super().__exit__(*exc)
        return True


@exercise.wrong("keeps only the last handle", mentions="left a hook attached")
class _OneHandle(Recorder):
    def __enter__(self):
        for name in self.names:
            def keep(module, args, output, name=name):
                self.outputs[name].append(output.detach().clone())
            self.handle = self.model.get_submodule(name).register_forward_hook(keep)
        return self

    def __exit__(self, *exc):
        self.handle.remove()
        return False


@exercise.wrong("attaches the hooks in __init__", mentions="not in __init__")
class _InInit(Recorder):
    def __init__(self, model, names):
        super().__init__(model, names)
        super().__enter__()

    def __enter__(self):
        return self


@exercise.wrong("clears each layer's _forward_hooks on leaving", mentions="a hook it did not attach")
class _ClearsHookDicts(Recorder):
    def __exit__(self, *exc):
        for name in self.names:
            self.model.get_submodule(name)._forward_hooks.clear()
        return False


@exercise.wrong("switches the model to eval() on entering and to train() on leaving", mentions="as you found it")
class _EvalInside(Recorder):
    def __enter__(self):
        self.model.eval()
        return super().__enter__()

    def __exit__(self, *exc):
        self.model.train()
        return super().__exit__(*exc)


exercise.wrong("keeps a float32 copy", mentions="lost its dtype", hidden=True)(
    _recorder(keep=lambda output: output.detach().clone().float()))


@exercise.wrong("keeps the handles in a dict keyed by module", mentions="left a hook attached", hidden=True)
class _HandlesByModule(Recorder):
    def __enter__(self):
        self.by_module = {}
        for name in self.names:
            layer = self.model.get_submodule(name)

            def keep(module, args, output, name=name):
                self.outputs[name].append(output.detach().clone())
            self.by_module[layer] = layer.register_forward_hook(keep)
        return self

    def __exit__(self, *exc):
        for handle in self.by_module.values():
            handle.remove()
        return False


@exercise.wrong("calls remove_hooks(model) on leaving", mentions="nor with remove_hooks(model)")
class _RemovesAll(Recorder):
    def __exit__(self, *exc):
        remove_hooks(self.model)
        self.handles.clear()
        return False
