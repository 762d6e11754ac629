"""Exercises of ``00_start_here.ipynb``, one file each (in the order the lesson asks for them)."""

from .count_calls import exercise as count_calls
from .registered_twice import exercise as registered_twice

__all__ = ["registered_twice", "count_calls"]
