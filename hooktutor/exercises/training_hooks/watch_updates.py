"""08_training_hooks, exercise 3: the update-to-weight ratio of every parameter at every step,
from a step pre-hook and a step post-hook.

Half-right answers an examiner expects, by kit dimension (``kit.DIMENSIONS``):

- inplace_after / alias: keeps references, not copies, in the pre-hook (the step changes the
  parameters in place: every ratio is 0);
- technique: ``lr * ||grad||`` instead of the update (wrong with momentum and Adam); copies the
  weights once, when attaching, with a post-hook only, or the first time the pre-hook runs;
- order: pairs the names with the optimizer's parameters by position (a dict in another order);
- a wrong type: appends the 0-d tensor, not a float;
- arithmetic: divides by the weights after the step;
- detached: the copies keep an autograd graph (``p.clone()`` without ``detach()``);
- dtype: float32 copies of float64 weights (``torch.zeros(p.shape).copy_(p)``): the ratios of a
  float64 model, to 2e-7;
- reattach / left_as_found: two watchers on one optimizer that name their parameters alike (the
  copies kept outside the function mix them up); the handles returned must remove every hook the
  call added (exactly one pre-hook and one post-hook);
- order: skips parameters that got no gradient (a layer the forward never uses: its update is 0).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from ...inventory import list_hooks
from ...models import MLP, seeded
from .. import kit
from ..core import Exercise, Tester
from ._shared import in_float64, loss, mlp, nested, remove_all, train, user_hooks


def watch_updates(optimizer, named_params):
    """(log: name -> list of update/weight ratios, one per step; the two hook handles)."""
    ### BEGIN SOLUTION
    log = {name: [] for name in named_params}
    before = {}

    def snapshot(opt, args, kwargs):
        for name, p in named_params.items():
            before[name] = p.detach().clone()

    def ratio(opt, args, kwargs):
        for name, p in named_params.items():
            update = (p.detach() - before[name]).norm()
            log[name].append((update / before[name].norm()).item())

    handles = [optimizer.register_step_pre_hook(snapshot), optimizer.register_step_post_hook(ratio)]
    return log, handles
    ### END SOLUTION


exercise = Exercise(
    "training_hooks.watch_updates", "The update-to-weight ratio, logged by hooks",
    task=("write watch_updates(optimizer, named_params) for a dict name -> parameter: register a step "
          "pre-hook that copies the parameters and a step post-hook that appends, for every name, "
          "||p_after - p_before|| / ||p_before|| (a float) to log[name]; return (log, [the two handles])"),
    hints=[
        "optimizer.register_step_pre_hook(hook) runs before every optimizer.step(), "
        "optimizer.register_step_post_hook(hook) after it; both call hook(optimizer, args, kwargs).",
        "The step changes the parameters in place, so the pre-hook must keep copies: before[name] = "
        "p.detach().clone(). The update is what the step did (p - before), not the gradient: with "
        "momentum or Adam the two differ.",
        "In the post-hook: log[name].append(((p.detach() - before[name]).norm() / before[name].norm()).item()); "
        "log every name, even one whose parameter got no gradient (its update is 0). Keep `before` and `log` "
        "inside watch_updates: two watchers on one optimizer must not share them.",
    ],
    solution=watch_updates,
    equivalent_mutants={
        "copy@13: .detach() -> <dropped>": "the norm of the difference becomes a float (.item()) on the next "
                                           "line: the graph it builds is freed at once, the value is the same",
    },
    guide="""keeping references instead of copies in the pre-hook (every ratio is 0); `lr *
    ||grad||` instead of the update (wrong with momentum and Adam); dividing by the weights after
    the step; copying the weights once instead of before every step; pairing the names with the
    optimizer's parameters by position instead of by name; copies that keep the autograd
    graph (`clone()` without `detach()`), or float32 copies of float64 weights; the copies kept
    outside the function, so that two watchers on one optimizer mix up their parameters; skipping
    parameters that got no gradient.""",
)

_MISTAKES = {
    "grad": "that is lr * ||grad||, not the update: with momentum or Adam the step is not lr * grad; copy the "
            "weights in a step pre-hook and measure p_after - p_before in the post-hook",
    "after": "divide by the norm of the weights before the step (the copy from the pre-hook), not after it",
    "once": "that measures from the weights before the first step: copy the weights in the pre-hook before every "
            "step, so that each ratio is the update of that step alone",
}


def _expected_ratios(build: Callable[[int], nn.Module], make_opt: Callable, steps: int, seed: int,
                     variant: str = "right") -> dict[str, list[float]]:
    """The ratios of a hand-written loop; ``variant`` ``grad`` (lr * ||grad||), ``after`` (divided by
    the weights after the step) and ``once`` (measured from the weights before the first step) are
    what three typical mistakes give."""
    model = build(seed)
    opt = make_opt(model)
    named = dict(model.named_parameters())
    log: dict[str, list[float]] = {name: [] for name in named}
    for step in range(steps):
        opt.zero_grad()
        loss(model, step, seed).backward()
        if variant != "once" or step == 0:
            kept = {n: torch.clone(p.detach()) for n, p in named.items()}
        opt.step()
        for n, p in named.items():
            if variant == "grad":
                grad = p.grad if p.grad is not None else torch.zeros_like(p)
                log[n].append((opt.param_groups[0]["lr"] * grad.norm() / kept[n].norm()).item())
            else:
                base = p.detach() if variant == "after" else kept[n]
                log[n].append((torch.linalg.vector_norm(p.detach() - kept[n]) / base.norm()).item())
    return log


def _expect_nothing_kept_with_a_graph(t: Tester, opt: torch.optim.Optimizer) -> None:
    """Dimension ``detached``: the tensors the learner's hooks keep (in their closures, or on the
    object whose method is the hook) hold no autograd graph."""
    for row in list_hooks(opt, include_global=False).where(owner="user"):
        fn = row.hook
        kept = [c.cell_contents for c in (getattr(fn, "__closure__", None) or ()) if _filled(c)]
        for owner in (fn, getattr(fn, "__self__", None)):  # a callable object, or the object of a method
            kept += list(vars(owner).values()) if hasattr(owner, "__dict__") else []
        for value in kept:
            if isinstance(value, dict):
                value = list(value.values())
            for item in value if isinstance(value, (list, tuple)) else [value]:
                if isinstance(item, torch.Tensor) and item.grad_fn is not None:
                    kit.expect_detached(t, item, what=f"a tensor your {row.kind.replace('_', ' ')}-hook keeps")


def _filled(cell: object) -> bool:
    try:
        _ = cell.cell_contents  # type: ignore[attr-defined]
    except ValueError:  # a cell not filled yet
        return False
    return True


def _watch(answer: Callable, t: Tester, opt: torch.optim.Optimizer, named: dict, what: str) -> tuple[dict, object]:
    """Call the answer; it must return (log, handles) and add one step pre-hook and one post-hook."""
    pre, post = user_hooks(opt, "step_pre"), user_hooks(opt, "step_post")
    got = answer(opt, named)
    t.expect_type(got, tuple, what=what, nudge="return the pair (log, handles)")
    t.expect(len(got) == 2, what=f"len({what})", expected=2, got=len(got), nudge="return (log, [the two handles])")
    log, handles = got
    try:
        added = (user_hooks(opt, "step_pre") - pre, user_hooks(opt, "step_post") - post)
        t.expect(added[0] >= 1 and added[1] >= 1, what="hooks on the optimizer",
                 expected="a step pre-hook and a step post-hook",
                 got=f"{added[0]} pre-hook(s), {added[1]} post-hook(s)",
                 nudge="take the copy in a step pre-hook (optimizer.register_step_pre_hook) at every step, and "
                       "measure in a step post-hook")
        t.expect(added == (1, 1), what="hooks the call added to the optimizer", expected="1 pre-hook, 1 post-hook",
                 got=f"{added[0]} pre-hook(s), {added[1]} post-hook(s)",
                 nudge="one step pre-hook and one step post-hook per call of watch_updates")
        t.expect(isinstance(handles, (list, tuple)) and len(handles) == 2
                 and all(callable(getattr(h, "remove", None)) for h in handles),
                 what="the handles", expected="a list of the two handles", got=handles,
                 nudge="return [pre_handle, post_handle], what the two register_step_*_hook calls gave you")
        t.expect_type(log, dict, what="the log", nudge="a dict name -> list of floats")
    except BaseException:
        remove_all(handles)
        raise
    return log, handles


def _expect_log(t: Tester, log: dict, want: dict[str, list[float]], steps: int,
                wrong: dict[str, dict[str, list[float]]], rtol: float) -> None:
    t.expect(sorted(log) == sorted(want), what="the names in the log", expected=sorted(want), got=sorted(log),
             nudge="one entry per name of named_params, also for a parameter that got no gradient")
    for name, values in want.items():
        got_values = log[name]
        t.expect(isinstance(got_values, list) and len(got_values) == steps, what=f"len(log[{name!r}])",
                 expected=steps, got=len(got_values) if isinstance(got_values, list) else got_values,
                 nudge="append one float per step, in the post-hook")
        t.expect(all(isinstance(a, float) for a in got_values), what=f"log[{name!r}]", expected="floats",
                 got=[type(a).__name__ for a in got_values],
                 nudge="append a Python float: ((p - copy).norm() / copy.norm()).item()")

        def near(xs: list, ys: list[float]) -> bool:
            return all(abs(a - b) <= rtol * abs(b) + 1e-12 for a, b in zip(xs, ys))

        for variant, nudge in _MISTAKES.items():
            if variant in wrong and near(got_values, wrong[variant][name]) and not near(got_values, values):
                t.expect(False, what=f"log[{name!r}]", expected=values, got=got_values, nudge=nudge)
        other = next((n for n in want if n != name and near(got_values, want[n])), None)
        other = None if near(got_values, values) else other
        t.expect(other is None, what=f"log[{name!r}]", expected=values, got=got_values, nudge=(
            f"that is the ratio of {other}: take each parameter from named_params by its name (named_params[name]), "
            "not from the optimizer's list by position"))
        # ratios from the same float operations as the reference loop; ``rtol`` admits another
        # order of the same sums and an epsilon of 1e-8 in the denominator (1e-5 in float32, 2e-7 in
        # float64), far below what a mistake changes (1e-2 and more; float32 copies of float64
        # weights: 2e-6 here)
        t.expect(near(got_values, values), what=f"log[{name!r}]", expected=[round(v, 6) for v in values],
                 got=got_values, nudge=(
                     "at every step: copy the weights in the pre-hook (detach().clone(): the step changes them in "
                     "place), then append ((p - copy).norm() / copy.norm()).item() in the post-hook"))


def _watch_case(answer: Callable, t: Tester, build: Callable[[int], nn.Module], make_opt: Callable, steps: int,
                seed: int, what: str, rtol: float = 1e-5, reverse: bool = False) -> None:
    """Watch every parameter (``reverse``: the dict lists them last first, unlike the optimizer)
    for ``steps`` steps; compare with the hand loop; the optimizer and the model as found."""
    want = _expected_ratios(build, make_opt, steps, seed)
    wrong = {v: _expected_ratios(build, make_opt, steps, seed, v) for v in _MISTAKES}
    model = t.track(build(seed), "the model")
    opt = make_opt(model)
    named = list(model.named_parameters())
    with kit.LeftAsFound(t, model, optimizer=opt):
        log, handles = _watch(answer, t, opt, dict(named[::-1] if reverse else named), what)
        try:
            train(model, opt, steps, seed)
            _expect_nothing_kept_with_a_graph(t, opt)
        finally:
            remove_all(handles)
    _expect_log(t, log, want, steps, wrong, rtol)


def _momentum(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


@exercise.case("an MLP, 3 steps of SGD with momentum; named_params lists the parameters last first")
def _(answer, t: Tester) -> None:
    _watch_case(answer, t, mlp, _momentum, 3, seed=20, what="watch_updates(sgd, named_params)", reverse=True)


@exercise.case("a nested model in float64, 3 steps of Adam")
def _(answer, t: Tester) -> None:
    _watch_case(answer, t, in_float64(nested), lambda m: torch.optim.Adam(m.parameters(), lr=0.01), 3, seed=21,
                what="watch_updates(adam, named_params)", rtol=2e-7)


@exercise.case("two watchers on one optimizer, each of one layer's bias, both calling it 'bias'")
def _(answer, t: Tester) -> None:
    steps, seed = 2, 23
    want = _expected_ratios(mlp, _momentum, steps, seed)
    model = t.track(mlp(seed), "the MLP")
    opt = _momentum(model)
    logs = {}
    with kit.LeftAsFound(t, model, optimizer=opt):
        logs["fc1"], first = _watch(answer, t, opt, {"bias": model.fc1.bias}, "watch_updates(sgd, {'bias': fc1.bias})")
        try:
            logs["fc2"], second = _watch(answer, t, opt, {"bias": model.fc2.bias},
                                         "watch_updates(sgd, {'bias': fc2.bias}), the second call")
            try:
                train(model, opt, steps, seed)
            finally:
                remove_all(second)
        finally:
            remove_all(first)
    for layer, log in logs.items():
        values, expected = log.get("bias"), want[f"{layer}.bias"]
        t.expect(isinstance(values, list) and len(values) == steps
                 and all(isinstance(a, float) and abs(a - b) <= 1e-5 * abs(b) for a, b in zip(values, expected)),
                 what=f"the log of the watcher of {layer}.bias", expected=[round(v, 6) for v in expected],
                 got=values, nudge=(
                     "each call keeps its own copies and its own log (inside watch_updates): two watchers on one "
                     "optimizer that use the same name must not share them"))


class _Unused(nn.Module):
    """An MLP plus a layer the forward never uses: its parameters get no gradient."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        self.mlp = MLP(seed=seed)
        with seeded(seed):
            self.spare = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(x)


@exercise.case("a model with a layer the forward never uses (no gradient: update 0)", hidden=True)
def _(answer, t: Tester) -> None:
    _watch_case(answer, t, _Unused, lambda m: torch.optim.SGD(m.parameters(), lr=0.1), 2, seed=22,
                what="watch_updates(sgd, named_params)")


# -- the wrong answers peculiar to this exercise -------------------------------------------------

def _watcher(*, copy="detach().clone()", divide_by="before", skip_no_grad=False, value="float"):
    """One factory for the near-copy wrong answers: how the pre-hook keeps the weights
    ("detach().clone()", "reference": ``p.detach()``, "clone": ``p.clone()``, keeping the graph,
    "float32": a float32 tensor of the parameter's shape, filled with it, "once": a copy the first
    time only), what is appended ("float", "tensor": the 0-d tensor itself),
    what the ratio divides by ("before", "after"), and whether parameters without a gradient are
    skipped (then missing from the log)."""
    def answer(optimizer, named_params):
        log, before = ({} if skip_no_grad else {n: [] for n in named_params}), {}

        def snapshot(opt, args, kwargs):
            for n, p in named_params.items():
                if (skip_no_grad and p.grad is None) or (copy == "once" and n in before):
                    continue
                before[n] = (p.detach() if copy == "reference" else p.clone() if copy == "clone"
                             else torch.zeros(p.shape).copy_(p.detach()) if copy == "float32" else p.detach().clone())

        def ratio(opt, args, kwargs):
            for n in before:
                p = named_params[n]
                base = p.detach() if divide_by == "after" else before[n]
                r = (p.detach() - before[n]).norm() / base.norm()
                log.setdefault(n, []).append(r if value == "tensor" else r.item())

        return log, [optimizer.register_step_pre_hook(snapshot), optimizer.register_step_post_hook(ratio)]
    return answer


exercise.wrong("keeps references, not copies, in the pre-hook", mentions="detach().clone()")(_watcher(copy="reference"))
exercise.wrong("divides by the weights after the step", mentions="before the step")(_watcher(divide_by="after"))
exercise.wrong("copies with p.clone(), keeping the graph", mentions="autograd graph")(_watcher(copy="clone"))
exercise.wrong("copies into new float32 tensors", mentions="detach().clone()")(_watcher(copy="float32"))
exercise.wrong("copies each name only the first time, in the pre-hook",
               mentions="before every step")(_watcher(copy="once"))
exercise.wrong("appends a tensor, not a float", mentions="Python float")(_watcher(value="tensor"))
exercise.wrong("skips parameters that have no gradient", mentions="also for a parameter that got no gradient",
               hidden=True)(_watcher(skip_no_grad=True))


@exercise.wrong("logs lr * ||grad|| instead of the update", mentions="not the update")
def _grad_not_update(optimizer, named_params):
    log = {n: [] for n in named_params}

    def ratio(opt, args, kwargs):
        lr = opt.param_groups[0]["lr"]
        for n, p in named_params.items():
            log[n].append((lr * p.grad.norm() / p.detach().norm()).item())

    return log, [optimizer.register_step_pre_hook(ratio), optimizer.register_step_post_hook(lambda *a: None)]


@exercise.wrong("copies the weights once, when attaching, with a post-hook only", mentions="step pre-hook")
def _snapshot_once(optimizer, named_params):
    log = {n: [] for n in named_params}
    before = {n: p.detach().clone() for n, p in named_params.items()}

    def ratio(opt, args, kwargs):
        for n, p in named_params.items():
            log[n].append(((p.detach() - before[n]).norm() / before[n].norm()).item())

    return log, [optimizer.register_step_post_hook(ratio)]


@exercise.wrong("pairs the names with the optimizer's parameters by position", mentions="by its name")
def _zip_by_position(optimizer, named_params):
    names, before = list(named_params), []
    log = {n: [] for n in names}

    def snapshot(opt, args, kwargs):
        before[:] = [p.detach().clone() for g in opt.param_groups for p in g["params"]]

    def ratio(opt, args, kwargs):
        ps = [p for g in opt.param_groups for p in g["params"]]
        for n, p, b in zip(names, ps, before):
            log[n].append(((p.detach() - b).norm() / b.norm()).item())

    return log, [optimizer.register_step_pre_hook(snapshot), optimizer.register_step_post_hook(ratio)]


_SHARED_BEFORE: dict = {}


@exercise.wrong("keeps the copies in a dict outside the function", mentions="must not share them")
def _copies_outside(optimizer, named_params):
    log = {n: [] for n in named_params}

    def snapshot(opt, args, kwargs):
        _SHARED_BEFORE.update({n: p.detach().clone() for n, p in named_params.items()})

    def ratio(opt, args, kwargs):
        for n, p in named_params.items():
            log[n].append(((p.detach() - _SHARED_BEFORE[n]).norm() / _SHARED_BEFORE[n].norm()).item())

    return log, [optimizer.register_step_pre_hook(snapshot), optimizer.register_step_post_hook(ratio)]


@exercise.wrong("returns a handle that removes nothing for the post-hook", mentions="remove the hooks")
def _keeps_post_hook(optimizer, named_params):
    log, handles = watch_updates(optimizer, named_params)

    class Handle:
        def remove(self):
            pass

    return log, [handles[0], Handle()]
