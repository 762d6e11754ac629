"""05_inplace_relu_pitfall, exercise: inplace_relu.pre_relu_grad."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ...data import shapes
from ...models import SmallCNN, inplace_modules
from .. import kit
from ..core import Exercise, Tester
from ._shared import _RaisingInplace, _reference, _reference_any


def pre_relu_grad(model, x, y, name):
    """dLoss/d(output of `name`) before the in-place ReLU that follows it, from a tensor hook."""
    ### BEGIN SOLUTION
    seen = {}

    def on_output(module, args, output):
        # registered now, before the in-place ReLU runs
        output.register_hook(lambda grad: seen.__setitem__("grad", grad.detach().clone()))

    handle = model.get_submodule(name).register_forward_hook(on_output)
    try:
        F.cross_entropy(model(x), y).backward()
    finally:
        handle.remove()
    return seen["grad"]
    ### END SOLUTION


_BACKWARD_HOOK_NUDGE = (
    "a full backward hook wraps the module's output in a BackwardHookFunction view, and the "
    "in-place ReLU that follows may not modify that view: the error comes in the forward pass. "
    "Use a tensor hook on the output instead (registered in a forward hook), or switch in-place "
    "off for the run.")


exercise = Exercise(
    "inplace_relu.pre_relu_grad", "The gradient before an in-place ReLU",
    task=("write pre_relu_grad(model, x, y, name) that returns the gradient of "
          "F.cross_entropy(model(x), y) w.r.t. the output of layer `name`, where an in-place ReLU "
          "follows that layer; use a tensor hook, leave the model's in-place ReLUs as they are "
          "(also while it runs), and remove every hook, also when the model raises"),
    hints=[
        "In a forward hook on model.get_submodule(name), call output.register_hook(fn): fn receives "
        "the gradient w.r.t. that output during backward.",
        "A tensor hook belongs to the version of the tensor it was registered on. Registered in the "
        "layer's own forward hook, it sees the gradient before the ReLU; registered in the ReLU's "
        "forward hook (after the in-place op), it sees the gradient after it.",
        "A full backward hook on that layer raises the BackwardHookFunction error; retain_grad() "
        "follows the tensor to its latest (rectified) version. Use register_hook.",
    ],
    solution=pre_relu_grad,
    equivalent_mutants={
        "copy@8: .clone() -> <dropped>": (
            "a gradient that reaches a hook does not require grad (no create_graph here), and "
            "autograd never writes into it after the hook ran, so the copy changes no value"
        ),
        "copy@8: .clone() -> .detach()": (
            "a gradient that reaches a hook does not require grad (no create_graph here), and "
            "autograd never writes into it after the hook ran, so the copy changes no value"
        ),
        "copy@8: .detach() -> <dropped>": (
            "a gradient that reaches a hook does not require grad (no create_graph here), and "
            "autograd never writes into it after the hook ran, so the copy changes no value"
        ),
        "keep-state@4: seen = {} (a fresh one per call) -> seen kept across calls": (
            "every call writes seen['grad'] before it reads it, so an entry from an earlier "
            "call is never returned"
        ),
    },
    errors={"BackwardHookFunction": _BACKWARD_HOOK_NUDGE},
    guide="""a full backward hook on that layer (the "BackwardHookFunction is a view and is being
    modified inplace" error, raised in the *forward* pass); a tensor hook registered after
    the in-place op, or `retain_grad()`, both of which give the gradient *after* the ReLU.
    Register the tensor hook in the layer's own forward hook.""",
)


class _InplaceWatch:
    """The check's own forward pre-hooks on the in-place modules: whether each was still
    in-place when it ran (an answer that switches in-place off for the run is seen here).
    Attached before the model is tracked, so they are no leak; removed on exit."""

    def __init__(self, model: nn.Module):
        self.modules = [(n, m) for n, m in model.named_modules() if getattr(m, "inplace", False) is True]
        self.off_while_running: list[str] = []

    def __enter__(self) -> "_InplaceWatch":
        self.handles = [m.register_forward_pre_hook(
            lambda mod, args, n=n: None if mod.inplace else self.off_while_running.append(n))
            for n, m in self.modules]
        return self

    def __exit__(self, *exc) -> None:
        for h in self.handles:
            h.remove()


def _check_pre_relu_grad(answer, t: Tester, *, seed: int, data_seed: int, name: str) -> None:
    x, y = shapes(4, seed=data_seed)
    model = SmallCNN(inplace=True, seed=seed)
    relu = f"features.{int(name.rsplit('.', 1)[1]) + 1}"
    with _InplaceWatch(model) as watch:
        t.track(model, "SmallCNN(inplace=True)")
        got = answer(model, x, y, name)
    _, grads = _reference(seed, x, y, [name, relu])
    t.expect_close(got, grads[name], what=f"pre_relu_grad(model, x, y, {name!r})", atol=1e-6, rtol=1e-4,
                   nudge="return the gradient w.r.t. the layer's output, from a tensor hook registered on it",
                   wrong={"post": (grads[relu], (
                       "that is the gradient after the ReLU: your tensor hook (or retain_grad) was attached "
                       "after the in-place op. Register it in the forward hook of the layer itself, before "
                       "the ReLU overwrites the output"))})
    left = inplace_modules(model)
    t.expect(left == ["features.2", "features.5"], what="the model's in-place modules afterwards",
             expected=["features.2", "features.5"], got=left,
             nudge="leave the model as you found it: tensor hooks work with in-place ReLUs")
    off = sorted(set(watch.off_while_running))
    t.expect(not off, what="in-place modules switched off while the model ran", expected=[], got=off,
             nudge="the gradient is right, but the ReLUs were not in-place during your run: the task is to "
                   "get it with a tensor hook while they stay in-place (registered in the layer's forward "
                   "hook, it belongs to the output before the ReLU overwrites it)")


@exercise.case("a model that raises halfway through its forward: no hook may stay", hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(_RaisingInplace(seed=15), "the model that raises")
    kit.call_expecting_kit_error(answer, model, kit.randn(2, 4, seed=15), torch.tensor([0, 1]), "body.0")


@exercise.case("SmallCNN(inplace=True), the BatchNorm layer 'features.1'")
def _(answer, t: Tester) -> None:
    _check_pre_relu_grad(answer, t, seed=7, data_seed=21, name="features.1")


@exercise.case("SmallCNN(inplace=True), the second conv 'features.4'")
def _(answer, t: Tester) -> None:
    _check_pre_relu_grad(answer, t, seed=8, data_seed=22, name="features.4")


@exercise.case("Linear -> ReLU(inplace=True) on 2-D inputs, the layer 'lin'")
def _(answer, t: Tester) -> None:
    model = kit.InplaceAfter(seed=14)
    x, y = kit.randn(5, 3, seed=14), torch.tensor([0, 1, 2, 1, 0])
    want = _reference_any(model, x, y, "lin")
    with _InplaceWatch(model) as watch:
        t.track(model, "Sequential-like lin -> ReLU(inplace=True)")
        got = answer(model, x, y, "lin")
    t.expect_close(got, want, what="pre_relu_grad(model, x, y, 'lin')", atol=1e-6, rtol=1e-4,
                   nudge="return the gradient w.r.t. the output of 'lin', from a tensor hook registered on it "
                         "in the layer's forward hook")
    t.expect(not watch.off_while_running and model.act.inplace, what="model.act.inplace during and after the run",
             expected=True, got=False, nudge="leave the model's ReLUs in-place: tensor hooks work with them")


@exercise.wrong("uses a full backward hook", mentions="BackwardHookFunction view")
def _full_backward_hook(model, x, y, name):
    seen = {}
    handle = model.get_submodule(name).register_full_backward_hook(
        lambda m, gin, gout: seen.__setitem__("grad", gout[0]))
    try:
        F.cross_entropy(model(x), y).backward()
    finally:
        handle.remove()
    return seen["grad"]


@exercise.wrong("registers the tensor hook after the in-place ReLU", mentions="after the in-place op")
def _hook_after_relu(model, x, y, name):
    seen = {}
    relu = model.features[int(name.rsplit(".", 1)[1]) + 1]

    def on_relu_output(m, a, o):
        o.register_hook(lambda g: seen.__setitem__("grad", g))
    handle = relu.register_forward_hook(on_relu_output)
    try:
        F.cross_entropy(model(x), y).backward()
    finally:
        handle.remove()
    return seen["grad"]


@exercise.wrong("uses retain_grad() in the layer's forward hook", mentions="retain_grad")
def _retain_grad(model, x, y, name):
    kept = {}

    def keep(m, a, o):
        o.retain_grad()
        kept["out"] = o
    handle = model.get_submodule(name).register_forward_hook(keep)
    try:
        F.cross_entropy(model(x), y).backward()
    finally:
        handle.remove()
    return kept["out"].grad


@exercise.wrong("switches the ReLUs off for the run, then back on", mentions="not in-place during your run")
def _switches_off(model, x, y, name):
    was = [m for m in model.modules() if getattr(m, "inplace", False) is True]
    for m in was:
        m.inplace = False
    try:
        return pre_relu_grad(model, x, y, name)
    finally:
        for m in was:
            m.inplace = True


@exercise.wrong("leaves the forward hook attached", mentions="still attached")
def _pre_relu_leaky(model, x, y, name):
    seen = {}

    def on_output(m, a, o):
        o.register_hook(lambda g: seen.__setitem__("grad", g.detach().clone()))

    model.get_submodule(name).register_forward_hook(on_output)
    F.cross_entropy(model(x), y).backward()
    return seen["grad"]


@exercise.wrong("removes the forward hook after backward, not in a finally:", mentions="still attached",
                     hidden=True)
def _pre_relu_no_finally(model, x, y, name):
    seen = {}

    def on_output(m, a, o):
        o.register_hook(lambda g: seen.__setitem__("grad", g.detach().clone()))

    handle = model.get_submodule(name).register_forward_hook(on_output)
    F.cross_entropy(model(x), y).backward()
    handle.remove()
    return seen["grad"]
