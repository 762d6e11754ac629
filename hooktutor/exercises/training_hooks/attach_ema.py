"""08_training_hooks, exercise 1: an exponential moving average of the weights, kept by an
optimizer step post-hook.

Half-right answers an examiner expects, by kit dimension (``kit.DIMENSIONS``):

- technique: a step *pre*-hook (the average is one step behind); wrapping ``optimizer.step``
  instead of registering a hook (no hook on the optimizer);
- arithmetic: decay's weights swapped (``decay`` weighs the old average); averages started at
  zero instead of at a copy of the weights;
- alias / inplace_after: the parameters themselves (or ``p.data``) as the averages: the step
  changes them in place, so the "average" is the live weight;
- detached: ``p.clone()`` without ``detach()``, or the update without ``torch.no_grad()``: the
  averages hold an autograd graph that grows with every step;
- dtype: float32 copies of float64 parameters (``torch.zeros(p.shape)``, ``.float()``);
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
    equivalent_mutants={},
    guide="""updating in a step *pre*-hook (the average is one step behind); swapping the weights
    (`decay` belongs to the old average); starting the averages at zero; keeping the parameters
    themselves instead of copies (the step changes them in place); `p.clone()` without `detach()`,
    or the update outside `torch.no_grad()` (the averages hold a graph that grows every step);
    float32 copies of float64 weights; wrapping `optimizer.step` instead of registering a hook, or
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
}


def _expected(build: Callable[[int], nn.Module], make_opt: Callable, decay: float, steps: int,
              seed: int, variant: str = "right") -> list[torch.Tensor]:
    """The averages of a hand-written loop, without any hook, on a fresh copy of the model,
    computed as avg + (1 - decay) * (p - avg); a ``variant`` gives what a typical mistake gives:
    ``pre`` (updated before each step), ``swapped`` (decay and 1 - decay swapped), ``zeros``
    (started at zero)."""
    model = build(seed)
    opt = make_opt(model)
    averages = [torch.zeros_like(p) if variant == "zeros" else p.detach().clone() for p in params(opt)]
    gain = decay if variant == "swapped" else 1 - decay

    def update() -> None:
        with torch.no_grad():
            for i, p in enumerate(params(opt)):
                averages[i] = averages[i] + gain * (p - averages[i])

    for step in range(steps):
        opt.zero_grad()
        loss(model, step, seed).backward()
        if variant == "pre":
            update()
        opt.step()
        if variant != "pre":
            update()
    return averages


def _attach(answer: Callable, t: Tester, opt: torch.optim.Optimizer, decay: float, what: str) -> tuple[list, object]:
    """Call the answer; check the shape of what it returned and the one hook it added."""
    hooks_before = kit.hook_count(opt)
    got = answer(opt, decay)
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
        # start at zero: 1e-3 and more here)
        t.expect_close(a, w, what=f"averages[{i}] after {steps} steps", atol=1e-6, rtol=1e-5,
                       wrong={v: (wrong[v][i], _MISTAKES[v]) for v in (wrong or {})},
                       nudge="after each step: average = decay * average + (1 - decay) * parameter, "
                             "from a copy of the parameters, updated in a step post-hook")


def _ema_case(answer: Callable, t: Tester, build: Callable[[int], nn.Module], make_opt: Callable,
              decay: float, steps: int, seed: int, what: str, *, then_remove: bool = False) -> None:
    """Attach, train ``steps`` steps, compare with the hand loop; remove the handle; the optimizer
    and the model must be as found. ``then_remove``: after the removal, a step must leave the
    averages alone."""
    want = _expected(build, make_opt, decay, steps, seed)
    wrong = {v: _expected(build, make_opt, decay, steps, seed, v) for v in _MISTAKES}
    model = t.track(build(seed), "the model")
    opt = make_opt(model)
    with kit.LeftAsFound(t, model, optimizer=opt):
        averages, handle = _attach(answer, t, opt, decay, what)
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


@exercise.case("an MLP trained 4 steps with SGD, decay 0.5")
def _(answer, t: Tester) -> None:
    _ema_case(answer, t, mlp, _sgd, 0.5, 4, seed=1, what="attach_ema(sgd, 0.5)")


@exercise.case("a nested model in float64 trained 3 steps with Adam, decay 0.9; then the handle is removed")
def _(answer, t: Tester) -> None:
    _ema_case(answer, t, in_float64(nested), _adam, 0.9, 3, seed=2, what="attach_ema(adam, 0.9)", then_remove=True)


@exercise.case("two averages on one optimizer (decay 0.5 and 0.9), one removed before the last step")
def _(answer, t: Tester) -> None:
    steps, seed = 3, 4
    fast, slow = _expected(mlp, _sgd, 0.5, steps, seed), _expected(mlp, _sgd, 0.9, steps - 1, seed)
    model = t.track(mlp(seed), "the model")
    opt = _sgd(model)
    with kit.LeftAsFound(t, model, optimizer=opt):
        first, first_handle = _attach(answer, t, opt, 0.5, "attach_ema(sgd, 0.5)")
        try:
            second, second_handle = _attach(answer, t, opt, 0.9, "attach_ema(sgd, 0.9), the second call")
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
                         expected=f"its decay (0.9), updated {steps - 1} times", got="something else", nudge=(
                             "each call keeps its own averages, with its own decay, in its own hook; removing "
                             "one handle stops that average only"))
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
    _ema_case(answer, t, mlp, _two_groups_one_frozen, 0.8, 3, seed=3, what="attach_ema(two groups, 0.8)")


# -- the wrong answers peculiar to this exercise -------------------------------------------------

def _ema(*, hook="post", swapped=False, start="copy", groups="all", no_grad=True):
    """One factory for the near-copy wrong answers: the hook kind ("post", "pre"), decay's
    weights swapped, how the averages start ("copy", "zeros", "itself": ``p.data``, "graph":
    ``p.clone()``), which parameters ("all", "first": the first param group, "reversed": the
    groups last first, "training": those that require grad), and whether the update runs under
    ``torch.no_grad()``."""
    def answer(optimizer, decay):
        ps = {"all": lambda: params(optimizer),
              "first": lambda: list(optimizer.param_groups[0]["params"]),
              "reversed": lambda: [p for g in reversed(optimizer.param_groups) for p in g["params"]],
              "training": lambda: [p for p in params(optimizer) if p.requires_grad]}[groups]()
        averages = [torch.zeros_like(p) if start == "zeros" else p.data if start == "itself"
                    else p.clone() if start == "graph" else p.detach().clone() for p in ps]
        keep, new = (1 - decay, decay) if swapped else (decay, 1 - decay)

        def update(opt, args, kwargs):
            with torch.no_grad() if no_grad else torch.enable_grad():
                for avg, p in zip(averages, ps):
                    avg.mul_(keep).add_(p, alpha=new)

        register = optimizer.register_step_post_hook if hook == "post" else optimizer.register_step_pre_hook
        return averages, register(update)
    return answer


exercise.wrong("updates the average in a step pre-hook", mentions="one step behind")(_ema(hook="pre"))
exercise.wrong("swaps the weights: decay * parameter + (1 - decay) * average",
               mentions="decay * average")(_ema(swapped=True))
exercise.wrong("starts the averages at zero", mentions="not from zeros")(_ema(start="zeros"))
exercise.wrong("keeps the parameters themselves instead of copies",
               mentions="the parameter itself changes")(_ema(start="itself"))
exercise.wrong("copies with p.clone(), without detach()", mentions="holds the autograd graph")(_ema(start="graph"))
exercise.wrong("updates the averages outside torch.no_grad()",
               mentions="holds the autograd graph")(_ema(no_grad=False))
exercise.wrong("averages the first param group only", mentions="every param group",
               hidden=True)(_ema(groups="first"))
exercise.wrong("averages only the parameters that require grad", mentions="also the parameters that do not train",
               hidden=True)(_ema(groups="training"))
exercise.wrong("takes the param groups last first", mentions="the param groups in order",
               hidden=True)(_ema(groups="reversed"))


@exercise.wrong("wraps optimizer.step instead of registering a hook", mentions="register_step_post_hook")
def _wraps_step(optimizer, decay):
    ps = params(optimizer)
    averages = [p.detach().clone() for p in ps]
    step = optimizer.step

    def stepped(*args, **kwargs):
        out = step(*args, **kwargs)
        with torch.no_grad():
            for avg, p in zip(averages, ps):
                avg.mul_(decay).add_(p, alpha=1 - decay)
        return out

    optimizer.step = stepped

    class Handle:
        def remove(self):
            optimizer.step = step

    return averages, Handle()


@exercise.wrong("registers the hook but returns a handle that removes nothing", mentions="remove the hooks")
def _handle_of_nothing(optimizer, decay):
    averages, handle = _ema()(optimizer, decay)

    class Handle:
        def remove(self):
            pass

    return averages, Handle()
