"""04_backward_hooks, exercise: backward_hooks.output_grad_norms."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from ...data import blobs
from ...models import MLP
from .. import kit
from ..core import Exercise, Tester
from ._shared import _linear_output_norms, _quiet, _sigmoid_stack


def output_grad_norms(model, x):
    """{name of every nn.Linear: norm of d(model(x).sum())/d(its output)}, hooks removed."""
    ### BEGIN SOLUTION
    norms, handles = {}, []

    def make_hook(name):
        def hook(module, grad_input, grad_output):
            norms[name] = grad_output[0].norm().item()
        return hook

    try:
        for name, module in model.named_modules():
            if isinstance(module, nn.Linear):
                handles.append(module.register_full_backward_hook(make_hook(name)))
        model(x).sum().backward()
    finally:
        for handle in handles:
            handle.remove()
    return norms
    ### END SOLUTION


def _linears(model: nn.Module) -> dict[str, nn.Module]:
    return {n: m for n, m in model.named_modules() if isinstance(m, nn.Linear)}


exercise = Exercise(
    "backward_hooks.output_grad_norms", "Gradient norm per layer",
    task=("write output_grad_norms(model, x) that puts a full backward hook on every nn.Linear "
          "of `model`, runs model(x).sum().backward() and returns a dict: the Linear's name -> "
          "the norm (a float) of the gradient with respect to that layer's output. Every hook "
          "must be removed afterwards, also when the model raises"),
    hints=[
        "Walk model.named_modules(), keep the nn.Linear ones, and attach "
        "module.register_full_backward_hook(hook) to each; keep every handle in a list.",
        "The hook is hook(module, grad_input, grad_output). The gradient with respect to the "
        "layer's output is grad_output[0]; grad_input is about the layer's input.",
        "Each hook needs to know its layer's name: build it in a small function make_hook(name) "
        "that returns the hook, then store norms[name] = grad_output[0].norm().item().",
        "Run the forward and backward in try: and remove every handle in finally:.",
    ],
    solution=output_grad_norms,
    equivalent_mutants={
        "number@8: 0 -> -1": "grad_output of a Linear holds one tensor: grad_output[0] is grad_output[-1]",
        "hook-kind@14: register_full_backward_hook -> register_backward_hook": (
            "only grad_output is read, and the legacy hook's grad_output is the gradient of "
            "the module's output too (its grad_input is what it gets wrong)"
        ),
    },
    errors={
        "'NoneType' object has no attribute": (
            "grad_input[0] is None for the first layer when x does not require grad. The gradient "
            "with respect to a layer's output is grad_output[0], which is always there."),
        "Cannot use both regular backward hooks and full backward hooks": (
            "a legacy register_backward_hook was attached to this module before; use only "
            "register_full_backward_hook."),
    },
    guide="""reading `grad_input[0]` instead of `grad_output[0]` (the gradient with respect to the
    layer's output); `grad_input` is `None` for the first layer when the input does not
    require grad; leaving hooks attached; one name for every hook (late binding in a loop,
    again).""",
)


def _check_norms(answer: Callable, t: Tester, model: nn.Sequential, x: torch.Tensor, what: str) -> None:
    expected = _linear_output_norms(model, x)
    with _quiet():
        got = answer(model, x)
    t.expect_type(got, dict, what=what, nudge="return the dict name -> norm that your hooks filled")
    names = sorted(str(k) for k in got)
    missing = [n for n in expected if n not in got]
    nested = missing and all("." in n for n in missing) and set(got) <= set(expected)
    t.expect(names == sorted(expected), what=f"the names in {what}", expected=sorted(expected), got=names,
             nudge=("the Linears inside submodules are missing: model.named_children() stops at the first "
                    "level, model.named_modules() goes into every submodule" if nested else
                    "one entry per nn.Linear, keyed by its name from model.named_modules()"))
    for name, value in expected.items():
        g = got[name]
        g = float(g) if isinstance(g, (float, int)) or (isinstance(g, torch.Tensor) and g.numel() == 1) else g
        ok = isinstance(g, float) and abs(g - value) <= 1e-4 * abs(value) + 1e-12
        t.expect(ok, what=f"{what}[{name!r}]", expected=round(value, 6) if value > 1e-4 else value,
                 got=g, nudge="store grad_output[0].norm().item(): grad_output[0] is the gradient "
                              "with respect to the layer's output (grad_input is about its input)")


@exercise.case("an MLP (fc1, fc2, head) whose input does not require grad")
def _(answer, t: Tester) -> None:
    model = t.track(MLP(seed=1), "the MLP")
    x, _ = blobs(16, seed=1)
    _check_norms(answer, t, model, x, "output_grad_norms(mlp, x)")


@exercise.case("a 6-layer sigmoid stack, where the norms shrink towards the input")
def _(answer, t: Tester) -> None:
    model = t.track(_sigmoid_stack(6, seed=4), "the sigmoid stack")
    x, _ = blobs(12, seed=4)
    _check_norms(answer, t, model, x, "output_grad_norms(stack, x)")


@exercise.case("the same model measured twice in a row")
def _(answer, t: Tester) -> None:
    model = t.track(MLP(seed=5), "the MLP")
    x, _ = blobs(8, seed=5)
    with _quiet():
        first = answer(model, x)
    _check_norms(answer, t, model, x, "the second output_grad_norms(mlp, x)")
    with _quiet():
        third = answer(model, x)
    t.expect(first == third, what="two calls on the same model", expected=first, got=third,
             nudge="start every call with a new dict and leave no hook behind")


@exercise.case("a nested model (Linears inside a submodule) on a 3-D input (N, T, features)")
def _(answer, t: Tester) -> None:
    model = t.track(kit.Nested(seed=3), "the nested model")
    x = kit.randn(2, 3, 4, seed=3)
    linears = _linears(model)
    with kit.HookWitness(linears) as witness:
        _check_norms(answer, t, model, x, "output_grad_norms(nested, x)")
    unhooked = [n for n in linears if witness.fired(n, "backward") == 0]
    t.expect(not unhooked, what="full backward hooks attached while the model ran", expected=list(linears),
             got=[n for n in linears if n not in unhooked],
             nudge="the numbers are right, but not from full backward hooks: the task is to read them in "
                   "hooks attached with module.register_full_backward_hook")


@exercise.case("a model that raises halfway through its forward: no hook may stay", hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(kit.Raising(seed=4), "the model that raises")
    with _quiet():
        kit.call_expecting_kit_error(answer, model, kit.randn(3, 4, seed=4))


@exercise.wrong("reads grad_input instead of grad_output", mentions="grad_output[0]")
def _uses_grad_input(model, x):
    norms, handles = {}, []
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            handles.append(module.register_full_backward_hook(
                lambda m, gi, go, name=name: norms.__setitem__(name, gi[0].norm().item())))
    try:
        model(x).sum().backward()
    finally:
        for h in handles:
            h.remove()
    return norms


@exercise.wrong("forgets to remove the hooks", mentions="still attached")
def _leaky_norms(model, x):
    norms = {}
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            module.register_full_backward_hook(
                lambda m, gi, go, name=name: norms.__setitem__(name, go[0].norm().item()))
    model(x).sum().backward()
    return norms


@exercise.wrong("uses one name for every hook (late binding in a loop)", mentions="one entry per")
def _late_binding(model, x):
    norms, handles = {}, []
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            handles.append(module.register_full_backward_hook(
                lambda m, gi, go: norms.__setitem__(name, go[0].norm().item())))
    try:
        model(x).sum().backward()
    finally:
        for h in handles:
            h.remove()
    return norms


@exercise.wrong("walks model.named_children(): misses nested Linears", mentions="named_modules()")
def _children_only(model, x):
    norms, handles = {}, []
    for name, module in model.named_children():
        if isinstance(module, nn.Linear):
            handles.append(module.register_full_backward_hook(
                lambda m, gi, go, name=name: norms.__setitem__(name, go[0].norm().item())))
    try:
        model(x).sum().backward()
    finally:
        for h in handles:
            h.remove()
    return norms


@exercise.wrong("reads the gradients with tensor hooks, not full backward hooks",
                         mentions="register_full_backward_hook")
def _tensor_hooks_instead(model, x):
    norms, handles = {}, []

    def on_output(name):
        def hook(module, args, output):
            output.register_hook(lambda g: norms.__setitem__(name, g.norm().item()))
        return hook

    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            handles.append(module.register_forward_hook(on_output(name)))
    try:
        model(x).sum().backward()
    finally:
        for h in handles:
            h.remove()
    return norms


@exercise.wrong("forgets to return the dict", mentions="None (nothing was returned)")
def _returns_nothing(model, x):
    output_grad_norms(model, x)


@exercise.wrong("removes the hooks after backward, not in a finally:", mentions="still attached",
                         hidden=True)
def _norms_no_finally(model, x):
    norms, handles = {}, []
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            handles.append(module.register_full_backward_hook(
                lambda m, gi, go, name=name: norms.__setitem__(name, go[0].norm().item())))
    model(x).sum().backward()
    for h in handles:
        h.remove()
    return norms
