"""01_tensor_hooks, exercise: tensor_hooks.clip_hook."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..core import Exercise, Tester


def clip_hook(max_norm):
    """A hook for tensor.register_hook that clips the gradient's norm to max_norm."""
    ### BEGIN SOLUTION
    def hook(grad):
        norm = grad.norm()
        if norm > max_norm:
            return grad * (max_norm / norm)
        return None
    return hook
    ### END SOLUTION


exercise = Exercise(
    "tensor_hooks.clip_hook", "Clip one tensor's gradient",
    task=("write clip_hook(max_norm) that returns a hook for Tensor.register_hook: when the "
          "gradient's norm is larger than max_norm, the hook returns the gradient rescaled to norm "
          "max_norm (same direction); otherwise it keeps the gradient unchanged"),
    hints=[
        "clip_hook does not attach anything: inside it, define def hook(grad): ... and return hook.",
        "grad.norm() is the norm of the whole gradient. grad * (max_norm / norm) has the same "
        "direction and norm max_norm.",
        "A hook changes the gradient only through what it returns: return the new tensor, or None "
        "to keep the gradient. Never edit grad in place (grad.mul_): it can be a read-only expanded "
        "tensor or shared with other branches.",
    ],
    solution=clip_hook,
    equivalent_mutants={
        "compare@6: norm > max_norm -> norm >= max_norm": (
            "at norm == max_norm the rescaled gradient is grad * 1.0, the same values as "
            "keeping it"
        ),
    },
    errors={
        "more than one element of the written-to tensor": (
            "your hook edited the gradient in place, and this gradient is an expanded tensor "
            "(it came straight from .sum()). Return a new tensor, grad * factor, instead of grad.mul_()."),
        "expected Variable, but hook returned": (
            "a tensor hook must return a tensor (the new gradient) or None."),
        "has changed the size of value": (
            "the returned gradient must have the same shape as the one the hook received: "
            "rescale the whole gradient, do not reduce it."),
    },
    guide="""the hook computes the clipped gradient and forgets to return it (a tensor hook changes the
    gradient only through its return value); it edits in place with `grad.mul_()`, which
    fails on the expanded gradient that comes straight from `.sum()`; it clamps each element
    instead of the norm of the whole gradient (the direction changes); it rescales every
    gradient, also the small ones (only when the norm is above `max_norm`).""",
)


def _make_hook(answer: Callable, max_norm: float, t: Tester) -> Callable:
    hook = answer(max_norm)
    t.expect(callable(hook), what=f"clip_hook({max_norm})", expected="a function hook(grad)", got=hook,
             nudge="clip_hook(max_norm) must return the hook function itself (return hook, without "
                   "calling it), for tensor.register_hook(clip_hook(max_norm))")
    return hook


@exercise.case("a leaf whose gradient [5, 5, 5, 5] has norm 10, clipped to max_norm=1")
def _(answer, t: Tester) -> None:
    hook = _make_hook(answer, 1.0, t)
    w = torch.zeros(4, requires_grad=True)
    coeff = torch.full((4,), 5.0)
    with w.register_hook(hook):
        (w * coeff).sum().backward()
    t.expect_close(w.grad, torch.full((4,), 0.5), what="w.grad", nudge=(
        "a gradient with norm 10 and max_norm 1 becomes grad * (1 / 10): same direction, norm 1"),
        wrong={
            "unchanged": (coeff, "the gradient came back unchanged: a hook changes the gradient only "
                                 "through the tensor it returns; return the rescaled gradient"),
            "clamped": (torch.ones(4), "each element was capped at max_norm; clip the norm of the "
                                       "whole gradient instead (grad.norm()), so its direction stays"),
        })


@exercise.case("a small gradient (norm 0.5) with max_norm=1 stays as it is")
def _(answer, t: Tester) -> None:
    hook = _make_hook(answer, 1.0, t)
    w = torch.zeros(4, requires_grad=True)
    coeff = torch.full((4,), 0.25)
    with w.register_hook(hook):
        (w * coeff).sum().backward()
    t.expect_close(w.grad, coeff, what="w.grad", nudge=(
        "rescale only when the norm is larger than max_norm; otherwise keep the gradient "
        "(return None or grad)"))


@exercise.case("a gradient that comes straight from .sum() (an expanded tensor)")
def _(answer, t: Tester) -> None:
    hook = _make_hook(answer, 2.0, t)
    w = torch.zeros(16, requires_grad=True)  # the gradient of w.sum() is ones(16): norm 4
    with w.register_hook(hook):
        w.sum().backward()
    t.expect_close(w.grad, torch.full((16,), 0.5), what="w.grad", nudge=(
        "ones(16) has norm 4; clipped to norm 2 it is 0.5 everywhere"))


@exercise.case("a hook on an intermediate tensor clips what flows upstream")
def _(answer, t: Tester) -> None:
    hook = _make_hook(answer, 1.0, t)
    x = torch.ones(3, requires_grad=True)
    h = x * 3
    with h.register_hook(hook):
        (h * torch.tensor([0.0, 3.0, 4.0])).sum().backward()  # dloss/dh = [0, 3, 4], norm 5
    t.expect_close(x.grad, torch.tensor([0.0, 1.8, 2.4]), what="x.grad (x is upstream of h)", nudge=(
        "the gradient of h, [0, 3, 4], is clipped to [0, 0.6, 0.8]; x.grad is 3 times that"))


@exercise.case("a 2-D weight gradient with rows of different norms (the norm of the whole tensor)")
def _(answer, t: Tester) -> None:
    hook = _make_hook(answer, 1.0, t)
    w = torch.zeros(2, 3, requires_grad=True)
    coeff = torch.tensor([[3.0, 0.0, 0.0], [0.0, 4.0, 0.0]])   # norm 5, row norms 3 and 4
    with w.register_hook(hook):
        (w * coeff).sum().backward()
    t.expect_close(w.grad, coeff / 5, what="w.grad (a 2 x 3 weight)", nudge=(
        "the norm is that of the whole gradient, grad.norm() over every element: [[3, 0, 0], "
        "[0, 4, 0]] has norm 5 and becomes [[0.6, 0, 0], [0, 0.8, 0]]"),
        wrong={"rows": (torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]),
                        "each row was clipped on its own: take the norm of the whole gradient, "
                        "grad.norm(), not grad.norm(dim=...)")})


@exercise.case("a conv weight gradient (4-D) of norm 3 under max_norm 4, then of norm 12", hidden=True)
def _(answer, t: Tester) -> None:
    hook = _make_hook(answer, 4.0, t)
    w = torch.zeros(1, 1, 3, 3, requires_grad=True)
    coeff = torch.ones(1, 1, 3, 3)                              # norm 3 (nine ones)
    with w.register_hook(hook):
        (w * coeff).sum().backward()
        t.expect_close(w.grad, coeff, what="w.grad (norm 3, max_norm 4)", nudge=(
            "a gradient whose norm (3) is below max_norm (4) must stay as it is: compare "
            "grad.norm(), the square root of the sum of squares, with max_norm"))
        w.grad = None
        (w * 4 * coeff).sum().backward()                         # norm 12
    t.expect_close(w.grad, coeff * 4 / 3, what="w.grad (norm 12, max_norm 4)",
                   nudge="rescale the whole 4-D gradient to norm max_norm: grad * (max_norm / grad.norm())")


@exercise.wrong("clips each row on its own (norm over the last dimension)", mentions="each row")
def _per_row(max_norm):
    def hook(grad):
        norm = grad.norm(dim=-1, keepdim=True)
        return grad * (max_norm / norm).clamp(max=1.0)
    return hook


@exercise.wrong("compares the squared norm with max_norm", mentions="square root", hidden=True)
def _squared(max_norm):
    def hook(grad):
        squared = (grad ** 2).sum()
        if squared > max_norm:
            return grad * (max_norm / squared.sqrt())
        return None
    return hook


@exercise.wrong("computes the clipped gradient but forgets to return it", mentions="unchanged")
def _forgets_return(max_norm):
    def hook(grad):
        norm = grad.norm()
        if norm > max_norm:
            grad = grad * (max_norm / norm)
    return hook


@exercise.wrong("edits the gradient in place with grad.mul_()", mentions="Return a new tensor")
def _in_place(max_norm):
    def hook(grad):
        norm = grad.norm()
        if norm > max_norm:
            grad.mul_(max_norm / norm)
        return grad
    return hook


@exercise.wrong("clamps each element instead of the norm", mentions="whole gradient")
def _clamps(max_norm):
    return lambda grad: grad.clamp(-max_norm, max_norm)


@exercise.wrong("always rescales to max_norm, even small gradients", mentions="only when")
def _always(max_norm):
    return lambda grad: grad * (max_norm / grad.norm())
