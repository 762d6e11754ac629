"""Exercises of ``11_compile_and_export.ipynb``, one file each (in the order the lesson asks for them)."""

from .count_graphs import exercise as count_graphs
from .hook_compiled import exercise as hook_compiled
from .late_hooks import exercise as late_hooks
from .with_intermediates import exercise as with_intermediates

__all__ = ["late_hooks", "hook_compiled", "count_graphs", "with_intermediates"]
