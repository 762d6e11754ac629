"""02_forward_hooks, exercise 3: see the positional and keyword arguments a layer received.

Half-right answers an examiner expects, by kit dimension (``kit.DIMENSIONS``):

- technique: wraps ``layer.forward`` instead of registering a hook; registers without
  ``with_kwargs=True`` (keyword arguments never reach the hook); reads ``args[0]`` (fails when
  the layer gets keywords only);
- inplace_after: stores the arguments without copies, which the in-place ReLU rewrites;
  copies the top-level tensors only, so a tensor inside a tuple argument (an LSTM's state
  ``(h, c)``) is kept by reference and the model's later in-place update of its state shows;
- detached: copies with ``a.clone()``, which keeps the autograd graph;
- raises: never removes the hook, or removes it without ``finally:``;
- left_as_found: clears ``layer._forward_pre_hooks``, which removes the caller's own pre-hooks;
- dtype (hidden): copies as float32; drops keyword arguments whose value is None;
- a wrong type: returns a dict or None;
- hidden (inplace_after): copies the positional arguments but not the keyword ones, which the
  caller's later in-place edit shows; copies inside tuples but not inside a list or a dict
  argument.
"""

from __future__ import annotations

import torch
from torch import nn

from ...models import TwoInputNet, seeded
from .. import kit
from ..core import Exercise, Tester
from ._shared import CallerHooks


def calls_of(model, x, layer):
    """[(args, kwargs), ...] for each call of `layer` during model(x), tensors copied."""
    ### BEGIN SOLUTION
    calls = []

    def copy(value):
        """A detached copy of each tensor in value, also inside tuples, lists and dicts."""
        if isinstance(value, torch.Tensor):
            return value.detach().clone()
        if isinstance(value, tuple):
            return tuple(copy(v) for v in value)
        if isinstance(value, list):
            return [copy(v) for v in value]
        if isinstance(value, dict):
            return {k: copy(v) for k, v in value.items()}
        return value

    def record(module, args, kwargs):
        calls.append((copy(args), copy(kwargs)))

    handle = layer.register_forward_pre_hook(record, with_kwargs=True)
    try:
        model(x)
    finally:
        handle.remove()
    return calls
    ### END SOLUTION


exercise = Exercise(
    "forward_hooks.calls_of", "See positional and keyword arguments",
    task=("write calls_of(model, x, layer) that runs model(x) once and returns a list with one "
          "(args, kwargs) pair per call of `layer`: the tuple of positional arguments and the "
          "dict of keyword arguments it received, every tensor copied and detached (no autograd "
          "graph), also a tensor inside a tuple, list or dict argument; the hook is removed afterwards"),
    hints=[
        "Keyword arguments never reach an ordinary hook's args. Register a forward pre-hook with "
        "layer.register_forward_pre_hook(record, with_kwargs=True); it is called as "
        "record(module, args, kwargs).",
        "Copy the tensors before the layer runs: an in-place layer (ReLU(inplace=True)) "
        "overwrites its own input. Write copy(value): a tensor gives value.detach().clone(), a "
        "tuple, list or dict gives a new one with each item copied (call copy on each item, so "
        "an LSTM's state (h, c) is copied too), anything else (2.0, None) is returned as it is. "
        "Then store (copy(args), copy(kwargs)).",
        "Remove the handle in a finally: block.",
    ],
    solution=calls_of,
    errors={"tuple index out of range": (
        "args was empty: the layer was called with keyword arguments only, and args holds the "
        "positional ones. Read both with register_forward_pre_hook(..., with_kwargs=True)")},
    equivalent_mutants={},
    guide="""registering without `with_kwargs=True`, so keyword arguments never reach the hook;
    reading `args[0]` when the layer was called with keywords only (`args` is empty); storing the
    arguments without copying them (an in-place ReLU rewrites its own input); copying only the
    top-level tensors, so an LSTM's state `(h, c)`, a tuple, is kept by reference and changes
    when the model updates its state in place; leaving the hook
    attached, removing it without `finally:`, or by clearing `layer._forward_pre_hooks` (the
    caller's pre-hooks go too); wrapping `layer.forward` instead of a hook. Caught at grading:
    copying the positional arguments but not the keyword ones, which the caller's later in-place
    edit shows; copying inside tuples but not inside a list or a dict; float32 copies; dropping a
    keyword argument whose value is None.""",
)


def _copy(value):
    """A copy of a tensor, other values as they are: the top level only."""
    return value.detach().clone() if isinstance(value, torch.Tensor) else value


def _deep_copy(value, into=(tuple, list, dict)):
    """A copy of each tensor in value, also inside the containers of the kinds in ``into``."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (tuple, list)) and isinstance(value, into):
        return type(value)(_deep_copy(v, into) for v in value)
    if isinstance(value, dict) and dict in into:
        return {k: _deep_copy(v, into) for k, v in value.items()}
    return value


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
                  kw_nudge: str, copy_nudge: str, detached: bool = True) -> None:
    t.expect(isinstance(got, (tuple, list)) and len(got) == 2, what=f"calls[{index}]",
             expected="a pair (args, kwargs)", got=got, nudge="append a 2-tuple (args, kwargs) per call")
    got_args, got_kwargs = got
    t.expect(isinstance(got_args, tuple) and len(got_args) == len(args), what=f"calls[{index}][0] (args)",
             expected=f"a tuple of {len(args)} positional argument(s)", got=got_args,
             nudge="store the args tuple the hook receives")
    for i, (g, e) in enumerate(zip(got_args, args)):
        _expect_same(t, g, e, f"calls[{index}][0][{i}]", copy_nudge)
    t.expect(isinstance(got_kwargs, dict) and sorted(got_kwargs) == sorted(kwargs),
             what=f"the keyword names of calls[{index}][1]", expected=sorted(kwargs),
             got=sorted(got_kwargs) if isinstance(got_kwargs, dict) else got_kwargs, nudge=kw_nudge)
    assert isinstance(got_kwargs, dict)
    for k, e in kwargs.items():
        _expect_same(t, got_kwargs[k], e, f"calls[{index}][1][{k!r}]", copy_nudge)
    if detached:   # after the values, so that a missing copy is named as such first
        for what, g in _tensors(got_args, f"calls[{index}][0]"):
            kit.expect_detached(t, g, what=what)
        for what, g in _tensors(got_kwargs, f"calls[{index}][1]"):
            kit.expect_detached(t, g, what=what)


def _expect_same(t: Tester, got: object, expected: object, what: str, copy_nudge: str) -> None:
    """``got`` holds what ``expected`` holds: each tensor close and of its dtype, also inside
    tuples, lists and dicts (a tuple and a list of the same items both pass); other values equal."""
    if isinstance(expected, torch.Tensor):
        t.expect_close(got, expected, what=what, nudge=copy_nudge)
        _expect_dtype(t, got, expected, what)
    elif isinstance(expected, (tuple, list)):
        t.expect(isinstance(got, (tuple, list)) and len(got) == len(expected), what=what,
                 expected=f"a {type(expected).__name__} of {len(expected)} item(s)", got=got,
                 nudge="store each argument as the layer received it, with a copy of every tensor inside it")
        for i, (g, e) in enumerate(zip(got, expected)):
            _expect_same(t, g, e, f"{what}[{i}]", copy_nudge)
    elif isinstance(expected, dict):
        t.expect(isinstance(got, dict) and sorted(got) == sorted(expected), what=what,
                 expected=f"a dict with the keys {sorted(expected)}", got=got,
                 nudge="store each argument as the layer received it, with a copy of every tensor inside it")
        for k, e in expected.items():
            _expect_same(t, got[k], e, f"{what}[{k!r}]", copy_nudge)
    else:
        t.expect(not isinstance(got, torch.Tensor) and got == expected, what=what, expected=expected,
                 got=got, nudge="store the values that are not tensors as the layer received them")


def _tensors(value: object, what: str):
    """(where, tensor) for each tensor in value, also inside tuples, lists and dicts."""
    if isinstance(value, torch.Tensor):
        yield what, value
    elif isinstance(value, (tuple, list)):
        for i, v in enumerate(value):
            yield from _tensors(v, f"{what}[{i}]")
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _tensors(v, f"{what}[{k!r}]")


def _expect_dtype(t: Tester, got: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    t.expect(got.dtype == expected.dtype, what=f"the dtype of {what}", expected=expected.dtype, got=got.dtype,
             nudge="copy each tensor as the layer received it, dtype included: a.detach().clone()")


_KW_NUDGE = ("register the pre-hook with with_kwargs=True: without it, keyword arguments never "
             "reach the hook. Then store the kwargs dict it receives")


@exercise.case("a module called with positional arguments, then with keywords only")
def _(answer, t: Tester) -> None:
    model = t.track(_KeywordCaller(), "a model that calls `inner` twice")
    x = torch.randn(2, 2, generator=torch.Generator().manual_seed(11))
    y = model.inner(x, x + 1)
    with kit.HookWitness({"inner": model.inner}) as seen:
        got = answer(model, x, model.inner)
    used_forward = seen.fired("inner", "forward") > 0
    t.expect(seen.fired("inner", "forward_pre") == 2, what="forward pre-hooks on `inner` while it ran",
             expected="yours, on both calls", got=f"on {seen.fired('inner', 'forward_pre')} of 2 calls", nudge=(
                 "a forward hook runs after the layer: it sees arguments the layer may have changed in place, "
                 "and none of a call that raises. Record them before the call, with a forward pre-hook "
                 "(register_forward_pre_hook(..., with_kwargs=True))" if used_forward else
                 "record the calls with a forward pre-hook on the layer (register_forward_pre_hook(..., "
                 "with_kwargs=True)), not by wrapping or replacing layer.forward"))
    t.expect_type(got, list, what="what calls_of returned", nudge="return the list of (args, kwargs) pairs")
    t.expect(len(got) == 2, what="calls_of(model, x, model.inner)",
             expected="a list of 2 (args, kwargs) pairs", got=got if not isinstance(got, list) else
             f"a list of {len(got)}", nudge="`inner` is called twice: append one pair per call")
    _compare_call(t, got[0], 0, (x, x + 1), {}, kw_nudge=_KW_NUDGE,
                  copy_nudge="store copies of the positional arguments", detached=False)
    _compare_call(t, got[1], 1, (), {"a": y, "b": x, "scale": 2.0}, kw_nudge=_KW_NUDGE,
                  copy_nudge="store copies of the keyword arguments' tensors", detached=False)


@exercise.case("the input of an in-place ReLU")
def _(answer, t: Tester) -> None:
    model = t.track(_InplaceAfter(), "a Linear followed by ReLU(inplace=True)")
    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(12))
    raw = model.lin(x).detach()
    with CallerHooks(t, {"act": model.act}, kind="forward_pre"):
        got = answer(model, x, model.act)
    t.expect_type(got, list, what="what calls_of returned", nudge="return the list of (args, kwargs) pairs")
    t.expect(len(got) == 1, what="calls_of(model, x, model.act)",
             expected="a list of 1 (args, kwargs) pair", got=got, nudge="append one pair per call")
    _compare_call(t, got[0], 0, (raw,), {}, kw_nudge=_KW_NUDGE,
                  copy_nudge="the stored input lost its negative values: ReLU(inplace=True) rewrote "
                             "the tensor after your pre-hook ran. Store a copy, a.detach().clone()")


class _Stateful(nn.Module):
    """Calls an LSTM with the state it keeps, ``lstm(x, (h, c))``, then updates that state in
    place: a tensor inside a tuple argument changes after the call."""

    def __init__(self) -> None:
        super().__init__()
        with seeded(20):
            self.lstm = nn.LSTM(3, 2, batch_first=True)
        self.register_buffer("h", kit.randn(1, 2, 2, seed=21))
        self.register_buffer("c", kit.randn(1, 2, 2, seed=22))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, (h, c) = self.lstm(x, (self.h, self.c))
        with torch.no_grad():
            self.h.copy_(h)
            self.c.copy_(c)
        return out


@exercise.case("an LSTM called with its state (h, c), a tuple, which the model then updates in place")
def _(answer, t: Tester) -> None:
    model = t.track(_Stateful(), "a model that keeps its LSTM's state (h, c) and updates it")
    x = kit.randn(2, 4, 3, seed=20)
    state = (model.h.clone(), model.c.clone())
    got = answer(model, x, model.lstm)
    t.expect_type(got, list, what="what calls_of returned", nudge="return the list of (args, kwargs) pairs")
    t.expect(len(got) == 1, what="len(calls_of(model, x, model.lstm))", expected=1, got=len(got),
             nudge="append one pair per call")
    _compare_call(t, got[0], 0, (x, state), {}, kw_nudge=_KW_NUDGE, copy_nudge=(
        "the recorded state (h, c) changed when the model updated it in place after the call: a "
        "tensor inside a tuple argument needs its own copy too. Copy each item of a tuple (or list, "
        "or dict) the same way, with a copy function that calls itself on each item"))


@exercise.case("a model that raises halfway through its forward: the hook must still go")
def _(answer, t: Tester) -> None:
    kit.expect_clean_after_raise(t, answer, seed=16)


class _Masked(nn.Module):
    """Calls ``inner(x, mask=None)``: a keyword argument whose value is None."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = _MaskedLinear()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x, mask=None)


class _MaskedLinear(nn.Linear):
    def __init__(self) -> None:
        super().__init__(2, 2)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        out = super().forward(x)
        return out if mask is None else out * mask


@exercise.case("a layer called with a keyword argument whose value is None (mask=None)", hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(_Masked(), "a model that calls `inner(x, mask=None)`")
    x = kit.randn(2, 2, seed=19)
    got = answer(model, x, model.inner)
    t.expect_type(got, list, what="what calls_of returned", nudge="return the list of (args, kwargs) pairs")
    t.expect(len(got) == 1, what="len(calls_of(model, x, model.inner))", expected=1, got=len(got),
             nudge="append one pair per call")
    _compare_call(t, got[0], 0, (x,), {"mask": None}, detached=False, copy_nudge="store copies of the arguments",
                  kw_nudge="keep every keyword argument the layer received, also one whose value is None")


@exercise.case("the caller changes its tensors in place after calls_of returned (in float64)", hidden=True)
def _(answer, t: Tester) -> None:
    model, x = kit.in_dtype(_KeywordCaller(), torch.randn(2, 2, generator=torch.Generator().manual_seed(17)))
    t.track(model, "a model that calls `inner` twice")
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


class _Fuse(nn.Module):
    """``fuse([x, memory], weights={"gate": gate})``: a list and a dict of tensors."""

    def forward(self, parts: list, weights: dict) -> torch.Tensor:
        return weights["gate"] * (parts[0] + parts[1])


class _Memory(nn.Module):
    """Calls ``fuse`` with a list holding its memory and a dict holding its gate, then updates
    both in place."""

    def __init__(self) -> None:
        super().__init__()
        self.fuse = _Fuse()
        self.register_buffer("memory", kit.randn(2, 3, seed=23))
        self.register_buffer("gate", kit.randn(3, seed=24))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.fuse([x, self.memory], weights={"gate": self.gate})
        self.memory.mul_(0.5)
        self.gate.add_(1.0)
        return out


@exercise.case("a layer called with a list and a dict of tensors that the model then updates in place",
               hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(_Memory(), "a model that fuses its memory and updates it")
    x = kit.randn(2, 3, seed=25).requires_grad_()  # inside the list: its copy must be detached too
    memory, gate = model.memory.clone(), model.gate.clone()
    got = answer(model, x, model.fuse)
    t.expect_type(got, list, what="what calls_of returned", nudge="return the list of (args, kwargs) pairs")
    t.expect(len(got) == 1, what="len(calls_of(model, x, model.fuse))", expected=1, got=len(got),
             nudge="append one pair per call")
    _compare_call(t, got[0], 0, ([x, memory],), {"weights": {"gate": gate}}, kw_nudge=_KW_NUDGE, copy_nudge=(
        "a tensor inside a list or a dict argument changed when the model updated it in place after "
        "the call: copy the tensors inside lists and dicts too, not only inside tuples"))


# -- the wrong answers peculiar to this exercise -------------------------------------------------

def _recorder(*, with_kwargs=True, copy_args=True, copy_kwargs=True, remove="with", store=list, copy=_deep_copy):
    """One factory for the near-copy wrong answers: whether the hook is registered with
    ``with_kwargs``, which arguments it copies, how the hook is removed ("with": the handle as a
    context manager, "after": not in a finally block, "never"), and what it returns (a list, or
    ``dict``: keyed by call number)."""
    def answer(model, x, layer):
        calls = store()

        def record(module, args, kwargs=None):
            pair = (tuple(copy(a) if copy_args else a for a in args),
                    {k: copy(v) if copy_kwargs else v for k, v in (kwargs or {}).items()})
            if isinstance(calls, dict):
                calls[len(calls)] = pair
            else:
                calls.append(pair)
        handle = layer.register_forward_pre_hook(record, with_kwargs=with_kwargs)
        if remove == "with":
            with handle:
                model(x)
        else:
            model(x)
            if remove == "after":
                handle.remove()
        return calls
    return answer


exercise.wrong("registers without with_kwargs", mentions="with_kwargs=True")(_recorder(with_kwargs=False))
exercise.wrong("stores the arguments without copying them", mentions="lost its negative values")(
    _recorder(copy_args=False, copy_kwargs=False))
exercise.wrong("copies only the top-level tensors", mentions="inside a tuple argument")(_recorder(copy=_copy))
exercise.wrong("copies inside tuples but not inside lists or dicts", mentions="inside lists and dicts too",
               hidden=True)(_recorder(copy=lambda v: _deep_copy(v, into=(tuple,))))


def _clone_nested(value):
    """detach().clone() at the top level, a plain clone() inside containers (keeps the graph)."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (tuple, list)):
        return type(value)(v.clone() if isinstance(v, torch.Tensor) else v for v in value)
    if isinstance(value, dict):
        return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in value.items()}
    return value


exercise.wrong("detaches the top-level tensors but only clones those inside containers",
               mentions="detach", hidden=True)(_recorder(copy=_clone_nested))
exercise.wrong("forgets to remove the hook", mentions="still attached")(_recorder(remove="never"))
exercise.wrong("removes the hook, but not in a finally block", mentions="`finally:` block")(_recorder(remove="after"))
exercise.wrong("returns a dict keyed by call number", mentions="is a dict")(_recorder(store=dict))
exercise.wrong("copies the positional arguments but not the keyword ones",
               mentions="keyword arguments' tensors too", hidden=True)(_recorder(copy_kwargs=False))


@exercise.wrong("wraps layer.forward instead of registering a hook", mentions="not by wrapping")
def _wraps_forward(model, x, layer):
    calls, original = [], layer.forward

    def wrapped(*args, **kwargs):
        calls.append((_deep_copy(args), _deep_copy(kwargs)))
        return original(*args, **kwargs)
    layer.forward = wrapped
    try:
        model(x)
    finally:
        del layer.forward
    return calls


@exercise.wrong("records with a forward hook (with_kwargs=True), after the layer ran", mentions="runs after the layer")
def _forward_hook(model, x, layer):
    calls = []
    handle = layer.register_forward_hook(
        lambda module, args, kwargs, output: calls.append((_deep_copy(args), _deep_copy(kwargs))), with_kwargs=True)
    try:
        model(x)
    finally:
        handle.remove()
    return calls


@exercise.wrong("removes the hook by clearing layer._forward_pre_hooks", mentions="a hook it did not attach")
def _clears_pre_hooks(model, x, layer):
    calls = _recorder(remove="never")(model, x, layer)
    layer._forward_pre_hooks.clear()
    return calls


exercise.wrong("copies the tensors as float32", mentions="dtype included", hidden=True)(
    _recorder(copy=lambda v: _deep_copy(v).float() if isinstance(v, torch.Tensor) else _deep_copy(v)))


@exercise.wrong("drops keyword arguments whose value is None", mentions="also one whose value is None", hidden=True)
def _drops_none(model, x, layer):
    return [(args, {k: v for k, v in kwargs.items() if v is not None}) for args, kwargs in calls_of(model, x, layer)]


@exercise.wrong("reads args[0], assuming a positional input", mentions="keyword arguments only")
def _args0(model, x, layer):
    calls = []
    with layer.register_forward_pre_hook(lambda m, args: calls.append(((args[0].detach().clone(),), {}))):
        model(x)
    return calls
