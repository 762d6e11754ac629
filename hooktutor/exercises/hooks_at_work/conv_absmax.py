"""13_hooks_at_work, exercise: calibration statistics for a layer kind the lesson does not show:
the running per-channel absolute maximum of every Conv2d's input, streamed by forward pre-hooks.

Half-right answers an examiner expects, by kit dimension (``kit.DIMENSIONS``):

- technique: a forward hook on the output (one value per *output* channel, after the conv); a
  forward hook that reads ``args[0]`` (right numbers for a conv, the wrong hook: the check looks
  at which hook dict holds the answer's hook on each conv, and asks for a pre-hook); the
  last dimension instead of dim 1 (one value per column); no ``abs()`` (the largest value, not the
  largest magnitude); finds the channel dimension by its size (wrong when H or W equals C);
- repeat / many batches: keeps only the last batch's maximum (``absmax[name] = amax``); keeps the
  first call's; a list of every activation (or of every batch's maximum) max'ed at the end, which
  grows with the calibration set (what streaming with hooks avoids), as tensors or as Python
  floats (``.tolist()``): the check measures the bytes that the answer's hooks refer to
  (closures, defaults, bound objects, the globals they name, attributes set on the modules) at
  batch 5 and at batch 24; ``list(batches)`` first;
  state kept across calls;
- twice: a conv called twice in one forward (both calls count);
- nested: ``named_children()`` misses the convs inside submodules; keys that are not the
  qualified names; every convolution kind hooked (``nn.modules.conv._ConvNd``: a ConvTranspose2d and a
  Conv1d too, kept-for-grading case);
- nd: channels-last input (the shape is still (N, C, H, W); ``view`` fails on it, ``reshape`` or
  ``amax(dim=...)`` does not);
- dtype: float64 and bfloat16 models (the result stays in the input's dtype: abs and max are exact
  in every dtype, so nothing is gained by converting, and a float32 copy of a float64 input rounds);
- raises: hooks removed outside ``finally:``;
- left_as_found: the running maximum kept on each conv, observer style, as a buffer
  (``register_buffer``: the model's ``state_dict`` gains keys, and a checkpoint saved before calibration
  no longer loads) or as a plain attribute, and left there;
- detached / left_as_found: the forwards run with gradients on (no ``torch.no_grad()``), so the
  statistics hold the autograd graph; the model switched to eval mode and left there, or "restored"
  with ``model.train()`` (a model given in eval mode leaves in train mode) or ``model.train(was)``
  (the model's own flag: a submodule in another mode than its parent is not restored); the check
  gives a model in train mode, then one in eval mode with a conv in train mode.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
from torch import nn
from torch.nn.modules import module as module_hooks

from ...models import seeded
from .. import kit
from ..core import CALLERS_HOOK_IDS, Exercise, Tester
from ._alive import Created, added_to, held_bytes, module_contents


def conv_absmax(model, batches):
    """{name of each nn.Conv2d: max of |its input| per input channel, over every batch}."""
    ### BEGIN SOLUTION
    absmax, handles = {}, []

    def make_hook(name):
        def hook(module, args):
            amax = args[0].abs().amax(dim=(0, 2, 3))   # (N, C, H, W) -> one per input channel
            absmax[name] = torch.maximum(absmax[name], amax) if name in absmax else amax
        return hook

    try:
        for name, module in model.named_modules():
            if isinstance(module, nn.Conv2d):
                handles.append(module.register_forward_pre_hook(make_hook(name)))
        with torch.no_grad():
            for batch in batches:
                model(batch)
    finally:
        for handle in handles:
            handle.remove()
    return absmax
    ### END SOLUTION


exercise = Exercise(
    "hooks_at_work.conv_absmax", "Calibrate the convolutions: a running per-channel absmax",
    task=("write conv_absmax(model, batches) that registers a forward PRE-hook on every nn.Conv2d of `model` "
          "(nested ones too), runs model(batch) under torch.no_grad() for each batch of `batches` (any iterable "
          "of (N, C, H, W) tensors, a generator or a DataLoader: take one at a time) and returns a dict: the "
          "conv's qualified name (from named_modules()) -> a tensor of shape (in_channels,), the largest "
          "absolute value of the conv's input in each input channel (dim 1), over every batch and every call. "
          "Keep one running maximum per conv, updated on every call: no list of activations or of per-call "
          "maxima (a calibration set can be large). The values stay in the "
          "input's dtype (abs and max are exact in any dtype). Remove the hooks in a finally:; leave the model "
          "as you found it"),
    hints=[
        "A forward pre-hook is hook(module, args): args[0] is the conv's input, before the conv runs. Register "
        "it with module.register_forward_pre_hook(hook) for every module that isinstance(module, nn.Conv2d), "
        "from model.named_modules(), with a make_hook(name) so each hook knows its name.",
        "In the hook: args[0].abs().amax(dim=(0, 2, 3)) is one value per input channel; the channels are dim 1 "
        "whatever the memory format (channels-last changes the strides, not the shape).",
        "Keep one tensor per name and replace it with torch.maximum(old, new) on every call (the first call "
        "stores new). Run the loop inside `with torch.no_grad():` and remove the handles in finally:.",
    ],
    solution=conv_absmax,
    equivalent_mutants={
        "number@8: 0 -> -1": "nn.Conv2d's forward takes one argument: args has one entry, args[-1] is args[0]",
    },
    guide="""`type(module) is nn.Conv2d` (misses subclasses, such as quantization-aware training's
    convs: `isinstance`); every convolution kind hooked (`nn.modules.conv._ConvNd`, or a test on
    `in_channels`: a ConvTranspose2d and a Conv1d too); a forward hook on the output (one value per
    output channel: the statistic of the next layer's input, not this one's); reducing over the
    wrong dimensions (the last one, or a dimension found by its size, wrong when H equals C); no
    `abs()`; keeping only the last batch's maximum; a list of every activation (or of every call's
    maxima, even as Python floats) max'ed at the end, which grows with the calibration set (the
    point of streaming statistics in hooks is that it does not); a forward hook that reads
    `args[0]`: the right numbers from the wrong hook; the running maximum kept on each conv as a
    buffer or an attribute, observer style, and left there (the model's `state_dict` gains keys: a
    checkpoint saved before calibration no longer loads); `view` on a channels-last input; no
    `torch.no_grad()`, so every statistic holds the autograd graph; `model.eval()` then
    `model.train()` in the `finally:` (a model given in eval mode leaves in train mode; even
    `model.train(was)` misses a submodule in another mode than its parent); hooks left when the
    model raises. Ask which statistic a quantizer needs to scale a conv's input (this one) and which
    hook sees that input (a pre-hook).""",
)


# -- models ---------------------------------------------------------------------------------

class _FakeQuantConv2d(nn.Conv2d):
    """A subclass of ``nn.Conv2d``, as quantization-aware training and other libraries make: an
    ``nn.Conv2d`` all the same (``type(m) is nn.Conv2d`` misses it)."""


class _ConvNet(nn.Module):
    """``head(pool(body(stem(x))))``: the convs are ``stem`` and ``body.1`` (inside a Sequential, a
    subclass of ``nn.Conv2d``); the Linear ``head`` is no conv. Input ``(N, 2, H, W)``."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        with seeded(seed):
            self.stem = nn.Conv2d(2, 4, 3, padding=1)
            self.body = nn.Sequential(nn.ReLU(), _FakeQuantConv2d(4, 3, 1), nn.Tanh())
            self.head = nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(self.stem(x)).mean(dim=(2, 3)))


class _SharedConv(nn.Module):
    """One ``Conv2d(3, 3)`` called twice in one forward (``conv(tanh(conv(x)))``), then ``out``."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        with seeded(seed):
            self.conv = nn.Conv2d(3, 3, 3, padding=1)
            self.out = nn.Conv2d(3, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.conv(torch.tanh(self.conv(x))))


class _RaisingConv(nn.Module):
    """``stem`` runs, then the forward raises :class:`kit.KitError` (while ``fail``) before ``conv2``."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        with seeded(seed):
            self.stem = nn.Conv2d(2, 4, 3, padding=1)
            self.conv2 = nn.Conv2d(4, 3, 1)
        self.fail = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.stem(x)
        if self.fail:
            raise kit.KitError("the check's model raised halfway through its forward (on purpose)")
        return self.conv2(h)


class _OtherConvs(nn.Module):
    """``line(conv(up(x)).flatten(2))``: a ``ConvTranspose2d``, a ``Conv2d`` and a ``Conv1d``, of which
    only ``conv`` is an ``nn.Conv2d``. Input ``(N, 2, H, W)``."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        with seeded(seed):
            self.up = nn.ConvTranspose2d(2, 3, 2, stride=2)
            self.conv = nn.Conv2d(3, 3, 3, padding=1)
            self.line = nn.Conv1d(3, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.line(self.conv(self.up(x)).flatten(2))


def _batches(shapes: list[tuple[int, ...]], seed: int, dtype: torch.dtype = torch.float32,
             channels_last: bool = False) -> list[torch.Tensor]:
    out = [kit.randn(*shape, seed=seed + i, scale=2.0).to(dtype) for i, shape in enumerate(shapes)]
    return [b.to(memory_format=torch.channels_last) for b in out] if channels_last else out


# -- the reference: every conv's inputs recorded by the check's own hooks, reduced afterwards ----

def _conv_inputs(model: nn.Module, batches: list[torch.Tensor]) -> dict[str, list[torch.Tensor]]:
    """Every input of every Conv2d, by name and in calling order (copies), from one run over the batches."""
    seen: dict[str, list[torch.Tensor]] = {}
    handles = [m.register_forward_pre_hook(lambda m, args, name=name: seen.setdefault(name, []).append(
        args[0].detach().clone())) for name, m in model.named_modules() if isinstance(m, nn.Conv2d)]
    try:
        with torch.no_grad():
            for b in batches:
                model(b)
    finally:
        for h in handles:
            h.remove()
    return seen


def _per_channel(inputs: list[torch.Tensor], signed: bool = False) -> torch.Tensor:
    """Largest |value| (or largest value) per channel (dim 1) over a list of (N, C, H, W) tensors."""
    flat = torch.cat([x.transpose(0, 1).reshape(x.shape[1], -1) for x in inputs], dim=1)
    return (flat if signed else flat.abs()).max(dim=1).values


class _Reference:
    """The right result and what the typical mistakes return, computed before the answer runs."""

    def __init__(self, model: nn.Module, batches: list[torch.Tensor]) -> None:
        calls = _conv_inputs(model, batches)
        per_batch = {name: len(xs) // len(batches) for name, xs in calls.items()}
        self.want = {name: _per_channel(xs) for name, xs in calls.items()}
        self.mistakes = {name: {
            "no abs": (_per_channel(xs, signed=True), (
                "that is the largest value, not the largest magnitude: a quantization scale needs "
                "max(|x|), take .abs() before the maximum")),
            "last batch": (_per_channel(xs[-per_batch[name]:]), (
                "that is the last batch's maximum only: keep a running maximum over every batch, "
                "torch.maximum(old, new)")),
            "first call": (_per_channel(xs[:1]), (
                "that is the first call's maximum only: update the running maximum on every call")),
        } for name, xs in calls.items()}
        self.in_channels = {name: model.get_submodule(name).in_channels for name in calls}
        self.out_channels = {name: model.get_submodule(name).out_channels for name in calls}


def _expect_absmax(t: Tester, got: object, ref: _Reference, what: str) -> None:
    t.expect_type(got, dict, what=what, nudge="return a dict: the conv's name -> its running absmax")
    names = sorted(str(k) for k in got)
    t.expect(names == sorted(ref.want), what=f"the names in {what}", expected=sorted(ref.want), got=names, nudge=(
        "one entry per nn.Conv2d, keyed by its qualified name from model.named_modules() (nested ones too, "
        "subclasses of nn.Conv2d too: isinstance(module, nn.Conv2d), and nothing else)"))
    for name, want in ref.want.items():
        value = got[name]
        t.expect_type(value, torch.Tensor, what=f"{what}[{name!r}]", nudge="a tensor of shape (in_channels,)")
        kit.expect_detached(t, value, what=f"{what}[{name!r}]")
        if value.shape != want.shape and tuple(value.shape) == (ref.out_channels[name],):
            t.expect(False, what=f"{what}[{name!r}].shape", expected=tuple(want.shape), got=tuple(value.shape),
                     nudge=("one value per OUTPUT channel: a forward hook sees the conv's output; calibrating "
                            "the conv's input needs a forward PRE-hook, hook(module, args), and args[0]"))
        t.expect(value.dtype == want.dtype, what=f"{what}[{name!r}].dtype", expected=want.dtype, got=value.dtype,
                 nudge="keep the input's dtype: abs and max are exact in any dtype, a conversion only rounds")
        # abs and max are exact, and the check's run repeats the same convolutions: equal up to the
        # last bit; 1e-6 relative only guards against a kernel that rounds differently on a rerun
        t.expect_close(value, want, what=f"{what}[{name!r}]", atol=0.0, rtol=1e-6,
                       wrong=ref.mistakes[name], nudge=(
                           "per input channel (dim 1 of the (N, C, H, W) input, whatever its memory format): "
                           "the largest |value| over N, H and W, over every batch and every call"))


def _one_at_a_time(batches: list[torch.Tensor], probe: Callable[[int], None]) -> Iterator[torch.Tensor]:
    """A generator over ``batches`` that calls ``probe(i)`` as batch ``i`` is taken."""
    for i, batch in enumerate(batches):
        probe(i)
        yield batch


def _answers_hooks(model: nn.Module, skip: set[int], global_before: set[int]) -> dict[str, list[object]]:
    """The hooks the answer put on ``model``'s modules and the global module hooks it registered
    (not the caller's stand-ins, not the ids in ``skip`` nor global ones older than the answer):
    ``{"pre": [...], "forward": [...], "global pre": [...], "global forward": [...]}``."""
    mine = lambda hooks: [fn for i, fn in hooks.items() if i not in skip and i not in CALLERS_HOOK_IDS]  # noqa: E731
    fresh = lambda hooks: [fn for i, fn in hooks.items() if i not in global_before]  # noqa: E731
    return {"pre": [fn for m in model.modules() for fn in mine(m._forward_pre_hooks)],
            "forward": [fn for m in model.modules() for fn in mine(m._forward_hooks)],
            "global pre": fresh(module_hooks._global_forward_pre_hooks),
            "global forward": fresh(module_hooks._global_forward_hooks)}


def _global_ids() -> set[int]:
    return set(module_hooks._global_forward_pre_hooks) | set(module_hooks._global_forward_hooks)


def _kept_bytes(model: nn.Module, skip: set[int], global_before: set[int]) -> int | None:
    """The size of what the answer's hooks refer to, and of what the model's modules hold besides
    their parameters, buffers, submodules and hook dicts (an attribute set by a hook); None when it
    cannot be measured."""
    roots = [fn for fns in _answers_hooks(model, skip, global_before).values() for fn in fns]
    roots += [v for m in model.modules() for k, v in vars(m).items()
              if k not in ("_parameters", "_buffers", "_modules") and "hook" not in k]
    try:
        return held_bytes(roots)
    except Exception:   # an object of the answer's that will not say its size: no measure, no verdict
        return None


def _pre_hooked(model: nn.Module, skip: set[int], global_before: set[int]) -> dict[str, str]:
    """For each Conv2d of ``model``: "pre" when a forward pre-hook of the answer's is on it (or a global
    one of the answer's), else "forward" for a forward hook, else "none"."""
    hooks = _answers_hooks(model, skip, global_before)
    kinds = {}
    for name, m in model.named_modules():
        if isinstance(m, nn.Conv2d):
            on = lambda d: any(i not in skip and i not in CALLERS_HOOK_IDS for i in d)  # noqa: E731
            kinds[name] = ("pre" if on(m._forward_pre_hooks) or hooks["global pre"] else
                           "forward" if on(m._forward_hooks) or hooks["global forward"] else "none")
    return kinds


def _call(answer: Callable, model: nn.Module, batches: list[torch.Tensor]) -> object:
    return answer(model, iter(list(batches)))


def _expect_no_additions(t: Tester, model: nn.Module, before: dict[str, set[str]]) -> None:
    found = added_to(model, before)
    where, added = found or ("", [])
    t.expect(found is None, what=f"the model's {where} after conv_absmax", expected="as before",
             got=f"{added} added", nudge=(
                 "leave the model as you found it: a buffer (register_buffer) or an attribute that your "
                 "hook sets stays on the conv after the call; a buffer changes the model's state_dict, so "
                 "a checkpoint saved before calibration no longer loads into it (missing keys). Keep the "
                 "running maxima in a dict of your own, and return it"))


@exercise.case("a nested model (convs stem and body.1, a Linear head), three batches of different sizes")
def _(answer, t: Tester) -> None:
    model = t.track(_ConvNet(seed=1), "the conv net")
    batches = _batches([(3, 2, 5, 5), (5, 2, 5, 5), (1, 2, 5, 5)], seed=1)
    ref, before = _Reference(model, batches), module_contents(model)
    _expect_absmax(t, _call(answer, model, batches), ref, "conv_absmax(net, batches)")
    _expect_no_additions(t, model, before)


@exercise.case("a conv called twice in one forward: the running max covers both calls")
def _(answer, t: Tester) -> None:
    model = t.track(_SharedConv(seed=2), "a model whose forward calls `conv` twice")
    batches = _batches([(2, 3, 4, 5), (4, 3, 4, 5)], seed=2)
    ref = _Reference(model, batches)
    _expect_absmax(t, _call(answer, model, batches), ref, "conv_absmax(shared, batches)")


@exercise.case("24 channels-last batches from a generator: one at a time, a running max and not a list")
def _(answer, t: Tester) -> None:
    model = t.track(_ConvNet(seed=3), "the conv net")
    batches = _batches([(3, 2, 6, 5)] * 24, seed=30, channels_last=True)
    ref = _Reference(model, batches)
    calls: list[int] = []
    seen: list[tuple[int, int]] = []   # as each batch is taken: (forwards so far, tensors alive)
    kept: dict[int, int | None] = {}   # batch 5 and batch 24: bytes the answer's hooks refer to
    kinds: dict[str, str] = {}   # at batch 5: the kind of hook of the answer's on each conv
    counter = model.stem.register_forward_pre_hook(lambda m, args: calls.append(1))
    skip, global_before = {counter.id}, _global_ids()

    def probe(i: int) -> None:
        seen.append((len(calls), created.alive()))
        if i in (4, 23):
            kept[i] = _kept_bytes(model, skip, global_before)
        if i == 4:
            kinds.update(_pre_hooked(model, skip, global_before))

    try:
        with Created() as created:
            got = answer(model, _one_at_a_time(batches, probe))
    finally:
        counter.remove()
    t.expect(len(seen) == 24, what="batches taken from the generator", expected=24, got=len(seen),
             nudge="run model(batch) for every batch of `batches`")
    t.expect(seen[-1][0] >= 20, what="forwards run before the last batch was taken", expected="23",
             got=seen[-1][0], nudge=(
                 "take the batches one at a time (for batch in batches: model(batch)): a calibration set is "
                 "often larger than memory, and list(batches) holds all of it"))
    grew = seen[-1][1] - seen[4][1]
    t.expect(grew < 8, what="tensors your code made that are still alive, batch 24 against batch 5",
             expected="as many (a running max per conv)", got=f"{grew} more", nudge=(
                 "what you keep grows with the number of batches: keep one running maximum per conv and "
                 "replace it on every call (torch.maximum(old, new)), never a list of activations or of "
                 "per-batch maxima"))
    more = kept[23] - kept[4] if kept.get(4) is not None and kept.get(23) is not None else 0
    t.expect(more < 256, what="the size of what your hooks keep, batch 24 against batch 5", expected="the same",
             got=f"{more} bytes more", nudge=(
                 "what your hooks keep grows with the number of batches (a list of per-call maxima, as "
                 "tensors or as Python floats, or of activations): keep one running maximum per conv and "
                 "replace it on every call (torch.maximum(old, new))"))
    _expect_absmax(t, got, ref, "conv_absmax(net, batches)")
    other = {name: kind for name, kind in kinds.items() if kind != "pre"}
    name, kind = next(iter(other.items()), ("", "pre"))
    t.expect(not other, what=f"your hook on {name!r} while the model ran", expected="a forward pre-hook",
             got="a forward hook" if kind == "forward" else "none", nudge=(
                 "the numbers are right, but the task asks for a forward PRE-hook on every conv, "
                 "hook(module, args), registered with module.register_forward_pre_hook: the hook that runs "
                 "before the conv, on its input, which is all the statistic needs (a forward hook runs after "
                 "the conv has computed its output)"))


@exercise.case("a float64 model, then a bfloat16 one: the result stays in the input's dtype")
def _(answer, t: Tester) -> None:
    for dtype in (torch.float64, torch.bfloat16):
        model = t.track(_ConvNet(seed=4).to(dtype), f"the {dtype} conv net".replace("torch.", ""))
        batches = _batches([(3, 2, 5, 5), (2, 2, 5, 5)], seed=4, dtype=dtype)
        ref = _Reference(model, batches)
        _expect_absmax(t, _call(answer, model, batches), ref, f"conv_absmax({dtype} net, batches)".replace(
            "torch.", ""))


@exercise.case("a model that raises halfway through its forward: no hook may stay")
def _(answer, t: Tester) -> None:
    model = t.track(_RaisingConv(seed=5), "a model that raises after its first conv")
    kit.call_expecting_kit_error(answer, model, iter(_batches([(2, 2, 5, 5)], seed=5)))
    # the Tester reports a hook that stayed (not removed in a finally:) after this case


@exercise.case("the same model calibrated twice: each call starts afresh")
def _(answer, t: Tester) -> None:
    model = t.track(_ConvNet(seed=6), "the conv net")
    big, small = _batches([(3, 2, 5, 5)], seed=6), _batches([(3, 2, 5, 5)], seed=60)
    _call(answer, model, [b * 10 for b in big])
    ref = _Reference(model, small)
    _expect_absmax(t, _call(answer, model, small), ref, "the second conv_absmax(net, batches)")


@exercise.case("a ConvTranspose2d and a Conv1d beside a Conv2d: only the nn.Conv2d is calibrated", hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(_OtherConvs(seed=8), "a model with three convolution kinds")
    batches = _batches([(2, 2, 3, 3), (3, 2, 3, 3)], seed=8)
    ref = _Reference(model, batches)
    got = _call(answer, model, batches)
    if isinstance(got, dict):
        others = sorted(str(k) for k in got if str(k) in ("up", "line"))
        t.expect(not others, what="the names in conv_absmax(model, batches)", expected=sorted(ref.want),
                 got=sorted(str(k) for k in got), nudge=(
                     "only the nn.Conv2d layers: a ConvTranspose2d or a Conv1d is another layer kind (a test on "
                     "nn.modules.conv._ConvNd, or on in_channels, takes them all): isinstance(module, nn.Conv2d)"))
    _expect_absmax(t, got, ref, "conv_absmax(model, batches)")


@exercise.case("H == W == C, in train mode, then in eval mode with its conv `out` in train mode: only dim 1 is "
               "the channel dimension, and every module is left in its mode", hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(_SharedConv(seed=7), "a model whose convs see (N, 3, 3, 3) inputs")
    batches = _batches([(2, 3, 3, 3), (5, 3, 3, 3)], seed=7)
    ref = _Reference(model, batches)
    for mode in ("train mode", "eval mode, its conv `out` in train mode"):
        if mode != "train mode":   # model.train() (or model.train(was)) afterwards does not restore this
            model.eval()
            model.out.train()
        grad_modes: list[bool] = []
        probe = model.conv.register_forward_pre_hook(lambda m, args: grad_modes.append(torch.is_grad_enabled()))
        try:
            with kit.LeftAsFound(t, model, name=f"the model (in {mode})"):
                got = _call(answer, model, batches)
        finally:
            probe.remove()
        t.expect(not any(grad_modes), what="torch.is_grad_enabled() while the model ran", expected=False,
                 got=any(grad_modes), nudge="run the batches under torch.no_grad(): calibration needs no graph")
        _expect_absmax(t, got, ref, f"conv_absmax(model in {mode}, batches)")


# -- the wrong answers peculiar to this exercise -------------------------------------------------

def _calibrate(*, hook="pre", dims=(0, 2, 3), magnitude=True, update="running", grad_mode="off",
               remove="finally", eval_mode=None, select="isinstance"):
    """One factory for the near-copy wrong answers: ``hook`` ("pre", "forward": the output, "forward on
    the input": a forward hook that reads args[0]), ``dims``
    (reduced over; "by size": the last dim whose size is in_channels is taken as the channels),
    ``magnitude`` (False: no abs), ``update`` ("running", "last": overwritten, "list": every input kept
    and max'ed at the end, "floats": every call's maxima kept as Python floats, "buffer" / "attribute": the
    running maximum kept on each conv as a buffer / a plain attribute, and left there),
    ``grad_mode`` ("off", "on": no torch.no_grad), ``remove`` ("finally",
    "after", "never"), ``eval_mode`` (model.eval(), then: "left" as it is, "train()": model.train() in the
    finally:, "train(was)": model.train(the model's own flag before) in the finally:) and ``select``
    ("isinstance", "type is": ``type(module) is nn.Conv2d``, which misses subclasses)."""
    def answer(model, batches):
        absmax, kept, floats, handles = {}, {}, {}, []

        def reduce(module, x):
            x = x.abs() if magnitude else x
            if dims == "by size":
                channel = max(d for d in range(x.dim()) if x.shape[d] == module.in_channels)
                return x.amax(dim=[d for d in range(x.dim()) if d != channel])
            return x.amax(dim=dims)

        def make_hook(name):
            def observe(module, x):
                if update == "list":
                    kept.setdefault(name, []).append(x)
                    return
                if update == "floats":
                    floats.setdefault(name, []).append((reduce(module, x).tolist(), x.dtype))
                    return
                amax = reduce(module, x)
                if update in ("buffer", "attribute"):   # observer style: the running max kept on the conv
                    old = getattr(module, "absmax", None)
                    new = amax if old is None else torch.maximum(old, amax)
                    if update == "buffer":
                        module.register_buffer("absmax", new)
                    else:
                        module.absmax = new
                    absmax[name] = new
                    return
                absmax[name] = torch.maximum(absmax[name], amax) if name in absmax and update == "running" else amax
            if hook == "pre":
                return lambda module, args: observe(module, args[0])
            if hook == "forward on the input":
                return lambda module, args, output: observe(module, args[0])
            return lambda module, args, output: observe(module, output)

        for name, module in model.named_modules():
            if isinstance(module, nn.Conv2d) if select == "isinstance" else type(module) is nn.Conv2d:
                register = module.register_forward_pre_hook if hook == "pre" else module.register_forward_hook
                handles.append(register(make_hook(name)))
        was = model.training
        if eval_mode is not None:
            model.eval()

        def run():
            with torch.set_grad_enabled(grad_mode == "on"):
                for batch in batches:
                    model(batch)

        if remove == "finally":
            try:
                run()
            finally:
                for handle in handles:
                    handle.remove()
                if eval_mode in ("train()", "train(was)"):
                    model.train(True if eval_mode == "train()" else was)
        else:
            run()
            if remove == "after":
                for handle in handles:
                    handle.remove()
        for name, xs in kept.items():
            absmax[name] = torch.stack([reduce(model.get_submodule(name), x) for x in xs]).amax(0)
        for name, rows in floats.items():
            absmax[name] = torch.tensor([row for row, _ in rows], dtype=rows[0][1]).amax(0)
        return absmax
    return answer


exercise.wrong("a forward hook on the output: per output channel", mentions="OUTPUT channel")(
    _calibrate(hook="forward"))
exercise.wrong("type(module) is nn.Conv2d: misses a subclass", mentions="one entry per nn.Conv2d")(
    _calibrate(select="type is"))
exercise.wrong("a forward hook that reads args[0]", mentions="PRE-hook")(_calibrate(hook="forward on the input"))
exercise.wrong("every call's maxima kept as Python floats, max'ed at the end",
               mentions="grows with the number of batches")(_calibrate(update="floats"))
exercise.wrong("the running max kept as a buffer on each conv, and left there", mentions="state_dict")(
    _calibrate(update="buffer"))
exercise.wrong("the running max kept as an attribute of each conv, and left there", mentions="as you found it")(
    _calibrate(update="attribute"))
exercise.wrong("the last dimension instead of dim 1", mentions="dim 1")(_calibrate(dims=(0, 1, 2)))
exercise.wrong("no abs()", mentions="largest magnitude")(_calibrate(magnitude=False))
exercise.wrong("only the last batch", mentions="last batch's maximum")(_calibrate(update="last"))
exercise.wrong("a list of every activation, max'ed at the end", mentions="grows with the number of batches")(
    _calibrate(update="list"))
exercise.wrong("no torch.no_grad()", mentions="autograd history")(_calibrate(grad_mode="on"))
exercise.wrong("removes the hooks, but not in a finally block", mentions="`finally:`")(_calibrate(remove="after"))
exercise.wrong("forgets to remove the hooks", mentions="still attached")(_calibrate(remove="never"))
exercise.wrong("finds the channel dimension by its size", mentions="whatever its memory format", hidden=True)(
    _calibrate(dims="by size"))
exercise.wrong("switches the model to eval() and leaves it there", mentions="as you found it", hidden=True)(
    _calibrate(eval_mode="left"))
exercise.wrong("model.eval(), then model.train() in the finally:", mentions="as you found it", hidden=True)(
    _calibrate(eval_mode="train()"))
exercise.wrong("model.eval(), then model.train(was) in the finally: (the model's flag only)",
               mentions="as you found it", hidden=True)(_calibrate(eval_mode="train(was)"))


@exercise.wrong("hooks every convolution kind (_ConvNd), not only nn.Conv2d", mentions="another layer kind",
                hidden=True)
def _every_conv_kind(model, batches):
    absmax, handles = {}, []

    def make_hook(name):
        def hook(module, args):
            amax = args[0].abs().amax(dim=[d for d in range(args[0].dim()) if d != 1])
            absmax[name] = torch.maximum(absmax[name], amax) if name in absmax else amax
        return hook

    try:
        for name, module in model.named_modules():
            if isinstance(module, nn.modules.conv._ConvNd):
                handles.append(module.register_forward_pre_hook(make_hook(name)))
        with torch.no_grad():
            for batch in batches:
                model(batch)
    finally:
        for handle in handles:
            handle.remove()
    return absmax


exercise.equivalent_mutants["context: no-grad"] = "it runs the model under its own torch.no_grad() already"
