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

import copy
import warnings
from collections import OrderedDict

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from ..data import shapes
from ..models import SmallCNN, inplace_modules, seeded, set_inplace
from . import kit
from .core import Exercise, Tester
from .predict import Prediction

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


def _reference_any(model: nn.Module, x: torch.Tensor, y: torch.Tensor, name: str) -> torch.Tensor:
    """The gradient of ``cross_entropy`` w.r.t. the output of ``name`` for any model, computed
    on a copy with every in-place flag off (nothing is overwritten there)."""
    model = copy.deepcopy(model)
    set_inplace(model, False)
    outs: dict[str, torch.Tensor] = {}
    handle = model.get_submodule(name).register_forward_hook(lambda m, a, o: outs.__setitem__("out", o))
    try:
        loss = F.cross_entropy(model(x), y)
    finally:
        handle.remove()
    (grad,) = torch.autograd.grad(loss, outs["out"])
    return grad.detach().clone()


class _RaisingInplace(nn.Module):
    """``body = Sequential(Linear(4, 4), ReLU(inplace=True))`` runs, then the forward raises
    :class:`kit.KitError` before ``head``: the run fails with in-place flags switched off."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        with seeded(seed):
            self.body = nn.Sequential(nn.Linear(4, 4), nn.ReLU(inplace=True))
            self.head = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.body(x)
        raise kit.KitError("the check's model raised halfway through its forward (on purpose)")
        return self.head(h)  # pragma: no cover


class _Swish(nn.Module):
    """A home-made activation with its own ``inplace`` switch (not a torch class)."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mul_(torch.sigmoid(x)) if self.inplace else x * torch.sigmoid(x)


def _other_classes_model(seed: int) -> nn.Module:
    """A nested 4-D model whose in-place modules are neither ReLU nor Dropout: LeakyReLU,
    Hardtanh, ELU, a home-made _Swish; an nn.SiLU that is not in-place."""
    with seeded(seed):
        features = nn.Sequential(OrderedDict([
            ("conv1", nn.Conv2d(1, 4, 3, padding=1)), ("leaky", nn.LeakyReLU(0.1, inplace=True)),
            ("conv2", nn.Conv2d(4, 4, 3, padding=1)), ("clip", nn.Hardtanh(inplace=True)),
            ("block", nn.Sequential(OrderedDict([
                ("conv", nn.Conv2d(4, 4, 1)), ("elu", nn.ELU(inplace=True)), ("swish", _Swish(inplace=True)),
                ("silu", nn.SiLU(inplace=False))]))),
        ]))
        head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3))
    return nn.Sequential(OrderedDict([("features", features), ("head", head)]))


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
          "autograd graph, and every hook must be removed, also when the model raises"),
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


@record_outputs.case("a conv output before an in-place ReLU and a conv output before BatchNorm")
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


@record_outputs.case("a Linear with identity weights followed by ReLU(inplace=True), input [-1, 2, -3, 4]")
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


@record_outputs.case("a model that raises halfway through its forward: no hook may stay", hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(kit.Raising(seed=13), "the model that raises")
    kit.call_expecting_kit_error(answer, model, kit.randn(2, 4, seed=13), ["fc1", "fc2"])


# Half-right answers (DIMENSIONS: inplace_after, nested, nd, raises): stores output.detach()
# (the in-place ReLU overwrites it); stores output.clone() (keeps the graph); leaves the hooks
# on; returns a list instead of the dict; removes the hooks without finally (hidden: the model
# raises).

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


@record_outputs.wrong("returns a list of outputs instead of a dict", mentions="should be a dict")
def _recorder_list(model, x, names):
    return list(_record_outputs_solution(model, x, names).values())


@record_outputs.wrong("removes the hooks after model(x), not in a finally:", mentions="still attached", hidden=True)
def _recorder_no_finally(model, x, names):
    recorded, handles = {}, []
    for name in names:
        handles.append(model.get_submodule(name).register_forward_hook(
            lambda m, a, o, name=name: recorded.__setitem__(name, o.detach().clone())))
    model(x)
    for h in handles:
        h.remove()
    return recorded


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
    t.expect_type(got, list, what="switch_off_inplace(SmallCNN(inplace=True))",
                  nudge="return the list of the names of the modules you switched off")
    nested_missing = (all(isinstance(n, str) for n in got) and set(got) < set(expected)
                      and all("." in n for n in set(expected) - set(got)))
    t.expect(got == expected, what="switch_off_inplace(SmallCNN(inplace=True))",
             expected=expected, got=got,
             nudge="the in-place ReLUs inside `features` are missing: model.named_children() stops at the "
                   "first level, model.named_modules() goes into every submodule" if nested_missing else
                   "return the names (from named_modules) of the modules that were in-place")
    left = inplace_modules(model)
    t.expect(left == [], what="in-place modules left afterwards", expected=[], got=left,
             nudge="set module.inplace = False on each of them: listing them is not enough, they are still in-place")


@switch_off_inplace.case("a nested model with LeakyReLU, Dropout and ReLU6 in-place and a ReLU that is not")
def _(answer, t: Tester) -> None:
    model = t.track(_mixed_model(), "the nested model")
    got = answer(model)
    expected = ["block.act", "block.drop", "clip"]
    t.expect_type(got, list, what="switch_off_inplace(nested model)",
                  nudge="return the list of the names of the modules you switched off")
    t.expect(got != ["clip"], what="switch_off_inplace(nested model)", expected=expected, got=got,
             nudge="the in-place modules inside `block` are missing: model.named_children() stops at the "
                   "first level, model.named_modules() goes into every submodule")
    t.expect(got == expected, what="switch_off_inplace(nested model)",
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


@switch_off_inplace.case("in-place LeakyReLU, Hardtanh, ELU and a home-made module, nested", hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(_other_classes_model(seed=3), "the nested model")
    got = answer(model)
    expected = ["features.leaky", "features.clip", "features.block.elu", "features.block.swish"]
    t.expect_type(got, list, what="switch_off_inplace(model)",
                  nudge="return the list of the names of the modules you switched off")
    left = inplace_modules(model)
    t.expect(got == expected and left == [], what="switch_off_inplace(model)", expected=expected, got=got,
             nudge=("an `inplace` switch is not limited to the classes you know (ReLU, LeakyReLU, Dropout...): "
                    "test getattr(module, 'inplace', False) is True, whatever its class"))


# Half-right answers (DIMENSIONS: nested, technique): only nn.ReLU; every module with an
# inplace attribute; lists without switching; walks named_children(); forgets to return the
# list; tests a fixed list of classes (hidden: Hardtanh, ELU, a home-made module).

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


@switch_off_inplace.wrong("walks model.named_children() only", mentions="named_modules() goes into")
def _children_only(model):
    names = []
    for name, m in model.named_children():
        if getattr(m, "inplace", False) is True:
            m.inplace = False
            names.append(name)
    return names


@switch_off_inplace.wrong("switches them off but forgets to return the names", mentions="None (nothing was returned)")
def _switch_returns_nothing(model):
    for m in model.modules():
        if getattr(m, "inplace", False) is True:
            m.inplace = False


@switch_off_inplace.wrong("tests a fixed list of activation classes", mentions="not limited to the classes",
                          hidden=True)
def _known_classes(model):
    names = []
    for name, m in model.named_modules():
        if isinstance(m, (nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.Dropout)) and m.inplace:
            m.inplace = False
            names.append(name)
    return names


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
          "follows that layer; use a tensor hook, leave the model's in-place ReLUs as they are "
          "(also while it runs), and remove every hook, also when the model raises"),
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


class _InplaceWatch:
    """The check's own forward pre-hooks on the in-place modules: whether each was still
    in-place when it ran (an answer that switches in-place off for the run is seen here).
    Attached before the model is tracked, so they are no leak; removed on exit."""

    def __init__(self, model: nn.Module):
        self.modules = [(n, m) for n, m in model.named_modules() if getattr(m, "inplace", False) is True]
        self.off_while_running: list[str] = []

    def __enter__(self) -> "_InplaceWatch":
        self.handles = [m.register_forward_pre_hook(
            lambda mod, args, n=n: None if mod.inplace else self.off_while_running.append(n))
            for n, m in self.modules]
        return self

    def __exit__(self, *exc) -> None:
        for h in self.handles:
            h.remove()


def _check_pre_relu_grad(answer, t: Tester, *, seed: int, data_seed: int, name: str) -> None:
    x, y = shapes(4, seed=data_seed)
    model = SmallCNN(inplace=True, seed=seed)
    relu = f"features.{int(name.rsplit('.', 1)[1]) + 1}"
    with _InplaceWatch(model) as watch:
        t.track(model, "SmallCNN(inplace=True)")
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
    off = sorted(set(watch.off_while_running))
    t.expect(not off, what="in-place modules switched off while the model ran", expected=[], got=off,
             nudge="the gradient is right, but the ReLUs were not in-place during your run: the task is to "
                   "get it with a tensor hook while they stay in-place (registered in the layer's forward "
                   "hook, it belongs to the output before the ReLU overwrites it)")


@pre_relu_grad.case("a model that raises halfway through its forward: no hook may stay", hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(_RaisingInplace(seed=15), "the model that raises")
    kit.call_expecting_kit_error(answer, model, kit.randn(2, 4, seed=15), torch.tensor([0, 1]), "body.0")


# Half-right answers (DIMENSIONS: inplace_after, nested, nd, raises, technique): a full
# backward hook (error); the tensor hook registered after the in-place op; retain_grad();
# switches in-place off for the run (right numbers, wrong technique); leaves the forward hook
# on; removes it without finally (hidden: the model raises).


@pre_relu_grad.case("SmallCNN(inplace=True), the BatchNorm layer 'features.1'")
def _(answer, t: Tester) -> None:
    _check_pre_relu_grad(answer, t, seed=7, data_seed=21, name="features.1")


@pre_relu_grad.case("SmallCNN(inplace=True), the second conv 'features.4'")
def _(answer, t: Tester) -> None:
    _check_pre_relu_grad(answer, t, seed=8, data_seed=22, name="features.4")


@pre_relu_grad.case("Linear -> ReLU(inplace=True) on 2-D inputs, the layer 'lin'")
def _(answer, t: Tester) -> None:
    model = kit.InplaceAfter(seed=14)
    x, y = kit.randn(5, 3, seed=14), torch.tensor([0, 1, 2, 1, 0])
    want = _reference_any(model, x, y, "lin")
    with _InplaceWatch(model) as watch:
        t.track(model, "Sequential-like lin -> ReLU(inplace=True)")
        got = answer(model, x, y, "lin")
    t.expect_close(got, want, what="pre_relu_grad(model, x, y, 'lin')", atol=1e-6, rtol=1e-4,
                   nudge="return the gradient w.r.t. the output of 'lin', from a tensor hook registered on it "
                         "in the layer's forward hook")
    t.expect(not watch.off_while_running and model.act.inplace, what="model.act.inplace during and after the run",
             expected=True, got=False, nudge="leave the model's ReLUs in-place: tensor hooks work with them")


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


@pre_relu_grad.wrong("switches the ReLUs off for the run, then back on", mentions="not in-place during your run")
def _switches_off(model, x, y, name):
    was = [m for m in model.modules() if getattr(m, "inplace", False) is True]
    for m in was:
        m.inplace = False
    try:
        return _pre_relu_grad_solution(model, x, y, name)
    finally:
        for m in was:
            m.inplace = True


@pre_relu_grad.wrong("leaves the forward hook attached", mentions="still attached")
def _pre_relu_leaky(model, x, y, name):
    seen = {}

    def on_output(m, a, o):
        o.register_hook(lambda g: seen.__setitem__("grad", g.detach().clone()))

    model.get_submodule(name).register_forward_hook(on_output)
    F.cross_entropy(model(x), y).backward()
    return seen["grad"]


@pre_relu_grad.wrong("removes the forward hook after backward, not in a finally:", mentions="still attached",
                     hidden=True)
def _pre_relu_no_finally(model, x, y, name):
    seen = {}

    def on_output(m, a, o):
        o.register_hook(lambda g: seen.__setitem__("grad", g.detach().clone()))

    handle = model.get_submodule(name).register_forward_hook(on_output)
    F.cross_entropy(model(x), y).backward()
    handle.remove()
    return seen["grad"]


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
    errors={"BackwardHookFunction": (
        "a module after the hooked layer was still in-place, and it may not modify the BackwardHookFunction "
        "view that a full backward hook puts on the layer's output: switch off every module whose inplace "
        "is True, whatever its class (LeakyReLU, Hardtanh, Dropout... not only nn.ReLU)")},
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


@grad_output_with_inplace_off.case("SmallCNN with both ReLUs in-place, layer 'features.1'")
def _(answer, t: Tester) -> None:
    _check_grad_output(answer, t, seed=9, data_seed=31, name="features.1",
                       inplace=["features.2", "features.5"])


@grad_output_with_inplace_off.case("SmallCNN where only the second ReLU is in-place, layer 'features.4'")
def _(answer, t: Tester) -> None:
    _check_grad_output(answer, t, seed=10, data_seed=32, name="features.4", inplace=["features.5"])


@grad_output_with_inplace_off.case("a model with an in-place ReLU whose forward raises: flags back, hook gone")
def _(answer, t: Tester) -> None:
    model = t.track(_RaisingInplace(seed=16), "the model that raises")
    kit.call_expecting_kit_error(answer, model, kit.randn(2, 4, seed=16), torch.tensor([0, 1]), "body.0")
    left = inplace_modules(model)
    t.expect(left == ["body.1"], what="the model's in-place modules after the run raised", expected=["body.1"],
             got=left, nudge="the run raised, and the flags were not put back: restore them in the finally: of "
                             "the try that runs the model, so they come back whichever way the run ends")


@grad_output_with_inplace_off.case("a nested 4-D model with in-place LeakyReLU, Hardtanh, ELU and a home-made "
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


# Half-right answers (DIMENSIONS: inplace_after, nested, nd, raises, technique): keeps in-place
# on (error); does not restore the flags; switches every flag to True; restores them without
# finally (the run raises); returns the tuple grad_output; switches off only nn.ReLU (hidden:
# in-place LeakyReLU and friends).

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


@grad_output_with_inplace_off.wrong("restores the flags after the run, not in a finally:", mentions="the run raised")
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


@grad_output_with_inplace_off.wrong("returns the tuple grad_output", mentions="not the tuple")
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


@grad_output_with_inplace_off.wrong("switches off only the nn.ReLU modules", mentions="not only nn.ReLU",
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


# -- predict, then run -----------------------------------------------------------------------

def _observe_before_an_inplace_relu() -> dict[str, str]:
    """Four ways to look at features.1 (BatchNorm) of SmallCNN, followed by ReLU(inplace=True):
    does each raise, keep wrong values, or keep the right ones (against the out-of-place model)?"""
    x, y = shapes(8, seed=0)
    reference = SmallCNN(inplace=False, seed=0)
    bn_out = {}

    def keep_reference(module: nn.Module, args: tuple, out: torch.Tensor) -> None:
        out.retain_grad()
        bn_out["value"] = out

    with reference.features[1].register_forward_hook(keep_reference):
        F.cross_entropy(reference(x), y).backward()
    right_value, right_grad = bn_out["value"].detach(), bn_out["value"].grad

    def verdict(got: torch.Tensor, right: torch.Tensor) -> str:
        return "right values" if torch.allclose(got, right) else "wrong values"

    def keep(how) -> dict:
        model, kept = SmallCNN(inplace=True, seed=0), {}

        def hook(module: nn.Module, args: tuple, out: torch.Tensor) -> None:
            how(out, kept)

        with model.features[1].register_forward_hook(hook):
            F.cross_entropy(model(x), y).backward()
        return kept

    seen = {
        "output.detach()": verdict(keep(lambda out, k: k.update(v=out.detach()))["v"], right_value),
        "output.detach().clone()": verdict(keep(lambda out, k: k.update(v=out.detach().clone()))["v"],
                                           right_value),
        "output.register_hook (the gradient)": verdict(
            keep(lambda out, k: out.register_hook(lambda g: k.update(v=g)))["v"], right_grad),
    }
    model = SmallCNN(inplace=True, seed=0)
    handle = model.features[1].register_full_backward_hook(lambda m, gi, go: None)
    try:
        F.cross_entropy(model(x), y).backward()
        seen["a full backward hook"] = "right values"
    except RuntimeError:
        seen["a full backward hook"] = "raises"
    finally:
        handle.remove()
    return seen


before_inplace = Prediction(
    "inplace_relu.before_inplace", "Predict: what a hook before an in-place ReLU gets",
    task=("a dict with the keys 'output.detach()', 'output.detach().clone()', "
          "'output.register_hook (the gradient)', 'a full backward hook'; each 'raises', "
          "'wrong values' or 'right values' (against the same model with inplace=False)"),
    answer_name="predict_records",
    observe=_observe_before_an_inplace_relu,
    choices=("raises", "wrong values", "right values"),
    hints=["The ReLU right after features.1 writes into features.1's output tensor after the hook has run.",
           "detach() shares memory; clone() copies. A tensor hook keeps the version it was registered on. "
           "A full backward hook wraps the output in a view that the in-place ReLU is not allowed to modify."],
    explain={
        "output.detach()": "detach() is a new name for the same memory: the in-place ReLU that runs "
                           "after the hook writes its zeros into what you kept, so the negatives are gone.",
        "output.detach().clone()": "clone() copies the values at the moment the hook runs; the later "
                                   "in-place write cannot reach the copy.",
        "output.register_hook (the gradient)": "a tensor hook registered before an in-place op receives the "
                                               "gradient with respect to the value it was registered on "
                                               "(the BatchNorm output, before the ReLU), which is exactly "
                                               "the gradient of the out-of-place model.",
        "a full backward hook": "a full backward hook hands the next module a view of the output, and "
                                "the in-place ReLU modifying that view raises a RuntimeError in the forward pass.",
    },
    summary="detach() shares memory and is overwritten; clone() and tensor hooks are safe; a full "
            "backward hook next to an in-place module raises.",
)
before_inplace.wrong("detach() is a safe copy (the popular claim)",
                     {"output.detach()": "right values", "output.detach().clone()": "right values",
                      "output.register_hook (the gradient)": "right values", "a full backward hook": "raises"},
                     "same memory")
before_inplace.wrong("every hook breaks",
                     {"output.detach()": "wrong values", "output.detach().clone()": "wrong values",
                      "output.register_hook (the gradient)": "wrong values", "a full backward hook": "raises"},
                     "copies the values")
before_inplace.wrong("a full backward hook just works",
                     {"output.detach()": "wrong values", "output.detach().clone()": "right values",
                      "output.register_hook (the gradient)": "right values",
                      "a full backward hook": "right values"}, "raises a RuntimeError")
