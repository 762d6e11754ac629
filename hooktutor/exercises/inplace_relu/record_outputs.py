"""05_inplace_relu_pitfall, exercise 1: record outputs that in-place ops cannot overwrite.

Half-right answers an examiner expects, by kit dimension (``kit.DIMENSIONS``):

- inplace_after: stores ``output.detach()`` (or ``.data``, a view, ``.cpu()``), which the
  in-place ReLU after the layer overwrites;
- detached: stores ``output.clone()``, which keeps the autograd graph alive;
- raises: leaves the hooks on, or removes them without ``finally:`` (hidden: the model raises);
- nested / nd: SmallCNN's ``features.N`` names and 4-D outputs;
- alias / dtype (hidden): a residual model in float64 whose layer output is added to in place
  after its hook ran; an answer that keeps a bare reference, converts to float32, or copies
  through float32 and back (``.float().double()``: float64's last digits lost) shows it;
- repeat: runs ``model(x)`` twice (a first pass without hooks, say), which moves BatchNorm's
  running statistics twice;
- left_as_found: switches in-place off for good (``set_inplace(model, False)``);
- alias (hidden): a module held under two names, which ``dict(model.named_modules())`` misses;
- a wrong type: returns a list of outputs instead of the dict.
"""

from __future__ import annotations

from collections import OrderedDict

import torch
from torch import nn

from ...data import shapes
from ...models import SmallCNN, inplace_modules, set_inplace
from .. import kit
from ..core import Exercise, Tester
from ._shared import reference


def record_outputs(model, x, names):
    """Run model(x) once; return {name: output of that layer} that later in-place ops
    cannot change."""
    ### BEGIN SOLUTION
    recorded, handles = {}, []
    try:
        for name in names:
            def store(module, args, output, name=name):
                recorded[name] = output.detach().clone()
            handles.append(model.get_submodule(name).register_forward_hook(store))
        model(x)
    finally:
        for handle in handles:
            handle.remove()
    return recorded
    ### END SOLUTION


exercise = Exercise(
    "inplace_relu.record_outputs", "Record outputs that in-place ops cannot overwrite",
    task=("write record_outputs(model, x, names) that runs model(x) once and returns a dict "
          "name -> output of each named layer, exactly as the layer produced it (same values, same "
          "dtype), even when an in-place op overwrites that output later; the recorded tensors must "
          "not keep the autograd graph, and every hook must be removed, also when the model raises"),
    hints=[
        "Register a forward hook on model.get_submodule(name) for each name; in the hook, store "
        "the output in a dict under that name.",
        "detach() alone shares memory with the output, so the next ReLU(inplace=True) rectifies "
        "your copy as well. Store output.detach().clone().",
        "Keep every handle in a list and remove them all in a finally: block.",
    ],
    solution=record_outputs,
    errors={"'alias'": (
        "'alias' is a second name of a module the model holds twice; dict(model.named_modules()) lists such a "
        "module only once, under its first name. model.get_submodule(name) finds every name")},
    equivalent_mutants={},
    guide="""`output.detach()` without `.clone()` (detach, `.data`, a view or `.cpu()` on a CPU tensor
    share memory with the output); `output.clone()` without `detach()`, which keeps the autograd
    graph alive; leaving hooks attached, or removing them without `finally:` (caught at grading,
    on a model that raises); running `model(x)` twice (a warm-up pass without hooks), which moves
    BatchNorm's running statistics twice. Also caught at grading: a residual layer whose output is
    added to in place after the hook ran, in float64, which a bare reference, a float32 copy or a
    copy made through float32 and back gets wrong; a module held under two names, which
    `dict(model.named_modules())` lists once. Switching in-place off for good "to be safe" changes
    the caller's model.""",
)


def _identity_net() -> nn.Sequential:
    """``Linear(4, 4)`` with identity weights and zero bias, then ``ReLU(inplace=True)``."""
    lin = nn.Linear(4, 4)
    with torch.no_grad():
        lin.weight.copy_(torch.eye(4))
        lin.bias.zero_()
    return nn.Sequential(OrderedDict([("lin", lin), ("act", nn.ReLU(inplace=True))]))


def _expect_dict(t: Tester, got: object, names: list[str], what: str) -> dict:
    t.expect_type(got, dict, what=what, nudge="return a dict that maps each requested name to its recorded output")
    for name in names:
        t.expect(name in got, what=f"{what}[{name!r}]", expected=f"a dict with the key {name!r}", got=list(got),
                 nudge="record every name in `names` under that name")
    return got


@exercise.case("the BatchNorm output of SmallCNN(inplace=True), followed by an in-place ReLU")
def _(answer, t: Tester) -> None:
    x, y = shapes(4, seed=11)
    model = t.track(SmallCNN(inplace=True, seed=5), "SmallCNN(inplace=True)")
    got = _expect_dict(t, answer(model, x, ["features.1"]), ["features.1"], "record_outputs(model, x, ['features.1'])")
    left = inplace_modules(model)
    t.expect(left == ["features.2", "features.5"], what="the model's in-place modules afterwards",
             expected=["features.2", "features.5"], got=left, nudge=(
                 "leave the model as you found it: a copy taken in the hook (output.detach().clone()) is safe "
                 "from the in-place ReLU, so there is no need to switch it off"))
    passes = int(model.features[1].num_batches_tracked)
    t.expect(passes == 1, what="forward passes of the model (BatchNorm's num_batches_tracked)", expected=1,
             got=passes, nudge=(
                 "run model(x) once, with the hooks attached: every forward pass of a model in training mode "
                 "moves BatchNorm's running statistics, so an extra pass changes the caller's model"))
    ref, _ = reference(5, x, y, ["features.1"])
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
    got = _expect_dict(t, answer(model, x, names), names, "record_outputs(model, x, names)")
    ref, _ = reference(6, x, y, names)
    for name in names:
        t.expect_close(got[name], ref[name], what=f"the recorded {name!r}",
                       nudge="store output.detach().clone() for every requested layer",
                       wrong={"rectified": (ref[name].clamp(min=0), (
                           f"{name!r} lost its negative values: the in-place ReLU overwrote it. "
                           "detach() shares memory with the output; store output.detach().clone()"))})


@exercise.case("a Linear with identity weights followed by ReLU(inplace=True), input [-1, 2, -3, 4]")
def _(answer, t: Tester) -> None:
    model = t.track(_identity_net(), "Sequential(lin, ReLU(inplace=True))")
    x = torch.tensor([[-1.0, 2.0, -3.0, 4.0]])
    got = _expect_dict(t, answer(model, x, ["lin"]), ["lin"], "record_outputs(model, x, ['lin'])")
    expected = torch.tensor([[-1.0, 2.0, -3.0, 4.0]])
    t.expect_close(got["lin"], expected, what="the recorded 'lin'",
                   nudge="store a copy of the output that has its own memory",
                   wrong={"rectified": (expected.clamp(min=0), (
                       "the negative values became 0: the in-place ReLU overwrote your copy. detach() "
                       "shares memory with the output; store output.detach().clone()"))})
    kit.expect_detached(t, got["lin"], what="record_outputs(...)['lin']")


@exercise.case("a model that raises halfway through its forward: no hook may stay", hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(kit.Raising(seed=13), "the model that raises")
    kit.call_expecting_kit_error(answer, model, kit.randn(2, 4, seed=13), ["fc1", "fc2"])


@exercise.case("a residual model in float64: the output of `body` (also held as `alias`) is added to in place "
               "after its hook ran", hidden=True)
def _(answer, t: Tester) -> None:
    model, x = kit.in_dtype(kit.Residual(seed=14), kit.randn(3, 4, seed=14))
    model.alias = model.body           # the same Linear, registered a second time
    t.track(model, "a residual model in float64 that holds `body` also as `alias`")
    want = model.outputs(x)
    want["alias"] = want["body"]
    names = ["fc", "body", "alias"]
    got = _expect_dict(t, answer(model, x, names), names, "record_outputs(model, x, ['fc', 'body', 'alias'])")
    for name in names:
        t.expect_type(got[name], torch.Tensor, what=f"the recorded {name!r}", nudge="store the output tensor (a copy)")
        t.expect(got[name].dtype == torch.float64, what=f"the dtype of the recorded {name!r}", expected=torch.float64,
                 got=got[name].dtype, nudge="keep the output as the layer produced it, dtype included: "
                                            "output.detach().clone(), no conversion")
        t.expect_close(got[name], want[name], what=f"the recorded {name!r}", atol=1e-12, rtol=1e-12, nudge=(
            "the model added to the output in place after your hook ran, and what you stored changed with "
            "it: store output.detach().clone(), a copy with its own memory"), wrong={"through float32": (
                want[name].float().double(), (
                    "your copy went through float32 on the way and lost float64's last digits: keep the "
                    "output exactly as the layer produced it, output.detach().clone(), no conversion"))})
        kit.expect_detached(t, got[name], what=f"the recorded {name!r}")


# -- the wrong answers peculiar to this exercise -------------------------------------------------

def _recorder(*, keep=lambda o: o.detach().clone(), remove="finally"):
    """One factory for the near-copy wrong answers: what the hook keeps (``keep(output)``) and
    how the hooks are removed ("finally", "after": not in a finally block, "never")."""
    def record(model, x, names):
        recorded, handles = {}, []

        def attach_and_run():
            for name in names:
                handles.append(model.get_submodule(name).register_forward_hook(
                    lambda m, a, o, name=name: recorded.__setitem__(name, keep(o))))
            model(x)
        if remove == "finally":
            try:
                attach_and_run()
            finally:
                for h in handles:
                    h.remove()
        else:
            attach_and_run()
            for h in handles if remove == "after" else ():
                h.remove()
        return recorded
    return record


exercise.wrong("stores output.detach() without clone", mentions="in-place ReLU overwrote")(
    _recorder(keep=lambda o: o.detach()))
exercise.wrong("stores output.clone() that keeps the graph", mentions="still holds the autograd graph")(
    _recorder(keep=lambda o: o.clone()))
exercise.wrong("forgets to remove the hooks", mentions="still attached")(_recorder(remove="never"))
exercise.wrong("removes the hooks after model(x), not in a finally:", mentions="still attached", hidden=True)(
    _recorder(remove="after"))
exercise.wrong("keeps a float32 copy", mentions="dtype included", hidden=True)(
    _recorder(keep=lambda o: o.detach().float().clone()))
exercise.wrong("copies through float32 and back", mentions="went through float32", hidden=True)(
    _recorder(keep=lambda o: o.detach().to(torch.float32, copy=True).to(o.dtype)))
exercise.wrong("stores output.detach().to(output.dtype), which is the output itself",
               mentions="in-place ReLU overwrote")(_recorder(keep=lambda o: o.detach().to(o.dtype)))


@exercise.wrong("runs model(x) twice: a pass without hooks, then one with them", mentions="run model(x) once")
def _runs_twice(model, x, names):
    model(x)
    return record_outputs(model, x, names)


@exercise.wrong("switches in-place off for good, to be safe", mentions="no need to switch it off")
def _switches_off_for_good(model, x, names):
    set_inplace(model, False)
    return record_outputs(model, x, names)


@exercise.wrong("finds the layers in dict(model.named_modules())", mentions="named_modules()", hidden=True)
def _by_named_modules(model, x, names):
    layers, recorded, handles = dict(model.named_modules()), {}, []
    try:
        for name in names:
            handles.append(layers[name].register_forward_hook(
                lambda m, a, o, name=name: recorded.__setitem__(name, o.detach().clone())))
        model(x)
    finally:
        for h in handles:
            h.remove()
    return recorded


@exercise.wrong("returns a list of outputs instead of a dict", mentions="should be a dict")
def _recorder_list(model, x, names):
    return list(record_outputs(model, x, names).values())
