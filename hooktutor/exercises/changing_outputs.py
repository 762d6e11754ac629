"""Exercises of ``03_changing_outputs.ipynb``: hooks that change what a layer computes.

* :data:`ablate_units` — a hook factory that zeroes chosen units (or channels) of an output,
  safely for backward.
* :data:`clamped_output` — run a model once with one layer's output clamped, leave no hook.
* :data:`scale_first` — a forward pre-hook that scales only the first argument of a module
  that takes several.
"""

from __future__ import annotations

import torch
from torch import nn

from ..models import MLP, SmallCNN, TwoInputNet, seeded
from . import kit
from .core import Exercise, Tester
from .predict import Prediction

# -- shared nudges -------------------------------------------------------------------------
_REBIND = ("your hook returned None, so torch kept the original tensor: assigning a new tensor "
           "to a name inside the hook (output = ...) only changes a local variable. Return the "
           "new tensor")
_IN_PLACE = ("you edited the tensor the hook received in place. That can break backward (a "
             "Sigmoid or ReLU saved that very tensor) or change the caller's tensor; build a new "
             "tensor (clone() first, or multiply by a mask) and return it")
_DATA = ("you changed the values through .data, behind autograd's back: the forward pass sees "
         "the change but backward computes gradients as if nothing had changed. Build a new "
         "tensor with ordinary operations and return it")
_SAVED = ("an in-place edit of a tensor autograd saved for backward (the output of a Sigmoid, "
          "Tanh or ReLU) breaks backward. Return a new tensor instead of editing the output")


def _inspect_edit(t: Tester, original: torch.Tensor, snapshot: torch.Tensor, version: int,
                  what: str) -> None:
    """Fail with the right nudge when ``original`` (a tensor a hook received) was modified."""
    if torch.equal(original.detach(), snapshot):
        return
    nudge = _DATA if original._version == version else _IN_PLACE
    t.expect(False, what=what, expected="left as it was", got="modified in place", nudge=nudge)


# == 1. ablate_units =========================================================================

def _ablate_units_solution(units):
    def hook(module, args, output):
        output = output.clone()
        output[:, list(units)] = 0
        return output
    return hook


ablate_units = Exercise(
    "changing_outputs.ablate_units", "Ablate units with a forward hook",
    task=("write ablate_units(units) that returns a forward hook which zeroes the given units "
          "(indices along dimension 1: features of a Linear, channels of a Conv2d) of the layer's "
          "output; it returns a new tensor, leaves the one it received unchanged, and backward "
          "must still work"),
    hints=[
        "ablate_units is a factory: inside it, define hook(module, args, output) and return hook "
        "(the function itself, without calling it).",
        "In the hook, make a copy with new = output.clone(), set new[:, units] = 0 (dimension 1 "
        "works for (N, C) and (N, C, H, W) outputs) and return new.",
        "Do not write into `output` itself or into output.data: the first can break backward, the "
        "second hides the change from autograd.",
    ],
    solution=_ablate_units_solution,
    errors={"modified by an inplace operation": _SAVED,
            "must match the size of tensor b": (
                "your mask did not line up with dimension 1 of this (N, C, L) output: shape it "
                "(1, C, 1, ...) for every number of dimensions, or zero output.clone()[:, units]")},
)


@ablate_units.case("the hook called by hand on a Linear's output, units [1, 3]")
def _(answer, t: Tester) -> None:
    with seeded(0):
        lin = nn.Linear(3, 5)
    out = lin(torch.ones(2, 3))
    snapshot, version = out.detach().clone(), out._version
    hook = answer([1, 3])
    t.expect(callable(hook), what="ablate_units([1, 3])", expected="a hook function", got=hook,
             nudge="ablate_units must return the hook function itself (return hook, not hook(...))")
    result = hook(lin, (torch.ones(2, 3),), out)
    _inspect_edit(t, out, snapshot, version, "the output tensor your hook received")
    t.expect(result is not None, what="what your hook returned", expected="a new tensor", got=result,
             nudge=_REBIND)
    expected = snapshot.clone()
    expected[:, [1, 3]] = 0
    t.expect_close(result, expected, what="what your hook returned",
                   nudge="units 1 and 3 (columns 1 and 3) must be 0, every other value unchanged")


@ablate_units.case("units 0 and 5 of an MLP's fc1: the model's output and fc1's gradients")
def _(answer, t: Tester) -> None:
    model = t.track(MLP(seed=3), "the MLP")
    x = torch.linspace(-1, 1, 16).view(2, 8)
    hidden = model.fc1(x).detach().clone()
    hidden[:, [0, 5]] = 0
    expected = model.head(model.act2(model.fc2(model.act1(hidden))))
    handle = model.fc1.register_forward_hook(answer([0, 5]))
    try:
        got = model(x)
        got.sum().backward()
    finally:
        handle.remove()
    t.expect_close(got, expected.detach(), what="the MLP's output with the hook on fc1",
                   wrong={"unchanged": (model.forward_with_intermediates(x)[0].detach(), _REBIND)},
                   nudge="zero units 0 and 5 of fc1's output; the rest of the network then sees the zeros")
    grad = model.fc1.weight.grad
    t.expect(grad is not None, what="fc1.weight.grad after backward", expected="a gradient", got=None, nudge=(
        "backward never reached fc1: the tensor your hook returned is cut from the graph (a "
        "detach(), or a tensor made under torch.no_grad()). Clone the output itself, "
        "output.clone(), so gradients flow through the units you keep"))
    rows = grad[[0, 5]]
    t.expect(bool((rows == 0).all()), what="fc1.weight.grad, rows 0 and 5", expected="all zeros",
             got=rows, nudge=("a unit forced to 0 does not depend on its weights, so their gradient "
                              "must be 0. " + _DATA))


@ablate_units.case("after a Sigmoid, whose output autograd saved: backward must work")
def _(answer, t: Tester) -> None:
    with seeded(1):
        net = t.track(nn.Sequential(nn.Linear(3, 4), nn.Sigmoid(), nn.Linear(4, 1)), "a Linear-Sigmoid-Linear net")
    x = torch.ones(2, 3)
    handle = net[1].register_forward_hook(answer([2]))
    try:
        net(x).sum().backward()
    finally:
        handle.remove()
    grad = net[2].weight.grad[0, 2]
    t.expect(float(grad) == 0.0, what="the last Linear's weight gradient for unit 2", expected=0.0,
             got=float(grad), nudge="unit 2 of the Sigmoid's output must be 0 for the next layer")


@ablate_units.case("channels 0 and 5 of a conv output (N, C, H, W)")
def _(answer, t: Tester) -> None:
    model = t.track(SmallCNN(seed=0), "the SmallCNN")
    x = torch.linspace(0, 1, 256).view(1, 1, 16, 16)
    conv = model.features[0]
    handle = conv.register_forward_hook(answer([0, 5]))
    try:
        got = conv(x)
    finally:
        handle.remove()
    expected = conv.forward(x).detach().clone()
    expected[:, [0, 5]] = 0
    t.expect_close(got, expected, what="the conv output with channels 0 and 5 ablated",
                   nudge="channels are dimension 1 of an (N, C, H, W) output: zero output[:, units], "
                         "not the last dimension")


@ablate_units.case("an empty list of units changes nothing")
def _(answer, t: Tester) -> None:
    with seeded(2):
        lin = t.track(nn.Linear(2, 3), "a Linear")
    x = torch.ones(1, 2)
    handle = lin.register_forward_hook(answer([]))
    try:
        got = lin(x)
    finally:
        handle.remove()
    t.expect_close(got, lin.forward(x).detach(), what="the output with ablate_units([])",
                   nudge="with no units to ablate the output must stay exactly as it was")


@ablate_units.case("units [0, 2] of a 1-D conv output (N, C, L)", hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(kit.conv_model(3, seed=18), "a Conv1d net")
    x = kit.conv_input(3, seed=18)
    conv = model[0]
    expected = conv.forward(x).detach().clone()
    expected[:, [0, 2]] = 0
    handle = conv.register_forward_hook(answer([0, 2]))
    try:
        got = conv(x)
    finally:
        handle.remove()
    t.expect_close(got, expected, what="the Conv1d output (N, C, L) with channels 0 and 2 ablated",
                   nudge="units are dimension 1 whatever the number of dimensions: output[:, units] "
                         "works for (N, C), (N, C, L) and (N, C, H, W)")


# Half-right answers: rebinds without returning; zeroes in place (breaks backward after a
# Sigmoid); edits output.data (gradients as if nothing changed); zeroes the last dimension;
# detaches the copy (backward never reaches the earlier layers: fc1.weight.grad is None);
# hidden (nd): a mask shaped for (N, C) and (N, C, H, W) only, broadcast wrongly on (N, C, L).


@ablate_units.wrong("returns a detached copy", mentions="cut from the graph")
def _detached(units):
    def hook(module, args, output):
        new = output.detach().clone()
        new[:, list(units)] = 0
        return new
    return hook


@ablate_units.wrong("multiplies by a mask shaped for 2-D and 4-D outputs only", mentions="(N, C, L)",
                    hidden=True)
def _mask_2d_4d(units):
    def hook(module, args, output):
        mask = torch.ones(output.shape[1])
        mask[list(units)] = 0
        if output.dim() == 4:
            mask = mask.view(1, -1, 1, 1)
        return output * mask
    return hook


@ablate_units.wrong("rebinds the output without returning it", mentions="returned None")
def _rebind(units):
    def hook(module, args, output):
        output = output.clone()
        output[:, units] = 0
    return hook


@ablate_units.wrong("zeroes the units in place", mentions="in place")
def _in_place(units):
    def hook(module, args, output):
        output[:, units] = 0
        return output
    return hook


@ablate_units.wrong("edits output.data", mentions=".data")
def _data(units):
    def hook(module, args, output):
        output.data[:, units] = 0
    return hook


@ablate_units.wrong("zeroes the last dimension instead of dimension 1", mentions="dimension 1")
def _last_dim(units):
    def hook(module, args, output):
        output = output.clone()
        output[..., units] = 0
        return output
    return hook


# == 2. clamped_output =======================================================================

def _clamped_output_solution(model, x, layer, max_value):
    handle = layer.register_forward_hook(lambda module, args, output: output.clamp(max=max_value))
    try:
        return model(x)
    finally:
        handle.remove()


clamped_output = Exercise(
    "changing_outputs.clamped_output", "Run a model with one layer clamped",
    task=("write clamped_output(model, x, layer, max_value) that returns model(x) computed with "
          "every value of layer's output above max_value replaced by max_value; it leaves no hook "
          "attached and never changes x"),
    hints=[
        "A forward hook that returns output.clamp(max=max_value) replaces the layer's output.",
        "Keep the handle of register_forward_hook, run model(x) in a try: block and call "
        "handle.remove() in its finally: block.",
        "Use clamp(max=...): clamp(t, v) with a positional v sets a minimum. And do not use "
        "clamp_ (in place): some layers (nn.Identity, Dropout in eval mode) return their input "
        "itself, so you would be editing the caller's x.",
    ],
    solution=_clamped_output_solution,
)


def _mlp_case(answer, t: Tester, max_value: float) -> None:
    model = t.track(MLP(seed=4), "the MLP")
    x = torch.linspace(-2, 2, 24).view(3, 8)
    hidden = model.fc1(x).clamp(max=max_value)
    expected = model.head(model.act2(model.fc2(model.act1(hidden)))).detach()
    plain = model.forward_with_intermediates(x)[0].detach()
    got = answer(model, x, model.fc1, max_value)
    t.expect_type(got, torch.Tensor, what=f"clamped_output(model, x, model.fc1, {max_value})",
                  nudge="return what model(x) returns (return model(x) inside the try: block)")
    t.expect_close(got, expected, what=f"clamped_output(model, x, model.fc1, {max_value})",
                   wrong={
                       "unchanged": (plain, _REBIND + " (the output is exactly the unclamped one)"),
                       "minimum": (model.head(model.act2(model.fc2(model.act1(
                           model.fc1(x).clamp(min=max_value))))).detach(),
                           "you set a minimum: clamp(t, v) with a positional v means min=v. "
                           "Write clamp(max=max_value)"),
                   },
                   nudge="values of fc1's output above max_value become max_value; smaller ones stay")


@clamped_output.case("an MLP, fc1 clamped at 0.5")
def _(answer, t: Tester) -> None:
    _mlp_case(answer, t, 0.5)


@clamped_output.case("an MLP, fc1 clamped at -0.25, twice in a row")
def _(answer, t: Tester) -> None:
    _mlp_case(answer, t, -0.25)
    _mlp_case(answer, t, -0.25)


@clamped_output.case("a layer that returns its input itself (nn.Identity): x must not change")
def _(answer, t: Tester) -> None:
    with seeded(5):
        model = t.track(nn.Sequential(nn.Identity(), nn.Linear(4, 2)), "an Identity-Linear net")
    x = torch.tensor([[-1.0, 0.5, 2.0, 3.0]])
    before = x.clone()
    got = answer(model, x, model[0], 1.0)
    t.expect(torch.equal(x, before), what="the caller's x after clamped_output", expected=before, got=x,
             nudge=("you changed the caller's tensor: nn.Identity returns its input itself, so an "
                    "in-place clamp_ on its output edits x. Return output.clamp(max=...) instead"))
    t.expect_close(got, model[1](before.clamp(max=1.0)).detach(), what="clamped_output(model, x, model[0], 1.0)",
                   nudge="clamp the Identity's output at 1.0 and let the Linear see the clamped values")


@clamped_output.case("a layer deep inside a nested model (encoder.body.0)")
def _(answer, t: Tester) -> None:
    model = t.track(kit.Nested(seed=19), "a nested model")
    x = kit.randn(3, 4, seed=19)
    inner = model.encoder.body[0]
    h = inner.forward(x).clamp(max=0.1)
    for layer in list(model.encoder.body)[1:]:
        h = layer.forward(h)
    expected = model.head.forward(model.encoder.act.forward(h)).detach()
    got = answer(model, x, inner, 0.1)
    t.expect_type(got, torch.Tensor, what="clamped_output(model, x, model.encoder.body[0], 0.1)",
                  nudge="return what model(x) returns")
    t.expect_close(got, expected, what="clamped_output(model, x, model.encoder.body[0], 0.1)",
                   nudge="hook the layer you were given, wherever it sits, and return the model's output")


@clamped_output.case("a model that raises halfway through its forward: the hook must still go")
def _(answer, t: Tester) -> None:
    kit.expect_clean_after_raise(t, answer, 0.0, seed=20)


@clamped_output.case("a layer that forward() calls twice: both calls are clamped", hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(kit.Twice(seed=21), "a model whose forward calls `block` twice")
    x = kit.randn(2, 4, seed=21)
    h = model.block.forward(torch.tanh(model.block.forward(x).clamp(max=0.0))).clamp(max=0.0)
    expected = model.out.forward(h).detach()
    got = answer(model, x, model.block, 0.0)
    t.expect_type(got, torch.Tensor, what="clamped_output(model, x, model.block, 0.0)",
                  nudge="return what model(x) returns")
    t.expect_close(got, expected, what="clamped_output(model, x, model.block, 0.0)",
                   nudge="`block` runs twice in one forward and both outputs must be clamped: keep the "
                         "hook attached for the whole model(x) and remove it afterwards, in finally:")


# Half-right answers: never removes the hook, or removes it without `finally:` (a model that
# raises leaves it); clamps in place (nn.Identity returns x itself); rebinds without returning;
# clamp(t, v) (a minimum); forgets to return model(x) (None); hidden (twice): a hook that
# removes itself when it first fires, so a layer called twice is clamped once.


@clamped_output.wrong("forgets to return model(x)", mentions="None (nothing was returned)")
def _no_return(model, x, layer, max_value):
    with layer.register_forward_hook(lambda m, a, o: o.clamp(max=max_value)):
        model(x)


@clamped_output.wrong("removes the hook, but not in a finally block", mentions="`finally:` block")
def _clamp_no_finally(model, x, layer, max_value):
    handle = layer.register_forward_hook(lambda m, a, o: o.clamp(max=max_value))
    out = model(x)
    handle.remove()
    return out


@clamped_output.wrong("a hook that removes itself when it first fires", mentions="both outputs must be clamped",
                      hidden=True)
def _one_shot(model, x, layer, max_value):
    def hook(module, args, output):
        handle.remove()
        return output.clamp(max=max_value)
    handle = layer.register_forward_hook(hook)
    return model(x)


@clamped_output.wrong("forgets to remove the hook", mentions="left a hook attached")
def _leaky(model, x, layer, max_value):
    layer.register_forward_hook(lambda m, a, o: o.clamp(max=max_value))
    return model(x)


@clamped_output.wrong("clamps in place", mentions="caller's tensor")
def _clamp_in_place(model, x, layer, max_value):
    with layer.register_forward_hook(lambda m, a, o: o.clamp_(max=max_value)):
        return model(x)


@clamped_output.wrong("rebinds the output without returning it", mentions="returned None")
def _clamp_rebind(model, x, layer, max_value):
    def hook(module, args, output):
        output = output.clamp(max=max_value)
    with layer.register_forward_hook(hook):
        return model(x)


@clamped_output.wrong("writes clamp(output, max_value), a minimum", mentions="clamp(max=max_value)")
def _clamp_min(model, x, layer, max_value):
    with layer.register_forward_hook(lambda m, a, o: torch.clamp(o, max_value)):
        return model(x)


# == 3. scale_first ==========================================================================

def _scale_first_solution(factor):
    def pre_hook(module, args):
        return (args[0] * factor, *args[1:])
    return pre_hook


scale_first = Exercise(
    "changing_outputs.scale_first", "Scale only the first argument with a pre-hook",
    task=("write scale_first(factor) that returns a forward pre-hook which multiplies the first "
          "positional argument of the module by factor and passes every other argument through "
          "unchanged, without modifying the caller's tensors; gradients still flow back through the "
          "scaled argument"),
    hints=[
        "A forward pre-hook is hook(module, args); args is the tuple of positional arguments, and "
        "what the hook returns replaces it.",
        "A single value that is not a tuple is wrapped into a 1-tuple by torch, so every other "
        "argument is dropped: return a tuple with all of them, (args[0] * factor, *args[1:]).",
        "args[0].mul_(factor) would change the caller's tensor: multiply out of place.",
    ],
    solution=_scale_first_solution,
    errors={"missing 1 required positional argument": (
        "your pre-hook returned a single value; torch wraps it into (value,), so the module got "
        "only one argument and the others were dropped. Return a tuple with every argument")},
)


_DROPPED = ("your pre-hook returned a single value, not a tuple: torch wraps it into (value,), so "
            "every other argument is dropped. Return (args[0] * factor, *args[1:])")


@scale_first.case("the pre-hook called by hand with (a, b)")
def _(answer, t: Tester) -> None:
    a, b = torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0])
    a_before, b_before = a.clone(), b.clone()
    hook = answer(3.0)
    t.expect(callable(hook), what="scale_first(3.0)", expected="a pre-hook function", got=hook,
             nudge="scale_first must return the hook function itself (return hook, not hook(...))")
    result = hook(nn.Identity(), (a, b))
    t.expect(torch.equal(a, a_before) and torch.equal(b, b_before), what="the caller's a and b",
             expected="unchanged", got="modified in place",
             nudge="an in-place edit in a pre-hook changes the caller's tensor: multiply out of place")
    t.expect(result is not None, what="what your pre-hook returned", expected="a tuple (a * 3, b)",
             got=result, nudge=_REBIND)
    t.expect(isinstance(result, tuple) and len(result) == 2, what="what your pre-hook returned",
             expected="a tuple of 2 arguments", got=result, nudge=_DROPPED)
    t.expect_close(result[0], a_before * 3, what="the first argument",
                   nudge="multiply only the first argument by factor")
    t.expect_close(result[1], b_before, what="the second argument",
                   nudge="only the first argument is scaled; pass the others through as they are")


@scale_first.case("a TwoInputNet(a, b): the output equals net(2 * a, b)")
def _(answer, t: Tester) -> None:
    net = t.track(TwoInputNet(seed=1), "the TwoInputNet")
    a, b = torch.tensor([[1.0, -1.0]]), torch.tensor([[0.5, 0.25]])
    expected = net.forward(2.0 * a, b).detach()
    handle = net.register_forward_pre_hook(answer(2.0))
    try:
        got = net(a, b)
    finally:
        handle.remove()
    t.expect_close(got, expected, what="net(a, b) with your pre-hook",
                   nudge="the module must receive (2 * a, b)")


class _Add3(nn.Module):
    def forward(self, a, b, c=100.0):
        return a + b + c


@scale_first.case("a three-argument module, called with two")
def _(answer, t: Tester) -> None:
    mod = t.track(_Add3(), "an Add3 module")
    handle = mod.register_forward_pre_hook(answer(-1.0))
    try:
        got = mod(torch.tensor([5.0]), torch.tensor([7.0]))
    finally:
        handle.remove()
    t.expect_close(got, torch.tensor([102.0]), what="add3(5, 7) with scale_first(-1.0)",
                   wrong={"dropped": (torch.tensor([5.0]), _DROPPED)},
                   nudge="-5 + 7 + the default 100 = 102: keep every argument you were given")


@scale_first.case("a Linear, a module with one argument")
def _(answer, t: Tester) -> None:
    with seeded(6):
        lin = t.track(nn.Linear(2, 2), "a Linear")
    x = torch.tensor([[1.0, 2.0]])
    handle = lin.register_forward_pre_hook(answer(0.5))
    try:
        got = lin(x)
    finally:
        handle.remove()
    t.expect_close(got, lin.forward(0.5 * x).detach(), what="lin(x) with scale_first(0.5)",
                   nudge="with one argument, return a 1-tuple (args[0] * factor,)")


@scale_first.case("gradients flow back through the scaled argument", hidden=True)
def _(answer, t: Tester) -> None:
    net = t.track(TwoInputNet(seed=22), "the TwoInputNet")
    a = torch.tensor([[1.0, -2.0]], requires_grad=True)
    b = torch.tensor([[0.5, 0.25]])
    a_ref = a.detach().clone().requires_grad_(True)
    net.forward(3.0 * a_ref, b).sum().backward()
    net.zero_grad()
    handle = net.register_forward_pre_hook(answer(3.0))
    try:
        with kit.GradWitness({"a": a}) as grads:
            net(a, b).sum().backward()
    finally:
        handle.remove()
    t.expect(grads.filled_by_backward("a"), what="a.grad after backward", expected="a gradient",
             got=a.grad, nudge=(
                 "backward never reached a: the tensor your pre-hook passed on is cut from the graph "
                 "(a detach(), .data, or torch.no_grad()). Multiply args[0] itself: args[0] * factor"))
    t.expect_close(a.grad, a_ref.grad, what="a.grad", nudge="a.grad is factor times the gradient at the "
                   "scaled input")


# Half-right answers: returns a single tensor (the others are dropped); scales in place (the
# caller's tensor changes); scales every argument; returns a list; hidden (technique): detaches
# the scaled argument, so the values are right but backward never reaches the caller's tensor.


@scale_first.wrong("returns a list instead of a tuple", mentions="dropped")
def _list(factor):
    def pre_hook(module, args):
        return [args[0] * factor, *args[1:]]
    return pre_hook


@scale_first.wrong("detaches the scaled argument", mentions="cut from the graph", hidden=True)
def _detach(factor):
    def pre_hook(module, args):
        return (args[0].detach() * factor, *args[1:])
    return pre_hook


@scale_first.wrong("returns a single tensor", mentions="dropped")
def _single(factor):
    def pre_hook(module, args):
        return args[0] * factor
    return pre_hook


@scale_first.wrong("scales the first argument in place", mentions="caller's tensor")
def _scale_in_place(factor):
    def pre_hook(module, args):
        args[0].mul_(factor)
    return pre_hook


@scale_first.wrong("scales every argument", mentions="only the first argument")
def _scale_all(factor):
    def pre_hook(module, args):
        return tuple(a * factor for a in args)
    return pre_hook


# -- predict, then run -----------------------------------------------------------------------

def _returns_zeros(module: nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor:
    return output * 0


def _zeroes_in_place(module: nn.Module, args: tuple, output: torch.Tensor) -> None:
    output.mul_(0)


def _rebinds_the_name(module: nn.Module, args: tuple, output: torch.Tensor) -> None:
    output = output * 0   # noqa: F841 - the point: a new local name, the module's output untouched


EDITS = {"return output * 0": _returns_zeros, "output.mul_(0), return None": _zeroes_in_place,
         "output = output * 0, return None": _rebinds_the_name}


def _observe_which_edits_change() -> dict[str, str]:
    """A forward hook on an MLP's fc1 written three ways: does model(x) change?"""
    model, x = MLP(seed=0), torch.ones(2, 8)
    plain = model(x)
    seen = {}
    for label, hook in EDITS.items():
        with model.fc1.register_forward_hook(hook):
            out = model(x)
        seen[label] = "unchanged" if torch.equal(out, plain) else "changed"
    return seen


which_edits_change = Prediction(
    "changing_outputs.which_edits_change", "Predict: which hooks change the output",
    task=("a dict with one entry per hook body ('return output * 0', 'output.mul_(0), return None', "
          "'output = output * 0, return None'), each 'changed' or 'unchanged': does model(x) change?"),
    answer_name="predict_changes",
    observe=_observe_which_edits_change,
    choices=("changed", "unchanged"),
    hints=["A forward hook changes the output in two ways: by returning a value, or by writing into "
           "the tensor it was given.",
           "Assigning to the name `output` inside the hook changes what that local name points to, "
           "nothing else."],
    explain={
        "return output * 0": "a forward hook that returns a value replaces the module's output with it.",
        "output.mul_(0), return None": "returning None keeps the output tensor, but mul_ wrote zeros into "
                                       "that very tensor: the next layer reads the zeros. A hook does "
                                       "not have to return anything to change the output.",
        "output = output * 0, return None": "`output = ...` only points the hook's local name at a new "
                                            "tensor; the module's output is untouched and None keeps it.",
    },
    summary="returning a tensor replaces the output; an in-place edit changes it without a return; "
            "rebinding the local name changes nothing.",
)
which_edits_change.wrong("only a return changes it (the popular claim)",
                         {"return output * 0": "changed", "output.mul_(0), return None": "unchanged",
                          "output = output * 0, return None": "unchanged"}, "does not have to return anything")
which_edits_change.wrong("any assignment changes it",
                         {"return output * 0": "changed", "output.mul_(0), return None": "changed",
                          "output = output * 0, return None": "changed"}, "local name")
which_edits_change.wrong("hooks only observe",
                         {"return output * 0": "unchanged", "output.mul_(0), return None": "unchanged",
                          "output = output * 0, return None": "unchanged"}, "replaces the module's output")
