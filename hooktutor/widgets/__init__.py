"""Live hook widgets (ipywidgets 8 + matplotlib, both imported on first use).

* :func:`hook_toggle` — one checkbox for one hook on one layer, plus a view (lessons 01-05).
* :func:`inplace_switch` — flips a SmallCNN's ReLUs in place and shows what a stored
  activation and a full backward hook make of it (``05_inplace_relu_pitfall.ipynb``).
* :class:`HookPanel` — the full control panel: a hook mode per layer, activation,
  gradient-flow, loss and hook-table views (``06_hook_lab.ipynb``).
* :func:`ema_toggle` — an optimizer step post-hook keeping an average of the weights, and
  the loss curves it changes (``08_training_hooks.ipynb``).
* :func:`saved_tensors_toggle` — a pack/unpack pair that keeps the saved activations in
  bfloat16, and the bytes and gradient error it changes (``09_autograd_graph_hooks.ipynb``).
* :func:`patch_picker` — activation patching in a transformer: pick a module and a position,
  watch the logits move (``10_transformer_hooks.ipynb``).
* :data:`MODES` — ``off``, ``observe``, ``zero``, ``scale``, ``scale_grad``.

Every widget keeps its hooks in a :class:`hooktutor.HookSet` named after the widget, so
running the cell that made it again replaces it; ``close()`` removes its hooks.
"""

from __future__ import annotations

from ._base import close_all
from ._modes import MODES
from .inplace import InplaceSwitch, inplace_switch
from .optim import EmaToggle, ema_toggle
from .panel import HookPanel
from .patching import PatchPicker, patch_picker
from .saved import SavedTensorsToggle, saved_tensors_toggle
from .toggle import HookToggle, hook_toggle

__all__ = ["MODES", "EmaToggle", "HookPanel", "HookToggle", "InplaceSwitch", "PatchPicker", "SavedTensorsToggle",
           "close_all", "ema_toggle", "hook_toggle", "inplace_switch", "patch_picker", "saved_tensors_toggle"]
