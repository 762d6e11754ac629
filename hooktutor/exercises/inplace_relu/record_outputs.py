"""05_inplace_relu_pitfall, exercise: inplace_relu.record_outputs."""

from __future__ import annotations

from collections import OrderedDict

import torch
from torch import nn

from ...data import shapes
from ...models import SmallCNN
from .. import kit
from ..core import Exercise, Tester
from ._shared import _reference


def record_outputs(model, x, names):
    """Run model(x) once; return {name: output of that layer} that later in-place ops cannot change."""
    ### BEGIN SOLUTION
    recorded, handles = {}, []
    try:
        for name in names:
            def keep(module, args, output, name=name):
                recorded[name] = output.detach().clone()
            handles.append(model.get_submodule(name).register_forward_hook(keep))
        model(x)
    finally:
        for handle in handles:
            handle.remove()
    return recorded
    ### END SOLUTION


def _identity_net() -> nn.Sequential:
    """``Linear(4, 4)`` with identity weights and zero bias, then ``ReLU(inplace=True)``."""
    lin = nn.Linear(4, 4)
    with torch.no_grad():
        lin.weight.copy_(torch.eye(4))
        lin.bias.zero_()
    return nn.Sequential(OrderedDict([("lin", lin), ("act", nn.ReLU(inplace=True))]))


exercise = Exercise(
    "inplace_relu.record_outputs", "Record outputs that in-place ops cannot overwrite",
    task=("write record_outputs(model, x, names) that runs model(x) once and returns a dict "
          "name -> output of each named layer, exactly as the layer produced it, even when an "
          "in-place ReLU overwrites that output later; the recorded tensors must not keep the "
          "autograd graph, and every hook must be removed, also when the model raises"),
    hints=[
        "Register a forward hook on model.get_submodule(name) for each name; in the hook, store "
        "the output in a dict under that name.",
        "detach() alone shares memory with the output, so the next ReLU(inplace=True) rectifies "
        "your copy as well. Store output.detach().clone().",
        "Keep every handle in a list and remove them all in a finally: block.",
    ],
    solution=record_outputs,
    guide="""`output.detach()` without `.clone()` (detach, `.data`, a view or `.cpu()` on a CPU tensor
    share memory with the output); `output.clone()` without `detach()`, which keeps the
    autograd graph alive; leaving hooks attached.""",
)


@exercise.case("the BatchNorm output of SmallCNN(inplace=True), followed by an in-place ReLU")
def _(answer, t: Tester) -> None:
    x, y = shapes(4, seed=11)
    model = t.track(SmallCNN(inplace=True, seed=5), "SmallCNN(inplace=True)")
    got = answer(model, x, ["features.1"])
    t.expect_type(got, dict, what="record_outputs(model, x, ['features.1'])",
                  nudge="return a dict that maps each requested name to its recorded output")
    t.expect("features.1" in got, what="record_outputs(...) keys",
             expected="a dict with the key 'features.1'", got=list(got),
             nudge="return a dict that maps each requested name to its recorded output")
    ref, _ = _reference(5, x, y, ["features.1"])
    t.expect_close(got["features.1"], ref["features.1"], what="the recorded 'features.1'",
                   nudge="store a copy of the output that has its own memory",
                   wrong={"rectified": (ref["features.1"].clamp(min=0), (
                       "your copy lost its negative values: the in-place ReLU overwrote it. detach(), "
                       ".data, a view or .cpu() share memory with the output; store output.detach().clone()"))})


@exercise.case("a conv output before an in-place ReLU and a conv output before BatchNorm")
def _(answer, t: Tester) -> None:
    x, y = shapes(4, seed=12)
    model = t.track(SmallCNN(inplace=True, seed=6), "SmallCNN(inplace=True)")
    names = ["features.0", "features.4"]
    got = answer(model, x, names)
    ref, _ = _reference(6, x, y, names)
    t.expect_type(got, dict, what="record_outputs(model, x, names)",
                  nudge="return a dict that maps each requested name to its recorded output")
    for name in names:
        t.expect(name in got, what=f"record_outputs(...)[{name!r}]",
                 expected=f"a dict with the key {name!r}", got=list(got),
                 nudge="record every name in `names`, not just the first one")
        t.expect_close(got[name], ref[name], what=f"the recorded {name!r}",
                       nudge="store output.detach().clone() for every requested layer",
                       wrong={"rectified": (ref[name].clamp(min=0), (
                           f"{name!r} lost its negative values: the in-place ReLU overwrote it. "
                           "detach() shares memory with the output; store output.detach().clone()"))})


@exercise.case("a Linear with identity weights followed by ReLU(inplace=True), input [-1, 2, -3, 4]")
def _(answer, t: Tester) -> None:
    model = t.track(_identity_net(), "Sequential(lin, ReLU(inplace=True))")
    x = torch.tensor([[-1.0, 2.0, -3.0, 4.0]])
    got = answer(model, x, ["lin"])
    expected = torch.tensor([[-1.0, 2.0, -3.0, 4.0]])
    t.expect_type(got, dict, what="record_outputs(model, x, ['lin'])",
                  nudge="return a dict that maps each requested name to its recorded output")
    t.expect("lin" in got, what="record_outputs(...) keys", expected="a dict with the key 'lin'", got=list(got),
             nudge="return a dict that maps each requested name to its recorded output")
    t.expect_close(got["lin"], expected, what="the recorded 'lin'",
                   nudge="store a copy of the output that has its own memory",
                   wrong={"rectified": (expected.clamp(min=0), (
                       "the negative values became 0: the in-place ReLU overwrote your copy. detach() "
                       "shares memory with the output; store output.detach().clone()"))})
    t.expect(not got["lin"].requires_grad, what="record_outputs(...)['lin'].requires_grad",
             expected=False, got=got["lin"].requires_grad,
             nudge=("a recorded tensor that requires grad keeps the whole autograd graph alive; "
                    "store output.detach().clone(), not output.clone()"))


@exercise.case("a model that raises halfway through its forward: no hook may stay", hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(kit.Raising(seed=13), "the model that raises")
    kit.call_expecting_kit_error(answer, model, kit.randn(2, 4, seed=13), ["fc1", "fc2"])


def _recorder_storing(keep):
    """A recorder that is right in every way but what it keeps: ``keep(output)``."""
    def record(model, x, names):
        recorded, handles = {}, []
        try:
            for name in names:
                handles.append(model.get_submodule(name).register_forward_hook(
                    lambda m, a, o, name=name: recorded.__setitem__(name, keep(o))))
            model(x)
        finally:
            for h in handles:
                h.remove()
        return recorded
    return record


exercise.wrong("stores output.detach() without clone", mentions="in-place ReLU overwrote")(
    _recorder_storing(lambda o: o.detach()))


exercise.wrong("stores output.clone() that keeps the graph", mentions="keeps the whole autograd graph")(
    _recorder_storing(lambda o: o.clone()))


@exercise.wrong("returns a list of outputs instead of a dict", mentions="should be a dict")
def _recorder_list(model, x, names):
    return list(record_outputs(model, x, names).values())


@exercise.wrong("removes the hooks after model(x), not in a finally:", mentions="still attached", hidden=True)
def _recorder_no_finally(model, x, names):
    recorded, handles = {}, []
    for name in names:
        handles.append(model.get_submodule(name).register_forward_hook(
            lambda m, a, o, name=name: recorded.__setitem__(name, o.detach().clone())))
    model(x)
    for h in handles:
        h.remove()
    return recorded


@exercise.wrong("forgets to remove the hooks", mentions="still attached")
def _leaky_recorder(model, x, names):
    recorded = {}
    for name in names:
        model.get_submodule(name).register_forward_hook(
            lambda m, a, o, name=name: recorded.__setitem__(name, o.detach().clone()))
    model(x)
    return recorded
