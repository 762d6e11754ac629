"""10_transformer_hooks, exercise: transformer_hooks.patch_run."""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
from torch import nn

from ...data import corrupt_first, first_token
from ...models import seeded
from .. import kit
from ..core import Exercise, Tester, learners_hooks
from ._shared import _hook_run, _outputs, _tiny, _with_hook


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
          "forward hook on `module` that replaces its output at sequence position `position` (dimension 1) by "
          "clean_output[:, position], the same module's output in another run, leaves every other position "
          "as it is, removes the hook (also when the model raises) and returns the logits"),
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
    `finally:`; the slice `position:position + 1`, empty for `-1`.""",
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
    tokens = corrupt_first(clean_tokens, seed=seed)
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

    mistakes["batch"] = (_with_hook(model, tokens, module, batch_row),
                         "dimension 0 is the batch: the position is dimension 1, output[:, position]")
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
    # way (in place, torch.where), far below what a wrong position changes (0.1 and more here)
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


@exercise.case("the patched run still backpropagates: a Tanh (whose backward needs its output) patched at "
               "position 1", hidden=True)
def _(answer, t: Tester) -> None:
    with seeded(14):
        model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 3))
    t.track(model, "a Linear, Tanh, Linear model on sequences (N, L, 4)")
    tokens, clean = kit.randn(2, 3, 4, seed=14), kit.randn(2, 3, 4, seed=15)
    reference = copy.deepcopy(model)
    hidden = reference[1](reference[0](tokens))
    patched = torch.cat([hidden[:, :1], clean[:, 1:2], hidden[:, 2:]], dim=1)   # the same patch, written out
    reference[2](patched).sum().backward()
    logits = answer(model, tokens, model[1], 1, clean)
    t.expect_type(logits, torch.Tensor, what="patch_run(...)", nudge="return the logits of the patched run")
    logits.sum().backward()
    t.expect_type(model[0].weight.grad, torch.Tensor, what="model[0].weight.grad after backward()", nudge=(
        "no gradient reached the layers before the patch: return a patched copy that is still part of the "
        "graph (output.clone(), then the assignment), not a detach()"))
    t.expect_close(model[0].weight.grad, reference[0].weight.grad, what="model[0].weight.grad", nudge=(
        "the gradient through the unpatched positions must reach the earlier layers unchanged"))
