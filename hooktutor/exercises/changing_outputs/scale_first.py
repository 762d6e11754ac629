"""03_changing_outputs, exercise: a forward pre-hook that scales only the first argument.

Half-right answers an examiner expects, by kit dimension (``kit.DIMENSIONS``):

- technique: returns a single tensor or a list (torch wraps it into a 1-tuple and drops the other
  arguments); keeps only ``args[1:2]``, which drops a third argument; scales every argument;
  detaches the scaled argument, or the others (backward never reaches the caller's tensor);
- inplace_after: ``args[0].mul_(factor)`` changes the caller's tensor;
- dtype: ``args[0].float()`` hands a float32 tensor to a float64 module, which refuses it;
  ``args[0] * torch.tensor([factor])`` turns a bfloat16 argument into float32 and a 0-dim one into
  shape (1,);
- twice, repeat: scales only the first call of the hook, so a module called twice in one forward
  gets its second input unscaled;
- the arithmetic: divides by ``1 / factor`` (``factor=0`` divides by zero); leaves a first argument
  that is a plain number alone; for ``factor=0`` returns a new ``torch.zeros_like(args[0])``, which
  gives the right values but no gradient (``a.grad`` stays ``None`` instead of zeros).
"""

from __future__ import annotations

import torch
from torch import nn

from ...models import TwoInputNet, seeded
from .. import kit
from ..core import Exercise, Tester
from ._shared import _REBIND


def scale_first(factor):
    # Return a forward pre-hook that multiplies args[0] by factor and keeps the other arguments.
    ### BEGIN SOLUTION
    def pre_hook(module, args):
        return (args[0] * factor, *args[1:])
    return pre_hook
    ### END SOLUTION


exercise = Exercise(
    "changing_outputs.scale_first", "Scale only the first argument with a pre-hook",
    task=("write scale_first(factor) that returns a forward pre-hook which multiplies the first "
          "positional argument of the module by factor and passes every other argument through "
          "unchanged (there may be one, two, three or more), without modifying the caller's tensors, on "
          "every call of the module; the first argument may be a tensor of any floating dtype and shape (both "
          "kept) or a plain number, "
          "and factor may be 0; gradients still flow back through every argument"),
    hints=[
        "A forward pre-hook is hook(module, args); args is the tuple of positional arguments, and "
        "what the hook returns replaces it.",
        "A single value that is not a tuple is wrapped into a 1-tuple by torch, so every other "
        "argument is dropped: return a tuple with all of them, (args[0] * factor, *args[1:]).",
        "args[0].mul_(factor) would change the caller's tensor: multiply out of place.",
    ],
    solution=scale_first,
    errors={"missing 1 required positional argument": (
        "your pre-hook returned a single value; torch wraps it into (value,), so the module got "
        "only one argument and the others were dropped. Return a tuple with every argument"),
        "division by zero": (
            "factor may be 0: multiply the first argument by factor, args[0] * factor, instead of "
            "dividing by 1 / factor"),
        "must have the same dtype": (
            "your pre-hook handed the module a tensor of another dtype than the caller's (a float32 "
            "tensor for a float64 or bfloat16 module): multiply args[0] by the number itself, "
            "args[0] * factor, without .float() or torch.tensor(...)")},
    guide="""returning a single tensor, which torch wraps into a 1-tuple, dropping the other arguments;
    `args[0].mul_(factor)`, which changes the caller's tensor; scaling every argument. The check now
    also catches keeping only `args[1:2]` (a third argument is dropped), `args[0].float()` (a float64
    module refuses it), `args[0] * torch.tensor([factor])` (a bfloat16 argument becomes float32, a
    0-dim one shape (1,)), detaching the other arguments (their gradients are lost), a hook that
    scales only its first call (a module called twice in one forward), dividing by `1 / factor`
    (`factor=0`), leaving a first argument that is a plain number alone, and a shortcut for `factor=0`
    that returns `torch.zeros_like(args[0])`: the right values, but the caller's tensor gets no
    gradient (`None` instead of zeros).""",
)


_DROPPED = ("your pre-hook returned a single value, not a tuple: torch wraps it into (value,), so "
            "every other argument is dropped. Return (args[0] * factor, *args[1:])")


@exercise.case("the pre-hook called by hand with (a, b)")
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


@exercise.case("a TwoInputNet(a, b): the output equals net(2 * a, b)")
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


@exercise.case("a three-argument module, called with two and with three")
def _(answer, t: Tester) -> None:
    mod = t.track(_Add3(), "an Add3 module")
    got = []
    for args in ((torch.tensor([5.0]), torch.tensor([7.0])), (torch.tensor([5.0]), torch.tensor([7.0]), 1.0)):
        handle = mod.register_forward_pre_hook(answer(-1.0))
        try:
            got.append(mod(*args))
        finally:
            handle.remove()
    got, got3 = got
    t.expect_close(got, torch.tensor([102.0]), what="add3(5, 7) with scale_first(-1.0)",
                   wrong={"dropped": (torch.tensor([5.0]), _DROPPED)},
                   nudge="-5 + 7 + the default 100 = 102: keep every argument you were given")
    t.expect_close(got3, torch.tensor([3.0]), what="add3(5, 7, 1) with scale_first(-1.0)",
                   nudge="-5 + 7 + 1 = 3: pass every other argument on, however many there are: *args[1:]")


_KEEP_DTYPE = ("multiply args[0] by the number itself, args[0] * factor: it keeps the caller's dtype "
               "and shape (no .float(); no torch.tensor([factor]), which is float32 and 1-D)")


@exercise.case("a float64 and a bfloat16 TwoInputNet, and a 0-dim first argument: dtype and shape kept")
def _(answer, t: Tester) -> None:
    for dtype in (torch.float64, torch.bfloat16):
        net = t.track(TwoInputNet(seed=29), f"the {dtype} TwoInputNet")
        net, a, b = kit.in_dtype(net, torch.tensor([[1.0, -1.0]]), torch.tensor([[0.5, 0.25]]), dtype=dtype)
        result = answer(2.0)(net, (a, b))
        t.expect(isinstance(result, tuple) and len(result) == 2, what="what your pre-hook returned",
                 expected="a tuple of 2 arguments", got=result, nudge=_DROPPED)
        t.expect(isinstance(result[0], torch.Tensor) and result[0].dtype == dtype,
                 what="the dtype of the scaled argument", expected=str(dtype),
                 got=getattr(result[0], "dtype", result[0]), nudge=_KEEP_DTYPE)
        handle = net.register_forward_pre_hook(answer(2.0))
        try:
            got = net(a, b)
        finally:
            handle.remove()
        t.expect_close(got, net.forward(2.0 * a, b).detach(), what=f"net(a, b) with scale_first(2.0), in {dtype}",
                       nudge="the module must receive (2 * a, b)")
    scalar = torch.tensor(5.0)
    result = answer(3.0)(nn.Identity(), (scalar,))
    t.expect(isinstance(result, tuple) and len(result) == 1, what="what your pre-hook returned for (tensor(5.),)",
             expected="a tuple of 1 argument", got=result, nudge=_DROPPED)
    t.expect_close(result[0], torch.tensor(15.0), what="the scaled 0-dim argument", nudge=_KEEP_DTYPE)


@exercise.case("a layer that forward() calls twice: both calls are scaled")
def _(answer, t: Tester) -> None:
    model = t.track(kit.Twice(seed=30), "a model whose forward calls `block` twice")
    x = kit.randn(2, 4, seed=30)
    expected = model.out.forward(model.block.forward(2.0 * torch.tanh(model.block.forward(2.0 * x)))).detach()
    handle = model.block.register_forward_pre_hook(answer(2.0))
    try:
        got = model(x)
    finally:
        handle.remove()
    t.expect_close(got, expected, what="model(x) with scale_first(2.0) on `block`", nudge=(
        "a pre-hook runs before every call of its module: scale args[0] each time, and keep no "
        "state from one call to the next"))


@exercise.case("a Linear, a module with one argument")
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


@exercise.case("gradients flow back through the scaled argument and the other one, at factor 3 and 0",
               hidden=True)
def _(answer, t: Tester) -> None:
    net = t.track(TwoInputNet(seed=22), "the TwoInputNet")
    for factor in (3.0, 0.0):
        a = torch.tensor([[1.0, -2.0]], requires_grad=True)
        b = torch.tensor([[0.5, 0.25]], requires_grad=True)
        a_ref, b_ref = (v.detach().clone().requires_grad_(True) for v in (a, b))
        net.forward(factor * a_ref, b_ref).sum().backward()
        net.zero_grad()
        handle = net.register_forward_pre_hook(answer(factor))
        try:
            with kit.GradWitness({"a": a, "b": b}) as grads:
                net(a, b).sum().backward()
        finally:
            handle.remove()
        t.expect(grads.filled_by_backward("a"), what=f"a.grad after backward, with factor {factor}",
                 expected="a gradient" if factor else "a gradient of zeros", got=a.grad, nudge=(
                     "backward never reached a: the tensor your pre-hook passed on is cut from the graph "
                     "(a detach(), .data, torch.no_grad(), or a new tensor such as torch.zeros_like "
                     "for factor 0). Multiply args[0] itself, whatever factor is: args[0] * factor"))
        t.expect_close(a.grad, a_ref.grad, what=f"a.grad, with factor {factor}",
                       nudge="a.grad is factor times the gradient at the scaled input")
        t.expect(grads.filled_by_backward("b"), what="b.grad after backward", expected="a gradient",
                 got=b.grad, nudge=(
                     "backward never reached b, the argument you were to pass through unchanged: pass "
                     "the caller's tensors on as they are, *args[1:], not detached copies"))
        t.expect_close(b.grad, b_ref.grad, what="b.grad", nudge="b is not scaled: its gradient is unchanged")


@exercise.case("factor 0, and a plain number as the first argument", hidden=True)
def _(answer, t: Tester) -> None:
    mod = t.track(_Add3(), "an Add3 module")
    for factor, first, want in ((0.0, torch.tensor([5.0]), 107.0), (3.0, 2.0, 113.0)):
        handle = mod.register_forward_pre_hook(answer(factor))
        try:
            got = mod(first, torch.tensor([7.0]))
        finally:
            handle.remove()
        t.expect_close(got, torch.tensor([want]), what=f"add3({first if isinstance(first, float) else 5}, 7) "
                       f"with scale_first({factor})", nudge=(
                           "multiply the first argument by factor, whatever it is (a tensor or a plain "
                           "number) and whatever factor is (0 too): args[0] * factor"))


# -- the wrong answers peculiar to this exercise -------------------------------------------------

def _scaler(*, scale=lambda first, factor: first * factor, rest=lambda args: args[1:], wrap=tuple,
            every=False, tensors_only=False, once=False):
    """One factory for the near-copy wrong answers: how the first argument is scaled (``scale``),
    which other arguments are passed on (``rest``), what the arguments come back in (``wrap``:
    tuple, list, or ``None``: the scaled argument alone), whether every argument is scaled, whether
    a first argument that is not a tensor is left alone, and whether only the first call scales."""
    def answer(factor):
        calls = []

        def pre_hook(module, args):
            calls.append(1)
            if (once and len(calls) > 1) or (tensors_only and not isinstance(args[0], torch.Tensor)):
                return None
            if every:
                return tuple(scale(a, factor) for a in args)
            first = scale(args[0], factor)
            return first if wrap is None else wrap((first, *rest(args)))
        return pre_hook
    return answer


def _in_place(first, factor):
    first.mul_(factor)
    return first


exercise.wrong("returns a list instead of a tuple", mentions="dropped")(_scaler(wrap=list))
exercise.wrong("detaches the scaled argument", mentions="cut from the graph", hidden=True)(
    _scaler(scale=lambda first, factor: first.detach() * factor))
exercise.wrong("detaches the other arguments", mentions="not detached copies", hidden=True)(
    _scaler(rest=lambda args: tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in args[1:])))
exercise.wrong("multiplies by torch.tensor([factor])", mentions="torch.tensor([factor])")(
    _scaler(scale=lambda first, factor: first * torch.tensor([factor])))
exercise.wrong("returns a single tensor", mentions="dropped")(_scaler(wrap=None))
exercise.wrong("scales the first argument in place", mentions="caller's tensor")(_scaler(scale=_in_place))
exercise.wrong("scales every argument", mentions="only the first argument")(_scaler(every=True))
exercise.wrong("keeps only args[1:2]", mentions="however many")(_scaler(rest=lambda args: args[1:2]))
exercise.wrong("casts the first argument to float32", mentions="no .float()")(
    _scaler(scale=lambda first, factor: first.float() * factor))
exercise.wrong("scales the first call only", mentions="keep no state")(_scaler(once=True))
exercise.wrong("divides by 1 / factor", mentions="factor may be 0", hidden=True)(
    _scaler(scale=lambda first, factor: first / (1.0 / factor)))
exercise.wrong("returns torch.zeros_like(args[0]) for factor 0: no gradient reaches args[0]",
               mentions="torch.zeros_like", hidden=True)(
    _scaler(scale=lambda first, factor: (torch.zeros_like(first) if factor == 0 and isinstance(first, torch.Tensor)
                                         else first * factor)))
exercise.wrong("leaves a first argument that is not a tensor alone", mentions="plain number", hidden=True)(
    _scaler(tensors_only=True))
