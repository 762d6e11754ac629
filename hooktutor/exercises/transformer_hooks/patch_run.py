"""10_transformer_hooks, exercise: activation patching, one position of one module's output.

Half-right answers an examiner expects, by kit dimension (``kit.DIMENSIONS``):

- nd: patches every position; indexes dimension 0, the batch, instead of 1 (outputs are
  ``(N, L, width)``); the slice ``position:position + 1``, empty for ``-1``;
- technique: rebinds ``output`` in the hook and returns nothing (the run is unpatched);
- alias: writes into the module's output in place (no ``clone()``, or a bare ``detach()``):
  when that output is a tensor the model uses again (a Dropout in eval mode hands back its
  input itself, which a skip connection adds later), the skip branch is patched too;
- raises: removes the hook without ``finally:``;
- dtype: the alias model runs in float64;
- technique: patches a ``detach()``-ed copy: the logits are right but no gradient reaches the
  layers before the module (attribution patching backpropagates through the patched run);
- left_as_found: switches the model to ``eval()`` and leaves it so;
- writes into ``clean_output`` (the check's tensor) instead of a copy of the output.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
from torch import nn

from ...data import corrupt_first, first_token
from ...models import seeded
from .. import kit
from ..core import Exercise, Tester, learners_hooks
from ._shared import _DropoutSkip, _hook_run, _outputs, _tiny, _with_hook


def patch_run(model, tokens, module, position, clean_output):
    """The logits of model(tokens) with module's output at `position` taken from clean_output."""
    ### BEGIN SOLUTION
    def patch(mod, args, output):
        patched = output.clone()
        patched[:, position] = clean_output[:, position]
        return patched

    handle = module.register_forward_hook(patch)
    try:
        return model(tokens)
    finally:
        handle.remove()
    ### END SOLUTION


exercise = Exercise(
    "transformer_hooks.patch_run", "Patch one position of one block",
    task=("write patch_run(model, tokens, module, position, clean_output) that runs model(tokens) with a "
          "forward hook on `module` (it returns a tensor, (batch, position, ...)) that returns a copy of its "
          "output with sequence position `position` (dimension 1) replaced by clean_output[:, position], the "
          "same module's output in another run; every other position, and the output itself, stay as they are "
          "(the output may be a tensor the model uses again). Remove the hook (also when the model raises) and "
          "return the logits"),
    hints=[
        "A forward hook that returns a tensor replaces the module's output: everything after the module "
        "computes with what the hook returned.",
        "Block outputs have the shape (batch, position, width): patched = output.clone(); "
        "patched[:, position] = clean_output[:, position]; return patched.",
        "Assigning to the name `output` inside the hook changes nothing outside it: return the new tensor. "
        "Index with [:, position], not a slice [position:position + 1], which is empty for position -1.",
    ],
    solution=patch_run,
    answer_name="patch_run",
    guide="""patching every position; rebinding `output` in the hook and returning nothing (the run is
    unpatched); indexing dimension 0, the batch, instead of 1; the hook removed without
    `finally:`; the slice `position:position + 1`, empty for `-1`; writing into the output
    in place (a Dropout in eval mode hands back its input itself, so a skip connection that
    uses that input again is patched too); patching a `detach()`-ed copy (the logits are
    right, but no gradient reaches the layers before the module); switching the model to
    `eval()` and leaving it so.""",
)


def _expected_patch(model, tokens, module, clean, positions) -> torch.Tensor:
    def patch(mod, args, output):
        out = output.clone()
        out[:, positions] = clean[:, positions]
        return out
    return _with_hook(model, tokens, module, patch)


def _patch_case(answer: Callable, t: Tester, seed: int, name: str, position: int) -> None:
    model = _tiny(seed)
    clean_tokens, _ = first_token(8, seed=seed)
    _patch_check(answer, t, model, corrupt_first(clean_tokens, seed=seed), clean_tokens, name, position)


def _patch_check(answer: Callable, t: Tester, model: nn.Module, tokens: torch.Tensor, clean_tokens: torch.Tensor,
                 name: str, position: int) -> None:
    module = model.get_submodule(name)
    _, clean = _outputs(model, clean_tokens, [name])
    clean = clean[name]
    given = clean.clone()
    want = _expected_patch(model, tokens, module, clean, [position])
    mistakes = {
        "all": (_expected_patch(model, tokens, module, clean, list(range(tokens.shape[1]))),
                f"every position was patched: replace position {position} only, patched[:, {position}], and keep "
                "the others from this run"),
        "none": (model(tokens).detach(), (
            "the logits are those of the unpatched run: the hook did not change the output. Assigning to the name "
            "`output` (or indexing an empty slice) changes nothing: return the patched tensor from the hook")),
    }

    def batch_row(mod, args, output):  # the mistake of indexing dimension 0, the batch
        out = output.clone()
        out[position] = clean[position]
        return out

    if -tokens.shape[0] <= position < tokens.shape[0]:
        mistakes["batch"] = (_with_hook(model, tokens, module, batch_row),
                             "dimension 0 is the batch: the position is dimension 1, output[:, position]")

    def in_place(mod, args, output):  # the mistake of writing into the output itself
        output[:, position] = clean[:, position]
        return output

    mistakes["in place"] = (_with_hook(model, tokens, module, in_place), (
        f"your hook wrote into {name}'s output in place, and that tensor is used again: this Dropout (eval mode) "
        "hands back its input itself, which the skip connection adds later, so the skip branch was patched too. "
        "Write into a copy: patched = output.clone()"))
    t.track(model)
    with kit.HookWitness({name: module}) as witness:
        got = answer(model, tokens, module, position, given)
    t.expect(torch.equal(given, clean), what="clean_output after the call", expected="unchanged", got="changed",
             nudge="write into a copy of the module's output, never into clean_output")
    t.expect(witness.fired(name, "forward") >= 1, what=f"a forward hook on {name} while the model ran",
             expected="one of yours", got="none", nudge="patch with a forward hook on the module")
    t.expect_type(got, torch.Tensor, what=f"patch_run(model, tokens, {name}, {position}, ...)",
                  nudge="return the logits of the patched run")
    # the same operations in the same order as the reference: 1e-5 admits a patch written another
    # way (torch.where, a mask), far below what a wrong position changes (0.1 and more here)
    t.expect_close(got, want, what=f"the logits, {name} patched at position {position}",
                   wrong=mistakes,
                   nudge=f"replace {name}'s output at position {position} (dimension 1) only, by "
                         f"clean_output[:, {position}], in a forward hook that returns the new output")


@exercise.case("a TinyTransformer's blocks.0 at position 2, the corrupted run's first token changed")
def _(answer, t: Tester) -> None:
    _patch_case(answer, t, seed=10, name="blocks.0", position=2)


@exercise.case("the embedding (embed) at position 0")
def _(answer, t: Tester) -> None:
    _patch_case(answer, t, seed=11, name="embed", position=0)


@exercise.case("a model that raises halfway: the hook must go")
def _(answer, t: Tester) -> None:
    model = t.track(kit.Raising(seed=12), "a model that raises halfway (after fc1)")
    kit.call_expecting_kit_error(answer, model, torch.zeros(2, 4), model.fc1, 1, torch.ones(2, 4))
    left = [r.path for r in learners_hooks(model)]
    t.expect(not left, what="hooks left on the model after it raised", expected="none", got=left, nudge=(
        "model(tokens) raised, and your hook stayed attached: remove the handle in the `finally:` of a try: "
        "around model(tokens)"))


@exercise.case("the last position, given as -1", hidden=True)
def _(answer, t: Tester) -> None:
    _patch_case(answer, t, seed=13, name="blocks.1", position=-1)


@exercise.case("a Dropout (eval mode) whose output is its input itself, used again by a skip connection; "
               "float64", hidden=True)
def _(answer, t: Tester) -> None:
    model, tokens, clean_tokens = kit.in_dtype(_DropoutSkip(seed=14), kit.randn(2, 5, 4, seed=14),
                                               kit.randn(2, 5, 4, seed=15))
    _patch_check(answer, t, model, tokens, clean_tokens, "drop", position=3)


@exercise.case("the patched run still backpropagates (a Tanh, whose backward needs its output, patched at "
               "position 1); the model in train mode, left as found", hidden=True)
def _(answer, t: Tester) -> None:
    with seeded(16):
        model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 3))
    t.track(model, "a Linear, Tanh, Linear model on sequences (N, L, 4)")
    tokens, clean_tokens = kit.randn(2, 3, 4, seed=16), kit.randn(2, 3, 4, seed=17)
    clean = _outputs(model, clean_tokens, ["1"])[1]["1"]
    reference = copy.deepcopy(model)
    hidden = reference[1](reference[0](tokens))
    patched = torch.cat([hidden[:, :1], clean[:, 1:2], hidden[:, 2:]], dim=1)   # the same patch, written out
    want = reference[2](patched)
    want.sum().backward()
    with kit.LeftAsFound(t, model):
        logits = answer(model, tokens, model[1], 1, clean.clone())
    t.expect_type(logits, torch.Tensor, what="patch_run(model, tokens, model[1], 1, ...)",
                  nudge="return the logits of the patched run")
    t.expect_close(logits, want.detach(), what="the logits, model[1] patched at position 1",
                   nudge="replace position 1 (dimension 1) only, in a copy of the output that the hook returns")
    try:
        logits.sum().backward()
    except RuntimeError as e:
        t.expect(False, what="logits.sum().backward()", expected="the gradients", got=str(e).splitlines()[0][:120],
                 nudge=("the Tanh's backward needs the output it returned, and your hook changed that tensor in "
                        "place: write into a copy, patched = output.clone()"))
    t.expect_type(model[0].weight.grad, torch.Tensor, what="model[0].weight.grad after backward()", nudge=(
        "no gradient reached the layers before the patch: return a patched copy that is still part of the "
        "graph (output.clone(), then the assignment), not a detach()"))
    t.expect_close(model[0].weight.grad, reference[0].weight.grad, what="model[0].weight.grad", nudge=(
        "the gradient through the unpatched positions must reach the earlier layers unchanged"))


@exercise.wrong("patches every position", mentions="every position was patched")
def _patch_all(model, tokens, module, position, clean_output):
    return _hook_run(model, tokens, module, lambda m, a, o: clean_output.clone())


@exercise.wrong("rebinds `output` in the hook and returns nothing", mentions="return the patched tensor")
def _patch_rebind(model, tokens, module, position, clean_output):
    def patch(mod, args, output):
        output = output.clone()
        output[:, position] = clean_output[:, position]
    return _hook_run(model, tokens, module, patch)


@exercise.wrong("patches dimension 0, the batch", mentions="dimension 0 is the batch")
def _patch_batch(model, tokens, module, position, clean_output):
    def patch(mod, args, output):
        out = output.clone()
        out[position] = clean_output[position]
        return out
    return _hook_run(model, tokens, module, patch)


@exercise.wrong("removes the hook after the call, not in finally:", mentions="finally:")
def _patch_no_finally(model, tokens, module, position, clean_output):
    def patch(mod, args, output):
        out = output.clone()
        out[:, position] = clean_output[:, position]
        return out
    handle = module.register_forward_hook(patch)
    logits = model(tokens)
    handle.remove()
    return logits


@exercise.wrong("patches the slice position:position + 1 (empty for -1)", mentions="the unpatched run",
                 hidden=True)
def _patch_slice(model, tokens, module, position, clean_output):
    def patch(mod, args, output):
        out = output.clone()
        out[:, position:position + 1] = clean_output[:, position:position + 1]
        return out
    return _hook_run(model, tokens, module, patch)


@exercise.wrong("writes into the output in place and returns it", mentions="in place", hidden=True)
def _patch_in_place(model, tokens, module, position, clean_output):
    def patch(mod, args, output):
        output[:, position] = clean_output[:, position]
        return output
    return _hook_run(model, tokens, module, patch)


@exercise.wrong("patches a detached copy: no gradient reaches the earlier layers", mentions="not a detach()",
                hidden=True)
def _patch_detached(model, tokens, module, position, clean_output):
    def patch(mod, args, output):
        out = output.detach().clone()
        out[:, position] = clean_output[:, position]
        return out
    return _hook_run(model, tokens, module, patch)


@exercise.wrong("switches the model to eval() and leaves it so", mentions="as you found it", hidden=True)
def _patch_eval_left(model, tokens, module, position, clean_output):
    model.eval()
    def patch(mod, args, output):
        out = output.clone()
        out[:, position] = clean_output[:, position]
        return out
    return _hook_run(model, tokens, module, patch)
