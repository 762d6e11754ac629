"""10_transformer_hooks, predict, then run: which forward hooks fire on the fast path."""

from __future__ import annotations

import torch
from torch import nn

from ...data import first_token
from ..predict import Prediction
from ._shared import _tiny

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


def predict_fast_path():
    """For each key, "fires" or "silent": "hook on blocks.0.self_attn", "hook on blocks.0",
    "global hook, for blocks.0", "global hook, for blocks.0.self_attn"."""
    ### BEGIN SOLUTION
    return {"hook on blocks.0.self_attn": "fires", "hook on blocks.0": "fires",
            "global hook, for blocks.0": "fires", "global hook, for blocks.0.self_attn": "silent"}
    ### END SOLUTION


exercise = Prediction(
    "transformer_hooks.fast_path", "Predict: which hooks fire on the fast path",
    task=("a dict with the keys " + ", ".join(repr(k) for k in FAST_PATH_KEYS) + ", each 'fires' or 'silent': "
          "three runs of the model in eval mode under torch.inference_mode(), each with one forward hook "
          "(on blocks.0.self_attn; on blocks.0; a global one, registered with register_module_forward_hook)"),
    answer_name="predict_fast_path",
    answer=predict_fast_path,
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
    guide=""""every hook fires, as in training" (a global hook is registered on no module, so the layer
    still takes its fused fast path and never calls `self_attn`); "the fast path silences
    the layer's own hook too" (`Module.__call__` runs the layer's hooks around `forward()`,
    fast path or not); "a global hook sees everything". The answer for a hook on
    `blocks.0.self_attn` depends on the torch: it fires since 2.5 (the hook itself switches
    the fast path off), not before; the check runs it on the learner's torch.""",
)


exercise.wrong("every hook fires, as in training",
                {FAST_PATH_KEYS[0]: "fires", FAST_PATH_KEYS[1]: "fires", FAST_PATH_KEYS[2]: "fires",
                 FAST_PATH_KEYS[3]: "fires"}, "registered on no module")


exercise.wrong("the fast path silences the layer's own hook too",
                {FAST_PATH_KEYS[0]: "silent", FAST_PATH_KEYS[1]: "silent", FAST_PATH_KEYS[2]: "silent",
                 FAST_PATH_KEYS[3]: "silent"}, "fast path or not")


exercise.wrong("a global hook sees everything",
                {FAST_PATH_KEYS[0]: "silent", FAST_PATH_KEYS[1]: "fires", FAST_PATH_KEYS[2]: "fires",
                 FAST_PATH_KEYS[3]: "fires"}, "self_attn is never called")
