"""03_changing_outputs, exercise: changing_outputs.scale_first."""

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
          "unchanged, without modifying the caller's tensors; gradients still flow back through the "
          "scaled argument"),
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
        "only one argument and the others were dropped. Return a tuple with every argument")},
    guide="""returning a single tensor, which torch wraps into a 1-tuple, dropping the other arguments;
    `args[0].mul_(factor)`, which changes the caller's tensor; scaling every argument.""",
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


@exercise.case("a three-argument module, called with two")
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


@exercise.case("gradients flow back through the scaled argument", hidden=True)
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


@exercise.wrong("returns a list instead of a tuple", mentions="dropped")
def _list(factor):
    def pre_hook(module, args):
        return [args[0] * factor, *args[1:]]
    return pre_hook


@exercise.wrong("detaches the scaled argument", mentions="cut from the graph", hidden=True)
def _detach(factor):
    def pre_hook(module, args):
        return (args[0].detach() * factor, *args[1:])
    return pre_hook


@exercise.wrong("returns a single tensor", mentions="dropped")
def _single(factor):
    def pre_hook(module, args):
        return args[0] * factor
    return pre_hook


@exercise.wrong("scales the first argument in place", mentions="caller's tensor")
def _scale_in_place(factor):
    def pre_hook(module, args):
        args[0].mul_(factor)
    return pre_hook


@exercise.wrong("scales every argument", mentions="only the first argument")
def _scale_all(factor):
    def pre_hook(module, args):
        return tuple(a * factor for a in args)
    return pre_hook
