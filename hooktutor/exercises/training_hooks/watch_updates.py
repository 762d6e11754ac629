"""08_training_hooks, exercise: training_hooks.watch_updates."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from ...models import MLP, seeded
from ..core import Exercise, Tester
from ._shared import _loss, _mlp, _nested, _remove_all, _train, _user_hooks


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

    return log, [optimizer.register_step_pre_hook(snapshot), optimizer.register_step_post_hook(ratio)]
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
        "log every name, even one whose parameter got no gradient (its update is 0).",
    ],
    solution=watch_updates,
    equivalent_mutants={
        "copy@9: .detach() -> <dropped>": (
            "the snapshot is internal and only the ratio, a float, leaves the hooks; a clone "
            "with autograd history changes no logged value"
        ),
        "copy@13: .detach() -> <dropped>": (
            "the update is reduced to a float at once; autograd history on it changes no "
            "logged value"
        ),
        "keep-state@5: before = {} (a fresh one per call) -> before kept across calls": (
            "the pre-hook writes before[name] for every watched parameter before the post- "
            "hook reads it"
        ),
    },
    guide="""keeping references instead of copies in the pre-hook (every ratio is 0); `lr * ||grad||`
    instead of the update (wrong with momentum and Adam); dividing by the weights after the
    step; copying the weights once instead of before every step; skipping parameters that
    got no gradient.""",
)


def _expected_ratios(build: Callable[[int], nn.Module], make_opt: Callable, steps: int, seed: int,
                     variant: str = "right") -> dict[str, list[float]]:
    """The ratios of a hand-written loop; ``variant`` ``grad`` (lr * ||grad||) and ``after`` (divided by
    the weights after the step) are what two typical mistakes give."""
    model = build(seed)
    opt = make_opt(model)
    named = dict(model.named_parameters())
    log: dict[str, list[float]] = {name: [] for name in named}
    for step in range(steps):
        opt.zero_grad()
        _loss(model, step, seed).backward()
        before = {n: p.detach().clone() for n, p in named.items()}
        opt.step()
        for n, p in named.items():
            if variant == "grad":
                grad = p.grad if p.grad is not None else torch.zeros_like(p)
                log[n].append((opt.param_groups[0]["lr"] * grad.norm() / before[n].norm()).item())
            else:
                base = p.detach() if variant == "after" else before[n]
                log[n].append(((p.detach() - before[n]).norm() / base.norm()).item())
    return log


def _watch_case(answer: Callable, t: Tester, build: Callable[[int], nn.Module], make_opt: Callable, steps: int,
                seed: int, what: str) -> None:
    want = _expected_ratios(build, make_opt, steps, seed)
    mistakes = {
        "grad": "that is lr * ||grad||, not the update: with momentum or Adam the step is not lr * grad; copy the "
                "weights in a step pre-hook and measure p_after - p_before in the post-hook",
        "after": "divide by the norm of the weights before the step (the copy from the pre-hook), not after it",
    }
    wrong = {v: _expected_ratios(build, make_opt, steps, seed, v) for v in mistakes}
    model = t.track(build(seed), "the model")
    opt = make_opt(model)
    got = answer(opt, dict(model.named_parameters()))
    t.expect_type(got, tuple, what=what, nudge="return the pair (log, handles)")
    log, handles = got
    try:
        t.expect(_user_hooks(opt, "step_pre") >= 1 and _user_hooks(opt, "step_post") >= 1,
                 what="hooks on the optimizer", expected="a step pre-hook and a step post-hook",
                 got=f"{_user_hooks(opt, 'step_pre')} pre-hook(s), {_user_hooks(opt, 'step_post')} post-hook(s)",
                 nudge="take the copy in a step pre-hook (optimizer.register_step_pre_hook) at every step, and "
                       "measure in a step post-hook")
        _train(model, opt, steps, seed)
    finally:
        _remove_all(handles)
    t.expect_type(log, dict, what="the log", nudge="a dict name -> list of floats")
    t.expect(sorted(log) == sorted(want), what="the names in the log", expected=sorted(want), got=sorted(log),
             nudge="one entry per name of named_params, also for a parameter that got no gradient")
    for name, values in want.items():
        got_values = log[name]
        t.expect(isinstance(got_values, list) and len(got_values) == steps, what=f"len(log[{name!r}])",
                 expected=steps, got=len(got_values) if isinstance(got_values, list) else got_values,
                 nudge="append one float per step, in the post-hook")
        for variant, nudge in mistakes.items():
            if all(abs(float(a) - b) <= 1e-5 * abs(b) + 1e-9 for a, b in zip(got_values, wrong[variant][name]))\
                    and any(abs(float(a) - b) > 1e-5 * abs(b) + 1e-9 for a, b in zip(got_values, values)):
                t.expect(False, what=f"log[{name!r}]", expected=values, got=got_values, nudge=nudge)
        # ratios from the same float operations as the reference loop; 1e-5 relative admits another
        # order of the same sums, far below what a mistake changes (1e-2 and more here)
        ok = all(isinstance(a, float) and abs(a - b) <= 1e-5 * abs(b) + 1e-9 for a, b in zip(got_values, values))
        t.expect(ok, what=f"log[{name!r}]", expected=[round(v, 6) for v in values], got=got_values, nudge=(
            "at every step: copy the weights in the pre-hook (detach().clone(): the step changes them in place), "
            "then append ((p - copy).norm() / copy.norm()).item() in the post-hook"))


@exercise.case("an MLP, 3 steps of SGD with momentum")
def _(answer, t: Tester) -> None:
    _watch_case(answer, t, _mlp, lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9), 3, seed=20,
                what="watch_updates(sgd, named_params)")


@exercise.case("a nested model, 3 steps of Adam")
def _(answer, t: Tester) -> None:
    _watch_case(answer, t, _nested, lambda m: torch.optim.Adam(m.parameters(), lr=0.01), 3, seed=21,
                what="watch_updates(adam, named_params)")


class _Unused(nn.Module):
    """An MLP plus a layer the forward never uses: its parameters get no gradient."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        self.mlp = MLP(seed=seed)
        with seeded(seed):
            self.spare = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(x)


def _unused_loss_build(seed: int) -> nn.Module:
    return _Unused(seed)


@exercise.case("a model with a layer the forward never uses (no gradient: update 0)", hidden=True)
def _(answer, t: Tester) -> None:
    _watch_case(answer, t, _unused_loss_build, lambda m: torch.optim.SGD(m.parameters(), lr=0.1), 2, seed=22,
                what="watch_updates(sgd, named_params)")


@exercise.wrong("keeps references, not copies, in the pre-hook", mentions="detach().clone()")
def _no_clone(optimizer, named_params):
    log, before = {n: [] for n in named_params}, {}

    def snapshot(opt, args, kwargs):
        before.update({n: p.detach() for n, p in named_params.items()})

    def ratio(opt, args, kwargs):
        for n, p in named_params.items():
            log[n].append(((p.detach() - before[n]).norm() / before[n].norm()).item())

    return log, [optimizer.register_step_pre_hook(snapshot), optimizer.register_step_post_hook(ratio)]


@exercise.wrong("logs lr * ||grad|| instead of the update", mentions="not the update")
def _grad_not_update(optimizer, named_params):
    log = {n: [] for n in named_params}

    def ratio(opt, args, kwargs):
        lr = opt.param_groups[0]["lr"]
        for n, p in named_params.items():
            log[n].append((lr * p.grad.norm() / p.detach().norm()).item())

    return log, [optimizer.register_step_pre_hook(ratio), optimizer.register_step_post_hook(lambda *a: None)]


@exercise.wrong("divides by the weights after the step", mentions="before the step")
def _after_norm(optimizer, named_params):
    log, before = {n: [] for n in named_params}, {}

    def snapshot(opt, args, kwargs):
        before.update({n: p.detach().clone() for n, p in named_params.items()})

    def ratio(opt, args, kwargs):
        for n, p in named_params.items():
            log[n].append(((p.detach() - before[n]).norm() / p.detach().norm()).item())

    return log, [optimizer.register_step_pre_hook(snapshot), optimizer.register_step_post_hook(ratio)]


@exercise.wrong("copies the weights once, when attaching, with a post-hook only", mentions="step pre-hook")
def _snapshot_once(optimizer, named_params):
    log = {n: [] for n in named_params}
    before = {n: p.detach().clone() for n, p in named_params.items()}

    def ratio(opt, args, kwargs):
        for n, p in named_params.items():
            log[n].append(((p.detach() - before[n]).norm() / before[n].norm()).item())

    return log, [optimizer.register_step_post_hook(ratio)]


@exercise.wrong("skips parameters that have no gradient", mentions="also for a parameter that got no gradient",
                     hidden=True)
def _skips_no_grad(optimizer, named_params):
    log, before = {}, {}

    def snapshot(opt, args, kwargs):
        before.update({n: p.detach().clone() for n, p in named_params.items() if p.grad is not None})

    def ratio(opt, args, kwargs):
        for n in before:
            p = named_params[n]
            log.setdefault(n, []).append(((p.detach() - before[n]).norm() / before[n].norm()).item())

    return log, [optimizer.register_step_pre_hook(snapshot), optimizer.register_step_post_hook(ratio)]
