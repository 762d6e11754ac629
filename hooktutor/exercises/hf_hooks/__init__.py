"""Exercises of ``12_huggingface_hooks.ipynb``, one file each (in the order the lesson asks for them)."""

from .block_outputs import exercise as block_outputs
from .hidden_states import exercise as hidden_states
from .new_token_states import exercise as new_token_states
from .steer import exercise as steer

__all__ = ["block_outputs", "steer", "hidden_states", "new_token_states"]
