"""Exercises of ``07_capstone.ipynb``: Grad-CAM, dead channels over a run, a NaN hunter.

Each exercise turns one part of the capstone into a reusable tool:

* :data:`grad_cam` — Grad-CAM for any layer and any target classes, from hooks;
* :data:`dead_channels` — channels of a layer that never fired during a whole run,
  with a hook that stays attached for the run and is removed even when the run crashes;
* :data:`first_nonfinite` — the first module whose output holds NaN or inf, stopping the
  forward pass right there.

The hidden cases use tiny seeded models so every check finishes in a few milliseconds.
"""

from __future__ import annotations

import copy
from collections import OrderedDict

import torch
import torch.nn.functional as F
from torch import nn

from ..models import seeded, set_inplace
from . import kit
from .core import Exercise, Tester
from .predict import Prediction

# --------------------------------------------------------------------------------------
# 1. Grad-CAM for any layer and any target classes
# --------------------------------------------------------------------------------------


def _grad_cam_solution(model, layer, x, target):
    saved = {}

    def keep(module, args, output):
        saved["act"] = output.detach().clone()  # a copy: an in-place op after the layer cannot change it
        output.register_hook(lambda grad: saved.__setitem__("grad", grad.detach()))

    handle = layer.register_forward_hook(keep)
    try:
        logits = model(x)
    finally:
        handle.remove()
    score = logits[torch.arange(len(x)), target].sum()
    score.backward()
    model.zero_grad(set_to_none=True)
    weights = saved["grad"].mean(dim=(2, 3))
    return F.relu((weights[:, :, None, None] * saved["act"]).sum(dim=1))


grad_cam = Exercise(
    "capstone.grad_cam", "Grad-CAM for any layer",
    task=("write grad_cam(model, layer, x, target) that returns the Grad-CAM of `layer` for "
          "class target[i] of each image x[i]: a tensor (N, h, w) at the layer's resolution, "
          "relu(sum over channels k of mean_hw(grad_k) * activation_k), using a forward hook "
          "that registers a tensor hook on the layer's output; leave no hook attached. The layer may "
          "be followed by an in-place op (a ReLU(inplace=True)): keep a copy of its output that the "
          "op cannot change"),
    hints=[
        "In a forward hook on `layer`, keep output.detach() and call output.register_hook(fn) "
        "so that fn receives the gradient of that same output during backward.",
        "The score to differentiate is model(x)[torch.arange(len(x)), target].sum(): each image "
        "contributes the logit of its own target class.",
        "weights = grad.mean(dim=(2, 3)) has shape (N, C); the CAM is "
        "F.relu((weights[:, :, None, None] * act).sum(dim=1)). Remove the forward hook in a "
        "finally: right after the forward pass.",
    ],
    solution=_grad_cam_solution,
)


def _tiny_cnn(seed: int, *, maxpool: bool) -> nn.Sequential:
    with seeded(seed):
        if maxpool:  # the gradient differs from position to position
            return nn.Sequential(
                nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 6, 3, padding=1), nn.ReLU(),
                nn.MaxPool2d(2), nn.Flatten(), nn.Linear(6 * 4 * 4, 3))
        return nn.Sequential(
            nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 6, 3, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(6, 3))


def _cam_parts(model: nn.Module, layer: nn.Module, x: torch.Tensor, score_of):
    """Activation of `layer` and the gradient of score_of(logits) w.r.t. it, computed on a copy
    of the model with every in-place flag off (nothing overwrites the activation there)."""
    path = next(n for n, m in model.named_modules() if m is layer)
    ref = copy.deepcopy(model)
    set_inplace(ref, False)
    acts: list[torch.Tensor] = []
    handle = ref.get_submodule(path).register_forward_hook(lambda m, a, o: acts.append(o))
    try:
        logits = ref(x)
    finally:
        handle.remove()
    (grad,) = torch.autograd.grad(score_of(logits), acts[0])
    return acts[0].detach(), grad


def _check_grad_cam(answer, t: Tester, model: nn.Sequential, layer: nn.Module, x: torch.Tensor,
                    target: torch.Tensor, what: str) -> None:
    t.track(model, "the small CNN")
    rows = torch.arange(len(x))
    act, grad = _cam_parts(model, layer, x, lambda z: z[rows, target].sum())
    weights = grad.mean(dim=(2, 3))[:, :, None, None]
    expected = F.relu((weights * act).sum(dim=1))
    _, grad_all = _cam_parts(model, layer, x, lambda z: z.sum())
    wrong = {
        "no relu": ((weights * act).sum(dim=1),
                    "the values match before the ReLU: Grad-CAM keeps only the positive evidence, "
                    "so finish with F.relu(...)"),
        "no weights": (F.relu(act.sum(dim=1)),
                       "this is the plain sum of the activation maps: weight each channel by the "
                       "mean of its gradient over height and width first"),
        "all classes": (F.relu((grad_all.mean(dim=(2, 3))[:, :, None, None] * act).sum(dim=1)),
                        "this explains the sum of all logits: differentiate only the target class "
                        "of each image, logits[torch.arange(N), target].sum()"),
    }
    wrong["scaled"] = (expected / expected.amax(dim=(1, 2), keepdim=True).clamp_min(1e-12),
                       "the map is right but scaled to [0, 1]: return it unscaled (scaling is only "
                       "for display)")
    wrong["overwritten"] = (F.relu((weights * act.clamp(min=0)).sum(dim=1)),
                            "the activation you kept was overwritten by the in-place ReLU that follows the "
                            "layer: output.detach() shares its memory; keep output.detach().clone()")
    got = answer(model, layer, x, target)
    if isinstance(got, torch.Tensor) and got.shape != expected.shape and got.dim() == 4 and got.shape[1] == 1:
        t.expect(False, what=what, expected=expected, got=got,
                 nudge=f"the shape is {tuple(got.shape)} but should be {tuple(expected.shape)}: sum over the "
                       "channels without keepdim, so the map is (N, h, w)")
    t.expect_close(got, expected, what=what, atol=1e-5, wrong=wrong,
                   nudge="compare with the three steps: mean gradient per channel, weighted sum "
                         "of the activation maps, ReLU")


@grad_cam.case("a small CNN with global average pooling, the last ReLU, one class per image")
def _(answer, t: Tester) -> None:
    model = _tiny_cnn(11, maxpool=False)
    x = torch.randn(3, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    _check_grad_cam(answer, t, model, model[3], x, torch.tensor([0, 1, 2]),
                    "grad_cam(model, model[3], x, target=[0, 1, 2])")


@grad_cam.case("a CNN with max pooling, explained at its last conv, mixed target classes")
def _(answer, t: Tester) -> None:
    model = _tiny_cnn(12, maxpool=True)
    x = torch.randn(4, 1, 8, 8, generator=torch.Generator().manual_seed(2))
    _check_grad_cam(answer, t, model, model[2], x, torch.tensor([2, 2, 0, 1]),
                    "grad_cam(model, model[2], x, target=[2, 2, 0, 1])")


class _NestedCNN(nn.Module):
    """``head(body(x))`` with ``body = Sequential(stem, block)``, each a Conv2d + ReLU: the layer
    to explain (``body.block.0``) sits two levels down in a model that is no Sequential."""

    def __init__(self, seed: int, *, inplace: bool = False) -> None:
        super().__init__()
        with seeded(seed):
            self.body = nn.Sequential(OrderedDict([
                ("stem", nn.Sequential(nn.Conv2d(1, 3, 3, padding=1), nn.ReLU())),
                ("block", nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(inplace=inplace))),
            ]))
            self.head = nn.Sequential(nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 3 * 3, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


@grad_cam.case("a nested model (not a Sequential), explained at a conv two levels down")
def _(answer, t: Tester) -> None:
    model = _NestedCNN(13)
    x = kit.randn(2, 1, 6, 6, seed=13)
    _check_grad_cam(answer, t, model, model.body.block[0], x, torch.tensor([1, 0]),
                    "grad_cam(model, model.body.block[0], x, target=[1, 0])")


@grad_cam.case("a conv followed by ReLU(inplace=True), which overwrites the conv's output", hidden=True)
def _(answer, t: Tester) -> None:
    model = _NestedCNN(14, inplace=True)
    x = kit.randn(3, 1, 6, 6, seed=14)
    _check_grad_cam(answer, t, model, model.body.block[0], x, torch.tensor([2, 0, 1]),
                    "grad_cam(model, model.body.block[0], x, target=[2, 0, 1])")


# Half-right answers (DIMENSIONS: nested, nd, inplace_after, technique): no ReLU; unweighted
# sum; all classes; leaves the forward hook on; keeps the channel dimension (N, 1, h, w);
# keeps output.detach() without clone (hidden: an in-place ReLU after the layer).

@grad_cam.wrong("forgets the ReLU", mentions="ReLU")
def _cam_no_relu(model, layer, x, target):
    saved = {}

    def keep(module, args, output):
        saved["act"] = output.detach()
        output.register_hook(lambda g: saved.__setitem__("grad", g))

    with layer.register_forward_hook(keep):
        logits = model(x)
    logits[torch.arange(len(x)), target].sum().backward()
    return (saved["grad"].mean(dim=(2, 3))[:, :, None, None] * saved["act"]).sum(dim=1)


@grad_cam.wrong("sums the activation maps without gradient weights", mentions="weight each channel")
def _cam_unweighted(model, layer, x, target):
    saved = {}
    with layer.register_forward_hook(lambda m, a, o: saved.__setitem__("act", o.detach())):
        model(x)
    return F.relu(saved["act"].sum(dim=1))


@grad_cam.wrong("explains the sum of all classes", mentions="target class")
def _cam_all_classes(model, layer, x, target):
    saved = {}

    def keep(module, args, output):
        saved["act"] = output.detach()
        output.register_hook(lambda g: saved.__setitem__("grad", g))

    with layer.register_forward_hook(keep):
        logits = model(x)
    logits.sum().backward()
    return F.relu((saved["grad"].mean(dim=(2, 3))[:, :, None, None] * saved["act"]).sum(dim=1))


@grad_cam.wrong("leaves the forward hook attached", mentions="still attached")
def _cam_leaky(model, layer, x, target):
    saved = {}

    def keep(module, args, output):
        saved["act"] = output.detach()
        output.register_hook(lambda g: saved.__setitem__("grad", g))

    layer.register_forward_hook(keep)
    logits = model(x)
    logits[torch.arange(len(x)), target].sum().backward()
    return F.relu((saved["grad"].mean(dim=(2, 3))[:, :, None, None] * saved["act"]).sum(dim=1))


@grad_cam.wrong("keeps the channel dimension: (N, 1, h, w)", mentions="without keepdim")
def _cam_keepdim(model, layer, x, target):
    return _grad_cam_solution(model, layer, x, target).unsqueeze(1)


@grad_cam.wrong("keeps output.detach() without clone", mentions="overwritten by the in-place ReLU", hidden=True)
def _cam_bare_detach(model, layer, x, target):
    saved = {}

    def keep(module, args, output):
        saved["act"] = output.detach()
        output.register_hook(lambda g: saved.__setitem__("grad", g.detach()))

    handle = layer.register_forward_hook(keep)
    try:
        logits = model(x)
    finally:
        handle.remove()
    logits[torch.arange(len(x)), target].sum().backward()
    return F.relu((saved["grad"].mean(dim=(2, 3))[:, :, None, None] * saved["act"]).sum(dim=1))


# --------------------------------------------------------------------------------------
# 2. Dead channels over a whole run
# --------------------------------------------------------------------------------------


def _dead_channels_solution(model, layer, run):
    alive = None

    def watch(module, args, output):
        nonlocal alive
        fired = (output.detach() > 0).any(dim=0).flatten(1).any(dim=1)  # one bool per channel
        alive = fired if alive is None else alive | fired

    handle = layer.register_forward_hook(watch)
    try:
        run()
    finally:
        handle.remove()
    if alive is None:
        return []
    return [int(c) for c in torch.nonzero(~alive).flatten()]


dead_channels = Exercise(
    "capstone.dead_channels", "Dead channels over a whole run",
    task=("write dead_channels(model, layer, run) that calls run() (a loop that uses the model "
          "several times) with one forward hook on `layer` attached for the whole run, and "
          "returns the sorted list of channels whose output was never above zero: not for any "
          "example, any position or any call. Remove the hook even if run() raises"),
    hints=[
        "Keep one boolean per channel, `alive`, outside the hook; in the hook compute which "
        "channels fired in this call: (output > 0).any(dim=0) gives (C, H, W), then reduce H and W.",
        "Combine calls with alive = alive | fired_now: a channel that fired in any call is alive. "
        "Overwriting it keeps only the last call.",
        "Attach with handle = layer.register_forward_hook(watch), call run() inside try:, and "
        "handle.remove() in finally:. Return [int(c) for c in torch.nonzero(~alive).flatten()].",
    ],
    solution=_dead_channels_solution,
    errors={"Dimension out of range": (
        "the layer's output may have any number of dimensions: (N, C, L) for a Conv1d, (N, C, H, W) for a "
        "Conv2d. Reduce every dimension but the channel dimension 1, for example "
        "(output > 0).any(dim=0).flatten(1).any(dim=1)")},
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


@dead_channels.case("a channel that fires only during the second of three calls")
def _(answer, t: Tester) -> None:
    model = t.track(_probe_model(), "the probe model")
    xs = _dim_batches(3, seed=3)
    xs[1][0, 0, 1, 1] = 9.0  # wakes channel 2 up, once
    got = answer(model, model[1], lambda: [model(x) for x in xs])
    _expect_dead(t, got, [1, 4], "dead_channels(...) over three calls", (
        "channel 2 fired during the second call only, so it is alive: combine every call "
        "(alive = alive | fired), do not keep only the last one"))


@dead_channels.case("a channel that fires for the third example of a batch only")
def _(answer, t: Tester) -> None:
    model = t.track(_probe_model(), "the probe model")
    xs = _dim_batches(1, seed=4)
    xs[0][2, 0, 0, 2] = 9.0  # example 2 only
    got = answer(model, model[1], lambda: [model(x) for x in xs])
    _expect_dead(t, got, [1, 4], "dead_channels(...) over one call", (
        "channel 2 fired for one example of the batch, so it is alive: look at every example "
        "(reduce dim 0 with .any) and every position"))


@dead_channels.case("a ReLU inside a deeper model, hooked while a real training loop runs")
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


@dead_channels.case("a run that crashes after two calls: the hook must still be removed")
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


@dead_channels.case("a Conv1d layer on 3-D tensors (N, C, L)")
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


@dead_channels.case("the hooked ReLU is followed by an in-place op that changes its output", hidden=True)
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


# Half-right answers (DIMENSIONS: twice (several calls), raises, nested, nd, inplace_after,
# technique): keeps only the last call; looks at the first example only; no finally; returns a
# tensor instead of a list; assumes 4-D outputs; keeps output.detach() and decides after run()
# (hidden: an in-place op after the layer).

@dead_channels.wrong("keeps only the last call", mentions="every call")
def _dead_last_call(model, layer, run):
    seen = {}

    def watch(module, args, output):
        seen["alive"] = (output > 0).any(dim=0).flatten(1).any(dim=1)

    with layer.register_forward_hook(watch):
        run()
    return [int(c) for c in torch.nonzero(~seen["alive"]).flatten()]


@dead_channels.wrong("looks at the first example of each batch only", mentions="every example")
def _dead_first_example(model, layer, run):
    alive = None

    def watch(module, args, output):
        nonlocal alive
        fired = (output[0] > 0).flatten(1).any(dim=1)
        alive = fired if alive is None else alive | fired

    with layer.register_forward_hook(watch):
        run()
    return [int(c) for c in torch.nonzero(~alive).flatten()]


@dead_channels.wrong("removes the hook after run() but not in a finally", mentions="still attached")
def _dead_no_finally(model, layer, run):
    alive = None

    def watch(module, args, output):
        nonlocal alive
        fired = (output > 0).any(dim=0).flatten(1).any(dim=1)
        alive = fired if alive is None else alive | fired

    handle = layer.register_forward_hook(watch)
    run()
    handle.remove()
    return [int(c) for c in torch.nonzero(~alive).flatten()]


@dead_channels.wrong("returns the tensor of channel numbers, not a list", mentions="should be a list")
def _dead_tensor(model, layer, run):
    return torch.tensor(_dead_channels_solution(model, layer, run), dtype=torch.long)


@dead_channels.wrong("assumes 4-D outputs: amax(dim=(0, 2, 3))", mentions="any number of dimensions")
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


@dead_channels.wrong("keeps output.detach() of every call and decides after run()", mentions="in-place op after",
                     hidden=True)
def _dead_decides_later(model, layer, run):
    outputs = []
    handle = layer.register_forward_hook(lambda m, a, o: outputs.append(o.detach()))
    try:
        run()
    finally:
        handle.remove()
    alive = torch.stack([(o > 0).any(dim=0).flatten(1).any(dim=1) for o in outputs]).any(dim=0)
    return [int(c) for c in torch.nonzero(~alive).flatten()]


# --------------------------------------------------------------------------------------
# 3. The first module that produces a non-finite value, stopping right there
# --------------------------------------------------------------------------------------


def _first_nonfinite_solution(model, *inputs):
    class Found(Exception):
        pass

    def make_check(name):
        def check(module, args, output):
            if isinstance(output, torch.Tensor) and not torch.isfinite(output).all():
                raise Found(name)
        return check

    handles = []
    try:
        for name, module in model.named_modules():
            handles.append(module.register_forward_hook(make_check(name)))
        with torch.no_grad():
            model(*inputs)
    except Found as found:
        return found.args[0]
    finally:
        for handle in handles:
            handle.remove()
    return None


first_nonfinite = Exercise(
    "capstone.first_nonfinite", "Stop at the first NaN",
    task=("write first_nonfinite(model, *inputs) that runs model(*inputs) with a forward hook on "
          "every module (model.named_modules()) and returns the name of the first module whose "
          "output holds a NaN or an inf, stopping the forward pass there (the modules after it "
          "never run); None when every output is finite; no hook may stay attached. Outputs that are "
          "not tensors (an nn.LSTM returns a tuple) may be skipped; an error the model raises itself is "
          "not yours to catch: let it through"),
    hints=[
        "torch.isfinite(t).all() is False as soon as t holds a NaN, +inf or -inf "
        "(torch.isnan misses the infinities).",
        "To stop a forward pass from inside a hook, raise an exception of your own (class "
        "Found(Exception): ...) carrying the module's name, and catch it around model(*inputs).",
        "Register the hooks in a loop over model.named_modules(), keep every handle in a list, "
        "and remove them all in the finally: of the try that runs the model.",
    ],
    solution=_first_nonfinite_solution,
    errors={"not tuple": (
        "a module (here an nn.LSTM) returned a tuple, not a tensor: test isinstance(output, torch.Tensor) "
        "before torch.isfinite(output), and skip the other outputs")},
)


class _Log(nn.Module):
    """log(x): -inf where x is 0 (after a ReLU), NaN where x < 0."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(x)


class _Tripwire(nn.Module):
    """Counts its calls: a forward that was stopped never reaches it."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return x


class _BackToFront(nn.Module):
    """Defines ``head`` before ``body`` but runs ``body`` first."""

    def __init__(self) -> None:
        super().__init__()
        with seeded(7):
            self.head = nn.Linear(4, 2)
            self.body = nn.Linear(3, 4)
        with torch.no_grad():
            self.body.weight[0, 0] = float("inf")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.body(x)))


@first_nonfinite.case("a healthy model: every output is finite")
def _(answer, t: Tester) -> None:
    with seeded(8):
        model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    t.track(model, "the MLP")
    got = answer(model, torch.randn(2, 3, generator=torch.Generator().manual_seed(8)))
    t.expect(got is None, what="first_nonfinite(healthy model, x)", expected=None, got=repr(got),
             nudge="return None when no output holds a NaN or an inf")


@first_nonfinite.case("log of a ReLU output (-inf where the ReLU gave 0), followed by more layers")
def _(answer, t: Tester) -> None:
    with seeded(9):
        model = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), _Log(), nn.Linear(8, 2), _Tripwire())
    t.track(model, "the MLP with a log layer")
    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(9))
    got = answer(model, x)
    if got == "3":
        nudge = ("module 2 already produced -inf, which is not a NaN: test with "
                 "torch.isfinite(output).all(), which catches NaN, +inf and -inf")
    elif got in ("4", ""):
        nudge = ("that module is affected, but it is not the first: report the first module whose "
                 "output goes bad, in the order the modules run")
    else:
        nudge = "the log layer (module 2) is the first to produce a non-finite value (-inf)"
    t.expect(got == "2", what="first_nonfinite(model, x)", expected="'2'", got=repr(got), nudge=nudge)
    tripwire = model[4]
    t.expect(tripwire.calls == 0, what="calls of the last module after the NaN was found",
             expected=0, got=tripwire.calls,
             nudge="stop the forward pass at the first bad module: raise an exception from the "
                   "hook and catch it around model(*inputs)")


@first_nonfinite.case("a model that defines its layers in another order than it runs them")
def _(answer, t: Tester) -> None:
    model = t.track(_BackToFront(), "the back-to-front model")
    got = answer(model, torch.ones(2, 3))
    t.expect(got == "body", what="first_nonfinite(model, x)", expected="'body'", got=repr(got),
             nudge="`body` runs first and already holds inf: record the first module whose hook "
                   "fires with a bad output, which follows the order of execution, not the order "
                   "of model.named_modules()")


@first_nonfinite.case("a nested model where a Linear two levels down produces inf")
def _(answer, t: Tester) -> None:
    model = kit.Nested(seed=10)
    with torch.no_grad():
        model.encoder.body[2].weight[0, 0] = float("inf")
    t.track(model, "the nested model")
    got = answer(model, kit.randn(2, 4, seed=10).abs() + 0.1)
    container = isinstance(got, str) and got in ("encoder", "")
    t.expect(got == "encoder.body.2", what="first_nonfinite(nested model, x)", expected="'encoder.body.2'",
             got=repr(got), nudge=(
                 "that is a container whose child went bad first: hook every module of "
                 "model.named_modules(), nested ones included (model.named_children() stops at the first level)"
                 if container else "the Linear encoder.body.2 (inside encoder.body) is the first to produce inf"))


class _LSTMThenLog(nn.Module):
    """``log(relu(fc(lstm(x)[0])))``: the LSTM returns a tuple; the log gives -inf."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        with seeded(seed):
            self.lstm = nn.LSTM(3, 4, batch_first=True)
            self.fc = nn.Linear(4, 4)
        self.log = _Log()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(x)
        return self.log(torch.relu(self.fc(out)))


@first_nonfinite.case("an nn.LSTM (it returns a tuple), then a log that gives -inf", hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(_LSTMThenLog(seed=11), "the LSTM model")
    got = answer(model, kit.randn(2, 3, 3, seed=11))
    t.expect(got == "log", what="first_nonfinite(lstm model, x)", expected="'log'", got=repr(got),
             nudge="the log module is the first whose output holds -inf; the LSTM's tuple is finite")


@first_nonfinite.case("a model that raises an error of its own halfway through", hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(kit.Raising(seed=12), "the model that raises")
    raised, got = kit.call_expecting_kit_error(answer, model, kit.randn(2, 4, seed=12))
    t.expect(raised or got is None, what="first_nonfinite(model that raises, x)",
             expected="the model's KitError, let through", got=repr(got),
             nudge="the model raised an error of its own, which is not a NaN: catch only your own exception "
                   "class (except Found:), not Exception, and let the model's errors through")


# Half-right answers (DIMENSIONS: nested, raises, technique, nd): isnan only; the last bad
# module; lets the forward run on; leaves the hooks on when found; hooks named_children();
# catches every exception (hidden: the model raises its own error); torch.isfinite on a tuple
# (hidden: an nn.LSTM).

def _hunter(is_bad, pick):
    """A NaN hunter that flags modules with ``is_bad(output)``, lets the forward pass run on,
    and reports ``pick(flagged names)``: each typical mistake below is one choice here."""
    def hunt(model, *inputs):
        bad = []
        handles = [m.register_forward_hook(lambda mod, a, o, name=name: bad.append(name)
                                           if is_bad(o) else None)
                   for name, m in model.named_modules()]
        try:
            with torch.no_grad():
                model(*inputs)
        finally:
            for h in handles:
                h.remove()
        return pick(bad) if bad else None
    return hunt


first_nonfinite.wrong("tests with torch.isnan only", mentions="inf")(
    _hunter(lambda o: torch.isnan(o).any(), lambda bad: bad[0]))
first_nonfinite.wrong("reports the last bad module", mentions="not the first")(
    _hunter(lambda o: not torch.isfinite(o).all(), lambda bad: bad[-1]))
first_nonfinite.wrong("finds the right module but lets the forward pass run on", mentions="stop")(
    _hunter(lambda o: not torch.isfinite(o).all(), lambda bad: bad[0]))


@first_nonfinite.wrong("removes the hooks only when nothing was found", mentions="still attached")
def _leaky_stop(model, *inputs):
    class Found(Exception):
        pass

    def check(name):
        def hook(module, args, output):
            if not torch.isfinite(output).all():
                raise Found(name)
        return hook

    handles = [m.register_forward_hook(check(name)) for name, m in model.named_modules()]
    try:
        with torch.no_grad():
            model(*inputs)
    except Found as found:
        return found.args[0]
    for h in handles:
        h.remove()
    return None


@first_nonfinite.wrong("hooks model.named_children() only", mentions="named_modules()")
def _nonfinite_children(model, *inputs):
    class Found(Exception):
        pass

    def check(name):
        def hook(module, args, output):
            if isinstance(output, torch.Tensor) and not torch.isfinite(output).all():
                raise Found(name)
        return hook

    handles = [m.register_forward_hook(check(name)) for name, m in model.named_children()]
    try:
        with torch.no_grad():
            model(*inputs)
    except Found as found:
        return found.args[0]
    finally:
        for h in handles:
            h.remove()
    return None


def _stopper(catch, tensors_only):
    """A hunter that stops at the first bad module, catches ``catch`` and checks outputs
    with or without an isinstance test: the two hidden mistakes below."""
    def hunt(model, *inputs):
        class Found(Exception):
            pass

        def check(name):
            def hook(module, args, output):
                if tensors_only and not isinstance(output, torch.Tensor):
                    return
                if not torch.isfinite(output).all():
                    raise Found(name)
            return hook

        handles = [m.register_forward_hook(check(name)) for name, m in model.named_modules()]
        try:
            with torch.no_grad():
                model(*inputs)
        except Exception as found:
            if catch == "own" and not isinstance(found, Found):
                raise
            return str(found.args[0])
        finally:
            for h in handles:
                h.remove()
        return None
    return hunt


first_nonfinite.wrong("catches every exception, the model's own errors too", mentions="own exception class",
                      hidden=True)(_stopper("all", tensors_only=True))
first_nonfinite.wrong("calls torch.isfinite on a tuple output", mentions="returned a tuple",
                      hidden=True)(_stopper("own", tensors_only=False))


# -- predict, then run -----------------------------------------------------------------------

HUNTED = ("features.0", "features.1", "features.2", "features.3", "features.4", "features.5", "features",
          "pool", "classifier", "<model>")


def _observe_nan_hunt() -> list[str]:
    """SmallCNN with one weight of its last conv set to infinity; a forward hook on every module
    lists those whose output is not finite, in firing order."""
    from ..data import shapes
    from ..models import SmallCNN

    model = SmallCNN(num_classes=3, seed=0)
    with torch.no_grad():
        model.features[4].weight[0, 0, 1, 1] = float("inf")
    found, handles = [], []

    def make_check(name: str):
        def check(module: nn.Module, args: tuple, output: torch.Tensor) -> None:
            if not torch.isfinite(output).all():
                found.append(name)
        return check
    try:
        for name, module in model.named_modules():
            handles.append(module.register_forward_hook(make_check(name or "<model>")))
        with torch.no_grad():
            model(shapes(8, seed=0)[0])
    finally:
        for handle in handles:
            handle.remove()
    return found


nan_hunt = Prediction(
    "capstone.nan_hunt", "Predict: what the NaN hunter reports",
    task=("a list of module names, in the order the hunter appends them, of the modules whose output "
          f"is not finite; the names: {', '.join(HUNTED)}"),
    answer_name="predict_hunt",
    observe=_observe_nan_hunt,
    choices=HUNTED,
    hints=["Which modules run after the corrupted conv, and does a ReLU, an average or a Linear turn "
           "an infinity back into a finite number?",
           "Containers (features, the model itself) have hooks too, and theirs fire after their children."],
    explain={
        "features.4": "the corrupted weight sits in features.4: it is the first output with an infinity.",
        "features.5": "ReLU keeps +inf (and NaN) as they are: the bad values pass through.",
        "features": "the Sequential `features` returns the last child's output, so it is non-finite too; "
                    "its hook fires after all its children.",
        "pool": "an average over positions that include an infinity or a NaN is not finite either.",
        "classifier": "a Linear layer mixes every channel, so the bad channel spoils every logit.",
        "<model>": "the model's own hook fires last, after its forward has returned the non-finite logits.",
        "features.0": "features.0 to features.3 run before the corrupted conv: their outputs are finite.",
        "order": "forward hooks fire in running order, and a container's hook after its children's.",
    },
    summary="the first name is where the infinity appears; everything after it, containers included, "
            "inherits it, each container after its children.",
)
nan_hunt.wrong("only the culprit", ["features.4"], "pass through")
nan_hunt.wrong("containers first", ["<model>", "features", "features.4", "features.5", "pool", "classifier"],
               "after its forward has returned")
nan_hunt.wrong("ReLU cleans it up", ["features.4", "features"], "pass through")
