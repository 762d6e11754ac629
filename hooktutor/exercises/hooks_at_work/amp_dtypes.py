"""13_hooks_at_work, predict, then run: the dtypes that hooks see under ``torch.autocast`` on CPU.

The model is ``nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.Linear(8, 2))`` in float32, run
on a float32 input under ``torch.autocast("cpu", dtype=torch.bfloat16)``; then
``model(x).float().sum().backward()`` outside autocast.

The wrong predictions an examiner expects:

- "autocast converts the model to bfloat16": every entry bfloat16, the gradients too (the
  parameters stay float32: autocast casts copies inside each op);
- "the hook sees the input after the cast": the first Linear's ``args[0]`` bfloat16 (a forward
  hook sees what the module was called with; the cast happens inside the op);
- "LayerNorm runs in float32 under autocast": its output float32 (on CPU autocast leaves
  layer_norm alone: it runs in the dtype it receives, here bfloat16);
- "the weight's tensor hook sees the bfloat16 gradient of the cast copy": the cast is a node of
  the graph whose backward casts the gradient back to the weight's dtype before the leaf's hooks.
"""

from __future__ import annotations

import torch
from torch import nn

from ...models import seeded
from ..predict import Prediction

KEYS = ("linear1 args[0]", "linear1 output", "layernorm output", "linear2 args[0]",
        "weight hook grad", "weight.grad")
DTYPES = ("float32", "bfloat16")


def _observe_amp_dtypes() -> dict:
    """One forward under CPU autocast (bfloat16) with forward hooks on the three modules and a
    tensor hook on the first Linear's weight, one backward outside autocast; hooks removed after."""
    with seeded(0):
        model = nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.Linear(8, 2))
        x = torch.randn(3, 4)
    seen: dict[str, torch.dtype] = {}

    def on(*keys):
        def hook(module, args, output):
            seen.update({keys[0]: args[0].dtype} if keys[0] else {})
            seen.update({keys[1]: output.dtype} if keys[1] else {})
        return hook

    handles = [model[0].register_forward_hook(on("linear1 args[0]", "linear1 output")),
               model[1].register_forward_hook(on(None, "layernorm output")),
               model[2].register_forward_hook(on("linear2 args[0]", None)),
               model[0].weight.register_hook(lambda grad: seen.update({"weight hook grad": grad.dtype}))]
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(x)
        out.float().sum().backward()
    finally:
        for handle in handles:
            handle.remove()
    seen["weight.grad"] = model[0].weight.grad.dtype
    return {key: str(seen[key]).replace("torch.", "") for key in KEYS}


def predict_amp_dtypes():
    """One dtype per key: "float32" or "bfloat16"."""
    ### BEGIN SOLUTION
    return {"linear1 args[0]": "float32",
            "linear1 output": "bfloat16",
            "layernorm output": "bfloat16",
            "linear2 args[0]": "bfloat16",
            "weight hook grad": "float32",
            "weight.grad": "float32"}
    ### END SOLUTION


exercise = Prediction(
    "hooks_at_work.amp_dtypes", "Predict: the dtypes hooks see under autocast",
    task=("a dict with one dtype (" + ", ".join(DTYPES) + ") per key. The float32 model "
          "nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.Linear(8, 2)) runs on a float32 x under "
          "torch.autocast(\"cpu\", dtype=torch.bfloat16); then model(x).float().sum().backward() outside "
          "autocast. Keys: the first Linear's forward hook's args[0] (\"linear1 args[0]\") and output "
          "(\"linear1 output\"), the LayerNorm's output (\"layernorm output\"), the second Linear's args[0] "
          "(\"linear2 args[0]\"), the gradient a tensor hook on the first Linear's weight receives "
          "(\"weight hook grad\"), and that weight's .grad (\"weight.grad\")"),
    answer_name="predict_amp_dtypes",
    answer=predict_amp_dtypes,
    observe=_observe_amp_dtypes,
    choices={key: DTYPES for key in KEYS},
    hints=["Autocast does not convert the model: each op it lists casts copies of its inputs, inside the op. "
           "A forward hook sees the tensors as the module received and returned them.",
           "Linear is an op autocast runs in bfloat16. On CPU, autocast does not touch layer_norm: it runs in "
           "the dtype it receives. The parameters themselves are never cast.",
           "The cast of the weight is a node of the autograd graph; its backward casts the gradient back."],
    explain={
        "linear1 args[0]": "a forward hook sees what the module was called with: x as given, float32. "
                           "Autocast casts inside the op (linear), after the hooks have the arguments.",
        "linear1 output": "linear is on autocast's list of ops that run in the lower precision: it casts copies "
                          "of its input and weight to bfloat16 and returns bfloat16.",
        "layernorm output": "on CPU, autocast does not cast layer_norm: it runs in the dtype it receives, "
                            "bfloat16 from the first Linear, and returns bfloat16.",
        "linear2 args[0]": "the second Linear receives what the LayerNorm returned: bfloat16.",
        "weight hook grad": "the weight stays float32; autocast's cast of it is a node of the graph "
                            "(ToCopyBackward0) whose backward casts the gradient back to float32 before it "
                            "reaches the weight's hooks.",
        "weight.grad": "the parameters stay float32 under autocast, and a .grad has its parameter's dtype: "
                       "float32.",
    },
    summary=("autocast casts copies inside each op: hooks see tensors as modules received and returned them "
             "(bfloat16 after the first Linear), while the parameters and their gradients stay float32."),
    guide=""""autocast converts the model" (every entry bfloat16, gradients too: the
    parameters stay float32 and so do their gradients); "the hook sees the input after the cast"
    (the cast happens inside linear, after the forward hook was handed x); "LayerNorm runs in
    float32 under autocast" (on CPU it runs in the dtype it receives: bfloat16 here). Ask what a
    hook that stores activations for a later float32 computation must do (cast them itself).""",
)

exercise.wrong("autocast converts the model to bfloat16", dict.fromkeys(KEYS, "bfloat16"),
               "the parameters stay float32")


def _truth_but(changes: dict) -> dict:
    """The right prediction (the answer cell's) with the entries in ``changes`` changed."""
    return {**predict_amp_dtypes(), **changes}


exercise.wrong("the hook sees the input after the cast", _truth_but({"linear1 args[0]": "bfloat16"}),
               "after the hooks have the arguments")
exercise.wrong("LayerNorm runs in float32 under autocast",
               _truth_but({"layernorm output": "float32", "linear2 args[0]": "float32"}), "does not cast layer_norm")
exercise.wrong("the weight's hook gets the bfloat16 gradient of the cast copy",
               _truth_but({"weight hook grad": "bfloat16"}), "ToCopyBackward0")
