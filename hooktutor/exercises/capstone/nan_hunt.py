"""07_capstone, predict, then run: which modules a NaN hunter lists, in order, after one weight is set to inf."""

from __future__ import annotations

import torch
from torch import nn

from ...data import shapes
from ...models import SmallCNN
from ..predict import Prediction

HUNTED = ("features.0", "features.1", "features.2", "features.3", "features.4", "features.5", "features",
          "pool", "classifier", "<model>")


def _observe_nan_hunt() -> list[str]:
    """SmallCNN with one weight of its last conv set to infinity; a forward hook on every module
    lists those whose output is not finite, in firing order."""
    model = SmallCNN(num_classes=3, seed=0)
    with torch.no_grad():
        model.features[4].weight[0, 0, 1, 1] = float("inf")
    found, handles = [], []

    def make_check(name: str):
        def check(module: nn.Module, args: tuple, output: torch.Tensor) -> None:
            if not torch.isfinite(output).all():
                found.append(name)
        return check
    try:
        handles += [m.register_forward_hook(make_check(n or "<model>")) for n, m in model.named_modules()]
        with torch.no_grad():
            model(shapes(8, seed=0)[0])
    finally:
        for handle in handles:
            handle.remove()
    return found


def predict_hunt():
    """Return the names nonfinite_outputs(buggy, x_test) will list, in order."""
    ### BEGIN SOLUTION
    return ["features.4", "features.5", "features", "pool", "classifier", "<model>"]
    ### END SOLUTION


exercise = Prediction(
    "capstone.nan_hunt", "Predict: what the NaN hunter reports",
    task=("a list of module names, in the order the hunter appends them, of the modules whose output "
          f"is not finite; the names: {', '.join(HUNTED)}"),
    answer_name="predict_hunt",
    answer=predict_hunt,
    observe=_observe_nan_hunt,
    choices=HUNTED,
    hints=["Which modules run after the corrupted conv, and does a ReLU, an average or a Linear turn "
           "an infinity back into a finite number?",
           "Containers (features, the model itself) have hooks too, and theirs fire after their children."],
    explain={
        "features.4": "the corrupted weight sits in features.4: it is the first output with an infinity.",
        "features.5": "ReLU keeps +inf (and NaN) as they are: the bad values pass through.",
        "features": "the Sequential `features` returns the last child's output, so it is non-finite too; "
                    "its hook fires after all its children.",
        "pool": "an average over positions that include an infinity or a NaN is not finite either.",
        "classifier": "a Linear layer mixes every channel, so the bad channel spoils every logit.",
        "<model>": "the model's own hook fires last, after its forward has returned the non-finite logits.",
        "features.0": "features.0 to features.3 run before the corrupted conv: their outputs are finite.",
        "order": "forward hooks fire in running order, and a container's hook after its children's.",
    },
    summary="the first name is where the infinity appears; everything after it, containers included, "
            "inherits it, each container after its children.",
    guide="""ask for it before the corrupted model is hunted. Only the culprit (every later module
    inherits the infinity, containers included); containers first (their hooks fire after their
    children); the ReLU cleans it up (ReLU keeps `inf` and `NaN`).""",
)


exercise.wrong("only the culprit", ["features.4"], "pass through")


exercise.wrong("containers first", ["<model>", "features", "features.4", "features.5", "pool", "classifier"],
               "after its forward has returned")


exercise.wrong("ReLU cleans it up", ["features.4", "features"], "pass through")
