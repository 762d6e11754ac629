"""02_forward_hooks, predict, then run: the firing order of hooks in a ResNet block."""

from __future__ import annotations

import torch

from ...models import BasicBlock
from ..predict import Prediction

BLOCK_EVENTS = ("block pre-hook", "conv1", "relu", "conv2", "block")


def _observe_block_order() -> list[str]:
    """Hooks on a ResNet BasicBlock: a pre-hook on the block, forward hooks on conv1, relu, conv2
    and the block; the labels in the order they fire during one block(x)."""
    block, fired = BasicBlock(4, 4, seed=0), []
    handles = [block.register_forward_pre_hook(lambda module, args: fired.append("block pre-hook"))]
    try:
        for name in ("conv1", "relu", "conv2"):
            handles.append(block.get_submodule(name).register_forward_hook(
                lambda module, args, output, name=name: fired.append(name)))
        handles.append(block.register_forward_hook(lambda module, args, output: fired.append("block")))
        block(torch.zeros(1, 4, 4, 4))
    finally:
        for handle in handles:
            handle.remove()
    return fired


def predict_order():
    """Return the labels in firing order, one per hook call
    ('block pre-hook', 'conv1', 'relu', 'conv2', 'block')."""
    ### BEGIN SOLUTION
    return [
        "block pre-hook",
        "conv1",
        "relu",
        "conv2",
        "relu",
        "block",
    ]
    ### END SOLUTION


exercise = Prediction(
    "forward_hooks.block_order", "Predict: the firing order in a ResNet block",
    task=f"a list of labels, one per hook call, in firing order; the labels: {', '.join(BLOCK_EVENTS)}",
    answer_name="predict_order",
    answer=predict_order,
    observe=_observe_block_order,
    choices=BLOCK_EVENTS,
    hints=["Read BasicBlock.forward (hooktutor.models): which modules does it call, in which order, "
           "and how often?",
           "A forward hook runs when its module's forward returns; a container returns after its children."],
    explain={
        "relu": "the block has one self.relu module and calls it twice (after bn1, and after the "
                "addition of the identity); a hook fires on every call, so it fires twice.",
        "block": "a forward hook runs after its module's forward has returned, and the block's forward "
                 "returns only after every child has run: the block's hook comes last.",
        "block pre-hook": "a pre-hook runs before forward starts, so before any child: it comes first.",
        "order": "children fire in the order forward calls them (conv1, relu, conv2, relu), not in the "
                 "order they are defined or printed.",
    },
    summary="pre-hook first, then each child in calling order (the shared ReLU twice), the block's own "
            "forward hook last.",
    guide="""the shared `relu` once (one module called twice fires twice); the block's forward hook
    before its children (it runs when the block's forward returns, after every child).""",
)
exercise.wrong("the shared ReLU once", ["block pre-hook", "conv1", "relu", "conv2", "block"], "calls it twice")
exercise.wrong("the parent's hook before its children",
               ["block pre-hook", "block", "conv1", "relu", "conv2", "relu"], "after its module's forward")
exercise.wrong("the pre-hook with the forward hook",
               ["conv1", "relu", "conv2", "relu", "block pre-hook", "block"], "before forward starts")
