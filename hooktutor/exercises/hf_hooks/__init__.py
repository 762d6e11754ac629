"""Exercises of ``12_huggingface_hooks.ipynb``, one file each (in the order the lesson asks for them)."""

from .block_outputs import exercise as block_outputs
from .steer_block import exercise as steer

__all__ = ["block_outputs", "steer"]
