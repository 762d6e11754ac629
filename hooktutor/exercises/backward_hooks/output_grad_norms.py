"""04_backward_hooks, exercise: the gradient norm of every Linear's output, read in full backward hooks.

Half-right answers an examiner expects, by kit dimension (``kit.DIMENSIONS``):

- technique: reads ``grad_input[0]`` (the gradient for the layer's input, ``None`` for a first
  layer whose input does not require grad); reads the numbers from tensor hooks (or
  ``retain_grad``) instead of full backward hooks; uses the legacy ``register_backward_hook``,
  which gives the same ``grad_output`` on a ``Linear`` but is the hook the lesson warns against;
- nested: walks ``model.named_children()``, which misses the Linears inside submodules;
- nd: assumes a 2-D ``(N, features)`` input (the Linears here also see ``(N, T, features)``);
- repeat: the dict lives outside the function, so a second call mixes in the first;
- raises: removes the hooks after ``backward()``, not in ``finally:``, or never;
- dtype: the model and its input in float64 (an answer that builds float32 tensors of its own);
- left_as_found: zeroes the model's gradients before or after the task's backward (the model
  may be halfway through a training step: that backward adds to ``.grad``); makes the caller's
  ``x`` require grad to silence the warning about inputs that do not;
- a subclass of ``nn.Linear`` skipped (``type(m) is nn.Linear``);
- late binding: one name for every hook (the loop variable read when the hook fires);
- a wrong type: forgets to return the dict; stores ``grad_output[0].norm()``, a 0-dim tensor, where
  the task asks for a float.

A right alternative registered with ``exercise.right``: full backward *pre*-hooks, which receive
``grad_output`` too (the task reads nothing else).
"""

from __future__ import annotations

from torch import nn

from ...data import blobs
from ...models import MLP
from .. import kit
from ..core import Exercise, Tester
from ._shared import (
    FullHookWitness,
    _grads,
    _halfway_through_a_step,
    _linear_output_norms,
    _linears,
    _quiet,
    _sigmoid_stack,
    _what_backward_adds,
    _with_sublinear,
    expect_full_hooks,
    expect_input_as_found,
    expect_one_backward_added,
)


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


exercise = Exercise(
    "backward_hooks.output_grad_norms", "Gradient norm per layer",
    task=("write output_grad_norms(model, x) that puts a full backward hook on every nn.Linear "
          "of `model` (a full backward pre-hook, which also receives grad_output, will do too; each "
          "Linear runs once in the forward, and no in-place op follows it), runs "
          "model(x).sum().backward() and returns a "
          "dict: the Linear's name -> the norm (a float) of the gradient with respect to that layer's "
          "output. Every hook must be removed afterwards, also when the model raises. The backward is that "
          "of a training step: the parameters' .grad add it up (do not zero or restore them), and x is "
          "left as given (it might not require grad)"),
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
    errors={
        "'NoneType' object has no attribute": (
            "grad_input[0] is None for the first layer when x does not require grad. The gradient "
            "with respect to a layer's output is grad_output[0], which is always there."),
        "Cannot use both regular backward hooks and full backward hooks": (
            "a legacy register_backward_hook was attached to this module before; use only "
            "register_full_backward_hook."),
    },
    equivalent_mutants={
        "number@8: 0 -> -1": "a Linear has one output, so grad_output has one entry: grad_output[-1] is grad_output[0]",
    },
    guide="""reading `grad_input[0]` instead of `grad_output[0]` (the gradient with respect to the
    layer's output); `grad_input` is `None` for the first layer when the input does not require grad;
    leaving hooks attached, or removing them outside a `finally:`; one name for every hook (late
    binding in a loop, again); walking `named_children()`, which misses nested Linears; testing
    `type(m) is nn.Linear`, which misses subclasses; zeroing the model's gradients, or making `x`
    require grad to silence the warning (the caller's objects are left as found); the legacy
    `register_backward_hook`, which gives the same numbers on a `Linear` and is caught by the kind of
    hook the check sees; storing `grad_output[0].norm()`, a 0-dim tensor, where the task asks for a
    float (`.item()`).""",
)


def _check_norms(answer, t: Tester, model: nn.Module, x, what: str) -> None:
    expected = _linear_output_norms(model, x)
    with _quiet():
        got = answer(model, x)
    t.expect_type(got, dict, what=what, nudge="return the dict name -> norm that your hooks filled")
    names = sorted(str(k) for k in got)
    missing = [n for n in expected if n not in got]
    nested = missing and all("." in n for n in missing) and set(got) <= set(expected)
    subclassed = missing and all(type(model.get_submodule(n)) is not nn.Linear for n in missing)
    t.expect(names == sorted(expected), what=f"the names in {what}", expected=sorted(expected), got=names,
             nudge=("the Linears inside submodules are missing: model.named_children() stops at the first "
                    "level, model.named_modules() goes into every submodule" if nested else
                    "a subclass of nn.Linear is a Linear too (a user-defined one, a LoRA-style layer): test "
                    "isinstance(module, nn.Linear), not type(module) is nn.Linear" if subclassed else
                    "one entry per nn.Linear, keyed by its name from model.named_modules()"))
    for name, value in expected.items():
        g = got[name]
        t.expect_type(g, float, what=f"{what}[{name!r}]", nudge=(
            "store each norm as a Python float, grad_output[0].norm().item(): a 0-dim tensor is not a "
            "float (it keeps its tensor type, its device and its dtype)"))
        ok = abs(g - value) <= 1e-4 * abs(value) + 1e-12
        t.expect(ok, what=f"{what}[{name!r}]", expected=round(value, 6) if value > 1e-4 else value,
                 got=g, nudge="store grad_output[0].norm().item(): grad_output[0] is the gradient "
                              "with respect to the layer's output (grad_input is about its input)")


@exercise.case("an MLP (fc1, fc2, head) whose input does not require grad")
def _(answer, t: Tester) -> None:
    model = t.track(MLP(seed=1), "the MLP")
    x, _ = blobs(16, seed=1)
    _check_norms(answer, t, model, x, "output_grad_norms(mlp, x)")
    expect_input_as_found(t, x, "output_grad_norms(mlp, x)")


@exercise.case("a 6-layer sigmoid stack in float64, where the norms shrink towards the input")
def _(answer, t: Tester) -> None:
    model, x = kit.in_dtype(_sigmoid_stack(6, seed=4), blobs(12, seed=4)[0])
    t.track(model, "the float64 sigmoid stack")
    _check_norms(answer, t, model, x, "output_grad_norms(stack, x)")


@exercise.case("the same model, halfway through a training step, measured three times in a row")
def _(answer, t: Tester) -> None:
    model = t.track(MLP(seed=5), "the MLP")
    x, _ = blobs(8, seed=5)
    _halfway_through_a_step(model, blobs(4, seed=50)[0])
    before, added = _grads(model), _what_backward_adds(model, x)
    with _quiet():
        first = answer(model, x)
    _check_norms(answer, t, model, x, "the second output_grad_norms(mlp, x)")
    with _quiet():
        third = answer(model, x)
    t.expect(first == third, what="two calls on the same model", expected=first, got=third,
             nudge="start every call with a new dict and leave no hook behind")
    expect_one_backward_added(t, model, before, added, times=3)


@exercise.case("a model whose fc2 is a subclass of nn.Linear")
def _(answer, t: Tester) -> None:
    model = t.track(_with_sublinear(MLP(seed=6), "fc2"), "the MLP")
    _check_norms(answer, t, model, blobs(8, seed=6)[0], "output_grad_norms(mlp, x)")


@exercise.case("a nested model (Linears inside a submodule) on a 3-D input (N, T, features)")
def _(answer, t: Tester) -> None:
    model = t.track(kit.Nested(seed=3), "the nested model")
    x = kit.randn(2, 3, 4, seed=3)
    with FullHookWitness(_linears(model)) as witness:
        _check_norms(answer, t, model, x, "output_grad_norms(nested, x)")
    expect_full_hooks(t, witness, pre_hooks_too=True)


@exercise.case("a model that raises halfway through its forward: no hook may stay", hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(kit.Raising(seed=4), "the model that raises")
    with _quiet():
        kit.call_expecting_kit_error(answer, model, kit.randn(3, 4, seed=4))
    # the leak check after this case reports a hook that was not removed in a finally:


# -- the wrong answers peculiar to this exercise -------------------------------------------------

def _norms(*, read="output", walk="modules", bind="early", register="full", remove="finally",
           select="isinstance", prepare=None, convert=True):
    """One factory for the near-copy wrong answers: which gradient is read ("output": grad_output,
    "input": grad_input), which modules are walked ("modules", "children"), whether each hook
    gets its own name ("early") or reads the loop variable when it fires ("late"), which hook is
    registered ("full", "legacy"), how the hooks are removed ("finally", "after", "never"), how a
    Linear is recognised ("isinstance", "type": type(m) is nn.Linear) and what is done to the model
    or x first or last ("zero_grad": before, "zero_after": after, "requires_grad": x), and whether the
    norm is converted to a float (``convert``: ``.item()``) or kept as a 0-dim tensor."""
    def answer(model, x):
        norms, handles = {}, []
        if prepare == "zero_grad":
            model.zero_grad()
        elif prepare == "requires_grad":
            x.requires_grad_()

        def record(name, grad_input, grad_output):
            norm = (grad_output if read == "output" else grad_input)[0].norm()
            norms[name] = norm.item() if convert else norm

        items = model.named_modules() if walk == "modules" else model.named_children()
        for name, module in items:
            if isinstance(module, nn.Linear) if select == "isinstance" else type(module) is nn.Linear:
                hook = ((lambda m, gi, go, name=name: record(name, gi, go)) if bind == "early"
                        else (lambda m, gi, go: record(name, gi, go)))
                register_hook = (module.register_full_backward_hook if register == "full"
                                 else module.register_backward_hook)
                handles.append(register_hook(hook))
        if remove == "finally":
            try:
                model(x).sum().backward()
            finally:
                for h in handles:
                    h.remove()
        else:
            model(x).sum().backward()
            if remove == "after":
                for h in handles:
                    h.remove()
        if prepare == "zero_after":
            model.zero_grad(set_to_none=True)
        return norms
    return answer


exercise.wrong("reads grad_input instead of grad_output", mentions="grad_output[0]")(_norms(read="input"))
exercise.wrong("forgets to remove the hooks", mentions="still attached")(_norms(remove="never"))
exercise.wrong("uses one name for every hook (late binding in a loop)", mentions="one entry per")(
    _norms(bind="late"))
exercise.wrong("walks model.named_children(): misses nested Linears", mentions="named_modules()")(
    _norms(walk="children"))
exercise.wrong("uses the legacy register_backward_hook", mentions="legacy")(_norms(register="legacy"))
exercise.wrong("tests type(m) is nn.Linear: misses a subclass", mentions="isinstance(module, nn.Linear)")(
    _norms(select="type"))
exercise.wrong("zeroes the model's gradients first", mentions="do not zero the gradients")(_norms(prepare="zero_grad"))
exercise.wrong("throws the gradients away afterwards: zero_grad(set_to_none=True)",
               mentions="do not zero the gradients")(_norms(prepare="zero_after"))
exercise.wrong("makes the caller's x require grad", mentions="leave the caller's input")(
    _norms(prepare="requires_grad"))
exercise.wrong("removes the hooks after backward, not in a finally:", mentions="still attached", hidden=True)(
    _norms(remove="after"))


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


exercise.wrong("stores 0-dim tensors, not floats: grad_output[0].norm() without .item()",
               mentions="Python float")(_norms(convert=False))


@exercise.wrong("forgets to return the dict", mentions="None (nothing was returned)")
def _returns_nothing(model, x):
    output_grad_norms(model, x)


@exercise.right("reads grad_output[0] in full backward pre-hooks (they receive grad_output too)")
def _pre_hooks(model, x):
    norms, handles = {}, []
    try:
        for name, module in model.named_modules():
            if isinstance(module, nn.Linear):
                handles.append(module.register_full_backward_pre_hook(
                    lambda m, grad_output, name=name: norms.__setitem__(name, grad_output[0].norm().item())))
        model(x).sum().backward()
    finally:
        for handle in handles:
            handle.remove()
    return norms
