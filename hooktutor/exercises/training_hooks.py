"""Exercises of ``08_training_hooks.ipynb``: hooks around training, written by the learner.

* :data:`attach_ema` — an exponential moving average of the weights, kept by an optimizer
  step post-hook.
* :data:`load_renamed` — load an old checkpoint whose layers were renamed, through a
  load-state-dict pre-hook.
* :data:`watch_updates` — the update-to-weight ratio of every parameter at every step, from a
  step pre-hook and a step post-hook.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable

import torch
from torch import nn

from ..data import blobs
from ..inventory import hook_ids, list_hooks
from ..models import MLP, seeded
from . import kit
from .core import Exercise, Tester
from .predict import Prediction

# The first optimizer made in a process imports torch._dynamo (about a second); do it at import
# time, so that a check's time is the check's own.
torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)

# DIMENSIONS (kit.py) that apply here: nested (a model whose layers sit in submodules),
# raises (a load that fails: the hook must still go), repeat (two attachments on one
# optimizer, a second load), technique (the hook kind asked for was attached while the
# optimizer stepped or the model loaded), inplace_after (parameters changed in place by the
# step after the answer copied them).


def _mlp(seed: int) -> nn.Module:
    return MLP(seed=seed)


def _nested(seed: int) -> nn.Module:
    """kit.Nested (layers two levels down) followed by a head: input (N, 4), output (N, 3)."""
    with seeded(seed):
        head = nn.Linear(3, 3)
    return nn.Sequential(OrderedDict(body=kit.Nested(seed=seed), head=head))


def _loss(model: nn.Module, step: int, seed: int) -> torch.Tensor:
    """The loss of training step ``step``: a cross-entropy on seeded data of the model's width."""
    features = 4 if isinstance(model, nn.Sequential) and "body" in model._modules else 8
    x, y = blobs(16, features=features, seed=seed + step)
    return nn.functional.cross_entropy(model(x), y)


def _train(model: nn.Module, optimizer: torch.optim.Optimizer, steps: int, seed: int,
           after_step: Callable[[], None] | None = None) -> None:
    for step in range(steps):
        optimizer.zero_grad()
        _loss(model, step, seed).backward()
        optimizer.step()
        if after_step is not None:
            after_step()


def _params(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [p for group in optimizer.param_groups for p in group["params"]]


def _user_hooks(optimizer: torch.optim.Optimizer, kind: str) -> int:
    return len(list_hooks(optimizer, include_global=False).where(kind=kind, owner="user"))


def _remove_all(handles: object) -> None:
    """Remove a handle, or every handle in a list/tuple (what an answer returned)."""
    for h in handles if isinstance(handles, (list, tuple)) else [handles]:
        if hasattr(h, "remove"):
            h.remove()


# --------------------------------------------------------------------------------------
# 1. attach_ema
# --------------------------------------------------------------------------------------

def _attach_ema_solution(optimizer: torch.optim.Optimizer, decay: float):
    params = [p for group in optimizer.param_groups for p in group["params"]]
    averages = [p.detach().clone() for p in params]

    def update(opt, args, kwargs):
        with torch.no_grad():
            for avg, p in zip(averages, params):
                avg.mul_(decay).add_(p, alpha=1 - decay)

    return averages, optimizer.register_step_post_hook(update)


attach_ema = Exercise(
    "training_hooks.attach_ema", "An average of the weights, kept by the optimizer",
    task=("write attach_ema(optimizer, decay) that makes a copy of every parameter of `optimizer` "
          "(all its param groups, in order), registers a step post-hook that, after every "
          "optimizer.step(), updates each copy to decay * copy + (1 - decay) * parameter, and "
          "returns (the list of copies, the hook's handle)"),
    hints=[
        "The parameters are in optimizer.param_groups: [p for group in optimizer.param_groups for p in "
        "group['params']]. Start each average as p.detach().clone(), a copy, not the parameter itself.",
        "optimizer.register_step_post_hook(hook) calls hook(optimizer, args, kwargs) right after each "
        "step, when the parameters hold their new values. A step *pre*-hook would see the old ones.",
        "Update each average in place under torch.no_grad(): avg.mul_(decay).add_(p, alpha=1 - decay); "
        "return (averages, handle) so that the caller can remove the hook.",
    ],
    solution=_attach_ema_solution,
)


def _expected_ema(build: Callable[[int], nn.Module], make_opt: Callable, decay: float, steps: int,
                  seed: int, variant: str = "right") -> list[torch.Tensor]:
    """The averages of a hand-written loop, without any hook, on a fresh copy of the model; a
    ``variant`` gives what a typical mistake gives: ``pre`` (updated before each step),
    ``swapped`` (decay and 1 - decay swapped), ``zeros`` (started at zero)."""
    model = build(seed)
    opt = make_opt(model)
    averages = [torch.zeros_like(p) if variant == "zeros" else p.detach().clone() for p in _params(opt)]
    keep, new = (1 - decay, decay) if variant == "swapped" else (decay, 1 - decay)

    def update() -> None:
        with torch.no_grad():
            for avg, p in zip(averages, _params(opt)):
                avg.mul_(keep).add_(p, alpha=new)

    for step in range(steps):
        opt.zero_grad()
        _loss(model, step, seed).backward()
        if variant == "pre":
            update()
        opt.step()
        if variant != "pre":
            update()
    return averages


def _ema_case(answer: Callable, t: Tester, build: Callable[[int], nn.Module], make_opt: Callable,
              decay: float, steps: int, seed: int, what: str) -> tuple[torch.optim.Optimizer, list, object]:
    want = _expected_ema(build, make_opt, decay, steps, seed)
    mistakes = {
        "pre": "the average is one step behind: a step pre-hook sees the weights before the step; use "
               "optimizer.register_step_post_hook",
        "swapped": "the weights are swapped: average = decay * average + (1 - decay) * parameter (decay weighs "
                   "the old average)",
        "zeros": "the average started at zero: start from a copy of the parameters (p.detach().clone()), not from "
                 "zeros, or the first steps drag it towards 0",
    }
    wrong = {v: _expected_ema(build, make_opt, decay, steps, seed, v) for v in mistakes}
    model = t.track(build(seed), "the model")
    opt = make_opt(model)
    got = answer(opt, decay)
    t.expect_type(got, tuple, what=what, nudge="return the pair (averages, handle)")
    t.expect(len(got) == 2, what=f"len({what})", expected=2, got=len(got), nudge="return (averages, handle)")
    averages, handle = got
    try:
        t.expect_type(averages, (list, tuple), what="the averages", nudge="a list with one tensor per parameter")
        t.expect(hasattr(handle, "remove"), what="the handle", expected="a handle with .remove()", got=handle,
                 nudge="return the handle that optimizer.register_step_post_hook gave you")
        t.expect(_user_hooks(opt, "step_post") + _user_hooks(opt, "step_pre") >= 1,
                 what="hooks on the optimizer", expected="a step post-hook", got="no step hook", nudge=(
                     "keep the average with optimizer.register_step_post_hook: it runs after every step, "
                     "whoever calls optimizer.step() (no wrapper, no change to the training loop)"))
        t.expect(len(averages) == len(want), what="len(averages)", expected=len(want), got=len(averages),
                 nudge="one average per parameter of every param group (optimizer.param_groups)")
        t.expect(all(not isinstance(a, torch.Tensor) or a.data_ptr() != p.data_ptr()
                     for a, p in zip(averages, _params(opt))), what="the averages",
                 expected="copies of the parameters", got="the parameters themselves",
                 nudge="start each average as a copy, p.detach().clone(): the parameter itself changes at every step")
        _train(model, opt, steps, seed)
        for i, (a, w) in enumerate(zip(averages, want)):
            t.expect_type(a, torch.Tensor, what=f"averages[{i}]")
            # the hand loop does the same float operations as the solution; 1e-6 admits an
            # equally right formula (avg + (1 - decay) * (p - avg)), far below what the mistakes
            # give (one step behind, decay's weights swapped, a start at zero: 1e-3 and more here)
            t.expect_close(a, w, what=f"averages[{i}] after {steps} steps", atol=1e-6, rtol=1e-5,
                           wrong={v: (wrong[v][i], mistakes[v]) for v in mistakes},
                           nudge="after each step: average = decay * average + (1 - decay) * parameter, "
                                 "from a copy of the parameters, updated in a step post-hook")
    except BaseException:
        _remove_all(handle)
        raise
    return opt, averages, handle


@attach_ema.case("an MLP trained 4 steps with SGD, decay 0.5")
def _(answer, t: Tester) -> None:
    _, _, handle = _ema_case(answer, t, _mlp, lambda m: torch.optim.SGD(m.parameters(), lr=0.1), 0.5, 4,
                             seed=1, what="attach_ema(sgd, 0.5)")
    _remove_all(handle)


@attach_ema.case("a nested model trained 3 steps with Adam, decay 0.9; then the handle is removed")
def _(answer, t: Tester) -> None:
    opt, averages, handle = _ema_case(answer, t, _nested, lambda m: torch.optim.Adam(m.parameters(), lr=0.01),
                                      0.9, 3, seed=2, what="attach_ema(adam, 0.9)")
    _remove_all(handle)
    before = [a.clone() for a in averages]
    model_params = _params(opt)
    with torch.no_grad():
        for p in model_params:
            p.add_(1.0)
    opt.step()  # no gradients: nothing moves, but a hook would still fire
    t.expect(all(torch.equal(a, b) for a, b in zip(averages, before)), what="the averages after handle.remove()",
             expected="unchanged", got="changed", nudge=(
                 "the averages must change only through the hook you registered, so that removing its "
                 "handle stops them; keep them in tensors the hook updates, not in code that runs otherwise"))


def _two_groups(model: nn.Module) -> torch.optim.Optimizer:
    """SGD with the first layer in a group of its own (another learning rate)."""
    first = [p for n, p in model.named_parameters() if n.startswith("fc1")]
    rest = [p for n, p in model.named_parameters() if not n.startswith("fc1")]
    return torch.optim.SGD([{"params": first, "lr": 0.05}, {"params": rest}], lr=0.1, momentum=0.9)


@attach_ema.case("an optimizer with two param groups", hidden=True)
def _(answer, t: Tester) -> None:
    _, _, handle = _ema_case(answer, t, _mlp, _two_groups, 0.8, 3, seed=3, what="attach_ema(two groups, 0.8)")
    _remove_all(handle)


# Half-right answers (DIMENSIONS: nested, repeat, technique, inplace_after): a step pre-hook
# (one step behind); decay's weights swapped; averages that start at zero; the parameters
# themselves instead of copies (the step changes them in place); wrapping optimizer.step instead
# of a hook; the first param group only (hidden: an optimizer with two groups).

@attach_ema.wrong("updates the average in a step pre-hook", mentions="one step behind")
def _ema_pre_hook(optimizer, decay):
    params = _params(optimizer)
    averages = [p.detach().clone() for p in params]

    def update(opt, args, kwargs):
        with torch.no_grad():
            for avg, p in zip(averages, params):
                avg.mul_(decay).add_(p, alpha=1 - decay)

    return averages, optimizer.register_step_pre_hook(update)


@attach_ema.wrong("swaps the weights: decay * parameter + (1 - decay) * average", mentions="decay * average")
def _ema_swapped(optimizer, decay):
    params = _params(optimizer)
    averages = [p.detach().clone() for p in params]

    def update(opt, args, kwargs):
        with torch.no_grad():
            for avg, p in zip(averages, params):
                avg.mul_(1 - decay).add_(p, alpha=decay)

    return averages, optimizer.register_step_post_hook(update)


@attach_ema.wrong("starts the averages at zero", mentions="not from zeros")
def _ema_zeros(optimizer, decay):
    params = _params(optimizer)
    averages = [torch.zeros_like(p) for p in params]

    def update(opt, args, kwargs):
        with torch.no_grad():
            for avg, p in zip(averages, params):
                avg.mul_(decay).add_(p, alpha=1 - decay)

    return averages, optimizer.register_step_post_hook(update)


@attach_ema.wrong("keeps the parameters themselves instead of copies", mentions="the parameter itself changes")
def _ema_no_copy(optimizer, decay):
    params = _params(optimizer)
    averages = [p.data for p in params]

    def update(opt, args, kwargs):
        with torch.no_grad():
            for avg, p in zip(averages, params):
                avg.mul_(decay).add_(p, alpha=1 - decay)

    return averages, optimizer.register_step_post_hook(update)


@attach_ema.wrong("wraps optimizer.step instead of registering a hook", mentions="register_step_post_hook")
def _ema_wraps_step(optimizer, decay):
    params = _params(optimizer)
    averages = [p.detach().clone() for p in params]
    step = optimizer.step

    def stepped(*args, **kwargs):
        out = step(*args, **kwargs)
        with torch.no_grad():
            for avg, p in zip(averages, params):
                avg.mul_(decay).add_(p, alpha=1 - decay)
        return out

    optimizer.step = stepped

    class Handle:
        def remove(self):
            optimizer.step = step

    return averages, Handle()


@attach_ema.wrong("averages the first param group only", mentions="every param group", hidden=True)
def _ema_first_group(optimizer, decay):
    params = list(optimizer.param_groups[0]["params"])
    averages = [p.detach().clone() for p in params]

    def update(opt, args, kwargs):
        with torch.no_grad():
            for avg, p in zip(averages, params):
                avg.mul_(decay).add_(p, alpha=1 - decay)

    return averages, optimizer.register_step_post_hook(update)


# --------------------------------------------------------------------------------------
# 2. load_renamed
# --------------------------------------------------------------------------------------

def register_load_pre_hook(module: nn.Module, hook: Callable):
    """``module.register_load_state_dict_pre_hook(hook)`` (public since torch 2.5), or the
    private ``_register_load_state_dict_pre_hook(hook, with_module=True)`` before that: the
    same hook, ``hook(module, state_dict, prefix, local_metadata, strict, missing_keys,
    unexpected_keys, error_msgs)``. Used in ``08_training_hooks.ipynb``."""
    public = getattr(module, "register_load_state_dict_pre_hook", None)
    if public is not None:
        return public(hook)
    return module._register_load_state_dict_pre_hook(hook, with_module=True)


def _load_renamed_solution(model: nn.Module, state_dict: dict, renames: dict):
    def rename(module, state_dict, prefix, *args):
        for key in list(state_dict):
            parts = [renames.get(part, part) for part in key.split(".")]
            state_dict[".".join(parts)] = state_dict.pop(key)

    register = getattr(model, "register_load_state_dict_pre_hook", None)  # torch >= 2.5
    handle = register(rename) if register else model._register_load_state_dict_pre_hook(rename, with_module=True)
    try:
        return model.load_state_dict(state_dict)
    finally:
        handle.remove()


load_renamed = Exercise(
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
        "The hook's return value is ignored: edit state_dict in place, state_dict[new_key] = "
        "state_dict.pop(old_key). It is load_state_dict's own copy, so the caller's dict stays as it was.",
        "Rename whole parts of the dotted key, not substrings: '.'.join(renames.get(part, part) for part in "
        "key.split('.')). Load in try:, remove the handle in finally:.",
    ],
    solution=_load_renamed_solution,
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


@load_renamed.case("an MLP whose layers hidden1, hidden2, out became fc1, fc2, head")
def _(answer, t: Tester) -> None:
    model = t.track(MLP(seed=10), "the new MLP")
    old = _OldMLP(seed=4).state_dict()
    _load_case(answer, t, model, old, {"hidden1": "fc1", "hidden2": "fc2", "out": "head"}, "load_renamed(mlp, ...)")


@load_renamed.case("a nested model whose inner Sequential 'layers' became 'body' (keys like encoder.layers.0.weight)")
def _(answer, t: Tester) -> None:
    model = t.track(kit.Nested(seed=11), "the nested model")
    old = {k.replace("encoder.body.", "encoder.layers."): v for k, v in kit.Nested(seed=5).state_dict().items()}
    _load_case(answer, t, model, old, {"layers": "body"}, "load_renamed(nested, ...)")


@load_renamed.case("a checkpoint of another shape: loading raises, and no hook may stay")
def _(answer, t: Tester) -> None:
    model = t.track(MLP(seed=12), "the new MLP")
    old = _OldMLP(seed=6).state_dict()
    old["hidden1.weight"] = torch.zeros(3, 3)
    try:
        answer(model, old, {"hidden1": "fc1", "hidden2": "fc2", "out": "head"})
    except RuntimeError as error:
        t.expect("size mismatch" in str(error), what="the error load_state_dict raised", expected="size mismatch",
                 got=str(error).splitlines()[0][:120], nudge="rename the keys; let the size mismatch through")
    left = [r for r in list_hooks(model, include_global=False) if not r.is_pytorch]
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


@load_renamed.case("renames {'fc': 'linear'} next to a layer called fc_out, which keeps its name", hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(_FcAndFcOut("linear", seed=13), "the model")
    old = _FcAndFcOut("fc", seed=7).state_dict()
    _load_case(answer, t, model, old, {"fc": "linear"}, "load_renamed(model, ...)")


# Half-right answers (DIMENSIONS: nested, raises, technique): renames in a load post-hook (too
# late); returns a renamed dict from the pre-hook (ignored); renames the first part of a key
# only (nested layers keep their old names); renames the caller's dict before loading, no hook;
# removes the hook without finally (the load that raises); str.replace on the whole key (hidden:
# fc_out becomes linear_out).

def _renamer(renames: dict) -> Callable:
    def rename(module, state_dict, prefix, *args):
        for key in list(state_dict):
            state_dict[".".join(renames.get(p, p) for p in key.split("."))] = state_dict.pop(key)
    return rename


@load_renamed.wrong("renames in a load_state_dict post-hook", mentions="pre-hook")
def _renames_after(model, state_dict, renames):
    def post(module, incompatible_keys):
        _renamer(renames)(module, state_dict, "")
    handle = model.register_load_state_dict_post_hook(post)
    try:
        return model.load_state_dict(state_dict)
    finally:
        handle.remove()


@load_renamed.wrong("returns a renamed dict from the pre-hook instead of editing it", mentions="in place")
def _returns_new_dict(model, state_dict, renames):
    def rename(module, state_dict, prefix, *args):
        return {".".join(renames.get(p, p) for p in k.split(".")): v for k, v in state_dict.items()}
    handle = register_load_pre_hook(model, rename)
    try:
        return model.load_state_dict(state_dict)
    finally:
        handle.remove()


@load_renamed.wrong("renames only the first part of each key", mentions="every part of the dotted key")
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


@load_renamed.wrong("renames the caller's dict before loading, without a hook",
                    mentions="register_load_state_dict_pre_hook")
def _no_hook(model, state_dict, renames):
    renamed = {".".join(renames.get(p, p) for p in k.split(".")): v for k, v in state_dict.items()}
    return model.load_state_dict(renamed)


@load_renamed.wrong("removes the hook after loading, not in a finally:", mentions="finally:")
def _no_finally(model, state_dict, renames):
    handle = register_load_pre_hook(model, _renamer(renames))
    result = model.load_state_dict(state_dict)
    handle.remove()
    return result


@load_renamed.wrong("renames with str.replace on the whole key", mentions="not substrings", hidden=True)
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


# --------------------------------------------------------------------------------------
# 3. watch_updates
# --------------------------------------------------------------------------------------

def _watch_updates_solution(optimizer: torch.optim.Optimizer, named_params: dict):
    log = {name: [] for name in named_params}
    before = {}

    def snapshot(opt, args, kwargs):
        for name, p in named_params.items():
            before[name] = p.detach().clone()

    def ratio(opt, args, kwargs):
        for name, p in named_params.items():
            update = (p.detach() - before[name]).norm()
            log[name].append((update / before[name].norm()).item())

    return log, [optimizer.register_step_pre_hook(snapshot), optimizer.register_step_post_hook(ratio)]


watch_updates = Exercise(
    "training_hooks.watch_updates", "The update-to-weight ratio, logged by hooks",
    task=("write watch_updates(optimizer, named_params) for a dict name -> parameter: register a step "
          "pre-hook that copies the parameters and a step post-hook that appends, for every name, "
          "||p_after - p_before|| / ||p_before|| (a float) to log[name]; return (log, [the two handles])"),
    hints=[
        "optimizer.register_step_pre_hook(hook) runs before every optimizer.step(), "
        "optimizer.register_step_post_hook(hook) after it; both call hook(optimizer, args, kwargs).",
        "The step changes the parameters in place, so the pre-hook must keep copies: before[name] = "
        "p.detach().clone(). The update is what the step did (p - before), not the gradient: with "
        "momentum or Adam the two differ.",
        "In the post-hook: log[name].append(((p.detach() - before[name]).norm() / before[name].norm()).item()); "
        "log every name, even one whose parameter got no gradient (its update is 0).",
    ],
    solution=_watch_updates_solution,
)


def _expected_ratios(build: Callable[[int], nn.Module], make_opt: Callable, steps: int, seed: int,
                     variant: str = "right") -> dict[str, list[float]]:
    """The ratios of a hand-written loop; ``variant`` ``grad`` (lr * ||grad||) and ``after`` (divided by
    the weights after the step) are what two typical mistakes give."""
    model = build(seed)
    opt = make_opt(model)
    named = dict(model.named_parameters())
    log: dict[str, list[float]] = {name: [] for name in named}
    for step in range(steps):
        opt.zero_grad()
        _loss(model, step, seed).backward()
        before = {n: p.detach().clone() for n, p in named.items()}
        opt.step()
        for n, p in named.items():
            if variant == "grad":
                grad = p.grad if p.grad is not None else torch.zeros_like(p)
                log[n].append((opt.param_groups[0]["lr"] * grad.norm() / before[n].norm()).item())
            else:
                base = p.detach() if variant == "after" else before[n]
                log[n].append(((p.detach() - before[n]).norm() / base.norm()).item())
    return log


def _watch_case(answer: Callable, t: Tester, build: Callable[[int], nn.Module], make_opt: Callable, steps: int,
                seed: int, what: str) -> None:
    want = _expected_ratios(build, make_opt, steps, seed)
    mistakes = {
        "grad": "that is lr * ||grad||, not the update: with momentum or Adam the step is not lr * grad; copy the "
                "weights in a step pre-hook and measure p_after - p_before in the post-hook",
        "after": "divide by the norm of the weights before the step (the copy from the pre-hook), not after it",
    }
    wrong = {v: _expected_ratios(build, make_opt, steps, seed, v) for v in mistakes}
    model = t.track(build(seed), "the model")
    opt = make_opt(model)
    got = answer(opt, dict(model.named_parameters()))
    t.expect_type(got, tuple, what=what, nudge="return the pair (log, handles)")
    log, handles = got
    try:
        t.expect(_user_hooks(opt, "step_pre") >= 1 and _user_hooks(opt, "step_post") >= 1,
                 what="hooks on the optimizer", expected="a step pre-hook and a step post-hook",
                 got=f"{_user_hooks(opt, 'step_pre')} pre-hook(s), {_user_hooks(opt, 'step_post')} post-hook(s)",
                 nudge="take the copy in a step pre-hook (optimizer.register_step_pre_hook) at every step, and "
                       "measure in a step post-hook")
        _train(model, opt, steps, seed)
    finally:
        _remove_all(handles)
    t.expect_type(log, dict, what="the log", nudge="a dict name -> list of floats")
    t.expect(sorted(log) == sorted(want), what="the names in the log", expected=sorted(want), got=sorted(log),
             nudge="one entry per name of named_params, also for a parameter that got no gradient")
    for name, values in want.items():
        got_values = log[name]
        t.expect(isinstance(got_values, list) and len(got_values) == steps, what=f"len(log[{name!r}])",
                 expected=steps, got=len(got_values) if isinstance(got_values, list) else got_values,
                 nudge="append one float per step, in the post-hook")
        for variant, nudge in mistakes.items():
            if all(abs(float(a) - b) <= 1e-5 * abs(b) + 1e-9 for a, b in zip(got_values, wrong[variant][name])) \
                    and any(abs(float(a) - b) > 1e-5 * abs(b) + 1e-9 for a, b in zip(got_values, values)):
                t.expect(False, what=f"log[{name!r}]", expected=values, got=got_values, nudge=nudge)
        # ratios from the same float operations as the reference loop; 1e-5 relative admits another
        # order of the same sums, far below what a mistake changes (1e-2 and more here)
        ok = all(isinstance(a, float) and abs(a - b) <= 1e-5 * abs(b) + 1e-9 for a, b in zip(got_values, values))
        t.expect(ok, what=f"log[{name!r}]", expected=[round(v, 6) for v in values], got=got_values, nudge=(
            "at every step: copy the weights in the pre-hook (detach().clone(): the step changes them in place), "
            "then append ((p - copy).norm() / copy.norm()).item() in the post-hook"))


@watch_updates.case("an MLP, 3 steps of SGD with momentum")
def _(answer, t: Tester) -> None:
    _watch_case(answer, t, _mlp, lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9), 3, seed=20,
                what="watch_updates(sgd, named_params)")


@watch_updates.case("a nested model, 3 steps of Adam")
def _(answer, t: Tester) -> None:
    _watch_case(answer, t, _nested, lambda m: torch.optim.Adam(m.parameters(), lr=0.01), 3, seed=21,
                what="watch_updates(adam, named_params)")


class _Unused(nn.Module):
    """An MLP plus a layer the forward never uses: its parameters get no gradient."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        self.mlp = MLP(seed=seed)
        with seeded(seed):
            self.spare = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(x)


def _unused_loss_build(seed: int) -> nn.Module:
    return _Unused(seed)


@watch_updates.case("a model with a layer the forward never uses (no gradient: update 0)", hidden=True)
def _(answer, t: Tester) -> None:
    _watch_case(answer, t, _unused_loss_build, lambda m: torch.optim.SGD(m.parameters(), lr=0.1), 2, seed=22,
                what="watch_updates(sgd, named_params)")


# Half-right answers (DIMENSIONS: nested, inplace_after, technique): keeps references instead of
# copies (the step changes them in place: every ratio is 0); lr * ||grad|| instead of the update;
# divides by the weights after the step; snapshots once, when attaching, not before every step;
# skips parameters without a gradient (hidden: a layer the forward never uses).

@watch_updates.wrong("keeps references, not copies, in the pre-hook", mentions="detach().clone()")
def _no_clone(optimizer, named_params):
    log, before = {n: [] for n in named_params}, {}

    def snapshot(opt, args, kwargs):
        before.update({n: p.detach() for n, p in named_params.items()})

    def ratio(opt, args, kwargs):
        for n, p in named_params.items():
            log[n].append(((p.detach() - before[n]).norm() / before[n].norm()).item())

    return log, [optimizer.register_step_pre_hook(snapshot), optimizer.register_step_post_hook(ratio)]


@watch_updates.wrong("logs lr * ||grad|| instead of the update", mentions="not the update")
def _grad_not_update(optimizer, named_params):
    log = {n: [] for n in named_params}

    def ratio(opt, args, kwargs):
        lr = opt.param_groups[0]["lr"]
        for n, p in named_params.items():
            log[n].append((lr * p.grad.norm() / p.detach().norm()).item())

    return log, [optimizer.register_step_pre_hook(ratio), optimizer.register_step_post_hook(lambda *a: None)]


@watch_updates.wrong("divides by the weights after the step", mentions="before the step")
def _after_norm(optimizer, named_params):
    log, before = {n: [] for n in named_params}, {}

    def snapshot(opt, args, kwargs):
        before.update({n: p.detach().clone() for n, p in named_params.items()})

    def ratio(opt, args, kwargs):
        for n, p in named_params.items():
            log[n].append(((p.detach() - before[n]).norm() / p.detach().norm()).item())

    return log, [optimizer.register_step_pre_hook(snapshot), optimizer.register_step_post_hook(ratio)]


@watch_updates.wrong("copies the weights once, when attaching, with a post-hook only", mentions="step pre-hook")
def _snapshot_once(optimizer, named_params):
    log = {n: [] for n in named_params}
    before = {n: p.detach().clone() for n, p in named_params.items()}

    def ratio(opt, args, kwargs):
        for n, p in named_params.items():
            log[n].append(((p.detach() - before[n]).norm() / before[n].norm()).item())

    return log, [optimizer.register_step_post_hook(ratio)]


@watch_updates.wrong("skips parameters that have no gradient", mentions="also for a parameter that got no gradient",
                     hidden=True)
def _skips_no_grad(optimizer, named_params):
    log, before = {}, {}

    def snapshot(opt, args, kwargs):
        before.update({n: p.detach().clone() for n, p in named_params.items() if p.grad is not None})

    def ratio(opt, args, kwargs):
        for n in before:
            p = named_params[n]
            log.setdefault(n, []).append(((p.detach() - before[n]).norm() / before[n].norm()).item())

    return log, [optimizer.register_step_pre_hook(snapshot), optimizer.register_step_post_hook(ratio)]


# --------------------------------------------------------------------------------------
# Predict, then run: the firing order of one training step's hooks
# --------------------------------------------------------------------------------------

STEP_EVENTS = ("post-accumulate-grad hook", "global step pre-hook", "step pre-hook", "step post-hook",
               "global step post-hook")


def _observe_step_order() -> list[str]:
    """``loss.backward()`` then ``optimizer.step()`` with one hook of each kind; the step's own hooks
    are registered before the global ones, and the post-hook before the pre-hook."""
    import torch.optim.optimizer as optim_hooks

    with seeded(0):
        layer = nn.Linear(2, 1)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
    fired: list[str] = []

    def note(label: str) -> Callable:
        return lambda *args: fired.append(label)

    handles = [optimizer.register_step_post_hook(note("step post-hook")),
               optimizer.register_step_pre_hook(note("step pre-hook")),
               optim_hooks.register_optimizer_step_post_hook(note("global step post-hook")),
               optim_hooks.register_optimizer_step_pre_hook(note("global step pre-hook")),
               layer.weight.register_post_accumulate_grad_hook(note("post-accumulate-grad hook"))]
    try:
        layer(torch.ones(1, 2)).sum().backward()
        optimizer.step()
    finally:
        for handle in handles:
            handle.remove()
    return fired


step_order = Prediction(
    "training_hooks.step_order", "Predict: the hooks of one training step",
    task=("a list of labels, one per hook call, in firing order, for loss.backward() then optimizer.step(); "
          f"the labels: {', '.join(STEP_EVENTS)}"),
    answer_name="predict_step_order",
    observe=_observe_step_order,
    choices=STEP_EVENTS,
    hints=["Which of these hooks belong to backward(), and which to step()?",
           "The global optimizer hooks wrap every optimizer's own ones, like the global module hooks wrap a "
           "module's: global first on the way in, last on the way out."],
    explain={
        "post-accumulate-grad hook": "it fires inside loss.backward(), as soon as weight.grad is complete, so "
                                     "before optimizer.step() is even called.",
        "global step pre-hook": "step() starts after backward() has finished (a post-accumulate-grad hook has "
                                "fired by then); in step() torch runs the global step pre-hooks first, then the "
                                "optimizer's own.",
        "global step post-hook": "after the update torch runs the optimizer's own post-hooks, then the global "
                                 "ones: the global hooks wrap the optimizer's.",
        "order": "registration order does not decide between kinds: pre-hooks run before the update and "
                 "post-hooks after it, whatever was registered first.",
    },
    summary="the post-accumulate-grad hook during backward(); then global pre, own pre, the update, own post, "
            "global post.",
)
step_order.wrong("the post-accumulate-grad hook inside step()",
                 ["global step pre-hook", "step pre-hook", "post-accumulate-grad hook", "step post-hook",
                  "global step post-hook"], "after backward() has finished")
step_order.wrong("the optimizer's own hooks before the global ones",
                 ["post-accumulate-grad hook", "step pre-hook", "global step pre-hook", "global step post-hook",
                  "step post-hook"], "global step pre-hooks first")
step_order.wrong("in registration order",
                 ["step post-hook", "step pre-hook", "global step post-hook", "global step pre-hook",
                  "post-accumulate-grad hook"], "inside loss.backward()")
