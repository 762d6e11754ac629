"""10_transformer_hooks, exercise: activation patching of what a module *reads*, one position of
its input, with a forward pre-hook (the lesson's demo patched what a module writes, with a
forward hook).

Half-right answers an examiner expects, by kit dimension (``kit.DIMENSIONS``):

- nd: patches every position; indexes dimension 0, the batch, instead of 1 (outputs are
  ``(N, L, width)``); the slice ``position:position + 1``, empty for ``-1``;
- technique: rebinds ``args`` in the pre-hook and returns nothing (the run is unpatched);
  patches the module's *output* with a forward hook, the demo's technique (another place);
- alias: writes into the module's input in place (no ``clone()``): that input is the caller's
  tensor, which a skip connection uses again, so the skip branch is patched too;
- raises: removes the hook without ``finally:``;
- dtype: the alias model runs in float64;
- technique: patches a ``detach()``-ed copy: the logits are right but no gradient reaches the
  layers before the module (attribution patching backpropagates through the patched run);
- left_as_found: switches the model to ``eval()`` and leaves it so;
- writes into ``clean_input`` (the check's tensor) instead of a copy of the input;
- dtype: token ids (int64) patched in what ``embed`` reads.
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
from ._shared import _DropoutSkip, _hook_run, _tiny, _with_hook


def patch_input(model, tokens, module, position, clean_input):
    """The logits of model(tokens) with what module reads at `position` taken from clean_input."""
    ### BEGIN SOLUTION
    def patch(mod, args):
        patched = args[0].clone()
        patched[:, position] = clean_input[:, position]
        return (patched, *args[1:])  # the new positional arguments

    handle = module.register_forward_pre_hook(patch)
    try:
        return model(tokens)
    finally:
        handle.remove()
    ### END SOLUTION


exercise = Exercise(
    "transformer_hooks.patch_input", "Patch what a module reads",
    task=("write patch_input(model, tokens, module, position, clean_input) that runs model(tokens) with a "
          "forward pre-hook on `module` that hands the module a copy of its first positional argument "
          "(batch, position, ...) with sequence position `position` (dimension 1) replaced by "
          "clean_input[:, position], what the same module read in another run; every other position and "
          "argument, and the caller's tensor itself, stay as they are (a skip connection may use it again). "
          "Remove the hook (also when the model raises) and return the logits, which must still backpropagate "
          "to the layers before the module (no detach(), no torch.no_grad())"),
    hints=[
        "A forward pre-hook, module.register_forward_pre_hook(hook), calls hook(module, args) before the "
        "module runs; returning a tuple replaces its positional arguments (lesson 03).",
        "Copy before you write: patched = args[0].clone(); patched[:, position] = clean_input[:, position]; "
        "return (patched, *args[1:]). args[0] is the caller's tensor, which the model may use again.",
        "Assigning to the name `args` inside the hook changes nothing outside it: return the new tuple. "
        "Index with [:, position], not a slice [position:position + 1], which is empty for position -1.",
    ],
    solution=patch_input,
    answer_name="patch_input",
    guide="""patching the module's output with a forward hook, as the demo did (another place in
    the model: what `blocks.1` reads is `blocks.0`'s output, but what `blocks.1` writes is not
    what it reads); patching every position; rebinding `args` in the pre-hook and returning
    nothing (the run is unpatched); indexing dimension 0, the batch, instead of 1; the hook
    removed without `finally:`; the slice `position:position + 1`, empty for `-1`; writing
    into the module's input in place (it is the caller's tensor: a skip connection that uses
    it again is patched too); patching a `detach()`-ed copy (no gradient reaches the layers
    before the module); switching the model to `eval()` and leaving it so.""",
)


def _with_pre_hook(model: nn.Module, tokens: torch.Tensor, module: nn.Module, hook: Callable) -> torch.Tensor:
    with module.register_forward_pre_hook(hook):
        return model(tokens).detach()


def _expected_patch(model, tokens, module, clean, positions) -> torch.Tensor:
    def patch(mod, args):
        inp = args[0].clone()
        inp[:, positions] = clean[:, positions]
        return (inp, *args[1:])
    return _with_pre_hook(model, tokens, module, patch)


def _inputs(model: nn.Module, tokens: torch.Tensor, name: str) -> torch.Tensor:
    """What the named module read (its first positional argument) in the check's own run."""
    kept = {}
    with model.get_submodule(name).register_forward_pre_hook(
            lambda m, args: kept.__setitem__("in", args[0].detach().clone())):
        model(tokens)
    return kept["in"]


def _patch_case(answer: Callable, t: Tester, seed: int, name: str, position: int) -> None:
    model = _tiny(seed)
    clean_tokens, _ = first_token(8, seed=seed)
    _patch_check(answer, t, model, corrupt_first(clean_tokens, seed=seed), clean_tokens, name, position)


def _patch_check(answer: Callable, t: Tester, model: nn.Module, tokens: torch.Tensor, clean_tokens: torch.Tensor,
                 name: str, position: int) -> None:
    module = model.get_submodule(name)
    clean = _inputs(model, clean_tokens, name)
    given = clean.clone()
    want = _expected_patch(model, tokens, module, clean, [position])
    mistakes = {
        "all": (_expected_patch(model, tokens, module, clean, list(range(tokens.shape[1]))),
                f"every position was patched: replace position {position} only, patched[:, {position}], and keep "
                "the others from this run"),
        "none": (model(tokens).detach(), (
            "the logits are those of the unpatched run: the pre-hook did not change the input. Assigning to the "
            "name `args` (or indexing an empty slice) changes nothing: return the new tuple from the pre-hook")),
    }

    def batch_row(mod, args):  # the mistake of indexing dimension 0, the batch
        inp = args[0].clone()
        inp[position] = clean[position]
        return (inp, *args[1:])

    if -tokens.shape[0] <= position < tokens.shape[0]:
        mistakes["batch"] = (_with_pre_hook(model, tokens, module, batch_row),
                             "dimension 0 is the batch: the position is dimension 1, args[0][:, position]")

    def in_place(mod, args):  # the mistake of writing into the caller's tensor
        args[0][:, position] = clean[:, position]

    mistakes["in place"] = (_with_pre_hook(model, tokens, module, in_place), (
        f"your pre-hook wrote into what {name} reads, in place: that is the caller's tensor, which the skip "
        "connection uses again, so the skip branch was patched too. Write into a copy: args[0].clone()"))

    def output_patched(mod, args, output):  # the demo's technique, on the wrong side of the module
        if output.shape != clean.shape or output.dtype != clean.dtype:
            return None
        out = output.clone()
        out[:, position] = clean[:, position]
        return out

    mistakes["output"] = (_with_hook(model, tokens, module, output_patched), (
        f"that patches what {name} writes (a forward hook on its output); the task patches what it reads: a "
        "forward pre-hook that replaces its first positional argument"))
    t.track(model)
    with kit.HookWitness({name: module}) as witness:
        got = answer(model, tokens, module, position, given)
    t.expect(torch.equal(given, clean), what="clean_input after the call", expected="unchanged", got="changed",
             nudge="write into a copy of what the module reads, never into clean_input")
    t.expect(witness.fired(name, "forward_pre") >= 1, what=f"a forward pre-hook on {name} while the model ran",
             expected="one of yours", got="none", nudge=(
                 "patch what the module reads with a forward pre-hook (module.register_forward_pre_hook)"))
    t.expect_type(got, torch.Tensor, what=f"patch_input(model, tokens, {name}, {position}, ...)",
                  nudge="return the logits of the patched run")
    # the same operations in the same order as the reference: 1e-5 admits a patch written another
    # way (torch.where, a mask), far below what a wrong position changes (0.1 and more here)
    t.expect_close(got, want, what=f"the logits, {name} patched at position {position}",
                   wrong=mistakes,
                   nudge=f"replace what {name} reads at position {position} (dimension 1) only, by "
                         f"clean_input[:, {position}], in a forward pre-hook that returns the new arguments")


@exercise.case("a TinyTransformer: what blocks.1 reads (blocks.0's output) at position 0, the corrupted run's "
               "first token changed")
def _(answer, t: Tester) -> None:
    _patch_case(answer, t, seed=10, name="blocks.1", position=0)


@exercise.case("what the embedding reads, token ids (int64), at position 0")
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


@exercise.case("the last position, given as -1, of what unembed reads", hidden=True)
def _(answer, t: Tester) -> None:
    _patch_case(answer, t, seed=13, name="unembed", position=-1)


@exercise.case("a body whose input the skip connection adds again; float64", hidden=True)
def _(answer, t: Tester) -> None:
    model, tokens, clean_tokens = kit.in_dtype(_DropoutSkip(seed=14), kit.randn(2, 5, 4, seed=14),
                                               kit.randn(2, 5, 4, seed=15))
    _patch_check(answer, t, model, tokens, clean_tokens, "body", position=3)


@exercise.case("the patched run still backpropagates to the layers before the module; the model in train "
               "mode, left as found", hidden=True)
def _(answer, t: Tester) -> None:
    with seeded(16):
        model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 3))
    t.track(model, "a Linear, Tanh, Linear model on sequences (N, L, 4)")
    tokens, clean_tokens = kit.randn(2, 3, 4, seed=16), kit.randn(2, 3, 4, seed=17)
    clean = _inputs(model, clean_tokens, "1")   # what the Tanh read in the clean run
    reference = copy.deepcopy(model)
    hidden = reference[0](tokens)
    patched = torch.cat([hidden[:, :1], clean[:, 1:2], hidden[:, 2:]], dim=1)   # the same patch, written out
    want = reference[2](reference[1](patched))
    want.sum().backward()
    with kit.LeftAsFound(t, model):
        logits = answer(model, tokens, model[1], 1, clean.clone())
    t.expect_type(logits, torch.Tensor, what="patch_input(model, tokens, model[1], 1, ...)",
                  nudge="return the logits of the patched run")
    t.expect_close(logits, want.detach(), what="the logits, model[1]'s input patched at position 1",
                   nudge="replace position 1 (dimension 1) only, in a copy of args[0] that the pre-hook returns")
    t.expect(logits.requires_grad, what="the logits' autograd graph", expected="kept", got="none", nudge=(
        "return the logits of model(tokens) as they are: no detach() and no torch.no_grad(), so that the "
        "caller can backpropagate through the patched run"))
    try:
        logits.sum().backward()
    except RuntimeError as e:
        t.expect(False, what="logits.sum().backward()", expected="the gradients", got=str(e).splitlines()[0][:120],
                 nudge="write into a copy of what the module reads: patched = args[0].clone()")
    t.expect_type(model[0].weight.grad, torch.Tensor, what="model[0].weight.grad after backward()", nudge=(
        "no gradient reached the layers before the patch: return a patched copy that is still part of the "
        "graph (args[0].clone(), then the assignment), not a detach()"))
    t.expect_close(model[0].weight.grad, reference[0].weight.grad, what="model[0].weight.grad", nudge=(
        "the gradient through the unpatched positions must reach the earlier layers unchanged"))


class _Shift(nn.Module):
    """Called with two positional arguments, ``inner(h, offset)``: ``lin(h) + offset``."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        with seeded(seed):
            self.lin = nn.Linear(4, 4)

    def forward(self, h: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
        return self.lin(h) + offset


class _TwoArgs(nn.Module):
    """``head(inner(pre(x), offset))``, the offset a buffer shaped like one sequence (1, L, 4)."""

    def __init__(self, seed: int = 0, length: int = 5) -> None:
        super().__init__()
        with seeded(seed):
            self.pre = nn.Linear(4, 4)
            self.inner = _Shift(seed + 1)
            self.head = nn.Linear(4, 2)
            self.register_buffer("offset", torch.randn(1, length, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.inner(self.pre(x), self.offset))


@exercise.case("a module called with two positional arguments: only the first is patched", hidden=True)
def _(answer, t: Tester) -> None:
    model = _TwoArgs(seed=18)
    _patch_check(answer, t, model, kit.randn(2, 5, 4, seed=18), kit.randn(2, 5, 4, seed=19), "inner", position=2)


@exercise.wrong("patches every position", mentions="every position was patched")
def _patch_all(model, tokens, module, position, clean_input):
    return _hook_run(model, tokens, module, lambda m, args: (clean_input.clone(), *args[1:]), pre=True)


@exercise.wrong("rebinds `args` in the pre-hook and returns nothing", mentions="return the new tuple")
def _patch_rebind(model, tokens, module, position, clean_input):
    def patch(mod, args):
        patched = args[0].clone()
        patched[:, position] = clean_input[:, position]
        args = (patched, *args[1:])  # noqa: F841 - the mistake: a local name, nothing returned
    return _hook_run(model, tokens, module, patch, pre=True)


@exercise.wrong("patches dimension 0, the batch", mentions="dimension 0 is the batch")
def _patch_batch(model, tokens, module, position, clean_input):
    def patch(mod, args):
        patched = args[0].clone()
        patched[position] = clean_input[position]
        return (patched, *args[1:])
    return _hook_run(model, tokens, module, patch, pre=True)


@exercise.wrong("patches the module's output with a forward hook (the demo's technique)",
                mentions="what the module reads")
def _patch_output(model, tokens, module, position, clean_input):
    def patch(mod, args, output):
        if output.shape != clean_input.shape or output.dtype != clean_input.dtype:
            return None
        out = output.clone()
        out[:, position] = clean_input[:, position]
        return out
    return _hook_run(model, tokens, module, patch)


@exercise.wrong("removes the hook after the call, not in finally:", mentions="finally:")
def _patch_no_finally(model, tokens, module, position, clean_input):
    def patch(mod, args):
        patched = args[0].clone()
        patched[:, position] = clean_input[:, position]
        return (patched, *args[1:])
    handle = module.register_forward_pre_hook(patch)
    logits = model(tokens)
    handle.remove()
    return logits


@exercise.wrong("patches the slice position:position + 1 (empty for -1)", mentions="the unpatched run",
                 hidden=True)
def _patch_slice(model, tokens, module, position, clean_input):
    def patch(mod, args):
        patched = args[0].clone()
        patched[:, position:position + 1] = clean_input[:, position:position + 1]
        return (patched, *args[1:])
    return _hook_run(model, tokens, module, patch, pre=True)


@exercise.wrong("writes into the module's input in place", mentions="in place", hidden=True)
def _patch_in_place(model, tokens, module, position, clean_input):
    def patch(mod, args):
        args[0][:, position] = clean_input[:, position]
    return _hook_run(model, tokens, module, patch, pre=True)


@exercise.wrong("patches a detached copy: no gradient reaches the earlier layers", mentions="not a detach()",
                hidden=True)
def _patch_detached(model, tokens, module, position, clean_input):
    def patch(mod, args):
        patched = args[0].detach().clone()
        patched[:, position] = clean_input[:, position]
        return (patched, *args[1:])
    return _hook_run(model, tokens, module, patch, pre=True)


@exercise.wrong("switches the model to eval() and leaves it so", mentions="as you found it", hidden=True)
def _patch_eval_left(model, tokens, module, position, clean_input):
    model.eval()

    def patch(mod, args):
        patched = args[0].clone()
        patched[:, position] = clean_input[:, position]
        return (patched, *args[1:])
    return _hook_run(model, tokens, module, patch, pre=True)
