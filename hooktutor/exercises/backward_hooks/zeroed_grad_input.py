"""04_backward_hooks, predict, then run: which weight gradients a full backward hook that zeroes grad_input changes."""

from __future__ import annotations

import torch
from torch import nn

from ...data import blobs
from ...models import MLP
from ..predict import Prediction


def _observe_zeroed_grad_input() -> dict[str, str]:
    """A full backward hook on an MLP's fc2 returns grad_input * 0: which weight gradients change?"""
    x, y = blobs(8, seed=0)

    def weight_grads(hooked: bool) -> dict[str, torch.Tensor]:
        model = MLP(seed=0)
        handle = model.fc2.register_full_backward_hook(
            lambda module, grad_input, grad_output: tuple(g * 0 for g in grad_input)) if hooked else None
        try:
            nn.functional.cross_entropy(model(x), y).backward()
        finally:
            if handle is not None:
                handle.remove()
        return {f"{name}.weight.grad": model.get_submodule(name).weight.grad for name in ("fc1", "fc2", "head")}

    plain, hooked = weight_grads(False), weight_grads(True)
    return {key: "unchanged" if torch.equal(hooked[key], plain[key]) else
            "zero" if not hooked[key].any() else "changed" for key in plain}


def predict_grads():
    """Return a dict: for each weight's .grad, 'zero', 'unchanged' or 'changed'."""
    ### BEGIN SOLUTION
    return {"fc1.weight.grad": "zero", "fc2.weight.grad": "unchanged",
            "head.weight.grad": "unchanged"}
    ### END SOLUTION


exercise = Prediction(
    "backward_hooks.zeroed_grad_input", "Predict: a full backward hook that zeroes grad_input",
    task=("a dict with the keys 'fc1.weight.grad', 'fc2.weight.grad', 'head.weight.grad', each "
          "'zero', 'unchanged' or 'changed' (against the same backward without the hook)"),
    answer_name="predict_grads",
    answer=predict_grads,
    observe=_observe_zeroed_grad_input,
    choices=("zero", "unchanged", "changed"),
    hints=["grad_input of a full backward hook is the gradient with respect to the module's input: "
           "what flows on towards the layers before it.",
           "Backward runs from the loss towards the input: head first, then fc2, then fc1."],
    explain={
        "fc1.weight.grad": "the returned grad_input is what flows on to the layers before fc2: zeros "
                           "reach act1 and fc1, so fc1's weight gets a zero gradient.",
        "fc2.weight.grad": "a full backward hook's grad_input holds only the gradient for the module's "
                           "input, never for its own parameters: fc2.weight.grad is computed from "
                           "grad_output and stays as it was (the legacy hook is the one that could zero it).",
        "head.weight.grad": "head comes after fc2: its gradient was computed before backward reached fc2.",
    },
    summary="replacing grad_input changes the layers before the module (the share of their gradient "
            "that flows through it), never the layers after it, nor the own parameters of a module "
            "that runs once.",
    guide="""`fc2.weight.grad` zero as well (the legacy hook's behaviour; the full hook's `grad_input` is
    only the input's gradient); nothing changes; `head.weight.grad` zero too (backward
    reached `head` before `fc2`).""",
)


exercise.wrong("the module's own weights zeroed too",
                        {"fc1.weight.grad": "zero", "fc2.weight.grad": "zero", "head.weight.grad": "unchanged"},
                        "only the gradient for the module's")


exercise.wrong("the return value is ignored",
                        {"fc1.weight.grad": "unchanged", "fc2.weight.grad": "unchanged",
                         "head.weight.grad": "unchanged"}, "zeros reach act1 and fc1")


exercise.wrong("everything zero",
                        {"fc1.weight.grad": "zero", "fc2.weight.grad": "zero", "head.weight.grad": "zero"},
                        "head comes after fc2")
