"""10_transformer_hooks, exercise: add a steering vector to a module's output, tuple or tensor.

Half-right answers an examiner expects, by kit dimension (``kit.DIMENSIONS``):

- technique: ``output + vector`` on ``nn.MultiheadAttention``'s tuple (an error); only
  ``output[0] + vector`` returned where the module returns a tuple (the layer takes ``[0]`` of
  it: the first sequence of the batch, silently broadcast); the vector added to the input, in a
  forward pre-hook; the vector added to every element of the tuple, the attention weights too;
- nested: a module two levels down (``blocks.1.self_attn``);
- alias: ``output += vector`` in place: when the output is a tensor the model uses again (a
  Dropout in eval mode hands back its input itself, which a skip connection adds later), the
  skip branch is steered too;
- dtype: the alias model and its vector in float64;
- raises: removes the hook without ``finally:``;
- returns a list where the module returns a tuple (the task asks for a tuple: code after the
  hook tests ``isinstance(output, tuple)``);
- left_as_found: switches the model to ``eval()`` and leaves it so.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from ...data import first_token
from ...models import seeded
from .. import kit
from ..core import Exercise, Tester, learners_hooks
from ._shared import _DropoutSkip, _hook_run, _tiny, _with_hook


def steer(model, tokens, module, vector):
    """The logits of model(tokens) with `vector` added to module's output."""
    ### BEGIN SOLUTION
    def add(mod, args, output):
        if isinstance(output, tuple):  # nn.MultiheadAttention: (attn_output, attn_weights)
            return (output[0] + vector, *output[1:])
        return output + vector

    handle = module.register_forward_hook(add)
    try:
        return model(tokens)
    finally:
        handle.remove()
    ### END SOLUTION


_TUPLE = ("this module returns a tuple (nn.MultiheadAttention returns (attn_output, attn_weights), and the "
          "weights are None when need_weights=False): add the vector to output[0] and return a tuple, "
          "(output[0] + vector, *output[1:])")


exercise = Exercise(
    "transformer_hooks.steer", "Add a steering vector",
    task=("write steer(model, tokens, module, vector) that runs model(tokens) with a forward hook on `module` "
          "that returns its output plus `vector` (shape (width,), added along the last dimension, whatever the other "
          "dimensions are: at every position), as a new tensor (never edit the output in place: "
          "it may be a tensor the model uses again); when the module returns a tuple (as "
          "nn.MultiheadAttention does), add it to the first element and return a tuple with the rest unchanged. "
          "Remove the hook (also when the model raises) and return the logits"),
    hints=[
        "A forward hook that returns a value replaces the module's output: return output + vector.",
        "`vector` has the shape (width,): broadcasting adds it at every position of an (N, L, width) output.",
        "blocks.0.self_attn returns (attn_output, attn_weights) and the layer reads element [0] of what you "
        "return: return (output[0] + vector, *output[1:]), a tuple again.",
    ],
    solution=steer,
    answer_name="steer",
    errors={"can only concatenate tuple": _TUPLE, "'NoneType' and 'Tensor'": _TUPLE},
    guide="""`output + vector` on `nn.MultiheadAttention`'s tuple (an error); returning only `output[0] +
    vector` where the module returns a tuple (the layer takes `[0]` of it: the first
    sequence of the batch, silently broadcast); adding the vector to the input with a
    pre-hook; the hook removed without `finally:`; adding it to every element of the tuple,
    the attention weights included; `output += vector` in place (a Dropout in eval mode
    hands back its input itself, so a skip connection that uses it again is steered too); a
    list where the module returns a tuple; `(output[0] + vector,)`, which drops the
    attention weights the caller asked for; switching the model to `eval()` and leaving it
    so.""",
)


def _steer_case(answer: Callable, t: Tester, seed: int, name: str, scale: float) -> None:
    model = _tiny(seed)
    tokens, _ = first_token(6, seed=seed)
    _steer_check(answer, t, model, tokens, name, kit.randn(32, seed=seed, scale=scale))


def _steer_check(answer: Callable, t: Tester, model: nn.Module, tokens: torch.Tensor, name: str,
                 vector: torch.Tensor, *, alias: bool = False) -> None:
    """``alias``: the module's output is a tensor the model uses again (an in-place edit shows)."""
    module = model.get_submodule(name)

    def add(mod, args, out):
        return (out[0] + vector, *out[1:]) if isinstance(out, tuple) else out + vector

    want = _with_hook(model, tokens, module, add)
    mistakes = {
        "before": (_with_hook_pre(model, tokens, module, vector), (
            "the vector was added to the module's input: add it to the output, in a forward hook (not a pre-hook)")),
        "none": (model(tokens).detach(), "the output did not change: return output + vector from the hook"),
    }
    if name.endswith("self_attn"):
        mistakes["tensor"] = (_with_hook(model, tokens, module, lambda m, a, o: o[0] + vector), (
            "you returned a tensor where the module returns a tuple: the layer then took [0] of your tensor, "
            "the first sequence of the batch. " + _TUPLE))

    def in_place(mod, args, out):  # the mistake of adding in place
        out += vector
        return out

    if alias:
        mistakes["in place"] = (_with_hook(model, tokens, module, in_place), (
            f"your hook added the vector to {name}'s output in place, and that tensor is used again: this Dropout "
            "(eval mode) hands back its input itself, which the skip connection adds later, so the skip branch was "
            "steered too. Return a new tensor: output + vector"))
    t.track(model)
    with kit.HookWitness({name: module}) as witness:
        got = answer(model, tokens, module, vector.clone())
    t.expect_type(got, torch.Tensor, what=f"steer(model, tokens, {name}, vector)", nudge="return the logits")
    # same operations as the reference; 1e-5 is far below what a misplaced vector changes (0.1 and more)
    t.expect_close(got, want, what=f"the logits, steered at {name}", wrong=mistakes,
                   nudge=f"add the vector to {name}'s output at every position, in a forward hook")
    t.expect(witness.fired(name, "forward") >= 1, what=f"a forward hook on {name} while the model ran",
             expected="one of yours", got="none", nudge="add the vector in a forward hook on the module")


def _with_hook_pre(model, tokens, module, vector):
    def pre(mod, args):
        return (args[0] + vector, *args[1:])
    with module.register_forward_pre_hook(pre):
        return model(tokens).detach()


@exercise.case("a TinyTransformer steered at blocks.0 (a tensor output)")
def _(answer, t: Tester) -> None:
    _steer_case(answer, t, seed=20, name="blocks.0", scale=1.0)


@exercise.case("steered at blocks.1.self_attn, whose output is a tuple (attn_output, None)")
def _(answer, t: Tester) -> None:
    _steer_case(answer, t, seed=21, name="blocks.1.self_attn", scale=1.0)


@exercise.case("a model that raises halfway: the hook must go")
def _(answer, t: Tester) -> None:
    model = t.track(kit.Raising(seed=22), "a model that raises halfway (after fc1)")
    kit.call_expecting_kit_error(answer, model, torch.zeros(2, 4), model.fc1, torch.ones(4))
    left = [r.path for r in learners_hooks(model)]
    t.expect(not left, what="hooks left on the model after it raised", expected="none", got=left, nudge=(
        "model(tokens) raised, and your hook stayed attached: remove the handle in the `finally:` of a try: "
        "around model(tokens)"))


@exercise.case("a Dropout (eval mode) whose output is its input itself, used again by a skip connection; "
               "float64", hidden=True)
def _(answer, t: Tester) -> None:
    model, tokens, vector = kit.in_dtype(_DropoutSkip(seed=25), kit.randn(2, 5, 4, seed=25), kit.randn(4, seed=26))
    _steer_check(answer, t, model, tokens, "drop", vector, alias=True)


class _AttentionReader(nn.Module):
    """Self-attention asked for its weights (``need_weights=True``): the output is
    ``attn_output + attn_weights.sum()``, so a vector added to the weights shows. Width 4, 4 tokens.
    ``returned``: the type and length of what the call of ``attn`` gave back (after every hook); a
    result without the weights counts them as zero."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        with seeded(seed):
            self.attn = nn.MultiheadAttention(4, 2, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result = self.attn(x, x, x, need_weights=True)
        self.returned = (type(result), len(result) if isinstance(result, (tuple, list)) else None)
        if self.returned[1] == 2:
            out, weights = result
            return out + weights.sum(dim=-1, keepdim=True)
        return result[0] if self.returned[1] else result


@exercise.case("an attention layer asked for its weights (need_weights=True): only attn_output is steered",
            hidden=True)
def _(answer, t: Tester) -> None:
    model = _AttentionReader(seed=23).eval()
    x = kit.randn(3, 4, 4, seed=23)
    vector = kit.randn(4, seed=24)
    want = _with_hook(model, x, model.attn, lambda m, a, o: (o[0] + vector, *o[1:]))
    t.track(model)
    got = answer(model, x, model.attn, vector.clone())
    t.expect_type(got, torch.Tensor, what="steer(model, x, model.attn, vector)", nudge="return the output")
    kind, length = model.returned
    t.expect(kind is tuple, what="what the steered attention call returned", expected="a tuple",
             got=f"a {kind.__name__}", nudge=(
                 "return a tuple where the module returns one, (output[0] + vector, *output[1:]): code that calls "
                 "the module, or another hook after yours, tests isinstance(output, tuple)"))
    t.expect(length == 2, what="the length of the tuple the steered attention call returned",
             expected="2 (attn_output, attn_weights)", got=length, nudge=(
                 "keep the rest of the tuple unchanged, (output[0] + vector, *output[1:]): the caller asked for "
                 "the attention weights and reads them from output[1]"))
    t.expect_close(got, want, what="the output, steered at attn", nudge=(
        "add the vector to attn_output, output[0], only: output[1] holds the attention weights, which are not "
        "an activation of width `width`"))


@exercise.case("a nested model in train mode, steered at encoder.body.0 and left as found", hidden=True)
def _(answer, t: Tester) -> None:
    model = kit.Nested(seed=27).train()
    x, vector = kit.randn(3, 4, seed=27), kit.randn(6, seed=28)
    want = _with_hook(model, x, model.encoder.body[0], lambda m, a, o: o + vector)
    t.track(model)
    with kit.LeftAsFound(t, model):
        got = answer(model, x, model.encoder.body[0], vector.clone())
    t.expect_type(got, torch.Tensor, what="steer(nested, x, encoder.body[0], vector)", nudge="return the output")
    t.expect_close(got, want, what="the output, steered at encoder.body.0",
                   nudge="add the vector to the output of the module you were given")


@exercise.wrong("adds the vector to a tuple output as if it were a tensor", mentions="returns a tuple")
def _steer_plain(model, tokens, module, vector):
    return _hook_run(model, tokens, module, lambda m, a, o: o + vector)


@exercise.wrong("returns only output[0] + vector for a tuple output", mentions="you returned a tensor")
def _steer_element(model, tokens, module, vector):
    return _hook_run(model, tokens, module, lambda m, a, o: (o[0] if isinstance(o, tuple) else o) + vector)


@exercise.wrong("adds the vector to the input, in a forward pre-hook", mentions="added to the module's input")
def _steer_pre(model, tokens, module, vector):
    handle = module.register_forward_pre_hook(lambda m, args: (args[0] + vector, *args[1:]))
    try:
        return model(tokens)
    finally:
        handle.remove()


@exercise.wrong("removes the hook after the call, not in finally:", mentions="finally:")
def _steer_no_finally(model, tokens, module, vector):
    def add(mod, args, out):
        return (out[0] + vector, *out[1:]) if isinstance(out, tuple) else out + vector
    handle = module.register_forward_hook(add)
    logits = model(tokens)
    handle.remove()
    return logits


@exercise.wrong("adds the vector to every tensor in the tuple, the attention weights too", mentions="output[0], only",
             hidden=True)
def _steer_every_element(model, tokens, module, vector):
    def add(mod, args, out):
        if isinstance(out, tuple):
            return tuple(o + vector if isinstance(o, torch.Tensor) else o for o in out)
        return out + vector
    return _hook_run(model, tokens, module, add)


@exercise.wrong("adds the vector in place (output += vector)", mentions="in place", hidden=True)
def _steer_in_place(model, tokens, module, vector):
    def add(mod, args, out):
        if isinstance(out, tuple):
            out[0].add_(vector)
            return out
        out += vector
        return out
    return _hook_run(model, tokens, module, add)


@exercise.wrong("returns a list where the module returns a tuple", mentions="return a tuple where", hidden=True)
def _steer_list(model, tokens, module, vector):
    def add(mod, args, out):
        return [out[0] + vector, *out[1:]] if isinstance(out, tuple) else out + vector
    return _hook_run(model, tokens, module, add)


@exercise.wrong("switches the model to eval() and leaves it so", mentions="as you found it", hidden=True)
def _steer_eval_left(model, tokens, module, vector):
    model.eval()
    def add(mod, args, out):
        return (out[0] + vector, *out[1:]) if isinstance(out, tuple) else out + vector
    return _hook_run(model, tokens, module, add)


@exercise.wrong("returns (output[0] + vector,) and drops the rest of the tuple", mentions="keep the rest of the tuple",
                hidden=True)
def _steer_drops_rest(model, tokens, module, vector):
    return _hook_run(model, tokens, module, lambda m, a, o: (o[0] + vector,) if isinstance(o, tuple) else o + vector)
