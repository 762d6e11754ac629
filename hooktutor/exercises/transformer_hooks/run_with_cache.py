"""10_transformer_hooks, exercise: run a model once and cache a copy of what the named modules output,
a step beyond the lesson's demo: a module that returns a tuple (``nn.MultiheadAttention``) is
cached as its first element, and a module that never runs (``self_attn.out_proj``) is left out.

Half-right answers an examiner expects, by kit dimension (``kit.DIMENSIONS``):

- inplace_after, alias: stores ``output.detach()`` without a copy: the in-place ReLU right after
  the layer, or the residual ``out += h`` after it, overwrites what was stored; the same for a
  tuple, ``output[0].detach()`` (a hand-written block that adds its input to the attention's
  output in place, ``a += x``, overwrites it), while tensor outputs are copied;
- nested: looks modules up with ``getattr(model, name)`` or ``named_children()`` (dotted names
  are nested: ``model.get_submodule(name)``);
- technique: records in forward *pre*-hooks (the inputs); a lambda in a loop (every hook
  stores under the last name);
- raises: removes the hooks after the call instead of in ``finally:``;
- detached: ``clone()`` without ``detach()`` (the cache keeps the autograd graph alive);
- repeat: a cache kept outside the function (a second run with other names still holds the
  first run's entries; or, emptied at each call, the first run's cache becomes the second's);
  runs the model twice, once to cache and once for the logits;
- left_as_found: switches the model to ``eval()`` (or ``train()``) and leaves it so;
- dtype: the residual model runs in float64.

- technique (beyond the demo): ``output.detach()`` on a tuple (the hook raises); the whole tuple
  cached, or its second element (``None`` for the weights); a ``None`` entry, or the module's
  weight, for a module that never ran.

Not used: twice (which call of a module called twice the cache holds is not what the task asks).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from ...data import first_token
from ...models import seeded
from .. import kit
from ..core import Exercise, Tester, learners_hooks
from ._shared import _outputs, _tiny


def run_with_cache(model, tokens, names):
    """(model(tokens), {name: a detached copy of that module's output})."""
    ### BEGIN SOLUTION
    cache = {}

    def keep(name):
        def hook(module, args, output):
            # nn.MultiheadAttention returns a tuple: its first element is the output
            first = output[0] if isinstance(output, tuple) else output
            cache[name] = first.detach().clone()
        return hook

    handles = [model.get_submodule(name).register_forward_hook(keep(name)) for name in names]
    try:
        logits = model(tokens)
    finally:
        for handle in handles:
            handle.remove()
    return logits, cache
    ### END SOLUTION


def _pair(answer_result: object, t: Tester, what: str) -> tuple:
    t.expect_type(answer_result, tuple, what=what, nudge="return the pair (logits, cache)")
    t.expect(len(answer_result) == 2, what=f"len({what})", expected=2, got=len(answer_result),
             nudge="return the pair (logits, cache)")
    return answer_result


_NESTED = ("a dotted name is a module inside a module: look it up with model.get_submodule(name) "
           "(named_children() and getattr(model, name) only know the top level)")


exercise = Exercise(
    "transformer_hooks.run_with_cache", "Cache every block's output",
    task=("write run_with_cache(model, tokens, names) that runs model(tokens) once with a forward hook on each "
          "module named in `names` (dotted names such as 'blocks.0'), keeps a detached copy of each one's "
          "output in a dict name -> tensor (for a module that returns a tuple, as nn.MultiheadAttention does, "
          "its first element; a module that does not run during model(tokens) gets no entry), removes every "
          "hook (also when the model raises) and returns (logits, cache)"),
    hints=[
        "model.get_submodule('blocks.0') finds a module by its dotted name, at any depth.",
        "Make one hook per name with a function that takes the name and returns the hook (a lambda in a "
        "loop would see only the last name): def keep(name): def hook(module, args, output): ...",
        "Store output.detach().clone(): detach() alone shares memory with the output, which a later in-place "
        "op (ReLU(inplace=True), +=) overwrites. Remove the handles in a finally: around model(tokens).",
        "A tuple output: take output[0] first (isinstance(output, tuple)). A module that never runs never "
        "calls its hook, so nothing needs doing for it: do not fill the cache in advance.",
    ],
    solution=run_with_cache,
    answer_name="run_with_cache",
    errors={"encoder.body.0": _NESTED, "blocks.0": _NESTED,
            "'tuple' object has no attribute": "nn.MultiheadAttention returns a tuple (attn_output, attn_weights): "
                                               "cache output[0] when isinstance(output, tuple)"},
    guide="""storing `output.detach()` without a copy (the in-place ReLU after the layer overwrites it);
    looking modules up with `getattr(model, name)` or `named_children()` (dotted names are
    nested: `model.get_submodule(name)`); a lambda in a loop (every hook stores under the
    last name); hooks removed after the call instead of in `finally:`; recording in forward
    *pre*-hooks (the inputs); `clone()` without `detach()` (the cache keeps the autograd
    graph alive); switching the model to `eval()` and leaving it so; one cache dict kept
    outside and emptied at each call (the clean run's cache becomes the corrupted run's);
    running the model twice, once to cache and once for the logits; beyond the demo: calling
    `.detach()` on `self_attn`'s tuple, caching the tuple or its `None` weights, and a `None`
    entry for `out_proj`, which never runs.""",
)


_ROOT = "<the model>"   # the witness's name for the model itself (no module path has angle brackets)


def _cache_case(answer: Callable, t: Tester, model: nn.Module, tokens: torch.Tensor, names: list[str],
                what: str, after: Callable[[], None] | None = None) -> dict:
    want_logits, want = _outputs(model, tokens, names)
    t.track(model)
    with kit.HookWitness([*((n, model.get_submodule(n)) for n in names), (_ROOT, model)]) as witness:
        logits, cache = _pair(answer(model, tokens, list(names)), t, what)
    if after is not None:
        after()
    t.expect(witness.calls[_ROOT] == 1, what="calls of model(tokens) during your answer", expected=1,
             got=witness.calls[_ROOT], nudge=(
                 "run the model once, with the hooks attached, and return the logits of that run: the cache must "
                 "belong to the logits (a model with dropout or state gives other activations in another run)"))
    t.expect_type(cache, dict, what="the cache", nudge="a dict name -> tensor")
    never_ran = sorted(set(names) - set(want))
    t.expect(not set(never_ran) & set(cache), what="the names in the cache", expected=sorted(want),
             got=sorted(cache), nudge=(f"{', '.join(never_ran)} never ran during model(tokens), so it has no output: "
                                       "leave it out of the cache (its hook is never called; fill nothing in advance)"))
    t.expect(sorted(cache) == sorted(want), what="the names in the cache", expected=sorted(want),
             got=sorted(cache), nudge="one entry per name asked for, under that exact (dotted) name")
    for name in want:
        t.expect(witness.fired(name, "forward") >= 1, what=f"a forward hook on {name} while the model ran",
                 expected="one of yours", got="none", nudge=(
                     "record the outputs with forward hooks on the modules (module.register_forward_hook) during "
                     "one call of model(tokens)"))
        t.expect_type(cache[name], torch.Tensor, what=f"cache[{name!r}]", nudge=(
            "a tensor: for a module that returns a tuple (nn.MultiheadAttention), its first element, output[0]"))
        t.expect_close(cache[name], want[name], what=f"cache[{name!r}]", nudge=(
            f"cache[{name!r}] should be what {name} output during model(tokens): a copy, "
            "output.detach().clone(), taken in a forward hook"))
    t.expect_close(logits, want_logits, what="the logits", nudge="return what model(tokens) returned")
    return cache


@exercise.case("a TinyTransformer: embed, blocks.0 and blocks.1 (outputs of shape (N, 6, 32))")
def _(answer, t: Tester) -> None:
    model = _tiny(3)
    tokens, _ = first_token(8, seed=3)
    _cache_case(answer, t, model, tokens, ["embed", "blocks.0", "blocks.1"], "run_with_cache(model, ...)")


@exercise.case("a model whose in-place ReLU overwrites the cached layer's output right after it")
def _(answer, t: Tester) -> None:
    model = kit.InplaceAfter(seed=4)
    x = kit.randn(6, 3, seed=4)
    nudge_copy = ("the ReLU(inplace=True) after lin overwrote what you stored: keep output.detach().clone(), a "
                  "copy; detach() alone shares memory with the output")
    want = model.lin.forward(x).detach().clone()
    overwritten = torch.relu(want)
    t.track(model)
    logits, cache = _pair(answer(model, x, ["lin"]), t, "run_with_cache(model, x, ['lin'])")
    t.expect_type(cache, dict, what="the cache", nudge="a dict name -> tensor")
    t.expect("lin" in cache, what="the names in the cache", expected=["lin"], got=sorted(cache),
             nudge="one entry per name asked for")
    t.expect_close(cache["lin"], want, what="cache['lin']", nudge=nudge_copy,
                   wrong={"overwritten": (overwritten, nudge_copy)})


@exercise.case("a nested model: encoder.body.0, encoder.act and head")
def _(answer, t: Tester) -> None:
    model = kit.Nested(seed=5)
    _cache_case(answer, t, model, kit.randn(4, 4, seed=5), ["encoder.body.0", "encoder.act", "head"],
                "run_with_cache(nested, ...)")


@exercise.case("a model that raises halfway: no hook may stay")
def _(answer, t: Tester) -> None:
    model = t.track(kit.Raising(seed=6), "a model that raises halfway (after fc1)")
    kit.call_expecting_kit_error(answer, model, torch.zeros(1, 4), ["fc1"])
    left = [r.path for r in learners_hooks(model)]
    t.expect(not left, what="hooks left on the model after it raised", expected="none", got=left, nudge=(
        "model(tokens) raised, and your hooks stayed attached: remove every handle in the `finally:` of a "
        "try: around model(tokens)"))


@exercise.case("a TinyTransformer: blocks.0.self_attn (a tuple), blocks.1, and blocks.0.self_attn.out_proj "
               "(never called)")
def _(answer, t: Tester) -> None:
    model = _tiny(9)
    tokens, _ = first_token(4, seed=9)
    _cache_case(answer, t, model, tokens, ["blocks.0.self_attn", "blocks.1", "blocks.0.self_attn.out_proj"],
                "run_with_cache(model, tokens, ['blocks.0.self_attn', 'blocks.1', 'blocks.0.self_attn.out_proj'])")


class _AttnAddsInPlace(nn.Module):
    """Dimension ``alias`` for a tuple output: a hand-written block that adds its input to the
    attention's output in place (``a += x``), after ``attn``'s forward hooks ran. It keeps that output
    (``attn_output``, the tensor itself) so that the check can see whether a cached tensor shares its
    memory. Input ``(N, L, 8)``, output ``(N, L, 3)``."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        with seeded(seed):
            self.attn = nn.MultiheadAttention(8, 2, batch_first=True)
            self.head = nn.Linear(8, 3)
        self.attn_output: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, _ = self.attn(x, x, x, need_weights=False)
        self.attn_output = a
        a += x  # in place: writes into what attn returned
        return self.head(a)


@exercise.case("a block that adds its input in place to what its nn.MultiheadAttention returned (a += x)")
def _(answer, t: Tester) -> None:
    model = _AttnAddsInPlace(seed=10)
    x = kit.randn(2, 5, 8, seed=10)
    want = _outputs(model, x, ["attn"])[1]["attn"]
    t.track(model)
    logits, cache = _pair(answer(model, x, ["attn"]), t, "run_with_cache(block, x, ['attn'])")
    t.expect_type(cache, dict, what="the cache", nudge="a dict name -> tensor")
    t.expect("attn" in cache, what="the names in the cache", expected=["attn"], got=sorted(cache),
             nudge="one entry per name asked for")
    t.expect_type(cache["attn"], torch.Tensor, what="cache['attn']", nudge=(
        "a tensor: for a module that returns a tuple (nn.MultiheadAttention), its first element, output[0]"))
    nudge_copy = ("the block's `a += x` wrote into attn's output after your hook ran, and what you stored shares "
                  "its memory: store output[0].detach().clone(), a copy (detach() alone shares memory with the "
                  "output, for a tuple's element as for a tensor)")
    shares = cache["attn"].untyped_storage().data_ptr() == model.attn_output.untyped_storage().data_ptr()
    t.expect(not shares, what="the memory of cache['attn']", expected="a copy of its own",
             got="the memory of attn's output", nudge=nudge_copy)
    t.expect_close(cache["attn"], want, what="cache['attn']", nudge=nudge_copy)


@exercise.case("the cached tensors hold no autograd graph (a cache kept for long must not hold it)",
                     hidden=True)
def _(answer, t: Tester) -> None:
    model = _tiny(7)
    tokens, _ = first_token(4, seed=7)
    cache = _cache_case(answer, t, model, tokens, ["blocks.1"], "run_with_cache(model, ...)")
    t.expect(not cache["blocks.1"].requires_grad, what="cache['blocks.1'].requires_grad", expected=False,
             got=True, nudge=("detach() the copy: output.detach().clone(). A clone() alone stays in the autograd "
                              "graph and keeps every activation of the forward alive with it"))


@exercise.case("a residual model in float64 and train mode (its body's output is added to in place), "
               "cached twice in a row with other names", hidden=True)
def _(answer, t: Tester) -> None:
    model, x = kit.in_dtype(kit.Residual(seed=8).train(), kit.randn(3, 4, seed=8))
    with kit.LeftAsFound(t, model):
        first = _cache_case(answer, t, model, x, ["fc", "body"], "run_with_cache(residual, x, ['fc', 'body'])")
    kept = {name: value.clone() for name, value in first.items()}
    _cache_case(answer, t, model, x, ["body"], "run_with_cache(residual, x, ['body']), run again")
    t.expect(sorted(first) == ["body", "fc"] and all(torch.equal(first[n], kept[n]) for n in kept),
             what="the first call's cache after the second call", expected=sorted(kept), got=sorted(first), nudge=(
                 "each call returns a cache of its own: make the dict inside run_with_cache. One dict kept outside "
                 "is emptied or overwritten by the next call, so a clean run's cache becomes the corrupted run's"))


def _first(output):
    return output[0] if isinstance(output, tuple) else output


def _hooked(model, tokens, names, store):
    handles = [model.get_submodule(n).register_forward_hook(store(n)) for n in names]
    try:
        return model(tokens)
    finally:
        for h in handles:
            h.remove()


@exercise.wrong("stores output.detach() without a copy", mentions="detach() alone shares memory")
def _cache_no_clone(model, tokens, names):
    cache = {}
    logits = _hooked(model, tokens, names, lambda n: lambda m, a, o: cache.__setitem__(n, o.detach()))
    return logits, cache


@exercise.wrong("copies a tensor output, but stores a tuple's output[0].detach() without a copy",
                mentions="for a tuple's element")
def _cache_tuple_no_clone(model, tokens, names):
    cache = {}

    def store(n):
        def hook(m, a, o):
            cache[n] = o[0].detach() if isinstance(o, tuple) else o.detach().clone()
        return hook

    return _hooked(model, tokens, names, store), cache


@exercise.wrong("looks modules up with getattr (top level only)", mentions="get_submodule")
def _cache_getattr(model, tokens, names):
    cache = {}
    handles = [getattr(model, n).register_forward_hook(lambda m, a, o, n=n: cache.__setitem__(n, o.detach().clone()))
               for n in names]
    try:
        return model(tokens), cache
    finally:
        for h in handles:
            h.remove()


@exercise.wrong("a lambda in a loop: every hook stores under the last name", mentions="one entry per name")
def _cache_late_binding(model, tokens, names):
    cache = {}
    handles = []
    for name in names:
        handles.append(model.get_submodule(name).register_forward_hook(
            lambda m, a, o: cache.__setitem__(name, o.detach().clone())))
    try:
        return model(tokens), cache
    finally:
        for h in handles:
            h.remove()


@exercise.wrong("removes the hooks after the call, not in finally:", mentions="finally:")
def _cache_no_finally(model, tokens, names):
    cache = {}
    handles = [model.get_submodule(n).register_forward_hook(
        lambda m, a, o, n=n: cache.__setitem__(n, o.detach().clone())) for n in names]
    logits = model(tokens)
    for h in handles:
        h.remove()
    return logits, cache


@exercise.wrong("records in forward pre-hooks (the inputs, not the outputs)", mentions="forward hooks")
def _cache_pre_hooks(model, tokens, names):
    cache = {}
    handles = [model.get_submodule(n).register_forward_pre_hook(
        lambda m, args, n=n: cache.__setitem__(n, args[0].detach().clone())) for n in names]
    try:
        return model(tokens), cache
    finally:
        for h in handles:
            h.remove()


@exercise.wrong("clone() without detach()", mentions="detach() the copy", hidden=True)
def _cache_no_detach(model, tokens, names):
    cache = {}
    logits = _hooked(model, tokens, names, lambda n: lambda m, a, o: cache.__setitem__(n, _first(o).clone()))
    return logits, cache


@exercise.wrong("switches the model to eval() and leaves it so", mentions="as you found it", hidden=True)
def _cache_eval(model, tokens, names):
    model.eval()
    cache = {}
    logits = _hooked(model, tokens, names, lambda n: lambda m, a, o: cache.__setitem__(n, _first(o).detach().clone()))
    return logits, cache


_ONE_CACHE: dict = {}


@exercise.wrong("one cache dict kept outside, emptied at each call", mentions="a cache of its own", hidden=True)
def _cache_shared(model, tokens, names):
    _ONE_CACHE.clear()
    logits = _hooked(model, tokens, names,
                     lambda n: lambda m, a, o: _ONE_CACHE.__setitem__(n, _first(o).detach().clone()))
    return logits, _ONE_CACHE


@exercise.wrong("runs the model twice: once to cache, once for the logits", mentions="run the model once")
def _cache_two_runs(model, tokens, names):
    cache = {}
    _hooked(model, tokens, names, lambda n: lambda m, a, o: cache.__setitem__(n, o.detach().clone()))
    return model(tokens), cache


@exercise.wrong("calls output.detach() on a tuple", mentions="cache output[0]")
def _cache_tuple_detach(model, tokens, names):
    cache = {}
    logits = _hooked(model, tokens, names, lambda n: lambda m, a, o: cache.__setitem__(n, o.detach().clone()))
    return logits, cache


@exercise.wrong("caches the whole tuple", mentions="its first element")
def _cache_whole_tuple(model, tokens, names):
    cache = {}

    def store(n):
        def hook(m, a, o):
            cache[n] = tuple(x.detach().clone() if isinstance(x, torch.Tensor) else x for x in o) \
                if isinstance(o, tuple) else o.detach().clone()
        return hook

    return _hooked(model, tokens, names, store), cache


@exercise.wrong("fills the cache in advance (None for a module that never runs)", mentions="never ran")
def _cache_prefilled(model, tokens, names):
    cache = dict.fromkeys(names)

    def store(n):
        def hook(m, a, o):
            cache[n] = (o[0] if isinstance(o, tuple) else o).detach().clone()
        return hook

    return _hooked(model, tokens, names, store), cache
