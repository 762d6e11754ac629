"""Exercises of ``06_hook_lab.ipynb``, one file each (in the order the lesson asks for them)."""

from .scale_grad import exercise as scale_grad

__all__ = ["scale_grad"]
