"""Exercises of ``02_forward_hooks.ipynb``: extract features, rewrite an input, see keywords.

* :data:`extract_features` — every call of chosen layers into a dict of lists of copies.
* :data:`make_normaliser` — a forward pre-hook that standardises a module's first input.
* :data:`calls_of` — a ``with_kwargs=True`` pre-hook reporting positional and keyword arguments.
"""

from __future__ import annotations

import torch
from torch import nn

from ..inventory import list_hooks, remove_hooks
from ..models import MLP, TwoInputNet, set_inplace
from . import kit
from .core import Exercise, Tester
from .predict import Prediction

# --------------------------------------------------------------------------------------
# 1. extract_features(model, x, names) -> {name: [copy of each call's output]}
# --------------------------------------------------------------------------------------


def _extract_features_solution(model: nn.Module, x: torch.Tensor, names: list[str]) -> dict:
    features = {name: [] for name in names}
    handles = []
    for name in names:
        def save(module, args, output, name=name):
            features[name].append(output.detach().clone())
        handles.append(model.get_submodule(name).register_forward_hook(save))
    try:
        model(x)
    finally:
        for handle in handles:
            handle.remove()
    return features


extract_features = Exercise(
    "forward_hooks.extract_features", "Extract the features of chosen layers",
    task=("write extract_features(model, x, names) that runs model(x) once and returns a dict "
          "name -> list of that layer's outputs, one copy per call, in call order; every hook "
          "is removed afterwards"),
    hints=[
        "model.get_submodule(name) gives the layer called name. Start with "
        "features = {name: [] for name in names} and attach one forward hook per layer that "
        "appends to features[name]. Bind the name in the hook's defaults "
        "(def save(module, args, output, name=name)), or every hook ends up using the last name.",
        "Append output.detach().clone(): a later in-place operation (ReLU(inplace=True)) rewrites "
        "the very tensor the hook was given, and detach() alone shares its memory.",
        "Keep every handle in a list; run model(x) in a try: block and call handle.remove() on "
        "each of them in the finally: block.",
    ],
    solution=_extract_features_solution,
    errors={
        "encoder.body": (
            "a dotted name such as 'encoder.body.0' is a layer inside a submodule: "
            "model.get_submodule(name) finds it; getattr(model, name) and model.named_children() "
            "only see the top level"),
        "'alias'": (
            "'alias' is a second name of a module the model holds twice; dict(model.named_modules()) "
            "lists such a module only once, under its first name. model.get_submodule(name) finds "
            "every name"),
    },
)


def _watched(t: Tester, answer, model: nn.Module, x: torch.Tensor, names: list[str]) -> dict:
    """Run the answer with a witness on each named layer; the layers that ran must have had a
    forward hook attached (dimension ``technique``)."""
    with kit.HookWitness({n: model.get_submodule(n) for n in names}) as seen:
        got = answer(model, x, names)
    for n in names:
        t.expect(seen.calls[n] == 0 or seen.fired(n, "forward") > 0, what=f"hooks on {n!r} while it ran",
                 expected="your forward hook", got="none", nudge=(
                     f"{n!r} ran without a forward hook attached: record each output with "
                     "model.get_submodule(name).register_forward_hook(...) and run model(x) once"))
    return _expect_feature_dict(t, got, names)


class _Twice(nn.Module):
    """Uses one Linear twice: ``block(tanh(block(x)))``."""

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(3)
        self.block = nn.Linear(4, 4)
        with torch.no_grad():
            self.block.weight.copy_(torch.randn(4, 4, generator=g) / 2)
            self.block.bias.copy_(torch.randn(4, generator=g) / 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(torch.tanh(self.block(x)))


def _expect_feature_dict(t: Tester, got: object, names: list[str]) -> dict:
    t.expect_type(got, dict, what="what extract_features returned",
                  nudge="return a dict that maps each layer name to a list of tensors")
    assert isinstance(got, dict)
    t.expect(sorted(got) == sorted(names), what="the keys of the dict", expected=sorted(names),
             got=sorted(got), nudge="use exactly the layer names you were given as keys")
    for name in names:
        t.expect(isinstance(got[name], list), what=f"features[{name!r}]", expected="a list of tensors",
                 got=type(got[name]).__name__,
                 nudge="store a list per layer (one entry per call), not a single tensor: a module "
                       "called twice in one forward must keep both outputs")
        for i, item in enumerate(got[name]):
            t.expect_type(item, torch.Tensor, what=f"features[{name!r}][{i}]",
                          nudge="store the output tensor itself (a copy of it), one per call")
    return got


@extract_features.case("an MLP: fc1 and act2, each called once")
def _(answer, t: Tester) -> None:
    model = t.track(MLP(seed=4), "the MLP")
    x = torch.randn(3, 8, generator=torch.Generator().manual_seed(4))
    got = _watched(t, answer, model, x, ["fc1", "act2"])
    _, inter = model.forward_with_intermediates(x)
    for name in ("fc1", "act2"):
        t.expect(len(got[name]) == 1, what=f"len(features[{name!r}])", expected=1, got=len(got[name]),
                 nudge="run model(x) exactly once and append once per call of the hook")
        other = inter["act2" if name == "fc1" else "fc1"]
        t.expect_close(got[name][0], inter[name], what=f"features[{name!r}][0]",
                       nudge="store the output argument of the hook (the third one) for that layer",
                       wrong={"swapped": (other, "this is the other layer's output: bind each hook's "
                                                 "name with a default argument (name=name)")})


@extract_features.case("an MLP whose ReLUs are in place (ReLU(inplace=True))")
def _(answer, t: Tester) -> None:
    reference = MLP(seed=5)
    model = t.track(MLP(seed=5), "the MLP with in-place ReLUs")
    set_inplace(model, True)
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(5))
    _, inter = reference.forward_with_intermediates(x)
    got = _expect_feature_dict(t, answer(model, x, ["fc1", "fc2"]), ["fc1", "fc2"])
    for name in ("fc1", "fc2"):
        t.expect(len(got[name]) == 1, what=f"len(features[{name!r}])", expected=1, got=len(got[name]),
                 nudge="run model(x) exactly once and append once per call of the hook")
        t.expect_close(got[name][0], inter[name], what=f"features[{name!r}][0]",
                       nudge="store a copy of the output, taken inside the hook",
                       wrong={"no copy": (torch.relu(inter[name]),
                                          "the stored tensor lost its negative values: the in-place "
                                          "ReLU that runs after your hook rewrote it. Store "
                                          "output.detach().clone(), a copy (detach() alone shares "
                                          "memory)")})


@extract_features.case("a layer called twice in one forward")
def _(answer, t: Tester) -> None:
    model = t.track(_Twice(), "a model that calls its `block` twice")
    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(6))
    first = model.block.forward(x)
    second = model.block.forward(torch.tanh(first))
    got = _expect_feature_dict(t, answer(model, x, ["block"]), ["block"])
    calls = got["block"]
    t.expect(len(calls) == 2, what="len(features['block'])", expected=2, got=len(calls),
             nudge="`block` is called twice in one forward, so its hook fires twice: append every "
                   "call to the list instead of replacing what is stored")
    t.expect_close(calls[0], first.detach(), what="features['block'][0] (the first call)",
                   nudge="keep the calls in the order they happen")
    t.expect_close(calls[1], second.detach(), what="features['block'][1] (the second call)",
                   nudge="keep the calls in the order they happen")


@extract_features.case("hooks are removed even when the model raises")
def _(answer, t: Tester) -> None:
    model = t.track(MLP(seed=7), "the MLP")
    wrong_width = torch.zeros(2, 5)
    try:
        answer(model, wrong_width, ["fc1", "head"])
    except RuntimeError:
        pass  # the model cannot take this input; what matters is what stays attached


@extract_features.case("a nested model: layers named encoder.body.0 and head")
def _(answer, t: Tester) -> None:
    model = t.track(kit.Nested(seed=13), "a nested model")
    x = kit.randn(3, 4, seed=13)
    names = ["encoder.body.0", "encoder.act", "head"]
    got = _watched(t, answer, model, x, names)
    inter = model.intermediates(x)
    for name in names:
        t.expect(len(got[name]) == 1, what=f"len(features[{name!r}])", expected=1, got=len(got[name]),
                 nudge="run model(x) exactly once and append once per call of the hook")
        t.expect_close(got[name][0], inter[name], what=f"features[{name!r}][0]",
                       nudge="hook model.get_submodule(name), the layer with that dotted name")


@extract_features.case("a module held under two names (block and alias), called twice", hidden=True)
def _(answer, t: Tester) -> None:
    model = kit.Twice(seed=14)
    model.alias = model.block          # the same Linear, registered a second time
    t.track(model, "a model holding `block` also as `alias`")
    x = kit.randn(2, 4, seed=14)
    calls = model.block_calls(x)
    got = _watched(t, answer, model, x, ["alias", "out"])
    t.expect(len(got["alias"]) == 2, what="len(features['alias'])", expected=2, got=len(got["alias"]),
             nudge="`alias` is `block`, called twice in one forward: keep both calls")
    for i in range(2):
        t.expect_close(got["alias"][i], calls[i][1], what=f"features['alias'][{i}]",
                       nudge="keep the calls in the order they happen")


# Half-right answers: stores output.detach() without a copy (the in-place ReLU after the layer
# rewrites it); keeps only the last call (a layer called twice); removes the hooks without
# `finally:` (a model that raises leaves them); nested: looks names up with getattr or
# named_children(), missing dotted names; technique: runs the layers one by one, no hook;
# hidden: looks names up in dict(model.named_modules()), which lists a module held under two
# names once.


@extract_features.wrong("looks the names up in model.named_children()", mentions="get_submodule")
def _children(model, x, names):
    layers = dict(model.named_children())
    features = {name: [] for name in names}
    handles = [layers[name].register_forward_hook(
        lambda m, a, o, name=name: features[name].append(o.detach().clone())) for name in names]
    try:
        model(x)
    finally:
        for h in handles:
            h.remove()
    return features


@extract_features.wrong("runs the named layers by hand, without hooks", mentions="without a forward hook")
def _by_hand(model, x, names):
    features = {name: [] for name in names}
    for name, layer in model.named_modules():
        if not list(layer.children()):
            x = layer(x)
            if name in features:
                features[name].append(x.detach().clone())
    return features


@extract_features.wrong("finds the layers in dict(model.named_modules())", mentions="named_modules()",
                        hidden=True)
def _named_modules(model, x, names):
    layers = dict(model.named_modules())
    features = {name: [] for name in names}
    handles = [layers[name].register_forward_hook(
        lambda m, a, o, name=name: features[name].append(o.detach().clone())) for name in names]
    try:
        model(x)
    finally:
        for h in handles:
            h.remove()
    return features


@extract_features.wrong("stores output.detach() without a copy", mentions="in-place ReLU")
def _no_copy(model, x, names):
    features = {name: [] for name in names}
    handles = [model.get_submodule(name).register_forward_hook(
        lambda m, a, o, name=name: features[name].append(o.detach())) for name in names]
    try:
        model(x)
    finally:
        for h in handles:
            h.remove()
    return features


@extract_features.wrong("keys by name and keeps only the last call", mentions="called twice")
def _last_only(model, x, names):
    features = {}
    handles = [model.get_submodule(name).register_forward_hook(
        lambda m, a, o, name=name: features.__setitem__(name, [o.detach().clone()])) for name in names]
    try:
        model(x)
    finally:
        for h in handles:
            h.remove()
    return features


@extract_features.wrong("removes the hooks only when the model succeeds", mentions="still attached")
def _no_finally(model, x, names):
    features = {name: [] for name in names}
    handles = [model.get_submodule(name).register_forward_hook(
        lambda m, a, o, name=name: features[name].append(o.detach().clone())) for name in names]
    model(x)
    for h in handles:
        h.remove()
    return features


# --------------------------------------------------------------------------------------
# 2. make_normaliser(mean, std) -> a forward pre-hook
# --------------------------------------------------------------------------------------


def _make_normaliser_solution(mean: torch.Tensor, std: torch.Tensor):
    def normalise(module, args):
        first, *rest = args
        return ((first - mean) / std, *rest)
    return normalise


make_normaliser = Exercise(
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
    solution=_make_normaliser_solution,
    errors={"missing 1 required positional argument": (
        "returning a single tensor replaces the whole args tuple, so the module lost its other "
        "arguments. Return a tuple that keeps them: ((first - mean) / std, *rest)"),
        "not list": (
            "your pre-hook returned a list: torch takes only a tuple as the new args (anything else "
            "becomes the single argument). Return a tuple: ((first - mean) / std, *rest)")},
)


def _normaliser_stats(seed: int, features: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = 3.0 + 2.0 * torch.randn(5, features, generator=g)
    return x, x.mean(0), x.std(0)


@make_normaliser.case("on the first layer of an MLP")
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


@make_normaliser.case("on a module with two positional inputs, a and b")
def _(answer, t: Tester) -> None:
    net = TwoInputNet(features=3, seed=9)
    a, mean, std = _normaliser_stats(9, 3)
    b = torch.ones(5, 3)
    with net.register_forward_pre_hook(answer(mean, std)):
        got = net(a, b, scale=0.5)
    expected = net((a - mean) / std, b, scale=0.5)
    t.expect_close(got, expected, what="TwoInputNet(a, b, scale=0.5) with your pre-hook",
                   nudge="normalise only the first argument and keep b as it is")


@make_normaliser.case("the mean and std are the ones given")
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


@make_normaliser.case("a module with three positional inputs, the first (N, C, H, W) with per-channel "
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


# Half-right answers: edits the caller's tensor in place (sub_, or `first -= mean`); returns a
# bare tensor (the other arguments are dropped) or a list; rebinds args without returning;
# uses the batch's own statistics; hidden: keeps only the second argument (assumes at most two).


@make_normaliser.wrong("uses the batch's own mean and std", mentions="not statistics of the batch")
def _batch_stats(mean, std):
    def normalise(module, args):
        first, *rest = args
        return ((first - first.mean(0)) / first.std(0), *rest)
    return normalise


@make_normaliser.wrong("returns a list instead of a tuple", mentions="returned a list")
def _as_list(mean, std):
    def normalise(module, args):
        first, *rest = args
        return [(first - mean) / std, *rest]
    return normalise


@make_normaliser.wrong("subtracts with -= (in place on the caller's tensor)", mentions="in place")
def _minus_equals(mean, std):
    def normalise(module, args):
        first, *rest = args
        first -= mean
        return (first / std, *rest)
    return normalise


@make_normaliser.wrong("keeps only the second argument (assumes at most two)", mentions="however many",
                       hidden=True)
def _two_at_most(mean, std):
    def normalise(module, args):
        return ((args[0] - mean) / std, *args[1:2])
    return normalise


@make_normaliser.wrong("edits the caller's tensor in place", mentions="in place")
def _inplace_normaliser(mean, std):
    def normalise(module, args):
        args[0].sub_(mean).div_(std)
    return normalise


@make_normaliser.wrong("returns a bare tensor", mentions="returning a single tensor")
def _bare_tensor(mean, std):
    def normalise(module, args):
        return (args[0] - mean) / std
    return normalise


@make_normaliser.wrong("rebinds a local name without returning", mentions="not changed")
def _rebind(mean, std):
    def normalise(module, args):
        args = ((args[0] - mean) / std, *args[1:])
    return normalise


# --------------------------------------------------------------------------------------
# 3. calls_of(model, x, layer) -> [(args, kwargs), ...] as the layer saw them
# --------------------------------------------------------------------------------------


def _copy(value):
    return value.detach().clone() if isinstance(value, torch.Tensor) else value


def _calls_of_solution(model: nn.Module, x: torch.Tensor, layer: nn.Module) -> list:
    calls = []

    def copy(value):
        return value.detach().clone() if isinstance(value, torch.Tensor) else value

    def record(module, args, kwargs):
        calls.append((tuple(copy(a) for a in args), {k: copy(v) for k, v in kwargs.items()}))

    handle = layer.register_forward_pre_hook(record, with_kwargs=True)
    try:
        model(x)
    finally:
        handle.remove()
    return calls


calls_of = Exercise(
    "forward_hooks.calls_of", "See positional and keyword arguments",
    task=("write calls_of(model, x, layer) that runs model(x) once and returns a list with one "
          "(args, kwargs) pair per call of `layer`: the tuple of positional arguments and the "
          "dict of keyword arguments it received, tensors copied; the hook is removed afterwards"),
    hints=[
        "Keyword arguments never reach an ordinary hook's args. Register a forward pre-hook with "
        "layer.register_forward_pre_hook(record, with_kwargs=True); it is called as "
        "record(module, args, kwargs).",
        "Copy the tensors before the layer runs: an in-place layer (ReLU(inplace=True)) "
        "overwrites its own input. tuple(a.detach().clone() for a in args) and the same for "
        "kwargs' values (leave non-tensors such as 2.0 as they are).",
        "Remove the handle in a finally: block.",
    ],
    solution=_calls_of_solution,
    errors={"tuple index out of range": (
        "args was empty: the layer was called with keyword arguments only, and args holds the "
        "positional ones. Read both with register_forward_pre_hook(..., with_kwargs=True)")},
)


class _KeywordCaller(nn.Module):
    """Calls its inner TwoInputNet positionally, then with keywords only."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = TwoInputNet(features=2, seed=11)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.inner(x, x + 1)
        return self.inner(a=y, b=x, scale=2.0)


class _InplaceAfter(nn.Module):
    """An in-place ReLU applied to the output of a Linear."""

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(12)
        self.lin = nn.Linear(3, 3)
        with torch.no_grad():
            self.lin.weight.copy_(torch.randn(3, 3, generator=g))
            self.lin.bias.zero_()
        self.act = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.lin(x))


def _compare_call(t: Tester, got: object, index: int, args: tuple, kwargs: dict, *,
                  kw_nudge: str, copy_nudge: str) -> None:
    t.expect(isinstance(got, (tuple, list)) and len(got) == 2, what=f"calls[{index}]",
             expected="a pair (args, kwargs)", got=got, nudge="append a 2-tuple (args, kwargs) per call")
    got_args, got_kwargs = got
    t.expect(isinstance(got_args, tuple) and len(got_args) == len(args), what=f"calls[{index}][0] (args)",
             expected=f"a tuple of {len(args)} positional argument(s)", got=got_args,
             nudge="store the args tuple the hook receives")
    for i, (g, e) in enumerate(zip(got_args, args)):
        t.expect_close(g, e, what=f"calls[{index}][0][{i}]", nudge=copy_nudge,
                       wrong={"rectified": (torch.relu(e), copy_nudge)})
    t.expect(isinstance(got_kwargs, dict) and sorted(got_kwargs) == sorted(kwargs),
             what=f"the keyword names of calls[{index}][1]", expected=sorted(kwargs),
             got=sorted(got_kwargs) if isinstance(got_kwargs, dict) else got_kwargs, nudge=kw_nudge)
    assert isinstance(got_kwargs, dict)
    for k, e in kwargs.items():
        if isinstance(e, torch.Tensor):
            t.expect_close(got_kwargs[k], e, what=f"calls[{index}][1][{k!r}]", nudge=copy_nudge)
        else:
            t.expect(got_kwargs[k] == e, what=f"calls[{index}][1][{k!r}]", expected=e, got=got_kwargs[k],
                     nudge="store the keyword values as the layer received them")


_KW_NUDGE = ("register the pre-hook with with_kwargs=True: without it, keyword arguments never "
             "reach the hook. Then store the kwargs dict it receives")


@calls_of.case("a module called with positional arguments, then with keywords only")
def _(answer, t: Tester) -> None:
    model = t.track(_KeywordCaller(), "a model that calls `inner` twice")
    x = torch.randn(2, 2, generator=torch.Generator().manual_seed(11))
    y = model.inner(x, x + 1)
    got = answer(model, x, model.inner)
    t.expect_type(got, list, what="what calls_of returned", nudge="return the list of (args, kwargs) pairs")
    t.expect(len(got) == 2, what="calls_of(model, x, model.inner)",
             expected="a list of 2 (args, kwargs) pairs", got=got if not isinstance(got, list) else
             f"a list of {len(got)}", nudge="`inner` is called twice: append one pair per call")
    _compare_call(t, got[0], 0, (x, x + 1), {}, kw_nudge=_KW_NUDGE,
                  copy_nudge="store copies of the positional arguments")
    _compare_call(t, got[1], 1, (), {"a": y, "b": x, "scale": 2.0}, kw_nudge=_KW_NUDGE,
                  copy_nudge="store copies of the keyword arguments' tensors")


@calls_of.case("the input of an in-place ReLU")
def _(answer, t: Tester) -> None:
    model = t.track(_InplaceAfter(), "a Linear followed by ReLU(inplace=True)")
    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(12))
    raw = model.lin(x).detach()
    got = answer(model, x, model.act)
    t.expect_type(got, list, what="what calls_of returned", nudge="return the list of (args, kwargs) pairs")
    t.expect(len(got) == 1, what="calls_of(model, x, model.act)",
             expected="a list of 1 (args, kwargs) pair", got=got, nudge="append one pair per call")
    _compare_call(t, got[0], 0, (raw,), {}, kw_nudge=_KW_NUDGE,
                  copy_nudge="the stored input lost its negative values: ReLU(inplace=True) rewrote "
                             "the tensor after your pre-hook ran. Store a copy, a.detach().clone()")


@calls_of.case("a model that raises halfway through its forward: the hook must still go")
def _(answer, t: Tester) -> None:
    kit.expect_clean_after_raise(t, answer, seed=16)


@calls_of.case("the caller changes its tensors in place after calls_of returned", hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(_KeywordCaller(), "a model that calls `inner` twice")
    x = torch.randn(2, 2, generator=torch.Generator().manual_seed(17))
    x_before = x.clone()
    y = model.inner(x, x + 1).detach()
    got = answer(model, x, model.inner)
    kit.scribble(x)                      # the caller reuses its buffer
    t.expect_type(got, list, what="what calls_of returned", nudge="return the list of (args, kwargs) pairs")
    t.expect(len(got) == 2, what="len(calls_of(model, x, model.inner))", expected=2, got=len(got),
             nudge="`inner` is called twice: append one pair per call")
    _compare_call(t, got[0], 0, (x_before, x_before + 1), {}, kw_nudge=_KW_NUDGE,
                  copy_nudge="the recorded x changed when the caller edited x in place afterwards: "
                             "store copies of the positional arguments, a.detach().clone()")
    _compare_call(t, got[1], 1, (), {"a": y, "b": x_before, "scale": 2.0}, kw_nudge=_KW_NUDGE,
                  copy_nudge="the recorded keyword argument b (the caller's x) changed when the caller "
                             "edited x in place afterwards: store copies of the keyword arguments' "
                             "tensors too, v.detach().clone()")


# Half-right answers: no with_kwargs (keywords never seen); reads args[0] (fails when the layer
# gets keywords only); stores the arguments without copies (the in-place ReLU rewrites them);
# never removes the hook, or removes it without `finally:` (a model that raises leaves it);
# returns a dict or None (expect_type); hidden (inplace_after): copies the positional arguments
# but not the keyword ones, which the caller's later in-place edit shows.


@calls_of.wrong("removes the hook, but not in a finally block", mentions="`finally:` block")
def _no_finally_calls(model, x, layer):
    calls = []
    handle = layer.register_forward_pre_hook(lambda m, args, kwargs: calls.append(
        (tuple(_copy(a) for a in args), {k: _copy(v) for k, v in kwargs.items()})), with_kwargs=True)
    model(x)
    handle.remove()
    return calls


@calls_of.wrong("returns a dict keyed by call number", mentions="is a dict")
def _as_dict(model, x, layer):
    calls = {}
    with layer.register_forward_pre_hook(lambda m, args, kwargs: calls.__setitem__(len(calls), (
            tuple(_copy(a) for a in args), {k: _copy(v) for k, v in kwargs.items()})), with_kwargs=True):
        model(x)
    return calls


@calls_of.wrong("copies the positional arguments but not the keyword ones", mentions="keyword arguments' "
                "tensors too", hidden=True)
def _no_copy_kwargs(model, x, layer):
    calls = []
    with layer.register_forward_pre_hook(lambda m, args, kwargs: calls.append(
            (tuple(_copy(a) for a in args), dict(kwargs))), with_kwargs=True):
        model(x)
    return calls


@calls_of.wrong("registers without with_kwargs", mentions="with_kwargs=True")
def _no_kwargs(model, x, layer):
    calls = []
    with layer.register_forward_pre_hook(lambda m, args: calls.append(
            (tuple(a.detach().clone() for a in args), {}))):
        model(x)
    return calls


@calls_of.wrong("reads args[0], assuming a positional input", mentions="keyword arguments only")
def _args0(model, x, layer):
    calls = []
    with layer.register_forward_pre_hook(lambda m, args: calls.append(
            ((args[0].detach().clone(),), {}))):
        model(x)
    return calls


@calls_of.wrong("stores the arguments without copying them", mentions="lost its negative values")
def _no_copy_args(model, x, layer):
    calls = []
    with layer.register_forward_pre_hook(lambda m, args, kwargs: calls.append((args, dict(kwargs))),
                                         with_kwargs=True):
        model(x)
    return calls


@calls_of.wrong("forgets to remove the hook", mentions="still attached")
def _leaky_calls(model, x, layer):
    calls = []
    layer.register_forward_pre_hook(lambda m, args, kwargs: calls.append(
        (tuple(_copy(a) for a in args), {k: _copy(v) for k, v in kwargs.items()})), with_kwargs=True)
    model(x)
    return calls


# -- predict, then run -----------------------------------------------------------------------

BLOCK_EVENTS = ("block pre-hook", "conv1", "relu", "conv2", "block")


def _observe_block_order() -> list[str]:
    """Hooks on a ResNet BasicBlock: a pre-hook on the block, forward hooks on conv1, relu, conv2
    and the block; the labels in the order they fire during one block(x)."""
    from ..models import BasicBlock

    block, fired = BasicBlock(4, 4, seed=0), []
    handles = [block.register_forward_pre_hook(lambda module, args: fired.append("block pre-hook"))]
    try:
        for name in ("conv1", "relu", "conv2"):
            handles.append(block.get_submodule(name).register_forward_hook(
                lambda module, args, output, name=name: fired.append(name)))
        handles.append(block.register_forward_hook(lambda module, args, output: fired.append("block")))
        block(torch.zeros(1, 4, 4, 4))
    finally:
        for handle in handles:
            handle.remove()
    return fired


block_order = Prediction(
    "forward_hooks.block_order", "Predict: the firing order in a ResNet block",
    task=f"a list of labels, one per hook call, in firing order; the labels: {', '.join(BLOCK_EVENTS)}",
    answer_name="predict_order",
    observe=_observe_block_order,
    choices=BLOCK_EVENTS,
    hints=["Read BasicBlock.forward (hooktutor.models): which modules does it call, in which order, "
           "and how often?",
           "A forward hook runs when its module's forward returns; a container returns after its children."],
    explain={
        "relu": "the block has one self.relu module and calls it twice (after bn1, and after the "
                "addition of the identity); a hook fires on every call, so it fires twice.",
        "block": "a forward hook runs after its module's forward has returned, and the block's forward "
                 "returns only after every child has run: the block's hook comes last.",
        "block pre-hook": "a pre-hook runs before forward starts, so before any child: it comes first.",
        "order": "children fire in the order forward calls them (conv1, relu, conv2, relu), not in the "
                 "order they are defined or printed.",
    },
    summary="pre-hook first, then each child in calling order (the shared ReLU twice), the block's own "
            "forward hook last.",
)
block_order.wrong("the shared ReLU once", ["block pre-hook", "conv1", "relu", "conv2", "block"],
                  "calls it twice")
block_order.wrong("the parent's hook before its children",
                  ["block pre-hook", "block", "conv1", "relu", "conv2", "relu"], "after its module's forward")
block_order.wrong("the pre-hook with the forward hook",
                  ["conv1", "relu", "conv2", "relu", "block pre-hook", "block"], "before forward starts")


# -- a recording context manager, written before capture is used ------------------------------

class _RecorderSolution:
    """``with Recorder(model, names) as rec: model(x)``; then ``rec.outputs[name]`` is a list with a
    copy of the output of every call of that layer. Hooks live only inside the ``with`` block."""

    def __init__(self, model: nn.Module, names: list[str]):
        self.model, self.names = model, list(names)
        self.outputs: dict[str, list[torch.Tensor]] = {name: [] for name in self.names}
        self.handles: list = []

    def __enter__(self) -> "_RecorderSolution":
        for name in self.names:
            def keep(module, args, output, name=name):
                self.outputs[name].append(output.detach().clone())
            self.handles.append(self.model.get_submodule(name).register_forward_hook(keep))
        return self

    def __exit__(self, *exc) -> bool:
        for handle in self.handles:
            handle.remove()
        self.handles.clear()
        return False


recorder = Exercise(
    "forward_hooks.recorder", "Write a recording context manager",
    task=("complete the class Recorder: `with Recorder(model, names) as rec: model(x)` attaches a "
          "forward hook to each named layer on entering (keeping a copy of every call's output in "
          "rec.outputs[name]), and removes every hook it attached on leaving, also when the block "
          "raises, letting the error through"),
    hints=[
        "In __enter__: for each name, module = self.model.get_submodule(name); keep the handle that "
        "module.register_forward_hook(hook) returns in self.handles; return self.",
        "The hook appends output.detach().clone() to self.outputs[name]: a list, so a layer called "
        "twice keeps both outputs; a copy, so a later in-place op cannot change it. Bind the name "
        "with a default argument (def keep(module, args, output, name=name)) or a factory.",
        "In __exit__(self, *exc): remove every handle in self.handles, then return False (or None), "
        "so that an error raised inside the with block still reaches the caller.",
    ],
    solution=_RecorderSolution,
    answer_name="Recorder",
    errors={"'encoder.body.0'": (
        "model.named_children() (or model[i]) lists only the top-level children; a layer inside a "
        "child has a dotted name such as 'encoder.body.0', and model.get_submodule(name) finds it")},
)

# Half-right answers, by dimension (kit.DIMENSIONS): inplace_after (a bare detach()), twice (one
# entry per name), raises (__exit__ returning True swallows the error; a handle kept in one
# attribute leaves all but the last hook), nested (named_children), technique (hooks attached in
# __init__, before the block; or layers run by hand); hidden: two recorders on one model at once
# (an __exit__ that clears the modules' hook dicts wipes the other recorder's hooks).


def _record(t: Tester, answer, model: nn.Module, x: torch.Tensor, names: list[str]) -> object:
    rec = answer(model, names)
    t.expect(not [r for r in list_hooks(model) if not r.is_pytorch], what="hooks attached by Recorder(model, names)",
             expected="none before the with block", got="hooks already attached", nudge=(
                 "attach the hooks in __enter__, not in __init__: a Recorder that is created but "
                 "never entered (or entered later) must not change the model"))
    with kit.HookWitness({n: model.get_submodule(n) for n in names}) as seen:
        with rec as entered:
            model(x)
    t.expect(entered is rec, what="what `with Recorder(...) as rec` gives", expected="the Recorder itself",
             got=type(entered).__name__, nudge="__enter__ must end with `return self`")
    for n in names:
        t.expect(seen.fired(n, "forward") > 0, what=f"forward hooks on {n!r} while it ran",
                 expected="yours", got="none",
                 nudge=f"{n!r} ran without your forward hook: attach it in __enter__ with register_forward_hook")
    outputs = getattr(rec, "outputs", None)
    t.expect_type(outputs, dict, what="rec.outputs", nudge="keep the {name: [outputs]} dict of __init__")
    return outputs


def _expect_calls(t: Tester, outputs: dict, name: str, expected: list[torch.Tensor], nudge: str) -> None:
    got = outputs.get(name)
    t.expect_type(got, list, what=f"rec.outputs[{name!r}]", nudge="append to the list of that name, one entry per call")
    t.expect(len(got) == len(expected), what=f"the calls recorded for {name!r}", expected=len(expected),
             got=len(got), nudge=("a layer called twice in one forward fires its hook twice: append every "
                                  "call's output, do not replace the list"))
    for i, (g, e) in enumerate(zip(got, expected)):
        t.expect_close(g, e, what=f"rec.outputs[{name!r}][{i}]", nudge=nudge, atol=0, rtol=0)


@recorder.case("an MLP: fc1 and act2, called once each")
def _(answer, t: Tester) -> None:
    model, x = t.track(MLP(seed=5), "the MLP"), torch.randn(3, 8, generator=torch.Generator().manual_seed(5))
    outputs = _record(t, answer, model, x, ["fc1", "act2"])
    _, ref = model.forward_with_intermediates(x)
    for n in ("fc1", "act2"):
        _expect_calls(t, outputs, n, [ref[n]], "store the layer's output as it left the layer: output.detach().clone()")


@recorder.case("a nested model: layers named encoder.body.0 and head")
def _(answer, t: Tester) -> None:
    model, x = t.track(kit.Nested(seed=6), "a nested model"), kit.randn(2, 4, seed=6)
    outputs = _record(t, answer, model, x, ["encoder.body.0", "head"])
    ref = model.intermediates(x)
    for n in ("encoder.body.0", "head"):
        _expect_calls(t, outputs, n, [ref[n]],
                      "find each layer with model.get_submodule(name): it follows dotted names")


@recorder.case("a layer called twice in one forward")
def _(answer, t: Tester) -> None:
    model, x = t.track(kit.Twice(seed=7), "a model that calls one Linear twice"), kit.randn(2, 4, seed=7)
    outputs = _record(t, answer, model, x, ["block"])
    _expect_calls(t, outputs, "block", [out for _, out in model.block_calls(x)],
                  "keep every call's output, in calling order")


@recorder.case("an in-place ReLU right after the layer")
def _(answer, t: Tester) -> None:
    model, x = t.track(kit.InplaceAfter(seed=8), "a Linear followed by ReLU(inplace=True)"), kit.randn(4, 3, seed=8)
    outputs = _record(t, answer, model, x, ["lin"])
    _expect_calls(t, outputs, "lin", [model.lin.forward(x).detach()], (
        "the in-place ReLU wrote into the tensor you kept: output.detach() shares its memory. "
        "Store output.detach().clone(), a copy"))


@recorder.case("the model raises inside the with block")
def _(answer, t: Tester) -> None:
    model = t.track(kit.Raising(seed=9), "a model that raises halfway (after fc1)")
    raised = False
    try:
        with answer(model, ["fc1"]):
            model(torch.zeros(1, 4))
    except kit.KitError:
        raised = True
    t.expect(raised, what="the model's error", expected="raised out of the with block", got="swallowed",
             nudge="__exit__ returned True, which tells Python to hide the error; return False (or "
                   "nothing) after removing the hooks, so the caller sees what went wrong")
    left = [r for r in list_hooks(model) if not r.is_pytorch]
    t.expect(not left, what="hooks left on the model after the with block", expected="none",
             got=f"{len(left)} hook(s)", nudge="remove every handle you kept in __exit__")


@recorder.case("two recorders on one model at once: leaving the inner one keeps the outer one", hidden=True)
def _(answer, t: Tester) -> None:
    model, x = t.track(MLP(seed=10), "the MLP"), torch.ones(1, 8)
    outer_rec, inner_rec = answer(model, ["fc1"]), answer(model, ["fc1", "fc2"])
    with outer_rec:
        with inner_rec:
            model(x)
        model(x)      # the outer recorder is still on: it must see this call too
    outer = getattr(outer_rec, "outputs", {}).get("fc1", [])
    t.expect(len(outer) == 2, what="calls of fc1 the outer recorder kept", expected=2, got=len(outer), nudge=(
        "leaving the inner recorder removed the outer one's hook too: remove only the handles this "
        "recorder attached (handle.remove()), never every hook of the module"))


@recorder.wrong("stores output.detach() without a copy", mentions="shares its memory")
class _NoCopy(_RecorderSolution):
    def __enter__(self):
        for name in self.names:
            def keep(module, args, output, name=name):
                self.outputs[name].append(output.detach())
            self.handles.append(self.model.get_submodule(name).register_forward_hook(keep))
        return self


@recorder.wrong("keeps one entry per name", mentions="fires its hook twice")
class _LastOnly(_RecorderSolution):
    def __enter__(self):
        for name in self.names:
            def keep(module, args, output, name=name):
                self.outputs[name] = [output.detach().clone()]
            self.handles.append(self.model.get_submodule(name).register_forward_hook(keep))
        return self


@recorder.wrong("__exit__ returns True", mentions="hide the error")
class _Swallows(_RecorderSolution):
    def __exit__(self, *exc):
        super().__exit__(*exc)
        return True


@recorder.wrong("keeps only the last handle", mentions="left a hook attached")
class _OneHandle(_RecorderSolution):
    def __enter__(self):
        for name in self.names:
            def keep(module, args, output, name=name):
                self.outputs[name].append(output.detach().clone())
            self.handle = self.model.get_submodule(name).register_forward_hook(keep)
        return self

    def __exit__(self, *exc):
        self.handle.remove()
        return False


@recorder.wrong("attaches the hooks in __init__", mentions="not in __init__")
class _InInit(_RecorderSolution):
    def __init__(self, model, names):
        super().__init__(model, names)
        super().__enter__()

    def __enter__(self):
        return self


@recorder.wrong("looks the names up in model.named_children()", mentions="get_submodule")
class _Children(_RecorderSolution):
    def __enter__(self):
        children = dict(self.model.named_children())
        for name in self.names:
            def keep(module, args, output, name=name):
                self.outputs[name].append(output.detach().clone())
            self.handles.append(children[name].register_forward_hook(keep))
        return self


@recorder.wrong("calls remove_hooks(model) on leaving", mentions="only the handles", hidden=True)
class _RemovesAll(_RecorderSolution):
    def __exit__(self, *exc):
        remove_hooks(self.model)
        self.handles.clear()
        return False
