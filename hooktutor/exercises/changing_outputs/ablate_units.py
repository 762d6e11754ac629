"""03_changing_outputs, exercise: changing_outputs.ablate_units."""

from __future__ import annotations

import torch
from torch import nn

from ...models import MLP, SmallCNN, seeded
from .. import kit
from ..core import Exercise, Tester
from ._shared import _REBIND


def ablate_units(units):
    # Return a forward hook that zeroes `units` (dimension 1) of the layer's output.
    ### BEGIN SOLUTION
    def hook(module, args, output):
        output = output.clone()
        output[:, list(units)] = 0
        return output
    return hook
    ### END SOLUTION


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


exercise = Exercise(
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
    solution=ablate_units,
    errors={"modified by an inplace operation": _SAVED,
            "must match the size of tensor b": (
                "your mask did not line up with dimension 1 of this (N, C, L) output: shape it "
                "(1, C, 1, ...) for every number of dimensions, or zero output.clone()[:, units]")},
    guide="""assigning `output = ...` inside the hook and returning nothing (the original output is
    kept); zeroing the units in place, which can break backward (a Sigmoid or ReLU saved
    that very tensor) or change the caller's tensor; editing `output.data`, which changes
    the forward pass behind autograd's back, so the gradients are computed as if nothing had
    changed; zeroing the last dimension instead of dimension 1 (the channels of an `(N, C,
    H, W)` output).""",
)


@exercise.case("the hook called by hand on a Linear's output, units [1, 3]")
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


@exercise.case("units 0 and 5 of an MLP's fc1: the model's output and fc1's gradients")
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


@exercise.case("after a Sigmoid, whose output autograd saved: backward must work")
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


@exercise.case("channels 0 and 5 of a conv output (N, C, H, W)")
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


@exercise.case("an empty list of units changes nothing")
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


@exercise.case("units [0, 2] of a 1-D conv output (N, C, L)", hidden=True)
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


@exercise.wrong("returns a detached copy", mentions="cut from the graph")
def _detached(units):
    def hook(module, args, output):
        new = output.detach().clone()
        new[:, list(units)] = 0
        return new
    return hook


@exercise.wrong("multiplies by a mask shaped for 2-D and 4-D outputs only", mentions="(N, C, L)",
                    hidden=True)
def _mask_2d_4d(units):
    def hook(module, args, output):
        mask = torch.ones(output.shape[1])
        mask[list(units)] = 0
        if output.dim() == 4:
            mask = mask.view(1, -1, 1, 1)
        return output * mask
    return hook


@exercise.wrong("rebinds the output without returning it", mentions="returned None")
def _rebind(units):
    def hook(module, args, output):
        output = output.clone()
        output[:, units] = 0
    return hook


@exercise.wrong("zeroes the units in place", mentions="in place")
def _in_place(units):
    def hook(module, args, output):
        output[:, units] = 0
        return output
    return hook


@exercise.wrong("edits output.data", mentions=".data")
def _data(units):
    def hook(module, args, output):
        output.data[:, units] = 0
    return hook


@exercise.wrong("zeroes the last dimension instead of dimension 1", mentions="dimension 1")
def _last_dim(units):
    def hook(module, args, output):
        output = output.clone()
        output[..., units] = 0
        return output
    return hook
