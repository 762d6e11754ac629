"""06_hook_lab, predict, then run: what the panel shows once scale_grad (x2) is on for features.4."""

from __future__ import annotations

from ...data import shapes
from ...models import SmallCNN
from ..predict import Prediction

WATCHED = ("loss", "features.0", "features.4", "features.5", "classifier")


def _observe_scale_grad() -> dict[str, str]:
    """The hook lab's panel on SmallCNN: ``scale_grad`` ×2 on features.4. What moves?"""
    from ...widgets import HookPanel

    panel = HookPanel(SmallCNN(seed=0), *shapes(8, seed=1), name="hooktutor-prediction-06")
    try:
        before = dict(panel.snapshot.grad_norms, loss=panel.snapshot.loss)
        panel.set_mode("features.4", "scale_grad", scale=2.0)
        after = dict(panel.snapshot.grad_norms, loss=panel.snapshot.loss)
    finally:
        panel.close()

    def verdict(new: float, old: float) -> str:
        ratio = new / old
        return "doubled" if abs(ratio - 2) < 1e-4 else "same" if abs(ratio - 1) < 1e-4 else "other"
    return {name: verdict(after[name], before[name]) for name in WATCHED}


def predict_panel():
    """Return a dict: for the loss and each gradient bar, 'same' or 'doubled'."""
    ### BEGIN SOLUTION
    return {"loss": "same", "features.0": "doubled", "features.4": "doubled",
            "features.5": "same", "classifier": "same"}
    ### END SOLUTION


exercise = Prediction(
    "hook_lab.scale_grad", "Predict: the panel with scale_grad on features.4",
    task=(f"a dict with the keys {', '.join(map(repr, WATCHED))}; for the loss and for each layer's "
          "gradient bar: 'same' or 'doubled' once scale_grad (scale 2) is on for features.4"),
    answer_name="predict_panel",
    answer=predict_panel,
    observe=_observe_scale_grad,
    choices=("same", "doubled", "other"),
    hints=["scale_grad puts a tensor hook on features.4's output: the forward pass is untouched.",
           "The doubled gradient flows on from features.4 towards the input, not towards the loss."],
    explain={
        "loss": "scale_grad changes only what flows backward; the forward pass, and so the loss, is the same.",
        "features.0": "features.0 comes before features.4: the gradient reaching it is computed from "
                      "features.4's doubled gradient, so it doubles.",
        "features.4": "the bar of features.4 is the gradient with respect to its own output as the "
                      "panel's recorder reads it: its tensor hook sits after the scaling hook (registered "
                      "later), so it reads the doubled gradient; a hook registered before the scaling "
                      "one would read the original.",
        "features.5": "features.5 comes after features.4: backward reaches it before the hook, so it "
                      "keeps its gradient.",
        "classifier": "the classifier comes after features.4: its gradient was computed before the hook ran.",
    },
    summary="a gradient hook leaves the forward pass and every later layer alone, and scales the "
            "gradient of its layer and of everything before it.",
    guide="""ask for it before step 3 of the tour. The loss doubles (the forward pass is
    untouched); only the hooked layer's bar doubles (everything before it doubles too); the later
    layers double (backward reached them before the hook).""",
)


exercise.wrong("the loss doubles too", dict(zip(WATCHED, ("doubled", "doubled", "doubled", "same", "same"))),
                 "the loss, is the same")


exercise.wrong("only the hooked layer", dict(zip(WATCHED, ("same", "same", "doubled", "same", "same"))),
                 "comes before features.4")


exercise.wrong("the later layers double", dict(zip(WATCHED, ("same", "same", "doubled", "doubled", "doubled"))),
                 "comes after features.4")
