"""07_capstone, exercise: capstone.dead_channels."""

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
        per_channel = (output.detach() > 0).transpose(0, 1).flatten(1)   # (C, everything else)
        fired = per_channel.any(dim=1)                                    # one bool per channel
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
          "example, any position or any call. Remove the hook even if run() raises"),
    hints=[
        "Keep one boolean per channel, `alive`, outside the hook; in the hook compute which "
        "channels fired in this call: put the channels first, (output > 0).transpose(0, 1), and "
        "reduce everything else (batch, positions) with .flatten(1).any(dim=1).",
        "Combine calls with alive = alive | fired_now: a channel that fired in any call is alive. "
        "Overwriting it keeps only the last call.",
        "Attach with handle = layer.register_forward_hook(watch), call run() inside try:, and "
        "handle.remove() in finally:. Return [int(c) for c in torch.nonzero(~alive).flatten()].",
    ],
    solution=dead_channels,
    equivalent_mutants={
        "inplace@8: .transpose( -> .transpose_(": (
            "it transposes the fresh bool tensor (output > 0) in place, which nothing else "
            "holds"
        ),
        "copy@8: .detach() -> <dropped>": "(output > 0) is a bool tensor, which never holds autograd history",
    },
    errors={"Dimension out of range": (
        "the layer's output may have any number of dimensions: (N, C) after a Linear, (N, C, L) for a "
        "Conv1d, (N, C, H, W) for a Conv2d. Reduce every dimension but the channel dimension 1, for "
        "example (output > 0).transpose(0, 1).flatten(1).any(dim=1)")},
    guide="""keeping only the last call (combine calls with `alive = alive | fired`); looking at the
    first example of each batch only; removing the hook after `run()` but not in a
    `finally:`.""",
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


def _expect_dead(t: Tester, got, expected: list[int], what: str, nudge: str) -> None:
    t.expect_type(got, list, what=what,
                  nudge="return a list of ints: [int(c) for c in torch.nonzero(~alive).flatten()]")
    got_list = _as_channel_list(got)
    t.expect(got_list == expected, what=what, expected=expected, got=got, nudge=nudge)


@exercise.case("a channel that fires only during the second of three calls")
def _(answer, t: Tester) -> None:
    model = t.track(_probe_model(), "the probe model")
    xs = _dim_batches(3, seed=3)
    xs[1][0, 0, 1, 1] = 9.0  # wakes channel 2 up, once
    got = answer(model, model[1], lambda: [model(x) for x in xs])
    _expect_dead(t, got, [1, 4], "dead_channels(...) over three calls", (
        "channel 2 fired during the second call only, so it is alive: combine every call "
        "(alive = alive | fired), do not keep only the last one"))


@exercise.case("a channel that fires for the third example of a batch only")
def _(answer, t: Tester) -> None:
    model = t.track(_probe_model(), "the probe model")
    xs = _dim_batches(1, seed=4)
    xs[0][2, 0, 0, 2] = 9.0  # example 2 only
    got = answer(model, model[1], lambda: [model(x) for x in xs])
    _expect_dead(t, got, [1, 4], "dead_channels(...) over one call", (
        "channel 2 fired for one example of the batch, so it is alive: look at every example "
        "(reduce dim 0 with .any) and every position"))


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

    got = answer(model, model[1], train)
    _expect_dead(t, got, [1, 5], "dead_channels(model, model[1], train)",
                 "channels 1 and 5 have a bias of -50 and can never fire; every other one did")


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


@exercise.wrong("keeps only the last call", mentions="every call")
def _dead_last_call(model, layer, run):
    seen = {}

    def watch(module, args, output):
        seen["alive"] = (output > 0).transpose(0, 1).flatten(1).any(dim=1)

    with layer.register_forward_hook(watch):
        run()
    return [int(c) for c in torch.nonzero(~seen["alive"]).flatten()]


@exercise.wrong("looks at the first example of each batch only", mentions="every example")
def _dead_first_example(model, layer, run):
    alive = None

    def watch(module, args, output):
        nonlocal alive
        fired = (output[0] > 0).flatten(1).any(dim=1)
        alive = fired if alive is None else alive | fired

    with layer.register_forward_hook(watch):
        run()
    return [int(c) for c in torch.nonzero(~alive).flatten()]


@exercise.wrong("removes the hook after run() but not in a finally", mentions="still attached")
def _dead_no_finally(model, layer, run):
    alive = None

    def watch(module, args, output):
        nonlocal alive
        fired = (output > 0).transpose(0, 1).flatten(1).any(dim=1)
        alive = fired if alive is None else alive | fired

    handle = layer.register_forward_hook(watch)
    run()
    handle.remove()
    return [int(c) for c in torch.nonzero(~alive).flatten()]


@exercise.wrong("returns the tensor of channel numbers, not a list", mentions="should be a list")
def _dead_tensor(model, layer, run):
    return torch.tensor(dead_channels(model, layer, run), dtype=torch.long)


@exercise.wrong("assumes 4-D outputs: amax(dim=(0, 2, 3))", mentions="any number of dimensions")
def _dead_4d_only(model, layer, run):
    alive = None

    def watch(module, args, output):
        nonlocal alive
        fired = output.detach().amax(dim=(0, 2, 3)) > 0
        alive = fired if alive is None else alive | fired

    handle = layer.register_forward_hook(watch)
    try:
        run()
    finally:
        handle.remove()
    return [int(c) for c in torch.nonzero(~alive).flatten()]


@exercise.wrong("keeps output.detach() of every call and decides after run()", mentions="in-place op after",
                     hidden=True)
def _dead_decides_later(model, layer, run):
    outputs = []
    handle = layer.register_forward_hook(lambda m, a, o: outputs.append(o.detach()))
    try:
        run()
    finally:
        handle.remove()
    alive = torch.stack([(o > 0).transpose(0, 1).flatten(1).any(dim=1) for o in outputs]).any(dim=0)
    return [int(c) for c in torch.nonzero(~alive).flatten()]


@exercise.case("a Linear followed by a ReLU: outputs of shape (N, C), two units that never fire")
def _(answer, t: Tester) -> None:
    with seeded(13):
        model = nn.Sequential(nn.Linear(4, 5), nn.ReLU())
    with torch.no_grad():
        model[0].bias[[1, 4]] = -50.0   # units 1 and 4 can never fire
    t.track(model, "a Linear -> ReLU model")
    xs = [kit.randn(3, 4, seed=s) for s in (13, 14)]
    got = answer(model, model[1], lambda: [model(x) for x in xs])
    _expect_dead(t, got, [1, 4], "dead_channels(model, model[1], run)",
                 "a Linear's output is (N, C): the channels are dimension 1 there too; reduce every "
                 "dimension but dimension 1, whatever the number of dimensions")


@exercise.case("a batch of 2 examples and 4 channels: the batch is not the channel dimension", hidden=True)
def _(answer, t: Tester) -> None:
    with seeded(15):
        model = nn.Sequential(nn.Linear(3, 4), nn.ReLU())
    with torch.no_grad():
        model[0].weight.zero_()
        model[0].bias.copy_(torch.tensor([1.0, -1.0, -1.0, 1.0]))   # channels 1 and 2 never fire
    t.track(model, "a Linear -> ReLU model")
    got = answer(model, model[1], lambda: model(torch.ones(2, 3)))
    _expect_dead(t, got, [1, 2], "dead_channels(model, model[1], run)",
                 "look at dimension 1 (the channels), over every example of the batch (dimension 0)")
