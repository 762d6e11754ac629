"""04_backward_hooks, exercise: a full backward hook that clamps ``grad_input``; the caller removes it.

Half-right answers an examiner expects, by kit dimension (``kit.DIMENSIONS``):

- a list returned instead of a tuple (torch takes it where the input requires grad, refuses it
  on a first layer);
- technique: the legacy ``register_backward_hook`` (on a ``Linear`` its ``grad_input`` holds the
  layer's own bias and weight gradients, so they get clamped too); returns a bare tensor instead
  of a tuple with one entry per entry of ``grad_input``; clamps only the upper side; attaches no
  backward hook at all: a forward pre-hook that puts a tensor hook clamping the gradient on each
  input (the right numbers, another technique: ``FullHookWitness`` sees no full backward hook);
- alias: clamps ``grad_input`` in place (``clamp_``): a pass-through layer (a Dropout in eval
  mode) on a residual branch hands back the very tensor the skip connection also receives, so
  the skip's gradient is clamped too;
- twice: the layer runs twice in one forward (the hook fires once per call);
- nd: a conv on 4-D tensors, in float64 (dtype);
- a module with two tensor inputs (clamps only ``grad_input[0]``) and one with a Python float
  input (``grad_input`` holds ``None``: clamps ``None``);
- reattach: one call attaches exactly one hook, and the handle returned is the one to remove
  (forgets to return the handle).
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from ...data import blobs
from ...models import MLP, TwoInputNet, seeded
from .. import kit
from ..core import Exercise, Tester
from ._shared import FullHookWitness, _quiet


def clip_input_grad(layer, max_abs):
    """Attach a hook clamping grad_input to [-max_abs, max_abs]; return its handle."""
    ### BEGIN SOLUTION
    def hook(module, grad_input, grad_output):
        return tuple(None if g is None else g.clamp(-max_abs, max_abs) for g in grad_input)

    return layer.register_full_backward_hook(hook)
    ### END SOLUTION


exercise = Exercise(
    "backward_hooks.clip_input_grad", "Clip the gradient leaving a layer",
    task=("write clip_input_grad(layer, max_abs) that attaches a full backward hook to `layer` "
          "which clamps every entry of grad_input to [-max_abs, max_abs], and returns the hook's "
          "handle (the caller removes it). The layer's own parameter gradients must not change"),
    hints=[
        "A full backward hook that returns something replaces grad_input: return a tuple with one "
        "entry per entry of grad_input.",
        "grad_input holds None for an input that is not a tensor (and for every input when none "
        "requires grad): keep None as None, clamp the others with g.clamp(-max_abs, max_abs).",
        "Use register_full_backward_hook, not the legacy register_backward_hook: the legacy "
        "grad_input of a Linear also holds its bias and weight gradients.",
        "return layer.register_full_backward_hook(hook): the handle is what the caller removes.",
    ],
    solution=clip_input_grad,
    errors={
        "invalid number of grad_input": (
            "return a tuple with one entry per entry of grad_input, even when there is only one: "
            "a bare tensor is read as a sequence of its rows."),
        "has changed the size of value": (
            "return a tuple with one entry per entry of grad_input, even when there is only one: "
            "a bare tensor is read as a sequence of its rows."),
        "'NoneType' object has no attribute": (
            "grad_input holds None for inputs that are not tensors (or when no input requires "
            "grad): keep None entries as None and clamp only the tensors."),
        "has changed the type of value": (
            "your hook returned a gradient in another dtype than the one it received (a .float()?): "
            "g.clamp(-max_abs, max_abs) keeps the dtype, return it as it is."),
        "should always return None or None for all gradients": (
            "on a module whose input needs no grad (the first layer) torch accepts only None or a tuple of "
            "None from a full backward hook: return a tuple, tuple(...), not a list (here (None,))."),
        "Cannot use both regular backward hooks and full backward hooks": (
            "a legacy register_backward_hook was attached to this module before; use only "
            "register_full_backward_hook."),
    },
    guide="""returning a tensor instead of a tuple with one entry per entry of `grad_input`, or a list
    (torch takes one where the input requires grad, and refuses it on a first layer); using the
    legacy `register_backward_hook`, whose `grad_input` of a `Linear` holds the bias and weight
    gradients, so the layer's own gradients change; clamping `None` entries (keep them `None`);
    clamping only `grad_input[0]` of a module with two inputs; clamping in place with `clamp_`,
    which also clamps the gradient of a skip connection when the layer passes its gradient
    through unchanged (a Dropout in eval mode on a residual branch); clamping with tensor hooks that a
    forward pre-hook puts on the inputs, without any backward hook (the check sees which hook ran).""",
)


def _handle_of(answer: Callable, t: Tester, layer: nn.Module, max_abs: float):
    handle = answer(layer, max_abs)
    t.expect_type(handle, RemovableHandle, what="clip_input_grad(layer, max_abs)",
                  nudge="return the handle that register_full_backward_hook gave you, so that the caller "
                        "can remove the hook")
    return handle


@exercise.case("fc2 of an MLP: fc1 gets the clipped gradient, fc2's own gradients stay")
def _(answer, t: Tester) -> None:
    model = t.track(MLP(seed=2), "the MLP")
    reference = copy.deepcopy(model)
    x, _ = blobs(16, seed=2)
    limit = 0.05
    # reference: clamp the gradient of fc2's input (act1's output) with a tensor hook
    hidden = reference.act1(reference.fc1(x))
    hidden.register_hook(lambda g: g.clamp(-limit, limit))
    reference.head(reference.act2(reference.fc2(hidden))).sum().backward()
    upper_only = copy.deepcopy(model)  # what clamp(max=max_abs) alone gives
    hidden_u = upper_only.act1(upper_only.fc1(x))
    hidden_u.register_hook(lambda g: g.clamp(max=limit))
    upper_only.head(upper_only.act2(upper_only.fc2(hidden_u))).sum().backward()
    with _quiet():
        handle = _handle_of(answer, t, model.fc2, limit)
        try:
            attached = kit.hook_count(model.fc2)
            with FullHookWitness({"fc2": model.fc2}) as witness:
                model(x).sum().backward()
        finally:
            handle.remove()
    t.expect(attached == 1, what="hooks on fc2 after one clip_input_grad(model.fc2, max_abs)", expected=1,
             got=attached, nudge=(
        "attach one full backward hook per call, to `layer` itself (layer.register_full_backward_hook, not "
        "a global hook), and return its handle"))
    t.expect_type(model.fc1.weight.grad, torch.Tensor, what="model.fc1.weight.grad",
                  nudge="no gradient reached fc1: return the clamped grad_input (a detach() or a None "
                        "where a tensor was cuts the backward pass)")
    t.expect_close(model.fc2.weight.grad, reference.fc2.weight.grad, what="model.fc2.weight.grad",
                   nudge="the hooked layer's own weight gradient changed. Change only grad_input, in a "
                         "full backward hook: the legacy register_backward_hook's grad_input also holds "
                         "the layer's bias and weight gradients")
    t.expect_close(model.fc1.weight.grad, reference.fc1.weight.grad, what="model.fc1.weight.grad",
                   nudge="the layers before fc2 must receive grad_input clamped to [-max_abs, max_abs]: "
                         "return the clamped tuple from the hook",
                   wrong={"upper only": (upper_only.fc1.weight.grad, (
                       "only the upper side was clamped: the negative entries must be clamped to -max_abs "
                       "too, g.clamp(-max_abs, max_abs)"))})
    t.expect(witness.fired("fc2", "backward") == 1 and not witness.legacy["fc2"],
             what="a full backward hook on fc2 while the model ran", expected="one full backward hook",
             got="a legacy register_backward_hook" if witness.legacy["fc2"] else "no backward hook", nudge=(
                 "the gradients are right, but no full backward hook clamped them: the task is a hook "
                 "attached with layer.register_full_backward_hook, which receives grad_input and returns "
                 "the clamped tuple (tensor hooks on the inputs are another technique)"))


@exercise.case("a module with two tensor inputs a and b, both requiring grad", hidden=True)
def _(answer, t: Tester) -> None:
    net = t.track(TwoInputNet(3, seed=3), "the TwoInputNet")
    a = torch.linspace(-2, 2, 6).reshape(2, 3).requires_grad_()
    b = torch.ones(2, 3, requires_grad=True)
    net(a, b, scale=5.0).sum().backward()
    want_a, want_b = a.grad.clamp(-1.0, 1.0), b.grad.clamp(-1.0, 1.0)
    a.grad = b.grad = None
    with _quiet():
        handle = _handle_of(answer, t, net, 1.0)
        try:
            net(a, b, scale=5.0).sum().backward()
        finally:
            handle.remove()
    t.expect_close(a.grad, want_a, what="a.grad", nudge="clamp grad_input[0] too")
    t.expect_close(b.grad, want_b, what="b.grad",
                   nudge="grad_input has one entry per positional tensor input, and b's gradient came "
                         "through unclamped: clamp every entry of grad_input, not just grad_input[0]")


@exercise.case("a Linear called twice in one forward: both calls clip", hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(kit.Twice(seed=5), "the model that calls its block twice")
    limit = 0.02
    x = kit.randn(3, 4, seed=5).requires_grad_()
    # reference: clamp the gradient of each call's input with tensor hooks, no module hook
    a = x.detach().clone().requires_grad_()
    a.register_hook(lambda g: g.clamp(-limit, limit))
    inner = torch.tanh(model.block.forward(a))
    inner.register_hook(lambda g: g.clamp(-limit, limit))
    model.out.forward(model.block.forward(inner)).sum().backward()
    want_x, want_w = a.grad.clone(), model.block.weight.grad.clone()
    model.zero_grad(set_to_none=True)
    with _quiet():
        handle = _handle_of(answer, t, model.block, limit)
        try:
            model(x).sum().backward()
        finally:
            handle.remove()
    t.expect_close(x.grad, want_x, what="x.grad",
                   nudge="the hook fires once per call of the layer: clamp grad_input every time")
    t.expect_close(model.block.weight.grad, want_w, what="model.block.weight.grad",
                   nudge="the gradient between the two calls must be clamped too (the hook fires for the "
                         "second call first), and the layer's own weight gradient comes from those values")


@exercise.case("the last conv of a small CNN in float64, on 4-D tensors (N, C, H, W)")
def _(answer, t: Tester) -> None:
    model, x = kit.in_dtype(kit.conv_model(4, seed=6), kit.conv_input(4, seed=6))
    t.track(model, "the small float64 CNN")
    reference = copy.deepcopy(model)
    limit = 0.05
    hidden = reference[1](reference[0](x))
    hidden.register_hook(lambda g: g.clamp(-limit, limit))
    reference[2](hidden).sum().backward()
    with _quiet():
        handle = _handle_of(answer, t, model[2], limit)
        try:
            model(x).sum().backward()
        finally:
            handle.remove()
    t.expect_type(model[0].weight.grad, torch.Tensor, what="model[0].weight.grad",
                  nudge="no gradient reached the first conv: return the clamped grad_input")
    t.expect_close(model[0].weight.grad, reference[0].weight.grad, what="model[0].weight.grad",
                   nudge="the layers before the hooked conv must receive grad_input clamped entry by entry; "
                         "clamp works on tensors of any shape")
    t.expect_close(model[2].weight.grad, reference[2].weight.grad, what="model[2].weight.grad",
                   nudge="the hooked layer's own weight gradient must stay as it was: change only grad_input")


@exercise.case("the same module called with b = 0.5, a Python float")
def _(answer, t: Tester) -> None:
    net = t.track(TwoInputNet(3, seed=3), "the TwoInputNet")
    a = torch.linspace(-2, 2, 6).reshape(2, 3).requires_grad_()
    net(a, 0.5, scale=5.0).sum().backward()
    want = a.grad.clamp(-1.0, 1.0)
    a.grad = None
    with _quiet():
        handle = _handle_of(answer, t, net, 1.0)
        try:
            net(a, 0.5, scale=5.0).sum().backward()
        finally:
            handle.remove()
    t.expect_close(a.grad, want, what="a.grad",
                   nudge="grad_input is (gradient for a, None): clamp the tensor, keep the None")


@exercise.case("the first layer, whose input does not require grad")
def _(answer, t: Tester) -> None:
    model = t.track(MLP(seed=6), "the MLP")
    x, _ = blobs(8, seed=6)
    model(x).sum().backward()
    want = model.fc1.weight.grad.clone()
    model.zero_grad()
    with _quiet():
        handle = _handle_of(answer, t, model.fc1, 0.01)
        try:
            model(x).sum().backward()
        finally:
            handle.remove()
    t.expect_close(model.fc1.weight.grad, want, what="model.fc1.weight.grad",
                   nudge="here grad_input is (None,): return (None,) or the tuple unchanged")


class _SkipAround(nn.Module):
    """``fc(x)`` feeds a Dropout (in eval mode: it passes the gradient through unchanged) and a
    skip connection: ``drop(h) + h``."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        with seeded(seed):
            self.fc = nn.Linear(3, 3)
        self.drop = nn.Dropout(0.5).eval()

    def forward(self, x):
        h = self.fc(x)
        return self.drop(h) + h


@exercise.case("a Dropout in eval mode on a residual branch: its gradient is the skip's too", hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(_SkipAround(seed=7), "the model with a skip connection")
    x = kit.randn(4, 3, seed=7)
    limit = 0.5
    # reference: only the branch through drop is clamped (a tensor hook on a copy of h that feeds drop)
    reference = copy.deepcopy(model)
    h = reference.fc(x)
    branch = h * 1.0
    branch.register_hook(lambda g: g.clamp(-limit, limit))
    (3.0 * (branch + h)).sum().backward()
    with _quiet():
        handle = _handle_of(answer, t, model.drop, limit)
        try:
            (3.0 * model(x)).sum().backward()
        finally:
            handle.remove()
    t.expect_close(model.fc.bias.grad, reference.fc.bias.grad, what="model.fc.bias.grad", nudge=(
        "the gradient of the skip connection was clamped too: a layer that passes its gradient through "
        "unchanged hands your hook the same tensor the skip receives, so clamp_() in place changes both. "
        "Return new tensors: g.clamp(-max_abs, max_abs)"))


@exercise.wrong("returns a tensor instead of a tuple", mentions="tuple")
def _bare_tensor(layer, max_abs):
    def hook(module, grad_input, grad_output):
        return grad_input[0].clamp(-max_abs, max_abs)
    return layer.register_full_backward_hook(hook)


@exercise.wrong("returns a list instead of a tuple", mentions="not a list")
def _a_list(layer, max_abs):
    def hook(module, grad_input, grad_output):
        return [None if g is None else g.clamp(-max_abs, max_abs) for g in grad_input]
    return layer.register_full_backward_hook(hook)


@exercise.wrong("uses the legacy register_backward_hook", mentions="legacy")
def _legacy(layer, max_abs):
    def hook(module, grad_input, grad_output):
        return tuple(None if g is None else g.clamp(-max_abs, max_abs) for g in grad_input)
    return layer.register_backward_hook(hook)


@exercise.wrong("clamps None entries too", mentions="keep None")
def _forgets_none(layer, max_abs):
    def hook(module, grad_input, grad_output):
        return tuple(g.clamp(-max_abs, max_abs) for g in grad_input)
    return layer.register_full_backward_hook(hook)


@exercise.wrong("clamps only the upper side: clamp(max=max_abs)", mentions="negative entries")
def _upper_only(layer, max_abs):
    def hook(module, grad_input, grad_output):
        return tuple(None if g is None else g.clamp(max=max_abs) for g in grad_input)
    return layer.register_full_backward_hook(hook)


@exercise.wrong("attaches the hook but forgets to return the handle", mentions="None (nothing was returned)")
def _no_handle(layer, max_abs):
    def hook(module, grad_input, grad_output):
        return tuple(None if g is None else g.clamp(-max_abs, max_abs) for g in grad_input)
    layer.register_full_backward_hook(hook)


@exercise.wrong("clamps only grad_input[0]", mentions="not just grad_input[0]", hidden=True)
def _first_only(layer, max_abs):
    def hook(module, grad_input, grad_output):
        first = None if grad_input[0] is None else grad_input[0].clamp(-max_abs, max_abs)
        return (first,) + tuple(grad_input[1:])
    return layer.register_full_backward_hook(hook)


@exercise.wrong("clamps grad_input in place with clamp_", mentions="skip connection", hidden=True)
def _in_place(layer, max_abs):
    def hook(module, grad_input, grad_output):
        return tuple(None if g is None else g.clamp_(-max_abs, max_abs) for g in grad_input)
    return layer.register_full_backward_hook(hook)


@exercise.wrong("no backward hook: a forward pre-hook puts a clamping tensor hook on each input",
                mentions="register_full_backward_hook")
def _tensor_hooks_instead(layer, max_abs):
    def pre_hook(module, args):
        new = []
        for a in args:
            if isinstance(a, torch.Tensor) and a.requires_grad and torch.is_grad_enabled():
                a = a.view_as(a)  # a node of its own, so the caller's tensor gets no hook
                a.register_hook(lambda g: g.clamp(-max_abs, max_abs))
            new.append(a)
        return tuple(new)
    return layer.register_forward_pre_hook(pre_hook)
