"""08_training_hooks, exercise: training_hooks.attach_ema."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from .. import kit
from ..core import Exercise, Tester
from ._shared import _loss, _mlp, _nested, _remove_all, _train, _user_hooks


def attach_ema(optimizer, decay):
    """(averages of every parameter, the handle of the step post-hook that updates them)."""
    ### BEGIN SOLUTION
    params = [p for group in optimizer.param_groups for p in group["params"]]
    averages = [p.detach().clone() for p in params]

    def update(opt, args, kwargs):
        with torch.no_grad():
            for avg, p in zip(averages, params):
                avg.mul_(decay).add_(p, alpha=1 - decay)

    return averages, optimizer.register_step_post_hook(update)
    ### END SOLUTION


def _params(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [p for group in optimizer.param_groups for p in group["params"]]


exercise = Exercise(
    "training_hooks.attach_ema", "An average of the weights, kept by the optimizer",
    task=("write attach_ema(optimizer, decay) that makes a copy of every parameter of `optimizer` "
          "(all its param groups, in order), registers a step post-hook that, after every "
          "optimizer.step(), updates each copy to decay * copy + (1 - decay) * parameter, and "
          "returns (the list of copies, the hook's handle)"),
    hints=[
        "The parameters are in optimizer.param_groups: [p for group in optimizer.param_groups for p in "
        "group['params']]. Start each average as p.detach().clone(), a copy, not the parameter itself.",
        "optimizer.register_step_post_hook(hook) calls hook(optimizer, args, kwargs) right after each "
        "step, when the parameters hold their new values. A step *pre*-hook would see the old ones.",
        "Update each average in place under torch.no_grad(): avg.mul_(decay).add_(p, alpha=1 - decay); "
        "return (averages, handle) so that the caller can remove the hook.",
    ],
    solution=attach_ema,
    guide="""updating in a step *pre*-hook (the average is one step behind); swapping the weights
    (`decay` belongs to the old average); starting the averages at zero; keeping the
    parameters themselves instead of copies (the step changes them in place); wrapping
    `optimizer.step` instead of registering a hook; averaging the first param group only.""",
)


def _expected_ema(build: Callable[[int], nn.Module], make_opt: Callable, decay: float, steps: int,
                  seed: int, variant: str = "right") -> list[torch.Tensor]:
    """The averages of a hand-written loop, without any hook, on a fresh copy of the model; a
    ``variant`` gives what a typical mistake gives: ``pre`` (updated before each step),
    ``swapped`` (decay and 1 - decay swapped), ``zeros`` (started at zero)."""
    model = build(seed)
    opt = make_opt(model)
    averages = [torch.zeros_like(p) if variant == "zeros" else p.detach().clone() for p in _params(opt)]
    keep, new = (1 - decay, decay) if variant == "swapped" else (decay, 1 - decay)

    def update() -> None:
        with torch.no_grad():
            for avg, p in zip(averages, _params(opt)):
                avg.mul_(keep).add_(p, alpha=new)

    for step in range(steps):
        opt.zero_grad()
        _loss(model, step, seed).backward()
        if variant == "pre":
            update()
        opt.step()
        if variant != "pre":
            update()
    return averages


def _ema_case(answer: Callable, t: Tester, build: Callable[[int], nn.Module], make_opt: Callable,
              decay: float, steps: int, seed: int, what: str) -> tuple[torch.optim.Optimizer, list, object]:
    want = _expected_ema(build, make_opt, decay, steps, seed)
    mistakes = {
        "pre": "the average is one step behind: a step pre-hook sees the weights before the step; use "
               "optimizer.register_step_post_hook",
        "swapped": "the weights are swapped: average = decay * average + (1 - decay) * parameter (decay weighs "
                   "the old average)",
        "zeros": "the average started at zero: start from a copy of the parameters (p.detach().clone()), not from "
                 "zeros, or the first steps drag it towards 0",
    }
    wrong = {v: _expected_ema(build, make_opt, decay, steps, seed, v) for v in mistakes}
    model = t.track(build(seed), "the model")
    opt = make_opt(model)
    got = answer(opt, decay)
    t.expect_type(got, tuple, what=what, nudge="return the pair (averages, handle)")
    t.expect(len(got) == 2, what=f"len({what})", expected=2, got=len(got), nudge="return (averages, handle)")
    averages, handle = got
    try:
        t.expect_type(averages, (list, tuple), what="the averages", nudge="a list with one tensor per parameter")
        t.expect(hasattr(handle, "remove"), what="the handle", expected="a handle with .remove()", got=handle,
                 nudge="return the handle that optimizer.register_step_post_hook gave you")
        t.expect(_user_hooks(opt, "step_post") + _user_hooks(opt, "step_pre") >= 1,
                 what="hooks on the optimizer", expected="a step post-hook", got="no step hook", nudge=(
                     "keep the average with optimizer.register_step_post_hook: it runs after every step, "
                     "whoever calls optimizer.step() (no wrapper, no change to the training loop)"))
        t.expect(len(averages) == len(want), what="len(averages)", expected=len(want), got=len(averages),
                 nudge="one average per parameter of every param group (optimizer.param_groups)")
        t.expect(all(not isinstance(a, torch.Tensor) or a.data_ptr() != p.data_ptr()
                     for a, p in zip(averages, _params(opt))), what="the averages",
                 expected="copies of the parameters", got="the parameters themselves",
                 nudge="start each average as a copy, p.detach().clone(): the parameter itself changes at every step")
        _train(model, opt, steps, seed)
        for i, (a, w) in enumerate(zip(averages, want)):
            t.expect_type(a, torch.Tensor, what=f"averages[{i}]")
            # the hand loop does the same float operations as the solution; 1e-6 admits an
            # equally right formula (avg + (1 - decay) * (p - avg)), far below what the mistakes
            # give (one step behind, decay's weights swapped, a start at zero: 1e-3 and more here)
            kit.expect_detached(t, a, what=f"averages[{i}] after {steps} steps")
            t.expect_close(a, w, what=f"averages[{i}] after {steps} steps", atol=1e-6, rtol=1e-5,
                           wrong={v: (wrong[v][i], mistakes[v]) for v in mistakes},
                           nudge="after each step: average = decay * average + (1 - decay) * parameter, "
                                 "from a copy of the parameters, updated in a step post-hook")
    except BaseException:
        _remove_all(handle)
        raise
    return opt, averages, handle


@exercise.case("an MLP trained 4 steps with SGD, decay 0.5")
def _(answer, t: Tester) -> None:
    _, _, handle = _ema_case(answer, t, _mlp, lambda m: torch.optim.SGD(m.parameters(), lr=0.1), 0.5, 4,
                             seed=1, what="attach_ema(sgd, 0.5)")
    _remove_all(handle)


@exercise.case("a nested model trained 3 steps with Adam, decay 0.9; then the handle is removed")
def _(answer, t: Tester) -> None:
    opt, averages, handle = _ema_case(answer, t, _nested, lambda m: torch.optim.Adam(m.parameters(), lr=0.01),
                                      0.9, 3, seed=2, what="attach_ema(adam, 0.9)")
    _remove_all(handle)
    before = [a.clone() for a in averages]
    model_params = _params(opt)
    with torch.no_grad():
        for p in model_params:
            p.add_(1.0)
    opt.step()  # no gradients: nothing moves, but a hook would still fire
    t.expect(all(torch.equal(a, b) for a, b in zip(averages, before)), what="the averages after handle.remove()",
             expected="unchanged", got="changed", nudge=(
                 "the averages must change only through the hook you registered, so that removing its "
                 "handle stops them; keep them in tensors the hook updates, not in code that runs otherwise"))


def _two_groups(model: nn.Module) -> torch.optim.Optimizer:
    """SGD with the first layer in a group of its own (another learning rate)."""
    first = [p for n, p in model.named_parameters() if n.startswith("fc1")]
    rest = [p for n, p in model.named_parameters() if not n.startswith("fc1")]
    return torch.optim.SGD([{"params": first, "lr": 0.05}, {"params": rest}], lr=0.1, momentum=0.9)


@exercise.case("an optimizer with two param groups", hidden=True)
def _(answer, t: Tester) -> None:
    _, _, handle = _ema_case(answer, t, _mlp, _two_groups, 0.8, 3, seed=3, what="attach_ema(two groups, 0.8)")
    _remove_all(handle)


@exercise.wrong("updates the average in a step pre-hook", mentions="one step behind")
def _ema_pre_hook(optimizer, decay):
    params = _params(optimizer)
    averages = [p.detach().clone() for p in params]

    def update(opt, args, kwargs):
        with torch.no_grad():
            for avg, p in zip(averages, params):
                avg.mul_(decay).add_(p, alpha=1 - decay)

    return averages, optimizer.register_step_pre_hook(update)


@exercise.wrong("swaps the weights: decay * parameter + (1 - decay) * average", mentions="decay * average")
def _ema_swapped(optimizer, decay):
    params = _params(optimizer)
    averages = [p.detach().clone() for p in params]

    def update(opt, args, kwargs):
        with torch.no_grad():
            for avg, p in zip(averages, params):
                avg.mul_(1 - decay).add_(p, alpha=decay)

    return averages, optimizer.register_step_post_hook(update)


@exercise.wrong("starts the averages at zero", mentions="not from zeros")
def _ema_zeros(optimizer, decay):
    params = _params(optimizer)
    averages = [torch.zeros_like(p) for p in params]

    def update(opt, args, kwargs):
        with torch.no_grad():
            for avg, p in zip(averages, params):
                avg.mul_(decay).add_(p, alpha=1 - decay)

    return averages, optimizer.register_step_post_hook(update)


@exercise.wrong("keeps the parameters themselves instead of copies", mentions="the parameter itself changes")
def _ema_no_copy(optimizer, decay):
    params = _params(optimizer)
    averages = [p.data for p in params]

    def update(opt, args, kwargs):
        with torch.no_grad():
            for avg, p in zip(averages, params):
                avg.mul_(decay).add_(p, alpha=1 - decay)

    return averages, optimizer.register_step_post_hook(update)


@exercise.wrong("wraps optimizer.step instead of registering a hook", mentions="register_step_post_hook")
def _ema_wraps_step(optimizer, decay):
    params = _params(optimizer)
    averages = [p.detach().clone() for p in params]
    step = optimizer.step

    def stepped(*args, **kwargs):
        out = step(*args, **kwargs)
        with torch.no_grad():
            for avg, p in zip(averages, params):
                avg.mul_(decay).add_(p, alpha=1 - decay)
        return out

    optimizer.step = stepped

    class Handle:
        def remove(self):
            optimizer.step = step

    return averages, Handle()


@exercise.wrong("averages the first param group only", mentions="every param group", hidden=True)
def _ema_first_group(optimizer, decay):
    params = list(optimizer.param_groups[0]["params"])
    averages = [p.detach().clone() for p in params]

    def update(opt, args, kwargs):
        with torch.no_grad():
            for avg, p in zip(averages, params):
                avg.mul_(decay).add_(p, alpha=1 - decay)

    return averages, optimizer.register_step_post_hook(update)
