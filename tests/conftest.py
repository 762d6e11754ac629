"""Shared fixtures. Torch uses one thread so the library tests behave the same on every
machine. (Matplotlib picks its off-screen backend in hooktutor.plots; no MPLBACKEND here,
because the notebook kernels nbval starts would inherit it and stop showing figures.)"""

from __future__ import annotations

import pytest
import torch

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
