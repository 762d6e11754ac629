"""hooktutor: the helper library behind the PyTorch hooks course in ``notebooks/``.

The toolkit (each name's docstring says which lesson teaches it):

* :func:`capture` — record layer outputs, inputs and gradients correctly, then detach.
* :func:`list_hooks` / :func:`remove_hooks` — see and remove every hook on a model.
* :class:`HookSet` — named hooks that a re-run cell replaces instead of duplicating.
* :func:`trace_hooks` — the order in which every kind of hook fires.
* :mod:`hooktutor.models`, :mod:`hooktutor.data` — small seeded models, synthetic data.
* :mod:`hooktutor.plots`, :mod:`hooktutor.widgets`, :mod:`hooktutor.exercises` — figures,
  live hook widgets and self-checking exercises (matplotlib and ipywidgets load on first use).
"""

from __future__ import annotations

import importlib
from typing import Any

from . import data, models
from .capture import Recording, RecordNotFound, capture
from .hookset import HookSet
from .inventory import HookRow, HookTable, list_hooks, remove_hooks
from .selection import UnknownLayerError, get_layer, select_layers
from .trace import HookEvent, HookTrace, trace_hooks

__version__ = "0.1.0"

__all__ = [
    "HookEvent", "HookRow", "HookSet", "HookTable", "HookTrace", "RecordNotFound", "Recording",
    "UnknownLayerError", "capture", "data", "get_layer", "list_hooks", "models", "remove_hooks",
    "select_layers", "trace_hooks", "__version__",
]

_LAZY = {"plots": ".plots", "widgets": ".widgets", "exercises": ".exercises", "course": ".course",
         "doctor": ".course.doctor"}


def __getattr__(name: str) -> Any:  # load the heavy submodules only when used
    if name in _LAZY:
        return importlib.import_module(_LAZY[name], __name__)
    raise AttributeError(f"module 'hooktutor' has no attribute {name!r}")
