"""12_huggingface_hooks, exercise: what ``output_hidden_states=True`` returns for a Llama model, recorded
with forward hooks of your own, so that transformers installs none of its own.

Half-right answers an examiner expects, by kit dimension (``kit.DIMENSIONS``):

- technique: ``model(input_ids, output_hidden_states=True)`` itself (transformers then installs forward
  hooks on the model that stay); every decoder layer's output as the last entry, where
  transformers puts the model's own output, ``last_hidden_state`` (in a Llama the final norm's output,
  not the last layer's); the embeddings left out; the model run twice (the task says once);
- right, though not the solution's way: forward pre-hooks that keep each decoder layer's input (the
  way transformers itself records ``hidden_states[0]``) and a forward hook on the final norm; the check
  accepts any hook of the learner's on the modules that produce the entries (``right_answers``);
- order/nested: 1, 2 and 3 layers, so an answer that hard-codes two layers is caught;
- detached: the recorded tensors keep the autograd graph;
- raises: the hooks removed without ``finally:``;
- dtype: a float64 model.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ...course import claims
from ...inventory import list_hooks
from .. import kit
from ..core import Exercise, Tester, learners_hooks
from ._shared import IDS, llama


def hidden_states_by_hooks(model, input_ids):
    """model(input_ids, output_hidden_states=True).hidden_states, recorded with your own hooks."""
    ### BEGIN SOLUTION
    inner = model.model
    # the embeddings, every decoder layer but the last, and the final norm (in the last one's place)
    modules = [inner.embed_tokens, *inner.layers[:-1], inner.norm]
    kept = {}

    def keep(index):
        def hook(module, args, output):
            kept[index] = output.detach().clone()
        return hook

    handles = [module.register_forward_hook(keep(i)) for i, module in enumerate(modules)]
    try:
        model(input_ids)
    finally:
        for handle in handles:
            handle.remove()
    return tuple(kept[i] for i in range(len(modules)))
    ### END SOLUTION


exercise = Exercise(
    "hf_hooks.hidden_states", "output_hidden_states, with your own hooks",
    task=("write hidden_states_by_hooks(model, input_ids) for a LlamaForCausalLM that carries no hook changing "
          "what a module receives or returns (so that what the embeddings return is what the first decoder layer "
          "receives: a pre-hook on layer 0 would change hidden_states[0], section 3): run model(input_ids) once, "
          "without output_hidden_states or output_attentions (so that transformers installs no hooks of its own), "
          "and return a tuple of detached copies equal to what model(input_ids, output_hidden_states=True)"
          ".hidden_states would hold, in the same order; remove your hooks, also when the model raises"),
    hints=[
        "Section 3 compared the two: hidden_states[0] is what the first decoder layer receives (in a Llama with no "
        "pre-hook on layer 0, what model.model.embed_tokens returns), hidden_states[i] what "
        "model.model.layers[i - 1] returns...",
        "... except the last entry: it is the model's own output, last_hidden_state, which in a Llama is what the "
        "final norm, model.model.norm, returns, not the last layer's output. Count: one more entry than there "
        "are layers.",
        "A forward hook per module, each keeping output.detach().clone() under its index; the handles removed in "
        "a finally: block; model.model.layers[:-1] are the layers whose outputs are kept as they are.",
    ],
    solution=hidden_states_by_hooks,
    answer_name="hidden_states_by_hooks",
    guide="""`model(input_ids, output_hidden_states=True)` (it works, and leaves transformers'
    hooks on the model: the task asks for none); the last layer's output as the last entry
    (transformers puts the final norm's output there); the embeddings left out; two layers
    hard-coded; tensors kept with their graph (no `detach()`); hooks removed without
    `finally:`. Right, and accepted: pre-hooks keeping each decoder layer's input (the way
    transformers itself records `hidden_states[0]`), then a forward hook on the final norm.""",
    equivalent_mutants={
        "copy@11: .clone() -> <dropped>":
            "nothing in a Llama forward writes into a module's output after the module returns (each layer adds "
            "its residual out of place), so a detached view holds the same values as a copy",
        "copy@11: .clone() -> .detach()":
            "the same: output.detach().detach() is a detached view, and nothing writes into it later",
        "keep-state@7: kept = {} (a fresh one per call) -> kept kept across calls":
            "each call's hooks overwrite every index the call returns (each module runs once per forward), so "
            "entries left from an earlier call are never returned",
    },
)


def _truth(model, input_ids) -> tuple:
    """What transformers gives, on a copy of the model's forward (its hooks are removed after)."""
    from ...inventory import remove_hooks

    with torch.no_grad():
        out = model(input_ids, output_hidden_states=True).hidden_states
    remove_hooks(model, include_libraries=True)   # transformers' output capturing: the answer must not need it
    return tuple(h.clone() for h in out)


def _states_case(answer: Callable, t: Tester, layers: int, seed: int, dtype: torch.dtype = torch.float32,
                 ids: torch.Tensor = IDS) -> None:
    reference, model = llama(seed, layers, dtype), llama(seed, layers, dtype)
    want = _truth(reference, ids)
    t.track(model)
    # the modules that produce the entries: a forward hook on any of them, or a pre-hook on a layer (its
    # input is the previous entry), is a hook of the learner's that records
    producers = {"model.embed_tokens": model.model.embed_tokens, "model.norm": model.model.norm,
                 **{f"model.layers.{i}": layer for i, layer in enumerate(model.model.layers)}}
    with kit.HookWitness(producers) as witness:
        got = answer(model, ids)
    what = f"hidden_states_by_hooks on a {layers}-layer Llama"
    t.expect_type(got, tuple, what=what, nudge="return a tuple, like output_hidden_states")
    # (learners_hooks leaves a library's hooks out: transformers' are looked for by owner)
    library = [r for r in list_hooks(model, include_global=False) if r.is_library]
    t.expect(not library, what="hooks transformers installed on the model", expected="none",
             got=f"{len(library)} ({library[0].owner_label})" if library else 0, nudge=(
                 "you asked transformers for output_hidden_states, and it left its forward hooks on the model: "
                 "record the hidden states with forward hooks of your own"))
    t.expect(len(got) == len(want), what=f"the number of hidden states ({layers} layers)", expected=len(want),
             got=len(got), nudge="one for the embeddings, then one per decoder layer (the last one: the final norm's)")
    for i, (g, w) in enumerate(zip(got, want)):
        t.expect_type(g, torch.Tensor, what=f"entry {i}", nudge="each entry is a tensor")
        source = "model.model.embed_tokens" if i == 0 else (
            "model.model.norm" if i == layers else f"model.model.layers[{i - 1}]")
        wrong = {"layer": (_last_layer(reference, ids), (
            "the last entry is the final norm's output (model.model.norm), not the last decoder layer's: "
            "transformers replaces it"))} if i == layers else None
        # the same computation in both runs: equal bit for bit on one machine; 1e-6 leaves room for nothing else
        t.expect_close(g, w, what=f"entry {i} (what {source} returns)", atol=1e-6, rtol=1e-6, wrong=wrong,
                       nudge=f"entry {i} is what {source} returns")
        kit.expect_detached(t, g, what=f"entry {i}")
    t.expect(witness.calls["model.embed_tokens"] == 1, what="forward passes of the model in your answer",
             expected=1, got=witness.calls["model.embed_tokens"], nudge=(
                 "run model(input_ids) once, with every hook attached: one forward gives every entry"))
    recorded = sum(witness.fired(name, kind) for name in producers for kind in ("forward", "forward_pre"))
    t.expect(recorded > 0, what="hooks of yours on embed_tokens, the decoder layers or the norm while the model "
             "ran", expected="at least one", got="none", nudge=(
                 "record with hooks of your own on the modules that produce the entries (forward hooks, or "
                 "pre-hooks on the decoder layers)"))


def _last_layer(model, ids) -> torch.Tensor:
    kept = []
    with model.model.layers[-1].register_forward_hook(lambda m, a, o: kept.append(o.detach().clone())), \
            torch.no_grad():
        model(ids)
    return kept[0]


@exercise.case("a 2-layer Llama")
def _(answer, t: Tester) -> None:
    _states_case(answer, t, layers=2, seed=50)


@exercise.case("a 3-layer Llama, one sequence")
def _(answer, t: Tester) -> None:
    _states_case(answer, t, layers=3, seed=51, ids=IDS[1:])


@exercise.case("a model whose second layer raises: the hooks must go")
def _(answer, t: Tester) -> None:
    model = t.track(llama(52, 2), "a Llama whose layer 1 raises")

    def fail(module, args):
        raise kit.KitError("the check's model raised halfway through its forward (on purpose)")

    with model.model.layers[1].register_forward_pre_hook(fail):
        kit.call_expecting_kit_error(answer, model, IDS)
    left = [r.path for r in learners_hooks(model)]
    t.expect(not left, what="hooks left on the model after it raised", expected="none", got=left, nudge=(
        "model(input_ids) raised, and your hooks stayed attached: remove them in the `finally:` of a try: "
        "around the call"))


@exercise.case("a 1-layer Llama in float64", hidden=True)
def _(answer, t: Tester) -> None:
    _states_case(answer, t, layers=1, seed=53, dtype=torch.float64)


def _recorded(model, ids, modules) -> tuple:
    kept = {}
    handles = [m.register_forward_hook(lambda mod, a, o, i=i: kept.update({i: o.detach().clone()}))
               for i, m in enumerate(modules)]
    try:
        model(ids)
    finally:
        for h in handles:
            h.remove()
    return tuple(kept[i] for i in range(len(modules)))


# transformers leaves hooks of its own since 5.2 (claim hf-output-capturing-hooks): the check names them;
# before, it finds no hook of the learner's and says so
_LEAVES_HOOKS = claims.expected("hf-output-capturing-hooks")


@exercise.wrong("asks transformers: output_hidden_states=True",
                mentions="left its forward hooks" if _LEAVES_HOOKS else "record with hooks of your own")
def _states_ask(model, input_ids):
    return tuple(h.detach().clone() for h in model(input_ids, output_hidden_states=True).hidden_states)


@exercise.wrong("runs the model twice: once to record, once for nothing", mentions="once")
def _states_twice(model, input_ids):
    model(input_ids)
    return hidden_states_by_hooks(model, input_ids)


@exercise.wrong("the last layer's output as the last entry", mentions="not the last decoder layer's")
def _states_last_layer(model, input_ids):
    inner = model.model
    return _recorded(model, input_ids, [inner.embed_tokens, *inner.layers])


@exercise.wrong("every layer and the norm", mentions="number of hidden states")
def _states_every(model, input_ids):
    inner = model.model
    return _recorded(model, input_ids, [inner.embed_tokens, *inner.layers, inner.norm])


@exercise.wrong("two layers hard-coded", mentions="number of hidden states")
def _states_two(model, input_ids):
    inner = model.model
    return _recorded(model, input_ids, [inner.embed_tokens, inner.layers[0], inner.norm])


@exercise.wrong("keeps the graph (no detach)", mentions="graph")
def _states_graph(model, input_ids):
    inner = model.model
    kept = {}
    modules = [inner.embed_tokens, *inner.layers[:-1], inner.norm]
    handles = [m.register_forward_hook(lambda mod, a, o, i=i: kept.update({i: o.clone()}))
               for i, m in enumerate(modules)]
    try:
        model(input_ids)
    finally:
        for h in handles:
            h.remove()
    return tuple(kept[i] for i in range(len(modules)))


@exercise.wrong("removes the hooks after the call, not in finally:", mentions="finally:")
def _states_no_finally(model, input_ids):
    inner = model.model
    kept = {}
    modules = [inner.embed_tokens, *inner.layers[:-1], inner.norm]
    handles = [m.register_forward_hook(lambda mod, a, o, i=i: kept.update({i: o.detach().clone()}))
               for i, m in enumerate(modules)]
    model(input_ids)
    for h in handles:
        h.remove()
    return tuple(kept[i] for i in range(len(modules)))


@exercise.wrong("assumes two layers or more (keeps layers[0] whatever the depth)", mentions="one per decoder layer",
                hidden=True)
def _states_first_layer_always(model, input_ids):
    inner = model.model
    return _recorded(model, input_ids, [inner.embed_tokens, inner.layers[0], *inner.layers[1:-1], inner.norm])


@exercise.wrong("each layer's input and the norm's input (pre-hooks)", mentions="not the last decoder")
def _states_inputs_only(model, input_ids):
    inner, kept = model.model, []
    handles = [m.register_forward_pre_hook(lambda mod, args: kept.append(args[0].detach().clone()))
               for m in [*inner.layers, inner.norm]]
    try:
        model(input_ids)
    finally:
        for handle in handles:
            handle.remove()
    return tuple(kept)


def _states_by_layer_inputs(model, input_ids):
    """Right, another way: each decoder layer's input with forward pre-hooks (transformers records
    hidden_states[0] so), then the final norm's output with a forward hook."""
    inner, kept = model.model, []
    handles = [layer.register_forward_pre_hook(lambda m, args: kept.append(args[0].detach().clone()))
               for layer in inner.layers]
    handles.append(inner.norm.register_forward_hook(lambda m, args, out: kept.append(out.detach().clone())))
    try:
        model(input_ids)
    finally:
        for handle in handles:
            handle.remove()
    return tuple(kept)


# right answers that are not the solution's: tests/test_huggingface.py proves each passes every case
right_answers = {"each decoder layer's input (pre-hooks), then the final norm's output": _states_by_layer_inputs}
for _label, _answer in right_answers.items():   # registered: tests/test_exercises*.py run them too
    exercise.right(_label)(_answer)
