"""12_huggingface_hooks, predict, then run: what a forward hook gets from a Llama decoder layer, its
attention, its MLP, the LlamaModel inside, and a T5 block."""

from __future__ import annotations

import torch
from transformers.utils import ModelOutput

from ..predict import Prediction
from ._shared import IDS, llama, t5

MODULES = ("model.layers.0 (a Llama decoder layer)", "model.layers.0.self_attn", "model.layers.0.mlp",
           "model (the LlamaModel inside LlamaForCausalLM)", "decoder.block.0 (a T5 block)")
KINDS = ("tensor", "tuple", "ModelOutput", "None")


def _kind(output) -> str:
    if isinstance(output, ModelOutput):   # (a dict subclass: tested before tuple and tensor)
        return "ModelOutput"
    if isinstance(output, tuple):
        return "tuple"
    if isinstance(output, torch.Tensor):
        return "tensor"
    return "None" if output is None else type(output).__name__


def _observe_block_outputs() -> dict:
    """One forward of each tiny model with a forward hook on each module, removed after."""
    seen = {}
    models = [(llama(0), {"input_ids": IDS}), (t5(0), {"input_ids": IDS, "decoder_input_ids": IDS[:, :3]})]
    for model, kw in models:
        handles = []
        try:
            for key in MODULES:
                name = key.split(" ")[0]
                try:
                    module = model.get_submodule(name)
                except AttributeError:
                    continue
                handles.append(module.register_forward_hook(
                    lambda m, a, out, key=key: seen.update({key: _kind(out)})))
            with torch.no_grad():
                model(**kw)
        finally:
            for handle in handles:
                handle.remove()
    return {key: seen[key] for key in MODULES}


def predict_block_outputs():
    """One kind per module: "tensor", "tuple", "ModelOutput" or "None"."""
    ### BEGIN SOLUTION
    return {"model.layers.0 (a Llama decoder layer)": "tensor",
            "model.layers.0.self_attn": "tuple",
            "model.layers.0.mlp": "tensor",
            "model (the LlamaModel inside LlamaForCausalLM)": "ModelOutput",
            "decoder.block.0 (a T5 block)": "tuple"}
    ### END SOLUTION


exercise = Prediction(
    "hf_hooks.block_outputs", "Predict: what a Hugging Face module hands its forward hook",
    task="a dict with one kind (" + ", ".join(KINDS) + ") per module: " + "; ".join(MODULES),
    answer_name="predict_block_outputs",
    answer=predict_block_outputs,
    observe=_observe_block_outputs,
    choices={k: KINDS for k in MODULES},
    hints=["A forward hook gets exactly what the module's forward returned: read the `-> ...` of each "
           "forward's signature, or think about what the caller needs back.",
           "An attention module hands back its output and its attention weights (None when it did not "
           "compute them); a Llama decoder layer, on transformers 5, only its hidden states. The outer "
           "models return ModelOutputs; T5's blocks pass position biases on to the next block."],
    explain={
        MODULES[0]: "on transformers 5 a Llama decoder layer returns its hidden states as a bare tensor (the "
                    "pinned 5.24.0 is what this lesson states); snippets written for tuples read output[0], "
                    "which is now the first sequence of the batch.",
        MODULES[1]: "the attention module returns (attn_output, attn_weights); with the default sdpa attention "
                    "the weights are None, but it is a tuple all the same.",
        MODULES[2]: "an MLP returns one tensor: down_proj(act(gate_proj(x)) * up_proj(x)).",
        MODULES[3]: "the LlamaModel returns a BaseModelOutputWithPast (a ModelOutput: a dict whose fields "
                    "are also attributes and indices), which its caller reads by name.",
        MODULES[4]: "a T5 block returns a tuple: the hidden states, then the position biases that the next "
                    "blocks reuse (self-attention, and cross-attention in the decoder).",
    },
    summary=("a hook gets what forward returned: a Llama decoder layer a bare tensor (transformers 5), attention "
             "a (output, weights) tuple, a T5 block a tuple with position biases, the models ModelOutputs."),
    guide=""""every layer returns a tuple" (what older snippets assume: on the pinned 5.24.0 a
    Llama decoder layer returns a tensor); "attention returns only its output" (it is a tuple,
    with None for the weights under sdpa); "the model returns a tuple" (a ModelOutput, which
    also indexes like a tuple). The T5 block is the one that does return a tuple: ask why it
    does (the position biases).""",
)

exercise.wrong("every layer returns a tuple (older snippets' habit)",
               dict(zip(MODULES, ("tuple", "tuple", "tuple", "tuple", "tuple"))), "bare tensor")
exercise.wrong("attention returns only its output",
               dict(zip(MODULES, ("tensor", "tensor", "tensor", "ModelOutput", "tuple"))),
               "(attn_output, attn_weights)")
exercise.wrong("the models return tuples",
               dict(zip(MODULES, ("tensor", "tuple", "tensor", "tuple", "tuple"))), "BaseModelOutputWithPast")
exercise.wrong("T5 blocks return a tensor like Llama's",
               dict(zip(MODULES, ("tensor", "tuple", "tensor", "ModelOutput", "tensor"))), "position biases")
