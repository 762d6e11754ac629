"""03_changing_outputs, exercise: changing_outputs.clamped_output."""

from __future__ import annotations

import torch
from torch import nn

from ...models import MLP, seeded
from .. import kit
from ..core import Exercise, Tester
from ._shared import _REBIND


def clamped_output(model, x, layer, max_value):
    # Return model(x) with layer's output clamped at max_value; leave no hook behind.
    ### BEGIN SOLUTION
    handle = layer.register_forward_hook(lambda module, args, output: output.clamp(max=max_value))
    try:
        return model(x)
    finally:
        handle.remove()
    ### END SOLUTION


exercise = Exercise(
    "changing_outputs.clamped_output", "Run a model with one layer clamped",
    task=("write clamped_output(model, x, layer, max_value) that returns model(x) computed with "
          "every value of layer's output above max_value replaced by max_value; it leaves no hook "
          "attached and never changes x"),
    hints=[
        "A forward hook that returns output.clamp(max=max_value) replaces the layer's output.",
        "Keep the handle of register_forward_hook, run model(x) in a try: block and call "
        "handle.remove() in its finally: block.",
        "Use clamp(max=...): clamp(t, v) with a positional v sets a minimum. And do not use "
        "clamp_ (in place): some layers (nn.Identity, Dropout in eval mode) return their input "
        "itself, so you would be editing the caller's x.",
    ],
    solution=clamped_output,
    guide="""leaving the hook attached; `clamp_` in place, which edits the caller's `x` when the layer
    returns its input itself (`nn.Identity`, `Dropout` in eval mode); rebinding without
    returning; `clamp(output, v)` with a positional `v`, which sets a *minimum* (write
    `clamp(max=v)`).""",
)


def _mlp_case(answer, t: Tester, max_value: float) -> None:
    model = t.track(MLP(seed=4), "the MLP")
    x = torch.linspace(-2, 2, 24).view(3, 8)
    hidden = model.fc1(x).clamp(max=max_value)
    expected = model.head(model.act2(model.fc2(model.act1(hidden)))).detach()
    plain = model.forward_with_intermediates(x)[0].detach()
    got = answer(model, x, model.fc1, max_value)
    t.expect_type(got, torch.Tensor, what=f"clamped_output(model, x, model.fc1, {max_value})",
                  nudge="return what model(x) returns (return model(x) inside the try: block)")
    t.expect_close(got, expected, what=f"clamped_output(model, x, model.fc1, {max_value})",
                   wrong={
                       "unchanged": (plain, _REBIND + " (the output is exactly the unclamped one)"),
                       "minimum": (model.head(model.act2(model.fc2(model.act1(
                           model.fc1(x).clamp(min=max_value))))).detach(),
                           "you set a minimum: clamp(t, v) with a positional v means min=v. "
                           "Write clamp(max=max_value)"),
                   },
                   nudge="values of fc1's output above max_value become max_value; smaller ones stay")


@exercise.case("an MLP, fc1 clamped at 0.5")
def _(answer, t: Tester) -> None:
    _mlp_case(answer, t, 0.5)


@exercise.case("an MLP, fc1 clamped at -0.25, twice in a row")
def _(answer, t: Tester) -> None:
    _mlp_case(answer, t, -0.25)
    _mlp_case(answer, t, -0.25)


@exercise.case("a layer that returns its input itself (nn.Identity): x must not change")
def _(answer, t: Tester) -> None:
    with seeded(5):
        model = t.track(nn.Sequential(nn.Identity(), nn.Linear(4, 2)), "an Identity-Linear net")
    x = torch.tensor([[-1.0, 0.5, 2.0, 3.0]])
    before = x.clone()
    got = answer(model, x, model[0], 1.0)
    t.expect(torch.equal(x, before), what="the caller's x after clamped_output", expected=before, got=x,
             nudge=("you changed the caller's tensor: nn.Identity returns its input itself, so an "
                    "in-place clamp_ on its output edits x. Return output.clamp(max=...) instead"))
    t.expect_close(got, model[1](before.clamp(max=1.0)).detach(), what="clamped_output(model, x, model[0], 1.0)",
                   nudge="clamp the Identity's output at 1.0 and let the Linear see the clamped values")


@exercise.case("a layer deep inside a nested model (encoder.body.0)")
def _(answer, t: Tester) -> None:
    model = t.track(kit.Nested(seed=19), "a nested model")
    x = kit.randn(3, 4, seed=19)
    inner = model.encoder.body[0]
    h = inner.forward(x).clamp(max=0.1)
    for layer in list(model.encoder.body)[1:]:
        h = layer.forward(h)
    expected = model.head.forward(model.encoder.act.forward(h)).detach()
    got = answer(model, x, inner, 0.1)
    t.expect_type(got, torch.Tensor, what="clamped_output(model, x, model.encoder.body[0], 0.1)",
                  nudge="return what model(x) returns")
    t.expect_close(got, expected, what="clamped_output(model, x, model.encoder.body[0], 0.1)",
                   nudge="hook the layer you were given, wherever it sits, and return the model's output")


@exercise.case("a model that raises halfway through its forward: the hook must still go")
def _(answer, t: Tester) -> None:
    kit.expect_clean_after_raise(t, answer, 0.0, seed=20)


@exercise.case("a layer that forward() calls twice: both calls are clamped", hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(kit.Twice(seed=21), "a model whose forward calls `block` twice")
    x = kit.randn(2, 4, seed=21)
    h = model.block.forward(torch.tanh(model.block.forward(x).clamp(max=0.0))).clamp(max=0.0)
    expected = model.out.forward(h).detach()
    got = answer(model, x, model.block, 0.0)
    t.expect_type(got, torch.Tensor, what="clamped_output(model, x, model.block, 0.0)",
                  nudge="return what model(x) returns")
    t.expect_close(got, expected, what="clamped_output(model, x, model.block, 0.0)",
                   nudge="`block` runs twice in one forward and both outputs must be clamped: keep the "
                         "hook attached for the whole model(x) and remove it afterwards, in finally:")


@exercise.wrong("forgets to return model(x)", mentions="None (nothing was returned)")
def _no_return(model, x, layer, max_value):
    with layer.register_forward_hook(lambda m, a, o: o.clamp(max=max_value)):
        model(x)


@exercise.wrong("removes the hook, but not in a finally block", mentions="`finally:` block")
def _clamp_no_finally(model, x, layer, max_value):
    handle = layer.register_forward_hook(lambda m, a, o: o.clamp(max=max_value))
    out = model(x)
    handle.remove()
    return out


@exercise.wrong("a hook that removes itself when it first fires", mentions="both outputs must be clamped",
                      hidden=True)
def _one_shot(model, x, layer, max_value):
    def hook(module, args, output):
        handle.remove()
        return output.clamp(max=max_value)
    handle = layer.register_forward_hook(hook)
    return model(x)


@exercise.wrong("forgets to remove the hook", mentions="left a hook attached")
def _leaky(model, x, layer, max_value):
    layer.register_forward_hook(lambda m, a, o: o.clamp(max=max_value))
    return model(x)


@exercise.wrong("clamps in place", mentions="caller's tensor")
def _clamp_in_place(model, x, layer, max_value):
    with layer.register_forward_hook(lambda m, a, o: o.clamp_(max=max_value)):
        return model(x)


@exercise.wrong("rebinds the output without returning it", mentions="returned None")
def _clamp_rebind(model, x, layer, max_value):
    def hook(module, args, output):
        output = output.clamp(max=max_value)
    with layer.register_forward_hook(hook):
        return model(x)


@exercise.wrong("writes clamp(output, max_value), a minimum", mentions="clamp(max=max_value)")
def _clamp_min(model, x, layer, max_value):
    with layer.register_forward_hook(lambda m, a, o: torch.clamp(o, max_value)):
        return model(x)
