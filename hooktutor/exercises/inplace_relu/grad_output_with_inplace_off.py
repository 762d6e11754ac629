"""05_inplace_relu_pitfall, exercise: inplace_relu.grad_output_with_inplace_off."""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import nn

from ...data import shapes
from ...models import SmallCNN, inplace_modules
from .. import kit
from ..core import Exercise, Tester
from ._shared import _other_classes_model, _RaisingInplace, _reference, _reference_any


def grad_output_with_inplace_off(model, x, y, name):
    """grad_output[0] of a full backward hook on `name`, with in-place switched off for one run."""
    ### BEGIN SOLUTION
    was_inplace = [m for m in model.modules() if getattr(m, "inplace", False) is True]
    seen = {}
    for m in was_inplace:
        m.inplace = False
    handle = model.get_submodule(name).register_full_backward_hook(
        lambda module, grad_input, grad_output: seen.__setitem__("grad", grad_output[0].detach().clone()))
    try:
        F.cross_entropy(model(x), y).backward()
    finally:
        handle.remove()
        for m in was_inplace:
            m.inplace = True
    return seen["grad"]
    ### END SOLUTION


exercise = Exercise(
    "inplace_relu.grad_output_with_inplace_off", "A full backward hook on an in-place network",
    task=("write grad_output_with_inplace_off(model, x, y, name) that returns grad_output[0] of a "
          "full backward hook on layer `name` for the loss F.cross_entropy(model(x), y); switch "
          "in-place off for this one run and afterwards put every inplace flag back exactly as it "
          "was (also when the run fails); remove the hook"),
    hints=[
        "Remember which modules are in-place before you change anything: "
        "[m for m in model.modules() if getattr(m, 'inplace', False) is True].",
        "Set their inplace to False, register the full backward hook, run forward and backward "
        "inside try:, and in finally: remove the hook and set inplace = True on the remembered "
        "modules only.",
        "Modules that were not in-place before must stay that way: do not switch everything to True.",
    ],
    solution=grad_output_with_inplace_off,
    equivalent_mutants={
        "hook-kind@8: register_full_backward_hook -> register_backward_hook": (
            "only grad_output is read, and the legacy hook's grad_output is the gradient of "
            "the module's output too (its grad_input is what it gets wrong)"
        ),
        "copy@9: .clone() -> <dropped>": (
            "a gradient that reaches a hook does not require grad (no create_graph here), and "
            "autograd never writes into it after the hook ran, so the copy changes no value"
        ),
        "copy@9: .clone() -> .detach()": (
            "a gradient that reaches a hook does not require grad (no create_graph here), and "
            "autograd never writes into it after the hook ran, so the copy changes no value"
        ),
        "copy@9: .detach() -> <dropped>": (
            "a gradient that reaches a hook does not require grad (no create_graph here), and "
            "autograd never writes into it after the hook ran, so the copy changes no value"
        ),
        "number@9: 0 -> -1": (
            "grad_output of the hooked module holds one tensor: grad_output[0] is "
            "grad_output[-1]"
        ),
        "keep-state@5: seen = {} (a fresh one per call) -> seen kept across calls": (
            "every call writes seen['grad'] before it reads it, so an entry from an earlier "
            "call is never returned"
        ),
    },
    errors={"BackwardHookFunction": (
        "a module after the hooked layer was still in-place, and it may not modify the BackwardHookFunction "
        "view that a full backward hook puts on the layer's output: switch off every module whose inplace "
        "is True, whatever its class (LeakyReLU, Hardtanh, Dropout... not only nn.ReLU)")},
    guide="""keeping in-place on (same error); not restoring the flags afterwards; setting every flag
    back to `True`, also on modules that were not in place before.""",
)


def _check_grad_output(answer, t: Tester, *, seed: int, data_seed: int, name: str,
                       inplace: list[str]) -> None:
    x, y = shapes(4, seed=data_seed)
    model = SmallCNN(inplace=False, seed=seed)
    for n in inplace:
        model.get_submodule(n).inplace = True
    t.track(model, "the SmallCNN")
    got = answer(model, x, y, name)
    t.expect_type(got, torch.Tensor, what=f"grad_output_with_inplace_off(model, x, y, {name!r})",
                  nudge="return grad_output[0], the tensor, not the tuple grad_output")
    _, grads = _reference(seed, x, y, [name])
    t.expect_close(got, grads[name], what=f"grad_output_with_inplace_off(model, x, y, {name!r})",
                   atol=1e-6, rtol=1e-4,
                   nudge="return grad_output[0] as the full backward hook received it")
    left = inplace_modules(model)
    if left == [] and inplace:
        nudge = ("the model's ReLUs are no longer in-place: restore the flags in a finally: block, so the "
                 "model leaves your function as it came in")
    else:
        nudge = ("put every flag back exactly as it was: only the modules that were in-place before "
                 "become in-place again")
    t.expect(left == inplace, what="the model's in-place modules afterwards", expected=inplace, got=left,
             nudge=nudge)


@exercise.case("SmallCNN with both ReLUs in-place, layer 'features.1'")
def _(answer, t: Tester) -> None:
    _check_grad_output(answer, t, seed=9, data_seed=31, name="features.1",
                       inplace=["features.2", "features.5"])


@exercise.case("SmallCNN where only the second ReLU is in-place, layer 'features.4'")
def _(answer, t: Tester) -> None:
    _check_grad_output(answer, t, seed=10, data_seed=32, name="features.4", inplace=["features.5"])


@exercise.case("a model with an in-place ReLU whose forward raises: flags back, hook gone")
def _(answer, t: Tester) -> None:
    model = t.track(_RaisingInplace(seed=16), "the model that raises")
    kit.call_expecting_kit_error(answer, model, kit.randn(2, 4, seed=16), torch.tensor([0, 1]), "body.0")
    left = inplace_modules(model)
    t.expect(left == ["body.1"], what="the model's in-place modules after the run raised", expected=["body.1"],
             got=left, nudge="the run raised, and the flags were not put back: restore them in the finally: of "
                             "the try that runs the model, so they come back whichever way the run ends")


@exercise.case("a nested 4-D model with in-place LeakyReLU, Hardtanh, ELU and a home-made "
                                   "module", hidden=True)
def _(answer, t: Tester) -> None:
    model = _other_classes_model(seed=17)
    t.track(model, "the nested model")
    before = inplace_modules(model)
    x, y = kit.randn(2, 1, 5, 5, seed=17), torch.tensor([2, 0])
    want = _reference_any(model, x, y, "features.conv1")
    with warnings.catch_warnings():  # x does not require grad: torch warns about the first layer's hook
        warnings.filterwarnings("ignore", message="Full backward hook is firing")
        got = answer(model, x, y, "features.conv1")
    t.expect_type(got, torch.Tensor, what="grad_output_with_inplace_off(model, x, y, 'features.conv1')",
                  nudge="return grad_output[0], the tensor, not the tuple grad_output")
    t.expect_close(got, want, what="grad_output_with_inplace_off(model, x, y, 'features.conv1')",
                   atol=1e-6, rtol=1e-4, nudge="return grad_output[0] as the full backward hook received it")
    left = inplace_modules(model)
    t.expect(left == before, what="the model's in-place modules afterwards", expected=before, got=left,
             nudge="put every flag back exactly as it was, whatever the module's class")


@exercise.wrong("keeps in-place on", mentions="BackwardHookFunction view")
def _keeps_inplace(model, x, y, name):
    seen = {}
    handle = model.get_submodule(name).register_full_backward_hook(
        lambda m, gin, gout: seen.__setitem__("grad", gout[0]))
    try:
        F.cross_entropy(model(x), y).backward()
    finally:
        handle.remove()
    return seen["grad"]


@exercise.wrong("does not restore the flags", mentions="restore the flags")
def _no_restore(model, x, y, name):
    for m in model.modules():
        if getattr(m, "inplace", False):
            m.inplace = False
    seen = {}
    handle = model.get_submodule(name).register_full_backward_hook(
        lambda m, gin, gout: seen.__setitem__("grad", gout[0]))
    try:
        F.cross_entropy(model(x), y).backward()
    finally:
        handle.remove()
    return seen["grad"]


@exercise.wrong("switches every flag back to True", mentions="exactly as it was")
def _all_true(model, x, y, name):
    flagged = [m for m in model.modules() if hasattr(m, "inplace")]
    for m in flagged:
        m.inplace = False
    seen = {}
    handle = model.get_submodule(name).register_full_backward_hook(
        lambda m, gin, gout: seen.__setitem__("grad", gout[0]))
    try:
        F.cross_entropy(model(x), y).backward()
    finally:
        handle.remove()
        for m in flagged:
            m.inplace = True
    return seen["grad"]


@exercise.wrong("restores the flags after the run, not in a finally:", mentions="the run raised")
def _restore_no_finally(model, x, y, name):
    was = [m for m in model.modules() if getattr(m, "inplace", False) is True]
    for m in was:
        m.inplace = False
    seen = {}
    handle = model.get_submodule(name).register_full_backward_hook(
        lambda m, gin, gout: seen.__setitem__("grad", gout[0]))
    try:
        F.cross_entropy(model(x), y).backward()
    finally:
        handle.remove()
    for m in was:
        m.inplace = True
    return seen["grad"]


@exercise.wrong("returns the tuple grad_output", mentions="not the tuple")
def _returns_tuple(model, x, y, name):
    was = [m for m in model.modules() if getattr(m, "inplace", False) is True]
    for m in was:
        m.inplace = False
    seen = {}
    handle = model.get_submodule(name).register_full_backward_hook(
        lambda m, gin, gout: seen.__setitem__("grad", gout))
    try:
        F.cross_entropy(model(x), y).backward()
    finally:
        handle.remove()
        for m in was:
            m.inplace = True
    return seen["grad"]


@exercise.wrong("switches off only the nn.ReLU modules", mentions="not only nn.ReLU",
                                    hidden=True)
def _only_relu_off(model, x, y, name):
    was = [m for m in model.modules() if isinstance(m, nn.ReLU) and m.inplace]
    for m in was:
        m.inplace = False
    seen = {}
    handle = model.get_submodule(name).register_full_backward_hook(
        lambda m, gin, gout: seen.__setitem__("grad", gout[0].detach().clone()))
    try:
        F.cross_entropy(model(x), y).backward()
    finally:
        handle.remove()
        for m in was:
            m.inplace = True
    return seen["grad"]
