"""05_inplace_relu_pitfall, exercise 2: switch off every in-place module.

Half-right answers an examiner expects, by kit dimension (``kit.DIMENSIONS``):

- technique: looks at ``nn.ReLU`` only, or at a fixed list of activation classes (hidden:
  Hardtanh, ELU, a home-made module); returns every module that *has* an ``inplace``
  attribute; lists the modules without switching them off;
- nested: walks ``model.named_children()`` only;
- order: returns the names sorted, or in another order than ``named_modules()`` (hidden: a
  model that lists ``leaky`` before ``clip`` before ``block``);
- hidden: skips containers that have children, misses a class-level ``inplace = True``, lists a
  shared module under each of its names, skips the model itself (``named_modules()[1:]``);
- repeat: keeps its list outside the function, so a second call returns the first one's names;
- left_as_found: changes something else of the model (train/eval, requires_grad), or writes
  ``inplace = False`` onto every module it walks, so a Linear or a Sequential gains a flag it
  never had (which ``set_inplace`` and ``inplace_modules`` then take for a switch);
- a wrong type: forgets to return the list.
"""

from __future__ import annotations

from collections import OrderedDict

from torch import nn

from ...models import SmallCNN, inplace_modules
from .. import kit
from ..core import Exercise, Tester
from ._shared import other_classes_model


def switch_off_inplace(model):
    """Switch off every in-place module of `model`; return the names of those that were on."""
    ### BEGIN SOLUTION
    switched = []
    for name, submodule in model.named_modules():
        if getattr(submodule, "inplace", False) is True:
            submodule.inplace = False
            switched.append(name)
    return switched
    ### END SOLUTION


exercise = Exercise(
    "inplace_relu.switch_off_inplace", "Switch off every in-place module",
    task=("write switch_off_inplace(model) that sets inplace=False on every module of `model` "
          "that has inplace=True (whatever its class) and returns their names, in the order "
          "model.named_modules() lists them; nothing else of the model changes"),
    hints=[
        "Loop over model.named_modules(); it gives (name, module) for every module, nested ones "
        "included.",
        "Not only nn.ReLU has the switch: Dropout, LeakyReLU, ReLU6, Hardtanh, ELU, SiLU... all "
        "carry an `inplace` attribute. Test getattr(module, 'inplace', False) is True.",
        "Set module.inplace = False and append the name only for modules that were in-place.",
    ],
    solution=switch_off_inplace,
    equivalent_mutants={},
    guide="""looking at `nn.ReLU` only (Dropout, LeakyReLU, ReLU6, ELU, SiLU... have the flag too), or
    at a fixed list of classes (caught at grading: Hardtanh, ELU and a home-made module); returning
    every module that *has* an `inplace` attribute instead of those that were in place; listing
    them without setting `inplace = False`; walking `named_children()`, which misses the nested
    ones; a list kept outside the function, so a second call returns the first one's names;
    `m.inplace = False` written onto every module walked, so a Linear gains a flag it never had. Also
    at grading: names sorted instead of in `named_modules()` order; leaf modules only (a container
    with its own flag is missed); a shared module listed under each name; the model itself
    skipped.""",
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


@exercise.case("two SmallCNN(inplace=True), one after the other (in eval mode, features.0 frozen)")
def _(answer, t: Tester) -> None:
    model = t.track(SmallCNN(inplace=True, seed=0), "SmallCNN(inplace=True)")
    twin = t.track(SmallCNN(inplace=True, seed=0), "a second SmallCNN(inplace=True)")
    kit.freeze(model.eval(), "features.0")
    with kit.LeftAsFound(t, model, name="SmallCNN (in eval mode, features.0 frozen)"):
        got = answer(model)
    again = answer(twin)
    if isinstance(got, list) and isinstance(again, list) and all(isinstance(n, str) for n in got + again):
        t.expect(again == got, what="switch_off_inplace(twin), after switch_off_inplace(model)", expected=got,
                 got=again, nudge="the second call returned other names for the same kind of model: make the "
                                  "list inside the function, a fresh one per call")
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
    had_flag = {name: hasattr(m, "inplace") for name, m in model.named_modules()}
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
    gained = [name for name, m in model.named_modules() if not had_flag[name] and hasattr(m, "inplace")]
    t.expect(not gained, what="modules that have an `inplace` attribute now and had none before", expected=[],
             got=gained, nudge=(
                 "set inplace = False only on the modules that were in-place: written onto a Linear or a "
                 "Sequential, it gives them a flag they never had, which code that looks for the flag "
                 "(set_inplace, inplace_modules) then takes for a switch"))


@exercise.case("a model with nothing in-place")
def _(answer, t: Tester) -> None:
    model = t.track(SmallCNN(inplace=False, seed=0), "SmallCNN(inplace=False)")
    got = answer(model)
    t.expect(got == [], what="switch_off_inplace(SmallCNN(inplace=False))", expected=[], got=got,
             nudge="return only the modules that were in-place; here there are none")


@exercise.case("in-place LeakyReLU, Hardtanh, ELU and a home-made module, nested", hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(other_classes_model(seed=3), "the nested model")
    got = answer(model)
    expected = ["features.leaky", "features.clip", "features.block.elu", "features.block.swish"]
    t.expect_type(got, list, what="switch_off_inplace(model)",
                  nudge="return the list of the names of the modules you switched off")
    left = inplace_modules(model)
    t.expect(sorted(map(str, got)) == sorted(expected) and left == [], what="switch_off_inplace(model)",
             expected=expected, got=got, nudge=(
                 "an `inplace` switch is not limited to the classes you know (ReLU, LeakyReLU, Dropout...): "
                 "test getattr(module, 'inplace', False) is True, whatever its class"))
    t.expect(got == expected, what="the order of the names", expected=expected, got=got,
             nudge="return the names in the order model.named_modules() lists them (not sorted)")


class _InplaceBlock(nn.Sequential):
    """A container with its own ``inplace`` switch (it rectifies its result in place) and children."""

    def __init__(self) -> None:
        super().__init__(nn.Linear(4, 4), nn.ReLU(inplace=True))
        self.inplace = True

    def forward(self, x):
        out = super().forward(x)
        return out.clamp_(max=1.0) if self.inplace else out.clamp(max=1.0)


class _AlwaysInplace(nn.Module):
    """A module whose class says ``inplace = True`` (a class attribute, not set in ``__init__``)."""

    inplace = True

    def forward(self, x):
        return x.tanh_() if self.inplace else x.tanh()


def _odd_flags_model() -> nn.Module:
    shared = nn.ReLU(inplace=True)
    return nn.Sequential(OrderedDict([
        ("stem", nn.Linear(4, 4)), ("act", shared), ("block", _InplaceBlock()), ("squash", _AlwaysInplace()),
        ("again", shared), ("head", nn.Linear(4, 2)),
    ]))


@exercise.case("a container with its own inplace flag, a class-level flag and a ReLU held under two names",
               hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(_odd_flags_model(), "the model")
    got = answer(model)
    expected = ["act", "block", "block.1", "squash"]
    t.expect_type(got, list, what="switch_off_inplace(model)",
                  nudge="return the list of the names of the modules you switched off")
    left = inplace_modules(model)
    t.expect(left == [], what="in-place modules left afterwards", expected=[], got=left, nudge=(
        "every module whose inplace is True must be switched off: also a container that has children, and a "
        "module whose class sets inplace = True (getattr finds both)"))
    t.expect(got == expected, what="switch_off_inplace(model)", expected=expected, got=got, nudge=(
        "return each module once, under the name model.named_modules() gives it (a module held under two "
        "names is listed once, under its first name)"))
    alone = answer(nn.ReLU(inplace=True))
    t.expect(alone == [""], what="switch_off_inplace(nn.ReLU(inplace=True))", expected=[""], got=alone, nudge=(
        "the model itself may be in-place: model.named_modules() lists it first, under the name ''"))


# -- the wrong answers peculiar to this exercise -------------------------------------------------

def _switcher(*, picks=lambda m: getattr(m, "inplace", False) is True, switch=True, walk="named_modules",
              result=list):
    """One factory for the near-copy wrong answers: which modules it picks, whether it switches
    them off, how it walks the model, and what it returns (``result(names)``)."""
    def answer(model):
        names = []
        for name, m in getattr(model, walk)():
            if picks(m):
                if switch:
                    m.inplace = False
                names.append(name)
        return result(names)
    return answer


exercise.wrong("only looks at nn.ReLU", mentions="whatever its class")(
    _switcher(picks=lambda m: isinstance(m, nn.ReLU) and m.inplace))
exercise.wrong("returns every module with an inplace attribute", mentions="only the modules that were")(
    _switcher(picks=lambda m: hasattr(m, "inplace")))
exercise.wrong("lists them without switching them off", mentions="listing them is not enough")(
    _switcher(switch=False))


@exercise.wrong("writes inplace = False onto every module it walks", mentions="flag they never had")
def _flags_everything(model):
    names = []
    for name, m in model.named_modules():
        if getattr(m, "inplace", False) is True:
            names.append(name)
        m.inplace = False
    return names


exercise.wrong("walks model.named_children() only", mentions="named_modules() goes into")(
    _switcher(walk="named_children"))
exercise.wrong("switches them off but forgets to return the names", mentions="None (nothing was returned)")(
    _switcher(result=lambda names: None))
exercise.wrong("tests a fixed list of activation classes", mentions="not limited to the classes", hidden=True)(
    _switcher(picks=lambda m: isinstance(m, (nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.Dropout)) and m.inplace))
exercise.wrong("returns the names sorted", mentions="not sorted", hidden=True)(_switcher(result=sorted))

@exercise.wrong("looks at leaf modules only", mentions="container that has children", hidden=True)
def _leaves_only(model):
    return _switcher(picks=lambda m: getattr(m, "inplace", False) is True and not list(m.children()))(model)


@exercise.wrong("skips the model itself", mentions="the model itself may be in-place", hidden=True)
def _skips_root(model):
    names = []
    for name, m in list(model.named_modules())[1:]:
        if getattr(m, "inplace", False) is True:
            m.inplace = False
            names.append(name)
    return names


@exercise.wrong("lists a shared module under each of its names", mentions="listed once", hidden=True)
def _every_name(model):
    names = []
    for name, m in model.named_modules(remove_duplicate=False):
        if getattr(m, "inplace", False) is True or any(m is model.get_submodule(n) for n in names):
            m.inplace = False
            names.append(name)
    return names


_KEPT: list = []


@exercise.wrong("keeps the list outside the function", mentions="a fresh one per call")
def _kept_outside(model):
    for name, m in model.named_modules():
        if getattr(m, "inplace", False) is True:
            m.inplace = False
            _KEPT.append(name)
    return list(_KEPT)
