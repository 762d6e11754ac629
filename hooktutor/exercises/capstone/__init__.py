"""Exercises of ``07_capstone.ipynb``, one file each (in the order the lesson asks for them)."""

from .dead_channels import exercise as dead_channels
from .first_nonfinite import exercise as first_nonfinite
from .grad_cam import exercise as grad_cam
from .nan_hunt import exercise as nan_hunt

__all__ = ["nan_hunt", "grad_cam", "dead_channels", "first_nonfinite"]
