"""Exercises of ``05_inplace_relu_pitfall.ipynb``: hooks that survive in-place operations.

* :data:`record_outputs` — record layer outputs that a later ``ReLU(inplace=True)`` cannot
  overwrite.
* :data:`switch_off_inplace` — find every in-place module and switch it off.
* :data:`pre_relu_grad` — the gradient w.r.t. a layer's output, from a tensor hook, on a
  network whose ReLUs stay in-place.
* :data:`grad_output_with_inplace_off` — a full backward hook on an in-place network, made
  possible by switching in-place off for one run and restoring every flag afterwards.
"""

from __future__ import annotations

from collections import OrderedDict

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from ..data import shapes
from ..models import SmallCNN, inplace_modules
from .core import Exercise, Tester

_BACKWARD_HOOK_NUDGE = (
    "a full backward hook wraps the module's output in a BackwardHookFunction view, and the "
    "in-place ReLU that follows may not modify that view: the error comes in the forward pass. "
    "Use a tensor hook on the output instead (registered in a forward hook), or switch in-place "
    "off for the run.")


def _reference(seed: int, x: torch.Tensor, y: torch.Tensor, names: list[str]
               ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Outputs and gradients of ``cross_entropy`` w.r.t. the outputs of ``names``, computed
    on a SmallCNN without in-place ReLUs (nothing is overwritten there)."""
    model = SmallCNN(inplace=False, seed=seed)
    outs: dict[str, torch.Tensor] = {}
    handles = [model.get_submodule(n).register_forward_hook(
        lambda m, a, o, n=n: outs.__setitem__(n, o)) for n in names]
    try:
        loss = F.cross_entropy(model(x), y)
    finally:
        for h in handles:
            h.remove()
    grads = torch.autograd.grad(loss, [outs[n] for n in names])
    return ({n: outs[n].detach().clone() for n in names},
            {n: g.detach().clone() for n, g in zip(names, grads)})


def _identity_net() -> nn.Sequential:
    """``Linear(4, 4)`` with identity weights and zero bias, then ``ReLU(inplace=True)``."""
    lin = nn.Linear(4, 4)
    with torch.no_grad():
        lin.weight.copy_(torch.eye(4))
        lin.bias.zero_()
    return nn.Sequential(OrderedDict([("lin", lin), ("act", nn.ReLU(inplace=True))]))


# ---------------------------------------------------------------------------------------
# 1. record_outputs
# ---------------------------------------------------------------------------------------

def _record_outputs_solution(model: nn.Module, x: torch.Tensor, names: list[str]) -> dict[str, torch.Tensor]:
    recorded = {}
    handles = []
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


record_outputs = Exercise(
    "inplace_relu.record_outputs", "Record outputs that in-place ops cannot overwrite",
    task=("write record_outputs(model, x, names) that runs model(x) once and returns a dict "
          "name -> output of each named layer, exactly as the layer produced it, even when an "
          "in-place ReLU overwrites that output later; the recorded tensors must not keep the "
          "autograd graph, and every hook must be removed"),
    hints=[
        "Register a forward hook on model.get_submodule(name) for each name; in the hook, store "
        "the output in a dict under that name.",
        "detach() alone shares memory with the output, so the next ReLU(inplace=True) rectifies "
        "your copy as well. Store output.detach().clone().",
        "Keep every handle in a list and remove them all in a finally: block.",
    ],
    solution=_record_outputs_solution,
)


@record_outputs.case("the BatchNorm output of SmallCNN(inplace=True), followed by an in-place ReLU")
def _(answer, t: Tester) -> None:
    x, y = shapes(4, seed=11)
    model = t.track(SmallCNN(inplace=True, seed=5), "SmallCNN(inplace=True)")
    got = answer(model, x, ["features.1"])
    t.expect(isinstance(got, dict) and "features.1" in got, what="record_outputs(...) keys",
             expected="a dict with the key 'features.1'", got=got if not isinstance(got, dict) else list(got),
             nudge="return a dict that maps each requested name to its recorded output")
    ref, _ = _reference(5, x, y, ["features.1"])
    t.expect_close(got["features.1"], ref["features.1"], what="the recorded 'features.1'",
                   nudge="store a copy of the output that has its own memory",
                   wrong={"rectified": (ref["features.1"].clamp(min=0), (
                       "your copy lost its negative values: the in-place ReLU overwrote it. detach(), "
                       ".data, a view or .cpu() share memory with the output; store output.detach().clone()"))})


@record_outputs.case("a conv output before an in-place ReLU and a conv output before BatchNorm")
def _(answer, t: Tester) -> None:
    x, y = shapes(4, seed=12)
    model = t.track(SmallCNN(inplace=True, seed=6), "SmallCNN(inplace=True)")
    names = ["features.0", "features.4"]
    got = answer(model, x, names)
    ref, _ = _reference(6, x, y, names)
    for name in names:
        t.expect(isinstance(got, dict) and name in got, what=f"record_outputs(...)[{name!r}]",
                 expected=f"a dict with the key {name!r}", got=got if not isinstance(got, dict) else list(got),
                 nudge="record every name in `names`, not just the first one")
        t.expect_close(got[name], ref[name], what=f"the recorded {name!r}",
                       nudge="store output.detach().clone() for every requested layer",
                       wrong={"rectified": (ref[name].clamp(min=0), (
                           f"{name!r} lost its negative values: the in-place ReLU overwrote it. "
                           "detach() shares memory with the output; store output.detach().clone()"))})


@record_outputs.case("a Linear with identity weights followed by ReLU(inplace=True), input [-1, 2, -3, 4]")
def _(answer, t: Tester) -> None:
    model = t.track(_identity_net(), "Sequential(lin, ReLU(inplace=True))")
    x = torch.tensor([[-1.0, 2.0, -3.0, 4.0]])
    got = answer(model, x, ["lin"])
    expected = torch.tensor([[-1.0, 2.0, -3.0, 4.0]])
    t.expect(isinstance(got, dict) and "lin" in got, what="record_outputs(...) keys",
             expected="a dict with the key 'lin'", got=got if not isinstance(got, dict) else list(got),
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


record_outputs.wrong("stores output.detach() without clone", mentions="in-place ReLU overwrote")(
    _recorder_storing(lambda o: o.detach()))
record_outputs.wrong("stores output.clone() that keeps the graph", mentions="keeps the whole autograd graph")(
    _recorder_storing(lambda o: o.clone()))


@record_outputs.wrong("forgets to remove the hooks", mentions="still attached")
def _leaky_recorder(model, x, names):
    recorded = {}
    for name in names:
        model.get_submodule(name).register_forward_hook(
            lambda m, a, o, name=name: recorded.__setitem__(name, o.detach().clone()))
    model(x)
    return recorded


# ---------------------------------------------------------------------------------------
# 2. switch_off_inplace
# ---------------------------------------------------------------------------------------

def _switch_off_inplace_solution(model: nn.Module) -> list[str]:
    switched = []
    for name, module in model.named_modules():
        if getattr(module, "inplace", False) is True:
            module.inplace = False
            switched.append(name)
    return switched


switch_off_inplace = Exercise(
    "inplace_relu.switch_off_inplace", "Switch off every in-place module",
    task=("write switch_off_inplace(model) that sets inplace=False on every module of `model` "
          "that has inplace=True (whatever its class) and returns their names, in the order "
          "model.named_modules() lists them"),
    hints=[
        "Loop over model.named_modules(); it gives (name, module) for every module, nested ones "
        "included.",
        "Not only nn.ReLU has the switch: Dropout, LeakyReLU, ReLU6, Hardtanh, ELU, SiLU... all "
        "carry an `inplace` attribute. Test getattr(module, 'inplace', False) is True.",
        "Set module.inplace = False and append the name only for modules that were in-place.",
    ],
    solution=_switch_off_inplace_solution,
)


def _mixed_model() -> nn.Module:
    block = nn.Sequential(OrderedDict([
        ("fc", nn.Linear(4, 4)), ("act", nn.LeakyReLU(0.1, inplace=True)),
        ("drop", nn.Dropout(0.0, inplace=True)),
    ]))
    return nn.Sequential(OrderedDict([
        ("stem", nn.Linear(4, 4)), ("act0", nn.ReLU(inplace=False)), ("block", block),
        ("clip", nn.ReLU6(inplace=True)), ("head", nn.Linear(4, 2)),
    ]))


@switch_off_inplace.case("SmallCNN(inplace=True)")
def _(answer, t: Tester) -> None:
    model = t.track(SmallCNN(inplace=True, seed=0), "SmallCNN(inplace=True)")
    got = answer(model)
    expected = ["features.2", "features.5"]
    t.expect(isinstance(got, list) and got == expected, what="switch_off_inplace(SmallCNN(inplace=True))",
             expected=expected, got=got,
             nudge="return the names (from named_modules) of the modules that were in-place")
    left = inplace_modules(model)
    t.expect(left == [], what="in-place modules left afterwards", expected=[], got=left,
             nudge="set module.inplace = False on each of them: listing them is not enough, they are still in-place")


@switch_off_inplace.case("a nested model with LeakyReLU, Dropout and ReLU6 in-place and a ReLU that is not")
def _(answer, t: Tester) -> None:
    model = t.track(_mixed_model(), "the nested model")
    got = answer(model)
    expected = ["block.act", "block.drop", "clip"]
    t.expect(isinstance(got, list) and got == expected, what="switch_off_inplace(nested model)",
             expected=expected, got=got,
             nudge=("look at every module with an inplace attribute, whatever its class (Dropout, LeakyReLU, "
                    "ReLU6...), and return only the modules that were in-place (act0 never was)"))
    left = inplace_modules(model)
    t.expect(left == [], what="in-place modules left afterwards", expected=[], got=left,
             nudge="set module.inplace = False on each of them: listing them is not enough, they are still in-place")


@switch_off_inplace.case("a model with nothing in-place")
def _(answer, t: Tester) -> None:
    model = t.track(SmallCNN(inplace=False, seed=0), "SmallCNN(inplace=False)")
    got = answer(model)
    t.expect(got == [], what="switch_off_inplace(SmallCNN(inplace=False))", expected=[], got=got,
             nudge="return only the modules that were in-place; here there are none")


@switch_off_inplace.wrong("only looks at nn.ReLU", mentions="whatever its class")
def _relu_only(model):
    names = []
    for name, m in model.named_modules():
        if isinstance(m, nn.ReLU) and m.inplace:
            m.inplace = False
            names.append(name)
    return names


@switch_off_inplace.wrong("returns every module with an inplace attribute", mentions="only the modules that were")
def _every_flag(model):
    names = []
    for name, m in model.named_modules():
        if hasattr(m, "inplace"):
            m.inplace = False
            names.append(name)
    return names


@switch_off_inplace.wrong("lists them without switching them off", mentions="listing them is not enough")
def _list_only(model):
    return [name for name, m in model.named_modules() if getattr(m, "inplace", False)]


# ---------------------------------------------------------------------------------------
# 3. pre_relu_grad
# ---------------------------------------------------------------------------------------

def _pre_relu_grad_solution(model: nn.Module, x: torch.Tensor, y: torch.Tensor, name: str) -> torch.Tensor:
    seen = {}

    def on_output(module, args, output):
        # registered now, before the in-place ReLU runs: this hook belongs to this version
        output.register_hook(lambda grad: seen.__setitem__("grad", grad.detach().clone()))

    handle = model.get_submodule(name).register_forward_hook(on_output)
    try:
        F.cross_entropy(model(x), y).backward()
    finally:
        handle.remove()
    return seen["grad"]


pre_relu_grad = Exercise(
    "inplace_relu.pre_relu_grad", "The gradient before an in-place ReLU",
    task=("write pre_relu_grad(model, x, y, name) that returns the gradient of "
          "F.cross_entropy(model(x), y) w.r.t. the output of layer `name`, where an in-place ReLU "
          "follows that layer; use a tensor hook, leave the model's in-place ReLUs as they are, "
          "and remove every hook"),
    hints=[
        "In a forward hook on model.get_submodule(name), call output.register_hook(fn): fn receives "
        "the gradient w.r.t. that output during backward.",
        "A tensor hook belongs to the version of the tensor it was registered on. Registered in the "
        "layer's own forward hook, it sees the gradient before the ReLU; registered in the ReLU's "
        "forward hook (after the in-place op), it sees the gradient after it.",
        "A full backward hook on that layer raises the BackwardHookFunction error; retain_grad() "
        "follows the tensor to its latest (rectified) version. Use register_hook.",
    ],
    solution=_pre_relu_grad_solution,
    errors={"BackwardHookFunction": _BACKWARD_HOOK_NUDGE},
)


def _check_pre_relu_grad(answer, t: Tester, *, seed: int, data_seed: int, name: str) -> None:
    x, y = shapes(4, seed=data_seed)
    model = t.track(SmallCNN(inplace=True, seed=seed), "SmallCNN(inplace=True)")
    relu = f"features.{int(name.rsplit('.', 1)[1]) + 1}"
    got = answer(model, x, y, name)
    _, grads = _reference(seed, x, y, [name, relu])
    t.expect_close(got, grads[name], what=f"pre_relu_grad(model, x, y, {name!r})", atol=1e-6, rtol=1e-4,
                   nudge="return the gradient w.r.t. the layer's output, from a tensor hook registered on it",
                   wrong={"post": (grads[relu], (
                       "that is the gradient after the ReLU: your tensor hook (or retain_grad) was attached "
                       "after the in-place op. Register it in the forward hook of the layer itself, before "
                       "the ReLU overwrites the output"))})
    left = inplace_modules(model)
    t.expect(left == ["features.2", "features.5"], what="the model's in-place modules afterwards",
             expected=["features.2", "features.5"], got=left,
             nudge="leave the model as you found it: tensor hooks work with in-place ReLUs")


@pre_relu_grad.case("SmallCNN(inplace=True), the BatchNorm layer 'features.1'")
def _(answer, t: Tester) -> None:
    _check_pre_relu_grad(answer, t, seed=7, data_seed=21, name="features.1")


@pre_relu_grad.case("SmallCNN(inplace=True), the second conv 'features.4'")
def _(answer, t: Tester) -> None:
    _check_pre_relu_grad(answer, t, seed=8, data_seed=22, name="features.4")


@pre_relu_grad.wrong("uses a full backward hook", mentions="BackwardHookFunction view")
def _full_backward_hook(model, x, y, name):
    seen = {}
    handle = model.get_submodule(name).register_full_backward_hook(
        lambda m, gin, gout: seen.__setitem__("grad", gout[0]))
    try:
        F.cross_entropy(model(x), y).backward()
    finally:
        handle.remove()
    return seen["grad"]


@pre_relu_grad.wrong("registers the tensor hook after the in-place ReLU", mentions="after the in-place op")
def _hook_after_relu(model, x, y, name):
    seen = {}
    relu = model.features[int(name.rsplit(".", 1)[1]) + 1]

    def on_relu_output(m, a, o):
        o.register_hook(lambda g: seen.__setitem__("grad", g))
    handle = relu.register_forward_hook(on_relu_output)
    try:
        F.cross_entropy(model(x), y).backward()
    finally:
        handle.remove()
    return seen["grad"]


@pre_relu_grad.wrong("uses retain_grad() in the layer's forward hook", mentions="retain_grad")
def _retain_grad(model, x, y, name):
    kept = {}

    def keep(m, a, o):
        o.retain_grad()
        kept["out"] = o
    handle = model.get_submodule(name).register_forward_hook(keep)
    try:
        F.cross_entropy(model(x), y).backward()
    finally:
        handle.remove()
    return kept["out"].grad


# ---------------------------------------------------------------------------------------
# 4. grad_output_with_inplace_off
# ---------------------------------------------------------------------------------------

def _grad_output_solution(model: nn.Module, x: torch.Tensor, y: torch.Tensor, name: str) -> torch.Tensor:
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


grad_output_with_inplace_off = Exercise(
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
    solution=_grad_output_solution,
    errors={"BackwardHookFunction": _BACKWARD_HOOK_NUDGE},
)


def _check_grad_output(answer, t: Tester, *, seed: int, data_seed: int, name: str,
                       inplace: list[str]) -> None:
    x, y = shapes(4, seed=data_seed)
    model = SmallCNN(inplace=False, seed=seed)
    for n in inplace:
        model.get_submodule(n).inplace = True
    t.track(model, "the SmallCNN")
    got = answer(model, x, y, name)
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


@grad_output_with_inplace_off.case("SmallCNN with both ReLUs in-place, layer 'features.1'")
def _(answer, t: Tester) -> None:
    _check_grad_output(answer, t, seed=9, data_seed=31, name="features.1",
                       inplace=["features.2", "features.5"])


@grad_output_with_inplace_off.case("SmallCNN where only the second ReLU is in-place, layer 'features.4'")
def _(answer, t: Tester) -> None:
    _check_grad_output(answer, t, seed=10, data_seed=32, name="features.4", inplace=["features.5"])


@grad_output_with_inplace_off.wrong("keeps in-place on", mentions="BackwardHookFunction view")
def _keeps_inplace(model, x, y, name):
    seen = {}
    handle = model.get_submodule(name).register_full_backward_hook(
        lambda m, gin, gout: seen.__setitem__("grad", gout[0]))
    try:
        F.cross_entropy(model(x), y).backward()
    finally:
        handle.remove()
    return seen["grad"]


@grad_output_with_inplace_off.wrong("does not restore the flags", mentions="restore the flags")
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


@grad_output_with_inplace_off.wrong("switches every flag back to True", mentions="exactly as it was")
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
