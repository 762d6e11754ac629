"""03_changing_outputs, exercise: a forward-hook factory that zeroes chosen units (or channels).

Half-right answers an examiner expects, by kit dimension (``kit.DIMENSIONS``):

- inplace_after: zeroes the units in the output it received (breaks backward after a Sigmoid,
  whose output autograd saved), or through ``output.data`` (gradients as if nothing changed);
  zeroes a clone, but under ``torch.no_grad()`` or through the clone's ``.data``: the forward is
  right, yet the ablated units still pass gradient upstream (hidden behind a ReLU, whose backward
  masks a zeroed unit anyway; seen after a Sigmoid);
- technique: assigns ``output = ...`` and returns nothing (the original output is kept); returns a
  detached copy (backward never reaches the earlier layers);
- nd: zeroes the last dimension instead of dimension 1; a mask shaped for (N, C) and (N, C, H, W)
  outputs only, which broadcasts wrongly on (N, C, L);
- dtype: a float32 mask for a bfloat16 layer turns the output float32, and the next layer refuses it;
- repeat: builds the mask from the first output it sees and reuses it, so the same hook fails on
  an output of another size;
- the arithmetic: multiplies by a 0/1 mask, which turns an ``inf`` (or ``nan``) in an ablated unit
  into ``nan`` (``inf * 0``), not 0;
- the indices: ``new[:, units]`` with ``units`` a set (torch indexes with sequences only); keeps the
  complement ``[i for i in range(C) if i not in units]``, which misses a negative index.
"""

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
             "tensor (clone() first, then zero the units of the clone) and return it")


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
          "output; units is a list, tuple or set of indices (a negative index counts from the end, as "
          "in Python). The hook returns a new tensor of the output's dtype, leaves the one it received "
          "unchanged, works for every call of the layer, and backward must still work; an ablated unit "
          "is 0 even where the output held inf or nan"),
    hints=[
        "ablate_units is a factory: inside it, define hook(module, args, output) and return hook "
        "(the function itself, without calling it).",
        "In the hook, make a copy with new = output.clone(), set new[:, list(units)] = 0 (dimension 1 "
        "works for (N, C) and (N, C, H, W) outputs; list() also takes a tuple or a set) and return new.",
        "Do not write into `output` itself or into output.data: the first can break backward, the "
        "second hides the change from autograd.",
    ],
    solution=ablate_units,
    errors={"modified by an inplace operation": _SAVED,
            "must match the size of tensor b": (
                "your mask did not line up with dimension 1 of this (N, C, L) output; and a mask "
                "also turns an inf into nan (inf * 0): zero the units of a clone instead, "
                "new = output.clone(); new[:, list(units)] = 0"),
            "infer dtype of set": (
                "units may come as a set, which torch.tensor() does not take: make a list first, "
                "list(units)"),
            "valid indices (got set)": (
                "units may come as a set, and torch indexes with a list, not a set: zero "
                "new[:, list(units)]"),
            "must have the same dtype": (
                "your hook returned a tensor of another dtype than the layer's output (a float32 mask "
                "turns a bfloat16 output into float32), and the next layer refused it: zero the units "
                "of a clone, which keeps the dtype (a mask would need dtype=output.dtype)")},
    guide="""assigning `output = ...` inside the hook and returning nothing (the original output is
    kept); zeroing the units in place, which can break backward (a Sigmoid or ReLU saved
    that very tensor) or change the caller's tensor; editing `output.data`, which changes
    the forward pass behind autograd's back, so the gradients are computed as if nothing had
    changed; zeroing the last dimension instead of dimension 1 (the channels of an `(N, C,
    H, W)` output). The check also catches a float32 mask on a bfloat16 layer (the next layer
    refuses the float32 output), a mask built from the first output and reused (the next call has
    another size), any 0/1 mask on an output holding `inf` (`inf * 0` is `nan`, not 0),
    `new[:, units]` with a set of units, a kept-units list that misses a negative index, and a
    clone zeroed under `torch.no_grad()` (or through its `.data`): the forward is right, but
    autograd never saw the zeroing, so the ablated units still pass gradient upstream (a ReLU
    after the layer hides it; after a Sigmoid the first layer's row gets a gradient).""",
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
    # No ReLU follows this hook (after fc1 of an MLP, act1's backward masks a zeroed unit anyway):
    # only a zeroing autograd recorded stops the gradient of unit 2 from reaching the first Linear.
    upstream = net[0].weight.grad[2]
    t.expect(bool((upstream == 0).all()), what="the first Linear's weight gradient, row 2 (unit 2)",
             expected="all zeros", got=upstream, nudge=(
                 "unit 2 is forced to 0, so no gradient may flow back through it; but autograd never "
                 "saw your zeroing (made under torch.no_grad() or through .data), so backward passed "
                 "the gradient on as if the unit were still there. Zero the units of the clone with an "
                 "ordinary operation: new = output.clone(); new[:, list(units)] = 0"))


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


@exercise.case("a bfloat16 Linear-ReLU-Linear: the ablated output keeps its dtype")
def _(answer, t: Tester) -> None:
    with seeded(24):
        net = t.track(nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)), "a bfloat16 net")
    net, x = kit.in_dtype(net, kit.randn(2, 3, seed=24), dtype=torch.bfloat16)
    out = net[0](x)
    result = answer([1])(net[0], (x,), out)
    t.expect_type(result, torch.Tensor, what="what your hook returned", nudge=_REBIND)
    t.expect(result.dtype == torch.bfloat16, what="the dtype of what your hook returned",
             expected="torch.bfloat16", got=result.dtype, nudge=(
                 "the layer's output is bfloat16, and so must be what replaces it: zero a clone "
                 "(new = output.clone(); new[:, list(units)] = 0), which keeps the dtype (a mask would "
                 "need dtype=output.dtype)"))
    handle = net[0].register_forward_hook(answer([1]))
    try:
        got = net(x)
    finally:
        handle.remove()
    hidden = net[0].forward(x).detach().clone()
    hidden[:, 1] = 0
    t.expect_close(got, net[2].forward(net[1].forward(hidden)).detach(), what="the net's output, unit 1 of the "
                   "first Linear ablated", atol=1e-2, rtol=1e-2, nudge="zero unit 1 of the first Linear's output")


@exercise.case("one hook on a conv, for an input of 6 x 6 and then of 4 x 4")
def _(answer, t: Tester) -> None:
    model = t.track(kit.conv_model(4, seed=25), "a small conv net")
    conv = model[0]
    hook = answer([1, 2])
    handle = conv.register_forward_hook(hook)
    try:
        for size in (6, 4):
            x = kit.randn(2, 2, size, size, seed=25 + size)
            expected = conv.forward(x).detach().clone()
            expected[:, [1, 2]] = 0
            try:
                got = conv(x)
            except RuntimeError as e:
                t.expect(False, what=f"the conv on a {size} x {size} input", expected="the ablated output",
                         got=f"{type(e).__name__}: {e}"[:120], nudge=(
                             "the same hook runs on every call of the layer, with outputs of other sizes: "
                             "build what you need from each output, and keep nothing from the first call"))
            t.expect_close(got, expected, what=f"the conv output for a {size} x {size} input",
                           nudge="zero channels 1 and 2 of every output the hook sees")
    finally:
        handle.remove()


@exercise.case("units as a set {1, 3}, and [-1], the last unit", hidden=True)
def _(answer, t: Tester) -> None:
    with seeded(26):
        lin = t.track(nn.Linear(3, 5), "a Linear")
    x = kit.randn(2, 3, seed=26)
    for units, zeroed, what in (({1, 3}, [1, 3], "ablate_units({1, 3})"), ([-1], [4], "ablate_units([-1])")):
        handle = lin.register_forward_hook(answer(units))
        try:
            got = lin(x)
        finally:
            handle.remove()
        expected = lin.forward(x).detach().clone()
        expected[:, zeroed] = 0
        t.expect_close(got, expected, what=f"the Linear's output with {what}", nudge=(
            "units is any collection of indices, and an index counts from the end when it is negative, "
            "as in Python: zero new[:, list(units)], which takes both"))


@exercise.case("an output holding inf and nan: the ablated units become 0", hidden=True)
def _(answer, t: Tester) -> None:
    inf, nan = float("inf"), float("nan")
    out = torch.tensor([[1.0, inf, 2.0, -inf], [nan, 3.0, -inf, 4.0]])
    result = answer([1, 2])(nn.Identity(), (out,), out.clone())
    t.expect_type(result, torch.Tensor, what="what your hook returned", nudge=_REBIND)
    expected = torch.tensor([[1.0, 0.0, 0.0, -inf], [nan, 0.0, 0.0, 4.0]])
    same = result.shape == expected.shape and torch.equal(result.isnan(), expected.isnan()) and bool(
        (result[~expected.isnan()] == expected[~expected.isnan()]).all())
    t.expect(same, what="ablate_units([1, 2]) on an output holding inf and nan", expected=expected,
             got=result, nudge=(
                 "an ablated unit must be 0 whatever it held: a 0/1 mask gives inf * 0 = nan and "
                 "nan * 0 = nan. Zero the units of a clone: new = output.clone(); new[:, list(units)] = 0"))


# -- the wrong answers peculiar to this exercise -------------------------------------------------

def _ablator(*, edit="clone", where="list", returns=True):
    """One factory for the near-copy wrong answers that zero by indexing: what they write into
    ("clone", "detach": a detached clone, "in_place": the output itself, "data": output.data),
    which units ("list": new[:, list(units)], "bare": new[:, units], "last": the last dimension,
    "keep": copy the complement into zeros), and whether the hook returns the result."""
    def answer(units):
        def hook(module, args, output):
            new = {"clone": output.clone, "detach": lambda: output.detach().clone(),
                   "in_place": lambda: output, "data": lambda: output.data}[edit]()
            if where == "keep":
                keep = [i for i in range(output.shape[1]) if i not in units]
                new = torch.zeros_like(output)
                new[:, keep] = output[:, keep]
            else:
                index = {"list": (slice(None), list(units)), "bare": (slice(None), units),
                         "last": (Ellipsis, list(units))}[where]
                new[index] = 0
            return new if returns else None
        return hook
    return answer


def _masker(*, dims=None, dtype=None, cache=False):
    """The wrong answers that multiply by a 0/1 mask: shaped for every number of dimensions, or for
    ``dims`` (2 and 4) only; in the output's dtype or in ``dtype``; built anew or once (``cache``)."""
    def answer(units):
        kept = {}

        def hook(module, args, output):
            if cache and "mask" in kept:
                return output * kept["mask"]
            mask = torch.ones(output.shape[1], dtype=dtype or output.dtype)
            mask[list(units)] = 0
            if dims is None:
                mask = mask.view(1, -1, *[1] * (output.dim() - 2))
            elif output.dim() == 4:
                mask = mask.view(1, -1, 1, 1)
            if cache:
                mask = kept.setdefault("mask", mask * torch.ones_like(output[:1]))
            return output * mask
        return hook
    return answer


exercise.wrong("returns a detached copy", mentions="cut from the graph")(_ablator(edit="detach"))
exercise.wrong("rebinds the output without returning it", mentions="returned None")(_ablator(returns=False))
exercise.wrong("zeroes the units in place", mentions="in place")(_ablator(edit="in_place"))
exercise.wrong("edits output.data", mentions=".data")(_ablator(edit="data", returns=False))
exercise.wrong("zeroes the last dimension instead of dimension 1", mentions="dimension 1")(_ablator(where="last"))
exercise.wrong("indexes with the units themselves, new[:, units]", mentions="list(units)", hidden=True)(
    _ablator(where="bare"))
exercise.wrong("copies the units it keeps into zeros", mentions="negative", hidden=True)(_ablator(where="keep"))
exercise.wrong("multiplies by a mask shaped for 2-D and 4-D outputs only", mentions="(N, C, L)", hidden=True)(
    _masker(dims=(2, 4)))
exercise.wrong("multiplies by a float32 mask", mentions="dtype=output.dtype")(_masker(dtype=torch.float32))
exercise.wrong("builds the mask from the first output and keeps it", mentions="keep nothing from the first call")(
    _masker(cache=True))
exercise.wrong("multiplies by a 0/1 mask in the output's dtype", mentions="inf * 0 = nan", hidden=True)(
    _masker())


@exercise.wrong("zeroes a clone under torch.no_grad()", mentions="never saw your zeroing")
def _(units):
    def hook(module, args, output):
        new = output.clone()
        with torch.no_grad():
            new[:, list(units)] = 0
        return new
    return hook


@exercise.wrong("zeroes a clone through its .data", mentions="never saw your zeroing")
def _(units):
    def hook(module, args, output):
        new = output.clone()
        new.data[:, list(units)] = 0
        return new
    return hook


@exercise.right("index_fill along dimension 1")
def _(units):
    def hook(module, args, output):
        index = torch.tensor(sorted({u % output.shape[1] for u in units}), dtype=torch.long)
        return output.index_fill(1, index, 0)
    return hook


@exercise.right("torch.where with a keep-mask shaped to broadcast along dimension 1")
def _(units):
    def hook(module, args, output):
        keep = torch.ones(output.shape[1], dtype=torch.bool)
        keep[list(units)] = False
        keep = keep.view(1, -1, *[1] * (output.dim() - 2))
        return torch.where(keep, output, torch.zeros((), dtype=output.dtype))
    return hook
