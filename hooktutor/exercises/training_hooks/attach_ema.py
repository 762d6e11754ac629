"""08_training_hooks, exercise 1: an exponential moving average of the weights, kept by an
optimizer step post-hook, that starts after a warm-up (the lesson's demo averages from the
first step; the copies here follow the weights for the first ``warmup`` steps).

Half-right answers an examiner expects, by kit dimension (``kit.DIMENSIONS``):

- technique: a step *pre*-hook (the average is one step behind); wrapping ``optimizer.step``
  instead of registering a hook (no hook on the optimizer);
- warm-up: one step too many or too few (``<`` for ``<=``); the copies left alone during the
  warm-up instead of following the weights; a step count shared by every average (kept
  outside the call) or counted in the pre-hook of another call;
- arithmetic: decay's weights swapped (``decay`` weighs the old average); averages started at
  zero instead of at a copy of the weights;
- alias / inplace_after: the parameters themselves (or ``p.data``) as the averages: the step
  changes them in place, so the "average" is the live weight;
- detached: ``p.clone()`` without ``detach()``, or the update without ``torch.no_grad()``: the
  averages hold an autograd graph that grows with every step;
- dtype: float32 copies of float64 parameters (``torch.zeros(p.shape)``, ``.float()``);
- dtype: float64 copies, but the update computed in float32 (``avg.copy_(decay * avg.float() +
  (1 - decay) * p.float())``): off in the eighth digit, which only a float64 tolerance shows;
- reattach / left_as_found: two averages on one optimizer (each call adds exactly one hook and
  keeps its own decay); a handle that does not remove the hook (the optimizer keeps a hook once
  the handle is removed); more hooks than the one asked for;
- order: the first param group only, the groups last first, or only the parameters that train
  (an optimizer with two groups and a frozen layer).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from .. import kit
from ..core import Exercise, Tester
from ._shared import in_float64, loss, mlp, nested, params, remove_all, train


def attach_ema(optimizer, decay, warmup):
    """(averages of every parameter, the handle of the step post-hook that updates them)."""
    ### BEGIN SOLUTION
    params = [p for group in optimizer.param_groups for p in group["params"]]
    averages = [p.detach().clone() for p in params]
    steps_done = 0

    def update(opt, args, kwargs):
        nonlocal steps_done
        steps_done += 1
        with torch.no_grad():
            for avg, p in zip(averages, params):
                if steps_done <= warmup:
                    avg.copy_(p)  # the warm-up: follow the weights
                else:
                    avg.mul_(decay).add_(p, alpha=1 - decay)

    return averages, optimizer.register_step_post_hook(update)
    ### END SOLUTION


exercise = Exercise(
    "training_hooks.attach_ema", "An average that starts after a warm-up",
    task=("write attach_ema(optimizer, decay, warmup) that makes a copy of every parameter of `optimizer` "
          "(all its param groups, in order) and registers a step post-hook: after each of the first "
          "`warmup` steps it sets each copy to the parameter; after every later step it sets it to "
          "decay * copy + (1 - decay) * parameter. Return (the list of copies, the hook's handle)"),
    hints=[
        "The parameters are in optimizer.param_groups: [p for group in optimizer.param_groups for p in "
        "group['params']]. Start each average as p.detach().clone(), a copy, not the parameter itself.",
        "optimizer.register_step_post_hook(hook) calls hook(optimizer, args, kwargs) right after each "
        "step, when the parameters hold their new values. A step *pre*-hook would see the old ones.",
        "Count the steps in the hook (a variable of attach_ema, changed with nonlocal): while the count is "
        "at most warmup, avg.copy_(p); after that, avg.mul_(decay).add_(p, alpha=1 - decay); both under "
        "torch.no_grad(). Return (averages, handle) so that the caller can remove the hook.",
    ],
    solution=attach_ema,
    equivalent_mutants={
        "inplace@10: steps_done += 1 -> steps_done = steps_done + ...": "the same for an int",
        "keep-state@6: steps_done = 0 (a fresh one per call) -> steps_done kept across calls":
            "an int is rebound by +=, never changed in place: what is kept across calls is the 0 it started at",
    },
    guide="""a warm-up one step too long or too short (`<` for `<=`), copies left alone during
    the warm-up instead of following the weights, or a step count kept outside the call (two
    averages share it); updating in a step *pre*-hook (the average is one step behind); swapping the weights
    (`decay` belongs to the old average); starting the averages at zero; keeping the parameters
    themselves instead of copies (the step changes them in place); `p.clone()` without `detach()`,
    or the update outside `torch.no_grad()` (the averages hold a graph that grows every step);
    float32 copies of float64 weights, or float64 copies updated in float32 arithmetic
    (`.float()`: off in the eighth digit); wrapping `optimizer.step` instead of registering a hook, or
    returning a handle that does not remove it; averaging the first param group only, the groups
    in another order, or only the parameters that train.""",
)

_MISTAKES = {
    "pre": "the average is one step behind: a step pre-hook sees the weights before the step; use "
           "optimizer.register_step_post_hook",
    "swapped": "the weights are swapped: average = decay * average + (1 - decay) * parameter (decay weighs "
               "the old average)",
    "zeros": "the average started at zero: start from a copy of the parameters (p.detach().clone()), not from "
             "zeros, or the first steps drag it towards 0",
    "late": "the warm-up lasted one step too long: the copies follow the weights after steps 1 to warmup, "
            "and average from step warmup + 1 on",
    "early": "the warm-up ended one step early: the copies follow the weights after each of the first "
             "warmup steps (count <= warmup), and average only after that",
    "frozen": "during the warm-up the copies must follow the weights (avg.copy_(p) after each of those "
              "steps), not stay where they started",
}


def _expected(build: Callable[[int], nn.Module], make_opt: Callable, decay: float, warmup: int, steps: int,
              seed: int, variant: str = "right") -> list[torch.Tensor]:
    """The averages of a hand-written loop, without any hook, on a fresh copy of the model,
    computed as avg + (1 - decay) * (p - avg); a ``variant`` gives what a typical mistake gives:
    ``pre`` (updated before each step), ``swapped`` (decay and 1 - decay swapped), ``zeros``
    (started at zero), ``late`` / ``early`` (a warm-up one step longer / shorter), ``frozen``
    (the copies left alone during the warm-up)."""
    model = build(seed)
    opt = make_opt(model)
    averages = [torch.zeros_like(p) if variant == "zeros" else p.detach().clone() for p in params(opt)]
    gain = decay if variant == "swapped" else 1 - decay

    until = warmup + {"late": 1, "early": -1}.get(variant, 0)

    def update(done: int) -> None:
        with torch.no_grad():
            for i, p in enumerate(params(opt)):
                if done <= until:
                    if variant != "frozen":
                        averages[i] = p.detach().clone()
                else:
                    averages[i] = averages[i] + gain * (p - averages[i])

    for step in range(steps):
        opt.zero_grad()
        loss(model, step, seed).backward()
        if variant == "pre":
            update(step + 1)
        opt.step()
        if variant != "pre":
            update(step + 1)
    return averages


def _attach(answer: Callable, t: Tester, opt: torch.optim.Optimizer, decay: float, warmup: int,
            what: str) -> tuple[list, object]:
    """Call the answer; check the shape of what it returned and the one hook it added."""
    hooks_before = kit.hook_count(opt)
    got = answer(opt, decay, warmup)
    t.expect_type(got, tuple, what=what, nudge="return the pair (averages, handle)")
    t.expect(len(got) == 2, what=f"len({what})", expected=2, got=len(got), nudge="return (averages, handle)")
    averages, handle = got
    try:
        t.expect(callable(getattr(handle, "remove", None)), what="the handle", expected="a handle with .remove()",
                 got=handle, nudge="return the handle that optimizer.register_step_post_hook gave you")
        t.expect_type(averages, (list, tuple), what="the averages", nudge="a list with one tensor per parameter")
        added = kit.hook_count(opt) - hooks_before
        t.expect(added >= 1, what="hooks on the optimizer", expected="a step post-hook", got="no step hook", nudge=(
                     "keep the average with optimizer.register_step_post_hook: it runs after every step, "
                     "whoever calls optimizer.step() (no wrapper, no change to the training loop)"))
        t.expect(added == 1, what="hooks the call added to the optimizer", expected=1, got=added, nudge=(
            "register one step post-hook per call of attach_ema, and return its handle: that handle alone "
            "must stop the average"))
        ps = params(opt)
        t.expect(len(averages) == len(ps), what="len(averages)", expected=len(ps), got=len(averages),
                 nudge="one average per parameter of every param group (optimizer.param_groups), also the "
                       "parameters that do not train")
        for i, (a, p) in enumerate(zip(averages, ps)):
            t.expect_type(a, torch.Tensor, what=f"averages[{i}]", nudge="a tensor, a copy of the parameter")
            t.expect(a.data_ptr() != p.data_ptr(), what=f"averages[{i}]", expected="a copy of the parameter",
                     got="the parameter itself", nudge=(
                         "start each average as a copy, p.detach().clone(): the parameter itself changes at "
                         "every step"))
            t.expect(a.shape == p.shape, what=f"averages[{i}]", expected=f"a tensor of shape {tuple(p.shape)}",
                     got=f"a tensor of shape {tuple(a.shape)}", nudge=(
                         "averages[i] is the copy of the i-th parameter: the param groups in order, and the "
                         "parameters of each group in order, as optimizer.param_groups lists them"))
            t.expect(a.dtype == p.dtype, what=f"averages[{i}]", expected=f"a {p.dtype} tensor",
                     got=f"a {a.dtype} tensor", nudge=(
                         "copy each parameter as it is: p.detach().clone() keeps its dtype (a new tensor of "
                         "your own is float32)"))
            kit.expect_detached(t, a, what=f"averages[{i}]")
    except BaseException:
        remove_all(handle)
        raise
    return averages, handle


def _expect_averages(t: Tester, averages: list, want: list[torch.Tensor], steps: int,
                     wrong: dict[str, list[torch.Tensor]] | None = None) -> None:
    for i, (a, w) in enumerate(zip(averages, want)):
        kit.expect_detached(t, a, what=f"averages[{i}] after {steps} steps")
        # the reference loop computes the same formula another way round; 1e-6 admits that
        # rounding, far below what the mistakes give (one step behind, decay's weights swapped, a
        # start at zero: 1e-3 and more here). Float64 parameters are compared at float64's
        # tolerance: the two ways round agree to 1e-15 relative (measured: 4e-16), while an update
        # computed in float32 is off by 1e-7 relative and more
        atol, rtol = (1e-12, 1e-12) if w.dtype == torch.float64 else (1e-6, 1e-5)
        if (w.dtype == torch.float64 and isinstance(a, torch.Tensor) and a.shape == w.shape
                and not torch.allclose(a.double(), w, atol=atol, rtol=rtol)
                and torch.allclose(a.double(), w, atol=1e-6, rtol=1e-5)):
            t.expect(False, what=f"averages[{i}] after {steps} steps", expected=w, got=a, nudge=(
                "the parameters are float64 here and your average is off in the eighth digit: the arithmetic "
                "lost float64 precision. Compute at the parameters' precision (no .float() of your own): "
                "avg.mul_(decay).add_(p, alpha=1 - decay)"))
        t.expect_close(a, w, what=f"averages[{i}] after {steps} steps", atol=atol, rtol=rtol,
                       wrong={v: (wrong[v][i], _MISTAKES[v]) for v in (wrong or {})},
                       nudge="after each of the first warmup steps: average = parameter; after each later "
                             "step: average = decay * average + (1 - decay) * parameter; in a step post-hook")


def _ema_case(answer: Callable, t: Tester, build: Callable[[int], nn.Module], make_opt: Callable,
              decay: float, warmup: int, steps: int, seed: int, what: str, *, then_remove: bool = False) -> None:
    """Attach, train ``steps`` steps, compare with the hand loop; remove the handle; the optimizer
    and the model must be as found. ``then_remove``: after the removal, a step must leave the
    averages alone."""
    want = _expected(build, make_opt, decay, warmup, steps, seed)
    wrong = {v: _expected(build, make_opt, decay, warmup, steps, seed, v) for v in _MISTAKES}
    model = t.track(build(seed), "the model")
    opt = make_opt(model)
    with kit.LeftAsFound(t, model, optimizer=opt):
        averages, handle = _attach(answer, t, opt, decay, warmup, what)
        try:
            train(model, opt, steps, seed)
            _expect_averages(t, averages, want, steps, wrong)
        finally:
            remove_all(handle)
        if then_remove:
            kept = [a.clone() for a in averages]
            with torch.no_grad():
                for p in params(opt):
                    p.add_(1.0)
            opt.zero_grad()
            opt.step()  # no gradients: nothing moves, but a hook would still fire
            t.expect(all(torch.equal(a, b) for a, b in zip(averages, kept)),
                     what="the averages after handle.remove()", expected="unchanged", got="changed", nudge=(
                         "the averages must change only through the hook you registered, so that removing its "
                         "handle stops them; keep them in tensors the hook updates, not in code that runs "
                         "otherwise"))


def _sgd(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.1)


def _adam(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.Adam(model.parameters(), lr=0.01)


@exercise.case("an MLP trained 5 steps with SGD, decay 0.5, a warm-up of 2 steps")
def _(answer, t: Tester) -> None:
    _ema_case(answer, t, mlp, _sgd, 0.5, 2, 5, seed=1, what="attach_ema(sgd, 0.5, 2)")


@exercise.case("halfway through a warm-up of 3 steps: after step 1, the copies are the weights")
def _(answer, t: Tester) -> None:
    model = t.track(mlp(4), "the model")
    opt = _sgd(model)
    with kit.LeftAsFound(t, model, optimizer=opt):
        averages, handle = _attach(answer, t, opt, 0.5, 3, "attach_ema(sgd, 0.5, 3)")
        try:
            train(model, opt, 1, 4)
            now = [p.detach().clone() for p in params(opt)]
        finally:
            remove_all(handle)
    t.expect(all(torch.equal(a, p) for a, p in zip(averages, now)),
             what="the averages after step 1 of a 3-step warm-up", expected="the weights after step 1",
             got="something else", nudge=(
                 "during the warm-up the copies follow the weights after EVERY step, not only once it ends: "
                 "after each of the first warmup steps, avg.copy_(p)"))


@exercise.case("a nested model in float64 trained 3 steps with Adam, decay 0.9, no warm-up; then the handle "
               "is removed")
def _(answer, t: Tester) -> None:
    _ema_case(answer, t, in_float64(nested), _adam, 0.9, 0, 3, seed=2, what="attach_ema(adam, 0.9, 0)",
              then_remove=True)


@exercise.case("two averages on one optimizer (decay 0.5 after 1 warm-up step, 0.9 after 2), one removed "
               "before the last step")
def _(answer, t: Tester) -> None:
    steps, seed = 4, 4
    fast, slow = _expected(mlp, _sgd, 0.5, 1, steps, seed), _expected(mlp, _sgd, 0.9, 2, steps - 1, seed)
    model = t.track(mlp(seed), "the model")
    opt = _sgd(model)
    with kit.LeftAsFound(t, model, optimizer=opt):
        first, first_handle = _attach(answer, t, opt, 0.5, 1, "attach_ema(sgd, 0.5, 1)")
        try:
            second, second_handle = _attach(answer, t, opt, 0.9, 2, "attach_ema(sgd, 0.9, 2), the second call")
            try:
                train(model, opt, steps - 1, seed)
                remove_all(second_handle)
                opt.zero_grad()
                loss(model, steps - 1, seed).backward()
                opt.step()
                _expect_averages(t, first, fast, steps)
                t.expect(all(isinstance(a, torch.Tensor) and torch.allclose(a, w, atol=1e-6, rtol=1e-5)
                             for a, w in zip(second, slow)),
                         what="the second average, its handle removed before the last step",
                         expected=f"its decay (0.9) and warm-up (2), updated {steps - 1} times",
                         got="something else", nudge=(
                             "each call keeps its own averages, decay, warm-up and step count, in its own hook; "
                             "removing one handle stops that average only"))
            finally:
                remove_all(second_handle)
        finally:
            remove_all(first_handle)


def _two_groups_one_frozen(model: nn.Module) -> torch.optim.Optimizer:
    """SGD with momentum, fc1 in a group of its own (another learning rate), fc2 frozen."""
    kit.freeze(model, "fc2")
    first = [p for n, p in model.named_parameters() if n.startswith("fc1")]
    rest = [p for n, p in model.named_parameters() if not n.startswith("fc1")]
    return torch.optim.SGD([{"params": first, "lr": 0.05}, {"params": rest}], lr=0.1, momentum=0.9)


@exercise.case("an optimizer with two param groups and a frozen layer", hidden=True)
def _(answer, t: Tester) -> None:
    _ema_case(answer, t, mlp, _two_groups_one_frozen, 0.8, 1, 3, seed=3, what="attach_ema(two groups, 0.8, 1)")


# -- the wrong answers peculiar to this exercise -------------------------------------------------

_SHARED_COUNT = [0]


def _ema(*, hook="post", swapped=False, start="copy", groups="all", no_grad=True, warm="right", in_float32=False):
    """One factory for the near-copy wrong answers: the hook kind ("post", "pre"), decay's
    weights swapped, how the averages start ("copy", "zeros", "itself": ``p.data``, "graph":
    ``p.clone()``), which parameters ("all", "first": the first param group, "reversed": the
    groups last first, "training": those that require grad), and whether the update runs under
    ``torch.no_grad()``; the warm-up ("right", "late": ``<`` one step more, "early": ``<``,
    "frozen": the copies left alone, "shared": a step count kept outside the call), and whether the
    update computes in float32 (``avg.float()``, ``p.float()``) into averages of the parameters' dtype."""
    def answer(optimizer, decay, warmup):
        ps = {"all": lambda: params(optimizer),
              "first": lambda: list(optimizer.param_groups[0]["params"]),
              "reversed": lambda: [p for g in reversed(optimizer.param_groups) for p in g["params"]],
              "training": lambda: [p for p in params(optimizer) if p.requires_grad]}[groups]()
        averages = [torch.zeros_like(p) if start == "zeros" else p.data if start == "itself"
                    else p.clone() if start == "graph" else p.detach().clone() for p in ps]
        keep, new = (1 - decay, decay) if swapped else (decay, 1 - decay)
        count = _SHARED_COUNT if warm == "shared" else [0]
        if warm == "shared":
            count[0] = 0   # reset at every call, as a notebook's global would be re-run

        def update(opt, args, kwargs):
            count[0] += 1
            warming = {"late": count[0] <= warmup + 1, "early": count[0] < warmup}.get(warm, count[0] <= warmup)
            with torch.no_grad() if no_grad else torch.enable_grad():
                for avg, p in zip(averages, ps):
                    if warming and warm != "frozen":
                        avg.copy_(p)
                    elif not warming and in_float32:
                        avg.copy_(keep * avg.float() + new * p.float())
                    elif not warming:
                        avg.mul_(keep).add_(p, alpha=new)

        register = optimizer.register_step_post_hook if hook == "post" else optimizer.register_step_pre_hook
        return averages, register(update)
    return answer


exercise.wrong("updates the average in a step pre-hook", mentions="one step behind")(_ema(hook="pre"))
exercise.wrong("a warm-up one step too long", mentions="one step too long")(_ema(warm="late"))
exercise.wrong("a warm-up one step too short (< for <=)", mentions="one step early")(_ema(warm="early"))
exercise.wrong("leaves the copies alone during the warm-up", mentions="follow the weights")(_ema(warm="frozen"))
exercise.wrong("counts the steps outside the call (two averages share the count)",
               mentions="step count")(_ema(warm="shared"))
exercise.wrong("swaps the weights: decay * parameter + (1 - decay) * average",
               mentions="decay * average")(_ema(swapped=True))
exercise.wrong("starts the averages at zero", mentions="not from zeros")(_ema(start="zeros"))
exercise.wrong("keeps the parameters themselves instead of copies",
               mentions="the parameter itself changes")(_ema(start="itself"))
exercise.wrong("copies with p.clone(), without detach()", mentions="holds the autograd graph")(_ema(start="graph"))
exercise.wrong("updates the averages outside torch.no_grad()",
               mentions="holds the autograd graph")(_ema(no_grad=False))
exercise.wrong("keeps float64 averages but computes the update in float32 (avg.float(), p.float())",
               mentions="lost float64 precision")(_ema(in_float32=True))
exercise.wrong("averages the first param group only", mentions="every param group",
               hidden=True)(_ema(groups="first"))
exercise.wrong("averages only the parameters that require grad", mentions="also the parameters that do not train",
               hidden=True)(_ema(groups="training"))
exercise.wrong("takes the param groups last first", mentions="the param groups in order",
               hidden=True)(_ema(groups="reversed"))


@exercise.wrong("wraps optimizer.step instead of registering a hook", mentions="register_step_post_hook")
def _wraps_step(optimizer, decay, warmup):
    ps = params(optimizer)
    averages = [p.detach().clone() for p in ps]
    step = optimizer.step

    def stepped(*args, **kwargs):
        out = step(*args, **kwargs)
        stepped.count += 1
        with torch.no_grad():
            for avg, p in zip(averages, ps):
                if stepped.count <= warmup:
                    avg.copy_(p)
                else:
                    avg.mul_(decay).add_(p, alpha=1 - decay)
        return out

    stepped.count = 0

    optimizer.step = stepped

    class Handle:
        def remove(self):
            optimizer.step = step

    return averages, Handle()


@exercise.wrong("registers the hook but returns a handle that removes nothing", mentions="remove the hooks")
def _handle_of_nothing(optimizer, decay, warmup):
    averages, handle = _ema()(optimizer, decay, warmup)

    class Handle:
        def remove(self):
            pass

    return averages, Handle()


@exercise.wrong("copies the weights only when the warm-up ends", mentions="after EVERY step")
def _copies_at_the_end_only(optimizer, decay, warmup):
    averages = [p.detach().clone() for group in optimizer.param_groups for p in group["params"]]
    count = [0]

    def after_step(opt, args, kwargs):
        count[0] += 1
        with torch.no_grad():
            for avg, p in zip(averages, (p for g in opt.param_groups for p in g["params"])):
                if count[0] == warmup:
                    avg.copy_(p)
                elif count[0] > warmup:
                    avg.mul_(decay).add_(p, alpha=1 - decay)

    return averages, optimizer.register_step_post_hook(after_step)
