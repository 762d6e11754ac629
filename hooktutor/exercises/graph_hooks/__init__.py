"""Exercises of ``09_autograd_graph_hooks.ipynb``, one file each (in the order the lesson asks for them)."""

from .checkpoint_calls import exercise as checkpoint_calls
from .record_first_calls import exercise as record_first_calls
from .saved_bytes import exercise as saved_bytes
from .watch_grad_norm import exercise as watch_grad_norm

__all__ = ["checkpoint_calls", "saved_bytes", "record_first_calls", "watch_grad_norm"]
