"""Helpers shared by several exercises of 09_autograd_graph_hooks.ipynb."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from ..core import Tester, learners_hooks

# The first checkpoint in a process imports torch._dynamo (about a second); do it at import time,
# so that a check's time is the check's own.
checkpoint(nn.Identity(), torch.zeros(1, requires_grad=True), use_reentrant=False)


def _expect_no_hooks_left(t: Tester, model: nn.Module) -> None:
    left = learners_hooks(model)
    t.expect(not left, what="hooks left on the model after it raised", expected="none", got=f"{len(left)} hook(s)",
             nudge="model(x) raised, and your hooks stayed: remove them in the finally: of a try: around model(x)")


