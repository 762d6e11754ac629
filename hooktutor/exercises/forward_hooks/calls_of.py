"""02_forward_hooks, exercise: forward_hooks.calls_of."""

from __future__ import annotations

import torch
from torch import nn

from ...models import TwoInputNet
from .. import kit
from ..core import Exercise, Tester


def calls_of(model, x, layer):
    """[(args, kwargs), ...] for each call of `layer` during model(x), tensors copied."""
    ### BEGIN SOLUTION
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
    ### END SOLUTION


def _copy(value):
    return value.detach().clone() if isinstance(value, torch.Tensor) else value


exercise = Exercise(
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
    solution=calls_of,
    errors={"tuple index out of range": (
        "args was empty: the layer was called with keyword arguments only, and args holds the "
        "positional ones. Read both with register_forward_pre_hook(..., with_kwargs=True)")},
    guide="""registering without `with_kwargs=True`, so keyword arguments never reach the hook; reading
    `args[0]` when the layer was called with keywords only (`args` is empty); storing the
    arguments without copying them (an in-place ReLU rewrites its own input); leaving the
    hook attached.""",
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


@exercise.case("a module called with positional arguments, then with keywords only")
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


@exercise.case("the input of an in-place ReLU")
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


@exercise.case("a model that raises halfway through its forward: the hook must still go")
def _(answer, t: Tester) -> None:
    kit.expect_clean_after_raise(t, answer, seed=16)


@exercise.case("the caller changes its tensors in place after calls_of returned", hidden=True)
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


@exercise.wrong("removes the hook, but not in a finally block", mentions="`finally:` block")
def _no_finally_calls(model, x, layer):
    calls = []
    handle = layer.register_forward_pre_hook(lambda m, args, kwargs: calls.append(
        (tuple(_copy(a) for a in args), {k: _copy(v) for k, v in kwargs.items()})), with_kwargs=True)
    model(x)
    handle.remove()
    return calls


@exercise.wrong("returns a dict keyed by call number", mentions="is a dict")
def _as_dict(model, x, layer):
    calls = {}
    with layer.register_forward_pre_hook(lambda m, args, kwargs: calls.__setitem__(len(calls), (
            tuple(_copy(a) for a in args), {k: _copy(v) for k, v in kwargs.items()})), with_kwargs=True):
        model(x)
    return calls


@exercise.wrong("copies the positional arguments but not the keyword ones", mentions="keyword arguments' "
                "tensors too", hidden=True)
def _no_copy_kwargs(model, x, layer):
    calls = []
    with layer.register_forward_pre_hook(lambda m, args, kwargs: calls.append(
            (tuple(_copy(a) for a in args), dict(kwargs))), with_kwargs=True):
        model(x)
    return calls


@exercise.wrong("registers without with_kwargs", mentions="with_kwargs=True")
def _no_kwargs(model, x, layer):
    calls = []
    with layer.register_forward_pre_hook(lambda m, args: calls.append(
            (tuple(a.detach().clone() for a in args), {}))):
        model(x)
    return calls


@exercise.wrong("reads args[0], assuming a positional input", mentions="keyword arguments only")
def _args0(model, x, layer):
    calls = []
    with layer.register_forward_pre_hook(lambda m, args: calls.append(
            ((args[0].detach().clone(),), {}))):
        model(x)
    return calls


@exercise.wrong("stores the arguments without copying them", mentions="lost its negative values")
def _no_copy_args(model, x, layer):
    calls = []
    with layer.register_forward_pre_hook(lambda m, args, kwargs: calls.append((args, dict(kwargs))),
                                         with_kwargs=True):
        model(x)
    return calls


@exercise.wrong("forgets to remove the hook", mentions="still attached")
def _leaky_calls(model, x, layer):
    calls = []
    layer.register_forward_pre_hook(lambda m, args, kwargs: calls.append(
        (tuple(_copy(a) for a in args), {k: _copy(v) for k, v in kwargs.items()})), with_kwargs=True)
    model(x)
    return calls


@exercise.case("what is kept holds no autograd graph (the input of fc2 requires grad)")
def _(answer, t: Tester) -> None:
    model = t.track(kit.Nested(seed=8), "a nested model")
    layer = model.encoder.body[2]
    calls = answer(model, kit.randn(2, 4, seed=8), layer)
    t.expect_type(calls, list, what="calls_of(model, x, layer)", nudge="a list with one (args, kwargs) per call")
    t.expect(len(calls) == 1, what="len(calls)", expected=1, got=len(calls), nudge="one entry per call of layer")
    t.expect_type(calls[0], tuple, what="calls[0]", nudge="a pair (args, kwargs)")
    args = calls[0][0] if calls[0] else None
    t.expect_type(args, tuple, what="calls[0][0], the positional arguments", nudge="args as the hook got them")
    for i, value in enumerate(args):
        kit.expect_detached(t, value, what=f"calls[0][0][{i}]")
