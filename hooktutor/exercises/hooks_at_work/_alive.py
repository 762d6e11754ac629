"""What an answer keeps alive, for the checks of ``13_hooks_at_work.ipynb``'s exercises (a hook
keeps alive what it refers to): the tensors the garbage collector sees, and the size of what a
set of hooks refers to.

Types are tested with ``issubclass(type(o), ...)``: ``isinstance`` reads ``o.__class__``, which on
``torch.distributed.reduce_op`` (a deprecated alias) emits a FutureWarning.
"""

from __future__ import annotations

import gc
import sys
import types
from collections.abc import Iterable

import torch
from torch import nn


def live_tensors() -> list[torch.Tensor]:
    """Every tensor object alive now (tensors are tracked by the garbage collector), in no order.
    The caller drops the list when done: it keeps them all alive."""
    return [o for o in gc.get_objects() if issubclass(type(o), torch.Tensor)]


def new_tensors(before: Iterable[torch.Tensor]) -> list[torch.Tensor]:
    """The tensors alive now that are not in ``before`` (a list the caller still holds, so that no
    tensor of it was freed and its id reused). A reference cycle frees its tensors only at the cycle
    collector's next run: when some are found, one ``gc.collect()`` runs and they are counted again
    (a correct answer pays for no collection)."""
    known = {id(t) for t in before}
    found = [t for t in live_tensors() if id(t) not in known]
    if found:
        del found
        gc.collect()
        found = [t for t in live_tensors() if id(t) not in known]
    return found


def holds_graph(t: torch.Tensor) -> bool:
    """Whether ``t`` is part of an autograd graph (a leaf that requires grad, or a node's result)."""
    return t.requires_grad or t.grad_fn is not None


# not entered by held_bytes: shared things (classes, modules, a model), and a generator's or a
# frame's locals (the caller's, not the answer's)
_OPAQUE = (type, types.ModuleType, nn.Module, types.FrameType, types.GeneratorType, types.CodeType,
           types.CoroutineType, types.AsyncGeneratorType)


def _names(code: types.CodeType) -> set[str]:
    """The global names ``code`` and the code nested in it (its lambdas, inner functions) read."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


def held_bytes(roots: Iterable[object], limit: int = 20_000) -> int | None:
    """The size in bytes of everything ``roots`` refer to: through containers, a function's closure,
    defaults and attributes, the globals its code names, a bound method's object, any object's
    referents; a tensor counts its elements (``nelement() * element_size()``), anything else
    ``sys.getsizeof``. Classes, modules, nn.Modules, frames and generators are not entered. None when
    more than ``limit`` objects are reached (too much to say)."""
    seen: set[int] = set()
    todo = list(roots)
    total = 0
    while todo:
        o = todo.pop()
        if id(o) in seen or issubclass(type(o), _OPAQUE):
            continue
        seen.add(id(o))
        if len(seen) > limit:
            return None
        if issubclass(type(o), torch.Tensor):
            total += o.nelement() * o.element_size()
            continue
        try:
            total += sys.getsizeof(o)
        except TypeError:   # an extension type that does not say
            pass
        if issubclass(type(o), types.FunctionType):
            todo += _contents(o.__closure__)
            todo += [o.__defaults__ or (), o.__kwdefaults__ or {}, o.__dict__]
            todo += [o.__globals__[n] for n in _names(o.__code__) if n in o.__globals__]
        elif issubclass(type(o), types.MethodType):
            todo += [o.__func__, o.__self__]
        else:
            todo += gc.get_referents(o)
    return total


def _contents(cells: tuple[types.CellType, ...] | None) -> list[object]:
    """What a closure's cells hold (a variable of the enclosing function not assigned yet: skipped)."""
    out = []
    for cell in cells or ():
        try:
            out.append(cell.cell_contents)
        except ValueError:
            pass
    return out
