"""The hook modes a widget can switch on for a layer, as real hooks in a HookSet.

* ``off`` — no hook.
* ``observe`` — a forward hook that only records a summary of the output (it changes nothing).
* ``zero`` — a forward hook that returns ``output * 0`` (the gradient still flows, as zeros).
* ``scale`` — a forward hook that returns ``output * scale``.
* ``scale_grad`` — a forward hook that registers a *tensor hook* on the output it just saw;
  the tensor hook returns ``grad * scale``, so the gradient flowing back into the layer and
  everything before it is scaled, while the forward values stay the same.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ..hookset import HookSet

MODES: tuple[str, ...] = ("off", "observe", "zero", "scale", "scale_grad")

DESCRIPTIONS = {
    "off": "no hook",
    "observe": "observe the output",
    "zero": "zero the output",
    "scale": "scale the output",
    "scale_grad": "scale the gradient",
}


def check_mode(mode: object, *, allow_off: bool = True) -> str:
    allowed = MODES if allow_off else MODES[1:]
    if mode not in allowed:
        raise ValueError(f"unknown hook mode {mode!r}; use one of {', '.join(repr(m) for m in allowed)}")
    return mode  # type: ignore[return-value]


def check_scale(scale: object) -> float:
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise TypeError(f"scale must be a number such as 0.5 or 2.0, got {type(scale).__name__}")
    return float(scale)


def _summary(t: torch.Tensor) -> dict[str, Any]:
    t = t.detach().float()
    return {"shape": tuple(t.shape), "mean": float(t.mean()), "std": float(t.std()) if t.numel() > 1 else 0.0,
            "zeros": float((t == 0).float().mean())}


def make_hook(mode: str, scale: float, owner: str, layer: str,
              observed: dict[str, dict[str, Any]] | None = None) -> Callable:
    """The forward hook function for ``mode`` (named ``owner.mode`` in ``list_hooks``)."""
    if mode == "observe":
        def hook(module: nn.Module, args: tuple, output: Any) -> None:
            if observed is not None and isinstance(output, torch.Tensor):
                observed[layer] = _summary(output)
    elif mode == "zero":
        def hook(module: nn.Module, args: tuple, output: Any) -> Any:
            return output * 0
    elif mode == "scale":
        def hook(module: nn.Module, args: tuple, output: Any) -> Any:
            return output * scale
    elif mode == "scale_grad":
        def hook(module: nn.Module, args: tuple, output: Any) -> None:
            if isinstance(output, torch.Tensor) and output.requires_grad:
                # None when the loss used only another output of the output's node (a chunk)
                output.register_hook(lambda grad: None if grad is None else grad * scale)
    else:
        raise ValueError(f"mode {mode!r} attaches no hook")
    label = f"{mode}(x{scale:g})" if mode in ("scale", "scale_grad") else mode
    hook.__qualname__ = hook.__name__ = f"{owner}.{label}"
    return hook


def attach(hooks: HookSet, key: str, module: nn.Module, mode: str, scale: float, *,
           layer: str, observed: dict[str, dict[str, Any]] | None = None) -> None:
    """Put the hook of ``mode`` on ``module`` under ``key`` in ``hooks`` (``off`` removes it)."""
    hooks.remove(key)
    if observed is not None:
        observed.pop(layer, None)
    if mode != "off":
        hooks.forward(key, module, make_hook(mode, scale, hooks.name, layer, observed))
