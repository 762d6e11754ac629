"""Exercises of ``08_training_hooks.ipynb``, one file each (in the order the lesson asks for them)."""

from .attach_ema import exercise as attach_ema
from .counting_allreduce import exercise as counting_allreduce
from .load_renamed import exercise as load_renamed
from .step_order import exercise as step_order
from .watch_updates import exercise as watch_updates

__all__ = ["step_order", "attach_ema", "load_renamed", "watch_updates", "counting_allreduce"]
