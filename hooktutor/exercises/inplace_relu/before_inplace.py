"""05_inplace_relu_pitfall, predict, then run: what a hook before an in-place ReLU gets."""

from __future__ import annotations

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from ...data import shapes
from ...models import SmallCNN
from ..predict import Prediction


def _observe_before_an_inplace_relu() -> dict[str, str]:
    """Four ways to look at features.1 (BatchNorm) of SmallCNN, followed by ReLU(inplace=True):
    does each raise, keep wrong values, or keep the right ones (against the out-of-place model)?"""
    x, y = shapes(8, seed=0)
    reference = SmallCNN(inplace=False, seed=0)
    bn_out = {}

    def keep_reference(module: nn.Module, args: tuple, out: torch.Tensor) -> None:
        out.retain_grad()
        bn_out["value"] = out

    with reference.features[1].register_forward_hook(keep_reference):
        F.cross_entropy(reference(x), y).backward()
    right_value, right_grad = bn_out["value"].detach(), bn_out["value"].grad

    def verdict(got: torch.Tensor, right: torch.Tensor) -> str:
        return "right values" if torch.allclose(got, right) else "wrong values"

    def keep(how) -> dict:
        model, kept = SmallCNN(inplace=True, seed=0), {}

        def hook(module: nn.Module, args: tuple, out: torch.Tensor) -> None:
            how(out, kept)

        with model.features[1].register_forward_hook(hook):
            F.cross_entropy(model(x), y).backward()
        return kept

    seen = {
        "output.detach()": verdict(keep(lambda out, k: k.update(v=out.detach()))["v"], right_value),
        "output.detach().clone()": verdict(keep(lambda out, k: k.update(v=out.detach().clone()))["v"],
                                           right_value),
        "output.register_hook (the gradient)": verdict(
            keep(lambda out, k: out.register_hook(lambda g: k.update(v=g)))["v"], right_grad),
    }
    model = SmallCNN(inplace=True, seed=0)
    handle = model.features[1].register_full_backward_hook(lambda m, gi, go: None)
    try:
        F.cross_entropy(model(x), y).backward()
        seen["a full backward hook"] = "right values"
    except RuntimeError:
        seen["a full backward hook"] = "raises"
    finally:
        handle.remove()
    return seen


def predict_records():
    """Return a dict: for each way of looking, 'raises', 'wrong values' or 'right values'."""
    ### BEGIN SOLUTION
    return {
        "output.detach()": "wrong values",
        "output.detach().clone()": "right values",
        "output.register_hook (the gradient)": "right values",
        "a full backward hook": "raises",
    }
    ### END SOLUTION


exercise = Prediction(
    "inplace_relu.before_inplace", "Predict: what a hook before an in-place ReLU gets",
    task=("a dict with the keys 'output.detach()', 'output.detach().clone()', "
          "'output.register_hook (the gradient)', 'a full backward hook'; each 'raises', "
          "'wrong values' or 'right values' (against the same model with inplace=False)"),
    answer_name="predict_records",
    answer=predict_records,
    observe=_observe_before_an_inplace_relu,
    choices=("raises", "wrong values", "right values"),
    hints=["The ReLU right after features.1 writes into features.1's output tensor after the hook has run.",
           "detach() shares memory; clone() copies. A tensor hook keeps the version it was registered on. "
           "A full backward hook wraps the output in a view that the in-place ReLU is not allowed to modify."],
    explain={
        "output.detach()": "detach() is a new name for the same memory: the in-place ReLU that runs "
                           "after the hook writes its zeros into what you kept, so the negatives are gone.",
        "output.detach().clone()": "clone() copies the values at the moment the hook runs; the later "
                                   "in-place write cannot reach the copy.",
        "output.register_hook (the gradient)": "a tensor hook registered before an in-place op receives the "
                                               "gradient with respect to the value it was registered on "
                                               "(the BatchNorm output, before the ReLU), which is exactly "
                                               "the gradient of the out-of-place model.",
        "a full backward hook": "a full backward hook hands the next module a view of the output, and "
                                "the in-place ReLU modifying that view raises a RuntimeError in the forward pass.",
    },
    summary="detach() shares memory and is overwritten; clone() and tensor hooks are safe; a full "
            "backward hook raises when an in-place module writes into the output it wrapped (here the "
            "BatchNorm's, which requires grad).",
    guide="""`output.detach()` gives the right values (the popular claim: it shares memory, the ReLU
    overwrites it); every way breaks (`clone()` and a tensor hook registered before the in-place op
    are safe); a full backward hook just works (it raises in the forward pass).""",
)
exercise.wrong("detach() is a safe copy (the popular claim)",
               {"output.detach()": "right values", "output.detach().clone()": "right values",
                "output.register_hook (the gradient)": "right values", "a full backward hook": "raises"},
               "same memory")
exercise.wrong("every hook breaks",
               {"output.detach()": "wrong values", "output.detach().clone()": "wrong values",
                "output.register_hook (the gradient)": "wrong values", "a full backward hook": "raises"},
               "copies the values")
exercise.wrong("a full backward hook just works",
               {"output.detach()": "wrong values", "output.detach().clone()": "right values",
                "output.register_hook (the gradient)": "right values",
                "a full backward hook": "right values"}, "raises a RuntimeError")
