"""Exercises of ``11_compile_and_export.ipynb``, one file each (in the order the lesson asks for them)."""

from .hook_compiled import exercise as hook_compiled

__all__ = ["hook_compiled"]
