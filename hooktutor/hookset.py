"""``HookSet``: named hooks, so a notebook cell can be run any number of times.

Taught in ``00_start_here.ipynb`` (the re-run trap) and ``02_forward_hooks.ipynb``.

A hook is state on the module, outliving the cell: running ``layer.register_forward_hook(f)`` twice attaches ``f``
twice, and it fires twice. A ``HookSet`` keys every hook by a name you choose; adding a
hook under a name that already exists first removes the old one, so exactly one stays
attached. Sets are themselves keyed by name: creating ``HookSet("lesson02")`` again (the
cell that made it was re-run) removes every hook the earlier set of that name held.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

# Strong references on purpose: a set whose variable was overwritten must still be found
# (and cleared) when a cell creates a set of the same name again.
_LIVE_SETS: dict[str, "HookSet"] = {}
_anonymous = 0

_MODULE_KINDS: dict[str, str] = {
    "forward_pre": "register_forward_pre_hook",
    "forward": "register_forward_hook",
    "backward_pre": "register_full_backward_pre_hook",
    "backward": "register_full_backward_hook",
}
_TENSOR_KINDS: dict[str, str] = {
    "tensor": "register_hook",
    "post_accumulate": "register_post_accumulate_grad_hook",
}


class HookSet:
    """A named registry of hooks that never attaches the same hook twice.

    >>> hooks = HookSet("demo")                                     # doctest: +SKIP
    >>> hooks.forward("save", model.fc1, lambda m, a, o: None)      # doctest: +SKIP
    >>> hooks.forward("save", model.fc1, lambda m, a, o: None)      # replaces, still 1 hook

    Kinds: ``forward_pre``, ``forward``, ``backward_pre``, ``backward`` (the full backward
    hooks) on modules; ``tensor`` (``Tensor.register_hook``) and ``post_accumulate`` on
    tensors. Keyword arguments such as ``with_kwargs=True`` or ``always_call=True`` pass
    through to torch. Use it as a context manager to remove everything at the end of a block;
    ``clear()`` removes everything now.
    """

    def __init__(self, name: str | None = None):
        global _anonymous
        if name is None:
            _anonymous += 1
            name = f"<anonymous {_anonymous}>"
        if not isinstance(name, str):
            raise TypeError(f"a HookSet name must be a str, got {type(name).__name__}")
        previous = _LIVE_SETS.get(name)
        self.replaced_previous = 0
        if previous is not None:
            self.replaced_previous = len(previous)
            previous.clear()
        self.name = name
        self._hooks: dict[str, tuple[str, str, Any, Callable]] = {}
        if not name.startswith("<anonymous"):
            _LIVE_SETS[name] = self

    # -- adding -----------------------------------------------------------------------
    def add(self, name: str, target: nn.Module | torch.Tensor, kind: str, fn: Callable,
            **kwargs: Any):
        """Attach ``fn`` to ``target`` as a hook of ``kind`` under ``name``; return its handle."""
        if not isinstance(name, str):
            raise TypeError(f"a hook name must be a str, got {type(name).__name__}")
        if not callable(fn):
            raise TypeError(f"the hook must be a function, got {type(fn).__name__}")
        if kind in _MODULE_KINDS:
            if not isinstance(target, nn.Module):
                raise TypeError(f"a {kind!r} hook goes on an nn.Module, got {type(target).__name__}")
            method = _MODULE_KINDS[kind]
        elif kind in _TENSOR_KINDS:
            if not isinstance(target, torch.Tensor):
                raise TypeError(f"a {kind!r} hook goes on a tensor, got {type(target).__name__}")
            method = _TENSOR_KINDS[kind]
        else:
            kinds = ", ".join(repr(k) for k in (*_MODULE_KINDS, *_TENSOR_KINDS))
            raise ValueError(f"unknown hook kind {kind!r}; use one of {kinds}")
        # the new hook first: when torch refuses it, the hook it was to replace stays
        handle = getattr(target, method)(fn, **kwargs)
        self.remove(name)
        where = type(target).__name__ if isinstance(target, nn.Module) else f"tensor{tuple(target.shape)}"
        self._hooks[name] = (kind, where, handle, fn)
        return handle

    def forward_pre(self, name: str, module: nn.Module, fn: Callable, **kwargs: Any):
        return self.add(name, module, "forward_pre", fn, **kwargs)

    def forward(self, name: str, module: nn.Module, fn: Callable, **kwargs: Any):
        return self.add(name, module, "forward", fn, **kwargs)

    def backward_pre(self, name: str, module: nn.Module, fn: Callable, **kwargs: Any):
        return self.add(name, module, "backward_pre", fn, **kwargs)

    def backward(self, name: str, module: nn.Module, fn: Callable, **kwargs: Any):
        return self.add(name, module, "backward", fn, **kwargs)

    def tensor(self, name: str, tensor: torch.Tensor, fn: Callable):
        return self.add(name, tensor, "tensor", fn)

    def post_accumulate(self, name: str, tensor: torch.Tensor, fn: Callable):
        return self.add(name, tensor, "post_accumulate", fn)

    # -- removing ---------------------------------------------------------------------
    def remove(self, name: str) -> bool:
        """Remove the hook called ``name``; return whether there was one."""
        entry = self._hooks.pop(name, None)
        if entry is None:
            return False
        entry[2].remove()
        return True

    def clear(self) -> int:
        """Remove every hook of this set; return how many."""
        n = len(self._hooks)
        for name in list(self._hooks):
            self.remove(name)
        return n

    # -- reading ----------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._hooks)

    def __contains__(self, name: object) -> bool:
        return name in self._hooks

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._hooks))

    @property
    def names(self) -> list[str]:
        return list(self._hooks)

    def __enter__(self) -> "HookSet":
        return self

    def __exit__(self, *exc: object) -> None:
        self.clear()

    def __repr__(self) -> str:
        head = f"HookSet({self.name!r}) with {len(self)} hook{'s' if len(self) != 1 else ''}"
        lines = [head] + [f"  {n}: {kind} hook on {where} ({getattr(fn, '__name__', 'hook')})"
                          for n, (kind, where, _h, fn) in self._hooks.items()]
        return "\n".join(lines)
