"""Helpers shared by several exercises of 01_tensor_hooks.ipynb."""

from __future__ import annotations

from ...data import blobs
from ...models import MLP


def _mlp_problem(seed: int):
    model = MLP(seed=seed)
    x, y = blobs(12, seed=seed)
    return model, x, y


