"""07_capstone, exercise: the channels of a layer that never fired during a whole run, from one forward hook.

Half-right answers an examiner expects, by kit dimension (``kit.DIMENSIONS``):

- repeat (several calls in one run): keeps only the last call instead of combining them;
- nd: assumes 4-D outputs (``amax(dim=(0, 2, 3))``), or at least one dimension after the channels
  (``(output > 0).any(dim=0).flatten(1)``, the old reference's own bug): a ``Linear -> ReLU``
  gives ``(N, C)``, a ``Conv1d`` ``(N, C, L)``;
- technique: looks at the first example of each batch only; counts a channel as fired only when
  its output is above 1 or above a tolerance, not above 0 (a channel whose output is 1e-7); counts
  a nonzero (negative) output, a zero one (``>= 0``: told to test ``> 0``, not to combine calls),
  or a positive mean, as fired (the Linear itself hooked); looks at
  the layer's input in a pre-hook; replaces ``layer.forward`` instead of hooking it
  (``kit.HookWitness``); calls ``run()`` twice (once to learn the channel count);
- inplace_after: keeps ``output.detach()`` of every call and decides after ``run()``, when an
  in-place op after the layer has changed those values (hidden);
- raises: removes the hook after ``run()``, not in ``finally:`` (the run crashes);
- dtype: a float64 model;
- a wrong type: returns a tensor of channel numbers instead of a list, or
  ``torch.nonzero(~alive).tolist()``, a list of one-element lists.
"""

from __future__ import annotations

import torch
from torch import nn

from ...models import seeded
from .. import kit
from ..core import Exercise, Tester


def dead_channels(model, layer, run):
    """Channels of `layer` that were never above zero while run() ran, as a sorted list of ints."""
    ### BEGIN SOLUTION
    alive = None

    def watch(module, args, output):
        nonlocal alive
        fired = (output > 0).transpose(0, 1).flatten(1).any(dim=1)   # one bool per channel (dim 1)
        alive = fired if alive is None else alive | fired

    handle = layer.register_forward_hook(watch)
    try:
        run()
    finally:
        handle.remove()
    if alive is None:
        return []
    return [int(c) for c in torch.nonzero(~alive).flatten()]
    ### END SOLUTION


exercise = Exercise(
    "capstone.dead_channels", "Dead channels over a whole run",
    task=("write dead_channels(model, layer, run) that calls run() (a loop that uses the model "
          "several times) with one forward hook on `layer` attached for the whole run, and "
          "returns the sorted list of channels whose output was never above zero: not for any "
          "example, any position or any call. The channels are dimension 1 of the layer's output: "
          "(N, C) after a Linear, (N, C, L) after a Conv1d, (N, C, H, W) after a Conv2d. Remove the "
          "hook even if run() raises"),
    hints=[
        "Keep one boolean per channel, `alive`, outside the hook; in the hook compute which "
        "channels fired in this call: (output > 0).transpose(0, 1) puts the channels first, "
        "(C, N, ...); flatten(1) then .any(dim=1) gives one bool per channel, whatever the number "
        "of dimensions.",
        "Combine calls with alive = alive | fired_now: a channel that fired in any call is alive. "
        "Overwriting it keeps only the last call.",
        "Attach with handle = layer.register_forward_hook(watch), call run() inside try:, and "
        "handle.remove() in finally:. Return [int(c) for c in torch.nonzero(~alive).flatten()].",
    ],
    solution=dead_channels,
    equivalent_mutants={
        "inplace@8: .transpose( -> .transpose_(": (
            "it transposes the bool tensor the comparison has just made, which nobody else holds"),
    },
    errors={"Dimension out of range": (
        "the layer's output may have any number of dimensions: (N, C) after a Linear, (N, C, L) for a "
        "Conv1d, (N, C, H, W) for a Conv2d. Reduce every dimension but the channel dimension 1, for "
        "example (output > 0).transpose(0, 1).flatten(1).any(dim=1)")},
    guide="""keeping only the last call (combine calls with `alive = alive | fired`); returning
    `torch.nonzero(~alive).tolist()`, a list of one-element lists; looking at the
    first example of each batch only; removing the hook after `run()` but not in a `finally:`;
    assuming a dimension after the channels (4-D outputs, or `.any(dim=0).flatten(1)`), which
    fails on the `(N, C)` output of a `Linear -> ReLU`; counting a nonzero or a positive-mean output as
    fired (wrong as soon as the hooked layer is not a ReLU); a tolerance (`> 1e-6`); calling `run()`
    twice to learn the channel count; keeping `output.detach()` and deciding
    after the run, when an in-place op after the layer has changed the values.""",
)


def _probe_model() -> nn.Sequential:
    """``Conv2d(1, 5, 1) -> ReLU``: channel c computes relu(x + bias[c]).

    Channels 1 and 4 (bias -100) never fire, channel 2 (bias -5) fires only where a pixel is
    brighter than 5; channels 0 and 3 fire on almost anything.
    """
    model = nn.Sequential(nn.Conv2d(1, 5, 1), nn.ReLU())
    with torch.no_grad():
        model[0].weight.fill_(1.0)
        model[0].bias.copy_(torch.tensor([0.5, -100.0, -5.0, 0.5, -100.0]))
    return model


def _dim_batches(n: int, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.rand(4, 1, 3, 3, generator=g) * 2 - 1 for _ in range(n)]


def _as_channel_list(got):
    try:
        return sorted(int(c) for c in got)
    except TypeError:
        return got


_NEVER_POSITIVE = ("a channel is dead when its output is never above zero: a ReLU's zeros are not firing, "
                   "so test output > 0 (not >= 0) and keep the channels that were never True")


def _nudge_for(got_list, expected: list[int], extra: list[int], nudge: str) -> str:
    """``nudge`` where the answer named the ``extra`` channels dead too (the mistake it is about);
    otherwise what a missed dead channel says: its test counts zeros as firing."""
    if isinstance(got_list, list) and not set(expected) <= set(got_list):
        return _NEVER_POSITIVE
    return nudge if not isinstance(got_list, list) or set(extra) & set(got_list) else _NEVER_POSITIVE


def _expect_dead(t: Tester, got, expected: list[int], what: str, nudge: str, extra: list[int] = ()) -> None:
    t.expect_type(got, list, what=what,
                  nudge="return a list of ints: [int(c) for c in torch.nonzero(~alive).flatten()]")
    nested = [c for c in got if isinstance(c, (list, tuple)) or (isinstance(c, torch.Tensor) and c.dim() > 0)]
    t.expect(not nested, what=what, expected=expected, got=got, nudge=(
        "return a flat list of ints, one per dead channel: torch.nonzero(~alive) has shape (k, 1), so its "
        ".tolist() is a list of one-element lists; flatten it first, [int(c) for c in "
        "torch.nonzero(~alive).flatten()]"))
    got_list = _as_channel_list(got)
    t.expect(got_list == expected, what=what, expected=expected, got=got,
             nudge=_nudge_for(got_list, expected, list(extra), nudge) if extra else nudge)


@exercise.case("a channel that fires only during the second of three calls")
def _(answer, t: Tester) -> None:
    model = t.track(_probe_model(), "the probe model")
    xs = _dim_batches(3, seed=3)
    xs[1][0, 0, 1, 1] = 9.0  # wakes channel 2 up, once
    runs = []

    def run():
        runs.append(1)
        return [model(x) for x in xs]

    got = answer(model, model[1], run)
    t.expect(len(runs) == 1, what="how often dead_channels called run()", expected=1, got=len(runs), nudge=(
        "call run() once: it may be a whole training run. Keep `alive` as None until the hook first fires, "
        "then the channel count comes from the first output"))
    _expect_dead(t, got, [1, 4], "dead_channels(...) over three calls", (
        "channel 2 fired during the second call only, so it is alive: combine every call "
        "(alive = alive | fired), do not keep only the last one"), extra=[2])


@exercise.case("a channel that fires for the third example of a batch only")
def _(answer, t: Tester) -> None:
    model = t.track(_probe_model(), "the probe model")
    xs = _dim_batches(1, seed=4)
    xs[0][2, 0, 0, 2] = 9.0  # example 2 only
    got = answer(model, model[1], lambda: [model(x) for x in xs])
    _expect_dead(t, got, [1, 4], "dead_channels(...) over one call", (
        "channel 2 fired for one example of the batch, so it is alive: look at every example "
        "(reduce dim 0 with .any) and every position"), extra=[2])


@exercise.case("a ReLU inside a deeper model, hooked while a real training loop runs")
def _(answer, t: Tester) -> None:
    with seeded(5):
        model = nn.Sequential(nn.Conv2d(1, 6, 3, padding=1), nn.ReLU(), nn.Conv2d(6, 4, 3, padding=1),
                              nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2))
        with torch.no_grad():
            model[0].bias[[1, 5]] = -50.0  # two channels that can never fire
        xs = [torch.randn(4, 1, 6, 6) for _ in range(3)]
    t.track(model, "the small CNN")

    def train() -> None:
        for x in xs:
            loss = model(x).pow(2).mean()
            model.zero_grad()
            loss.backward()
            with torch.no_grad():
                for p in model.parameters():
                    p -= 0.01 * p.grad

    with kit.HookWitness({"relu": model[1]}) as witness:
        got = answer(model, model[1], train)
    t.expect(witness.calls["relu"] > 0 and witness.fired("relu", "forward") == witness.calls["relu"],
             what="forward hooks on model[1] while run() ran", expected=f"{witness.calls['relu']} calls with one",
             got=f"{witness.fired('relu', 'forward')} calls with one", nudge=(
                 "attach one forward hook to the layer (layer.register_forward_hook) for the whole run, instead "
                 "of replacing its forward or looking elsewhere"))
    _expect_dead(t, got, [1, 5], "dead_channels(model, model[1], train)",
                 "channels 1 and 5 have a bias of -50 and can never fire; every other one did")


def _linear_probe() -> nn.Sequential:
    """``Linear(1, 6) -> ReLU``, output ``(N, 6)``: channels 1 and 4 (bias -100) never fire, channel 2
    (bias -5) only for an input above 5, channel 5 (weight 0, bias 1e-7) always, but only just."""
    model = nn.Sequential(nn.Linear(1, 6), nn.ReLU())
    with torch.no_grad():
        model[0].weight.copy_(torch.tensor([[1.0], [1.0], [1.0], [1.0], [1.0], [0.0]]))
        model[0].bias.copy_(torch.tensor([0.5, -100.0, -5.0, 0.5, -100.0, 1e-7], dtype=torch.float64))
    return model


@exercise.case("a Linear -> ReLU in float64: outputs (N, C), a channel that fires weakly, one only once")
def _(answer, t: Tester) -> None:
    g = torch.Generator().manual_seed(9)
    model, *xs = kit.in_dtype(_linear_probe(), *(torch.rand(4, 1, generator=g) * 2 - 1 for _ in range(3)))
    t.track(model, "the Linear -> ReLU model")
    xs[2][1, 0] = 9.0  # wakes channel 2 up, once
    got = answer(model, model[1], lambda: [model(x) for x in xs])
    _expect_dead(t, got, [1, 4], "dead_channels(model, model[1], run)", (
        "channel 5 gives 1e-7 for every input (above zero, however little, so it fired) and channel 2 fired "
        "once; only 1 and 4 never did. After a Linear the output is (N, C): reduce every dimension but "
        "dimension 1"))


@exercise.case("the Linear itself hooked: its outputs below zero are not above zero")
def _(answer, t: Tester) -> None:
    g = torch.Generator().manual_seed(10)
    model, *xs = kit.in_dtype(_linear_probe(), *(torch.rand(4, 1, generator=g) * 2 - 1 for _ in range(2)))
    t.track(model, "the Linear -> ReLU model")
    xs[0][3, 0] = 9.0  # channel 2 is above zero once, below it everywhere else
    got = answer(model, model[0], lambda: [model(x) for x in xs])
    _expect_dead(t, got, [1, 4], "dead_channels(model, model[0], run)", (
        "hooked on the Linear, channels 1 and 4 are always negative, which is never above zero; channel 2 "
        "was above zero once (so it fired, whatever its mean). Look at the layer's output (a forward "
        "hook), and test output > 0"))


class _Crash(RuntimeError):
    pass


@exercise.case("a run that crashes after two calls: the hook must still be removed")
def _(answer, t: Tester) -> None:
    model = t.track(_probe_model(), "the probe model")
    xs = _dim_batches(2, seed=6)

    def crashing_run() -> None:
        for x in xs:
            model(x)
        raise _Crash("the training loop crashed (on purpose, in this check)")

    try:
        answer(model, model[1], crashing_run)
    except _Crash:
        pass  # letting the crash through is fine; leaving the hook behind is not


@exercise.case("a Conv1d layer on 3-D tensors (N, C, L)")
def _(answer, t: Tester) -> None:
    model = kit.conv_model(3, seed=7)
    with torch.no_grad():
        model[0].bias[[0, 3]] = -50.0  # two channels that can never fire
    t.track(model, "the 1-D conv model")
    xs = [kit.conv_input(3, seed=s) for s in (7, 8)]
    got = answer(model, model[1], lambda: [model(x) for x in xs])
    _expect_dead(t, got, [0, 3], "dead_channels(model, model[1], run)",
                 "channels 0 and 3 have a bias of -50 and never fire; the others did: reduce every "
                 "dimension but dimension 1, whatever the number of dimensions")


@exercise.case("the hooked ReLU is followed by an in-place op that changes its output", hidden=True)
def _(answer, t: Tester) -> None:
    model = _probe_model()
    model.append(nn.Threshold(5.0, 0.0, inplace=True))  # values up to 5 become 0, in place, after the hook
    t.track(model, "the probe model with an in-place Threshold")
    xs = _dim_batches(2, seed=8)
    got = answer(model, model[1], lambda: [model(x) for x in xs])
    _expect_dead(t, got, [1, 2, 4], "dead_channels(...) with an in-place op after the layer", (
        "channels 0 and 3 fired (their outputs were above zero when the layer produced them), but an "
        "in-place op after the layer set those values to 0 later: decide in the hook, when the output is "
        "fresh, or keep output.detach().clone(); a bare detach() shares memory with the output"))


# -- the wrong answers peculiar to this exercise -------------------------------------------------

def _reduce(output, how):
    """One bool per channel: "channels" (dimension 1, any number of dimensions), "4d"
    (amax over 0, 2, 3), "old" (.any(dim=0).flatten(1): needs a dimension after the channels),
    "nonzero" (!= 0), "mean" (the mean above 0),
    "first" (the first example only), "above1" (> 1 instead of > 0), "atleast0" (>= 0)."""
    if how == "4d":
        return output.amax(dim=(0, 2, 3)) > 0
    if how == "old":
        return (output > 0).any(dim=0).flatten(1).any(dim=1)
    if how == "nonzero":
        return (output != 0).transpose(0, 1).flatten(1).any(dim=1)
    if how == "mean":
        return output.transpose(0, 1).flatten(1).mean(dim=1) > 0
    if how == "first":
        return (output[:1] > 0).transpose(0, 1).flatten(1).any(dim=1)
    if how == "atleast0":
        return (output >= 0).transpose(0, 1).flatten(1).any(dim=1)
    return (output > (1 if how == "above1" else 0)).transpose(0, 1).flatten(1).any(dim=1)


def _dead(*, how="channels", combine="or", decide="hook", remove="finally", result="list"):
    """One factory for the near-copy wrong answers: how a call's output is reduced (``_reduce``),
    how calls are combined ("or", "last"), when the outputs are judged ("hook": as they come;
    "later": output.detach() kept, judged after run()), how the hook is removed ("finally",
    "after") and what is returned ("list", "tensor", "nested": ``torch.nonzero(~alive).tolist()``)."""
    def answer(model, layer, run):
        state = {"alive": None, "kept": []}

        def watch(module, args, output):
            if decide == "later":
                state["kept"].append(output.detach())
                return
            fired = _reduce(output, how)
            alive = state["alive"]
            state["alive"] = fired if alive is None or combine == "last" else alive | fired

        handle = layer.register_forward_hook(watch)
        if remove == "finally":
            try:
                run()
            finally:
                handle.remove()
        else:
            run()
            handle.remove()
        if decide == "later":
            state["alive"] = torch.stack([_reduce(o, how) for o in state["kept"]]).any(dim=0)
        if result == "nested":
            return torch.nonzero(~state["alive"]).tolist()
        dead = [int(c) for c in torch.nonzero(~state["alive"]).flatten()]
        return dead if result == "list" else torch.tensor(dead, dtype=torch.long)
    return answer


exercise.wrong("keeps only the last call", mentions="every call")(_dead(combine="last"))
exercise.wrong("looks at the first example of each batch only", mentions="every example")(_dead(how="first"))
exercise.wrong("removes the hook after run() but not in a finally", mentions="still attached")(
    _dead(remove="after"))
exercise.wrong("returns the tensor of channel numbers, not a list", mentions="should be a list")(
    _dead(result="tensor"))
exercise.wrong("returns torch.nonzero(~alive).tolist(): a list of one-element lists", mentions="flat list of ints")(
    _dead(result="nested"))
exercise.wrong("assumes 4-D outputs: amax(dim=(0, 2, 3))", mentions="any number of dimensions")(_dead(how="4d"))
exercise.wrong("reduces with .any(dim=0).flatten(1): needs a dimension after the channels",
               mentions="(N, C) after a Linear")(_dead(how="old"))
exercise.wrong("counts a channel as fired only above 1", mentions="channel 5 gives 1e-7")(_dead(how="above1"))
exercise.wrong("counts a channel as fired when its output is nonzero", mentions="never above zero")(
    _dead(how="nonzero"))
exercise.wrong("counts a channel as fired when its output is >= 0 (a ReLU's zeros fire)",
               mentions="not >= 0")(_dead(how="atleast0"))
exercise.wrong("counts a channel as fired when its mean output is above zero", mentions="whatever its mean")(
    _dead(how="mean"))
exercise.wrong("keeps output.detach() of every call and decides after run()", mentions="in-place op after",
               hidden=True)(_dead(decide="later"))
