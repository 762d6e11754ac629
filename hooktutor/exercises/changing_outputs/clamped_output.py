"""03_changing_outputs, exercise: run a model once with one layer's output clamped, leave no hook.

Half-right answers an examiner expects, by kit dimension (``kit.DIMENSIONS``):

- raises: removes the hook after ``model(x)`` but not in ``finally:``, or never;
- inplace_after: ``clamp_`` in place, which edits the caller's ``x`` when the layer returns its
  input itself (``nn.Identity``), and breaks backward when the layer saved its output (a Sigmoid);
- technique: rebinds ``output`` without returning it; ``clamp(output, v)`` with a positional ``v``
  (a minimum); runs ``model.forward(x)``, which skips the hooks of the model itself (``layer`` may
  be the model); an arithmetic clamp with a 0/1 mask (``inf * 0`` is ``nan``);
- technique: ``F.hardtanh(output, max_val=v)`` (its ``min_val`` is -1) or ``clamp(min=-1, max=v)``:
  a minimum of -1 too, which only a layer whose values below -1 reach the result shows (nn.Identity
  before a Linear, an x with -3 in it);
- detached: runs the model under ``torch.no_grad()`` or returns ``model(x).detach()``: the result
  has no graph, so backward through it fails;
- left_as_found: switches the model to ``eval()`` and leaves it there, or calls ``model.train()``
  afterwards, which hands an eval-mode model back in train mode;
- twice: a hook that removes itself when it first fires clamps only the first of two calls;
- nested, repeat: a layer deep inside the model; the same answer twice in a row;
- a wrong type: forgets to return ``model(x)``.
"""

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
          "every value of layer's output above max_value replaced by max_value (inf included); layer "
          "may be any module of model, model itself too. The result keeps its autograd graph, so "
          "backward through it works; it leaves no hook attached, never changes x and leaves the model "
          "as it found it"),
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
    `clamp(max=v)`); `F.hardtanh(output, max_val=v)` or `clamp(min=-1, max=v)`, which also raise
    the values below -1 to -1. The check also catches running the model under `torch.no_grad()` or
    returning `model(x).detach()` (backward through the result fails), `clamp_` on a Sigmoid's
    output (backward fails), `model.forward(x)` (the model's own hooks never fire, so clamping the
    model itself does nothing), switching the model to `eval()` or back to `train()` (an eval-mode
    model must stay in eval mode), and an arithmetic clamp with a
    0/1 mask (an `inf` becomes `nan`).""",
)


def _mlp_case(answer, t: Tester, max_value: float, mode: str = "train") -> None:
    model = t.track(MLP(seed=4).train(mode == "train"), "the MLP")
    x = torch.linspace(-2, 2, 24).view(3, 8)
    hidden = model.fc1(x).clamp(max=max_value)
    expected = model.head(model.act2(model.fc2(model.act1(hidden)))).detach()
    plain = model.forward_with_intermediates(x)[0].detach()
    with kit.LeftAsFound(t, model, name=f"the MLP (in {mode} mode)"):
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


@exercise.case("an MLP in eval mode, fc1 clamped at -0.25, twice in a row")
def _(answer, t: Tester) -> None:
    _mlp_case(answer, t, -0.25, mode="eval")
    _mlp_case(answer, t, -0.25, mode="eval")


@exercise.case("a layer that returns its input itself (nn.Identity), an inf in x: x must not change")
def _(answer, t: Tester) -> None:
    with seeded(5):
        model = t.track(nn.Sequential(nn.Identity(), nn.Linear(4, 2)), "an Identity-Linear net")
    x = torch.tensor([[-3.0, 0.5, 2.0, float("inf")]])   # -3.0: below hardtanh's default min_val of -1
    before = x.clone()
    got = answer(model, x, model[0], 1.0)
    t.expect(torch.equal(x, before), what="the caller's x after clamped_output", expected=before, got=x,
             nudge=("you changed the caller's tensor: nn.Identity returns its input itself, so an "
                    "in-place clamp_ on its output edits x. Return output.clamp(max=...) instead"))
    t.expect_close(got, model[1](torch.tensor([[-3.0, 0.5, 1.0, 1.0]])).detach(),
                   what="clamped_output(model, x, model[0], 1.0)", wrong={
                       "a minimum too": (model[1](torch.tensor([[-1.0, 0.5, 1.0, 1.0]])).detach(), (
                           "you also raised the values below -1 to -1: F.hardtanh (its min_val is -1 by "
                           "default) and clamp(min=-1, max=...) set a minimum too. Values below max_value "
                           "stay as they are: write output.clamp(max=max_value)")),
                   }, nudge=(
                       "clamp the Identity's output at 1.0, inf included (inf becomes 1.0; a 0/1 mask "
                       "gives inf * 0 = nan), and let the Linear see the clamped values"))


@exercise.case("a Sigmoid's output clamped, then backward through the result")
def _(answer, t: Tester) -> None:
    with seeded(27):
        net = t.track(nn.Sequential(nn.Linear(3, 4), nn.Sigmoid(), nn.Linear(4, 2)), "a Linear-Sigmoid-Linear net")
    x = kit.randn(3, 3, seed=27)
    ref = net[2](torch.minimum(torch.sigmoid(net[0](x)), torch.tensor(0.5)))
    expected_grad = torch.autograd.grad(ref.sum(), net[0].weight)[0]
    got = answer(net, x, net[1], 0.5)
    t.expect_type(got, torch.Tensor, what="clamped_output(net, x, net[1], 0.5)", nudge="return what model(x) returns")
    t.expect(got.grad_fn is not None, what="clamped_output(net, x, net[1], 0.5)",
             expected="a tensor with its autograd graph", got="a tensor without one", nudge=(
                 "return model(x) as it is, with its graph, so the caller can run backward through it: "
                 "no torch.no_grad() around it, no .detach()"))
    try:
        got.sum().backward()
    except RuntimeError as e:
        t.expect(False, what="backward through the result", expected="the gradients",
                 got=f"{type(e).__name__}: {e}"[:120], nudge=(
                     "the Sigmoid saved its output for backward, and an in-place clamp_ changed it: "
                     "return output.clamp(max=max_value), a new tensor"))
    t.expect_close(got, ref.detach(), what="clamped_output(net, x, net[1], 0.5)",
                   nudge="clamp the Sigmoid's output at 0.5 and let the last Linear see the clamped values")
    t.expect_close(net[0].weight.grad, expected_grad, what="the first Linear's weight gradient",
                   nudge="the clamped values get no gradient, the others pass it on")


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


@exercise.case("the model runs once (a nested model in train mode)", hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(kit.Nested(seed=22), "a nested model in train mode")
    with kit.HookWitness({"encoder": model.encoder}) as seen, kit.LeftAsFound(t, model):
        answer(model, kit.randn(2, 4, seed=22), model.encoder.body[0], 0.1)
    t.expect(seen.calls["encoder"] == 1, what="how often clamped_output ran the model", expected=1,
             got=seen.calls["encoder"], nudge="run model(x) exactly once: a second run is a second forward, "
                                              "which a model with state (BatchNorm) and the caller's hooks notice")


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


@exercise.case("the whole model as the layer: its output clamped", hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(kit.Nested(seed=28), "a nested model")
    x = kit.randn(4, 4, seed=28)
    expected = model.forward(x).detach().clamp(max=0.0)
    got = answer(model, x, model, 0.0)
    t.expect_type(got, torch.Tensor, what="clamped_output(model, x, model, 0.0)", nudge="return what model(x) returns")
    t.expect_close(got, expected, what="clamped_output(model, x, model, 0.0)", nudge=(
        "the layer may be the model itself: call model(x), which runs the model's own hooks; "
        "model.forward(x) skips them"))


# -- the wrong answers peculiar to this exercise -------------------------------------------------

def _clamper(*, hook="clamp", remove="finally", run="call", eval_mode=False, train_after=False):
    """One factory for the near-copy wrong answers: what the hook does ("clamp", "clamp_": in place,
    "rebind": assigns and returns nothing, "min": clamp(output, v), "mask": output * (1 - over) +
    v * over, "hardtanh": F.hardtanh(output, max_val=v), "floor": clamp(min=-1, max=v)), how it goes
    ("finally", "with": the handle as a context manager, "after": not in a
    finally block, "never", "self": the hook removes itself when it first fires), how the model
    runs ("call", "forward": model.forward(x), "no_grad", "detach", "no_return"), whether the
    model is switched to eval() first, and whether it is switched to train() afterwards."""
    def answer(model, x, layer, max_value):
        def body(module, args, output):
            if remove == "self":
                handle.remove()
            if hook == "clamp_":
                return output.clamp_(max=max_value)
            if hook == "rebind":
                output = output.clamp(max=max_value)   # noqa: F841 - the point: a local name, not returned
                return None
            if hook == "min":
                return torch.clamp(output, max_value)
            if hook == "hardtanh":
                return torch.nn.functional.hardtanh(output, max_val=max_value)
            if hook == "floor":
                return output.clamp(min=-1, max=max_value)
            if hook == "mask":
                over = (output > max_value).to(output.dtype)
                return output * (1 - over) + max_value * over
            return output.clamp(max=max_value)

        def forward():
            if run == "forward":
                return model.forward(x)
            if run == "no_grad":
                with torch.no_grad():
                    return model(x)
            out = model(x)
            return out.detach() if run == "detach" else None if run == "no_return" else out
        if eval_mode:
            model.eval()
        handle = layer.register_forward_hook(body)
        if remove == "with":
            with handle:
                return forward()
        if remove == "finally":
            try:
                return forward()
            finally:
                handle.remove()
                if train_after:
                    model.train()
        out = forward()
        if remove == "after":
            handle.remove()
        return out
    return answer


exercise.wrong("forgets to return model(x)", mentions="None (nothing was returned)")(
    _clamper(remove="with", run="no_return"))
exercise.wrong("removes the hook, but not in a finally block", mentions="`finally:` block")(_clamper(remove="after"))
exercise.wrong("a hook that removes itself when it first fires", mentions="both outputs must be clamped",
               hidden=True)(_clamper(remove="self"))
exercise.wrong("forgets to remove the hook", mentions="left a hook attached")(_clamper(remove="never"))
exercise.wrong("clamps in place", mentions="caller's tensor")(_clamper(hook="clamp_", remove="with"))
exercise.wrong("rebinds the output without returning it", mentions="returned None")(
    _clamper(hook="rebind", remove="with"))
exercise.wrong("writes clamp(output, max_value), a minimum", mentions="clamp(max=max_value)")(
    _clamper(hook="min", remove="with"))
exercise.wrong("runs the model under torch.no_grad()", mentions="no torch.no_grad()")(_clamper(run="no_grad"))
exercise.wrong("returns model(x).detach()", mentions="no .detach()")(_clamper(run="detach"))
exercise.wrong("runs model.forward(x)", mentions="skips them", hidden=True)(_clamper(run="forward"))
exercise.wrong("switches the model to eval()", mentions="as you found it")(_clamper(eval_mode=True))
exercise.wrong("calls model.train() afterwards", mentions="as you found it")(_clamper(train_after=True))
exercise.wrong("clamps with a 0/1 mask", mentions="nan")(_clamper(hook="mask"))
exercise.wrong("clamps with F.hardtanh(output, max_val=max_value) (min_val is -1)",
               mentions="raised the values below -1")(_clamper(hook="hardtanh"))
exercise.wrong("clamps with output.clamp(min=-1, max=max_value)",
               mentions="raised the values below -1")(_clamper(hook="floor"))


@exercise.wrong("runs the model twice (a plain run first)", mentions="exactly once", hidden=True)
def _runs_twice(model, x, layer, max_value):
    model(x)
    return _clamper()(model, x, layer, max_value)
