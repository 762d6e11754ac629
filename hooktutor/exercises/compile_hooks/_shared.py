"""Helpers shared by the exercises of 11_compile_and_export.ipynb."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator

import torch
from torch import nn

from ...models import seeded

_MISSING = object()


def _no_latency_profile(*args: object) -> float:
    """Stands for ``torch._dynamo.guards.profile_guard_manager`` in :func:`compiling`: a latency of 0 us."""
    return 0.0


@contextlib.contextmanager
def compiling() -> Iterator[None]:
    """Compile inside this block without changing the process for the checks that run after it.

    The first ``torch.compile`` of a process patches some of torch once (``TorchPatcher``): on
    torch 2.1 it wraps every optimizer class's ``step``, after which optimizer step hooks never
    fire again in that process (lesson 08's checks use them). The block puts back every
    attribute of the optimizer classes (and the ``hooked`` mark of their step functions), and the
    distributions' default argument validation, as they were before it.

    Inside the block, Dynamo's measurement of each new guard set's latency (``profile_guard_manager``,
    a cache flush and one timed evaluation per compile, logged as a metric and used for nothing
    else) is skipped: about a third of a small model's compile time, and the checks compile a lot.
    What the guards check, and so every count a check compares, is unchanged."""
    import torch._dynamo  # noqa: F401  (imported here, so that its own import-time changes come first)
    import torch._dynamo.guards as guards

    classes = [c for c in vars(torch.optim).values() if inspect.isclass(c) and issubclass(c, torch.optim.Optimizer)]
    saved = [(c, dict(vars(c))) for c in classes]
    # torch 2.1 also marks each step function `hooked` ("disable future hooking"): an optimizer class
    # whose step was not wrapped yet would then never get the wrapper that calls the step hooks
    steps = []
    for cls in classes:
        fn = vars(cls).get("step")
        while fn is not None and fn not in [f for f, _ in steps]:
            steps.append((fn, vars(fn).get("hooked", _MISSING) if hasattr(fn, "__dict__") else _MISSING))
            fn = getattr(fn, "__wrapped__", None)
    validate = torch.distributions.Distribution._validate_args
    profile = getattr(guards, "profile_guard_manager", None)
    if profile is not None:
        guards.profile_guard_manager = _no_latency_profile
    try:
        yield
    finally:
        if profile is not None:
            guards.profile_guard_manager = profile
        for cls, attrs in saved:
            for name, value in attrs.items():
                if vars(cls).get(name) is not value:
                    setattr(cls, name, value)
        for fn, hooked in steps:
            if hooked is not _MISSING:
                fn.hooked = hooked
            elif hasattr(fn, "__dict__"):
                vars(fn).pop("hooked", None)
        torch.distributions.Distribution._validate_args = validate


@contextlib.contextmanager
def recompile_limit(n: int) -> Iterator[None]:
    """Dynamo's limit of compiled versions per function set to ``n`` in the block (the setting is
    ``recompile_limit`` on recent torches, ``cache_size_limit`` on older ones), and the warning it
    logs when the limit is hit kept off the screen."""
    import logging

    import torch._dynamo

    name = "recompile_limit" if hasattr(torch._dynamo.config, "recompile_limit") else "cache_size_limit"
    loggers = [lg for key, lg in logging.root.manager.loggerDict.items()
               if key.startswith("torch") and isinstance(lg, logging.Logger) and lg.handlers]
    saved = [(lg, lg.handlers) for lg in loggers]
    for lg in loggers:
        lg.handlers = [logging.NullHandler()]
    try:
        with torch._dynamo.config.patch(**{name: n}):
            yield
    finally:
        for lg, handlers in saved:
            lg.handlers = handlers


class GraphCounter:
    """A ``torch.compile`` backend that counts the graphs it is given and runs each as it is."""

    def __init__(self) -> None:
        self.graphs = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list) -> object:
        self.graphs += 1
        return gm.forward


def mlp(seed: int, dtype: torch.dtype = torch.float32) -> nn.Sequential:
    with seeded(seed):
        return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3)).to(dtype)


# The first compile of a process imports and sets up torch._dynamo (about a second): do it at
# import time, so that a check's time is the check's own.
with compiling():
    import torch._dynamo

    _warm = mlp(0)
    with _warm[0].register_forward_hook(lambda m, a, o: None), torch.no_grad():
        torch.compile(_warm, backend="eager")(torch.zeros(1, 4))
    torch._dynamo.reset()
    del _warm
