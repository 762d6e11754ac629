"""Exercises of ``01_tensor_hooks.ipynb``: tensor hooks that change, record and act on gradients.

* :data:`clip_hook` — a hook that clips one tensor's gradient norm (return a new tensor).
* :data:`grad_norms` — record the gradient norm of several tensors in one backward, then
  remove every hook.
* :data:`attach_sgd` — an SGD step inside backward with post-accumulate-grad hooks.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F

from ..data import blobs
from ..inventory import TENSOR_HOOK_DICTS
from ..models import MLP
from .core import Exercise, Tester


def _tensor_hook_count(t: torch.Tensor) -> int:
    """How many hooks are attached to ``t`` (the attributes pinned by inventory.py)."""
    return sum(len(getattr(t, attr, None) or {}) for attr, _ in TENSOR_HOOK_DICTS)


# ---------------------------------------------------------------------------------------
# 1. clip_hook
# ---------------------------------------------------------------------------------------

def _clip_hook_solution(max_norm: float) -> Callable:
    def hook(grad):
        norm = grad.norm()
        if norm > max_norm:
            return grad * (max_norm / norm)  # a new tensor: same direction, norm max_norm
        return None  # small enough: keep the gradient as it is
    return hook


clip_hook = Exercise(
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
    solution=_clip_hook_solution,
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
)


def _make_hook(answer: Callable, max_norm: float, t: Tester) -> Callable:
    hook = answer(max_norm)
    t.expect(callable(hook), what=f"clip_hook({max_norm})", expected="a function hook(grad)", got=hook,
             nudge="clip_hook(max_norm) must return the hook function itself (return hook, without "
                   "calling it), for tensor.register_hook(clip_hook(max_norm))")
    return hook


@clip_hook.case("a leaf whose gradient [5, 5, 5, 5] has norm 10, clipped to max_norm=1")
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


@clip_hook.case("a small gradient (norm 0.5) with max_norm=1 stays as it is")
def _(answer, t: Tester) -> None:
    hook = _make_hook(answer, 1.0, t)
    w = torch.zeros(4, requires_grad=True)
    coeff = torch.full((4,), 0.25)
    with w.register_hook(hook):
        (w * coeff).sum().backward()
    t.expect_close(w.grad, coeff, what="w.grad", nudge=(
        "rescale only when the norm is larger than max_norm; otherwise keep the gradient "
        "(return None or grad)"))


@clip_hook.case("a gradient that comes straight from .sum() (an expanded tensor)")
def _(answer, t: Tester) -> None:
    hook = _make_hook(answer, 2.0, t)
    w = torch.zeros(16, requires_grad=True)  # the gradient of w.sum() is ones(16): norm 4
    with w.register_hook(hook):
        w.sum().backward()
    t.expect_close(w.grad, torch.full((16,), 0.5), what="w.grad", nudge=(
        "ones(16) has norm 4; clipped to norm 2 it is 0.5 everywhere"))


@clip_hook.case("a hook on an intermediate tensor clips what flows upstream")
def _(answer, t: Tester) -> None:
    hook = _make_hook(answer, 1.0, t)
    x = torch.ones(3, requires_grad=True)
    h = x * 3
    with h.register_hook(hook):
        (h * torch.tensor([0.0, 3.0, 4.0])).sum().backward()  # dloss/dh = [0, 3, 4], norm 5
    t.expect_close(x.grad, torch.tensor([0.0, 1.8, 2.4]), what="x.grad (x is upstream of h)", nudge=(
        "the gradient of h, [0, 3, 4], is clipped to [0, 0.6, 0.8]; x.grad is 3 times that"))


@clip_hook.wrong("computes the clipped gradient but forgets to return it", mentions="unchanged")
def _forgets_return(max_norm):
    def hook(grad):
        norm = grad.norm()
        if norm > max_norm:
            grad = grad * (max_norm / norm)
    return hook


@clip_hook.wrong("edits the gradient in place with grad.mul_()", mentions="Return a new tensor")
def _in_place(max_norm):
    def hook(grad):
        norm = grad.norm()
        if norm > max_norm:
            grad.mul_(max_norm / norm)
        return grad
    return hook


@clip_hook.wrong("clamps each element instead of the norm", mentions="whole gradient")
def _clamps(max_norm):
    return lambda grad: grad.clamp(-max_norm, max_norm)


@clip_hook.wrong("always rescales to max_norm, even small gradients", mentions="only when")
def _always(max_norm):
    return lambda grad: grad * (max_norm / grad.norm())


# ---------------------------------------------------------------------------------------
# 2. grad_norms
# ---------------------------------------------------------------------------------------

def _grad_norms_solution(tensors: dict, loss: torch.Tensor) -> dict:
    norms = {}
    handles = []

    def recorder(name):
        def hook(grad):
            norms[name] = grad.norm().item()  # record, return None: the gradient is unchanged
        return hook

    try:
        for name, tensor in tensors.items():
            handles.append(tensor.register_hook(recorder(name)))
        loss.backward()
    finally:
        for handle in handles:
            handle.remove()
    return norms


grad_norms = Exercise(
    "tensor_hooks.grad_norms", "Record gradient norms in one backward",
    task=("write grad_norms(tensors, loss): `tensors` maps names to tensors that `loss` depends on "
          "(intermediate results or parameters). Run loss.backward() once and return a dict "
          "name -> float, the norm of the gradient that reached each tensor in this backward. Use "
          "one tensor hook per tensor, and remove every hook before returning"),
    hints=[
        "Make an empty dict norms and a list handles. For each (name, tensor), register a hook that "
        "stores grad.norm().item() in norms[name] and returns None.",
        "A lambda or def made inside a for loop sees the loop variable's *last* value when it runs. "
        "Build each hook in a helper function recorder(name), or bind it: lambda g, name=name: ...",
        "Call loss.backward() inside try:, and remove every handle in the finally: block.",
    ],
    solution=_grad_norms_solution,
    errors={
        "expected Variable, but hook returned": (
            "your hook returned the norm. A tensor hook returns a new gradient or None: store the "
            "norm in your dict and return nothing."),
        "backward through the graph a second time": (
            "call loss.backward() exactly once, after registering every hook."),
    },
)


def _mlp_problem(seed: int):
    model = MLP(seed=seed)
    x, y = blobs(12, seed=seed)
    return model, x, y


def _expect_norms(t: Tester, got, expected: dict[str, float], nudge: str) -> None:
    if isinstance(got, dict) and len(expected) > 1 and len(got) == 1 and set(got) <= set(expected):
        t.expect(False, what="the names in your dict", expected=sorted(expected), got=sorted(got), nudge=(
            "every hook wrote under the same name: a function made in a loop sees the loop "
            "variable's last value when it runs. Bind the name when you make the hook "
            "(recorder(name), or lambda g, name=name: ...)"))
    t.expect(isinstance(got, dict) and set(got) == set(expected), what="the names in your dict",
             expected=sorted(expected), got=sorted(got) if isinstance(got, dict) else got,
             nudge="return a dict with one entry per name of `tensors`")
    for name, value in expected.items():
        norm = got[name]
        if isinstance(norm, torch.Tensor) and norm.numel() == 1:
            norm = norm.item()  # a 0-dim tensor is fine too
        t.expect(isinstance(norm, (int, float)), what=f"the norm recorded for {name!r}", expected="a float",
                 got=norm, nudge="store one number per tensor: grad.norm().item()")
        t.expect(abs(float(norm) - value) <= 1e-4 * max(1.0, value), what=f"the norm recorded for {name!r}",
                 expected=round(value, 5), got=norm, nudge=nudge)


def _expect_no_hooks(t: Tester, tensors: dict) -> None:
    for name, tensor in tensors.items():
        n = _tensor_hook_count(tensor)
        t.expect(n == 0, what=f"hooks left on {name!r}", expected=0, got=n, nudge=(
            f"after grad_norms returned, a hook was still attached to {name!r}. Keep every handle "
            "and call handle.remove() in a finally: block"))


@grad_norms.case("the outputs of fc1 and fc2 of an MLP")
def _(answer, t: Tester) -> None:
    model, x, y = _mlp_problem(3)
    out, inter = model.forward_with_intermediates(x)   # reference: the same graph again
    names = ["fc1", "fc2"]
    ref = torch.autograd.grad(F.cross_entropy(out, y), [inter[n] for n in names])
    expected = {n: g.norm().item() for n, g in zip(names, ref)}
    out, inter = model.forward_with_intermediates(x)
    tensors = {n: inter[n] for n in names}
    got = answer(tensors, F.cross_entropy(out, y))
    _expect_no_hooks(t, tensors)
    _expect_norms(t, got, expected, "record grad.norm().item() for the gradient your hook receives")


@grad_norms.case("a weight whose .grad already holds an earlier gradient, and an intermediate output")
def _(answer, t: Tester) -> None:
    model, x, y = _mlp_problem(4)
    t.track(model, "the MLP")
    F.cross_entropy(model(x), y).backward()   # fc1.weight.grad now holds a first gradient
    out, inter = model.forward_with_intermediates(x)
    ref = torch.autograd.grad(F.cross_entropy(out, y), [model.fc1.weight, inter["act2"]])
    expected = {"fc1.weight": ref[0].norm().item(), "act2": ref[1].norm().item()}
    out, inter = model.forward_with_intermediates(x)
    tensors = {"fc1.weight": model.fc1.weight, "act2": inter["act2"]}
    got = answer(tensors, F.cross_entropy(out, y))
    _expect_no_hooks(t, tensors)
    _expect_norms(t, got, expected, (
        "record the gradient of *this* backward, as the hook receives it. A leaf's .grad accumulates "
        "over backwards (here it holds two gradients), and a non-leaf has no .grad at all"))


@grad_norms.case("a tensor used twice in the loss")
def _(answer, t: Tester) -> None:
    x = torch.tensor([1.0, 2.0, 2.0], requires_grad=True)
    h = x * 1.0
    loss = (h * 2).sum() + (h * 4).sum()   # dloss/dh = 2 + 4 = 6 everywhere: norm 6 * sqrt(3)
    got = answer({"h": h}, loss)
    _expect_no_hooks(t, {"h": h})
    _expect_norms(t, got, {"h": 6.0 * 3 ** 0.5}, (
        "a tensor used twice fires its hook once, with the summed gradient: record that one value"))


@grad_norms.case("a loss whose backward fails: the hooks must still go")
def _(answer, t: Tester) -> None:
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    h = x * 2
    loss = (h ** 2).sum()
    loss.backward()   # the graph is freed: a second backward of `loss` raises
    try:
        answer({"h": h}, loss)
    except RuntimeError:
        pass   # the error may reach the caller; the hooks must not stay behind
    n = _tensor_hook_count(h)
    t.expect(n == 0, what="hooks left on 'h' after a failed backward", expected=0, got=n, nudge=(
        "loss.backward() raised, and your hook stayed attached. Register the hooks and call "
        "backward inside try:, and remove every handle in the finally: block"))


@grad_norms.wrong("a lambda in the loop captures the loop variable late", mentions="last value")
def _late_binding(tensors, loss):
    norms, handles = {}, []
    for name, tensor in tensors.items():
        handles.append(tensor.register_hook(lambda g: norms.__setitem__(name, g.norm().item())))
    loss.backward()
    for h in handles:
        h.remove()
    return norms


@grad_norms.wrong("never removes its hooks", mentions="still attached")
def _leaky(tensors, loss):
    norms = {}
    for name, tensor in tensors.items():
        tensor.register_hook(lambda g, name=name: norms.__setitem__(name, g.norm().item()))
    loss.backward()
    return norms


@grad_norms.wrong("removes its hooks, but not in a finally block", mentions="finally")
def _no_finally(tensors, loss):
    norms, handles = {}, []
    for name, tensor in tensors.items():
        handles.append(tensor.register_hook(lambda g, name=name: norms.__setitem__(name, g.norm().item())))
    loss.backward()
    for h in handles:
        h.remove()
    return norms


@grad_norms.wrong("reads .grad after backward (retain_grad)", mentions="accumulates")
def _reads_grad(tensors, loss):
    for tensor in tensors.values():
        if not tensor.is_leaf:
            tensor.retain_grad()
    loss.backward()
    return {name: tensor.grad.norm().item() for name, tensor in tensors.items()}


@grad_norms.wrong("returns the norm from the hook", mentions="return nothing")
def _returns_norm(tensors, loss):
    norms, handles = {}, []
    for name, tensor in tensors.items():
        handles.append(tensor.register_hook(lambda g, name=name: norms.setdefault(name, g.norm().item())))
    try:
        loss.backward()
    finally:
        for h in handles:
            h.remove()
    return norms


# ---------------------------------------------------------------------------------------
# 3. attach_sgd
# ---------------------------------------------------------------------------------------

def _attach_sgd_solution(model: nn.Module, lr: float) -> list:
    def sgd_step(param):
        with torch.no_grad():
            param.add_(param.grad, alpha=-lr)   # p <- p - lr * p.grad
        param.grad = None                       # nothing left to accumulate

    return [p.register_post_accumulate_grad_hook(sgd_step)
            for p in model.parameters() if p.requires_grad]


attach_sgd = Exercise(
    "tensor_hooks.attach_sgd", "An SGD step inside backward",
    task=("write attach_sgd(model, lr) that registers a post-accumulate-grad hook on every parameter "
          "of model that requires grad. Each hook updates its parameter, p <- p - lr * p.grad, under "
          "torch.no_grad(), then sets p.grad = None. Return the list of handles"),
    hints=[
        "The hook of register_post_accumulate_grad_hook receives the parameter itself (its .grad is "
        "already filled in) and returns None.",
        "Inside the hook: with torch.no_grad(): param.add_(param.grad, alpha=-lr); then "
        "param.grad = None, so the next backward starts from nothing.",
        "Skip parameters with requires_grad=False (a hook cannot be registered on them) and return "
        "[p.register_post_accumulate_grad_hook(step) for p in ... if p.requires_grad].",
    ],
    solution=_attach_sgd_solution,
    errors={
        "doesn't require gradient": (
            "a frozen parameter (requires_grad=False) cannot take a hook: register only on "
            "parameters with p.requires_grad."),
        "post accumulate grad hooks should return None": (
            "the hook of register_post_accumulate_grad_hook must return None; it updates the "
            "parameter in place instead."),
    },
)


def _sgd_reference(model: nn.Module, x, y, lr: float, steps: int) -> list[torch.Tensor]:
    ref = copy.deepcopy(model)
    for _ in range(steps):
        for p in ref.parameters():
            p.grad = None
        F.cross_entropy(ref(x), y).backward()
        with torch.no_grad():
            for p in ref.parameters():
                if p.requires_grad:
                    p.add_(p.grad, alpha=-lr)
    return [p.detach().clone() for p in ref.parameters()]


def _run_sgd_case(answer, t: Tester, *, seed: int, steps: int, nudge: str, freeze: bool = False) -> None:
    model, x, y = _mlp_problem(seed)
    if freeze:
        model.fc1.weight.requires_grad_(False)
    t.track(model, "the MLP")
    expected = _sgd_reference(model, x, y, 0.1, steps)
    handles = answer(model, 0.1)
    n_trainable = sum(1 for p in model.parameters() if p.requires_grad)
    try:
        for _ in range(steps):
            F.cross_entropy(model(x), y).backward()
    finally:
        for h in handles if isinstance(handles, (list, tuple)) else []:
            h.remove()
    t.expect(isinstance(handles, (list, tuple)) and len(handles) == n_trainable,
             what="what attach_sgd returned", expected=f"a list of {n_trainable} handles",
             got=handles if not isinstance(handles, (list, tuple)) else f"a list of {len(handles)}",
             nudge="return the list of handles, one per trainable parameter, so the caller can "
                   "remove the hooks")
    names = [n for n, _ in model.named_parameters()]
    for name, p in model.named_parameters():
        t.expect(p.grad is None, what=f"{name}.grad after backward", expected=None, got="a tensor",
                 nudge="set param.grad = None at the end of the hook, after the step, so gradients do "
                       "not pile up into the next backward")
    for name, p, want in zip(names, model.parameters(), expected):
        t.expect_close(p.detach(), want, what=f"{name} after {steps} backward(s)", nudge=nudge)


@attach_sgd.case("one backward of an MLP updates every parameter")
def _(answer, t: Tester) -> None:
    _run_sgd_case(answer, t, seed=5, steps=1,
                  nudge="after one backward every parameter should be p - lr * p.grad")


@attach_sgd.case("two backwards in a row take two steps")
def _(answer, t: Tester) -> None:
    _run_sgd_case(answer, t, seed=6, steps=2, nudge=(
        "each backward should take one step with the gradient of that backward only: set "
        "param.grad = None after the step"))


@attach_sgd.case("a model whose fc1.weight is frozen (requires_grad=False)")
def _(answer, t: Tester) -> None:
    _run_sgd_case(answer, t, seed=7, steps=1, freeze=True,
                  nudge="a frozen parameter must not move; the others take one step")


@attach_sgd.wrong("forgets to set p.grad = None", mentions="param.grad = None")
def _keeps_grad(model, lr):
    def step(p):
        with torch.no_grad():
            p.add_(p.grad, alpha=-lr)
    return [p.register_post_accumulate_grad_hook(step) for p in model.parameters() if p.requires_grad]


@attach_sgd.wrong("hooks frozen parameters too", mentions="requires_grad")
def _hooks_frozen(model, lr):
    def step(p):
        with torch.no_grad():
            p.add_(p.grad, alpha=-lr)
        p.grad = None
    return [p.register_post_accumulate_grad_hook(step) for p in model.parameters()]


@attach_sgd.wrong("does not return the handles", mentions="list of handles")
def _no_handles(model, lr):
    def step(p):
        with torch.no_grad():
            p.add_(p.grad, alpha=-lr)
        p.grad = None
    for p in model.parameters():
        if p.requires_grad:
            p.register_post_accumulate_grad_hook(step)
