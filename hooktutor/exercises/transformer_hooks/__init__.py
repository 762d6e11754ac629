"""Exercises of ``10_transformer_hooks.ipynb``, one file each (in the order the lesson asks for them)."""

from .fast_path import exercise as fast_path
from .patch_input import exercise as patch_input
from .run_with_cache import exercise as run_with_cache
from .steer import exercise as steer

__all__ = ["fast_path", "run_with_cache", "patch_input", "steer"]
