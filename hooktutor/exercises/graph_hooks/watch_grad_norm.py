"""09_autograd_graph_hooks, exercise: graph_hooks.watch_grad_norm."""

from __future__ import annotations

import copy
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
          "computed, it appends the "
          "L2 norm of all of them together (sqrt of the sum of every element squared; a tensor the pass did not "
          "reach counts as zero) as a float to a list. Return (the list, the hook's handle)"),
    hints=[
        "torch.autograd.graph.register_multi_grad_hook(tensors, fn) calls fn(grads) once per backward pass, with "
        "one gradient per tensor, in order, after all of them are computed; it returns a handle.",
        "The gradients fn receives are those of this pass. .grad is not: it adds up over passes until zero_grad(). "
        "A tensor the pass did not reach is None in the list.",
        "In fn: norms.append(torch.stack([g.pow(2).sum() for g in grads if g is not None]).sum().sqrt().item()).",
    ],
    solution=watch_grad_norm,
    equivalent_mutants={
        "inplace@8: .sqrt( -> .sqrt_(": "sqrt_ works on the fresh sum of squares, which nothing else holds",
    },
    errors={"'NoneType' object has no attribute": _NONE_NUDGE, "unsupported operand type(s)": _NONE_NUDGE},
    guide="""a tensor hook per tensor (one entry per tensor, not per pass); reading `.grad` (it adds up
    over passes without `zero_grad()`); `mode="any"` (one gradient only; a `TypeError`
    before torch 2.3); calling `.pow` on a `None` gradient (a pass that does not reach every
    tensor).""",
)


def _pass_norms(losses: list[Callable[[], torch.Tensor]], tensors: list[torch.Tensor]) -> list[float]:
    """The norm of the gradients of each pass, from torch.autograd.grad (no hook)."""
    out = []
    for loss in losses:
        grads = torch.autograd.grad(loss(), tensors, allow_unused=True)
        out.append(torch.stack([g.pow(2).sum() for g in grads if g is not None]).sum().sqrt().item())
    return out


def _norm_case(answer: Callable, t: Tester, model: nn.Module, tensors: list[torch.Tensor],
               losses: list[Callable[[], torch.Tensor]], what: str) -> None:
    want = _pass_norms(losses, tensors)
    t.track(model, "the model")
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
        if abs(a - b) > 1e-5 * abs(b):
            nudge = ("one gradient only: mode='any' fires with the first gradient computed; the default mode='all' "
                     "gives them all") if any(abs(a - n) <= 1e-5 * n for n in _single_norms(losses[i], tensors))\
                else ("pass {i}: the norm of this pass's gradients, those the hook receives; .grad adds up over "
                      "passes").replace("{i}", str(i + 1))
            t.expect(False, what=f"norms[{i}]", expected=round(b, 6), got=a, nudge=nudge)
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


@exercise.wrong("calls .pow on every gradient, None included", mentions="gets None", hidden=True)
def _none_crash(tensors):
    norms = []
    return norms, register_multi_grad_hook(
        tensors, lambda grads: norms.append(torch.stack([g.pow(2).sum() for g in grads]).sum().sqrt().item()))


@exercise.case("the hook only watches: every .grad after the pass is what backward() alone gives")
def _(answer, t: Tester) -> None:
    model = MLP(seed=28)
    reference = copy.deepcopy(model)
    x = kit.randn(3, 8, seed=28)
    reference(x).pow(2).sum().backward()
    got = answer(list(model.parameters()))
    t.expect_type(got, tuple, what="watch_grad_norm(parameters)", nudge="return (norms, handle)")
    norms, handle = got
    try:
        model(x).pow(2).sum().backward()
    finally:
        if hasattr(handle, "remove"):
            handle.remove()
    for (name, p), (_, q) in zip(model.named_parameters(), reference.named_parameters()):
        t.expect_close(p.grad, q.grad, what=f"{name}.grad", nudge=(
            "the hook changed the gradients it was given: compute the norm from g.pow(2) (a new tensor), "
            "never g.pow_(2) or another in-place op on a gradient"))


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
        model(kit.randn(2, 8, seed=29)).sum().backward()
        t.expect(len(norms) == 1, what="the list after one pass through the model", expected="one norm",
                 got=norms, nudge="append exactly one float per pass that reaches the tensors")
    finally:
        if hasattr(handle, "remove"):
            handle.remove()
