"""02_forward_hooks, exercise 1: extract the features of chosen layers.

Half-right answers an examiner expects, by kit dimension (``kit.DIMENSIONS``):

- inplace_after: stores ``output.detach()`` without a copy, which the in-place ReLU after the
  layer rewrites;
- detached: stores ``output.clone()``, which keeps the autograd graph of the forward;
- twice: keys by name and keeps only the last call of a layer called twice;
- raises: removes the hooks without ``finally:``, so a model that raises leaves them; catches the
  model's error and returns the features of a forward that never finished;
- nested: looks the names up with ``getattr`` or ``named_children()``, missing dotted names;
- left_as_found: calls ``model.eval()`` and leaves it so; clears the layers' ``_forward_hooks``,
  which removes the caller's own hooks too;
- technique: runs the layers one by one by hand, no hook;
- a layer that does not run (an auxiliary head in eval mode): fills the dict lazily
  (``features.setdefault(name, [])``), so that layer's key is missing instead of ``[]``;
- alias / dtype (hidden): a residual model in float64 whose ``body`` output is added to in
  place after its hook ran;
- hidden: looks the names up in ``dict(model.named_modules())``, which lists a module held
  under two names only once, or keeps the handles in a dict keyed by module (one name is lost).
"""

from __future__ import annotations

import torch
from torch import nn

from ...models import MLP, set_inplace
from .. import kit
from ..core import Exercise, Tester
from ._shared import CallerHooks


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
          "name -> list of that layer's outputs, one detached copy per call (no autograd graph), in "
          "call order; every hook is removed afterwards. Each named layer returns one tensor (not a "
          "tuple, as nn.LSTM or nn.GRU do)"),
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
    equivalent_mutants={},
    guide="""storing `output.detach()` without `.clone()`, so a later `ReLU(inplace=True)` rewrites
    the stored tensor; keeping one tensor per name, so a layer called twice keeps only its last
    call (append to a list); `output.clone()`, which keeps the autograd graph; removing the hooks
    only when the model succeeds, or catching the model's error and returning the features of a
    forward that never finished (the error must reach the caller), or by clearing the layers'
    `_forward_hooks` (the caller's own hooks go too); calling `model.eval()` and leaving it so; looking the names up in
    `named_children()` (dotted names are missed) or, caught at grading, in
    `dict(model.named_modules())`, which lists a module held under two names once, or keeping the
    handles in a dict keyed by module (one is lost). Also at grading: a residual model in float64
    whose layer output is changed in place after the hook ran, which a float32 copy or a cast
    input gets wrong. And a dict filled lazily (`features.setdefault(name, [])`) has no key for a
    layer that did not run (an auxiliary head in eval mode) instead of an empty list.""",
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
    missing = [n for n in names if n not in got]
    t.expect(not missing or set(got) - set(names), what="the keys of the dict", expected=sorted(names),
             got=sorted(got), nudge=(
                 f"{missing[0]!r} did not run in this forward, and its key is missing: every name gets "
                 "its key, with an empty list for a layer that was not called (start from "
                 "{name: [] for name in names})") if missing else "")
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
    with kit.LeftAsFound(t, model, name="the MLP (in train mode)"):
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
        kit.expect_detached(t, got[name][0], what=f"features[{name!r}][0]")


@exercise.case("an MLP whose ReLUs are in place (ReLU(inplace=True))")
def _(answer, t: Tester) -> None:
    reference = MLP(seed=5)
    model = t.track(MLP(seed=5), "the MLP with in-place ReLUs")
    set_inplace(model, True)
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(5))
    _, inter = reference.forward_with_intermediates(x)
    with CallerHooks(t, {"fc1": model.fc1, "fc2": model.fc2}):
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
        got = answer(model, wrong_width, ["fc1", "head"])
    except RuntimeError:
        return  # the model cannot take this input: the error reaches the caller, as it must
    t.expect(False, what="what extract_features did when the model raised",
             expected="the model's error, let through", got=f"it returned {got!r}"[:120], nudge=(
                 "model(x) raised, and your answer returned features as if the forward had worked: "
                 "the caller never learns that it failed. Let the error through: remove the hooks "
                 "in the `finally:` block of a try: around model(x), with no `except`"))


@exercise.case("a nested model in eval mode: layers named encoder.body.0, encoder.act and head")
def _(answer, t: Tester) -> None:
    model = t.track(kit.Nested(seed=13).eval(), "a nested model")
    x = kit.randn(3, 4, seed=13)
    names = ["encoder.body.0", "encoder.act", "head"]
    with kit.LeftAsFound(t, model, name="the nested model (in eval mode)"):
        got = _watched(t, answer, model, x, names)
    inter = model.intermediates(x)
    for name in names:
        t.expect(len(got[name]) == 1, what=f"len(features[{name!r}])", expected=1, got=len(got[name]),
                 nudge="run model(x) exactly once and append once per call of the hook")
        t.expect_close(got[name][0], inter[name], what=f"features[{name!r}][0]",
                       nudge="hook model.get_submodule(name), the layer with that dotted name")


class _AuxHead(nn.Module):
    """An Inception-style auxiliary head: ``aux`` runs in train mode only."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(16)
        self.body, self.aux, self.head = nn.Linear(4, 4), nn.Linear(4, 2), nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.body(x))
        out = self.head(h)
        return out + self.aux(h) if self.training else out


@exercise.case("a model in eval mode whose auxiliary head `aux` does not run")
def _(answer, t: Tester) -> None:
    with torch.random.fork_rng():
        model = t.track(_AuxHead().eval(), "a model with an auxiliary head (in eval mode)")
    x = kit.randn(3, 4, seed=16)
    got = _watched(t, answer, model, x, ["body", "aux"])
    t.expect(got["aux"] == [], what="features['aux']", expected="[]", got=f"{len(got['aux'])} tensor(s)",
             nudge="`aux` is not called in eval mode, so its hook never fires: its list stays empty")
    t.expect_close(got["body"][0] if got["body"] else torch.zeros(0), model.body(x).detach(),
                   what="features['body'][0]", nudge="store the output argument of the hook for that layer")


@exercise.case("a module held under two names (block and alias), called twice", hidden=True)
def _(answer, t: Tester) -> None:
    model = kit.Twice(seed=14)
    model.alias = model.block          # the same Linear, registered a second time
    t.track(model, "a model holding `block` also as `alias`")
    x = kit.randn(2, 4, seed=14)
    calls = model.block_calls(x)
    got = _watched(t, answer, model, x, ["block", "alias", "out"])
    for name in ("block", "alias"):
        t.expect(len(got[name]) == 2, what=f"len(features[{name!r}])", expected=2, got=len(got[name]),
                 nudge=f"`{name}` is the module called twice in one forward: keep both calls under each name")
        for i in range(2):
            t.expect_close(got[name][i], calls[i][1], what=f"features[{name!r}][{i}]",
                           nudge="keep the calls in the order they happen")


@exercise.case("a residual model in float64: the output of `body` is added to in place after its hook ran",
               hidden=True)
def _(answer, t: Tester) -> None:
    model, x = kit.in_dtype(kit.Residual(seed=15), kit.randn(3, 4, seed=15))
    t.track(model, "a residual model in float64")
    want = model.outputs(x)
    got = _watched(t, answer, model, x, ["fc", "body"])
    for name in ("fc", "body"):
        t.expect(len(got[name]) == 1, what=f"len(features[{name!r}])", expected=1, got=len(got[name]),
                 nudge="run model(x) exactly once and append once per call of the hook")
        t.expect(got[name][0].dtype == torch.float64, what=f"the dtype of features[{name!r}][0]",
                 expected=torch.float64, got=got[name][0].dtype,
                 nudge="keep each output as the layer produced it, dtype included: output.detach().clone()")
        t.expect_close(got[name][0], want[name], what=f"features[{name!r}][0]", atol=1e-12, rtol=1e-12, nudge=(
            "the model added to the output in place after your hook ran, and what you stored changed with it: "
            "store output.detach().clone(), a copy with its own memory"))


# -- the wrong answers peculiar to this exercise -------------------------------------------------

def _extractor(*, lookup="get_submodule", keep=lambda o: o.detach().clone(), append=True, remove="finally"):
    """One factory for the near-copy wrong answers: how a name finds its layer ("get_submodule",
    "named_children", "named_modules"), what the hook keeps, whether it appends to the list or
    replaces it, and how the hooks are removed ("finally", or "after": not in a finally block)."""
    def answer(model, x, names):
        layers = {"named_children": lambda: dict(model.named_children()),
                  "named_modules": lambda: dict(model.named_modules())}.get(lookup)
        find = model.get_submodule if layers is None else layers().__getitem__
        features = {name: [] for name in names}

        def save(name, output):
            if append:
                features[name].append(keep(output))
            else:
                features[name] = [keep(output)]
        handles = [find(name).register_forward_hook(lambda m, a, o, name=name: save(name, o)) for name in names]
        if remove == "finally":
            try:
                model(x)
            finally:
                for h in handles:
                    h.remove()
        else:
            model(x)
            for h in handles:
                h.remove()
        return features
    return answer


exercise.wrong("looks the names up in model.named_children()", mentions="get_submodule")(
    _extractor(lookup="named_children"))
exercise.wrong("finds the layers in dict(model.named_modules())", mentions="named_modules()", hidden=True)(
    _extractor(lookup="named_modules"))
exercise.wrong("stores output.detach() without a copy", mentions="in-place ReLU")(
    _extractor(keep=lambda o: o.detach()))
exercise.wrong("keys by name and keeps only the last call", mentions="called twice")(_extractor(append=False))
exercise.wrong("removes the hooks only when the model succeeds", mentions="still attached")(
    _extractor(remove="after"))


@exercise.wrong("catches the model's error and returns what it recorded", mentions="never learns")
def _(model, x, names):
    features = {name: [] for name in names}
    handles = [model.get_submodule(name).register_forward_hook(
        lambda module, args, output, name=name: features[name].append(output.detach().clone()))
        for name in names]
    try:
        model(x)
    except Exception:
        pass
    finally:
        for handle in handles:
            handle.remove()
    return features


@exercise.wrong("fills the dict lazily with features.setdefault(name, [])", mentions="empty list")
def _lazy_keys(model, x, names):
    features, handles = {}, []
    for name in names:
        handles.append(model.get_submodule(name).register_forward_hook(
            lambda m, a, o, name=name: features.setdefault(name, []).append(o.detach().clone())))
    try:
        model(x)
    finally:
        for handle in handles:
            handle.remove()
    return features


@exercise.wrong("calls model.eval() and never switches it back", mentions="as you found it")
def _eval_mode(model, x, names):
    model.eval()
    return extract_features(model, x, names)


@exercise.wrong("removes the hooks by clearing each layer's _forward_hooks", mentions="a hook it did not attach")
def _clears_hook_dicts(model, x, names):
    features = _extractor(remove="never")(model, x, names)
    for name in names:
        model.get_submodule(name)._forward_hooks.clear()
    return features


@exercise.wrong("keeps the handles in a dict keyed by module", mentions="still attached", hidden=True)
def _handles_by_module(model, x, names):
    features, handles = {name: [] for name in names}, {}
    for name in names:
        layer = model.get_submodule(name)
        handles[layer] = layer.register_forward_hook(
            lambda m, a, o, name=name: features[name].append(o.detach().clone()))
    try:
        model(x)
    finally:
        for handle in handles.values():
            handle.remove()
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
