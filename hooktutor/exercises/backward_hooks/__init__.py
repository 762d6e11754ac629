"""Exercises of ``04_backward_hooks.ipynb``, one file each (in the order the lesson asks for them)."""

from .clip_input_grad import exercise as clip_input_grad
from .first_vanishing_layer import exercise as first_vanishing_layer
from .output_grad_norms import exercise as output_grad_norms
from .zeroed_grad_input import exercise as zeroed_grad_input

__all__ = ["zeroed_grad_input", "output_grad_norms", "clip_input_grad", "first_vanishing_layer"]
