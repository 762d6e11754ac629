"""Exercises of ``03_changing_outputs.ipynb``, one file each (in the order the lesson asks for them)."""

from .ablate_units import exercise as ablate_units
from .clamped_output import exercise as clamped_output
from .scale_first import exercise as scale_first
from .which_edits_change import exercise as which_edits_change

__all__ = ["which_edits_change", "ablate_units", "clamped_output", "scale_first"]
