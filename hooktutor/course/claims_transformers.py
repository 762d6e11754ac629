"""What changes from one transformers release to the next, for lesson 12 (``12_huggingface_hooks.ipynb``).

The claims of :mod:`hooktutor.course.claims` whose library is ``"transformers"``: ``expected``
compares their ``since`` with the installed transformers, and ``python3 course.py compat
--transformers 5.0.0,4.57.6`` runs their probes on other releases (the torch stays the pinned one).
Each probe builds the tiny models of lesson 12 from configs (random weights, no download).
"""

from __future__ import annotations

import os


def _llama(attn: str = "sdpa"):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    config = LlamaConfig(vocab_size=100, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                         bos_token_id=0, eos_token_id=1, pad_token_id=0, attn_implementation=attn)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return LlamaForCausalLM(config).eval()


IDS = [[5, 17, 42, 8, 99], [3, 3, 61, 20, 7]]


def _ids():
    import torch

    return torch.tensor(IDS)


def _quietly(fn):
    """Run ``fn()`` with transformers' logging at error level (a probe prints nothing)."""
    import transformers

    level = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    try:
        return fn()
    finally:
        transformers.logging.set_verbosity(level)


def _decoder_layer_returns_tensor() -> bool:
    import torch

    model, seen = _llama(), []
    with model.model.layers[0].register_forward_hook(lambda m, a, out: seen.append(out)):
        _quietly(lambda: model(_ids()))
    assert isinstance(seen[0], (tuple, torch.Tensor)), type(seen[0])
    return isinstance(seen[0], torch.Tensor)


def _output_capturing_hooks() -> bool:
    model = _llama()
    before = sum(len(m._forward_hooks) for m in model.modules())
    _quietly(lambda: model(_ids(), output_hidden_states=True))
    left = [h for m in model.modules() for h in m._forward_hooks.values()]
    assert before == 0
    return bool(left) and all(h.__module__.startswith("transformers.") for h in left)


def _sdpa_attentions_empty_tuple() -> bool:
    attentions = _quietly(lambda: _llama()(_ids(), output_attentions=True).attentions)
    assert attentions is None or attentions == () or all(a is None for a in attentions), attentions
    return attentions == ()


def _t5_stack_unpacks_block_output() -> bool:
    import torch
    from transformers import T5Config, T5ForConditionalGeneration

    config = T5Config(vocab_size=100, d_model=16, d_kv=8, d_ff=32, num_layers=2, num_heads=2,
                      decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = T5ForConditionalGeneration(config).eval()
    ids = _ids()
    with model.decoder.block[0].register_forward_hook(lambda m, a, out: out[0]):
        try:
            _quietly(lambda: model(input_ids=ids, decoder_input_ids=ids[:, :3]))
        except (ValueError, IndexError) as error:
            return isinstance(error, ValueError) and "not enough values to unpack" in str(error)
    raise AssertionError("a tensor returned by a T5 block raised nothing")


def _model_output_cache_field() -> bool:
    out = _quietly(lambda: _llama()(_ids()))
    assert "cache" in out.keys() or "past_key_values" in out.keys(), list(out.keys())
    return "cache" in out.keys()


def _cleared_hooks_leave_no_hidden_state() -> bool:
    model = _llama()
    _quietly(lambda: model(_ids(), output_hidden_states=True))
    for module in model.modules():
        module._forward_hooks.clear()
    return _quietly(lambda: model(_ids(), output_hidden_states=True).hidden_states) == ()


def claims(claim_class) -> list:
    """The transformers claims, as ``claim_class`` (``Claim`` of :mod:`hooktutor.course.claims`) instances."""
    Claim = claim_class  # noqa: N806
    lesson = ("12_huggingface_hooks",)
    return [
        Claim(
            id="hf-decoder-layer-returns-tensor",
            kind="behaviour",
            lessons=lesson,
            where="the prediction (what each module hands its hook), sections 1 and 2 (steering: return the "
                  "kind you got), exercises 1 and 3 and the claim 'In a steering hook on a decoder layer, "
                  "`output[0]` is the hidden states'",
            before="a Llama decoder layer returns a tuple, `(hidden_states,)` (plus the attention weights when "
                   "asked): the forum snippet `(output[0] + vector,) + output[1:]` steers every sequence",
            after="it returns the bare hidden-states tensor: `output[0]` is the first sequence of the batch and "
                  "the forum snippet raises a TypeError ('can only concatenate tuple')",
            since="4.54.0",
            evidence="bisected with the probe on torch 2.13.0: transformers 4.50.0, 4.52.1 and 4.53.0 return a "
                     "tuple, 4.54.0, 4.57.6, 5.0.0 and 5.24.0 a tensor (the decoder layers' refactor onto "
                     "`GradientCheckpointingLayer` and `check_model_inputs`, July 2025)",
            probe=_decoder_layer_returns_tensor,
            library="transformers",
        ),
        Claim(
            id="hf-output-capturing-hooks",
            kind="behaviour",
            lessons=lesson,
            where="section 3 (the hooks `output_hidden_states` installs and leaves, their owner in `list_hooks`, "
                  "registration order with a steering hook, a pre-hook on layer 0 in `hidden_states[0]`), "
                  "section 4 (they are installed by "
                  "`output_attentions` too) and the claim '`output_hidden_states=True` reads the hidden states "
                  "without hooks'",
            before="`output_hidden_states=True` leaves no hook on the model: the hidden states are collected "
                   "inside the call (before 4.54 by the model's own loop, so they show a steering hook's change; "
                   "from 4.54 by `check_model_inputs`, which keeps each layer's output before any forward hook of "
                   "yours changes it)",
            after="in the architectures built on its `capture_outputs` decorator (Llama, T5, GPT-2, BERT among "
                  "them; not Bloom), transformers installs forward hooks (`output_capturing_hook`, on every "
                  "decoder layer and attention module) the first time hidden states or attentions are asked "
                  "for, and leaves them on the model; they run in registration order with yours (a steering "
                  "hook registered after them is missing from its own layer's entry only), they record the "
                  "first layer's input as `hidden_states[0]`, and `list_hooks` shows them as "
                  "'transformers (output capturing)'",
            since="5.2.0",
            evidence="bisected with the probe on torch 2.13.0: no hook left by 4.57.6, 5.0.0 and 5.1.0; four "
                     "hooks of transformers.utils.output_capturing left by 5.2.0, 5.3.0, 5.12.0 and 5.24.0",
            probe=_output_capturing_hooks,
            library="transformers",
        ),
        Claim(
            id="hf-sdpa-attentions-empty-tuple",
            kind="behaviour",
            lessons=lesson,
            where="section 4 (sdpa asked for `output_attentions`) and the claim 'Hook the attention module to "
                  "get the attention weights'",
            before="under sdpa, `output_attentions=True` gives `attentions=None` (4.54 to 5.1; 4.53 gives a "
                   "tuple of `None`s, and up to 4.52 sdpa falls back to eager attention and returns the weights)",
            after="it gives an empty tuple, `()`, and logs the warning that sdpa does not support it",
            since="5.2.0",
            evidence="bisected with the probe on torch 2.13.0: 4.52.1 weights, 4.53.0 `(None, None)`, 4.54.0 to "
                     "5.1.0 `None`, 5.2.0 to 5.24.0 `()` (the same release as hf-output-capturing-hooks)",
            probe=_sdpa_attentions_empty_tuple,
            library="transformers",
        ),
        Claim(
            id="hf-t5-stack-unpacks-block-output",
            kind="behaviour",
            lessons=lesson,
            where="section 2 (a tensor returned where a T5 block returned a tuple)",
            before="T5's stack indexes what a block returned (`layer_outputs[2]`): a tensor of batch 2 raises an "
                   "IndexError ('index 2 is out of bounds for dimension 0 with size 2')",
            after="it unpacks three values from it: a tensor of batch 2 raises a ValueError ('not enough values "
                  "to unpack (expected 3, got 2)'); a batch of 3 passes silently, as before",
            since="5.15.0",
            evidence="bisected with the probe on torch 2.13.0: IndexError with 4.57.6, 5.0.0, 5.12.0, 5.13.0 and "
                     "5.14.0, ValueError with 5.15.0, 5.21.0 and 5.24.0",
            probe=_t5_stack_unpacks_block_output,
            library="transformers",
        ),
        Claim(
            id="hf-model-output-cache-field",
            kind="behaviour",
            lessons=lesson,
            where="section 1 (the fields of a `ModelOutput`: the KV cache) and the recap",
            before="the KV cache of a model's output is the field `past_key_values` (and the layers get it as the "
                   "keyword `past_key_values`)",
            after="it is the field `cache` (`past_key_values` is no longer among the keys), and the layers get "
                  "the keyword `cache`",
            since="5.24.0",
            evidence="bisected with the probe on torch 2.13.0: `past_key_values` with 4.57.6, 5.0.0, 5.21.0, "
                     "5.22.0 and 5.23.0, `cache` with 5.24.0",
            probe=_model_output_cache_field,
            library="transformers",
        ),
        Claim(
            id="hf-cleared-hooks-no-hidden-state",
            kind="behaviour",
            lessons=lesson,
            where="section 3 (clearing the hook dicts after `output_hidden_states`)",
            before="(where output capturing leaves hooks, hf-output-capturing-hooks) with the hook dicts "
                   "cleared, `output_hidden_states=True` returns one tensor, the final norm's output "
                   "(`last_hidden_state`)",
            after="it returns an empty tuple, `()`",
            since="5.23.0",
            evidence="bisected with the probe on torch 2.13.0: one tensor with 5.2.0, 5.12.0, 5.21.0 and 5.22.0, "
                     "none with 5.23.0 and 5.24.0; before 5.2.0 clearing the dicts removes nothing of "
                     "transformers' and all 3 come back",
            probe=_cleared_hooks_leave_no_hidden_state,
            library="transformers",
        ),
    ]
