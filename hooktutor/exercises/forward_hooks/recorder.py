"""02_forward_hooks, exercise: forward_hooks.recorder."""

from __future__ import annotations

import torch
from torch import nn

from ...inventory import remove_hooks
from ...models import MLP
from .. import kit
from ..core import Exercise, Tester, learners_hooks


class Recorder:
    """with Recorder(model, names) as rec: model(x)  ->  rec.outputs[name]: a copy of each call's output."""

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
          "forward hook to each named layer on entering (keeping a copy of every call's output in "
          "rec.outputs[name]), and removes every hook it attached on leaving, also when the block "
          "raises, letting the error through"),
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
    equivalent_mutants={
        "drop@22: self.handles.clear() -> <dropped>": (
            "the handles are removed first; removing a removed handle again (the next "
            "__exit__) does nothing"
        ),
        "early-return@22: __exit__: before `self.handles.clear()` -> return None": (
            "__exit__ returns None instead of False, which also lets the error through; the "
            "handles were removed before it"
        ),
    },
    answer_name="Recorder",
    errors={"'encoder.body.0'": (
        "model.named_children() (or model[i]) lists only the top-level children; a layer inside a "
        "child has a dotted name such as 'encoder.body.0', and model.get_submodule(name) finds it")},
    guide="""(section 6, before `capture` is used) a bare `output.detach()` (the in-place ReLU case); one
    entry per name, so a layer called twice keeps one call; `__exit__` returning `True`,
    which hides the model's error; one `self.handle` reused in the loop, so all hooks but
    the last stay; hooks attached in `__init__` instead of `__enter__`; `named_children()`
    instead of `get_submodule`. Hidden at grading: two recorders on one model at once, which
    catches an `__exit__` that calls `remove_hooks(model)` and so removes the other
    recorder's hooks too.""",
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


@exercise.case("an MLP: fc1 and act2, called once each")
def _(answer, t: Tester) -> None:
    model, x = t.track(MLP(seed=5), "the MLP"), torch.randn(3, 8, generator=torch.Generator().manual_seed(5))
    outputs = _record(t, answer, model, x, ["fc1", "act2"])
    _, ref = model.forward_with_intermediates(x)
    for n in ("fc1", "act2"):
        _expect_calls(t, outputs, n, [ref[n]], "store the layer's output as it left the layer: output.detach().clone()")


@exercise.case("a nested model: layers named encoder.body.0 and head")
def _(answer, t: Tester) -> None:
    model, x = t.track(kit.Nested(seed=6), "a nested model"), kit.randn(2, 4, seed=6)
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


@exercise.wrong("stores output.detach() without a copy", mentions="shares its memory")
class _NoCopy(Recorder):
    def __enter__(self):
        for name in self.names:
            def keep(module, args, output, name=name):
                self.outputs[name].append(output.detach())
            self.handles.append(self.model.get_submodule(name).register_forward_hook(keep))
        return self


@exercise.wrong("keeps one entry per name", mentions="fires its hook twice")
class _LastOnly(Recorder):
    def __enter__(self):
        for name in self.names:
            def keep(module, args, output, name=name):
                self.outputs[name] = [output.detach().clone()]
            self.handles.append(self.model.get_submodule(name).register_forward_hook(keep))
        return self


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


@exercise.wrong("looks the names up in model.named_children()", mentions="get_submodule")
class _Children(Recorder):
    def __enter__(self):
        children = dict(self.model.named_children())
        for name in self.names:
            def keep(module, args, output, name=name):
                self.outputs[name].append(output.detach().clone())
            self.handles.append(children[name].register_forward_hook(keep))
        return self


@exercise.wrong("calls remove_hooks(model) on leaving", mentions="one of the caller's")
class _RemovesAll(Recorder):
    def __exit__(self, *exc):
        remove_hooks(self.model)
        self.handles.clear()
        return False


@exercise.case("what is kept holds no autograd graph (fc1's output requires grad)")
def _(answer, t: Tester) -> None:
    model = t.track(MLP(seed=9), "the MLP")
    outputs = _record(t, answer, model, kit.randn(2, 8, seed=9), ["fc1"])
    t.expect_type(outputs, dict, what="rec.outputs", nudge="a dict name -> list of copies")
    kept = outputs.get("fc1")
    t.expect_type(kept, list, what="rec.outputs['fc1']", nudge="a list with a copy of each call's output")
    for i, value in enumerate(kept):
        kit.expect_detached(t, value, what=f"rec.outputs['fc1'][{i}]")


@exercise.case("a model in eval mode (dropout off, BatchNorm frozen) stays in eval mode", hidden=True)
def _(answer, t: Tester) -> None:
    model = MLP(seed=10).eval()
    t.track(model, "the MLP in eval mode")
    outputs = _record(t, answer, model, kit.randn(2, 8, seed=10), ["fc1"])
    t.expect_type(outputs.get("fc1"), list, what="rec.outputs['fc1']", nudge="a list with a copy of each call's output")
    # the Tester checks afterwards that every module is still in eval mode


@exercise.wrong("switches to eval() on entering and train() on leaving", mentions="leave what you were given",
                hidden=True)
class _ForcesTrain(Recorder):
    def __enter__(self):
        self.model.eval()
        return super().__enter__()

    def __exit__(self, *exc):
        super().__exit__(*exc)
        self.model.train()
        return False
