"""03_changing_outputs, predict, then run: which of three forward-hook bodies change the model's output."""

from __future__ import annotations

import torch
from torch import nn

from ...models import MLP
from ..predict import Prediction


def _returns_zeros(module: nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor:
    return output * 0


def _zeroes_in_place(module: nn.Module, args: tuple, output: torch.Tensor) -> None:
    output.mul_(0)


def _rebinds_the_name(module: nn.Module, args: tuple, output: torch.Tensor) -> None:
    output = output * 0   # noqa: F841 - the point: a new local name, the module's output untouched


EDITS = {"return output * 0": _returns_zeros, "output.mul_(0), return None": _zeroes_in_place,
         "output = output * 0, return None": _rebinds_the_name}


def _observe_which_edits_change() -> dict[str, str]:
    """A forward hook on an MLP's fc1 written three ways: does model(x) change?"""
    model, x = MLP(seed=0), torch.ones(2, 8)
    plain = model(x)
    seen = {}
    for label, hook in EDITS.items():
        with model.fc1.register_forward_hook(hook):
            out = model(x)
        seen[label] = "unchanged" if torch.equal(out, plain) else "changed"
    return seen


def predict_changes():
    """Return a dict: for each hook body, 'changed' or 'unchanged' (what model(x) returns)."""
    ### BEGIN SOLUTION
    return {
        "return output * 0": "changed",
        "output.mul_(0), return None": "changed",
        "output = output * 0, return None": "unchanged",
    }
    ### END SOLUTION


exercise = Prediction(
    "changing_outputs.which_edits_change", "Predict: which hooks change the output",
    task=("a dict with one entry per hook body ('return output * 0', 'output.mul_(0), return None', "
          "'output = output * 0, return None'), each 'changed' or 'unchanged': does model(x) change?"),
    answer_name="predict_changes",
    answer=predict_changes,
    observe=_observe_which_edits_change,
    choices=("changed", "unchanged"),
    hints=["A forward hook changes the output in two ways: by returning a value, or by writing into "
           "the tensor it was given.",
           "Assigning to the name `output` inside the hook changes what that local name points to, "
           "nothing else."],
    explain={
        "return output * 0": "a forward hook that returns a value replaces the module's output with it.",
        "output.mul_(0), return None": "returning None keeps the output tensor, but mul_ wrote zeros into "
                                       "that very tensor: the next layer reads the zeros. A hook does "
                                       "not have to return anything to change the output.",
        "output = output * 0, return None": "`output = ...` only points the hook's local name at a new "
                                            "tensor; the module's output is untouched and None keeps it.",
    },
    summary="returning a tensor replaces the output; an in-place edit changes it without a return; "
            "rebinding the local name changes nothing.",
    guide="""only the returning hook changes it (the popular claim; `output.mul_(0)` changes it without a
    return); the rebinding `output = output * 0` changes it too (it only moves a local
    name).""",
)


exercise.wrong("only a return changes it (the popular claim)",
                         {"return output * 0": "changed", "output.mul_(0), return None": "unchanged",
                          "output = output * 0, return None": "unchanged"}, "does not have to return anything")


exercise.wrong("any assignment changes it",
                         {"return output * 0": "changed", "output.mul_(0), return None": "changed",
                          "output = output * 0, return None": "changed"}, "local name")


exercise.wrong("hooks only observe",
                         {"return output * 0": "unchanged", "output.mul_(0), return None": "unchanged",
                          "output = output * 0, return None": "unchanged"}, "replaces the module's output")
