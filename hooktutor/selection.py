"""Choosing layers of a model by name, type or predicate, with helpful errors.

Used by :func:`hooktutor.capture`, the widgets and the exercise checks. The error for a
misspelt name is shown in ``00_start_here.ipynb``.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from typing import Union

from torch import nn
from torch.nn.parallel import DataParallel, DistributedDataParallel  # loaded by `import torch` already

LayerSpec = Union[None, str, Iterable[str], type, Callable[[str, nn.Module], bool]]

ACCEPTED = ("None (every leaf module), a layer name such as 'features.0', a list of names, "
            "a module class such as nn.Conv2d, or a function (name, module) -> bool")


class UnknownLayerError(LookupError):
    """A layer name that is not in the model; the message suggests the closest real names."""


def check_model(model: object, func: str) -> nn.Module:
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"{func}() needs a torch.nn.Module as its model, got {type(model).__name__}. "
            "Pass the model itself, for example SmallCNN(), not its output or its class."
        )
    return model


def closest(name: str, candidates: list[str]) -> list[str]:
    """The candidates most like ``name`` (the best one, and any nearly as good)."""
    scored = sorted(((difflib.SequenceMatcher(None, name, c).ratio(), c) for c in candidates),
                    reverse=True)
    if not scored or scored[0][0] < 0.5:
        return []
    best = scored[0][0]
    return [c for r, c in scored[:3] if r >= best - 0.06]


def wrapper_prefix(model: nn.Module) -> str:
    """The prefix a wrapper puts before the names of the wrapped model's layers: ``"module."``
    for a ``DistributedDataParallel`` or ``DataParallel`` (``08_training_hooks``),
    ``"_orig_mod."`` for what ``torch.compile(model)`` returns, both when one wraps the other;
    ``""`` for a plain model. Every name a toolkit function accepts may leave it out."""
    prefix = ""
    while True:
        if isinstance(model, (DistributedDataParallel, DataParallel)):
            prefix, model = prefix + "module.", model.module
        elif type(model).__name__ == "OptimizedModule" and isinstance(getattr(model, "_orig_mod", None), nn.Module):
            prefix, model = prefix + "_orig_mod.", model._orig_mod   # without importing torch._dynamo
        else:
            return prefix


def get_layer(model: nn.Module, name: str) -> nn.Module:
    """The submodule called ``name`` (``""`` for the model itself), or a helpful error.

    On a wrapper (``DistributedDataParallel``, ``DataParallel``, ``torch.compile``'s module) a
    layer can be named with or without the prefix the wrapper adds (:func:`wrapper_prefix`)."""
    check_model(model, "get_layer")
    if not isinstance(name, str):
        raise TypeError(f"a layer name must be a str such as 'features.0', got {type(name).__name__}")
    modules = dict(model.named_modules())
    if name in modules:
        return modules[name]
    prefix = wrapper_prefix(model)
    if prefix and prefix + name in modules:  # DDP: 'fc1' is 'module.fc1'; compiled: '_orig_mod.fc1'
        return modules[prefix + name]
    real = [n for n in modules if n]
    if prefix:  # suggest the short names too
        real += [n[len(prefix):] for n in real if n.startswith(prefix)]
    close = closest(name, real)
    where = type(model).__name__
    if close:
        hint = "did you mean " + " or ".join(repr(c) for c in close) + "?"
    else:
        shown = ", ".join(repr(n) for n in real[:12]) + (", ..." if len(real) > 12 else "")
        hint = f"its modules are {shown}" if real else "it has no submodules"
    raise UnknownLayerError(f"{name!r} is not a module of {where}; {hint}")


def select_layers(model: nn.Module, layers: LayerSpec, *, func: str = "capture"
                  ) -> list[tuple[str, nn.Module]]:
    """Resolve a layer selection into ``[(name, module), ...]`` in model order.

    ``None`` selects every leaf module (a module with no children; the model itself when it
    has none). A module appearing under several names is selected once, under its first.
    """
    check_model(model, func)
    if layers is None:
        chosen = [(n, m) for n, m in model.named_modules() if not any(True for _ in m.children())]
        return [(n or "", m) for n, m in chosen]
    if isinstance(layers, str):
        return [(layers, get_layer(model, layers))]
    if isinstance(layers, type):
        if not issubclass(layers, nn.Module):
            raise TypeError(f"layers={layers.__name__} is a class but not an nn.Module class; "
                            f"{func}() accepts {ACCEPTED}")
        chosen = [(n, m) for n, m in model.named_modules() if isinstance(m, layers)]
        if not chosen:
            present = sorted({type(m).__name__ for m in model.modules()})
            raise UnknownLayerError(f"{type(model).__name__} has no {layers.__name__} module; "
                                    f"it contains {', '.join(present)}")
        return chosen
    if callable(layers) and not isinstance(layers, nn.Module):
        try:
            chosen = [(n, m) for n, m in model.named_modules() if layers(n, m)]
        except TypeError as exc:
            raise TypeError(f"a layer predicate is called as predicate(name, module) and must "
                            f"return True or False; calling yours failed: {exc}") from None
        if not chosen:
            raise UnknownLayerError(f"your predicate selected no module of {type(model).__name__}")
        return chosen
    if isinstance(layers, nn.Module):
        for n, m in model.named_modules():
            if m is layers:
                return [(n, m)]
        raise UnknownLayerError(f"that {type(layers).__name__} is not part of {type(model).__name__}")
    if isinstance(layers, Iterable):
        items = list(layers)
        bad = [x for x in items if not isinstance(x, str)]
        if bad:
            raise TypeError(f"a list of layers must hold names (str), got {type(bad[0]).__name__}; "
                            f"{func}() accepts {ACCEPTED}")
        seen: dict[str, nn.Module] = {}
        for name in items:
            seen.setdefault(name, get_layer(model, name))
        return list(seen.items())
    raise TypeError(f"layers={layers!r} is not a layer selection; {func}() accepts {ACCEPTED}")
