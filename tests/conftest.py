"""Shared fixtures. Matplotlib draws off-screen in tests; torch uses one thread so the
library tests behave the same on every machine."""

from __future__ import annotations

import os

os.environ.setdefault("MPLBACKEND", "Agg")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _no_global_hook_leaks():
    """Every library test must leave the global module hooks as it found them."""
    from hooktutor.inventory import global_hook_ids, remove_global_hooks

    before = global_hook_ids()
    yield
    leaked = global_hook_ids() - before
    if leaked:
        remove_global_hooks(only=leaked)
        pytest.fail(f"the test left {len(leaked)} global module hook(s) registered")
