"""Exercises of ``13_hooks_at_work.ipynb``, one file each (in the order the lesson asks for them)."""

from .amp_dtypes import exercise as amp_dtypes
from .conv_absmax import exercise as conv_absmax
from .leak_free_logger import exercise as leak_free_logger
from .per_sample_norms import exercise as per_sample_norms

__all__ = ["amp_dtypes", "per_sample_norms", "conv_absmax", "leak_free_logger"]
