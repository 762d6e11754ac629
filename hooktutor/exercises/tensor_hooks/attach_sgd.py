"""01_tensor_hooks, exercise: an SGD step inside backward, with post-accumulate-grad hooks.

Half-right answers an examiner expects, by kit dimension (``kit.DIMENSIONS``):

- repeat: keeps ``p.grad`` after the step, so the next backward adds to the old gradient;
- order: hooks frozen parameters too (an error), or "fixes" that by unfreezing them; filters the
  parameters by name (``"weight" in name or "bias" in name``: a precedence slip hooks a frozen
  bias, and a parameter called ``scale`` never moves); skips 0-dim parameters;
- left_as_found: unfreezes the frozen parameters so that they take a hook (``requires_grad`` of the
  caller's parameters changed);
- nested: walks ``model.children()`` and misses the layers inside a submodule, or walks the leaf
  modules only and misses a parameter held by a module that also has children;
- twice: walks ``model.modules()`` and hooks a shared (tied) weight twice;
- technique: steps in a ``Tensor.register_hook`` hook (before ``.grad`` is accumulated) instead of a
  post-accumulate-grad hook; updates without ``torch.no_grad()``, which works only while backward
  runs its hooks with grad mode off (``backward(create_graph=True)`` turns it on); one
  ``torch.optim.SGD`` with momentum per parameter (not the plain step asked for);
- reattach: remembers across calls which parameters it hooked, so attaching again after the
  caller removed the hooks attaches nothing;
- dtype: a float64 model keeps its float64 parameters;
- a wrong type: returns the parameters, a generator, or nothing instead of the list of handles.
"""

from __future__ import annotations

import copy
import warnings
import weakref

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

    trained = [p for p in model.parameters() if p.requires_grad]
    return [p.register_post_accumulate_grad_hook(sgd_step) for p in trained]
    ### END SOLUTION


exercise = Exercise(
    "tensor_hooks.attach_sgd", "An SGD step inside backward",
    task=("write attach_sgd(model, lr) that registers a post-accumulate-grad hook on every parameter "
          "of model that requires grad. Each hook updates its parameter, p <- p - lr * p.grad, under "
          "torch.no_grad() (also when backward runs with create_graph=True), then sets p.grad = None. "
          "Return the list of handles; calling attach_sgd again after they were removed attaches again"),
    hints=[
        "The hook of register_post_accumulate_grad_hook receives the parameter itself (its .grad is "
        "already filled in) and returns None.",
        "Inside the hook: with torch.no_grad(): param.add_(param.grad, alpha=-lr); then "
        "param.grad = None, so the next backward starts from nothing.",
        "Skip parameters with requires_grad=False (a hook cannot be registered on them) and return "
        "[p.register_post_accumulate_grad_hook(step) for p in ... if p.requires_grad].",
    ],
    solution=attach_sgd,
    # A right answer may step one torch.optim.SGD per parameter. The first optimizer step of a
    # process imports torch._dynamo: 2 s on an idle 2-core machine, 6 s on a busy one (review
    # r00-03 X2), where 2 s would call it an endless loop and interrupt the import halfway.
    time_limit=30.0,
    errors={
        "doesn't require gradient": (
            "a frozen parameter (requires_grad=False) cannot take a hook: register only on "
            "parameters with p.requires_grad."),
        "leaf Variable that requires grad is being used in an in-place operation": (
            "your hook updated the parameter in place with grad mode on: backward(create_graph=True) "
            "runs the hooks with grad mode on. Update it inside `with torch.no_grad():`."),
        "post accumulate grad hooks should return None": (
            "the hook of register_post_accumulate_grad_hook must return None; it updates the "
            "parameter in place instead."),
    },
    guide="""forgetting `param.grad = None` after the step, so the next backward adds to the old
    gradient; registering on frozen parameters too (only `p.requires_grad` ones take a
    hook); not returning the list of handles. The check also catches an update without
    `torch.no_grad()` (it breaks under `backward(create_graph=True)`, where hooks run with grad
    mode on), unfreezing the frozen parameters to hook them, walking only the leaf modules (a
    parameter on a module with children never moves), filtering parameters by name, and a set of
    hooked parameters kept across calls (attaching again after removing attaches nothing).""",
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


def _sgd_problem(seed: int, model: nn.Module | None = None, dtype: torch.dtype | None = None):
    if model is None:
        model, x, y = _mlp_problem(seed)
    else:
        g = torch.Generator().manual_seed(seed)
        x, y = torch.randn(6, 4, generator=g), torch.randint(0, 3, (6,), generator=g)
    if dtype is not None:
        model, x = kit.in_dtype(model, x, dtype=dtype)
    return model, x, y


def _attach(answer, t: Tester, model: nn.Module, lr: float = 0.1):
    """``answer(model, lr)``, with the model left as found, and what it returned checked: the
    handles, one hook per trainable parameter."""
    with kit.LeftAsFound(t, model):
        handles = answer(model, lr)
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
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
            "every parameter of nested modules, also those of a module that has children, a shared "
            "one once)"))
    t.expect(len(handles) == len(trainable), what="what attach_sgd returned",
             expected=f"a list of {len(trainable)} handles", got=f"a list of {len(handles)}",
             nudge="return the list of handles, one per trainable parameter, so the caller can "
                   "remove the hooks")
    return handles, trainable


def _run_sgd_case(answer, t: Tester, *, seed: int, steps: int, nudge: str, freeze: tuple[str, ...] = (),
                  model: nn.Module | None = None, dtype: torch.dtype | None = None,
                  create_graph: bool = False, lr: float = 0.1) -> None:
    model, x, y = _sgd_problem(seed, model, dtype)
    kit.freeze(model, *freeze)
    t.track(model, "the model")
    expected = _sgd_reference(model, x, y, lr, steps)
    handles = None
    try:
        handles, trainable = _attach(answer, t, model, lr)
        with kit.GradWitness(trainable) as grads, warnings.catch_warnings():
            warnings.simplefilter("ignore")   # create_graph=True warns of a reference cycle that p.grad = None breaks
            for _ in range(steps):
                F.cross_entropy(model(x), y).backward(create_graph=create_graph)
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
        t.expect(p.dtype == want.dtype, what=f"{name}'s dtype", expected=want.dtype, got=p.dtype,
                 nudge="update the parameter in place, in its own dtype: param.add_(param.grad, alpha=-lr)")
        t.expect_close(p.detach(), want, what=f"{name} after {steps} backward(s)", nudge=nudge)


class _Scaled(nn.Module):
    """``body(x) * scale``: a learnable 0-dim ``scale`` held by the model itself, a module that
    also has children (so a walk over the leaf modules misses it)."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.body = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3))
        self.scale = nn.Parameter(torch.tensor(1.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x) * self.scale


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
    _run_sgd_case(answer, t, seed=7, steps=1, freeze=("fc1.weight",),
                  nudge="a frozen parameter must not move; the others take one step")


@exercise.case("a nested model (a Sequential inside a module inside the model), lr 0.05")
def _(answer, t: Tester) -> None:
    _run_sgd_case(answer, t, seed=8, steps=1, model=kit.Nested(seed=8), lr=0.05,
                  nudge="every parameter, also those of nested modules, takes one step of the lr given "
                        "(0.05 here): p - lr * p.grad")


@exercise.case("a weight shared by two layers (tied weights) takes one step per backward", hidden=True)
def _(answer, t: Tester) -> None:
    _run_sgd_case(answer, t, seed=9, steps=2, model=_Tied(),
                  nudge="a shared weight is one parameter: one hook, one step per backward")


@exercise.case("a float64 model with a frozen bias and a learnable scale on the model itself")
def _(answer, t: Tester) -> None:
    _run_sgd_case(answer, t, seed=10, steps=1, model=_Scaled(seed=10), freeze=("body.0.bias",), dtype=torch.float64,
                  nudge="every trainable parameter takes one step, also `scale`, a 0-dim parameter of the "
                        "model itself (a module with children); the frozen body.0.bias stays")


@exercise.case("attached, removed with the handles, attached again")
def _(answer, t: Tester) -> None:
    model = t.track(kit.Nested(seed=11), "a nested model")
    before = kit.hook_count(model)
    handles, trainable = _attach(answer, t, model)
    for handle in handles:
        handle.remove()
    t.expect(kit.hook_count(model) == before, what="hooks on the model after removing the handles",
             expected=before, got=kit.hook_count(model),
             nudge="return the handles of the hooks you registered: removing them must remove every hook")
    again = answer(model, 0.1)
    added = kit.hook_count(model) - before
    for handle in again if isinstance(again, (list, tuple)) else []:
        if isinstance(handle, RemovableHandle):
            handle.remove()
    t.expect(added == len(trainable), what="hooks attached by a second attach_sgd(model, lr)",
             expected=len(trainable), got=added, nudge=(
                 "attach_sgd on a model whose earlier hooks were removed must attach again, one hook per "
                 "trainable parameter: keep no record of the parameters you hooked outside the function"))


@exercise.case("backward(create_graph=True): the hooks run with grad mode on", hidden=True)
def _(answer, t: Tester) -> None:
    _run_sgd_case(answer, t, seed=12, steps=1, create_graph=True, nudge=(
        "update the parameter under torch.no_grad(): with create_graph=True, backward runs the hooks "
        "with grad mode on"))


# -- the wrong answers peculiar to this exercise -------------------------------------------------

def _dead():
    return None


def _leaf_modules(model):
    return [p for m in model.modules() if not list(m.children()) for p in m.parameters(recurse=False)]


def _sgd(*, params=lambda model: list(model.parameters()), trainable_only=True, unfreeze=False, clear=True,
         no_grad=True, returns="handles", remember=False, fixed_lr=None):
    """One factory for the near-copy wrong answers: which parameters get a hook (``params``, then
    only those that require grad unless ``trainable_only`` is False, or after unfreezing them all),
    whether the hook sets ``p.grad = None`` (``clear``) and steps under no_grad, what comes back
    ("handles", "params", "generator", "nothing"), and whether it keeps, across calls, a set of
    the parameters it hooked already (``remember``); ``fixed_lr``: a learning rate of its own
    (a notebook's global ``lr = 0.1``) instead of its argument."""
    hooked = {}   # id -> weak reference (a dead parameter's id may come back for another one)

    def answer(model, lr):
        lr = lr if fixed_lr is None else fixed_lr

        def step(p):
            if no_grad:
                with torch.no_grad():
                    p.add_(p.grad, alpha=-lr)
            else:
                p.sub_(lr * p.grad)
            if clear:
                p.grad = None
        chosen = params(model)
        if unfreeze:
            for p in chosen:
                p.requires_grad_(True)
        chosen = [p for p in chosen if p.requires_grad or not trainable_only]
        if remember:   # "never hook a parameter twice"
            chosen = [p for p in chosen if hooked.get(id(p), _dead)() is not p]
            hooked.update({id(p): weakref.ref(p) for p in chosen})
        if returns == "generator":
            return (p.register_post_accumulate_grad_hook(step) for p in chosen)
        handles = [p.register_post_accumulate_grad_hook(step) for p in chosen]
        return {"handles": handles, "params": chosen, "nothing": None}[returns]
    return answer


exercise.wrong("returns the parameters it hooked instead of the handles",
               mentions="gives back, one per parameter")(_sgd(returns="params"))
exercise.wrong("walks model.children() and misses nested layers", mentions="nested modules")(
    _sgd(params=lambda model: [p for layer in model.children() for p in layer.parameters(recurse=False)]))
exercise.wrong("returns a generator expression", mentions="is a generator")(_sgd(returns="generator"))
exercise.wrong("walks model.modules(), so a shared weight gets two hooks", mentions="a shared one once",
               hidden=True)(_sgd(params=lambda model: [p for m in model.modules()
                                                         for p in m.parameters(recurse=False)]))
exercise.wrong("forgets to set p.grad = None", mentions="param.grad = None")(_sgd(clear=False))
exercise.wrong("hooks frozen parameters too", mentions="requires_grad")(_sgd(trainable_only=False))
exercise.wrong("unfreezes the frozen parameters so that they take a hook",
               mentions="leave what you were given as you found it")(_sgd(unfreeze=True))
exercise.wrong("does not return the handles", mentions="list of handles")(_sgd(returns="nothing"))
exercise.wrong("walks the leaf modules only", mentions="a module that has children")(_sgd(params=_leaf_modules))
exercise.wrong("updates without torch.no_grad()", mentions="grad mode on", hidden=True)(_sgd(no_grad=False))
exercise.wrong("remembers the parameters it hooked, across calls", mentions="keep no record")(_sgd(remember=True))
exercise.wrong("uses the notebook's lr = 0.1, not its argument", mentions="the lr given")(_sgd(fixed_lr=0.1))


@exercise.wrong("filters the parameters by name, with a precedence slip", mentions="requires_grad")
def _by_name(model, lr):
    def step(p):
        with torch.no_grad():
            p.add_(p.grad, alpha=-lr)
        p.grad = None
    return [p.register_post_accumulate_grad_hook(step) for name, p in model.named_parameters()
            if p.requires_grad and "weight" in name or "bias" in name]


@exercise.wrong("steps in a tensor hook (register_hook), before .grad is accumulated",
                mentions="post-accumulate-grad hooks on")
def _tensor_hook(model, lr):
    def make(p):
        def step(grad):
            with torch.no_grad():
                p.add_(grad, alpha=-lr)
        return step
    return [p.register_hook(make(p)) for p in model.parameters() if p.requires_grad]


@exercise.right("one torch.optim.SGD (no momentum) per parameter, stepped in the hook")
def _optim_sgd(model, lr):
    def attach(p):
        opt = torch.optim.SGD([p], lr=lr)

        def step(param):
            opt.step()
            opt.zero_grad(set_to_none=True)
        return p.register_post_accumulate_grad_hook(step)
    return [attach(p) for p in model.parameters() if p.requires_grad]
