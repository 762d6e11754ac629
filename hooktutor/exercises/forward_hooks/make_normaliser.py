"""02_forward_hooks, exercise 2: a forward pre-hook that normalises the module's first input.

Half-right answers an examiner expects, by kit dimension (``kit.DIMENSIONS``):

- inplace: edits the caller's tensor in place (``sub_``, or ``first -= mean``);
- a wrong shape of the new args: returns a bare tensor (the other arguments are dropped) or a
  list; rebinds ``args`` without returning it (nothing changes);
- technique: uses the batch's own statistics instead of the mean and std given;
- technique: normalises under ``torch.no_grad()``, which cuts the gradient to the layers before;
- twice: normalises only the first call of a module called twice (state kept in the hook);
- nd (hidden): reshapes mean and std to channels, wrong for a (N, T, F) input with (T, F)
  statistics; adds an epsilon to std (a 1% error for a std of 1e-3);
- nd / dtype / hidden: keeps only the second argument (assumes at most two), on a module with three
  positional inputs in float64, the first an image batch with per-channel statistics.
"""

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
    equivalent_mutants={},
    guide="""editing the caller's tensor in place (`x.sub_(...)`, `first -= mean`); returning a bare
    tensor, which replaces the whole `args` tuple and drops the other arguments (return
    `((first - mean) / std, *rest)`), or a list; rebinding a local name and returning nothing,
    which changes nothing; the batch's own mean and std instead of those given; computing under
    `torch.no_grad()`, so no gradient reaches the layers before; normalising only the first call of
    a module called twice. Caught at grading: keeping only the second argument of a module that
    takes three; an epsilon added to std; mean and std reshaped to channels; computing in float32.""",
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
    b = torch.ones(5, 3, requires_grad=True)   # b as it is: its gradient must still reach it
    with net.register_forward_pre_hook(answer(mean, std)):
        got = net(a, b, scale=0.5)
    expected = net((a - mean) / std, b, scale=0.5)
    t.expect_close(got, expected, what="TwoInputNet(a, b, scale=0.5) with your pre-hook",
                   nudge="normalise only the first argument and keep b as it is")
    want = torch.autograd.grad(expected.sum(), b)[0]
    t.expect(got.requires_grad, what="the output's requires_grad (b requires grad)", expected=True,
             got=got.requires_grad, nudge="pass b on as it is: not detached, not copied")
    (grad_b,) = torch.autograd.grad(got.sum(), b, allow_unused=True)
    t.expect(grad_b is not None and torch.allclose(grad_b, want), what="the gradient that reaches b",
             expected=want, got=grad_b, nudge="pass b on as it is (no detach(), no copy): the model's "
                                              "gradient must reach it")


@exercise.case("the mean and std are the ones given")
def _(answer, t: Tester) -> None:
    model = MLP(seed=10)
    x, _, _ = _normaliser_stats(10, 8)
    mean, std = torch.full((8,), 2.0), torch.full((8,), 4.0)
    with model.fc1.register_forward_pre_hook(answer(mean, std)):
        got = model(x)
    t.expect_close(got, model((x - 2.0) / 4.0), what="the output with mean=2, std=4",
                   nudge="use the mean and std passed to make_normaliser, not statistics of the batch")


@exercise.case("a (N, T, F) sequence with per-(T, F) statistics, some very small (std about 1e-3)", hidden=True)
def _(answer, t: Tester) -> None:
    layer = t.track(nn.Linear(4, 2), "a Linear on the last dimension")
    a = 2.0 + 1e-3 * kit.randn(6, 3, 4, seed=18)
    mean, std = a.mean(0), a.std(0)
    with torch.no_grad():
        want = layer.forward((a - mean) / std)
    with layer.register_forward_pre_hook(answer(mean, std)):
        got = layer(a)
    t.expect_close(got, want, what="the Linear's output with your pre-hook", nudge=(
        "use mean and std exactly as given: no reshaping (they broadcast against the input as they are) and "
        "nothing added to std (with a std of 1e-3, an epsilon of 1e-5 is a 1% error)"))


class _Three(nn.Module):
    """``conv(a) + b + c``: three positional inputs (c defaults to 0), the first a 4-D image batch."""

    def __init__(self) -> None:
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(15)
            self.conv = nn.Conv2d(2, 2, 1)

    def forward(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor | float = 0.0) -> torch.Tensor:
        return self.conv(a) + b + c


@exercise.case("a module with three positional inputs in float64, the first (N, C, H, W) with "
               "per-channel statistics", hidden=True)
def _(answer, t: Tester) -> None:
    net, a = kit.in_dtype(_Three(), kit.conv_input(4, seed=15) * 2 + 1)
    a = a / 3          # float64 values that float32 cannot hold
    t.track(net, "a three-input conv module in float64")
    mean, std = a.mean((0, 2, 3), keepdim=True), a.std((0, 2, 3), keepdim=True)
    b, c = torch.full((1, 2, 1, 1), 0.5, dtype=torch.float64), torch.full((1, 2, 1, 1), -2.0, dtype=torch.float64)
    expected = net((a - mean) / std, b, c).detach()
    with net.register_forward_pre_hook(answer(mean, std)):
        got = net(a, b, c)
    t.expect(got.dtype == torch.float64, what="the dtype of net(a, b, c) with your pre-hook", expected=torch.float64,
             got=got.dtype, nudge="compute (first - mean) / std in the input's own dtype, no conversion")
    t.expect_close(got, expected, what="net(a, b, c) with your pre-hook", atol=1e-12, rtol=1e-10,
                   nudge="keep every other positional argument, however many there are, and compute in the "
                         "input's own dtype: return ((first - mean) / std, *rest)")


@exercise.case("a pre-hook on fc2: the gradient reaches fc1 through the normalised input")
def _(answer, t: Tester) -> None:
    model = t.track(MLP(seed=16), "the MLP")
    x = kit.randn(4, 8, seed=16)
    h = model.act1.forward(model.fc1.forward(x)).detach()
    mean, std = h.mean(0), h.std(0) + 0.5
    with model.fc2.register_forward_pre_hook(answer(mean, std)):
        model(x).sum().backward()
    inner = model.act1.forward(model.fc1.forward(x))
    out = model.head.forward(model.act2.forward(model.fc2.forward((inner - mean) / std)))
    (want,) = torch.autograd.grad(out.sum(), model.fc1.weight)
    got = model.fc1.weight.grad
    t.expect(got is not None, what="fc1.weight.grad after backward", expected="a gradient", got="None", nudge=(
        "no gradient reached fc1: the normalised input was computed under torch.no_grad() (or detached), "
        "which cuts it from the graph. Compute (first - mean) / std as an ordinary operation"))
    t.expect_close(got, want, what="fc1.weight.grad after backward", nudge="compute (first - mean) / std in the graph")


@exercise.case("a layer called twice in one forward: both calls are normalised")
def _(answer, t: Tester) -> None:
    model = t.track(kit.Twice(seed=17), "a model that calls `block` twice")
    x = kit.randn(3, 4, seed=17)
    mean, std = torch.full((4,), 0.5), torch.full((4,), 2.0)
    with torch.no_grad():
        first = model.block.forward((x - 0.5) / 2.0)
        want = model.out.forward(model.block.forward((torch.tanh(first) - 0.5) / 2.0))
    with model.block.register_forward_pre_hook(answer(mean, std)):
        got = model(x)
    t.expect_close(got, want, what="the output with your pre-hook on `block`", nudge=(
        "a pre-hook fires on every call of its module: normalise the input of each call, keep no state "
        "between calls"))


# -- the wrong answers peculiar to this exercise -------------------------------------------------

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


@exercise.wrong("keeps only the second argument (assumes at most two)", mentions="however many", hidden=True)
def _two_at_most(mean, std):
    def normalise(module, args):
        return ((args[0] - mean) / std, *args[1:2])
    return normalise


@exercise.wrong("edits the caller's tensor in place", mentions="in place")
def _inplace_normaliser(mean, std):
    def normalise(module, args):
        args[0].sub_(mean).div_(std)
    return normalise


@exercise.wrong("detaches the other arguments", mentions="the gradient that reaches b")
def _detaches_rest(mean, std):
    def normalise(module, args):
        first, *rest = args
        return ((first - mean) / std, *[r.detach() if torch.is_tensor(r) else r for r in rest])
    return normalise


@exercise.wrong("returns a bare tensor", mentions="returning a single tensor")
def _bare_tensor(mean, std):
    def normalise(module, args):
        return (args[0] - mean) / std
    return normalise


@exercise.wrong("normalises under torch.no_grad()", mentions="no gradient reached fc1")
def _no_grad(mean, std):
    def normalise(module, args):
        first, *rest = args
        with torch.no_grad():
            new = (first - mean) / std
        return (new, *rest)
    return normalise


@exercise.wrong("normalises the first call only", mentions="every call of its module")
def _first_call_only(mean, std):
    done = []

    def normalise(module, args):
        if done:
            return None
        done.append(True)
        first, *rest = args
        return ((first - mean) / std, *rest)
    return normalise


@exercise.wrong("adds an epsilon to std", mentions="nothing added to std", hidden=True)
def _eps(mean, std):
    def normalise(module, args):
        first, *rest = args
        return ((first - mean) / (std + 1e-5), *rest)
    return normalise


@exercise.wrong("computes in float32", mentions="own dtype", hidden=True)
def _float32(mean, std):
    def normalise(module, args):
        first, *rest = args
        return ((first.float() - mean) / std, *rest)
    return normalise


@exercise.wrong("rebinds a local name without returning", mentions="not changed")
def _rebind(mean, std):
    def normalise(module, args):
        args = ((args[0] - mean) / std, *args[1:])
    return normalise
