"""05_inplace_relu_pitfall, exercise 4: a full backward hook on an in-place network, with in-place
switched off for one run and every flag put back afterwards.

Half-right answers an examiner expects, by kit dimension (``kit.DIMENSIONS``):

- inplace_after: keeps in-place on (the BackwardHookFunction error); keeps it on and gives every
  in-place module a clone in a forward pre-hook (the lesson's fix 2): right for a layer that an
  in-place module follows, the BackwardHookFunction error when ``name`` is an in-place module
  itself (its pre-hooks run before its input is wrapped, so the clone is wrapped too);
- left_as_found: does not restore the flags; switches every flag back to True, also on modules
  that were not in-place; changes train/eval or requires_grad on the way;
- left_as_found: also ``model.zero_grad()`` first, ``model.train()`` afterwards, and
  ``x.requires_grad_()`` to silence torch's warning, which change the caller's model or input;
- order: switches off only the modules listed after ``name``, wrong when ``name`` is itself in-place
  and (hidden) for a model that defines its ReLU before the layer;
- raises: restores the flags after the run, not in a ``finally:`` (the run raises);
- technique: the legacy ``register_backward_hook`` instead of a full backward hook; no module
  backward hook at all (in-place off, then a tensor hook on the output: the same numbers, but
  not what the task asks for, and no ``grad_input`` for the tools that need one);
- a wrong type: returns the tuple ``grad_output``, or its last entry (a layer with two outputs);
- nested / nd (hidden): in-place LeakyReLU, Hardtanh, ELU and a home-made module in a nested
  4-D model, which an answer that switches off only ``nn.ReLU`` misses.
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from ...data import shapes
from ...inventory import list_hooks
from ...models import SmallCNN, inplace_modules, seeded
from .. import kit
from ..core import Exercise, Tester
from ._shared import Accumulated, RaisingInplace, other_classes_model, param_grad, reference_any


def grad_output_with_inplace_off(model, x, y, name):
    """grad_output[0] of a full backward hook on `name`, with in-place switched off for one run."""
    ### BEGIN SOLUTION
    was_inplace = [m for m in model.modules() if getattr(m, "inplace", False) is True]
    seen = {}
    for m in was_inplace:
        m.inplace = False
    handle = model.get_submodule(name).register_full_backward_hook(
        lambda module, grad_input, grad_output: seen.__setitem__("grad",
                                                                 grad_output[0].detach().clone()))
    try:
        logits = model(x)
        F.cross_entropy(logits, y).backward()
    finally:
        handle.remove()
        for m in was_inplace:
            m.inplace = True
    return seen["grad"]
    ### END SOLUTION


exercise = Exercise(
    "inplace_relu.grad_output_with_inplace_off", "A full backward hook on an in-place network",
    task=("write grad_output_with_inplace_off(model, x, y, name) that returns grad_output[0] of a "
          "full backward hook on layer `name` (which may be an in-place module itself) for the loss "
          "F.cross_entropy(model(x), y); switch "
          "in-place off for this one run and afterwards put every inplace flag back exactly as it "
          "was (also when the run fails); remove the hook. "
          "Run the backward with loss.backward(), as a training step would: the parameters' .grad "
          "add it up (do not zero or restore them)"),
    hints=[
        "Remember which modules are in-place before you change anything: "
        "[m for m in model.modules() if getattr(m, 'inplace', False) is True].",
        "Set their inplace to False, register the full backward hook, run forward and backward "
        "inside try:, and in finally: remove the hook and set inplace = True on the remembered "
        "modules only.",
        "Modules that were not in-place before must stay that way: do not switch everything to True.",
    ],
    solution=grad_output_with_inplace_off,
    errors={"BackwardHookFunction": (
        "a module that was still in-place wrote into a BackwardHookFunction view: a full backward hook puts "
        "one on the layer's output (and on its input, after its forward pre-hooks), and no in-place op may "
        "modify it: switch off every module whose inplace is True, whatever its class (LeakyReLU, "
        "Hardtanh, Dropout... not only nn.ReLU)")},
    equivalent_mutants={
        "copy@10: .clone() -> <dropped>": (
            "grad_output[0] is a tensor autograd makes for this backward and never writes into again while "
            "someone holds it (it checks before accumulating in place)"),
        "copy@10: .clone() -> .detach()": (
            "grad_output[0] is a tensor autograd makes for this backward and never writes into again while "
            "someone holds it (it checks before accumulating in place)"),
        "copy@10: .detach() -> <dropped>": (
            "in a backward without create_graph grad_output holds no graph: detach() changes nothing"),
        "keep-state@5: seen = {} (a fresh one per call) -> seen kept across calls": (
            "the full backward hook fires in every run the task admits (the layer's output reaches the "
            "loss), so the one entry is overwritten before it is read"),
    },
    guide="""keeping in-place on (the BackwardHookFunction error), also with the lesson's fix 2 instead
    (a forward pre-hook handing each in-place module a clone), which fails when the hooked layer is itself
    an in-place module: its pre-hooks run before its input is wrapped; not restoring the flags afterwards,
    or restoring them after the run instead of in `finally:` (a run that raises leaves them off);
    setting every flag back to `True`, also on modules that were not in place before; returning the
    tuple `grad_output`; the legacy `register_backward_hook`, or a tensor hook on the output instead
    of a full backward hook (the same numbers, no `grad_input`); `model.zero_grad()`, `model.train()` or
    `x.requires_grad_()` on the way; switching off only the modules listed after the layer (wrong
    when the layer is itself in-place). Caught at grading: the same on a model that defines its ReLU
    first, and switching off only `nn.ReLU`, on a nested model whose in-place modules are LeakyReLU, Hardtanh, ELU and a
    home-made one.""",
)


class _LegacyWatch:
    """The check's own forward pre-hook on the hooked layer: which kinds of backward hook sat on
    it while it ran (a legacy ``register_backward_hook`` is no full backward hook, a tensor hook on
    its output is no module hook at all), and whether its own ``inplace`` flag was on then.
    Removed on exit."""

    def __init__(self, layer: nn.Module):
        self.layer, self.kinds, self.inplace_seen = layer, set(), False

    def __enter__(self) -> _LegacyWatch:
        def look(module, args):
            self.kinds.update(r.kind for r in list_hooks(module, include_global=False))
            self.inplace_seen |= getattr(module, "inplace", False) is True
        self.handle = self.layer.register_forward_pre_hook(look, prepend=True)
        return self

    def __exit__(self, *exc) -> None:
        self.handle.remove()


def _expect_x_as_found(t: Tester, x: torch.Tensor) -> None:
    t.expect(not x.requires_grad, what="x.requires_grad after your answer", expected=False, got=True, nudge=(
        "leave the caller's x as it came: x.requires_grad_() changes their tensor (the warning torch gives "
        "for a full backward hook on the first layer is harmless)"))


def _check_grad_output(answer, t: Tester, *, seed: int, data_seed: int, name: str,
                       inplace: list[str], eval_mode: bool = False) -> None:
    x, y = shapes(4, seed=data_seed)
    model = SmallCNN(inplace=False, seed=seed).train(not eval_mode)
    for n in inplace:
        model.get_submodule(n).inplace = True
    t.track(model, "the SmallCNN")
    want, weight = reference_any(model, x, y, name), param_grad(model, x, y, "classifier.weight")
    mode = "eval" if eval_mode else "train"
    with _LegacyWatch(model.get_submodule(name)) as watch, \
            kit.LeftAsFound(t, model, name=f"the SmallCNN (in {mode} mode)"), \
            Accumulated(t, model.classifier.weight, weight, "classifier.weight"):
        try:
            got = answer(model, x, y, name)
        except RuntimeError as err:
            if "BackwardHookFunction" in str(err) and watch.inplace_seen:
                t.expect(False, what=f"{name!r}.inplace while the hooked layer ran", expected=False, got=True,
                         nudge=(f"{name!r} is itself an in-place module, and it was still in-place: a full "
                                "backward hook wraps its input after its forward pre-hooks run, so even a clone "
                                "made in a pre-hook is wrapped, and the module writes into that view. Switch "
                                "its inplace flag off too"))
            raise
    t.expect("backward (legacy)" not in watch.kinds, what=f"the backward hook on {name!r}",
             expected="a full backward hook", got="a legacy register_backward_hook", nudge=(
                 "register_backward_hook is the legacy kind, deprecated and wrong for a module that "
                 "runs several operations: use register_full_backward_hook"))
    t.expect("backward" in watch.kinds, what=f"the backward hook on {name!r} while it ran",
             expected="a full backward hook", got="none", nudge=(
                 "the numbers are right, but the task asks for grad_output[0] of a full backward hook on the "
                 "layer (register_full_backward_hook): that is the hook that also gives grad_input, which "
                 "tools need and a tensor hook on the output does not give"))
    _expect_x_as_found(t, x)
    t.expect_type(got, torch.Tensor, what=f"grad_output_with_inplace_off(model, x, y, {name!r})",
                  nudge="return grad_output[0], the tensor, not the tuple grad_output")
    t.expect_close(got, want, what=f"grad_output_with_inplace_off(model, x, y, {name!r})",
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


@exercise.case("SmallCNN with both ReLUs in-place, layer 'features.2': the in-place ReLU itself")
def _(answer, t: Tester) -> None:
    _check_grad_output(answer, t, seed=11, data_seed=33, name="features.2",
                       inplace=["features.2", "features.5"])


@exercise.case("SmallCNN in eval mode where only the second ReLU is in-place, layer 'features.4'")
def _(answer, t: Tester) -> None:
    _check_grad_output(answer, t, seed=10, data_seed=32, name="features.4", inplace=["features.5"], eval_mode=True)


@exercise.case("a model with an in-place ReLU whose forward raises: flags back, hook gone")
def _(answer, t: Tester) -> None:
    model = t.track(RaisingInplace(seed=16), "the model that raises")
    kit.call_expecting_kit_error(answer, model, kit.randn(2, 4, seed=16), torch.tensor([0, 1]), "body.0")
    left = inplace_modules(model)
    t.expect(left == ["body.1"], what="the model's in-place modules after the run raised", expected=["body.1"],
             got=left, nudge="the run raised, and the flags were not put back: restore them in the finally: of "
                             "the try that runs the model, so they come back whichever way the run ends")


@exercise.case("a nested 4-D model with in-place LeakyReLU, Hardtanh, ELU and a home-made "
               "module", hidden=True)
def _(answer, t: Tester) -> None:
    model = other_classes_model(seed=17)
    t.track(model, "the nested model")
    before = inplace_modules(model)
    x, y = kit.randn(2, 1, 5, 5, seed=17), torch.tensor([2, 0])
    want = reference_any(model, x, y, "features.conv1")
    with warnings.catch_warnings():  # x does not require grad: torch warns about the first layer's hook
        warnings.filterwarnings("ignore", message="Full backward hook is firing")
        got = answer(model, x, y, "features.conv1")
    _expect_x_as_found(t, x)
    t.expect_type(got, torch.Tensor, what="grad_output_with_inplace_off(model, x, y, 'features.conv1')",
                  nudge="return grad_output[0], the tensor, not the tuple grad_output")
    t.expect_close(got, want, what="grad_output_with_inplace_off(model, x, y, 'features.conv1')",
                   atol=1e-6, rtol=1e-4, nudge="return grad_output[0] as the full backward hook received it")
    left = inplace_modules(model)
    t.expect(left == before, what="the model's in-place modules afterwards", expected=before, got=left,
             nudge="put every flag back exactly as it was, whatever the module's class")


class _Split(nn.Module):
    """A layer that returns two tensors: ``(first(x), second(x))``."""

    def __init__(self) -> None:
        super().__init__()
        self.first, self.second = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.first(x), self.second(x)


class _TwoOutputs(nn.Module):
    """``head(relu_(a) * 2 + relu_(b))`` where ``(a, b) = split(x)``: the hooked layer ``split``
    has two outputs with different gradients, each followed by an in-place ReLU."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        with seeded(seed):
            self.split = _Split()
            self.act_a, self.act_b = nn.ReLU(inplace=True), nn.ReLU(inplace=True)
            self.head = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self.split(x)
        return self.head(self.act_a(a) * 2 + self.act_b(b))


class _DefinedFirst(nn.Module):
    """Defines its in-place ReLU before the layer it follows: ``head(act(lin(x)))``."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        with seeded(seed):
            self.act = nn.ReLU(inplace=True)
            self.lin = nn.Linear(4, 4)
            self.head = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.act(self.lin(x)))


@exercise.case("a model that defines its in-place ReLU before the layer it follows", hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(_DefinedFirst(seed=19), "the model")
    x, y = kit.randn(3, 4, seed=19), torch.tensor([1, 0, 2])
    want = reference_any(model, x, y, "lin")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Full backward hook is firing")
        got = answer(model, x, y, "lin")
    t.expect_type(got, torch.Tensor, what="grad_output_with_inplace_off(model, x, y, 'lin')",
                  nudge="return grad_output[0], the tensor, not the tuple grad_output")
    t.expect_close(got, want, what="grad_output_with_inplace_off(model, x, y, 'lin')", atol=1e-6, rtol=1e-4,
                   nudge="return grad_output[0] as the full backward hook received it")
    t.expect(model.act.inplace, what="model.act.inplace afterwards", expected=True, got=False,
             nudge="put every flag back exactly as it was")


@exercise.case("a layer that returns two tensors, in float64: grad_output[0] is the gradient of the first",
               hidden=True)
def _(answer, t: Tester) -> None:
    model, x = kit.in_dtype(_TwoOutputs(seed=18), kit.randn(3, 4, seed=18))
    t.track(model, "a model whose layer `split` returns two tensors")
    y = torch.tensor([0, 2, 1])
    want = reference_any(model, x, y, "split", output=0)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Full backward hook is firing")
        got = answer(model, x, y, "split")
    t.expect_type(got, torch.Tensor, what="grad_output_with_inplace_off(model, x, y, 'split')",
                  nudge="return grad_output[0], the tensor, not the tuple grad_output")
    t.expect(got.dtype == torch.float64, what="the dtype of grad_output_with_inplace_off(model, x, y, 'split')",
             expected=torch.float64, got=got.dtype, nudge="return grad_output[0] as the hook received it, dtype "
                                                          "included")
    t.expect_close(got, want, what="grad_output_with_inplace_off(model, x, y, 'split')", atol=1e-6, rtol=1e-4,
                   nudge="grad_output holds one gradient per output of the layer: return grad_output[0], the "
                         "gradient w.r.t. its first output")


# -- the wrong answers peculiar to this exercise -------------------------------------------------

def _switcher(*, picks=lambda m: getattr(m, "inplace", False) is True, restore="finally", keep=lambda g: g[0],
              register="register_full_backward_hook"):
    """One factory for the near-copy wrong answers: which modules it switches off (``picks``),
    how it restores them ("finally", "after": not in a finally block, "never", "all": every module
    with the flag to True), what it keeps of grad_output, and which kind of hook it registers."""
    def answer(model, x, y, name):
        was = [m for m in model.modules() if picks(m)]
        for m in was:
            m.inplace = False
        seen = {}
        handle = getattr(model.get_submodule(name), register)(lambda m, gin, gout: seen.__setitem__("grad", keep(gout)))
        try:
            F.cross_entropy(model(x), y).backward()
        finally:
            handle.remove()
            if restore == "finally":
                for m in was:
                    m.inplace = True
        if restore == "after":
            for m in was:
                m.inplace = True
        elif restore == "all":
            for m in model.modules():
                if hasattr(m, "inplace"):
                    m.inplace = True
        return seen["grad"]
    return answer


exercise.wrong("keeps in-place on", mentions="BackwardHookFunction view")(_switcher(picks=lambda m: False))
exercise.wrong("returns a float32 copy", mentions="dtype included", hidden=True)(
    _switcher(keep=lambda g: g[0].detach().float()))


@exercise.wrong("switches in-place off, then uses a tensor hook, no full backward hook",
                mentions="of a full backward hook on the")
def _tensor_hook_instead(model, x, y, name):
    was = [m for m in model.modules() if getattr(m, "inplace", False) is True]
    seen = {}
    for m in was:
        m.inplace = False

    def on_output(m, a, o):
        o.register_hook(lambda g: seen.__setitem__("grad", g.detach().clone()))
    handle = model.get_submodule(name).register_forward_hook(on_output)
    try:
        F.cross_entropy(model(x), y).backward()
    finally:
        handle.remove()
        for m in was:
            m.inplace = True
    return seen["grad"]


@exercise.wrong("keeps in-place on and hands every in-place module a clone in a forward pre-hook",
                mentions="even a clone made in a pre-hook")
def _clone_in_pre_hooks(model, x, y, name):
    seen, handles = {}, []
    try:
        for m in model.modules():
            if getattr(m, "inplace", False) is True:
                handles.append(m.register_forward_pre_hook(lambda mod, args: (args[0].clone(), *args[1:])))
        handles.append(model.get_submodule(name).register_full_backward_hook(
            lambda mod, gin, gout: seen.__setitem__("grad", gout[0].detach().clone())))
        F.cross_entropy(model(x), y).backward()
    finally:
        for handle in handles:
            handle.remove()
    return seen["grad"]


@exercise.wrong("calls x.requires_grad_() to silence torch's warning", mentions="leave the caller's x")
def _x_requires_grad(model, x, y, name):
    x.requires_grad_()
    return grad_output_with_inplace_off(model, x, y, name)


@exercise.wrong("calls model.zero_grad() first", mentions="do not call model.zero_grad()")
def _zero_grad_first(model, x, y, name):
    model.zero_grad()
    return grad_output_with_inplace_off(model, x, y, name)


@exercise.wrong("switches the model back to train() afterwards", mentions="as you found it")
def _forces_train(model, x, y, name):
    try:
        return grad_output_with_inplace_off(model, x, y, name)
    finally:
        model.train()


@exercise.wrong("switches off only the modules listed after `name`", mentions="Switch its inplace flag off")
def _after_layer_only(model, x, y, name):
    listed = [m for _, m in model.named_modules()]
    after = listed[listed.index(model.get_submodule(name)) + 1:]
    return _switcher(picks=lambda m: any(m is a for a in after) and getattr(m, "inplace", False) is True)(
        model, x, y, name)
exercise.wrong("does not restore the flags", mentions="restore the flags")(_switcher(restore="never"))
exercise.wrong("switches every flag back to True", mentions="exactly as it was")(_switcher(restore="all"))
exercise.wrong("restores the flags after the run, not in a finally:", mentions="the run raised")(
    _switcher(restore="after"))
exercise.wrong("returns the tuple grad_output", mentions="not the tuple")(_switcher(keep=lambda g: g))
exercise.wrong("uses the legacy register_backward_hook", mentions="legacy kind")(
    _switcher(register="register_backward_hook"))
exercise.wrong("switches off only the nn.ReLU modules", mentions="not only nn.ReLU", hidden=True)(
    _switcher(picks=lambda m: isinstance(m, nn.ReLU) and m.inplace))
exercise.wrong("returns the gradient of the layer's last output", mentions="one gradient per output",
               hidden=True)(_switcher(keep=lambda g: g[-1]))
