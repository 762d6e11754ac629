"""08_training_hooks, exercise: training_hooks.load_renamed."""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable

import torch
from torch import nn

from ...inventory import hook_ids
from ...models import MLP, seeded
from .. import kit
from ..core import Exercise, Tester, learners_hooks


def load_renamed(model, state_dict, renames):
    """Load an old checkpoint into model, renaming layers old -> new with a load pre-hook."""
    ### BEGIN SOLUTION
    def rename(module, state_dict, prefix, *args):
        # every new key first, then swap them in: a new name may be another layer's old name
        renamed = {".".join(renames.get(part, part) for part in key.split(".")): value
                   for key, value in state_dict.items()}
        state_dict.clear()
        state_dict.update(renamed)

    register = getattr(model, "register_load_state_dict_pre_hook", None)  # torch >= 2.5
    handle = register(rename) if register else model._register_load_state_dict_pre_hook(rename, with_module=True)
    try:
        return model.load_state_dict(state_dict)
    finally:
        handle.remove()
    ### END SOLUTION


def register_load_pre_hook(module: nn.Module, hook: Callable):
    """``module.register_load_state_dict_pre_hook(hook)`` (public since torch 2.5), or the
    private ``_register_load_state_dict_pre_hook(hook, with_module=True)`` before that: the
    same hook, ``hook(module, state_dict, prefix, local_metadata, strict, missing_keys,
    unexpected_keys, error_msgs)``. Used in ``08_training_hooks.ipynb``."""
    public = getattr(module, "register_load_state_dict_pre_hook", None)
    if public is not None:
        return public(hook)
    return module._register_load_state_dict_pre_hook(hook, with_module=True)


exercise = Exercise(
    "training_hooks.load_renamed", "Load a checkpoint whose layers were renamed",
    task=("write load_renamed(model, state_dict, renames) that loads `state_dict`, an old checkpoint, into "
          "`model`, whose layers were renamed since: `renames` maps an old layer name to its new name, "
          "wherever it appears in a key. Do it with a load-state-dict pre-hook on `model` that renames the keys, "
          "call model.load_state_dict(state_dict) (strict), remove the hook (also when loading fails) and "
          "return what load_state_dict returned"),
    hints=[
        "model.register_load_state_dict_pre_hook(hook) (torch 2.5 and newer; before: "
        "model._register_load_state_dict_pre_hook(hook, with_module=True)) calls hook(module, state_dict, "
        "prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs) before the model reads "
        "the checkpoint.",
        "The hook's return value is ignored: edit state_dict in place. It is load_state_dict's own copy, "
        "so the caller's dict stays as it was. Build the renamed dict first, then state_dict.clear() and "
        "state_dict.update(renamed): renaming one key at a time overwrites a key when a new name is "
        "another layer's old name (a layer inserted in front: {'0': '1', '1': '2'}).",
        "Rename whole parts of the dotted key, not substrings: '.'.join(renames.get(part, part) for part in "
        "key.split('.')). Load in try:, remove the handle in finally:.",
    ],
    solution=load_renamed,
    equivalent_mutants={
        "logic@12: True -> False": (
            "with_module only reaches the private registration that torch before 2.5 needs; "
            "the pinned torch takes the public one"
        ),
    },
    guide="""renaming in a load *post*-hook (the model has already read the old keys); returning a
    renamed dict from the pre-hook (its return value is ignored: edit `state_dict` in
    place); renaming only the first part of each key (nested layers keep their old names);
    renaming with `str.replace` (`fc_out` is not `fc`); building a renamed dict without a
    hook; removing the hook without `finally:` (a load that fails leaves it).""",
)


class _OldMLP(nn.Module):
    """What MLP was called before a refactor: hidden1, hidden2, out (no parameters in the activations)."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        new = MLP(seed=seed)
        self.hidden1, self.hidden2, self.out = new.fc1, new.fc2, new.head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.hidden2(torch.relu(self.hidden1(x)))))


def _load_case(answer: Callable, t: Tester, model: nn.Module, old: dict, renames: dict, what: str,
               want: dict | None = None) -> None:
    """Load ``old`` into ``model`` through the answer; every parameter must be the checkpoint's."""
    given = OrderedDict((k, v.clone()) for k, v in old.items())
    mine: set[int] = set()
    seen: list[int] = []

    def witness(module, incompatible_keys):  # a load post-hook: is the learner's pre-hook attached now?
        seen.append(len(hook_ids(module, "load_state_dict_pre") - mine))

    handle = model.register_load_state_dict_post_hook(witness)
    mine.add(handle.id)
    try:
        got = answer(model, given, renames)
    except RuntimeError as error:
        if "Missing key(s) in state_dict" not in str(error):
            raise
        t.expect(False, what="model.load_state_dict inside load_renamed", expected="every key found",
                 got=str(error).splitlines()[-2].strip()[:160], nudge=_missing_keys_nudge(str(error), renames, seen))
    finally:
        handle.remove()
    t.expect(got is not None and hasattr(got, "missing_keys"), what=what,
             expected="what model.load_state_dict returns", got=got,
             nudge="return the result of model.load_state_dict(state_dict)")
    t.expect(list(given) == list(old), what="the keys of the caller's checkpoint after the call",
             expected=list(old), got=list(given),
             nudge="leave the caller's dict alone: the hook renames the copy that load_state_dict passes it")
    t.expect(bool(seen) and seen[-1] >= 1, what="a load_state_dict pre-hook on the model while it loaded",
             expected="one of yours", got="none", nudge=(
                 "rename the keys in a hook registered with model.register_load_state_dict_pre_hook, not by "
                 "building a renamed dict before calling load_state_dict"))
    want = want if want is not None else {".".join(renames.get(p, p) for p in k.split(".")): v for k, v in old.items()}
    for key, value in model.state_dict().items():
        t.expect(torch.equal(value, want[key]), what=f"model.state_dict()[{key!r}]", expected="the checkpoint's",
                 got="another tensor", nudge="every parameter must come from the checkpoint")


def _missing_keys_nudge(message: str, renames: dict, seen: list[int]) -> str:
    """Name the mistake from the keys a strict load found unexpected."""
    if seen and seen[-1] and set(renames.values()) & set(renames):
        return ("a new name here is another layer's old name ({'0': '1', '1': '2'}: a layer was inserted in "
                "front), so renaming one key at a time overwrote a key you still needed: build the whole "
                "renamed dict first, then state_dict.clear() and state_dict.update(renamed)")
    unexpected = re.findall(r'"([^"]+)"', message.split("Unexpected key(s) in state_dict:")[-1])
    parts = [key.split(".") for key in unexpected]
    if not (seen and seen[-1]):
        return ("the model read the old keys: rename them in a load_state_dict pre-hook, which runs before the "
                "model reads the checkpoint (a post-hook runs after it)")
    if any(part in renames for key in parts for part in key[1:]):
        return "rename every part of the dotted key (nested layers: encoder.layers.0.weight), not just the first"
    if any(new in part and part not in renames.values() for key in parts for part in key for new in renames.values()):
        return ("rename whole parts of the key, not substrings: 'fc_out' is not the layer 'fc' "
                "(split the key at '.' and map each part)")
    return ("your pre-hook ran, but the keys stayed old: edit state_dict in place (state_dict[new] = "
            "state_dict.pop(old)); the hook's return value is ignored")


@exercise.case("an MLP whose layers hidden1, hidden2, out became fc1, fc2, head")
def _(answer, t: Tester) -> None:
    model = t.track(MLP(seed=10), "the new MLP")
    old = _OldMLP(seed=4).state_dict()
    _load_case(answer, t, model, old, {"hidden1": "fc1", "hidden2": "fc2", "out": "head"}, "load_renamed(mlp, ...)")


@exercise.case("a nested model whose inner Sequential 'layers' became 'body' (keys like encoder.layers.0.weight)")
def _(answer, t: Tester) -> None:
    model = t.track(kit.Nested(seed=11), "the nested model")
    old = {k.replace("encoder.body.", "encoder.layers."): v for k, v in kit.Nested(seed=5).state_dict().items()}
    _load_case(answer, t, model, old, {"layers": "body"}, "load_renamed(nested, ...)")


@exercise.case("a checkpoint of another shape: loading raises, and no hook may stay")
def _(answer, t: Tester) -> None:
    model = t.track(MLP(seed=12), "the new MLP")
    old = _OldMLP(seed=6).state_dict()
    old["hidden1.weight"] = torch.zeros(3, 3)
    try:
        answer(model, old, {"hidden1": "fc1", "hidden2": "fc2", "out": "head"})
    except RuntimeError as error:
        t.expect("size mismatch" in str(error), what="the error load_state_dict raised", expected="size mismatch",
                 got=str(error).splitlines()[0][:120], nudge="rename the keys; let the size mismatch through")
    left = learners_hooks(model)
    t.expect(not left, what="hooks left on the model after loading failed", expected="none",
             got=f"{len(left)} hook(s)", nudge=(
                 "load_state_dict raised, and your hook stayed: remove the handle in the finally: of a try: "
                 "around model.load_state_dict"))


class _FcAndFcOut(nn.Module):
    def __init__(self, first: str, seed: int) -> None:
        super().__init__()
        with seeded(seed):
            self.add_module(first, nn.Linear(4, 4))
            self.fc_out = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc_out(next(iter(self.children()))(x))


@exercise.case("renames {'fc': 'linear'} next to a layer called fc_out, which keeps its name", hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(_FcAndFcOut("linear", seed=13), "the model")
    old = _FcAndFcOut("fc", seed=7).state_dict()
    _load_case(answer, t, model, old, {"fc": "linear"}, "load_renamed(model, ...)")


def _renamer(renames: dict) -> Callable:
    def rename(module, state_dict, prefix, *args):
        for key in list(state_dict):
            state_dict[".".join(renames.get(p, p) for p in key.split("."))] = state_dict.pop(key)
    return rename


@exercise.wrong("renames in a load_state_dict post-hook", mentions="pre-hook")
def _renames_after(model, state_dict, renames):
    def post(module, incompatible_keys):
        _renamer(renames)(module, state_dict, "")
    handle = model.register_load_state_dict_post_hook(post)
    try:
        return model.load_state_dict(state_dict)
    finally:
        handle.remove()


@exercise.wrong("returns a renamed dict from the pre-hook instead of editing it", mentions="in place")
def _returns_new_dict(model, state_dict, renames):
    def rename(module, state_dict, prefix, *args):
        return {".".join(renames.get(p, p) for p in k.split(".")): v for k, v in state_dict.items()}
    handle = register_load_pre_hook(model, rename)
    try:
        return model.load_state_dict(state_dict)
    finally:
        handle.remove()


@exercise.wrong("renames only the first part of each key", mentions="every part of the dotted key")
def _first_part_only(model, state_dict, renames):
    def rename(module, state_dict, prefix, *args):
        for key in list(state_dict):
            first, _, rest = key.partition(".")
            state_dict[f"{renames.get(first, first)}.{rest}"] = state_dict.pop(key)
    handle = register_load_pre_hook(model, rename)
    try:
        return model.load_state_dict(state_dict)
    finally:
        handle.remove()


@exercise.wrong("renames the caller's dict before loading, without a hook",
                    mentions="register_load_state_dict_pre_hook")
def _no_hook(model, state_dict, renames):
    renamed = {".".join(renames.get(p, p) for p in k.split(".")): v for k, v in state_dict.items()}
    return model.load_state_dict(renamed)


@exercise.wrong("removes the hook after loading, not in a finally:", mentions="finally:")
def _no_finally(model, state_dict, renames):
    handle = register_load_pre_hook(model, _renamer(renames))
    result = model.load_state_dict(state_dict)
    handle.remove()
    return result


@exercise.wrong("renames with str.replace on the whole key", mentions="not substrings", hidden=True)
def _str_replace(model, state_dict, renames):
    def rename(module, state_dict, prefix, *args):
        for key in list(state_dict):
            new = key
            for old_name, new_name in renames.items():
                new = new.replace(old_name, new_name)
            state_dict[new] = state_dict.pop(key)
    handle = register_load_pre_hook(model, rename)
    try:
        return model.load_state_dict(state_dict)
    finally:
        handle.remove()


@exercise.case("a layer inserted in front: renames {'0': '1', '1': '2'}, each new name another's old one",
                hidden=True)
def _(answer, t: Tester) -> None:
    with seeded(16):
        old_model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
        model = nn.Sequential(nn.Identity(), nn.Linear(3, 4), nn.Linear(4, 2))
    t.track(model, "the model with an Identity inserted in front")
    _load_case(answer, t, model, old_model.state_dict(), {"0": "1", "1": "2"}, "load_renamed(model, ...)")
