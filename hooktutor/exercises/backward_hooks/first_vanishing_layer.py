"""04_backward_hooks, exercise: backward_hooks.first_vanishing_layer."""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Callable

import torch
from torch import nn

from ...data import blobs
from ...models import MLP, seeded
from .. import kit
from ..core import Exercise, Tester
from ._shared import _linear_output_norms, _quiet, _sigmoid_stack


def first_vanishing_layer(model, x, threshold):
    """Name of the first Linear from the output whose grad_output norm < threshold, or None."""
    ### BEGIN SOLUTION
    fired, handles = [], []  # (name, norm) in firing order: from the output to the input
    try:
        for name, module in model.named_modules():
            if isinstance(module, nn.Linear):
                handles.append(module.register_full_backward_hook(
                    lambda m, gi, go, name=name: fired.append((name, go[0].norm().item()))))
        model(x).sum().backward()
    finally:
        for handle in handles:
            handle.remove()
    return next((name for name, norm in fired if norm < threshold), None)
    ### END SOLUTION


def _nested_sigmoid_stack(depth: int, width: int = 16, *, seed: int) -> nn.Sequential:
    """``blocks.0.fc blocks.0.act ... blocks.N.fc blocks.N.act head``: the sigmoid stack with
    every Linear but ``head`` one level down, where ``named_children()`` does not look."""
    blocks: OrderedDict[str, nn.Module] = OrderedDict()
    with seeded(seed):
        for i in range(depth):
            blocks[str(i)] = nn.Sequential(OrderedDict([
                ("fc", nn.Linear(8 if i == 0 else width, width)), ("act", nn.Sigmoid())]))
        head = nn.Linear(width, 1)
    return nn.Sequential(OrderedDict([("blocks", nn.Sequential(blocks)), ("head", head)]))


def _reference_norms(model: nn.Sequential, x: torch.Tensor) -> dict[str, float]:
    """Norm of d(model(x).sum())/d(output) of every Linear child, without any hook."""
    model = copy.deepcopy(model)
    outs: dict[str, torch.Tensor] = {}
    h = x
    for name, layer in model.named_children():
        h = layer.forward(h)
        if isinstance(layer, nn.Linear):
            h.retain_grad()
            outs[name] = h
    h.sum().backward()
    return {name: float(out.grad.norm()) for name, out in outs.items()}


exercise = Exercise(
    "backward_hooks.first_vanishing_layer", "Find where the gradient vanishes",
    task=("write first_vanishing_layer(model, x, threshold) that runs model(x).sum().backward() "
          "with full backward hooks on every nn.Linear and returns the name of the first Linear, "
          "walking from the output towards the input, whose output gradient has a norm below "
          "`threshold` (None if there is none). Every hook must be removed afterwards, also when the "
          "model raises"),
    hints=[
        "Record (name, grad_output[0].norm().item()) in each Linear's full backward hook.",
        "Backward hooks fire from the output towards the input, so a list appended in the hooks "
        "is already in the order you need.",
        "Return the first recorded name whose norm is below the threshold, or None; remove the "
        "handles in a finally: block.",
    ],
    solution=first_vanishing_layer,
    equivalent_mutants={
        "hook-kind@8: register_full_backward_hook -> register_backward_hook": (
            "only grad_output is read, and the legacy hook's grad_output is the gradient of the "
            "module's output too (its grad_input is what it gets wrong)"),
        "number@9: 0 -> -1": "grad_output of a Linear holds one tensor: go[0] is go[-1]",
    },
    errors={"'NoneType' object has no attribute": (
        "grad_input[0] is None for the first layer when x does not require grad; measure "
        "grad_output[0], the gradient with respect to the layer's output.")},
    guide="""scanning from the input instead of from the output (backward hooks fire from the output
    towards the input, so the recorded order is already the right one); leaving hooks
    attached.""",
)


def _check_vanishing(answer: Callable, t: Tester, model: nn.Sequential, x: torch.Tensor,
                     threshold: float, expected: str | None, what: str) -> None:
    with _quiet():
        got = answer(model, x, threshold)
    t.expect_type(got, (str, type(None)), what=what,
                  nudge="return only the layer's name (or None), not its norm or the module")
    nested = (isinstance(expected, str) and "." in expected and got is None
              or isinstance(got, str) and "." not in got and isinstance(expected, str) and "." in expected)
    t.expect(not nested or got == expected, what=what, expected=expected, got=got,
             nudge="the Linears inside submodules were not measured: model.named_children() stops at the "
                   "first level, model.named_modules() goes into every submodule")
    t.expect(got == expected, what=what, expected=expected, got=got,
             nudge=("walk from the output towards the input and stop at the first Linear whose "
                    "grad_output[0] norm is below the threshold (backward hooks fire in that order)"
                    if expected is not None else
                    "no Linear is below this threshold: return None"))


@exercise.case("an 8-layer sigmoid stack where fc1 to fc4 are below the threshold")
def _(answer, t: Tester) -> None:
    model = t.track(_sigmoid_stack(8, seed=0), "the sigmoid stack")
    x, _ = blobs(32, seed=0)
    norms = _reference_norms(model, x)
    threshold = (norms["fc4"] * norms["fc5"]) ** 0.5
    _check_vanishing(answer, t, model, x, threshold, "fc4", "first_vanishing_layer(stack, x, threshold)")


@exercise.case("a threshold below every norm")
def _(answer, t: Tester) -> None:
    model = t.track(_sigmoid_stack(5, seed=7), "the sigmoid stack")
    x, _ = blobs(16, seed=7)
    threshold = min(_reference_norms(model, x).values()) / 10
    _check_vanishing(answer, t, model, x, threshold, None, "first_vanishing_layer(stack, x, tiny)")


@exercise.case("an MLP and a threshold above every norm: the output layer itself")
def _(answer, t: Tester) -> None:
    model = t.track(MLP(seed=8), "the MLP")
    x, _ = blobs(16, seed=8)
    threshold = max(_reference_norms(model, x).values()) * 10
    _check_vanishing(answer, t, model, x, threshold, "head", "first_vanishing_layer(mlp, x, huge)")


@exercise.case("a nested sigmoid stack (Linears inside blocks) on a 3-D input")
def _(answer, t: Tester) -> None:
    model = t.track(_nested_sigmoid_stack(6, seed=2), "the nested sigmoid stack")
    x = blobs(12, seed=2)[0].reshape(4, 3, 8)
    norms = _linear_output_norms(model, x)
    threshold = (norms["blocks.2.fc"] * norms["blocks.3.fc"]) ** 0.5
    _check_vanishing(answer, t, model, x, threshold, "blocks.2.fc",
                     "first_vanishing_layer(nested stack, x, threshold)")


@exercise.case("a model that defines head, mid, stem but runs stem, mid, head", hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(kit.Reordered(seed=9), "the reordered model")
    x, _ = blobs(16, seed=9)
    norms = _linear_output_norms(model, x)
    threshold = (norms["mid"] * norms["head"]) ** 0.5
    with _quiet():
        got = answer(model, x, threshold)
    t.expect(got == "mid", what="first_vanishing_layer(reordered model, x, threshold)", expected="mid",
             got=got, nudge="the order of model.named_modules() (the order the layers were defined in) is "
                            "not the order of the backward pass: record the names in the order your hooks "
                            "fire, which is from the output towards the input")


@exercise.case("a model that raises halfway through its forward: no hook may stay", hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(kit.Raising(seed=10), "the model that raises")
    with _quiet():
        kit.call_expecting_kit_error(answer, model, kit.randn(3, 4, seed=10), 0.1)


@exercise.wrong("scans from the input instead of from the output", mentions="from the output")
def _from_input(model, x, threshold):
    norms, handles = {}, []
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            handles.append(module.register_full_backward_hook(
                lambda m, gi, go, name=name: norms.__setitem__(name, go[0].norm().item())))
    try:
        model(x).sum().backward()
    finally:
        for h in handles:
            h.remove()
    names = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]  # input -> output
    return next((n for n in names if norms[n] < threshold), None)


@exercise.wrong("forgets to remove the hooks", mentions="still attached")
def _leaky_vanishing(model, x, threshold):
    fired = []
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            module.register_full_backward_hook(
                lambda m, gi, go, name=name: fired.append((name, go[0].norm().item())))
    model(x).sum().backward()
    return next((n for n, v in fired if v < threshold), None)


@exercise.wrong("walks model.named_children(): misses nested Linears", mentions="named_modules()")
def _vanishing_children(model, x, threshold):
    fired, handles = [], []
    for name, module in model.named_children():
        if isinstance(module, nn.Linear):
            handles.append(module.register_full_backward_hook(
                lambda m, gi, go, name=name: fired.append((name, go[0].norm().item()))))
    try:
        model(x).sum().backward()
    finally:
        for h in handles:
            h.remove()
    return next((n for n, v in fired if v < threshold), None)


@exercise.wrong("returns (name, norm) instead of the name", mentions="only the layer's name")
def _name_and_norm(model, x, threshold):
    fired, handles = [], []
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            handles.append(module.register_full_backward_hook(
                lambda m, gi, go, name=name: fired.append((name, go[0].norm().item()))))
    try:
        model(x).sum().backward()
    finally:
        for h in handles:
            h.remove()
    return next(((n, v) for n, v in fired if v < threshold), None)


@exercise.wrong("measures grad_input[0] instead of grad_output[0]", mentions="grad_output[0]")
def _vanishing_grad_input(model, x, threshold):
    fired, handles = [], []
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            handles.append(module.register_full_backward_hook(
                lambda m, gi, go, name=name: fired.append((name, gi[0].norm().item()))))
    try:
        model(x).sum().backward()
    finally:
        for h in handles:
            h.remove()
    return next((n for n, v in fired if v < threshold), None)


@exercise.wrong("walks reversed(named_modules()) instead of the order the hooks fire",
                             mentions="order your hooks fire", hidden=True)
def _reversed_definition_order(model, x, threshold):
    norms, handles = {}, []
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            handles.append(module.register_full_backward_hook(
                lambda m, gi, go, name=name: norms.__setitem__(name, go[0].norm().item())))
    try:
        model(x).sum().backward()
    finally:
        for h in handles:
            h.remove()
    names = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    return next((n for n in reversed(names) if norms[n] < threshold), None)


@exercise.case("a dead layer whose gradient is exactly 0, with threshold 0: nothing is below 0")
def _(answer, t: Tester) -> None:
    with seeded(6):
        model = nn.Sequential(OrderedDict(fc1=nn.Linear(8, 4), act1=nn.ReLU(), fc2=nn.Linear(4, 4),
                                          act2=nn.ReLU(), head=nn.Linear(4, 1)))
    with torch.no_grad():
        model.fc2.bias.fill_(-100.0)   # act2 is 0 everywhere: fc2 and fc1 get a gradient of exactly 0
    t.track(model, "a model with a dead layer")
    x, _ = blobs(8, seed=6)
    with _quiet():
        got = answer(model, x, 0.0)
    t.expect(got is None, what="first_vanishing_layer(model, x, threshold=0.0)", expected=None, got=got,
             nudge="a norm of exactly 0 is not below a threshold of 0: compare with norm < threshold, "
                   "strictly")
