"""02_forward_hooks, exercise: forward_hooks.make_normaliser."""

from __future__ import annotations

import torch
from torch import nn

from ...models import MLP, TwoInputNet
from .. import kit
from ..core import Exercise, Tester


def make_normaliser(mean, std):
    """A forward pre-hook: first positional argument -> (x - mean) / std, the others unchanged."""
    ### BEGIN SOLUTION
    def normalise(module, args):
        first, *rest = args
        return ((first - mean) / std, *rest)
    return normalise
    ### END SOLUTION


exercise = Exercise(
    "forward_hooks.make_normaliser", "A pre-hook that normalises the input",
    task=("write make_normaliser(mean, std) that returns a forward pre-hook; the hook replaces "
          "the module's first positional argument x by (x - mean) / std, keeps every other "
          "positional argument, and never changes the caller's tensor"),
    hints=[
        "A forward pre-hook is hook(module, args); args is a tuple. Whatever tuple it returns "
        "becomes the new args.",
        "Split the tuple: first, *rest = args; then return ((first - mean) / std, *rest). "
        "Returning a bare tensor would replace the whole tuple and drop the other arguments.",
        "Compute a new tensor: first.sub_(mean) would edit the caller's own tensor in place.",
    ],
    solution=make_normaliser,
    errors={"missing 1 required positional argument": (
        "returning a single tensor replaces the whole args tuple, so the module lost its other "
        "arguments. Return a tuple that keeps them: ((first - mean) / std, *rest)"),
        "not list": (
            "your pre-hook returned a list: torch takes only a tuple as the new args (anything else "
            "becomes the single argument). Return a tuple: ((first - mean) / std, *rest)")},
    guide="""editing the caller's tensor in place (`x.sub_(...)`); returning a bare tensor, which
    replaces the whole `args` tuple and drops the other arguments (return `((first - mean) /
    std, *rest)`); rebinding a local name and returning nothing, which changes nothing.""",
)


def _normaliser_stats(seed: int, features: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = 3.0 + 2.0 * torch.randn(5, features, generator=g)
    return x, x.mean(0), x.std(0)


@exercise.case("on the first layer of an MLP")
def _(answer, t: Tester) -> None:
    model = MLP(seed=8)
    x, mean, std = _normaliser_stats(8, 8)
    original = x.clone()
    hook = answer(mean, std)
    t.expect(callable(hook), what="make_normaliser(mean, std)", expected="a function (the hook)",
             got=type(hook).__name__, nudge="define the hook inside make_normaliser and return it")
    with model.fc1.register_forward_pre_hook(hook):
        got = model(x)
    expected = model((original - mean) / std)
    t.expect(torch.equal(x, original), what="the caller's x after the forward", expected=original, got=x,
             nudge="the hook changed the caller's tensor in place: compute a new tensor "
                   "((x - mean) / std) instead of x.sub_(...)")
    t.expect_close(got, expected, what="the model's output with your pre-hook on fc1",
                   nudge="return a tuple whose first element is (x - mean) / std",
                   wrong={"unchanged": (model(original), "the input was not changed: return the new "
                                        "args tuple from the hook")})


@exercise.case("on a module with two positional inputs, a and b")
def _(answer, t: Tester) -> None:
    net = TwoInputNet(features=3, seed=9)
    a, mean, std = _normaliser_stats(9, 3)
    b = torch.ones(5, 3)
    with net.register_forward_pre_hook(answer(mean, std)):
        got = net(a, b, scale=0.5)
    expected = net((a - mean) / std, b, scale=0.5)
    t.expect_close(got, expected, what="TwoInputNet(a, b, scale=0.5) with your pre-hook",
                   nudge="normalise only the first argument and keep b as it is")


@exercise.case("the mean and std are the ones given")
def _(answer, t: Tester) -> None:
    model = MLP(seed=10)
    x, _, _ = _normaliser_stats(10, 8)
    mean, std = torch.full((8,), 2.0), torch.full((8,), 4.0)
    with model.fc1.register_forward_pre_hook(answer(mean, std)):
        got = model(x)
    t.expect_close(got, model((x - 2.0) / 4.0), what="the output with mean=2, std=4",
                   nudge="use the mean and std passed to make_normaliser, not statistics of the batch")


class _Three(nn.Module):
    """``conv(a) + b + c``: three positional inputs (c defaults to 0), the first a 4-D image batch."""

    def __init__(self) -> None:
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(15)
            self.conv = nn.Conv2d(2, 2, 1)

    def forward(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor | float = 0.0) -> torch.Tensor:
        return self.conv(a) + b + c


@exercise.case("a module with three positional inputs, the first (N, C, H, W) with per-channel "
                      "statistics", hidden=True)
def _(answer, t: Tester) -> None:
    net = t.track(_Three(), "a three-input conv module")
    a = kit.conv_input(4, seed=15) * 2 + 1
    mean, std = a.mean((0, 2, 3), keepdim=True), a.std((0, 2, 3), keepdim=True)
    b, c = torch.full((1, 2, 1, 1), 0.5), torch.full((1, 2, 1, 1), -2.0)
    expected = net((a - mean) / std, b, c).detach()
    with net.register_forward_pre_hook(answer(mean, std)):
        got = net(a, b, c)
    t.expect_close(got, expected, what="net(a, b, c) with your pre-hook",
                   nudge="keep every other positional argument, however many there are: "
                         "return ((first - mean) / std, *rest)")


@exercise.wrong("uses the batch's own mean and std", mentions="not statistics of the batch")
def _batch_stats(mean, std):
    def normalise(module, args):
        first, *rest = args
        return ((first - first.mean(0)) / first.std(0), *rest)
    return normalise


@exercise.wrong("returns a list instead of a tuple", mentions="returned a list")
def _as_list(mean, std):
    def normalise(module, args):
        first, *rest = args
        return [(first - mean) / std, *rest]
    return normalise


@exercise.wrong("subtracts with -= (in place on the caller's tensor)", mentions="in place")
def _minus_equals(mean, std):
    def normalise(module, args):
        first, *rest = args
        first -= mean
        return (first / std, *rest)
    return normalise


@exercise.wrong("keeps only the second argument (assumes at most two)", mentions="however many",
                       hidden=True)
def _two_at_most(mean, std):
    def normalise(module, args):
        return ((args[0] - mean) / std, *args[1:2])
    return normalise


@exercise.wrong("edits the caller's tensor in place", mentions="in place")
def _inplace_normaliser(mean, std):
    def normalise(module, args):
        args[0].sub_(mean).div_(std)
    return normalise


@exercise.wrong("returns a bare tensor", mentions="returning a single tensor")
def _bare_tensor(mean, std):
    def normalise(module, args):
        return (args[0] - mean) / std
    return normalise


@exercise.wrong("rebinds a local name without returning", mentions="not changed")
def _rebind(mean, std):
    def normalise(module, args):
        args = ((args[0] - mean) / std, *args[1:])
    return normalise
