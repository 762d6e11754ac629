"""02_forward_hooks, exercise: forward_hooks.extract_features."""

from __future__ import annotations

import torch
from torch import nn

from ...models import MLP, set_inplace
from .. import kit
from ..core import Exercise, Tester


def extract_features(model, x, names):
    """{name: [copy of the output of each call of model.get_submodule(name)]}, hooks removed."""
    ### BEGIN SOLUTION
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
    ### END SOLUTION


exercise = Exercise(
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
    solution=extract_features,
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
    guide="""storing `output.detach()` without `.clone()`, so a later `ReLU(inplace=True)` rewrites the
    stored tensor; keeping one tensor per name, so a layer called twice keeps only its last
    call (append to a list); removing the hooks only when the model succeeds.""",
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


@exercise.case("an MLP: fc1 and act2, each called once")
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


@exercise.case("an MLP whose ReLUs are in place (ReLU(inplace=True))")
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


@exercise.case("a layer called twice in one forward")
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


@exercise.case("hooks are removed even when the model raises")
def _(answer, t: Tester) -> None:
    model = t.track(MLP(seed=7), "the MLP")
    wrong_width = torch.zeros(2, 5)
    try:
        answer(model, wrong_width, ["fc1", "head"])
    except RuntimeError:
        pass  # the model cannot take this input; what matters is what stays attached


@exercise.case("a nested model: layers named encoder.body.0 and head")
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


@exercise.case("a module held under two names (block and alias), called twice", hidden=True)
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


@exercise.wrong("looks the names up in model.named_children()", mentions="get_submodule")
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


@exercise.wrong("runs the named layers by hand, without hooks", mentions="without a forward hook")
def _by_hand(model, x, names):
    features = {name: [] for name in names}
    for name, layer in model.named_modules():
        if not list(layer.children()):
            x = layer(x)
            if name in features:
                features[name].append(x.detach().clone())
    return features


@exercise.wrong("finds the layers in dict(model.named_modules())", mentions="named_modules()",
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


@exercise.wrong("stores output.detach() without a copy", mentions="in-place ReLU")
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


@exercise.wrong("keys by name and keeps only the last call", mentions="called twice")
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


@exercise.wrong("removes the hooks only when the model succeeds", mentions="still attached")
def _no_finally(model, x, names):
    features = {name: [] for name in names}
    handles = [model.get_submodule(name).register_forward_hook(
        lambda m, a, o, name=name: features[name].append(o.detach().clone())) for name in names]
    model(x)
    for h in handles:
        h.remove()
    return features


@exercise.case("what is kept holds no autograd graph (fc1's output requires grad)")
def _(answer, t: Tester) -> None:
    model = t.track(MLP(seed=7), "the MLP")
    got = _expect_feature_dict(t, answer(model, kit.randn(2, 8, seed=7), ["fc1"]), ["fc1"])
    for i, value in enumerate(got["fc1"]):
        kit.expect_detached(t, value, what=f"features['fc1'][{i}]")
