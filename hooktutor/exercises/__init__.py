"""Self-checking exercises, one module per lesson.

``from hooktutor.exercises import tensor_hooks as ex`` then ``ex.<exercise>.check(fn)``,
``.hint()``, ``.solution()``. The machinery lives in :mod:`hooktutor.exercises.core`.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from .core import REGISTRY, CheckReport, Exercise, Mismatch, Tester
from .predict import PREDICTIONS, Prediction

# lesson notebook -> module of its exercises
LESSON_MODULES: dict[str, str] = {
    "00_start_here": "start_here",
    "01_tensor_hooks": "tensor_hooks",
    "02_forward_hooks": "forward_hooks",
    "03_changing_outputs": "changing_outputs",
    "04_backward_hooks": "backward_hooks",
    "05_inplace_relu_pitfall": "inplace_relu",
    "06_hook_lab": "hook_lab",
    "07_capstone": "capstone",
    "08_training_hooks": "training_hooks",
    "09_autograd_graph_hooks": "graph_hooks",
    "10_transformer_hooks": "transformer_hooks",
    "11_compile_and_export": "compile_hooks",
    "12_huggingface_hooks": "hf_hooks",
    "13_hooks_at_work": "hooks_at_work",
}

__all__ = ["REGISTRY", "PREDICTIONS", "CheckReport", "Exercise", "Prediction", "Mismatch", "Tester",
           "LESSON_MODULES", "load_all", "load_predictions"]


def load_all() -> dict[str, Exercise]:
    """Import every lesson's exercise module that exists; return all exercises by key."""
    for name in LESSON_MODULES.values():
        try:
            importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
    return dict(REGISTRY)


def load_predictions() -> dict[str, Prediction]:
    """Import every lesson's exercise module; return every predict-then-run exercise by key."""
    load_all()
    return dict(PREDICTIONS)  # type: ignore[arg-type]


def __getattr__(name: str) -> ModuleType:
    if name in LESSON_MODULES.values():
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
