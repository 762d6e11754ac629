"""05_inplace_relu_pitfall, exercise 3: the gradient before an in-place ReLU, from a tensor hook.

Half-right answers an examiner expects, by kit dimension (``kit.DIMENSIONS``):

- inplace_after / technique: a full backward hook on the layer (the BackwardHookFunction error);
  the tensor hook registered after the in-place op, or ``retain_grad()``, both of which give
  the gradient *after* the ReLU; switching in-place off for the run (right numbers, wrong
  technique: the task keeps the ReLUs in-place); a full backward hook on the layer made to work
  by pre-hooks that hand every in-place module a clone (right numbers, no tensor hook: the
  check's own tensor hook on the layer's output sees no other hook beside it);
- raises: leaves the forward hook on, or removes it without ``finally:`` (hidden: the model
  raises);
- nested / nd: SmallCNN's ``features.N`` names and 4-D outputs; a 2-D Linear -> ReLU;
- left_as_found: calls ``model.zero_grad()`` first, which wipes the caller's gradients;
- dtype / left_as_found: the Linear case runs in float64, in eval mode with a frozen bias, and
  everything (train/eval, requires_grad, grad mode) must be as it was afterwards.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from ...data import shapes
from ...models import SmallCNN, inplace_modules
from .. import kit
from ..core import Exercise, Tester
from ._shared import Accumulated, RaisingInplace, param_grad, reference, reference_any


def pre_relu_grad(model, x, y, name):
    """dLoss/d(output of `name`) before the in-place ReLU that follows it, from a tensor hook."""
    ### BEGIN SOLUTION
    seen = {}

    def on_output(module, args, output):
        # registered now, before the in-place ReLU runs
        output.register_hook(lambda grad: seen.__setitem__("grad", grad.detach().clone()))

    handle = model.get_submodule(name).register_forward_hook(on_output)
    try:
        loss = F.cross_entropy(model(x), y)
        loss.backward()
    finally:
        handle.remove()
    return seen["grad"]
    ### END SOLUTION


exercise = Exercise(
    "inplace_relu.pre_relu_grad", "The gradient before an in-place ReLU",
    task=("write pre_relu_grad(model, x, y, name) that returns the gradient of "
          "F.cross_entropy(model(x), y) w.r.t. the output of layer `name`, where an in-place ReLU "
          "follows that layer; use a tensor hook, leave the model's in-place ReLUs as they are "
          "(also while it runs), and remove every hook, also when the model raises. "
          "Run the backward with loss.backward(), as a training step would: the parameters' .grad "
          "add it up (do not zero or restore them)"),
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
    errors={"BackwardHookFunction": (
        "a full backward hook wraps the module's output in a BackwardHookFunction view, and the "
        "in-place ReLU that follows may not modify that view: the error comes in the forward pass. "
        "Use a tensor hook on the output instead (registered in a forward hook), or switch in-place "
        "off for the run.")},
    equivalent_mutants={
        "copy@8: .clone() -> <dropped>": (
            "the gradient a tensor hook receives is a tensor autograd makes for this backward and never "
            "writes into again while someone holds it (it checks before accumulating in place)"),
        "copy@8: .clone() -> .detach()": (
            "the gradient a tensor hook receives is a tensor autograd makes for this backward and never "
            "writes into again while someone holds it (it checks before accumulating in place)"),
        "copy@8: .detach() -> <dropped>": (
            "in a backward without create_graph the gradient a hook receives holds no graph: detach() "
            "changes nothing"),
        "keep-state@4: seen = {} (a fresh one per call) -> seen kept across calls": (
            "the tensor hook fires in every run the task admits (the layer's output reaches the loss), "
            "so the one entry is overwritten before it is read"),
    },
    guide="""a full backward hook on that layer (the "BackwardHookFunction is a view and is being
    modified inplace" error, raised in the *forward* pass); a tensor hook registered after the
    in-place op, or `retain_grad()`, both of which give the gradient *after* the ReLU (register the
    tensor hook in the layer's own forward hook); switching in-place off for the run, which gives
    the right numbers by another technique than the one asked for, as does a full backward hook
    made to work by pre-hooks that give each in-place module a clone; leaving the forward hook
    attached, or (caught at grading) removing it without `finally:`; `model.zero_grad()` first, which
    wipes the gradients the caller had accumulated; a float32 copy of a float64 gradient.""",
)


_NO_TENSOR_HOOK = (
    "the gradient is right, but no tensor hook of yours was on the layer's output: the task is to get "
    "it with output.register_hook(...) in the layer's forward hook (not with a full backward hook and "
    "copies for the in-place modules)")


class _InplaceWatch:
    """The check's own forward pre-hooks on the in-place modules: whether each was still
    in-place when it ran (an answer that switches in-place off for the run is seen here).
    Attached before the model is tracked, so they are no leak; removed on exit."""

    def __init__(self, model: nn.Module):
        self.modules = [(n, m) for n, m in model.named_modules() if getattr(m, "inplace", False) is True]
        self.off_while_running: list[str] = []

    def __enter__(self) -> _InplaceWatch:
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
    with _InplaceWatch(model) as watch, kit.TensorHookWatch(model.get_submodule(name)) as hooks:
        t.track(model, "SmallCNN(inplace=True)")
        got = answer(model, x, y, name)
    _, grads = reference(seed, x, y, [name, relu])
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
    hooks.expect_tensor_hook(t, name, _NO_TENSOR_HOOK)


@exercise.case("SmallCNN(inplace=True), the BatchNorm layer 'features.1'")
def _(answer, t: Tester) -> None:
    _check_pre_relu_grad(answer, t, seed=7, data_seed=21, name="features.1")


@exercise.case("SmallCNN(inplace=True), the second conv 'features.4'")
def _(answer, t: Tester) -> None:
    _check_pre_relu_grad(answer, t, seed=8, data_seed=22, name="features.4")


@exercise.case("Linear -> ReLU(inplace=True) on 2-D inputs in float64, the layer 'lin' (eval mode, bias frozen, "
               "a gradient already accumulated in lin.weight)")
def _(answer, t: Tester) -> None:
    model, x = kit.in_dtype(kit.InplaceAfter(seed=14), kit.randn(5, 3, seed=14))
    kit.freeze(model.eval(), "lin.bias")
    y = torch.tensor([0, 1, 2, 1, 0])
    want, weight = reference_any(model, x, y, "lin"), param_grad(model, x, y, "lin.weight")
    with _InplaceWatch(model) as watch, kit.TensorHookWatch(model.lin) as hooks:
        t.track(model, "Sequential-like lin -> ReLU(inplace=True)")
        with kit.LeftAsFound(t, model, name="the model (in eval mode, lin.bias frozen)"), \
                Accumulated(t, model.lin.weight, weight, "lin.weight"):
            got = answer(model, x, y, "lin")
    t.expect_type(got, torch.Tensor, what="pre_relu_grad(model, x, y, 'lin')",
                  nudge="return the gradient tensor the tensor hook received")
    t.expect(got.dtype == torch.float64, what="the dtype of pre_relu_grad(model, x, y, 'lin')",
             expected=torch.float64, got=got.dtype, nudge="return the gradient as the hook received it")
    t.expect_close(got, want, what="pre_relu_grad(model, x, y, 'lin')", atol=1e-9, rtol=1e-7,
                   nudge="return the gradient w.r.t. the output of 'lin', from a tensor hook registered on it "
                         "in the layer's forward hook")
    t.expect(not watch.off_while_running and model.act.inplace, what="model.act.inplace during and after the run",
             expected=True, got=False, nudge="leave the model's ReLUs in-place: tensor hooks work with them")
    hooks.expect_tensor_hook(t, "lin", _NO_TENSOR_HOOK)


@exercise.case("a model that raises halfway through its forward: no hook may stay", hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(RaisingInplace(seed=15), "the model that raises")
    kit.call_expecting_kit_error(answer, model, kit.randn(2, 4, seed=15), torch.tensor([0, 1]), "body.0")


# -- the wrong answers peculiar to this exercise -------------------------------------------------

def _tensor_hook(*, remove="finally"):
    """The right technique, with the forward hook removed "finally", "after" backward (not in a
    finally block) or "never"."""
    def answer(model, x, y, name):
        seen = {}

        def on_output(m, a, o):
            o.register_hook(lambda g: seen.__setitem__("grad", g.detach().clone()))

        handle = model.get_submodule(name).register_forward_hook(on_output)
        if remove == "finally":
            try:
                F.cross_entropy(model(x), y).backward()
            finally:
                handle.remove()
        else:
            F.cross_entropy(model(x), y).backward()
            if remove == "after":
                handle.remove()
        return seen["grad"]
    return answer


exercise.wrong("leaves the forward hook attached", mentions="still attached")(_tensor_hook(remove="never"))
exercise.wrong("removes the forward hook after backward, not in a finally:", mentions="still attached",
               hidden=True)(_tensor_hook(remove="after"))


@exercise.wrong("uses a full backward hook", mentions="BackwardHookFunction view")
def _full_backward_hook(model, x, y, name):
    seen, layer = {}, model.get_submodule(name)
    handle = layer.register_full_backward_hook(lambda m, gin, gout: seen.__setitem__("grad", gout[0]))
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


@exercise.wrong("calls model.zero_grad() first", mentions="do not call model.zero_grad()")
def _zero_grad_first(model, x, y, name):
    model.zero_grad()
    return pre_relu_grad(model, x, y, name)


@exercise.wrong("keeps a float32 copy of the gradient", mentions="as the hook received it")
def _float32(model, x, y, name):
    return pre_relu_grad(model, x, y, name).float()


@exercise.wrong("a full backward hook, with pre-hooks that give each in-place module a clone",
                mentions="no tensor hook of yours")
def _full_hook_and_clones(model, x, y, name):
    seen, handles = {}, []
    try:
        for m in model.modules():
            if getattr(m, "inplace", False) is True:
                handles.append(m.register_forward_pre_hook(lambda mod, args: (args[0].clone(),)))
        handles.append(model.get_submodule(name).register_full_backward_hook(
            lambda m, gin, gout: seen.__setitem__("grad", gout[0].detach().clone())))
        F.cross_entropy(model(x), y).backward()
    finally:
        for h in handles:
            h.remove()
    return seen["grad"]


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
