"""Exercises of ``00_start_here.ipynb``: a first hook that cleans up after itself."""

from __future__ import annotations

import torch
from torch import nn

from ..models import MLP
from . import kit
from .core import Exercise, Tester
from .predict import Prediction


def _count_calls_solution(model: nn.Module, x: torch.Tensor, layer: nn.Module) -> int:
    calls = []
    handle = layer.register_forward_hook(lambda module, args, output: calls.append(1))
    try:
        model(x)
    finally:
        handle.remove()
    return len(calls)


count_calls = Exercise(
    "start_here.count_calls", "Count the calls of a layer",
    task=("write count_calls(model, x, layer) that runs model(x) once and returns how many "
          "times `layer` was called, using a forward hook that is removed afterwards"),
    hints=[
        "Inside count_calls, define a hook(module, args, output) that appends to a list, and "
        "attach it with handle = layer.register_forward_hook(hook).",
        "Run model(x), then return len(your_list).",
        "Put model(x) in a try: block and handle.remove() in its finally: block, so the hook is "
        "removed even when the model raises.",
    ],
    solution=_count_calls_solution,
)


# Half-right answers an examiner expects, by dimension (kit.DIMENSIONS):
# - repeat: the list lives outside the function, so a second run counts on top of the first;
# - twice: counts whether the layer ran (a set, a flag), not how often;
# - raises: removes the hook after model(x) but not in `finally:`, so a model that raises
#   leaves it attached; or never removes it at all;
# - technique: counts how often the layer appears in the model (named_modules(
#   remove_duplicate=False)) instead of hooking it: right for a Sequential that lists a shared
#   layer twice, wrong for a forward that calls one registered layer twice (hidden case);
# - a wrong type: returns the list of calls instead of its length.


def _expect_count(t: Tester, got: object, expected: int, what: str, nudge: str) -> None:
    t.expect_type(got, int, what=what, nudge="return len(your_list), a number")
    t.expect(got == expected, what=what, expected=expected, got=got, nudge=nudge)


@count_calls.case("an MLP whose fc2 runs once")
def _(answer, t: Tester) -> None:
    model = t.track(MLP(seed=1), "the MLP")
    got = answer(model, torch.zeros(2, 8), model.fc2)
    t.expect_type(got, int, what="count_calls(model, x, model.fc2)", nudge="return len(your_list), a number")
    t.expect(got == 1, what="count_calls(model, x, model.fc2)", expected=1, got=got,
             nudge="append once per call of the hook and return the length of the list")


@count_calls.case("the same model counted three times in a row")
def _(answer, t: Tester) -> None:
    model = t.track(MLP(seed=2), "the MLP")
    got = [answer(model, torch.zeros(1, 8), model.head) for _ in range(3)]
    t.expect_type(got[0], int, what="count_calls(model, x, model.head)", nudge="return len(your_list), a number")
    t.expect(got == [1, 1, 1], what="three calls of count_calls", expected=[1, 1, 1], got=got,
             nudge="each run must start from zero: keep the list inside count_calls, not outside")


@count_calls.case("a layer used twice in one forward")
def _(answer, t: Tester) -> None:
    shared = nn.Linear(4, 4)
    model = t.track(nn.Sequential(shared, nn.Tanh(), shared), "a Sequential that reuses one Linear")
    got = answer(model, torch.zeros(1, 4), shared)
    _expect_count(t, got, 2, "count_calls(model, x, shared)",
                  "a module used twice fires its hook twice: count every call, not just whether it ran")


@count_calls.case("a layer deep inside a nested model (encoder.body.2)")
def _(answer, t: Tester) -> None:
    model = t.track(kit.Nested(seed=1), "a nested model")
    got = answer(model, kit.randn(2, 4, seed=1), model.encoder.body[2])
    _expect_count(t, got, 1, "count_calls(model, x, model.encoder.body[2])",
                  "hook the layer you were given, wherever it sits in the model, and count its calls")


@count_calls.case("a model that raises halfway through its forward: the hook must still go")
def _(answer, t: Tester) -> None:
    kit.expect_clean_after_raise(t, answer, seed=2)


@count_calls.case("a layer that forward() calls twice but the model registers once", hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(kit.Twice(seed=3), "a model whose forward calls `block` twice")
    with kit.HookWitness({"block": model.block}) as seen:
        got = answer(model, kit.randn(2, 4, seed=3), model.block)
    t.expect(seen.fired("block", "forward") + seen.fired("block", "forward_pre") > 0,
             what="hooks on `block` while the model ran", expected="your forward hook", got="none", nudge=(
                 "no hook was attached to the layer while model(x) ran: count the calls with a forward "
                 "hook (layer.register_forward_hook) and run model(x), instead of looking at how the "
                 "model is built"))
    _expect_count(t, got, 2, "count_calls(model, x, model.block)",
                  "forward() calls `block` twice, so a forward hook on it fires twice")


@count_calls.wrong("returns the list of calls, not its length", mentions="is a list")
def _returns_list(model, x, layer):
    calls = []
    with layer.register_forward_hook(lambda m, a, o: calls.append(1)):
        model(x)
    return calls


@count_calls.wrong("removes the hook, but not in a finally block", mentions="`finally:` block")
def _no_finally(model, x, layer):
    calls = []
    handle = layer.register_forward_hook(lambda m, a, o: calls.append(1))
    model(x)
    handle.remove()
    return len(calls)


@count_calls.wrong("counts the layer's places in the model instead of hooking it",
                   mentions="no hook was attached", hidden=True)
def _counts_structure(model, x, layer):
    return sum(1 for _, m in model.named_modules(remove_duplicate=False) if m is layer)


@count_calls.wrong("forgets to remove the hook", mentions="still attached")
def _leaky(model, x, layer):
    calls = []
    layer.register_forward_hook(lambda m, a, o: calls.append(1))
    model(x)
    return len(calls)


@count_calls.wrong("counts whether it ran, not how often", mentions="module used twice")
def _ran_once(model, x, layer):
    seen = set()
    with layer.register_forward_hook(lambda m, a, o: seen.add(id(m))):
        model(x)
    return len(seen)


_shared_calls: list[int] = []


@count_calls.wrong("keeps the list outside the function", mentions="start from zero")
def _global_list(model, x, layer):
    with layer.register_forward_hook(lambda m, a, o: _shared_calls.append(1)):
        model(x)
    return len(_shared_calls)


# -- predict, then run -----------------------------------------------------------------------

def _observe_registered_twice() -> int:
    """The cell that registers a counting hook on fc1, run twice; then one forward."""
    model, calls = MLP(seed=0), []
    handles = []
    try:
        for _run in range(2):
            handles.append(model.fc1.register_forward_hook(lambda module, args, output: calls.append(1)))
        model(torch.zeros(1, 8))
    finally:
        for handle in handles:
            handle.remove()
    return len(calls)


registered_twice = Prediction(
    "start_here.registered_twice", "Predict: a hook registered twice",
    task="an int: how many times the hook fires during the one model(x)",
    answer_name="predict_calls",
    observe=_observe_registered_twice,
    hints=["Registering does not look at what is already attached: each call adds a hook.",
           "Two registrations, one forward pass of a layer that runs once."],
    explain={
        "1": "registering again does not replace the first hook: PyTorch keeps both, so one call "
             "of fc1 fires two hooks.",
        "0": "a hook stays on the module after the cell that registered it has finished; it fires "
             "on every later forward until it is removed.",
        "count": "each register_forward_hook call adds one more hook; fc1 runs once, so each of "
                 "them fires once.",
    },
    summary="nothing de-duplicates hooks: two registrations are two hooks, and each fires on every call.",
)
registered_twice.wrong("re-running replaces the hook", 1, "does not replace the first hook")
registered_twice.wrong("a hook ends with its cell", 0, "stays on the module")
registered_twice.wrong("one per registration and one more", 3, "adds one more hook")
