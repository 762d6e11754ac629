"""Exercises of ``00_start_here.ipynb``: a first hook that cleans up after itself."""

from __future__ import annotations

import torch
from torch import nn

from ..models import MLP
from .core import Exercise, Tester


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


@count_calls.case("an MLP whose fc2 runs once")
def _(answer, t: Tester) -> None:
    model = t.track(MLP(seed=1), "the MLP")
    got = answer(model, torch.zeros(2, 8), model.fc2)
    t.expect(got == 1, what="count_calls(model, x, model.fc2)", expected=1, got=got,
             nudge="append once per call of the hook and return the length of the list")


@count_calls.case("the same model counted three times in a row")
def _(answer, t: Tester) -> None:
    model = t.track(MLP(seed=2), "the MLP")
    got = [answer(model, torch.zeros(1, 8), model.head) for _ in range(3)]
    t.expect(got == [1, 1, 1], what="three calls of count_calls", expected=[1, 1, 1], got=got,
             nudge="each run must start from zero: keep the list inside count_calls, not outside")


@count_calls.case("a layer used twice in one forward")
def _(answer, t: Tester) -> None:
    shared = nn.Linear(4, 4)
    model = t.track(nn.Sequential(shared, nn.Tanh(), shared), "a Sequential that reuses one Linear")
    got = answer(model, torch.zeros(1, 4), shared)
    t.expect(got == 2, what="count_calls(model, x, shared)", expected=2, got=got,
             nudge="a module used twice fires its hook twice: count every call, not just whether it ran")


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
