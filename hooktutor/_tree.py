"""Walking the tensors inside a module's output (tensor, tuple, list, dict, nested).

A Hugging Face ``ModelOutput`` (transformers) is a dict *and* a dataclass: it keeps only the
fields that are not ``None`` as keys, and it cannot be built from a plain dict the way a dict
is. It is rebuilt here from keyword arguments, so a copy keeps its class, its attribute access
(``out.logits``) and its keys. Any other object (a KV cache, a number, a string) is a leaf that
is kept as it is, by reference.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import torch


def _is_dataclass_dict(obj: Any) -> bool:
    """A dict that is also a dataclass instance: transformers' ``ModelOutput`` and the like."""
    return dataclasses.is_dataclass(obj) and not isinstance(obj, type)


def _rebuild_dict(obj: dict, items: dict) -> dict:
    if _is_dataclass_dict(obj):
        # ModelOutput(**fields): the class, the attributes and the non-None keys, as the model made it
        return type(obj)(**items)
    return type(obj)(items)


def map_tensors(obj: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    """The same structure with ``fn`` applied to every tensor; other leaves kept as they are."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # namedtuple
        return type(obj)(*(map_tensors(v, fn) for v in obj))
    if isinstance(obj, (tuple, list)):
        return type(obj)(map_tensors(v, fn) for v in obj)
    if isinstance(obj, dict):
        return _rebuild_dict(obj, {k: map_tensors(v, fn) for k, v in obj.items()})
    return obj


def map_leaves(obj: Any, fn: Callable[[tuple, Any], Any], path: tuple = ()) -> Any:
    """The same structure with every leaf (anything that is not a tuple, list or dict)
    replaced by ``fn(path, leaf)``; ``path`` is the tuple of keys of :func:`iter_tensors`."""
    if isinstance(obj, torch.Tensor):
        return fn(path, obj)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(map_leaves(v, fn, (*path, i)) for i, v in enumerate(obj)))
    if isinstance(obj, (tuple, list)):
        return type(obj)(map_leaves(v, fn, (*path, i)) for i, v in enumerate(obj))
    if isinstance(obj, dict):
        return _rebuild_dict(obj, {k: map_leaves(v, fn, (*path, k)) for k, v in obj.items()})
    return fn(path, obj)


def iter_tensors(obj: Any, path: tuple = ()) -> Iterator[tuple[tuple, torch.Tensor]]:
    """``(path, tensor)`` for every tensor inside ``obj``; ``path`` is a tuple of keys."""
    if isinstance(obj, torch.Tensor):
        yield path, obj
    elif isinstance(obj, (tuple, list)):
        for i, v in enumerate(obj):
            yield from iter_tensors(v, (*path, i))
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from iter_tensors(v, (*path, k))


def describe(obj: Any) -> str:
    """A short shape description: ``(8, 16)``, ``tuple[(8, 16), (8,)]``, ``dict{a: (2,)}``,
    ``CausalLMOutputWithPast{logits: (1, 4, 100), past_key_values: DynamicCache}``."""
    if isinstance(obj, torch.Tensor):
        return str(tuple(obj.shape))
    if isinstance(obj, (tuple, list)):
        inner = ", ".join(describe(v) for v in obj)
        return f"{type(obj).__name__}[{inner}]"
    if isinstance(obj, dict):
        inner = ", ".join(f"{k}: {describe(v)}" for k, v in obj.items())
        name = type(obj).__name__ if _is_dataclass_dict(obj) else "dict"
        return f"{name}{{{inner}}}"
    if obj is None:
        return "None"
    return type(obj).__name__
