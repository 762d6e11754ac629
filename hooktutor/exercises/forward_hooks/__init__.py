"""Exercises of ``02_forward_hooks.ipynb``, one file each (in the order the lesson asks for them)."""

from .block_order import exercise as block_order
from .calls_of import exercise as calls_of
from .extract_features import exercise as extract_features
from .make_normaliser import exercise as make_normaliser
from .recorder import exercise as recorder

__all__ = ["recorder", "block_order", "extract_features", "make_normaliser", "calls_of"]
