"""04_backward_hooks, exercise: the first Linear, from the output, whose output gradient is below a threshold.

Half-right answers an examiner expects, by kit dimension (``kit.DIMENSIONS``):

- order: scans from the input instead of from the output; walks ``reversed(named_modules())``,
  the order the layers were defined in, instead of the order the hooks fire (a model that
  defines ``head``, ``mid``, ``stem`` and runs them the other way round, ``kit.Reordered``);
- technique: measures ``grad_input[0]`` instead of ``grad_output[0]``; the legacy
  ``register_backward_hook`` (same numbers on a ``Linear``, the wrong hook);
- nested, nd: walks ``named_children()`` (misses the Linears inside blocks), on a 3-D input;
- dtype: a float64 model;
- raises: no ``finally:`` (the model raises halfway), or no removal at all;
- a boundary: counts a norm equal to the threshold as below it (``<=``);
- order, twice: returns the largest norm below the threshold instead of the first (gradients that
  grow again towards the input); keeps one value per name in a dict, so a Linear called twice is
  judged by its last firing only (hidden), or by its first firing (``dict.setdefault``, the
  natural "fix" of section 6's dict, hidden: ``_NearCallLarge``), or by its smallest norm
  (hidden: ``_Sandwich``, another Linear between the two calls);
- left_as_found: zeroes the model's gradients before or after the task's backward; makes the
  caller's ``x`` require grad;
- a subclass of ``nn.Linear`` skipped (``type(m) is nn.Linear``);
- a wrong type: returns ``(name, norm)`` instead of the name.

A right alternative registered with ``exercise.right``: full backward *pre*-hooks, which receive
``grad_output`` too (the task reads nothing else).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

import torch
from torch import nn

from ...data import blobs
from ...models import MLP, seeded
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


def first_vanishing_layer(model, x, threshold):
    """Name of the first Linear from the output whose grad_output norm < threshold, or None."""
    ### BEGIN SOLUTION
    fired, handles = [], []  # (name, norm) in firing order: from the output to the input
    try:
        for name, module in model.named_modules():
            if isinstance(module, nn.Linear):
                handles.append(module.register_full_backward_hook(
                    lambda m, gi, go, name=name: fired.append((name, go[0].norm().item()))))
        model(x).sum().backward()
    finally:
        for handle in handles:
            handle.remove()
    return next((name for name, norm in fired if norm < threshold), None)
    ### END SOLUTION


def _nested_sigmoid_stack(depth: int, width: int = 16, *, seed: int) -> nn.Sequential:
    """``blocks.0.fc blocks.0.act ... blocks.N.fc blocks.N.act head``: the sigmoid stack with
    every Linear but ``head`` one level down, where ``named_children()`` does not look."""
    blocks: OrderedDict[str, nn.Module] = OrderedDict()
    with seeded(seed):
        for i in range(depth):
            blocks[str(i)] = nn.Sequential(OrderedDict([
                ("fc", nn.Linear(8 if i == 0 else width, width)), ("act", nn.Sigmoid())]))
        head = nn.Linear(width, 1)
    return nn.Sequential(OrderedDict([("blocks", nn.Sequential(blocks)), ("head", head)]))


exercise = Exercise(
    "backward_hooks.first_vanishing_layer", "Find where the gradient vanishes",
    task=("write first_vanishing_layer(model, x, threshold) that runs model(x).sum().backward() "
          "with full backward hooks on every nn.Linear (or full backward pre-hooks, which also receive "
          "grad_output; no in-place op follows a Linear) and returns the "
          "name of the first Linear, walking from the output towards the input (a Linear called twice "
          "is met once per call), whose output gradient has a norm below "
          "`threshold` (None if there is none). Every hook must be removed afterwards, also when the "
          "model raises"),
    hints=[
        "Record (name, grad_output[0].norm().item()) in each Linear's full backward hook.",
        "Backward hooks fire from the output towards the input, so a list appended in the hooks "
        "is already in the order you need.",
        "Return the first recorded name whose norm is below the threshold, or None; remove the "
        "handles in a finally: block.",
    ],
    solution=first_vanishing_layer,
    errors={"'NoneType' object has no attribute": (
        "grad_input[0] is None for the first layer when x does not require grad; measure "
        "grad_output[0], the gradient with respect to the layer's output.")},
    equivalent_mutants={
        "number@9: 0 -> -1": "a Linear has one output, so grad_output has one entry: go[-1] is go[0]",
    },
    guide="""scanning from the input instead of from the output (backward hooks fire from the output
    towards the input, so the recorded order is already the right one); walking
    `reversed(named_modules())`, which is the order the layers were defined in, not the order they
    run; returning the largest norm below the threshold instead of the first; one value per name (a
    dict), which judges a Linear called twice by one of its firings only (the last, the first with
    `setdefault`, or the smallest); counting a norm equal to the
    threshold as below it; testing `type(m) is nn.Linear`, which misses subclasses; zeroing the
    model's gradients, or making `x` require grad; leaving hooks attached, or removing them outside a
    `finally:`.""",
)


def _check_vanishing(answer: Callable, t: Tester, model: nn.Sequential, x: torch.Tensor,
                     threshold: float, expected: str | None, what: str) -> None:
    with _quiet():
        got = answer(model, x, threshold)
    t.expect_type(got, (str, type(None)), what=what,
                  nudge="return only the layer's name (or None), not its norm or the module")
    nested = (isinstance(expected, str) and "." in expected and got is None
              or isinstance(got, str) and "." not in got and isinstance(expected, str) and "." in expected)
    t.expect(not nested or got == expected, what=what, expected=expected, got=got,
             nudge="the Linears inside submodules were not measured: model.named_children() stops at the "
                   "first level, model.named_modules() goes into every submodule")
    t.expect(got == expected, what=what, expected=expected, got=got,
             nudge=("walk from the output towards the input and stop at the first Linear whose "
                    "grad_output[0] norm is below the threshold (backward hooks fire in that order)"
                    if expected is not None else
                    "no Linear is below this threshold: return None"))


@exercise.case("an 8-layer sigmoid stack where fc1 to fc4 are below the threshold")
def _(answer, t: Tester) -> None:
    model = t.track(_sigmoid_stack(8, seed=0), "the sigmoid stack")
    x, _ = blobs(32, seed=0)
    norms = _linear_output_norms(model, x)
    threshold = (norms["fc4"] * norms["fc5"]) ** 0.5
    _check_vanishing(answer, t, model, x, threshold, "fc4", "first_vanishing_layer(stack, x, threshold)")


@exercise.case("a threshold below every norm")
def _(answer, t: Tester) -> None:
    model = t.track(_sigmoid_stack(5, seed=7), "the sigmoid stack")
    x, _ = blobs(16, seed=7)
    threshold = min(_linear_output_norms(model, x).values()) / 10
    _check_vanishing(answer, t, model, x, threshold, None, "first_vanishing_layer(stack, x, tiny)")


@exercise.case("an MLP halfway through a training step, whose head is a subclass of nn.Linear, and a "
               "threshold above every norm: the output layer itself")
def _(answer, t: Tester) -> None:
    model = t.track(_with_sublinear(MLP(seed=8), "head"), "the MLP")
    x, _ = blobs(16, seed=8)
    _halfway_through_a_step(model, blobs(4, seed=80)[0])
    before, added = _grads(model), _what_backward_adds(model, x)
    threshold = max(_linear_output_norms(model, x).values()) * 10
    with _quiet():
        got = answer(model, x, threshold)
    t.expect(got != "fc2", what="first_vanishing_layer(mlp, x, huge)", expected="head", got=got, nudge=(
        "head is a subclass of nn.Linear, which is a Linear too (a user-defined one, a LoRA-style layer): "
        "test isinstance(module, nn.Linear), not type(module) is nn.Linear"))
    _check_vanishing(lambda *args: got, t, model, x, threshold, "head", "first_vanishing_layer(mlp, x, huge)")
    expect_input_as_found(t, x, "first_vanishing_layer(mlp, x, huge)")
    expect_one_backward_added(t, model, before, added)


class _Regrowing(nn.Sequential):
    """``fc1 fc2 fc3 head``, no activations, weights chosen so that the output gradients' norms
    are, from the output: head 2, fc3 4, fc2 0.2, fc1 1.0 (for 4 examples): they grow again."""

    def __init__(self) -> None:
        super().__init__(OrderedDict((n, nn.Linear(4, 4 if n != "head" else 1)) for n in ("fc1", "fc2", "fc3", "head")))
        with torch.no_grad():
            for layer, weight in ((self.fc1, 1.0), (self.fc2, 5.0), (self.fc3, 0.05)):
                layer.weight.copy_(weight * torch.eye(4))
            self.head.weight.fill_(1.0)
            for layer in self:
                layer.bias.zero_()


@exercise.case("gradients that grow again towards the input: the first below the threshold is not the largest")
def _(answer, t: Tester) -> None:
    model = t.track(_Regrowing(), "the model whose gradients grow again")
    x = kit.randn(4, 4, seed=12)
    with _quiet():
        got = answer(model, x, 1.5)
    t.expect(got != "fc1", what="first_vanishing_layer(model, x, 1.5)", expected="fc2", got=got, nudge=(
        "fc1's norm (1.0) is below the threshold, but fc2's (0.2) comes first, walking from the output: "
        "return the first Linear, from the output, whose norm is below it, not the largest such norm"))
    _check_vanishing(lambda *args: got, t, model, x, 1.5, "fc2", "first_vanishing_layer(model, x, 1.5)")


@exercise.case("a float64 nested sigmoid stack (Linears inside blocks) on a 3-D input")
def _(answer, t: Tester) -> None:
    model, x = kit.in_dtype(_nested_sigmoid_stack(6, seed=2), blobs(12, seed=2)[0].reshape(4, 3, 8))
    t.track(model, "the nested sigmoid stack")
    norms = _linear_output_norms(model, x)
    threshold = (norms["blocks.2.fc"] * norms["blocks.3.fc"]) ** 0.5
    with FullHookWitness(_linears(model)) as witness:
        _check_vanishing(answer, t, model, x, threshold, "blocks.2.fc",
                         "first_vanishing_layer(nested stack, x, threshold)")
    expect_full_hooks(t, witness, pre_hooks_too=True)


@exercise.case("a threshold equal to the norm of head: below means strictly below")
def _(answer, t: Tester) -> None:
    # head's output gradient is four ones: its norm is exactly 2.0 however it is computed (float32
    # or float64, any summation order), so the boundary cannot move with the learner's arithmetic
    model = t.track(_Regrowing(), "the model whose gradients grow again")
    x = kit.randn(4, 4, seed=13)
    with _quiet():
        got = answer(model, x, 2.0)
    t.expect(got == "fc2", what="first_vanishing_layer(model, x, threshold=2.0)", expected="fc2",
             got=got, nudge=("head's norm is exactly 2.0, which is not below the threshold 2.0: "
                             "compare with norm < threshold" if got == "head" else
                             "fc2 is the first Linear, from the output, whose norm is below the threshold"))


@exercise.case("a model that defines head, mid, stem but runs stem, mid, head", hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(kit.Reordered(seed=9), "the reordered model")
    x, _ = blobs(16, seed=9)
    norms = _linear_output_norms(model, x)
    threshold = (norms["mid"] * norms["head"]) ** 0.5
    with _quiet():
        got = answer(model, x, threshold)
    t.expect(got == "mid", what="first_vanishing_layer(reordered model, x, threshold)", expected="mid",
             got=got, nudge="the order of model.named_modules() (the order the layers were defined in) is "
                            "not the order of the backward pass: record the names in the order your hooks "
                            "fire, which is from the output towards the input")


@exercise.case("a model that raises halfway through its forward: no hook may stay", hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(kit.Raising(seed=10), "the model that raises")
    with _quiet():
        kit.call_expecting_kit_error(answer, model, kit.randn(3, 4, seed=10), 0.1)


class _CalledTwice(nn.Module):
    """``out(block(block(x)))``, ``block`` = 3 * identity, ``out`` = 0.1 * ones: the output
    gradients' norms are, from the output: out 2, block (second call) 0.4, block (first call) 1.2."""

    def __init__(self) -> None:
        super().__init__()
        self.block, self.out = nn.Linear(4, 4), nn.Linear(4, 1)
        with torch.no_grad():
            self.block.weight.copy_(3.0 * torch.eye(4))
            self.out.weight.fill_(0.1)
            self.block.bias.zero_()
            self.out.bias.zero_()

    def forward(self, x):
        return self.out(self.block(self.block(x)))


@exercise.case("a Linear called twice in one forward: its second call is below the threshold", hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(_CalledTwice(), "the model that calls block twice")
    with _quiet():
        got = answer(model, kit.randn(4, 4, seed=13), 1.0)
    t.expect(got == "block", what="first_vanishing_layer(model, x, 1.0)", expected="block", got=got, nudge=(
        "block runs twice, so its hook fires twice, and the first firing (its second call, nearer the output) "
        "is already below the threshold: walk the firings, one per call, not one value per name"))


class _NearCallLarge(nn.Module):
    """``out(block(block(x)))``, ``block`` = 0.2 * identity, ``out`` = ones: the output gradients'
    norms are, from the output: out 2, block (second call) 4, block (first call) 0.8. The call
    nearer the output is above the threshold 1, the other below: only one value per call finds it."""

    def __init__(self) -> None:
        super().__init__()
        self.block, self.out = nn.Linear(4, 4), nn.Linear(4, 1)
        with torch.no_grad():
            self.block.weight.copy_(0.2 * torch.eye(4))
            self.out.weight.fill_(1.0)
            self.block.bias.zero_()
            self.out.bias.zero_()

    def forward(self, x):
        return self.out(self.block(self.block(x)))


@exercise.case("a Linear called twice whose call nearer the output is above the threshold",
               hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(_NearCallLarge(), "the model that calls block twice")
    with _quiet():
        got = answer(model, kit.randn(4, 4, seed=14), 1.0)
    t.expect(got == "block", what="first_vanishing_layer(model, x, 1.0)", expected="block", got=got, nudge=(
        "block runs twice: its first firing (its second call, nearer the output) has norm 4, its second "
        "firing (its first call) 0.8, below the threshold; keeping only the first firing per name misses "
        "it: walk the firings, one per call, not one value per name"))


class _Sandwich(nn.Module):
    """``out(a(b(a(x))))``, ``a`` = 0.3 * identity, ``b`` = 0.5 * identity, ``out`` = ones: the output
    gradients' norms are, from the output: out 2, a (second call) 4, b 1.2, a (first call) 0.6."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.out = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 1)
        with torch.no_grad():
            self.a.weight.copy_(0.3 * torch.eye(4))
            self.b.weight.copy_(0.5 * torch.eye(4))
            self.out.weight.fill_(1.0)
            for layer in (self.a, self.b, self.out):
                layer.bias.zero_()

    def forward(self, x):
        return self.out(self.a(self.b(self.a(x))))


@exercise.case("a Linear called twice with another Linear between its two calls", hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(_Sandwich(), "the model that calls a, b, a")
    with _quiet():
        got = answer(model, kit.randn(4, 4, seed=15), 1.5)
    t.expect(got == "b", what="first_vanishing_layer(model, x, 1.5)", expected="b", got=got, nudge=(
        "from the output the firings are out 2, a 4, b 1.2, a 0.6: b is the first below 1.5; a's "
        "smallest norm belongs to its call nearer the input, after b: walk the firings, one per call, "
        "not one value per name"))


def _vanishing(*, read="output", walk="modules", order="fired", compare="<", register="full",
               remove="finally", result="name", select="isinstance", pick="first", prepare=None):
    """One factory for the near-copy wrong answers: which gradient is measured ("output", "input"),
    which modules are hooked ("modules", "children"), in which order the names are scanned
    ("fired": as the hooks fired; "defined": named_modules(), from the input; "reversed": the
    reverse of named_modules()), how a norm is compared ("<", "<="), which hook ("full",
    "legacy"), how the hooks are removed ("finally", "after", "never"), what is returned
    ("name", "pair": (name, norm)), how a Linear is recognised ("isinstance", "type": type(m) is
    nn.Linear), which name below the threshold is picked ("first", "largest": the largest norm
    below it; "dict": the first of a dict name -> last norm; "first_per_name": name -> the norm
    of its first firing, as dict.setdefault keeps it; "min_per_name": name -> its smallest norm)
    and what is done to the model or x first ("zero_grad", "requires_grad")."""
    def answer(model, x, threshold):
        fired, handles = [], []
        if prepare == "zero_grad":
            model.zero_grad()
        elif prepare == "requires_grad":
            x.requires_grad_()
        items = model.named_modules() if walk == "modules" else model.named_children()
        for name, module in items:
            if isinstance(module, nn.Linear) if select == "isinstance" else type(module) is nn.Linear:
                def hook(m, gi, go, name=name):
                    fired.append((name, (go if read == "output" else gi)[0].norm().item()))
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
        if order != "fired":
            norms = dict(fired)
            names = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]
            fired = [(n, norms[n]) for n in (names if order == "defined" else reversed(names))]
        if pick == "dict":
            fired = list(dict(fired).items())
        elif pick in ("first_per_name", "min_per_name"):
            kept: dict = {}
            for n, v in fired:
                kept[n] = kept.get(n, v) if pick == "first_per_name" else min(v, kept.get(n, v))
            fired = list(kept.items())
        below = [(n, v) for n, v in fired if (v < threshold if compare == "<" else v <= threshold)]
        if not below:
            return None
        if pick == "largest":
            below = [max(below, key=lambda nv: nv[1])]
        return below[0][0] if result == "name" else below[0]
    return answer


exercise.wrong("scans from the input instead of from the output", mentions="from the output")(
    _vanishing(order="defined"))
exercise.wrong("forgets to remove the hooks", mentions="still attached")(_vanishing(remove="never"))
exercise.wrong("walks model.named_children(): misses nested Linears", mentions="named_modules()")(
    _vanishing(walk="children"))
exercise.wrong("returns (name, norm) instead of the name", mentions="only the layer's name")(
    _vanishing(result="pair"))
exercise.wrong("measures grad_input[0] instead of grad_output[0]", mentions="grad_output[0]")(
    _vanishing(read="input"))
exercise.wrong("uses the legacy register_backward_hook", mentions="legacy")(_vanishing(register="legacy"))
exercise.wrong("counts a norm equal to the threshold as below it", mentions="norm < threshold")(
    _vanishing(compare="<="))
exercise.wrong("tests type(m) is nn.Linear: misses a subclass", mentions="isinstance(module, nn.Linear)")(
    _vanishing(select="type"))
exercise.wrong("zeroes the model's gradients first", mentions="do not zero the gradients")(
    _vanishing(prepare="zero_grad"))
exercise.wrong("makes the caller's x require grad", mentions="leave the caller's input")(
    _vanishing(prepare="requires_grad"))
exercise.wrong("returns the largest norm below the threshold", mentions="first Linear, from the output")(
    _vanishing(pick="largest"))
exercise.wrong("keeps one norm per name in a dict: a Linear called twice is judged by its last firing",
               mentions="one per call", hidden=True)(_vanishing(pick="dict"))
exercise.wrong("keeps the first firing per name (dict.setdefault): a Linear called twice is judged by "
               "its call nearest the output", mentions="one per call", hidden=True)(
    _vanishing(pick="first_per_name"))
exercise.wrong("keeps the smallest norm per name: a Linear called twice is judged by its smallest call",
               mentions="one per call", hidden=True)(_vanishing(pick="min_per_name"))
exercise.wrong("walks reversed(named_modules()) instead of the order the hooks fire",
               mentions="order your hooks fire", hidden=True)(_vanishing(order="reversed"))
exercise.wrong("removes the hooks after backward, not in a finally:", mentions="still attached", hidden=True)(
    _vanishing(remove="after"))


@exercise.right("reads grad_output[0] in full backward pre-hooks (they receive grad_output too)")
def _pre_hooks(model, x, threshold):
    fired, handles = [], []
    try:
        for name, module in model.named_modules():
            if isinstance(module, nn.Linear):
                handles.append(module.register_full_backward_pre_hook(
                    lambda m, grad_output, name=name: fired.append((name, grad_output[0].norm().item()))))
        model(x).sum().backward()
    finally:
        for handle in handles:
            handle.remove()
    return next((name for name, norm in fired if norm < threshold), None)
