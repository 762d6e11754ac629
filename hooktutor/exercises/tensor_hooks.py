"""Exercises of ``01_tensor_hooks.ipynb``: tensor hooks that change, record and act on gradients.

* :data:`clip_hook` — a hook that clips one tensor's gradient norm (return a new tensor).
* :data:`grad_norms` — record the gradient norm of several tensors in one backward, then
  remove every hook.
* :data:`attach_sgd` — an SGD step inside backward with post-accumulate-grad hooks.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.hooks import RemovableHandle

from ..data import blobs
from ..inventory import hook_ids
from ..models import MLP
from . import kit
from .core import Exercise, Tester
from .predict import Prediction


def _tensor_hook_count(t: torch.Tensor) -> int:
    """How many hooks are attached to ``t`` (tensor and post-accumulate-grad hooks)."""
    return len(hook_ids(t, "tensor")) + len(hook_ids(t, "post_accumulate"))


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


# Half-right answers: forgets to return the new gradient; edits grad in place (fails on an
# expanded gradient); clamps each element; rescales always; nd: clips each row (norm over the
# last dimension) instead of the whole tensor, which is the same for a 1-D gradient only;
# hidden: compares the squared norm (sum of squares) with max_norm, which agrees with the norm
# when max_norm is 1 and makes a gradient of norm 3 under max_norm 4 larger.


@clip_hook.case("a 2-D weight gradient with rows of different norms (the norm of the whole tensor)")
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


@clip_hook.case("a conv weight gradient (4-D) of norm 3 under max_norm 4, then of norm 12", hidden=True)
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


@clip_hook.wrong("clips each row on its own (norm over the last dimension)", mentions="each row")
def _per_row(max_norm):
    def hook(grad):
        norm = grad.norm(dim=-1, keepdim=True)
        return grad * (max_norm / norm).clamp(max=1.0)
    return hook


@clip_hook.wrong("compares the squared norm with max_norm", mentions="square root", hidden=True)
def _squared(max_norm):
    def hook(grad):
        squared = (grad ** 2).sum()
        if squared > max_norm:
            return grad * (max_norm / squared.sqrt())
        return None
    return hook


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
    t.expect_type(got, dict, what="what grad_norms returned", nudge="return the dict name -> norm")
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


# Half-right answers: a lambda in a loop binds the name late; hooks never removed, or removed
# without `finally:` (a failing backward leaves them); reads .grad after backward (accumulated,
# or absent on a non-leaf); returns the norm from the hook; hidden (technique): computes the
# gradients with torch.autograd.grad instead of hooks and backward(), so no .grad is filled.


@grad_norms.case("conv activations (4-D) and a conv weight: hooks fire and backward() fills .grad",
                 hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(kit.conv_model(4, seed=8), "a small conv net")
    x = kit.conv_input(4, seed=8)
    h = model[0](x)
    ref_h, ref_w = torch.autograd.grad(model[2](model[1](h)).pow(2).mean(), [h, model[0].weight])
    h = model[0](x)
    loss = model[2](model[1](h)).pow(2).mean()
    tensors = {"conv0 output": h, "conv0.weight": model[0].weight}
    with kit.TensorHookWitness(tensors) as hooks, kit.GradWitness({"conv0.weight": model[0].weight}) as grads:
        got = answer(tensors, loss)
    t.expect(grads.accumulated["conv0.weight"] > 0, what="conv0.weight.grad after grad_norms",
             expected="filled by loss.backward()", got="not accumulated", nudge=(
                 "loss.backward() did not run: the task asks for one loss.backward() with a tensor "
                 "hook per tensor (torch.autograd.grad returns gradients without filling .grad)"))
    t.expect(hooks.fired("conv0 output") > 0, what="hooks on the conv output during backward",
             expected="your tensor hook", got="none", nudge=(
                 "record each norm with a tensor hook, tensor.register_hook(...), attached before "
                 "loss.backward()"))
    _expect_no_hooks(t, tensors)
    _expect_norms(t, got, {"conv0 output": ref_h.norm().item(), "conv0.weight": ref_w.norm().item()},
                  "record grad.norm().item() for the whole 4-D gradient your hook receives")


@grad_norms.wrong("uses torch.autograd.grad instead of hooks and backward()", mentions="loss.backward() did not run",
                  hidden=True)
def _autograd_grad(tensors, loss):
    grads = torch.autograd.grad(loss, list(tensors.values()))
    return {name: g.norm().item() for name, g in zip(tensors, grads)}


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


def _sgd_problem(seed: int, model: nn.Module | None = None):
    if model is None:
        return _mlp_problem(seed)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(6, 4, generator=g)
    return model, x, torch.randint(0, 3, (6,), generator=g)


def _run_sgd_case(answer, t: Tester, *, seed: int, steps: int, nudge: str, freeze: bool = False,
                  model: nn.Module | None = None) -> None:
    model, x, y = _sgd_problem(seed, model)
    if freeze:
        model.fc1.weight.requires_grad_(False)
    t.track(model, "the model")
    expected = _sgd_reference(model, x, y, 0.1, steps)
    handles = answer(model, 0.1)
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    try:
        t.expect_type(handles, (list, tuple), what="what attach_sgd returned", nudge=(
            "return the list of handles, [p.register_post_accumulate_grad_hook(step) for p in ...], so "
            "the caller can remove the hooks (a generator expression registers nothing until someone "
            "iterates over it)"))
        odd = [h for h in handles if not isinstance(h, RemovableHandle)]
        t.expect(not odd, what="what attach_sgd returned", expected="a list of handles",
                 got=f"{type(odd[0]).__name__} values in the list" if odd else "", nudge=(
                     "return the handles that p.register_post_accumulate_grad_hook(step) gives back, one "
                     "per parameter: they are what the caller calls .remove() on"))
        for name, p in trainable:
            n = len(hook_ids(p, "post_accumulate"))
            t.expect(n == 1, what=f"post-accumulate-grad hooks on {name}", expected=1, got=n, nudge=(
                f"{name} has {n} post-accumulate-grad hooks. Register exactly one per parameter with "
                "p.register_post_accumulate_grad_hook(step), looping over model.parameters() (it lists "
                "every parameter of nested modules, a shared one once)"))
        t.expect(len(handles) == len(trainable), what="what attach_sgd returned",
                 expected=f"a list of {len(trainable)} handles", got=f"a list of {len(handles)}",
                 nudge="return the list of handles, one per trainable parameter, so the caller can "
                       "remove the hooks")
        with kit.GradWitness(trainable) as grads:
            for _ in range(steps):
                F.cross_entropy(model(x), y).backward()
    finally:   # whatever came back, the answer's hooks are removed by the leak check anyway
        for h in handles if isinstance(handles, (list, tuple)) else []:
            if isinstance(h, RemovableHandle):
                h.remove()
    names = [n for n, _ in model.named_parameters()]
    for name, p in model.named_parameters():
        t.expect(p.grad is None, what=f"{name}.grad after backward", expected=None, got="a tensor",
                 nudge="set param.grad = None at the end of the hook, after the step, so gradients do "
                       "not pile up into the next backward")
    for name, _ in trainable:
        t.expect(grads.learner_hooks[name] == grads.accumulated[name] == steps,
                 what=f"steps taken by {name}'s hook", expected=steps, got=grads.learner_hooks[name],
                 nudge="every backward must accumulate into .grad and then run your hook once")
    for name, p, want in zip(names, model.parameters(), expected):
        t.expect_close(p.detach(), want, what=f"{name} after {steps} backward(s)", nudge=nudge)


class _Tied(nn.Module):
    """Two Linear layers that share one weight (tied weights), the second inside a Sequential."""

    def __init__(self) -> None:
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(9)
            self.first = nn.Linear(4, 4)
            self.stack = nn.Sequential(nn.Tanh(), nn.Linear(4, 4))
            self.stack[1].weight = self.first.weight
            self.head = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.stack(self.first(x)))


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


@attach_sgd.case("a nested model (a Sequential inside a module inside the model)")
def _(answer, t: Tester) -> None:
    _run_sgd_case(answer, t, seed=8, steps=1, model=kit.Nested(seed=8),
                  nudge="every parameter, also those of nested modules, takes one step")


@attach_sgd.case("a weight shared by two layers (tied weights) takes one step per backward", hidden=True)
def _(answer, t: Tester) -> None:
    _run_sgd_case(answer, t, seed=9, steps=2, model=_Tied(),
                  nudge="a shared weight is one parameter: one hook, one step per backward")


# Half-right answers: keeps p.grad (steps pile up); hooks frozen parameters (an error); returns
# nothing or a generator (nothing registered); nested: walks model.children() and misses the
# layers inside a submodule; technique: steps in a Tensor.register_hook hook (before .grad is
# accumulated) instead of a post-accumulate-grad hook; hidden: walks model.modules() and hooks a
# shared (tied) weight twice.


def _step_hook(lr):
    def step(p):
        with torch.no_grad():
            p.add_(p.grad, alpha=-lr)
        p.grad = None
    return step


@attach_sgd.wrong("returns the parameters it hooked instead of the handles", mentions="gives back, one per parameter")
def _returns_parameters(model, lr):
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.register_post_accumulate_grad_hook(_step_hook(lr))
    return params


@attach_sgd.wrong("walks model.children() and misses nested layers", mentions="nested modules")
def _children_only(model, lr):
    return [p.register_post_accumulate_grad_hook(_step_hook(lr)) for layer in model.children()
            for p in layer.parameters(recurse=False) if p.requires_grad]


@attach_sgd.wrong("steps in a tensor hook (register_hook), before .grad is accumulated",
                  mentions="post-accumulate-grad hooks on")
def _tensor_hook(model, lr):
    def make(p):
        def step(grad):
            with torch.no_grad():
                p.add_(grad, alpha=-lr)
        return step
    return [p.register_hook(make(p)) for p in model.parameters() if p.requires_grad]


@attach_sgd.wrong("returns a generator expression", mentions="is a generator")
def _generator(model, lr):
    return (p.register_post_accumulate_grad_hook(_step_hook(lr)) for p in model.parameters() if p.requires_grad)


@attach_sgd.wrong("walks model.modules(), so a shared weight gets two hooks", mentions="a shared one once",
                  hidden=True)
def _per_module(model, lr):
    return [p.register_post_accumulate_grad_hook(_step_hook(lr)) for m in model.modules()
            for p in m.parameters(recurse=False) if p.requires_grad]


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


# -- predict, then run -----------------------------------------------------------------------

def _leaves() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return (torch.tensor([1.0, 2.0], requires_grad=True), torch.tensor([3.0, 4.0], requires_grad=True),
            torch.tensor([5.0, 6.0], requires_grad=True))


def _observe_doubling_hook() -> dict[str, str]:
    """v = a * b; a hook on v returns 2 * grad; loss = (3 * v).sum() + c.sum(). What changed?"""
    def backward(hooked: bool) -> tuple[tuple[torch.Tensor, ...], torch.Tensor | None]:
        a, b, c = _leaves()
        v = a * b
        if hooked:
            v.register_hook(lambda grad: grad * 2)
        ((3 * v).sum() + c.sum()).backward()
        with warnings.catch_warnings():   # reading a non-leaf's .grad warns: that is the point here
            warnings.simplefilter("ignore", UserWarning)
            return (a.grad, b.grad, c.grad), v.grad

    plain, _ = backward(False)
    hooked, v_grad = backward(True)

    def verdict(new: torch.Tensor, old: torch.Tensor) -> str:
        return "doubled" if torch.equal(new, 2 * old) else "unchanged" if torch.equal(new, old) else "other"
    seen = {name: verdict(new, old) for name, new, old in zip(("a.grad", "b.grad", "c.grad"), hooked, plain)}
    seen["v.grad"] = "None" if v_grad is None else "filled"
    return seen


doubling_hook = Prediction(
    "tensor_hooks.doubling_hook", "Predict: what a doubling hook on v changes",
    task=("a dict with the keys 'a.grad', 'b.grad', 'c.grad', 'v.grad', each 'doubled', "
          "'unchanged' or 'None' (compared with the same backward without the hook)"),
    answer_name="predict_grads",
    observe=_observe_doubling_hook,
    choices=("doubled", "unchanged", "None", "filled", "other"),
    hints=["The hook's return value replaces the gradient that flows on from v, towards a and b.",
           "c does not take part in v; and v is not a leaf."],
    explain={
        "a.grad": "the tensor the hook returns replaces v's gradient on its way back, so everything "
                  "computed from it downstream in backward (a.grad = 3 * b * 2) doubles.",
        "b.grad": "b feeds v like a does: its gradient is computed from v's (replaced) gradient, so it doubles.",
        "c.grad": "c never passes through v: the hook sees only the gradient flowing into v, so c's "
                  "gradient is untouched.",
        "v.grad": "v is an intermediate result, not a leaf: backward fills .grad only for leaves "
                  "(and for tensors that called retain_grad()), so v.grad stays None; the hook "
                  "doubled what flowed through v, not a .grad attribute.",
    },
    summary="a tensor hook's return value replaces the gradient flowing back through that tensor: "
            "every leaf upstream of v doubles, other leaves keep theirs, and v itself has no .grad.",
)
doubling_hook.wrong("v.grad doubles (the popular claim)",
                    {"a.grad": "doubled", "b.grad": "doubled", "c.grad": "unchanged", "v.grad": "doubled"},
                    "v is an intermediate result, not a leaf")
doubling_hook.wrong("a hook only observes", {"a.grad": "unchanged", "b.grad": "unchanged",
                                             "c.grad": "unchanged", "v.grad": "None"}, "replaces v's gradient")
doubling_hook.wrong("everything doubles", {"a.grad": "doubled", "b.grad": "doubled",
                                           "c.grad": "doubled", "v.grad": "None"}, "c never passes through v")
