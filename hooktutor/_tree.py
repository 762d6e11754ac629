"""Walking the tensors inside a module's output (tensor, tuple, list, dict, nested)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch


def map_tensors(obj: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    """The same structure with ``fn`` applied to every tensor; other leaves kept as they are."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # namedtuple
        return type(obj)(*(map_tensors(v, fn) for v in obj))
    if isinstance(obj, (tuple, list)):
        return type(obj)(map_tensors(v, fn) for v in obj)
    if isinstance(obj, dict):
        return type(obj)((k, map_tensors(v, fn)) for k, v in obj.items())
    return obj


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


def set_at(obj: Any, path: tuple, value: Any) -> Any:
    """A copy of the structure ``obj`` with the leaf at ``path`` replaced by ``value``."""
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(obj, dict):
        new = type(obj)(obj)
        new[head] = set_at(obj[head], rest, value)
        return new
    items = list(obj)
    items[head] = set_at(items[head], rest, value)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*items)
    return type(obj)(items)


def describe(obj: Any) -> str:
    """A short shape description: ``(8, 16)``, ``tuple[(8, 16), (8,)]``, ``dict{a: (2,)}``."""
    if isinstance(obj, torch.Tensor):
        return str(tuple(obj.shape))
    if isinstance(obj, (tuple, list)):
        inner = ", ".join(describe(v) for v in obj)
        return f"{type(obj).__name__}[{inner}]"
    if isinstance(obj, dict):
        inner = ", ".join(f"{k}: {describe(v)}" for k, v in obj.items())
        return f"dict{{{inner}}}"
    if obj is None:
        return "None"
    return type(obj).__name__
