"""08_training_hooks, predict, then run: the firing order of the hooks of one training step."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from ...models import seeded
from ..predict import Prediction

STEP_EVENTS = ("post-accumulate-grad hook", "global step pre-hook", "step pre-hook", "step post-hook",
               "global step post-hook")


def _observe_step_order() -> list[str]:
    """``loss.backward()`` then ``optimizer.step()`` with one hook of each kind; the step's own hooks
    are registered before the global ones, and the post-hook before the pre-hook."""
    import torch.optim.optimizer as optim_hooks

    with seeded(0):
        layer = nn.Linear(2, 1)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
    fired: list[str] = []

    def note(label: str) -> Callable:
        return lambda *args: fired.append(label)

    handles = []
    try:
        handles += [optimizer.register_step_post_hook(note("step post-hook")),
                    optimizer.register_step_pre_hook(note("step pre-hook")),
                    optim_hooks.register_optimizer_step_post_hook(note("global step post-hook")),
                    optim_hooks.register_optimizer_step_pre_hook(note("global step pre-hook")),
                    layer.weight.register_post_accumulate_grad_hook(note("post-accumulate-grad hook"))]
        layer(torch.ones(1, 2)).sum().backward()
        optimizer.step()
    finally:
        for handle in handles:
            handle.remove()
    return fired


def predict_step_order():
    """The five labels in firing order: post-accumulate-grad hook, global step pre-hook,
    step pre-hook, step post-hook, global step post-hook."""
    ### BEGIN SOLUTION
    return ["post-accumulate-grad hook", "global step pre-hook", "step pre-hook", "step post-hook",
            "global step post-hook"]
    ### END SOLUTION


exercise = Prediction(
    "training_hooks.step_order", "Predict: the hooks of one training step",
    task=("a list of labels, one per hook call, in firing order, for loss.backward() then optimizer.step(); "
          f"the labels: {', '.join(STEP_EVENTS)}"),
    answer_name="predict_step_order",
    answer=predict_step_order,
    observe=_observe_step_order,
    choices=STEP_EVENTS,
    hints=["Which of these hooks belong to backward(), and which to step()?",
           "The global optimizer hooks wrap every optimizer's own ones: global first on the way in, last on "
           "the way out."],
    explain={
        "post-accumulate-grad hook": "it fires inside loss.backward(), as soon as weight.grad is complete, so "
                                     "before optimizer.step() is even called.",
        "global step pre-hook": "step() starts after backward() has finished (a post-accumulate-grad hook has "
                                "fired by then); in step() torch runs the global step pre-hooks first, then the "
                                "optimizer's own.",
        "global step post-hook": "after the update torch runs the optimizer's own post-hooks, then the global "
                                 "ones: the global hooks wrap the optimizer's.",
        "order": "registration order does not decide between kinds: pre-hooks run before the update and "
                 "post-hooks after it, whatever was registered first.",
    },
    summary="the post-accumulate-grad hook during backward(); then global pre, own pre, the update, own post, "
            "global post.",
    guide="""the post-accumulate-grad hook inside `step()` (it fires during `backward()`); the
    optimizer's own step hooks before the global ones (the global ones wrap them); registration
    order (pre-hooks run before the update, post-hooks after it, whatever came first).""",
)
exercise.wrong("the post-accumulate-grad hook inside step()",
               ["global step pre-hook", "step pre-hook", "post-accumulate-grad hook", "step post-hook",
                "global step post-hook"], "after backward() has finished")
exercise.wrong("the optimizer's own hooks before the global ones",
               ["post-accumulate-grad hook", "step pre-hook", "global step pre-hook", "global step post-hook",
                "step post-hook"], "global step pre-hooks first")
exercise.wrong("in registration order",
               ["step post-hook", "step pre-hook", "global step post-hook", "global step pre-hook",
                "post-accumulate-grad hook"], "inside loss.backward()")
