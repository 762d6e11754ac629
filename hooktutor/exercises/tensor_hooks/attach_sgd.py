"""01_tensor_hooks, exercise: tensor_hooks.attach_sgd."""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.hooks import RemovableHandle

from ...inventory import hook_ids
from .. import kit
from ..core import Exercise, Tester
from ._shared import _mlp_problem


def attach_sgd(model, lr):
    """Hook an SGD step into backward for every trainable parameter; return the handles."""
    ### BEGIN SOLUTION
    def sgd_step(param):
        with torch.no_grad():
            param.add_(param.grad, alpha=-lr)
        param.grad = None

    return [p.register_post_accumulate_grad_hook(sgd_step) for p in model.parameters() if p.requires_grad]
    ### END SOLUTION


exercise = Exercise(
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
    solution=attach_sgd,
    equivalent_mutants={
        "grad-mode@5: with no_grad(...): -> <the body alone>": (
            "a post-accumulate-grad hook runs inside backward(), where grad mode is off "
            "unless create_graph=True, so no_grad() changes nothing there"
        ),
    },
    errors={
        "doesn't require gradient": (
            "a frozen parameter (requires_grad=False) cannot take a hook: register only on "
            "parameters with p.requires_grad."),
        "post accumulate grad hooks should return None": (
            "the hook of register_post_accumulate_grad_hook must return None; it updates the "
            "parameter in place instead."),
    },
    guide="""forgetting `param.grad = None` after the step, so the next backward adds to the old
    gradient; registering on frozen parameters too (only `p.requires_grad` ones take a
    hook); not returning the list of handles.""",
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


@exercise.case("one backward of an MLP updates every parameter")
def _(answer, t: Tester) -> None:
    _run_sgd_case(answer, t, seed=5, steps=1,
                  nudge="after one backward every parameter should be p - lr * p.grad")


@exercise.case("two backwards in a row take two steps")
def _(answer, t: Tester) -> None:
    _run_sgd_case(answer, t, seed=6, steps=2, nudge=(
        "each backward should take one step with the gradient of that backward only: set "
        "param.grad = None after the step"))


@exercise.case("a model whose fc1.weight is frozen (requires_grad=False)")
def _(answer, t: Tester) -> None:
    _run_sgd_case(answer, t, seed=7, steps=1, freeze=True,
                  nudge="a frozen parameter must not move; the others take one step")


@exercise.case("a nested model (a Sequential inside a module inside the model)")
def _(answer, t: Tester) -> None:
    _run_sgd_case(answer, t, seed=8, steps=1, model=kit.Nested(seed=8),
                  nudge="every parameter, also those of nested modules, takes one step")


@exercise.case("a weight shared by two layers (tied weights) takes one step per backward", hidden=True)
def _(answer, t: Tester) -> None:
    _run_sgd_case(answer, t, seed=9, steps=2, model=_Tied(),
                  nudge="a shared weight is one parameter: one hook, one step per backward")


def _step_hook(lr):
    def step(p):
        with torch.no_grad():
            p.add_(p.grad, alpha=-lr)
        p.grad = None
    return step


@exercise.wrong("returns the parameters it hooked instead of the handles", mentions="gives back, one per parameter")
def _returns_parameters(model, lr):
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.register_post_accumulate_grad_hook(_step_hook(lr))
    return params


@exercise.wrong("walks model.children() and misses nested layers", mentions="nested modules")
def _children_only(model, lr):
    return [p.register_post_accumulate_grad_hook(_step_hook(lr)) for layer in model.children()
            for p in layer.parameters(recurse=False) if p.requires_grad]


@exercise.wrong("steps in a tensor hook (register_hook), before .grad is accumulated",
                  mentions="post-accumulate-grad hooks on")
def _tensor_hook(model, lr):
    def make(p):
        def step(grad):
            with torch.no_grad():
                p.add_(grad, alpha=-lr)
        return step
    return [p.register_hook(make(p)) for p in model.parameters() if p.requires_grad]


@exercise.wrong("returns a generator expression", mentions="is a generator")
def _generator(model, lr):
    return (p.register_post_accumulate_grad_hook(_step_hook(lr)) for p in model.parameters() if p.requires_grad)


@exercise.wrong("walks model.modules(), so a shared weight gets two hooks", mentions="a shared one once",
                  hidden=True)
def _per_module(model, lr):
    return [p.register_post_accumulate_grad_hook(_step_hook(lr)) for m in model.modules()
            for p in m.parameters(recurse=False) if p.requires_grad]


@exercise.wrong("forgets to set p.grad = None", mentions="param.grad = None")
def _keeps_grad(model, lr):
    def step(p):
        with torch.no_grad():
            p.add_(p.grad, alpha=-lr)
    return [p.register_post_accumulate_grad_hook(step) for p in model.parameters() if p.requires_grad]


@exercise.wrong("hooks frozen parameters too", mentions="requires_grad")
def _hooks_frozen(model, lr):
    def step(p):
        with torch.no_grad():
            p.add_(p.grad, alpha=-lr)
        p.grad = None
    return [p.register_post_accumulate_grad_hook(step) for p in model.parameters()]


@exercise.wrong("does not return the handles", mentions="list of handles")
def _no_handles(model, lr):
    def step(p):
        with torch.no_grad():
            p.add_(p.grad, alpha=-lr)
        p.grad = None
    for p in model.parameters():
        if p.requires_grad:
            p.register_post_accumulate_grad_hook(step)
