"""13_hooks_at_work, exercise: per-example gradient norms from a forward hook and a full backward
hook on every Linear, as Opacus computes them for differentially private training.

Half-right answers an examiner expects, by kit dimension (``kit.DIMENSIONS``):

- technique: the batch's gradient (``.grad``, the sum over examples) for every example; the
  per-example gradients of the *mean* loss (divided by the batch size); ``torch.func``
  (``vmap(grad(...))``) or a Python loop over the examples instead of hooks (right numbers, not
  the technique: one forward and one backward for the whole batch is the point); the legacy
  ``register_backward_hook`` (the same ``grad_output`` on a Linear, the hook the lesson warns
  against);
- the sum: forgets the bias; one norm per layer added up instead of one norm over all the layers;
  counts a parameter that is not a Linear's (a LayerNorm's);
- twice: keeps one input per Linear (a dict, not a list per call), so a Linear called twice
  pairs its second input with both gradients; keeps only the last call's gradient instead of
  the sum of both uses;
- nd: inputs ``(batch, sequence, features)``: per-position gradients squared separately (the
  norm over positions' gradients, not of their sum), or an einsum written for 2-D inputs only, or
  for 2-D and 3-D only (the task admits any number of middle dimensions: a 4-D input is checked);
- dtype: float64 model and input (a float32 accumulator of one's own);
- nested: walks ``named_children()`` and misses the Linears inside submodules; ``type(m) is
  nn.Linear`` misses a subclass of nn.Linear (a user-defined one, a LoRA-style layer);
- raises, repeat: hooks removed outside ``finally:``; state (the kept inputs, the sums) kept
  across calls, which adds up, or keeps activations alive after the call (the check counts
  the tensors made during the calls that are still alive after them: detached copies of
  the inputs in a global dict, cleared at the next call, are caught there);
- detached: a result that holds the autograd graph (computed outside backward from the kept,
  non-detached inputs);
- technique: the backward run as ``torch.autograd.grad`` (the same hooks fire, ``.grad`` is left
  as it was; the task asks for ``backward()``, which adds the batch's gradient as a training step does);
- left_as_found: ``model.zero_grad()`` first (the caller's ``.grad``, halfway through a training step,
  is lost: the check starts with a ``.grad`` filled and wants it plus the batch's gradient);
- left_as_found: the inputs kept on each Linear (``module.activations``, Opacus style), popped in
  the backward hook and the (empty) list left there: the model is not as it was given.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import torch
from torch import nn

from ...models import seeded
from .. import kit
from ..backward_hooks._shared import (
    FullHookWitness,
    _grads,
    _halfway_through_a_step,
    _quiet,
    _with_sublinear,
    expect_full_hooks,
    expect_input_as_found,
)
from ..core import Exercise, Tester
from ._alive import Created, added_to, module_contents


def per_sample_norms(model, x, loss_fn):
    """A tensor (batch,): each example's gradient norm over every nn.Linear's parameters."""
    ### BEGIN SOLUTION
    inputs, grads, handles = {}, {}, []   # Linear -> inputs, one per call; (Linear, name) -> grads

    def keep_input(module, args, output):
        inputs.setdefault(module, []).append(args[0])

    def per_example_grads(module, grad_input, grad_output):
        a = inputs[module].pop()   # backward meets a Linear's calls in reverse order
        a = a.reshape(a.shape[0], -1, a.shape[-1])   # (batch, positions, features); 2-D: one
        g = grad_output[0].reshape(a.shape[0], -1, grad_output[0].shape[-1])
        mine = {"weight": torch.einsum("npo,npi->noi", g, a)}   # summed over the positions
        if module.bias is not None:
            mine["bias"] = g.sum(1)
        for name, value in mine.items():   # a Linear called twice: the sum of both uses
            key = (module, name)
            grads[key] = grads[key] + value if key in grads else value

    try:
        for module in model.modules():
            if isinstance(module, nn.Linear):
                handles.append(module.register_forward_hook(keep_input))
                handles.append(module.register_full_backward_hook(per_example_grads))
        loss_fn(model(x)).backward()
    finally:
        for handle in handles:
            handle.remove()
    return torch.stack([g.flatten(1).pow(2).sum(1) for g in grads.values()]).sum(0).sqrt()
    ### END SOLUTION


exercise = Exercise(
    "hooks_at_work.per_sample_norms", "Per-example gradient norms, as Opacus computes them",
    task=("write per_sample_norms(model, x, loss_fn) that returns a 1-D tensor with one entry per example "
          "of the batch x (dimension 0): the L2 norm of that example's gradient over the parameters of every "
          "nn.Linear of the model together (weight and bias; a Linear without bias has only its weight; other "
          "modules' parameters do not count). The loss is loss_fn(model(x)), a sum of per-example losses. Use "
          "hooks, as Opacus does: a forward hook on each Linear keeps its input, a full backward hook "
          "(register_full_backward_hook) turns grad_output into that Linear's per-example gradients; ONE "
          "forward and ONE backward for the whole batch, loss_fn(model(x)).backward() (it also leaves the "
          "batch's gradient in .grad, as a training step does). Inputs may have more dimensions (batch, sequence, "
          "features): sum over the middle ones. A Linear called twice: its gradient is the sum over both "
          "uses. Remove every hook in a finally:; keep nothing across calls; the result is in the model's "
          "dtype and holds no autograd graph"),
    hints=[
        "For a Linear y = a @ W.T + b, example n's gradient of W is the outer product of g[n] and a[n] (shape "
        "out x in), of b it is g[n], with g = grad_output[0] and a the input the forward hook kept: "
        "torch.einsum('no,ni->noi', g, a) gives them all at once.",
        "A Linear called twice fires its forward hook twice, then its backward hook twice in reverse order: "
        "keep a list of inputs per Linear and pop() the last one in the backward hook; add up both uses' "
        "gradients. For (batch, positions, features) inputs reshape to (batch, -1, features) and let einsum "
        "sum over the positions: 'npo,npi->noi'.",
        "Per example: add up the squares of every per-example gradient (grad.flatten(1).pow(2).sum(1)) over "
        "all the Linears' parameters, then take the square root once.",
    ],
    solution=per_sample_norms,
    # an answer that uses torch.func.grad (the way this exercise is not) imports torch._dynamo on its
    # first call, about 2.6 s: its first check must still reach the case that says why it is rejected
    time_limit=5.0,
    equivalent_mutants={
        "number@7: 0 -> -1": "nn.Linear's forward takes one argument: args has one entry, args[-1] is args[0]",
        "number@12: 0 -> -1": "a Linear has one output: grad_output has one entry, grad_output[-1] is grad_output[0]",
        "inplace@29: .pow( -> .pow_(": ("each per-example gradient is read once, here, after the backward: "
                                       "squaring it in place changes nothing that is read later"),
        "inplace@29: .sqrt( -> .sqrt_(": "sqrt_ works on the fresh sum that .sum(0) just made: the same numbers",
    },
    errors={"Cannot use both regular backward hooks and full backward hooks": (
        "a legacy register_backward_hook was attached to this module; use only register_full_backward_hook"),
            "einsum(): the number of subscripts in the equation": (
        "your einsum takes a fixed number of dimensions, and an input may have any number of middle ones "
        "(batch, a, b, features): reshape the input and grad_output[0] to (batch, -1, features) first, so one "
        "equation sums over all the positions")},
    guide="""using `.grad` (the sum over the batch) for every example; the gradients of the mean
    loss; forgetting the bias; adding up one norm per layer instead of one norm over all the layers;
    a dict with one input per Linear, which pairs the second call's input with both gradients of a
    Linear called twice (a list per Linear, popped in reverse order); keeping only the last use's
    gradient; for `(batch, sequence, features)` inputs, squaring each position's gradient separately
    instead of summing over positions first, or an einsum written for 2-D and 3-D inputs only (the
    task admits any number of middle dimensions); `torch.func` or a loop over the examples (right
    numbers, not hooks: the point is one forward and one backward for the batch); the legacy
    `register_backward_hook`; `torch.autograd.grad` instead of `backward()` (the same hooks fire,
    but no `.grad` is added where the task asks for a training step's); `model.zero_grad()` first, which
    loses the caller's accumulated `.grad`; `type(m) is nn.Linear`, which
    skips a subclass of nn.Linear; inputs (or copies of them) kept in a global across calls; inputs
    kept in a list attribute of each Linear, Opacus style, left there after the call; hooks left
    attached when the model raises. The warning "Full backward hook is firing when gradients are
    computed with respect to module outputs since no inputs require gradients" on the first Linear
    is harmless here (only `grad_output` is used).""",
)


# -- the reference: a loop over the examples, torch.autograd.grad on each (no hook) ----------------

def _linear_params(model: nn.Module) -> list[torch.Tensor]:
    return [p for m in model.modules() if isinstance(m, nn.Linear) for p in m.parameters()]


def _per_example_grads(model: nn.Module, x: torch.Tensor, loss_fn: Callable) -> list[list[torch.Tensor]]:
    """For each example, the gradients of its loss with respect to every Linear parameter."""
    params = _linear_params(model)
    return [list(torch.autograd.grad(loss_fn(model(x[n:n + 1])), params)) for n in range(x.shape[0])]


def _norm(grads: list[torch.Tensor]) -> torch.Tensor:
    return torch.sqrt(sum(g.pow(2).sum() for g in grads))


def _mistakes(model: nn.Module, x: torch.Tensor, loss_fn: Callable,
              grads: list[list[torch.Tensor]]) -> dict[str, tuple[torch.Tensor, str]]:
    """What typical mistakes return, each with its nudge."""
    n = x.shape[0]
    params = _linear_params(model)
    batch = [sum(gs[i] for gs in grads) for i in range(len(params))]
    biases = [i for i, p in enumerate(params) if p.dim() == 1]
    layers = [[i for i, p in enumerate(params) if any(p is q for q in m.parameters())]
              for m in model.modules() if isinstance(m, nn.Linear)]
    of_subclasses = [i for i, p in enumerate(params) if not any(
        p is q for m in model.modules() if type(m) is nn.Linear for q in m.parameters())]
    skipped = {"no subclass": (
        torch.stack([_norm([g for i, g in enumerate(gs) if i not in of_subclasses]) for gs in grads]), (
            "a Linear is missing: a subclass of nn.Linear is a Linear too (a user-defined one, a LoRA-style "
            "layer): test isinstance(module, nn.Linear), not type(module) is nn.Linear"))} if of_subclasses else {}
    return skipped | {
        "mean": (torch.stack([_norm(gs) / n for gs in grads]), (
            "that is the gradient of the mean loss, divided by the batch size: the loss is a sum of "
            "per-example losses, and grad_output[0][n] is example n's own gradient as it is")),
        "batch": (_norm(batch).expand(n).clone(), (
            "every example got the batch's gradient (what .grad holds, the sum over examples): compute "
            "one gradient per example from grad_output[0][n] and that example's input")),
        "no bias": (torch.stack([_norm([g for i, g in enumerate(gs) if i not in biases]) for gs in grads]), (
            "the bias is missing: a Linear's per-example gradient of its bias is grad_output[0][n] (summed "
            "over the positions), and it belongs in the norm")),
        "per layer": (torch.stack([sum(_norm([gs[i] for i in layer]) for layer in layers) for gs in grads]), (
            "that adds up one norm per layer: the norm over all the layers together is the square root of "
            "the sum of every squared entry, taken once")),
    }


class _Reference:
    """The right norms and the typical mistakes' results, computed before the answer runs (a hook
    it leaves attached would fire in the reference's own forwards)."""

    def __init__(self, model: nn.Module, x: torch.Tensor, loss_fn: Callable = None) -> None:
        loss_fn = loss_fn or _squares
        grads = _per_example_grads(model, x, loss_fn)
        self.dtype = x.dtype
        self.want = torch.stack([_norm(gs) for gs in grads]).detach()
        self.mistakes = _mistakes(model, x, loss_fn, grads)


def _expect_norms(t: Tester, got: object, ref: _Reference, what: str) -> None:
    want = ref.want
    t.expect_type(got, torch.Tensor, what=what, nudge="return one norm per example, as a 1-D tensor")
    kit.expect_detached(t, got, what=what)
    t.expect(got.dtype == ref.dtype, what=f"{what}.dtype", expected=ref.dtype, got=got.dtype, nudge=(
        "return the norms in the gradients' dtype, the model's: build nothing of your own in another dtype (a "
        "float32 accumulator loses a float64 model's precision)"))
    # the reference adds up the same products in another order: float32 rounding is about 1e-7 of the
    # norm; 1e-4 relative is far below what each mistake changes (the bias alone, a second use: 1e-2 and
    # more here; the mean: a factor of the batch size). float64: 1e-10
    tight = ref.dtype == torch.float64
    t.expect_close(got, want, what=what, atol=1e-12 if tight else 1e-6, rtol=1e-10 if tight else 1e-4,
                   wrong={k: (v.to(want.dtype), nudge) for k, (v, nudge) in ref.mistakes.items()},
                   nudge=("per example: the square root of the sum of the squares of its gradients over every "
                          "Linear's weight and bias. A Linear called twice adds both uses, each computed with its "
                          "own call's input (a list of inputs per Linear, pop() in the backward hook); inputs "
                          "(batch, positions, features) sum each gradient over the positions before squaring"))


def _squares(out: torch.Tensor) -> torch.Tensor:
    return (out - 0.5).pow(2).sum()


def _batch_grads(model: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
    """What the task's ``_squares(model(x)).backward()`` adds to each ``.grad`` (torch.autograd.grad:
    the model's ``.grad`` untouched)."""
    named = list(model.named_parameters())
    grads = torch.autograd.grad(_squares(model(x)), [p for _, p in named])
    return {n: g.detach() for (n, _), g in zip(named, grads)}


def _call(answer: Callable, model: nn.Module, x: torch.Tensor, loss_fn: Callable = _squares) -> object:
    with _quiet():   # the first Linear's input needs no gradient: torch warns, harmlessly
        return answer(model, x, loss_fn)


@exercise.case("a nested model (its Linears inside submodules), a batch of 5")
def _(answer, t: Tester) -> None:
    model = t.track(kit.Nested(seed=1), "the nested model")
    x = kit.randn(5, 4, seed=1)
    ref, before = _Reference(model, x), module_contents(model)
    _expect_norms(t, _call(answer, model, x), ref, "per_sample_norms(nested, x, loss_fn)")
    found = added_to(model, before)
    where, added = found or ("", [])
    t.expect(found is None, what=f"the model's {where} after per_sample_norms", expected="as before",
             got=f"{added} added", nudge=(
                 "leave the model as you found it: an attribute your hooks set on a Linear (a list of its "
                 "inputs, Opacus style) stays on it after the call, empty or not. Keep the inputs in a dict "
                 "made inside per_sample_norms, keyed by the module"))


@exercise.case("a Linear called twice in one forward: its gradient is the sum of both uses")
def _(answer, t: Tester) -> None:
    model = t.track(kit.Twice(seed=2), "a model whose forward calls `block` twice")
    x = kit.randn(4, 4, seed=2)
    ref, one_use = _Reference(model, x), [_one_use_only(model, x, use) for use in (0, 1)]
    got = _call(answer, model, x)
    if isinstance(got, torch.Tensor) and got.shape == (4,):
        for one in one_use:
            t.expect(not torch.allclose(got.detach().to(one.dtype), one, rtol=1e-4, atol=1e-6),
                     what="per_sample_norms(twice, x, loss_fn)", expected="the sum over both uses of `block`",
                     got=got, nudge=("that counts one use of `block` only: a Linear called twice gets two "
                                     "backward-hook calls, and its per-example gradient is the sum of both"))
    _expect_norms(t, got, ref, "per_sample_norms(twice, x, loss_fn)")


def _one_use_only(model: kit.Twice, x: torch.Tensor, use: int) -> torch.Tensor:
    """Per-example norms where `block`'s gradient comes from one of its two calls only (``use``)."""
    w, b = model.block.weight, model.block.bias
    out = []
    for n in range(x.shape[0]):
        params = [(w, b) if use == 0 else (w.detach(), b.detach()), (w, b) if use == 1 else (w.detach(), b.detach())]
        h = torch.tanh(nn.functional.linear(x[n:n + 1], *params[0]))
        loss = _squares(model.out(nn.functional.linear(h, *params[1])))
        out.append(_norm(torch.autograd.grad(loss, [w, b, model.out.weight, model.out.bias])))
    return torch.stack(out).detach()


@exercise.case("inputs of 3 dimensions (batch 3, sequence 5, features 4), then of 4 (batch 2, 3 x 2 positions, "
               "features 4): each example sums over its positions; the second Linear is a subclass of nn.Linear")
def _(answer, t: Tester) -> None:
    with seeded(3):
        model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3))
    model = t.track(_with_sublinear(model, "2"), "a Sequential of two Linears (the second of a subclass)")
    for x in (kit.randn(3, 5, 4, seed=3), kit.randn(2, 3, 2, 4, seed=30)):
        ref = _Reference(model, x)
        shape = "x of shape (" + ", ".join(map(str, x.shape)) + ")"
        _expect_norms(t, _call(answer, model, x), ref, f"per_sample_norms(model, {shape}, loss_fn)")


@exercise.case("float64, a Linear without bias and a LayerNorm whose parameters do not count")
def _(answer, t: Tester) -> None:
    with seeded(4):
        model = nn.Sequential(nn.Linear(4, 5, bias=False), nn.LayerNorm(5), nn.Tanh(), nn.Linear(5, 2))
    with torch.no_grad():   # LayerNorm's parameters away from their 1 and 0: a mistake that counts them shows
        model[1].weight.mul_(3.0).add_(0.5)
        model[1].bias.add_(1.0)
    model, x = kit.in_dtype(model, kit.randn(4, 4, seed=4))
    t.track(model, "a float64 Sequential with a LayerNorm")
    logsumexp = lambda out: torch.logsumexp(out, dim=-1).sum()   # noqa: E731 - another per-example loss
    ref = _Reference(model, x, logsumexp)
    _expect_norms(t, _call(answer, model, x, logsumexp), ref, "per_sample_norms(model, x, loss_fn)")


@exercise.case("a model that raises halfway through its forward: no hook may stay")
def _(answer, t: Tester) -> None:
    model = t.track(kit.Raising(seed=5), "a model that raises halfway (after fc1)")
    with _quiet():
        kit.call_expecting_kit_error(answer, model, kit.randn(3, 4, seed=5), _squares)
    # the Tester reports a hook that stayed (not removed in a finally:) after this case


@exercise.case("the same model three times: the same norms, and no activation kept after a call")
def _(answer, t: Tester) -> None:
    model = t.track(kit.Nested(seed=6), "the nested model")
    x = kit.randn(3, 4, seed=6)
    ref = _Reference(model, x)
    _expect_norms(t, _call(answer, model, x), ref, "the first per_sample_norms(nested, x, loss_fn)")
    x2 = kit.randn(3, 4, seed=6)
    kept = weakref.ref(x2)
    with Created() as created:   # every tensor the calls make
        third = [_call(answer, model, x2) for _ in range(2)][-1]
    _expect_norms(t, third, ref, "the third per_sample_norms(nested, x, loss_fn)")
    del x2, third   # the check lets go of all it got: what is still alive, the answer keeps
    t.expect(kept() is None, what="the input x after per_sample_norms returned", expected="freed",
             got="still referenced", nudge=(
                 "something outside the function keeps the inputs your forward hook stored: keep them in a "
                 "dict made inside per_sample_norms, so that they go when it returns"))
    left = [tuple(k.shape) for k in created.kept(besides=model.parameters())]
    t.expect(not left, what="tensors made during the calls, alive after they returned", expected="none",
             got=f"{len(left)}, of shapes {left[:4]}", nudge=(
                 "something outside the function (a global, a default argument, an attribute) keeps tensors "
                 "from the last call: copies of the inputs, or gradients. Keep nothing across calls: a dict "
                 "made inside per_sample_norms goes when it returns"))


@exercise.case("hooks, not a loop: a forward hook and a full backward hook on each Linear, one forward",
               hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(kit.Twice(seed=7), "a model whose forward calls `block` twice")
    x = kit.randn(3, 4, seed=7)
    ref = _Reference(model, x)
    _halfway_through_a_step(model, kit.randn(2, 4, seed=70))   # the caller's .grad, filled: it must survive
    before, added = _grads(model), _batch_grads(model, x)
    with FullHookWitness({"block": model.block, "out": model.out}) as seen:
        found = kit.LeftAsFound(t, model)
        found.__enter__()
        got = _call(answer, model, x)
    calls = dict(seen.calls)
    t.expect(calls == {"block": 2, "out": 1}, what="how often each Linear ran", expected={"block": 2, "out": 1},
             got=calls, nudge=("run the model once on the whole batch (one forward, one backward): the hooks give "
                               "every example's gradient from that one pass, without a loop over the examples"))
    unhooked = [n for n in calls if seen.fired(n, "forward") + seen.fired(n, "forward_pre") == 0]
    t.expect(not unhooked, what="forward hooks on the Linears while the model ran", expected="yours",
             got=f"none on {', '.join(unhooked)}", nudge=(
                 "the numbers are right, but not from hooks: keep each Linear's input in a forward hook "
                 "and compute the per-example gradients in a full backward hook (torch.func and loops are "
                 "the other ways, not this exercise's)"))
    expect_full_hooks(t, seen)
    _expect_norms(t, got, ref, "per_sample_norms(twice, x, loss_fn)")
    unchanged = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is not None
                 and torch.equal(p.grad, before[n])]
    t.expect(not unchanged, what="the .grad of the model's parameters after per_sample_norms",
             expected="what it held plus the batch's gradient, added by loss.backward()",
             got=f"unchanged on {', '.join(unchanged)}", nudge=(
                 "run the backward as loss_fn(model(x)).backward(), as the task says: it adds the batch's "
                 "gradient to .grad as a training step does (torch.autograd.grad fires the same hooks but "
                 "fills no .grad)"))
    for name, p in model.named_parameters():
        want = before[name] + added[name]
        # the same backward, with and without the answer's hooks (identities for the gradients): 1e-5
        # relative is far below what a lost .grad changes (the whole earlier gradient, of order 1)
        ok = p.grad is not None and p.grad.shape == want.shape and torch.allclose(p.grad, want, rtol=1e-5, atol=1e-7)
        t.expect(ok, what=f"{name}.grad after per_sample_norms", expected=want, got=p.grad, nudge=(
            "leave the caller's .grad as a training step does: loss_fn(model(x)).backward() adds the batch's "
            "gradient to what .grad held (the model may be halfway through a step). Do not zero the caller's "
            "gradients (no model.zero_grad()), before or after"))
    found.expect_as_found()
    expect_input_as_found(t, x, "per_sample_norms(twice, x, loss_fn)")


# -- the wrong answers peculiar to this exercise -------------------------------------------------

_STORE: dict = {}


def _hooked(*, scale="sum", bias=True, combine="all", keep="list", shared="sum", positions="sum",
            register="full", remove="finally", select="isinstance", middle="any"):
    """One factory for the near-copy wrong answers: ``scale`` ("sum", "mean": divided by the batch size,
    "batch": the batch's sum for everyone), ``bias`` (False: forgotten), ``combine`` ("all", "per_layer":
    the layers' norms added up), ``keep`` ("list", "one": one input per Linear), ``shared`` ("sum", "last":
    the last use overwrites), ``positions`` ("sum", "separate": each position's gradient squared apart),
    ``register`` ("full", "legacy"), ``remove`` ("finally", "after", "never"), ``keep`` also "global
    copies" (detached copies in a module-level dict, cleared at the start of the next call) and "attribute"
    (a list of inputs set on each Linear, Opacus style, popped in backward and left there, empty), ``select``
    ("isinstance", "exact": ``type(m) is nn.Linear``), ``middle`` ("any", "one at most": written for 2-D and
    3-D inputs only, an einsum of three subscripts)."""
    def answer(model, x, loss_fn):
        inputs, grads, handles = {}, {}, []
        if keep == "global copies":
            _STORE.clear()

        def keep_input(module, args, output):
            if keep == "one":
                inputs[module] = [args[0]]
            elif keep == "attribute":   # Opacus style: on the module, popped in backward, the list left
                module.activations = getattr(module, "activations", []) + [args[0]]
                inputs[module] = module.activations
            elif keep == "global copies":   # the copy is what backward reads, and stays in _STORE
                _STORE.setdefault(module, []).append(args[0].detach().clone())
                inputs.setdefault(module, []).append(_STORE[module][-1])
            else:
                inputs.setdefault(module, []).append(args[0])

        def backward_hook(module, grad_input, grad_output):
            a = inputs[module][-1] if keep == "one" else inputs[module].pop()
            g = grad_output[0]
            if middle == "one at most":   # (batch, features) gets a middle dimension; (batch, seq, features) is kept
                a, g = (a[:, None], g[:, None]) if a.dim() == 2 else (a, g)
            else:
                a = a.reshape(a.shape[0], -1, a.shape[-1])
                g = g.reshape(g.shape[0], -1, g.shape[-1])
            spec = "npo,npi->npoi" if positions == "separate" else "npo,npi->noi"
            mine = {"weight": torch.einsum(spec, g, a)}
            if bias and module.bias is not None:
                mine["bias"] = g if positions == "separate" else g.sum(1)
            for name, grad in mine.items():
                if scale == "mean":
                    grad = grad / x.shape[0]
                if scale == "batch":
                    grad = grad.sum(0, keepdim=True).expand_as(grad)
                key = (module, name)
                grads[key] = grads[key] + grad if key in grads and shared == "sum" else grad

        for module in model.modules():
            if type(module) is nn.Linear if select == "exact" else isinstance(module, nn.Linear):
                handles.append(module.register_forward_hook(keep_input))
                register_backward = (module.register_full_backward_hook if register == "full"
                                     else module.register_backward_hook)
                handles.append(register_backward(backward_hook))
        if remove == "finally":
            try:
                loss_fn(model(x)).backward()
            finally:
                for handle in handles:
                    handle.remove()
        else:
            loss_fn(model(x)).backward()
            if remove == "after":
                for handle in handles:
                    handle.remove()
        if combine == "per_layer":
            layers: dict[nn.Module, torch.Tensor] = {}
            for (module, _), grad in grads.items():
                layers[module] = layers.get(module, 0) + grad.flatten(1).pow(2).sum(1)
            return sum(s.sqrt() for s in layers.values())
        return torch.stack([grad.flatten(1).pow(2).sum(1) for grad in grads.values()]).sum(0).sqrt()
    return answer


exercise.wrong("the batch's gradient for every example", mentions="batch's gradient")(_hooked(scale="batch"))
exercise.wrong("the gradients of the mean loss", mentions="mean loss")(_hooked(scale="mean"))
exercise.wrong("forgets the bias", mentions="bias is missing")(_hooked(bias=False))
exercise.wrong("one norm per layer, added up", mentions="one norm per layer")(_hooked(combine="per_layer"))
exercise.wrong("keeps only the last use of a Linear called twice", mentions="one use of `block`")(
    _hooked(shared="last"))
exercise.wrong("one input per Linear (a dict, not a list per call)", mentions="its own call's input")(
    _hooked(keep="one"))
exercise.wrong("squares each position's gradient separately", mentions="over the positions")(
    _hooked(positions="separate"))
exercise.wrong("written for 2-D and 3-D inputs only", mentions="any number of middle")(_hooked(middle="one at most"))
exercise.wrong("type(module) is nn.Linear: skips a subclass", mentions="subclass of nn.Linear")(
    _hooked(select="exact"))
exercise.wrong("copies of the inputs kept in a global dict, cleared at the next call",
               mentions="across calls")(_hooked(keep="global copies"))
exercise.wrong("the inputs kept in a list attribute of each Linear, left there (empty)",
               mentions="as you found it")(_hooked(keep="attribute"))
exercise.wrong("removes the hooks, but not in a finally block", mentions="`finally:`")(_hooked(remove="after"))
exercise.wrong("forgets to remove the hooks", mentions="still attached")(_hooked(remove="never"))


@exercise.wrong("torch.func: vmap(grad(...)) over the examples, no hooks", mentions="not from hooks", hidden=True)
def _with_torch_func(model, x, loss_fn):
    from torch.func import functional_call, grad, vmap
    names = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    params = {n: p.detach() for n, p in model.named_parameters()}

    def loss_of_one(params, example):
        return loss_fn(functional_call(model, params, (example.unsqueeze(0),)))

    grads = vmap(grad(loss_of_one), in_dims=(None, 0))(params, x)
    mine = [g for n, g in grads.items() if n.rpartition(".")[0] in names]
    return torch.stack([g.flatten(1).pow(2).sum(1) for g in mine]).sum(0).sqrt()


@exercise.wrong("a loop over the examples, one forward each", mentions="without a loop", hidden=True)
def _loop(model, x, loss_fn):
    return torch.cat([_hooked()(model, x[n:n + 1], loss_fn) for n in range(x.shape[0])])


exercise.wrong("the legacy register_backward_hook", mentions="legacy hook", hidden=True)(_hooked(register="legacy"))


@exercise.wrong("model.zero_grad() first: the caller's accumulated .grad lost", mentions="do not zero",
                hidden=True)
def _zero_grad_first(model, x, loss_fn):
    model.zero_grad()
    return _hooked()(model, x, loss_fn)


@exercise.wrong("torch.autograd.grad instead of loss.backward(): no .grad left",
                mentions="loss_fn(model(x)).backward()", hidden=True)
def _autograd_grad(model, x, loss_fn):
    inputs, grads, handles = {}, {}, []

    def keep_input(module, args, output):
        inputs.setdefault(module, []).append(args[0])

    def per_example(module, grad_input, grad_output):
        a = inputs[module].pop()
        a = a.reshape(a.shape[0], -1, a.shape[-1])
        g = grad_output[0].reshape(a.shape[0], -1, grad_output[0].shape[-1])
        mine = {"weight": torch.einsum("npo,npi->noi", g, a)}
        if module.bias is not None:
            mine["bias"] = g.sum(1)
        for name, value in mine.items():
            grads[module, name] = grads[module, name] + value if (module, name) in grads else value

    try:
        for module in model.modules():
            if isinstance(module, nn.Linear):
                handles += [module.register_forward_hook(keep_input),
                            module.register_full_backward_hook(per_example)]
        loss = loss_fn(model(x))
        torch.autograd.grad(loss, [p for p in model.parameters() if p.requires_grad])
    finally:
        for handle in handles:
            handle.remove()
    return torch.stack([g.flatten(1).pow(2).sum(1) for g in grads.values()]).sum(0).sqrt()
