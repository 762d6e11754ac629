"""09_autograd_graph_hooks, exercise: one multi-grad hook for the norm of a group of gradients.

Half-right answers an examiner expects, by kit dimension (``kit.DIMENSIONS``):

- technique: a tensor hook per tensor (one entry per tensor, not per pass); ``mode="any"`` (one
  gradient only);
- repeat: reads ``.grad``, which adds up over passes without ``zero_grad()``;
- nested, twice: tensors deep in a nested model, a Linear called twice (its weight's gradient
  is the sum of both uses, in one hook call);
- inplace_after: squares the gradients in place (``g.pow_(2)``): the hook receives the very
  gradients backward accumulates into ``.grad``, which then hold their squares;
- dtype: a float32 accumulator (``torch.zeros(1)``, ``.float()``) for float64 gradients, off in
  the eighth digit (computing in float64 whatever the gradients' dtype is right: the task asks
  for at least the gradients' precision, not for their dtype);
- reattach: a handle that leaves hooks behind (tensor hooks registered besides the multi-grad one);
- calls ``.pow`` on a ``None`` gradient (a pass that does not reach every tensor).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.autograd.graph import register_multi_grad_hook

from ...models import MLP, seeded
from .. import kit
from ..core import Exercise, Tester


def watch_grad_norm(tensors):
    """(a list that gets one norm per backward pass, the multi-grad hook's handle)."""
    ### BEGIN SOLUTION
    norms = []

    def total_norm(grads):
        squares = [g.pow(2).sum() for g in grads if g is not None]  # None: not reached by this pass
        norms.append(torch.stack(squares).sum().sqrt().item())

    return norms, torch.autograd.graph.register_multi_grad_hook(tensors, total_norm)
    ### END SOLUTION


_NONE_NUDGE = ("a tensor that this backward pass did not reach gets None in the list the hook receives: skip it "
               "(it counts as zero)")


exercise = Exercise(
    "graph_hooks.watch_grad_norm", "One hook for a group of gradients",
    task=("write watch_grad_norm(tensors) that registers ONE torch.autograd.graph.register_multi_grad_hook on "
          "`tensors`; once per backward pass that reaches any of them, when their gradients of that pass are "
          "computed, it appends "
          "the L2 norm of all of them together (sqrt of the sum of every element squared; a tensor the pass "
          "did not reach counts as zero; computed at least as precisely as the gradients: float64 ones in "
          "float64) as a float to a list. The hook "
          "only watches: the gradients stay as backward computed them. Return (the list, the hook's handle)"),
    hints=[
        "torch.autograd.graph.register_multi_grad_hook(tensors, fn) calls fn(grads) once per backward pass, with "
        "one gradient per tensor, in order, after all of them are computed; it returns a handle.",
        "The gradients fn receives are those of this pass. .grad is not: it adds up over passes until zero_grad(). "
        "A tensor the pass did not reach is None in the list.",
        "In fn: norms.append(torch.stack([g.pow(2).sum() for g in grads if g is not None]).sum().sqrt().item()).",
    ],
    solution=watch_grad_norm,
    equivalent_mutants={
        "inplace@8: .sqrt( -> .sqrt_(": (
            "sqrt_ works on the fresh sum that .sum() just made, which nothing else holds: "
            "the same number"
        ),
    },
    errors={"'NoneType' object has no attribute": _NONE_NUDGE, "unsupported operand type(s)": _NONE_NUDGE},
    guide="""adding up each tensor's norm instead of one norm of all the gradients; forgetting the
    square root; a tensor hook per tensor (one entry per tensor, not per pass); reading `.grad` (it adds up
    over passes without `zero_grad()`); `mode="any"` (one gradient only; a `TypeError`
    before torch 2.3); calling `.pow` on a `None` gradient (a pass that does not reach every
    tensor); squaring the gradients in place, `g.pow_(2)` (the hook receives the very
    tensors backward accumulates into `.grad`, which then hold their squares); a float32
    accumulator for float64 gradients; extra tensor hooks that the returned handle leaves
    behind.""",
)


def _what_went_wrong(got: float, i: int, losses: list[Callable[[], torch.Tensor]],
                     tensors: list[torch.Tensor]) -> str:
    """The nudge for a wrong norm of pass ``i``: the quantity a typical mistake computes, if it matches."""
    def near(value: float) -> bool:
        return abs(got - value) <= 1e-5 * max(abs(value), 1e-12)

    if any(near(n) for n in _single_norms(losses[i], tensors)):
        return ("one gradient only: mode='any' fires with the first gradient computed; the default "
                "mode='all' gives them all")
    grads = [g for g in torch.autograd.grad(losses[i](), tensors, allow_unused=True) if g is not None]
    squares = sum(float((g * g).sum()) for g in grads)
    if near(sum(float(g.norm()) for g in grads)):
        return ("that is the sum of each tensor's norm: the norm of all of them together is the square root of "
                "the sum of every gradient's squares, sqrt(sum of g.pow(2).sum()), not the sum of g.norm()")
    if near(squares):
        return "that is the sum of the squares: take its square root (.sqrt()) for the norm"
    running = _pass_norms(losses[: i + 1], tensors)[1]
    if i > 0 and near(sum(float((g * g).sum()) for g in running if g is not None) ** 0.5):
        return (f"pass {i + 1}: that is the norm of .grad, and .grad adds up over passes without zero_grad(): "
                "use the gradients the hook receives, those of this pass")
    return (f"pass {i + 1}: the norm of all the tensors' gradients of this pass together, those the hook "
            "receives: sqrt(sum of g.pow(2).sum())")


def _pass_norms(losses: list[Callable[[], torch.Tensor]], tensors: list[torch.Tensor]
                ) -> tuple[list[float], list[torch.Tensor | None]]:
    """The norm of the gradients of each pass, from torch.autograd.grad (no hook), and what .grad
    holds after all the passes (None for a tensor no pass reached)."""
    out, total = [], [None] * len(tensors)
    for loss in losses:
        grads = torch.autograd.grad(loss(), tensors, allow_unused=True)
        out.append(float(sum(float((g * g).sum()) for g in grads if g is not None) ** 0.5))
        total = [s if g is None else g.clone() if s is None else s + g for s, g in zip(total, grads)]
    return out, total


def _norm_case(answer: Callable, t: Tester, model: nn.Module, tensors: list[torch.Tensor],
               losses: list[Callable[[], torch.Tensor]], what: str, rtol: float = 1e-5) -> None:
    """``rtol``: how far a norm may be from the check's (the same sums in another order)."""
    want, grads = _pass_norms(losses, tensors)
    t.track(model, "the model")
    hooks_before = [kit.hook_count(tensor) for tensor in tensors]
    got = answer(tensors)
    t.expect_type(got, tuple, what=what, nudge="return the pair (norms, handle)")
    t.expect(len(got) == 2, what=f"len({what})", expected=2, got=len(got), nudge="return (norms, handle)")
    norms, handle = got
    t.expect(hasattr(handle, "remove"), what="the handle", expected="a handle with .remove()", got=handle,
             nudge="return the handle register_multi_grad_hook gave you")
    try:
        t.expect_type(norms, list, what="the norms", nudge="a list that the hook appends to")
        for loss in losses:
            loss().backward()  # no zero_grad in between: .grad adds up, the hook's gradients do not
    finally:
        handle.remove()
    t.expect(len(norms) == len(want), what=f"len(norms) after {len(losses)} backward passes", expected=len(want),
             got=len(norms), nudge=(
                 "one entry per backward pass: register ONE multi-grad hook on all the tensors (not one hook per "
                 "tensor); it fires once, after all their gradients of the pass are computed")
             if len(norms) > len(want) else "append once per backward pass, in the multi-grad hook")
    for i, (a, b) in enumerate(zip(norms, want)):
        t.expect(isinstance(a, float), what=f"norms[{i}]", expected="a float", got=a, nudge="append .item()")
        # the same sums in another order: 1e-5 relative, far below what a mistake changes (a second pass
        # that adds the first's gradients, one tensor instead of all: 1e-1 and more here)
        if abs(a - b) > rtol * abs(b):
            nudge = _what_went_wrong(a, i, losses, tensors)
            if rtol < 1e-5 and abs(a - b) <= 1e-5 * abs(b):
                nudge = ("the gradients are float64 here and your norm is off in the eighth digit: compute at "
                         "their precision or better (no float32 torch.zeros(1) or .float() of your own to add up "
                         "into)")
            t.expect(False, what=f"norms[{i}]", expected=b, got=a, nudge=nudge)
    for tensor, (i, grad) in zip(tensors, enumerate(grads)):
        same = grad is None and tensor.grad is None or (
            grad is not None and tensor.grad is not None and torch.allclose(tensor.grad, grad, rtol=1e-5, atol=1e-7))
        t.expect(same, what=f".grad of tensor {i} after the passes", expected=grad, got=tensor.grad, nudge=(
            "your hook changed the gradients: the list it receives holds the very tensors backward accumulates "
            "into .grad, so an in-place operation on them (g.pow_(2), g.mul_()) changes .grad. Compute out of "
            "place: g.pow(2)"))
    hooks_after = [kit.hook_count(tensor) for tensor in tensors]
    t.expect(hooks_after == hooks_before, what="hooks on the tensors after handle.remove()",
             expected=hooks_before, got=hooks_after,
             nudge="the handle you return must remove everything you registered")
    loss = losses[0]
    loss().backward()
    t.expect(len(norms) == len(want), what="len(norms) after handle.remove() and one more backward",
             expected=len(want), got=len(norms), nudge="the handle you return must remove the hook")


def _single_norms(loss: Callable[[], torch.Tensor], tensors: list[torch.Tensor]) -> list[float]:
    grads = torch.autograd.grad(loss(), tensors, allow_unused=True)
    return [g.norm().item() for g in grads if g is not None]


def _mlp_losses(model: nn.Module) -> list[Callable[[], torch.Tensor]]:
    return [lambda s=s: model(kit.randn(4, 8, seed=s)).pow(2).sum() for s in (20, 21)]


@exercise.case("the parameters of an MLP, two backward passes without zero_grad")
def _(answer, t: Tester) -> None:
    model = MLP(seed=20)
    _norm_case(answer, t, model, list(model.parameters()), _mlp_losses(model), "watch_grad_norm(parameters)")


@exercise.case("two tensors of a nested model's graph, three passes")
def _(answer, t: Tester) -> None:
    model = kit.Nested(seed=21)
    params = [model.encoder.body[0].weight, model.head.bias]
    losses = [lambda s=s: model(kit.randn(2, 4, seed=s)).sum() for s in (22, 23, 24)]
    _norm_case(answer, t, model, params, losses, "watch_grad_norm([weight, bias])")


@exercise.case("a float64 model whose Linear runs twice: its weight's gradient adds up both uses", hidden=True)
def _(answer, t: Tester) -> None:
    model = kit.Twice(seed=28).to(torch.float64)
    params = [model.block.weight, model.out.bias]
    losses = [lambda s=s: 1e3 * model(kit.randn(3, 4, seed=s).double()).pow(2).sum() for s in (29, 30)]
    # float64 sums in another order agree to 1e-15; a float32 accumulator is off by 1e-8 and more
    _norm_case(answer, t, model, params, losses, "watch_grad_norm([block.weight, out.bias])", rtol=1e-10)


class _Branches(nn.Module):
    """``a(x)`` or ``b(x)``: a pass through one branch does not reach the other's parameters."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        with seeded(seed):
            self.a, self.b = nn.Linear(3, 2), nn.Linear(3, 2)

    def forward(self, x: torch.Tensor, branch: str) -> torch.Tensor:
        return (self.a if branch == "a" else self.b)(x)


@exercise.case("a model with two branches: each pass reaches only one", hidden=True)
def _(answer, t: Tester) -> None:
    model = _Branches(seed=25)
    losses = [lambda br=br, s=s: model(kit.randn(2, 3, seed=s), br).pow(2).sum() for br, s in (("a", 26), ("b", 27))]
    _norm_case(answer, t, model, list(model.parameters()), losses, "watch_grad_norm(parameters)")


@exercise.wrong("registers a tensor hook on every tensor", mentions="not one hook per tensor")
def _hook_per_tensor(tensors):
    norms = []
    handles = [t.register_hook(lambda g: norms.append(g.norm().item())) for t in tensors]

    class Handle:
        def remove(self):
            for h in handles:
                h.remove()

    return norms, Handle()


@exercise.wrong("reads .grad after the last tensor's gradient is accumulated", mentions=".grad adds up")
def _reads_dot_grad(tensors):
    norms, count = [], [0]

    def hook(tensor):
        count[0] += 1
        if count[0] % len(tensors) == 0:
            norms.append(sum(float(t.grad.pow(2).sum()) for t in tensors) ** 0.5)

    handles = [t.register_post_accumulate_grad_hook(hook) for t in tensors]

    class Handle:
        def remove(self):
            for h in handles:
                h.remove()

    return norms, Handle()


@exercise.wrong("uses mode='any'", mentions="mode")
def _mode_any(tensors):
    norms = []
    return norms, register_multi_grad_hook(tensors, lambda g: norms.append(g.norm().item()), mode="any")


@exercise.wrong("adds up each tensor's norm", mentions="sum of each tensor's norm")
def _sum_of_norms(tensors):
    norms = []
    return norms, register_multi_grad_hook(
        tensors, lambda grads: norms.append(sum(g.norm().item() for g in grads if g is not None)))


@exercise.wrong("forgets the square root", mentions="square root")
def _no_sqrt(tensors):
    norms = []
    return norms, register_multi_grad_hook(
        tensors, lambda grads: norms.append(sum(g.pow(2).sum().item() for g in grads if g is not None)))


@exercise.wrong("calls .pow on every gradient, None included", mentions="gets None", hidden=True)
def _none_crash(tensors):
    norms = []
    return norms, register_multi_grad_hook(
        tensors, lambda grads: norms.append(torch.stack([g.pow(2).sum() for g in grads]).sum().sqrt().item()))


@exercise.wrong("squares the gradients in place (g.pow_(2))", mentions="your hook changed the gradients")
def _squares_in_place(tensors):
    norms = []

    def total_norm(grads):
        norms.append(sum(float(g.pow_(2).sum()) for g in grads if g is not None) ** 0.5)

    return norms, register_multi_grad_hook(tensors, total_norm)


@exercise.wrong("adds up into a float32 tensor of its own", mentions="eighth digit", hidden=True)
def _float32_total(tensors):
    norms = []

    def total_norm(grads):
        total = torch.zeros(())
        for g in grads:
            if g is not None:
                total += g.pow(2).sum()
        norms.append(total.sqrt().item())

    return norms, register_multi_grad_hook(tensors, total_norm)


@exercise.wrong("also counts the passes with a tensor hook per tensor, which the handle leaves",
                mentions="remove everything")
def _extra_hooks(tensors):
    norms, reached = [], []
    for tensor in tensors:
        tensor.register_hook(lambda g: reached.append(1))
    return norms, register_multi_grad_hook(tensors, lambda grads: norms.append(
        sum(float(g.pow(2).sum()) for g in grads if g is not None) ** 0.5))


@exercise.case("a backward pass that reaches none of the tensors appends nothing")
def _(answer, t: Tester) -> None:
    model = MLP(seed=29)
    got = answer(list(model.fc1.parameters()))
    t.expect_type(got, tuple, what="watch_grad_norm(fc1's parameters)", nudge="return (norms, handle)")
    norms, handle = got
    try:
        other = torch.ones(3, requires_grad=True)
        (other * 2).sum().backward()              # reaches none of fc1's parameters
        t.expect(norms == [], what="the list after a pass that reached none of the tensors", expected=[],
                 got=norms, nudge="register_multi_grad_hook calls fn only for a pass that reaches one of the "
                                  "tensors; append only from inside fn")
    finally:
        if hasattr(handle, "remove"):
            handle.remove()
