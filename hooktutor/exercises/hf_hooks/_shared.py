"""Helpers shared by the exercises of 12_huggingface_hooks.ipynb: tiny Hugging Face models built from
configs with random weights (no download), seeded without touching the global random state."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")   # never a download, even by mistake

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM, T5Config, T5ForConditionalGeneration  # noqa: E402

from ...models import seeded  # noqa: E402

transformers.logging.set_verbosity_error()   # no config chatter in a check's report

IDS = torch.tensor([[5, 17, 42, 8, 99], [3, 3, 61, 20, 7]])   # token ids made directly: no tokenizer


def llama(seed: int = 0, layers: int = 2, dtype: torch.dtype = torch.float32, attn: str = "sdpa") -> LlamaForCausalLM:
    """A tiny Llama (hidden 16, 2 heads, vocab 100) in eval mode; larger random weights than the
    default (initializer_range 0.3) so that its greedy choices are clear-cut."""
    config = LlamaConfig(vocab_size=100, hidden_size=16, intermediate_size=32, num_hidden_layers=layers,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                         bos_token_id=0, eos_token_id=1, pad_token_id=0, initializer_range=0.3,
                         attn_implementation=attn)
    with seeded(seed):
        return LlamaForCausalLM(config).to(dtype).eval()


def t5(seed: int = 0, dtype: torch.dtype = torch.float32) -> T5ForConditionalGeneration:
    """A tiny T5 (d_model 16, 2 layers each side, vocab 100) in eval mode."""
    config = T5Config(vocab_size=100, d_model=16, d_kv=8, d_ff=32, num_layers=2, num_heads=2,
                      decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    with seeded(seed):
        return T5ForConditionalGeneration(config).to(dtype).eval()


def first(output):
    """The hidden states in what a block returns: the tensor itself, or element 0 of a tuple."""
    return output[0] if isinstance(output, tuple) else output
