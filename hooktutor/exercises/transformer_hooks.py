"""Exercises of ``10_transformer_hooks.ipynb``: looking inside a transformer with plain hooks.

* :data:`run_with_cache` — run a model once and keep a copy of what the named modules output.
* :data:`patch_run` — activation patching: one module's output at one position taken from
  another run.
* :data:`steer` — add a steering vector to a module's output, also when that output is a tuple
  (``nn.MultiheadAttention``).
* :data:`fast_path` — predict, then run: which forward hooks fire on a ``TransformerEncoderLayer``
  in eval mode under ``torch.inference_mode()``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from ..data import corrupt_first, first_token
from ..inventory import list_hooks
from ..models import TinyTransformer, seeded
from . import kit
from .core import Exercise, Tester
from .predict import Prediction

# DIMENSIONS (kit.py) that apply here: nested (dotted names: blocks.0.self_attn, encoder.body.0),
# raises (a model that raises: every hook must still go), nd (block outputs are (N, L, width)),
# inplace_after (an in-place ReLU right after a cached layer), technique (the hooks were attached
# while the model ran: HookWitness).


def _tiny(seed: int) -> TinyTransformer:
    return TinyTransformer(seed=seed).eval()


def _outputs(model: nn.Module, tokens: torch.Tensor, names: list[str]) -> tuple[torch.Tensor, dict]:
    """The check's own run: the logits and a copy of each named module's output."""
    kept: dict[str, torch.Tensor] = {}
    handles = [model.get_submodule(n).register_forward_hook(
        lambda m, a, o, n=n: kept.__setitem__(n, o.detach().clone())) for n in names]
    try:
        logits = model(tokens).detach()
    finally:
        for h in handles:
            h.remove()
    return logits, kept


def _with_hook(model: nn.Module, tokens: torch.Tensor, module: nn.Module, hook: Callable) -> torch.Tensor:
    with module.register_forward_hook(hook):
        return model(tokens).detach()


def _pair(answer_result: object, t: Tester, what: str) -> tuple:
    t.expect_type(answer_result, tuple, what=what, nudge="return the pair (logits, cache)")
    t.expect(len(answer_result) == 2, what=f"len({what})", expected=2, got=len(answer_result),
             nudge="return the pair (logits, cache)")
    return answer_result


# --------------------------------------------------------------------------------------
# 1. run_with_cache
# --------------------------------------------------------------------------------------

def _run_with_cache_solution(model: nn.Module, tokens: torch.Tensor, names: list[str]):
    cache = {}

    def keep(name):
        def hook(module, args, output):
            cache[name] = output.detach().clone()
        return hook

    handles = [model.get_submodule(name).register_forward_hook(keep(name)) for name in names]
    try:
        logits = model(tokens)
    finally:
        for handle in handles:
            handle.remove()
    return logits, cache


_NESTED = ("a dotted name is a module inside a module: look it up with model.get_submodule(name) "
           "(named_children() and getattr(model, name) only know the top level)")

run_with_cache = Exercise(
    "transformer_hooks.run_with_cache", "Cache every block's output",
    task=("write run_with_cache(model, tokens, names) that runs model(tokens) once with a forward hook on "
          "each module named in `names` (dotted names such as 'blocks.0'), keeps a detached copy of each "
          "one's output in a dict name -> tensor, removes every hook (also when the model raises) and "
          "returns (logits, cache)"),
    hints=[
        "model.get_submodule('blocks.0') finds a module by its dotted name, at any depth.",
        "Make one hook per name with a function that takes the name and returns the hook (a lambda in a "
        "loop would see only the last name): def keep(name): def hook(module, args, output): ...",
        "Store output.detach().clone(): detach() alone shares memory with the output, which a later in-place "
        "op (ReLU(inplace=True), +=) overwrites. Remove the handles in a finally: around model(tokens).",
    ],
    solution=_run_with_cache_solution,
    answer_name="run_with_cache",
    errors={"encoder.body.0": _NESTED, "blocks.0": _NESTED},
)


def _cache_case(answer: Callable, t: Tester, model: nn.Module, tokens: torch.Tensor, names: list[str],
                what: str, after: Callable[[], None] | None = None) -> dict:
    want_logits, want = _outputs(model, tokens, names)
    t.track(model)
    with kit.HookWitness([(n, model.get_submodule(n)) for n in names]) as witness:
        logits, cache = _pair(answer(model, tokens, list(names)), t, what)
    if after is not None:
        after()
    t.expect_type(cache, dict, what="the cache", nudge="a dict name -> tensor")
    t.expect(sorted(cache) == sorted(names), what="the names in the cache", expected=sorted(names),
             got=sorted(cache), nudge="one entry per name asked for, under that exact (dotted) name")
    for name in names:
        t.expect(witness.fired(name, "forward") >= 1, what=f"a forward hook on {name} while the model ran",
                 expected="one of yours", got="none", nudge=(
                     "record the outputs with forward hooks on the modules (module.register_forward_hook) during "
                     "one call of model(tokens)"))
        t.expect_close(cache[name], want[name], what=f"cache[{name!r}]", nudge=(
            f"cache[{name!r}] should be what {name} output during model(tokens): a copy, "
            "output.detach().clone(), taken in a forward hook"))
    t.expect_close(logits, want_logits, what="the logits", nudge="return what model(tokens) returned")
    return cache


@run_with_cache.case("a TinyTransformer: embed, blocks.0 and blocks.1 (outputs of shape (N, 6, 32))")
def _(answer, t: Tester) -> None:
    model = _tiny(3)
    tokens, _ = first_token(8, seed=3)
    _cache_case(answer, t, model, tokens, ["embed", "blocks.0", "blocks.1"], "run_with_cache(model, ...)")


@run_with_cache.case("a model whose in-place ReLU overwrites the cached layer's output right after it")
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


@run_with_cache.case("a nested model: encoder.body.0, encoder.act and head")
def _(answer, t: Tester) -> None:
    model = kit.Nested(seed=5)
    _cache_case(answer, t, model, kit.randn(4, 4, seed=5), ["encoder.body.0", "encoder.act", "head"],
                "run_with_cache(nested, ...)")


@run_with_cache.case("a model that raises halfway: no hook may stay")
def _(answer, t: Tester) -> None:
    model = t.track(kit.Raising(seed=6), "a model that raises halfway (after fc1)")
    kit.call_expecting_kit_error(answer, model, torch.zeros(1, 4), ["fc1"])
    left = [r.path for r in list_hooks(model, include_global=False) if not r.is_pytorch]
    t.expect(not left, what="hooks left on the model after it raised", expected="none", got=left, nudge=(
        "model(tokens) raised, and your hooks stayed attached: remove every handle in the `finally:` of a "
        "try: around model(tokens)"))


@run_with_cache.case("the cached tensors hold no autograd graph (a cache kept for long must not hold it)",
                     hidden=True)
def _(answer, t: Tester) -> None:
    model = _tiny(7)
    tokens, _ = first_token(4, seed=7)
    cache = _cache_case(answer, t, model, tokens, ["blocks.1"], "run_with_cache(model, ...)")
    t.expect(not cache["blocks.1"].requires_grad, what="cache['blocks.1'].requires_grad", expected=False,
             got=True, nudge=("detach() the copy: output.detach().clone(). A clone() alone stays in the autograd "
                              "graph and keeps every activation of the forward alive with it"))


# Half-right answers (DIMENSIONS: nested, raises, inplace_after, technique): detach() without
# clone() (the in-place ReLU overwrites it); top-level names only (getattr); a lambda in a loop
# (every hook stores under the last name); hooks removed after the call, not in finally; no
# detach, clone only (hidden: the copy drags the autograd graph along).

def _hooked(model, tokens, names, store):
    handles = [model.get_submodule(n).register_forward_hook(store(n)) for n in names]
    try:
        return model(tokens)
    finally:
        for h in handles:
            h.remove()


@run_with_cache.wrong("stores output.detach() without a copy", mentions="detach() alone shares memory")
def _cache_no_clone(model, tokens, names):
    cache = {}
    logits = _hooked(model, tokens, names, lambda n: lambda m, a, o: cache.__setitem__(n, o.detach()))
    return logits, cache


@run_with_cache.wrong("looks modules up with getattr (top level only)", mentions="get_submodule")
def _cache_getattr(model, tokens, names):
    cache = {}
    handles = [getattr(model, n).register_forward_hook(lambda m, a, o, n=n: cache.__setitem__(n, o.detach().clone()))
               for n in names]
    try:
        return model(tokens), cache
    finally:
        for h in handles:
            h.remove()


@run_with_cache.wrong("a lambda in a loop: every hook stores under the last name", mentions="one entry per name")
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


@run_with_cache.wrong("removes the hooks after the call, not in finally:", mentions="finally:")
def _cache_no_finally(model, tokens, names):
    cache = {}
    handles = [model.get_submodule(n).register_forward_hook(
        lambda m, a, o, n=n: cache.__setitem__(n, o.detach().clone())) for n in names]
    logits = model(tokens)
    for h in handles:
        h.remove()
    return logits, cache


@run_with_cache.wrong("records in forward pre-hooks (the inputs, not the outputs)", mentions="forward hooks")
def _cache_pre_hooks(model, tokens, names):
    cache = {}
    handles = [model.get_submodule(n).register_forward_pre_hook(
        lambda m, args, n=n: cache.__setitem__(n, args[0].detach().clone())) for n in names]
    try:
        return model(tokens), cache
    finally:
        for h in handles:
            h.remove()


@run_with_cache.wrong("clone() without detach()", mentions="detach() the copy", hidden=True)
def _cache_no_detach(model, tokens, names):
    cache = {}
    logits = _hooked(model, tokens, names, lambda n: lambda m, a, o: cache.__setitem__(n, o.clone()))
    return logits, cache


# --------------------------------------------------------------------------------------
# 2. patch_run
# --------------------------------------------------------------------------------------

def _patch_run_solution(model: nn.Module, tokens: torch.Tensor, module: nn.Module, position: int,
                        clean_output: torch.Tensor):
    def patch(mod, args, output):
        patched = output.clone()
        patched[:, position] = clean_output[:, position]
        return patched

    handle = module.register_forward_hook(patch)
    try:
        return model(tokens)
    finally:
        handle.remove()


patch_run = Exercise(
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
    solution=_patch_run_solution,
    answer_name="patch_run",
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


@patch_run.case("a TinyTransformer's blocks.0 at position 2, the corrupted run's first token changed")
def _(answer, t: Tester) -> None:
    _patch_case(answer, t, seed=10, name="blocks.0", position=2)


@patch_run.case("the embedding (embed) at position 0")
def _(answer, t: Tester) -> None:
    _patch_case(answer, t, seed=11, name="embed", position=0)


@patch_run.case("a model that raises halfway: the hook must go")
def _(answer, t: Tester) -> None:
    model = t.track(kit.Raising(seed=12), "a model that raises halfway (after fc1)")
    kit.call_expecting_kit_error(answer, model, torch.zeros(2, 4), model.fc1, 1, torch.ones(2, 4))
    left = [r.path for r in list_hooks(model, include_global=False) if not r.is_pytorch]
    t.expect(not left, what="hooks left on the model after it raised", expected="none", got=left, nudge=(
        "model(tokens) raised, and your hook stayed attached: remove the handle in the `finally:` of a try: "
        "around model(tokens)"))


@patch_run.case("the last position, given as -1", hidden=True)
def _(answer, t: Tester) -> None:
    _patch_case(answer, t, seed=13, name="blocks.1", position=-1)


# Half-right answers (DIMENSIONS: nd, raises, technique): patches every position; rebinds
# `output` in the hook and returns nothing; patches dimension 0 (the batch); removes the hook
# without finally (hidden: a slice position:position + 1, empty for -1).

def _hook_run(model, tokens, module, hook):
    handle = module.register_forward_hook(hook)
    try:
        return model(tokens)
    finally:
        handle.remove()


@patch_run.wrong("patches every position", mentions="every position was patched")
def _patch_all(model, tokens, module, position, clean_output):
    return _hook_run(model, tokens, module, lambda m, a, o: clean_output.clone())


@patch_run.wrong("rebinds `output` in the hook and returns nothing", mentions="return the patched tensor")
def _patch_rebind(model, tokens, module, position, clean_output):
    def patch(mod, args, output):
        output = output.clone()
        output[:, position] = clean_output[:, position]
    return _hook_run(model, tokens, module, patch)


@patch_run.wrong("patches dimension 0, the batch", mentions="dimension 0 is the batch")
def _patch_batch(model, tokens, module, position, clean_output):
    def patch(mod, args, output):
        out = output.clone()
        out[position] = clean_output[position]
        return out
    return _hook_run(model, tokens, module, patch)


@patch_run.wrong("removes the hook after the call, not in finally:", mentions="finally:")
def _patch_no_finally(model, tokens, module, position, clean_output):
    def patch(mod, args, output):
        out = output.clone()
        out[:, position] = clean_output[:, position]
        return out
    handle = module.register_forward_hook(patch)
    logits = model(tokens)
    handle.remove()
    return logits


@patch_run.wrong("patches the slice position:position + 1 (empty for -1)", mentions="the unpatched run",
                 hidden=True)
def _patch_slice(model, tokens, module, position, clean_output):
    def patch(mod, args, output):
        out = output.clone()
        out[:, position:position + 1] = clean_output[:, position:position + 1]
        return out
    return _hook_run(model, tokens, module, patch)


# --------------------------------------------------------------------------------------
# 3. steer
# --------------------------------------------------------------------------------------

def _steer_solution(model: nn.Module, tokens: torch.Tensor, module: nn.Module, vector: torch.Tensor):
    def add(mod, args, output):
        if isinstance(output, tuple):  # nn.MultiheadAttention: (attn_output, attn_weights)
            return (output[0] + vector, *output[1:])
        return output + vector

    handle = module.register_forward_hook(add)
    try:
        return model(tokens)
    finally:
        handle.remove()


_TUPLE = ("this module returns a tuple (nn.MultiheadAttention returns (attn_output, attn_weights), and the "
          "weights are None when need_weights=False): add the vector to output[0] and return a tuple, "
          "(output[0] + vector, *output[1:])")

steer = Exercise(
    "transformer_hooks.steer", "Add a steering vector",
    task=("write steer(model, tokens, module, vector) that runs model(tokens) with a forward hook on `module` "
          "that adds `vector` to its output at every position; when the module returns a tuple (as "
          "nn.MultiheadAttention does), add it to the first element and return a tuple with the rest unchanged. "
          "Remove the hook (also when the model raises) and return the logits"),
    hints=[
        "A forward hook that returns a value replaces the module's output: return output + vector.",
        "`vector` has the shape (width,): broadcasting adds it at every position of an (N, L, width) output.",
        "blocks.0.self_attn returns (attn_output, attn_weights) and the layer reads element [0] of what you "
        "return: return (output[0] + vector, *output[1:]), a tuple again.",
    ],
    solution=_steer_solution,
    answer_name="steer",
    errors={"can only concatenate tuple": _TUPLE, "'NoneType' and 'Tensor'": _TUPLE},
)


def _steer_case(answer: Callable, t: Tester, seed: int, name: str, scale: float) -> None:
    model = _tiny(seed)
    tokens, _ = first_token(6, seed=seed)
    module = model.get_submodule(name)
    vector = kit.randn(32, seed=seed, scale=scale)

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


@steer.case("a TinyTransformer steered at blocks.0 (a tensor output)")
def _(answer, t: Tester) -> None:
    _steer_case(answer, t, seed=20, name="blocks.0", scale=1.0)


@steer.case("steered at blocks.1.self_attn, whose output is a tuple (attn_output, None)")
def _(answer, t: Tester) -> None:
    _steer_case(answer, t, seed=21, name="blocks.1.self_attn", scale=1.0)


@steer.case("a model that raises halfway: the hook must go")
def _(answer, t: Tester) -> None:
    model = t.track(kit.Raising(seed=22), "a model that raises halfway (after fc1)")
    kit.call_expecting_kit_error(answer, model, torch.zeros(2, 4), model.fc1, torch.ones(4))
    left = [r.path for r in list_hooks(model, include_global=False) if not r.is_pytorch]
    t.expect(not left, what="hooks left on the model after it raised", expected="none", got=left, nudge=(
        "model(tokens) raised, and your hook stayed attached: remove the handle in the `finally:` of a try: "
        "around model(tokens)"))


class _AttentionReader(nn.Module):
    """Self-attention asked for its weights (``need_weights=True``): the output is
    ``attn_output + attn_weights.sum()``, so a vector added to the weights shows. Width 4, 4 tokens."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        with seeded(seed):
            self.attn = nn.MultiheadAttention(4, 2, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, weights = self.attn(x, x, x, need_weights=True)
        return out + weights.sum(dim=-1, keepdim=True)


@steer.case("an attention layer asked for its weights (need_weights=True): only attn_output is steered",
            hidden=True)
def _(answer, t: Tester) -> None:
    model = _AttentionReader(seed=23).eval()
    x = kit.randn(3, 4, 4, seed=23)
    vector = kit.randn(4, seed=24)
    want = _with_hook(model, x, model.attn, lambda m, a, o: (o[0] + vector, *o[1:]))
    t.track(model)
    got = answer(model, x, model.attn, vector.clone())
    t.expect_type(got, torch.Tensor, what="steer(model, x, model.attn, vector)", nudge="return the output")
    t.expect_close(got, want, what="the output, steered at attn", nudge=(
        "add the vector to attn_output, output[0], only: output[1] holds the attention weights, which are not "
        "an activation of width `width`"))


# Half-right answers (DIMENSIONS: nested, raises, technique): output + vector on a tuple (an error);
# a tensor returned where the module returns a tuple (the layer takes [0] of it: the first sequence);
# the vector added to the input (a pre-hook); the hook removed without finally (hidden: the
# vector added to every element of the tuple, attention weights included).

@steer.wrong("adds the vector to a tuple output as if it were a tensor", mentions="returns a tuple")
def _steer_plain(model, tokens, module, vector):
    return _hook_run(model, tokens, module, lambda m, a, o: o + vector)


@steer.wrong("returns only output[0] + vector for a tuple output", mentions="you returned a tensor")
def _steer_element(model, tokens, module, vector):
    return _hook_run(model, tokens, module, lambda m, a, o: (o[0] if isinstance(o, tuple) else o) + vector)


@steer.wrong("adds the vector to the input, in a forward pre-hook", mentions="added to the module's input")
def _steer_pre(model, tokens, module, vector):
    handle = module.register_forward_pre_hook(lambda m, args: (args[0] + vector, *args[1:]))
    try:
        return model(tokens)
    finally:
        handle.remove()


@steer.wrong("removes the hook after the call, not in finally:", mentions="finally:")
def _steer_no_finally(model, tokens, module, vector):
    def add(mod, args, out):
        return (out[0] + vector, *out[1:]) if isinstance(out, tuple) else out + vector
    handle = module.register_forward_hook(add)
    logits = model(tokens)
    handle.remove()
    return logits


@steer.wrong("adds the vector to every tensor in the tuple, the attention weights too", mentions="output[0], only",
             hidden=True)
def _steer_every_element(model, tokens, module, vector):
    def add(mod, args, out):
        if isinstance(out, tuple):
            return tuple(o + vector if isinstance(o, torch.Tensor) else o for o in out)
        return out + vector
    return _hook_run(model, tokens, module, add)


# --------------------------------------------------------------------------------------
# Predict, then run: which hooks fire on the fast path
# --------------------------------------------------------------------------------------

FAST_PATH_KEYS = ("hook on blocks.0.self_attn", "hook on blocks.0", "global hook, for blocks.0",
                  "global hook, for blocks.0.self_attn")


def _observe_fast_path() -> dict[str, str]:
    """Three runs of a TinyTransformer in eval mode under ``torch.inference_mode()``, each with one
    forward hook: on ``blocks.0.self_attn``, on ``blocks.0``, and a global one (every module)."""
    from torch.nn.modules.module import register_module_forward_hook

    model = _tiny(0)
    tokens, _ = first_token(4, seed=0)
    seen: list[nn.Module] = []

    def note(module, args, output):
        seen.append(module)

    def run(register) -> list[nn.Module]:
        seen.clear()
        handle = register(note)
        try:
            with torch.inference_mode():
                model(tokens)
        finally:
            handle.remove()
        return list(seen)

    attn, block = model.blocks[0].self_attn, model.blocks[0]
    on_attn = run(attn.register_forward_hook)
    on_block = run(block.register_forward_hook)
    on_all = run(register_module_forward_hook)

    def verdict(fired: bool) -> str:
        return "fires" if fired else "silent"

    return {FAST_PATH_KEYS[0]: verdict(attn in on_attn), FAST_PATH_KEYS[1]: verdict(block in on_block),
            FAST_PATH_KEYS[2]: verdict(any(m is block for m in on_all)),
            FAST_PATH_KEYS[3]: verdict(any(m is attn for m in on_all))}


fast_path = Prediction(
    "transformer_hooks.fast_path", "Predict: which hooks fire on the fast path",
    task=("a dict with the keys " + ", ".join(repr(k) for k in FAST_PATH_KEYS) + ", each 'fires' or 'silent': "
          "three runs of the model in eval mode under torch.inference_mode(), each with one forward hook "
          "(on blocks.0.self_attn; on blocks.0; a global one, registered with register_module_forward_hook)"),
    answer_name="predict_fast_path",
    observe=_observe_fast_path,
    choices=("fires", "silent"),
    hints=["In eval mode with no gradient to record, TransformerEncoderLayer.forward may hand the whole layer "
           "to one fused kernel, torch._transformer_encoder_layer_fwd, instead of calling its submodules.",
           "A module's own hooks are run by Module.__call__, around forward(): whatever forward() does inside.",
           "forward() checks the hooks registered on the layer and its submodules before it takes the fast path; "
           "a global hook is not registered on any module."],
    explain={
        FAST_PATH_KEYS[0]: "since torch 2.5 a forward hook or pre-hook on the layer or any of its submodules "
                           "turns the fast path off for that layer, so self_attn is called and its hook fires; "
                           "before 2.5 the fused kernel ran instead and the hook stayed silent.",
        FAST_PATH_KEYS[1]: "the layer's own hooks are run by Module.__call__ around forward(), fast path or not.",
        FAST_PATH_KEYS[2]: "a global hook fires for every module that is called, and blocks.0 is called by "
                           "the model.",
        FAST_PATH_KEYS[3]: "a global hook is registered on no module, so the layer's check does not see it and "
                           "takes the fast path: self_attn is never called, and the global hook never sees it.",
    },
    summary="the layer's own hook always fires; a hook on a submodule fires only when it keeps the layer off "
            "the fast path (since torch 2.5 it does); a global hook never sees the submodules the fused kernel "
            "skips.",
)
fast_path.wrong("every hook fires, as in training",
                {FAST_PATH_KEYS[0]: "fires", FAST_PATH_KEYS[1]: "fires", FAST_PATH_KEYS[2]: "fires",
                 FAST_PATH_KEYS[3]: "fires"}, "registered on no module")
fast_path.wrong("the fast path silences the layer's own hook too",
                {FAST_PATH_KEYS[0]: "silent", FAST_PATH_KEYS[1]: "silent", FAST_PATH_KEYS[2]: "silent",
                 FAST_PATH_KEYS[3]: "silent"}, "fast path or not")
fast_path.wrong("a global hook sees everything",
                {FAST_PATH_KEYS[0]: "silent", FAST_PATH_KEYS[1]: "fires", FAST_PATH_KEYS[2]: "fires",
                 FAST_PATH_KEYS[3]: "fires"}, "self_attn is never called")
