"""Exercises of ``01_tensor_hooks.ipynb``, one file each (in the order the lesson asks for them)."""

from .attach_sgd import exercise as attach_sgd
from .clip_hook import exercise as clip_hook
from .doubling_hook import exercise as doubling_hook
from .grad_norms import exercise as grad_norms

__all__ = ["doubling_hook", "clip_hook", "grad_norms", "attach_sgd"]
