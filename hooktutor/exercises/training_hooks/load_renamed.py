"""08_training_hooks, exercise 2: load an old checkpoint whose layers were renamed, through a
load-state-dict pre-hook.

Half-right answers an examiner expects, by kit dimension (``kit.DIMENSIONS``):

- technique: renames in a load *post*-hook (the model has read the old keys by then); builds a
  renamed dict and loads it, with no hook, or with a pre-hook that renames nothing (the check's
  own pre-hook, registered first, sees the keys load_state_dict was given); returns a renamed
  dict from the pre-hook (its return value is ignored);
- nested: renames only the first part of each key (``encoder.layers.0.weight`` keeps ``layers``);
- order: renames in place, one key at a time: when a new name is another layer's old name (a
  layer inserted in front, ``{'0': '1', '1': '2'}``), a rename overwrites a key not renamed yet;
  walking the keys backwards only moves the collision (a layer removed in front);
- order: applies the renames one after another, on parts already renamed (``0 -> 1 -> 2``);
- substrings: ``str.replace`` on the whole key (``fc_out`` is not the layer ``fc``, nor is
  ``skip_fc``: a replace of ``'fc.'`` still renames it); a regex over the dots that renames only the
  first of two equal parts (``block.block.weight``); a word-boundary regex ``\\bfc\\b`` (``fc_out`` keeps
  its name, but ``fc-skip`` does not: ``-`` is no word character, and a layer name may hold one);
- strict: ``strict=False`` (a checkpoint that lacks a key loads without a word); ``assign=True``
  (the checkpoint's tensors replace the model's parameters, which an optimizer still holds);
- raises: removes the hook after loading, not in ``finally:`` (a load that fails leaves it);
- left_as_found: the model's train/eval mode, its buffers (a BatchNorm's running statistics are
  keys too) and the caller's dict as they were;
- repeat: a second load into the same model reads the second checkpoint.
"""

from __future__ import annotations

import functools
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
        # take every key out first: a new name may be another layer's old name
        # ({"0": "1", "1": "2"})
        old = [(key, state_dict.pop(key)) for key in list(state_dict)]
        for key, value in old:
            parts = [renames.get(part, part) for part in key.split(".")]
            state_dict[".".join(parts)] = value

    register = getattr(model, "register_load_state_dict_pre_hook", None)  # torch >= 2.5
    if register:
        handle = register(rename)
    else:
        handle = model._register_load_state_dict_pre_hook(rename, with_module=True)
    try:
        return model.load_state_dict(state_dict)
    finally:
        handle.remove()
    ### END SOLUTION


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
        "the checkpoint (its strict is always True: load_state_dict applies strict itself, afterwards).",
        "The hook's return value is ignored: edit state_dict in place. It is load_state_dict's own shallow "
        "copy: moving keys leaves the caller's dict as it was (its tensors are the caller's: do not change "
        "them in place). Pop every key out first, then put each value back under its new "
        "key: a new name may be another layer's old name (a layer inserted in front renames '0' to '1' and "
        "'1' to '2').",
        "Rename whole parts of the dotted key, not substrings: '.'.join(renames.get(part, part) for part in "
        "key.split('.')). Load in try:, remove the handle in finally:.",
    ],
    solution=load_renamed,
    equivalent_mutants={
        "logic@16: True -> False": "the fallback for torch < 2.5 (the private registration) never runs on "
                                   "the torch these tests run on, which has the public method",
    },
    guide="""renaming in a load *post*-hook (the model has already read the old keys); returning a
    renamed dict from the pre-hook (its return value is ignored: edit `state_dict` in place);
    renaming only the first part of each key (nested layers keep their old names); renaming in
    place one key at a time, which overwrites a key when a new name is another layer's old name (a
    layer inserted in front: `{'0': '1', '1': '2'}`; walking the keys backwards fails when a layer
    is removed in front); applying the renames one after another (`0 -> 1 -> 2`); renaming with
    `str.replace` (`fc_out` is not `fc`) or a `\\b` regex (`fc-skip` is not `fc` either); building
    a renamed dict without a hook; removing the hook without `finally:` (a load that fails leaves
    it); `strict=False` (a missing key goes unnoticed) or `assign=True` (the model's parameters are
    replaced under the optimizer).""",
)


class _OldMLP(nn.Module):
    """What MLP was called before a refactor: hidden1, hidden2, out (no parameters in the activations)."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        new = MLP(seed=seed)
        self.hidden1, self.hidden2, self.out = new.fc1, new.fc2, new.head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.hidden2(torch.relu(self.hidden1(x)))))


def _renamed(old: dict, renames: dict) -> dict:
    """The checkpoint's keys as the new model names them, computed apart from any answer."""
    out = {}
    for key, value in old.items():
        out[".".join(renames[p] if p in renames else p for p in key.split("."))] = value
    return out


def _load_case(answer: Callable, t: Tester, model: nn.Module, old: dict, renames: dict, what: str) -> None:
    """Load ``old`` into ``model`` through the answer; every parameter and buffer must be the
    checkpoint's, the model in the mode it was, the caller's dict untouched."""
    given = OrderedDict((k, v.clone()) for k, v in old.items())
    mine: set[int] = set()
    seen: list[int] = []
    entered: list[list[str]] = []  # the keys each load began with

    def witness(module, incompatible_keys):  # a load post-hook: is the learner's pre-hook attached now?
        seen.append(len(hook_ids(module, "load_state_dict_pre") - mine))

    def entering(module, state_dict, prefix, *rest):  # registered before the learner's: runs first
        entered.append(list(state_dict))  # the keys load_state_dict was given, before any renaming

    own = model.state_dict(keep_vars=True)
    handle = model.register_load_state_dict_post_hook(witness)
    mine.add(handle.id)
    first = _register_pre(model, entering)
    mine.add(first.id)
    try:
        with kit.LeftAsFound(t, model):
            got = answer(model, given, renames)
    except RuntimeError as error:
        # every checkpoint here fits the model once renamed: a missing key, or a size mismatch (a
        # value under another layer's name), is the renaming's doing
        message = str(error)
        if "Missing key(s) in state_dict" not in message and "size mismatch" not in message:
            raise
        line = next((ln.strip() for ln in message.splitlines() if "Missing key(s)" in ln or "size mismatch" in ln),
                    message)
        t.expect(False, what="model.load_state_dict inside load_renamed", expected="every key found",
                 got=line[:160], nudge=_missing_keys_nudge(message, renames, seen))
    finally:
        handle.remove()
        first.remove()
    t.expect(got is not None and hasattr(got, "missing_keys") and hasattr(got, "unexpected_keys"), what=what,
             expected="what model.load_state_dict returns", got=got,
             nudge="return the result of model.load_state_dict(state_dict)")
    t.expect(not list(got.missing_keys) and not list(got.unexpected_keys), what=f"{what}.missing_keys, "
             ".unexpected_keys", expected="[], []", got=f"{list(got.missing_keys)}, {list(got.unexpected_keys)}",
             nudge="load strictly (model.load_state_dict(state_dict)), with every key renamed by the hook")
    t.expect(list(given) == list(old) and all(given[k] is not old[k] and torch.equal(given[k], old[k]) for k in old),
             what="the caller's checkpoint after the call", expected=f"its keys {list(old)}, unchanged",
             got=list(given),
             nudge="leave the caller's dict alone: the hook renames the copy that load_state_dict passes it")
    t.expect(bool(seen) and seen[-1] >= 1, what="a load_state_dict pre-hook on the model while it loaded",
             expected="one of yours", got="none", nudge=(
                 "rename the keys in a hook registered with model.register_load_state_dict_pre_hook, not by "
                 "building a renamed dict before calling load_state_dict"))
    given_keys = sorted(entered[-1]) if entered else []
    t.expect(given_keys == sorted(old), what="the keys load_state_dict was given",
             expected=f"the checkpoint's old keys {sorted(old)[:2]}...", got=f"{given_keys[:2]}...",
             nudge=("pass the checkpoint to load_state_dict as it came, with its old keys: renaming is the "
                    "pre-hook's job, and a hook that renames nothing is not doing it"))
    now = model.state_dict(keep_vars=True)
    replaced = [k for k in own if now.get(k) is not own[k]]
    t.expect(not replaced, what=f"model.{replaced[0] if replaced else ''} after loading",
             expected="the model's own tensor, with the checkpoint's values", got="another tensor object", nudge=(
                 "load_state_dict copies the checkpoint into the model's own parameters and buffers; with "
                 "assign=True it puts the checkpoint's tensors in their place, and an optimizer built on the model "
                 "keeps updating the old ones: call model.load_state_dict(state_dict), nothing more"))
    want = _renamed(old, renames)
    for key, value in model.state_dict().items():
        t.expect(key in want and torch.equal(value, want[key]), what=f"model.state_dict()[{key!r}]",
                 expected="the checkpoint's", got="another tensor",
                 nudge="every parameter and buffer must come from the checkpoint")


def _missing_keys_nudge(message: str, renames: dict, seen: list[int]) -> str:
    """Name the mistake from the keys a strict load found unexpected."""
    listed = message.split("Unexpected key(s) in state_dict:")[1] if "Unexpected key(s)" in message else ""
    unexpected = re.findall(r'"([^"]+)"', listed.split("size mismatch")[0].split("Missing key(s)")[0])
    parts = [key.split(".") for key in unexpected]
    if not (seen and seen[-1]):
        return ("the model read the old keys: rename them in a load_state_dict pre-hook, which runs before the "
                "model reads the checkpoint (a post-hook runs after it)")
    if any(part in renames for key in parts for part in key[1:]):
        return "rename every part of the dotted key (nested layers: encoder.layers.0.weight), not just the first"
    if any(new in part and part not in renames.values() for key in parts for part in key for new in renames.values()):
        return ("rename whole parts of the key, not substrings: 'fc_out', 'skip_fc' and 'fc-skip' are not the "
                "layer 'fc' (split the key at '.' and map each part)")
    if set(renames) & set(renames.values()):
        return ("here a new name is another layer's old name ('0' becomes '1' while '1' becomes '2'): rename each "
                "part of a key once, from its old name (a renamed part must not be renamed again), and do not "
                "write a new key while an old key of that name is still in state_dict: pop every key out first, "
                "then put each value back under its new key")
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


def _linear_norm(seed: int, *, front: nn.Module | None = None) -> nn.Sequential:
    """``Linear(4, 4), BatchNorm1d(4)`` (running statistics of its own: buffers to load), after
    ``front`` (a layer without parameters) when given."""
    with seeded(seed):
        layers = [nn.Linear(4, 4), nn.BatchNorm1d(4)]
    norm = layers[1]
    with torch.no_grad():
        norm.running_mean.copy_(kit.randn(4, seed=seed))
        norm.running_var.copy_(kit.randn(4, seed=seed + 1).abs() + 0.5)
        norm.num_batches_tracked.fill_(seed + 3)
    return nn.Sequential(*([front] if front is not None else []), *layers)


@exercise.case("a layer inserted in front: {'0': '1', '1': '2'}, a BatchNorm's buffers among the keys, the "
               "model in eval mode")
def _(answer, t: Tester) -> None:
    model = t.track(_linear_norm(12, front=nn.Dropout(0.1)).eval(), "the new model (Dropout, Linear, BatchNorm1d)")
    old = _linear_norm(6).state_dict()
    _load_case(answer, t, model, old, {"0": "1", "1": "2"}, "load_renamed(model, ...)")


@exercise.case("a checkpoint of another shape, then one without out.bias: loading raises, and no hook may stay")
def _(answer, t: Tester) -> None:
    renames = {"hidden1": "fc1", "hidden2": "fc2", "out": "head"}
    model = t.track(MLP(seed=12), "the new MLP")
    old = _OldMLP(seed=6).state_dict()
    old["hidden1.weight"] = torch.zeros(3, 3)
    try:
        answer(model, old, renames)
    except RuntimeError as error:
        t.expect("size mismatch" in str(error), what="the error load_state_dict raised", expected="size mismatch",
                 got=str(error).splitlines()[0][:120], nudge="rename the keys; let the size mismatch through")
    left = learners_hooks(model)
    t.expect(not left, what="hooks left on the model after loading failed", expected="none",
             got=f"{len(left)} hook(s)", nudge=(
                 "load_state_dict raised, and your hook stayed: remove the handle in the finally: of a try: "
                 "around model.load_state_dict"))
    old = _OldMLP(seed=6).state_dict()
    del old["out.bias"]
    try:
        answer(model, old, renames)
        raised = ""
    except RuntimeError as error:
        raised = str(error)
    t.expect("Missing key(s)" in raised and "head.bias" in raised, what="load_renamed with a checkpoint that lacks "
             "out.bias", expected='RuntimeError: Missing key(s) in state_dict: "head.bias"',
             got=raised.splitlines()[0][:120] if raised else "it loaded without a word", nudge=(
                 "load strictly, model.load_state_dict(state_dict): a strict load raises when a key is missing, "
                 "strict=False hides it"))


class _LookAlikes(nn.Module):
    """A layer ``fc`` (or its new name) next to ``fc_out``, ``skip_fc`` and ``fc-skip``, whose names
    hold "fc" but are other layers (``fc-skip``'s ``-`` is no word character: a ``\\b`` regex
    renames it), and ``block.block`` (or its new name twice): a name that appears twice in one key
    (``block.block.weight``)."""

    def __init__(self, fc: str, block: str, seed: int) -> None:
        super().__init__()
        with seeded(seed):
            self.add_module(fc, nn.Linear(4, 4))
            self.skip_fc = nn.Linear(4, 4)
            self.add_module(block, nn.Sequential(OrderedDict([(block, nn.Linear(4, 4))])))
            self.fc_out = nn.Linear(4, 2)
            self.add_module("fc-skip", nn.Linear(4, 4))  # a legal module name, not a Python identifier
        self.names = (fc, block)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        fc, block = (getattr(self, name) for name in self.names)
        return self.fc_out(block(fc(x)) + self.skip_fc(x) + getattr(self, "fc-skip")(x))


@exercise.case("renames {'fc': 'linear', 'block': 'layer'}: fc_out, skip_fc and fc-skip keep their names, "
               "block.block becomes layer.layer", hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(_LookAlikes("linear", "layer", seed=13), "the model")
    old = _LookAlikes("fc", "block", seed=7).state_dict()
    _load_case(answer, t, model, old, {"fc": "linear", "block": "layer"}, "load_renamed(model, ...)")


@exercise.case("a layer removed in front: {'1': '0', '2': '1'}; then a second checkpoint into the same model",
               hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(_linear_norm(14), "the new model (Linear, BatchNorm1d)")
    for seed in (8, 9):
        old = _linear_norm(seed, front=nn.Identity()).state_dict()
        _load_case(answer, t, model, old, {"1": "0", "2": "1"}, "load_renamed(model, ...)")


# -- the wrong answers peculiar to this exercise -------------------------------------------------

def _register_pre(model: nn.Module, hook: Callable):
    """``model.register_load_state_dict_pre_hook(hook)`` (public since torch 2.5), or the private
    registration with ``with_module=True`` before that: the same hook."""
    public = getattr(model, "register_load_state_dict_pre_hook", None)
    return public(hook) if public is not None else model._register_load_state_dict_pre_hook(hook, with_module=True)


def _renamer(renames: dict, *, order: str = "all at once", parts: str = "every") -> Callable:
    """A pre-hook that renames the keys: all at once, or in place one key at a time ("in place",
    "in place, last key first"); every part of a key, the first part only ("first"), the first
    rename found anywhere in the key, with str.replace ("substring"), every rename in turn on
    the parts already renamed ("chained"), one regex over the dots, which consumes the dot
    between two equal parts ("regex": ``block.block`` becomes ``layer.block``), or one
    word-boundary regex ("word boundary": ``fc-skip`` becomes ``linear-skip``)."""
    def new_key(key: str) -> str:
        if parts == "word boundary":
            found = re.compile(r"\b(" + "|".join(map(re.escape, renames)) + r")\b")
            return found.sub(lambda m: renames[m.group(1)], key)
        if parts == "regex":
            found = re.compile(r"(^|\.)(" + "|".join(map(re.escape, renames)) + r")(\.|$)")
            return found.sub(lambda m: m.group(1) + renames[m.group(2)] + m.group(3), key)
        if parts == "chained":
            split = key.split(".")
            for old_name, new_name in renames.items():
                split = [new_name if p == old_name else p for p in split]
            return ".".join(split)
        if parts == "substring":
            found = next((o for o in renames if o in key), None)
            return key if found is None else key.replace(found, renames[found])
        split = key.split(".")
        if parts == "first":
            return ".".join([renames.get(split[0], split[0]), *split[1:]])
        return ".".join(renames.get(p, p) for p in split)

    def rename(module, state_dict, prefix, *args):
        if order == "all at once":
            taken = {key: state_dict.pop(key) for key in list(state_dict)}
            state_dict.update({new_key(k): v for k, v in taken.items()})
            return
        keys = list(state_dict)
        for key in reversed(keys) if order == "in place, last key first" else keys:
            state_dict[new_key(key)] = state_dict.pop(key)
    return rename


def _loader(*, hook="pre", finally_=True, strict=True, assign=False, **options) -> Callable:
    """A load_renamed that attaches ``_renamer(renames, **options)`` as a load pre-hook (or,
    ``hook="post"``, a post-hook that renames the caller's dict afterwards), removed in
    ``finally:`` or, ``finally_=False``, after a load that went well; it loads with ``strict`` and
    ``assign`` as given."""
    def answer(model, state_dict, renames):
        load = functools.partial(model.load_state_dict, strict=strict, **({"assign": True} if assign else {}))
        if hook == "post":
            rename = _renamer(renames, **options)
            handle = model.register_load_state_dict_post_hook(lambda module, keys: rename(module, state_dict, ""))
        else:
            handle = _register_pre(model, _renamer(renames, **options))
        if not finally_:
            result = load(state_dict)
            handle.remove()
            return result
        try:
            return load(state_dict)
        finally:
            handle.remove()
    return answer


exercise.wrong("renames in a load_state_dict post-hook", mentions="pre-hook")(_loader(hook="post"))
exercise.wrong("renames only the first part of each key",
               mentions="every part of the dotted key")(_loader(parts="first"))
exercise.wrong("renames in place, one key at a time", mentions="another layer's old name")(_loader(order="in place"))
exercise.wrong("applies the renames one after another, so that 0 -> 1 -> 2",
               mentions="another layer's old name")(_loader(parts="chained"))
exercise.wrong("loads with strict=False", mentions="strict=False hides it")(_loader(strict=False))
exercise.wrong("loads with assign=True", mentions="assign=True")(_loader(assign=True))
exercise.wrong("removes the hook after loading, not in a finally:", mentions="finally:")(_loader(finally_=False))
exercise.wrong("renames with str.replace on the whole key", mentions="not substrings",
               hidden=True)(_loader(parts="substring"))
exercise.wrong("renames in place, the last key first", mentions="another layer's old name",
               hidden=True)(_loader(order="in place, last key first"))
exercise.wrong("renames with one regex over the dots, (^|\\.)name(\\.|$)", mentions="every part of the dotted key",
               hidden=True)(_loader(parts="regex"))
exercise.wrong("renames with one word-boundary regex, \\b(name)\\b", mentions="not substrings",
               hidden=True)(_loader(parts="word boundary"))


@exercise.wrong("returns a renamed dict from the pre-hook instead of editing it", mentions="in place")
def _returns_new_dict(model, state_dict, renames):
    def rename(module, state_dict, prefix, *args):
        return {".".join(renames.get(p, p) for p in k.split(".")): v for k, v in state_dict.items()}
    handle = _register_pre(model, rename)
    try:
        return model.load_state_dict(state_dict)
    finally:
        handle.remove()


@exercise.wrong("renames the caller's dict before loading, without a hook",
                mentions="register_load_state_dict_pre_hook")
def _no_hook(model, state_dict, renames):
    renamed = {".".join(renames.get(p, p) for p in k.split(".")): v for k, v in state_dict.items()}
    return model.load_state_dict(renamed)


@exercise.wrong("renames a copy before loading; its pre-hook renames nothing",
                mentions="renaming is the pre-hook's job")
def _idle_hook(model, state_dict, renames):
    renamed = {".".join(renames.get(p, p) for p in k.split(".")): v for k, v in state_dict.items()}
    handle = _register_pre(model, lambda *args: None)  # attached during the load, and idle
    try:
        return model.load_state_dict(renamed)
    finally:
        handle.remove()
