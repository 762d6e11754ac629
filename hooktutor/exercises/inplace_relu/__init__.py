"""Exercises of ``05_inplace_relu_pitfall.ipynb``, one file each (in the order the lesson asks for them)."""

from .before_inplace import exercise as before_inplace
from .grad_output_with_inplace_off import exercise as grad_output_with_inplace_off
from .pre_relu_grad import exercise as pre_relu_grad
from .record_outputs import exercise as record_outputs
from .switch_off_inplace import exercise as switch_off_inplace

__all__ = ["before_inplace", "record_outputs", "switch_off_inplace", "pre_relu_grad", "grad_output_with_inplace_off"]
