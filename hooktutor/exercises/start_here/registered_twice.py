"""00_start_here, predict, then run: how often a hook registered twice fires."""

from __future__ import annotations

import torch

from ...models import MLP
from ..predict import Prediction


def _observe_registered_twice() -> int:
    """The cell that registers a counting hook on fc1, run twice; then one forward."""
    model, calls = MLP(seed=0), []
    handles = []

    def count(module, args, output):   # one function object, registered twice
        calls.append(1)

    try:
        for _run in range(2):
            handles.append(model.fc1.register_forward_hook(count))
        model(torch.zeros(1, 8))
    finally:
        for handle in handles:
            handle.remove()
    return len(calls)


def predict_calls():
    """Return an int: how often the hook fires during the one model(x)."""
    ### BEGIN SOLUTION
    return 2
    ### END SOLUTION


exercise = Prediction(
    "start_here.registered_twice", "Predict: a hook registered twice",
    task="an int: how many times the hook fires during the one model(x)",
    answer_name="predict_calls",
    answer=predict_calls,
    observe=_observe_registered_twice,
    hints=["Registering does not look at what is already attached: each call adds a hook.",
           "Two registrations, one forward pass of a layer that runs once."],
    explain={
        "1": "registering again does not replace the first hook: PyTorch keeps both, so one call "
             "of fc1 fires two hooks.",
        "0": "a hook stays on the module after the cell that registered it has finished; it fires "
             "on every later forward until it is removed.",
        "count": "each register_forward_hook call adds one more hook; fc1 runs once, so each of "
                 "them fires once.",
    },
    summary="nothing de-duplicates hooks: two registrations are two hooks, and each fires on every call.",
    guide="""1, because "re-running the cell replaces the hook"; the check explains that nothing
    de-duplicates hooks. A good moment to ask the room to predict before anyone runs it.""",
)
exercise.wrong("re-running replaces the hook", 1, "does not replace the first hook")
exercise.wrong("a hook ends with its cell", 0, "stays on the module")
exercise.wrong("one per registration and one more", 3, "adds one more hook")
