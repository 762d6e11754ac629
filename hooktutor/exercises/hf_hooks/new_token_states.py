"""12_huggingface_hooks, exercise: record, during ``generate()`` with a KV cache, the hidden state a
block computes at the position that predicts each new token.

Half-right answers an examiner expects, by kit dimension (``kit.DIMENSIONS``):

- technique: every position of every call concatenated (with a cache the prompt pass has the whole
  prompt and each later call one token, so the shapes do not even line up); position 0 of each
  call (right for the one-token calls, wrong for the prompt pass); only the prompt pass, or only
  the last call (a value overwritten per call); a tuple output (a T5 decoder block) not unpacked;
- technique: ``use_cache=False`` added to generate (each call runs the whole sequence again; its
  last position still predicts, so only the lengths of the calls show it); no hook during
  ``generate()``, and one forward without a cache afterwards, sliced (only whether the hook was on
  the block while generate ran shows it): a witness records the length of each call of the block
  that had a hook of the learner's on it;
- twice/repeat: one prompt pass (it predicts the first new token) and ``new_tokens - 1`` one-token
  calls (the last token chosen is never fed back): an answer that expects ``new_tokens`` one-token
  calls is caught;
- raises: the hook removed without ``finally:``;
- generate's arguments: no ``min_new_tokens`` (generation stops once every sequence has produced the
  model's EOS: a case whose EOS is its second greedy choice); only the new tokens returned instead of
  what ``generate()`` returned;
- nd: batches of one and two sequences, one and four new tokens;
- left_as_found: ``model.generation_config.max_new_tokens``, ``min_new_tokens`` and ``do_sample`` set on
  the caller's model and left there, then ``model.generate(input_ids)`` (right ids and states, but the
  caller's model generates differently afterwards): the check compares ``generation_config.to_dict()``
  before and after.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .. import kit
from ..core import Exercise, Tester, learners_hooks
from ._shared import IDS, first, llama, t5


def new_token_states(model, input_ids, block, new_tokens):
    """(the generated ids, a (batch, new_tokens, hidden) tensor of what `block` computed at the
    position that predicted each new token)."""
    import torch  # for torch.stack: the cell runs on its own, right after the set-up cell

    ### BEGIN SOLUTION
    states = []

    def keep(module, args, output):
        hidden = output[0] if isinstance(output, tuple) else output   # a T5 block: a tuple
        states.append(hidden[:, -1])   # the last position of the call predicts the next token

    handle = block.register_forward_hook(keep)
    try:
        sequences = model.generate(input_ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                   do_sample=False)
    finally:
        handle.remove()
    return sequences, torch.stack(states, dim=1)
    ### END SOLUTION


exercise = Exercise(
    "hf_hooks.new_token_states", "Record what a block computed for each new token",
    task=("write new_token_states(model, input_ids, block, new_tokens) that generates exactly `new_tokens` "
          "tokens greedily with the KV cache (model.generate(input_ids, max_new_tokens=new_tokens, "
          "min_new_tokens=new_tokens, do_sample=False)) while a forward hook on `block` (a decoder block: a "
          "tensor, or a tuple with the hidden states first) records, for each new token, the block's hidden "
          "state at the position that predicted it; return (what generate returned: the prompt followed by the "
          "new tokens, and a tensor of shape (batch, new_tokens, hidden)); remove the hook, also when generate "
          "raises. Pass min_new_tokens: without it generation stops early once every sequence has produced "
          "the model's EOS token"),
    hints=[
        "Section 5: with the cache, the block is called once with the whole prompt (that call predicts the first "
        "new token), then once for each further token with a sequence of length 1: `new_tokens` calls in all, "
        "as the last token chosen is never fed back.",
        "The token a call predicts comes from the last position of that call: hidden[:, -1] works for the "
        "prompt pass and for the one-token calls alike.",
        "Append hidden[:, -1] per call (hidden = output[0] for a tuple), then torch.stack(states, dim=1).",
    ],
    solution=new_token_states,
    answer_name="new_token_states",
    errors={"stack expects each tensor to be equal size": (
        "the calls of a block under generate() with a cache do not have the same length (the prompt, then "
        "one token each): keep only the last position of each call, hidden[:, -1]")},
    guide="""Every position of every call (with a cache: the prompt, then one token per call: the
    shapes do not stack); position 0 of each call (right for the one-token calls only); a
    value overwritten per call (only the last call kept); `new_tokens + 1` calls expected
    (the last token chosen is never fed back); a T5 decoder block's tuple not unpacked; the
    hook removed without `finally:`; `use_cache=False` (the states agree: the check looks at
    the lengths of the calls); no hook during `generate()` and one forward afterwards (the
    check looks at which calls had a hook on the block); no `min_new_tokens` (generation stops once
    every sequence has produced the model's EOS); only the new tokens returned instead of the whole
    sequences that `generate()` returned; the settings written into `model.generation_config`
    (`max_new_tokens`, `min_new_tokens`, `do_sample`) instead of passed to `generate()`, which
    changes how the caller's model generates afterwards.""",
)


class _HookedCalls(kit.HookWitness):
    """The kit's witness on one block, which also keeps the sequence length of each call that had a
    forward hook of the learner's on it: under generate() with a cache, the prompt's length, then 1."""

    def __init__(self, block) -> None:
        super().__init__({"block": block})
        self.lengths: list[int] = []

    def _probe(self, name: str):
        count = super()._probe(name)

        def witness(module, args):
            before = self.fired(name)
            count(module, args)
            if self.fired(name) > before:
                self.lengths.append(args[0].shape[1])
        return witness


def _plain_states(model, sequences, block, start: int, decoder: bool) -> torch.Tensor:
    """One forward without a cache over the generated ids (but the last): the block's hidden states
    from position ``start`` on, the positions that predicted each new token."""
    kept = []
    with block.register_forward_hook(lambda m, a, o: kept.append(first(o).detach().clone())), torch.no_grad():
        if decoder:
            model(input_ids=IDS[: sequences.shape[0]], decoder_input_ids=sequences[:, :-1], use_cache=False)
        else:
            model(sequences[:, :-1], use_cache=False)
    return kept[-1][:, start:]


def _tokens_case(answer: Callable, t: Tester, model, ids: torch.Tensor, name: str, new: int,
                 decoder: bool = False) -> None:
    block = model.get_submodule(name)
    t.track(model)
    config = model.generation_config.to_dict()
    with _HookedCalls(block) as witness:
        got = answer(model, ids, block, new)
    what = f"new_token_states(model, ids, {name}, {new})"
    after = model.generation_config.to_dict()
    changed = {k: after.get(k) for k in sorted(set(config) | set(after)) if config.get(k) != after.get(k)}
    t.expect(not changed, what="model.generation_config after your answer", expected="as it was",
             got=f"changed: {changed}", nudge=(
                 "leave the caller's model as you found it: pass the generation settings as arguments to "
                 "generate() (max_new_tokens=..., min_new_tokens=..., do_sample=False) instead of changing "
                 "model.generation_config, which changes every later generate() of the caller's model"))
    t.expect_type(got, tuple, what=what, nudge="return (the generated ids, the states)")
    t.expect(len(got) == 2, what=f"the length of what {what} returned", expected=2, got=len(got),
             nudge="return (the generated ids, the states)")
    sequences, states = got
    t.expect_type(sequences, torch.Tensor, what="the generated ids", nudge="return what generate() returned")
    t.expect_type(states, torch.Tensor, what="the states", nudge="stack the recorded states into one tensor")
    length = (1 if decoder else ids.shape[1]) + new
    t.expect(tuple(sequences.shape) != (ids.shape[0], new) or new == length, what="the generated ids",
             expected=f"the whole sequences, shape {(ids.shape[0], length)}", got="the new tokens only", nudge=(
                 "return what generate() returned, the prompt followed by the new tokens (a T5: the decoder's "
                 "start token, then the new ones); only the states are one per new token"))
    t.expect(tuple(sequences.shape) == (ids.shape[0], length), what="the shape of the generated ids",
             expected=(ids.shape[0], length), got=tuple(sequences.shape),
             nudge=f"generate exactly {new} new tokens (max_new_tokens and min_new_tokens)")
    greedy = model.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False)
    t.expect(torch.equal(sequences, greedy), what="the generated ids", expected=greedy, got=sequences, nudge=(
        "generate greedily, as the task says: model.generate(input_ids, max_new_tokens=new_tokens, "
        "min_new_tokens=new_tokens, do_sample=False)"))
    t.expect(len(witness.lengths) == new, what=f"the calls of {name} with your hook on it", expected=new,
             got=len(witness.lengths), nudge=(
                 "keep your hook on the block while generate() runs, and record during it: generate calls the "
                 "block once per new token"))
    calls = [1 if decoder else ids.shape[1]] + [1] * (new - 1)
    t.expect(witness.lengths == calls, what=f"the sequence lengths of those calls of {name}", expected=calls,
             got=witness.lengths, nudge=(
                 "generate with the KV cache, as the task says (no use_cache=False): the block then reads the "
                 "prompt once, then one new token per call"))
    start = 0 if decoder else ids.shape[1] - 1
    want = _plain_states(model, sequences, block, start, decoder)
    # with and without the cache: the same sums in other orders; 1e-5 is far below any other position's
    # difference (1e-1 and more here)
    t.expect_close(states, want, what=f"the states of {name}, one per new token", atol=1e-5, nudge=(
        "for each call of the block, keep its hidden state at the last position (the one that predicts the next "
        "token): the prompt pass covers the whole prompt, each later call one token"))
    t.expect(not learners_hooks(model), what="hooks left after your answer", expected="none",
             got=len(learners_hooks(model)), nudge="remove your hook in a finally: block")


@exercise.case("a tiny Llama, 2 sequences, 4 new tokens, at model.layers.0")
def _(answer, t: Tester) -> None:
    _tokens_case(answer, t, llama(60), IDS, "model.layers.0", 4)


@exercise.case("a tiny Llama, one sequence, one new token (only the prompt pass), at model.layers.1")
def _(answer, t: Tester) -> None:
    _tokens_case(answer, t, llama(61), IDS[1:], "model.layers.1", 1)


@exercise.case("a tiny Llama whose EOS token is its second greedy choice: still exactly 4 new tokens")
def _(answer, t: Tester) -> None:
    model, ids = llama(75), IDS[:1]
    # the EOS is what greedy generation picks second: generate() without min_new_tokens stops there
    early = model.generate(ids, max_new_tokens=4, do_sample=False)
    model.generation_config.eos_token_id = int(early[0, ids.shape[1] + 1])
    _tokens_case(answer, t, model, ids, "model.layers.0", 4)


@exercise.case("generate() raises: the hook must go")
def _(answer, t: Tester) -> None:
    model = t.track(llama(62), "a Llama whose lm_head raises")

    def fail(module, args):
        raise kit.KitError("the check's model raised halfway through its forward (on purpose)")

    with model.lm_head.register_forward_pre_hook(fail):
        kit.call_expecting_kit_error(answer, model, IDS, model.model.layers[0], 2)
    left = [r.path for r in learners_hooks(model)]
    t.expect(not left, what="hooks left on the model after it raised", expected="none", got=left, nudge=(
        "generate() raised, and your hook stayed attached: remove it in the `finally:` of a try: around the call"))


@exercise.case("a tiny T5, at decoder.block.1 (a tuple), 3 new tokens", hidden=True)
def _(answer, t: Tester) -> None:
    _tokens_case(answer, t, t5(63), IDS, "decoder.block.1", 3, decoder=True)


def _generate_with(model, input_ids, block, new_tokens, hook):
    with block.register_forward_hook(hook):
        return model.generate(input_ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)


@exercise.wrong("generate(..., use_cache=False): each call runs the whole sequence", mentions="KV cache")
def _tokens_no_cache(model, input_ids, block, new_tokens):
    states = []
    handle = block.register_forward_hook(lambda m, a, o: states.append(first(o)[:, -1]))
    try:
        sequences = model.generate(input_ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                   do_sample=False, use_cache=False)
    finally:
        handle.remove()
    return sequences, torch.stack(states, dim=1)


@exercise.wrong("no hook during generate(); one forward without a cache afterwards, sliced",
                mentions="while generate() runs")
def _tokens_after_the_fact(model, input_ids, block, new_tokens):
    sequences = model.generate(input_ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
    kept = []
    with block.register_forward_hook(lambda m, a, o: kept.append(first(o))):
        if model.config.is_encoder_decoder:
            model(input_ids=input_ids, decoder_input_ids=sequences[:, :-1], use_cache=False)
        else:
            model(sequences[:, :-1], use_cache=False)
    start = 0 if model.config.is_encoder_decoder else input_ids.shape[1] - 1
    return sequences, kept[-1][:, start:].detach()


@exercise.wrong("no min_new_tokens: generation stops at the model's EOS", mentions="min_new_tokens")
def _tokens_no_min(model, input_ids, block, new_tokens):
    states = []
    handle = block.register_forward_hook(lambda m, a, o: states.append(first(o)[:, -1]))
    try:
        sequences = model.generate(input_ids, max_new_tokens=new_tokens, do_sample=False)
    finally:
        handle.remove()
    return sequences, torch.stack(states, dim=1)


@exercise.wrong("returns only the new tokens, not what generate() returned", mentions="prompt followed by")
def _tokens_new_ids_only(model, input_ids, block, new_tokens):
    sequences, states = _generate_and_keep(model, input_ids, block, new_tokens)
    start = 1 if model.config.is_encoder_decoder else input_ids.shape[1]
    return sequences[:, start:], states


def _generate_and_keep(model, input_ids, block, new_tokens):
    states = []
    sequences = _generate_with(model, input_ids, block, new_tokens, lambda m, a, o: states.append(first(o)[:, -1]))
    return sequences, torch.stack(states, dim=1)


@exercise.wrong("sets model.generation_config's max_new_tokens, min_new_tokens and do_sample, left changed",
                mentions="instead of changing model.generation_config")
def _tokens_config_changed(model, input_ids, block, new_tokens):
    config = model.generation_config
    config.max_new_tokens, config.min_new_tokens, config.do_sample = new_tokens, new_tokens, False
    states = []
    handle = block.register_forward_hook(lambda m, a, o: states.append(first(o)[:, -1]))
    try:
        sequences = model.generate(input_ids)
    finally:
        handle.remove()
    return sequences, torch.stack(states, dim=1)


@exercise.wrong("position 0 of each call", mentions="last position")
def _tokens_first_position(model, input_ids, block, new_tokens):
    states = []
    sequences = _generate_with(model, input_ids, block, new_tokens, lambda m, a, o: states.append(first(o)[:, 0]))
    return sequences, torch.stack(states, dim=1)


@exercise.wrong("every position of every call, concatenated", mentions="do not have the same length")
def _tokens_every_position(model, input_ids, block, new_tokens):
    states = []
    sequences = _generate_with(model, input_ids, block, new_tokens, lambda m, a, o: states.append(first(o)))
    return sequences, torch.stack(states, dim=1).flatten(1, 2)


@exercise.wrong("only the last call kept", mentions="last position")
def _tokens_last_call(model, input_ids, block, new_tokens):
    kept = {}
    sequences = _generate_with(model, input_ids, block, new_tokens,
                               lambda m, a, o: kept.update(h=first(o)[:, -1:]))
    return sequences, kept["h"].expand(-1, new_tokens, -1)


@exercise.wrong("removes the hook after generate(), not in finally:", mentions="finally:")
def _tokens_no_finally(model, input_ids, block, new_tokens):
    states = []
    handle = block.register_forward_hook(lambda m, a, o: states.append(first(o)[:, -1]))
    sequences = model.generate(input_ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
    handle.remove()
    return sequences, torch.stack(states, dim=1)


@exercise.wrong("a tuple output not unpacked (output[:, -1] on a T5 block)", mentions="tuple", hidden=True)
def _tokens_no_unpack(model, input_ids, block, new_tokens):
    states = []
    sequences = _generate_with(model, input_ids, block, new_tokens, lambda m, a, o: states.append(o[:, -1]))
    return sequences, torch.stack(states, dim=1)


exercise.equivalent_mutants["context: no-grad"] = "model.generate() runs under its own torch.no_grad() already"
