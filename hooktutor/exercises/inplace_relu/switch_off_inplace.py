"""05_inplace_relu_pitfall, exercise: inplace_relu.switch_off_inplace."""

from __future__ import annotations

from collections import OrderedDict

from torch import nn

from ...models import SmallCNN, inplace_modules
from ..core import Exercise, Tester
from ._shared import _other_classes_model


def switch_off_inplace(model):
    """Switch off every in-place module of `model`; return the names of those that were on."""
    ### BEGIN SOLUTION
    switched = []
    for name, module in model.named_modules():
        if getattr(module, "inplace", False) is True:
            module.inplace = False
            switched.append(name)
    return switched
    ### END SOLUTION


exercise = Exercise(
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
    solution=switch_off_inplace,
    guide="""looking at `nn.ReLU` only (Dropout, LeakyReLU, ReLU6, ELU, SiLU... have the flag too);
    returning every module that *has* an `inplace` attribute instead of those that were in
    place; listing them without setting `inplace = False`.""",
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


@exercise.case("SmallCNN(inplace=True)")
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


@exercise.case("a nested model with LeakyReLU, Dropout and ReLU6 in-place and a ReLU that is not")
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


@exercise.case("a model with nothing in-place")
def _(answer, t: Tester) -> None:
    model = t.track(SmallCNN(inplace=False, seed=0), "SmallCNN(inplace=False)")
    got = answer(model)
    t.expect(got == [], what="switch_off_inplace(SmallCNN(inplace=False))", expected=[], got=got,
             nudge="return only the modules that were in-place; here there are none")


@exercise.case("in-place LeakyReLU, Hardtanh, ELU and a home-made module, nested", hidden=True)
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


@exercise.wrong("only looks at nn.ReLU", mentions="whatever its class")
def _relu_only(model):
    names = []
    for name, m in model.named_modules():
        if isinstance(m, nn.ReLU) and m.inplace:
            m.inplace = False
            names.append(name)
    return names


@exercise.wrong("returns every module with an inplace attribute", mentions="only the modules that were")
def _every_flag(model):
    names = []
    for name, m in model.named_modules():
        if hasattr(m, "inplace"):
            m.inplace = False
            names.append(name)
    return names


@exercise.wrong("lists them without switching them off", mentions="listing them is not enough")
def _list_only(model):
    return [name for name, m in model.named_modules() if getattr(m, "inplace", False)]


@exercise.wrong("walks model.named_children() only", mentions="named_modules() goes into")
def _children_only(model):
    names = []
    for name, m in model.named_children():
        if getattr(m, "inplace", False) is True:
            m.inplace = False
            names.append(name)
    return names


@exercise.wrong("switches them off but forgets to return the names", mentions="None (nothing was returned)")
def _switch_returns_nothing(model):
    for m in model.modules():
        if getattr(m, "inplace", False) is True:
            m.inplace = False


@exercise.wrong("tests a fixed list of activation classes", mentions="not limited to the classes",
                          hidden=True)
def _known_classes(model):
    names = []
    for name, m in model.named_modules():
        if isinstance(m, (nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.Dropout)) and m.inplace:
            m.inplace = False
            names.append(name)
    return names
