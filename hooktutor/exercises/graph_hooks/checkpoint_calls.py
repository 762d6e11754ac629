"""09_autograd_graph_hooks, predict, then run: forward hooks under activation checkpointing."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from ...models import seeded
from ..predict import Prediction

CHECKPOINT_KEYS = ("first layer's forward hook, no checkpoint", "first layer's forward hook, non-reentrant",
                   "block's forward hook, non-reentrant", "block's forward hook, reentrant",
                   "grad enabled in the block's first call, reentrant")


_COUNTS = (0, 1, 2, 3)


def _observe_checkpoint_calls() -> dict:
    """A block ``Linear, Tanh, Linear`` run once, forward and backward, without a checkpoint and under each
    variant; forward hooks on the block and on its first layer count their calls."""
    with seeded(0):
        block = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 4))
    calls: dict[str, list[bool]] = {}

    def note(label: str) -> Callable:
        return lambda module, args, output: calls.setdefault(label, []).append(torch.is_grad_enabled())

    truth = {}
    for variant in (None, False, True):
        calls.clear()
        x = torch.ones(2, 4, requires_grad=True)
        with block.register_forward_hook(note("block")), block[0].register_forward_hook(note("first")):
            out = block(x) if variant is None else checkpoint(block, x, use_reentrant=variant)
            out.sum().backward()
        if variant is None:
            truth[CHECKPOINT_KEYS[0]] = len(calls["first"])
        elif variant is False:
            truth[CHECKPOINT_KEYS[1]] = len(calls["first"])
            truth[CHECKPOINT_KEYS[2]] = len(calls["block"])
        else:
            truth[CHECKPOINT_KEYS[3]] = len(calls["block"])
            truth[CHECKPOINT_KEYS[4]] = "yes" if calls["block"][0] else "no"
    return {k: truth[k] for k in CHECKPOINT_KEYS}


def predict_checkpoint_calls():
    """One entry per key; counts are 0 to 3, the last entry "yes" or "no"."""
    ### BEGIN SOLUTION
    return {"first layer's forward hook, no checkpoint": 1,
            "first layer's forward hook, non-reentrant": 2,
            "block's forward hook, non-reentrant": 1,
            "block's forward hook, reentrant": 2,
            "grad enabled in the block's first call, reentrant": "no"}
    ### END SOLUTION


exercise = Prediction(
    "graph_hooks.checkpoint_calls", "Predict: forward hooks under activation checkpointing",
    task=("a dict with one entry per key: " + "; ".join(CHECKPOINT_KEYS) + ". The counts are 0, 1, 2 or 3 calls "
          "in one forward and backward; the last entry is 'yes' or 'no'"),
    answer_name="predict_checkpoint_calls",
    answer=predict_checkpoint_calls,
    observe=_observe_checkpoint_calls,
    choices={**{k: _COUNTS for k in CHECKPOINT_KEYS[:4]}, CHECKPOINT_KEYS[4]: ("yes", "no")},
    hints=["Checkpointing keeps only the block's input and runs the block again during backward to get what it "
           "did not save. Does running it again call the modules' __call__, hooks included?",
           "The non-reentrant variant stops the recomputation as soon as it has recomputed the last tensor "
           "backward needs, inside the last layer. The reentrant variant runs the whole block again, and its "
           "first run happens under torch.no_grad()."],
    explain={
        CHECKPOINT_KEYS[0]: "without a checkpoint nothing runs again: one forward, one call.",
        CHECKPOINT_KEYS[1]: "the recomputation during backward calls the first layer again, through __call__: its "
                            "forward hook fires a second time.",
        CHECKPOINT_KEYS[2]: "the non-reentrant checkpoint stops recomputing as soon as it has the last saved tensor, "
                            "inside the last layer's forward: neither that layer's forward hook nor the block's "
                            "fires again (its pre-hook does).",
        CHECKPOINT_KEYS[3]: "the reentrant checkpoint runs the whole block again during backward: its forward hook "
                            "fires twice.",
        CHECKPOINT_KEYS[4]: "the reentrant checkpoint runs the first forward under torch.no_grad() (it saves nothing "
                            "there) and the recomputation with grad enabled.",
    },
    summary=("a checkpointed block runs again during backward, hooks included: all of it in the reentrant variant "
             "(whose first run is under no_grad), up to the last saved tensor in the non-reentrant one."),
    guide=""""checkpointing is invisible to hooks" (every checkpointed module runs again during backward,
    hooks included); "every hook in the block fires twice in both variants" (the
    non-reentrant variant stops recomputing inside the last layer, so the block's forward
    hook fires once; its pre-hook twice); "the reentrant variant's first run keeps grad on"
    (it runs under `no_grad` and saves nothing).""",
)


exercise.wrong("checkpointing is invisible to hooks",
                       dict(zip(CHECKPOINT_KEYS, (1, 1, 1, 1, "yes"))), "calls the first layer again")


exercise.wrong("every hook in the block fires twice in both variants",
                       dict(zip(CHECKPOINT_KEYS, (1, 2, 2, 2, "no"))), "stops recomputing")


exercise.wrong("the reentrant variant's first run keeps grad on",
                       dict(zip(CHECKPOINT_KEYS, (1, 2, 1, 2, "yes"))), "under torch.no_grad()")
