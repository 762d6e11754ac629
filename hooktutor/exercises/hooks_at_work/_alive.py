"""What an answer keeps alive, for the checks of ``13_hooks_at_work.ipynb``'s exercises (a hook
keeps alive what it refers to): the tensors made while a :class:`Created` mode was on that are still
alive, and the size of what a set of hooks refers to (:func:`held_bytes`).

A scan of every object (``gc.get_objects()``) would see more, but costs a tenth of a second and more
in a large process, per scan: the mode costs a weak reference per tensor made. Types are tested with
``issubclass(type(o), ...)``: ``isinstance`` reads ``o.__class__``, which on
``torch.distributed.reduce_op`` (a deprecated alias) emits a FutureWarning.
"""

from __future__ import annotations

import gc
import sys
import types
import weakref
from collections.abc import Iterable

import torch
from torch import nn
from torch.overrides import TorchFunctionMode


class Created(TorchFunctionMode):
    """Weak references to every tensor that a torch function returns while the mode is on (the
    modules' outputs, what a hook computes from them, factories): which of them are still alive
    tells what the code run under it keeps."""

    def __init__(self) -> None:
        super().__init__()
        self.refs: list[weakref.ref] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for item in out if isinstance(out, (tuple, list)) else (out,):
            # an in-place op returns its argument (a parameter updated by a step): not a tensor it made
            if issubclass(type(item), torch.Tensor) and not any(item is a for a in args):
                self.refs.append(weakref.ref(item))
        return out

    def alive(self) -> int:
        return sum(r() is not None for r in self.refs)

    def kept(self, *, besides: Iterable[torch.Tensor] = (), collect: bool = True) -> list[torch.Tensor]:
        """The tensors made under the mode that are alive now, but those in ``besides`` (a model's
        parameters, should one be made under it). A reference cycle frees its tensors only at the cycle
        collector's next run: when some are found and ``collect``, one ``gc.collect()`` (a tenth of a
        second in a large process) runs and they are counted again (a correct answer pays for none)."""
        skip = {id(t) for t in besides}
        found = [t for r in self.refs if (t := r()) is not None and id(t) not in skip]
        if found and collect:
            del found
            gc.collect()
            found = [t for r in self.refs if (t := r()) is not None and id(t) not in skip]
        return found


def holds_graph(t: torch.Tensor) -> bool:
    """Whether ``t`` is part of an autograd graph (a leaf that requires grad, or a node's result)."""
    return t.requires_grad or t.grad_fn is not None


# not entered by held_bytes: shared things (modules, a model, the classes of Python and of the
# libraries), and a generator's or a frame's locals (the caller's, not the answer's)
_OPAQUE = (types.ModuleType, nn.Module, types.FrameType, types.GeneratorType, types.CodeType,
           types.CoroutineType, types.AsyncGeneratorType)
_LIBRARIES = {"torch", "numpy", "transformers", "accelerate", "hooktutor", "typing_extensions", "_pytest", "pytest"}


def _opaque(o: object) -> bool:
    """Not entered: see ``_OPAQUE``; a class is entered only where it is the answer's own (a class
    attribute that keeps every step's values is a leak too), not Python's or a library's."""
    if issubclass(type(o), type):
        top = (getattr(o, "__module__", None) or "builtins").split(".")[0]
        return top in sys.stdlib_module_names or top in _LIBRARIES and not _answers_module(o)
    return issubclass(type(o), _OPAQUE)


def _answers_module(cls: object) -> bool:
    """A class of an exercise's catalogued answers (hooktutor.exercises.<lesson>.<exercise>): an answer's."""
    return str(getattr(cls, "__module__", "")).startswith("hooktutor.exercises.")


def _names(code: types.CodeType) -> set[str]:
    """The global names ``code`` and the code nested in it (its lambdas, inner functions) read."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


def held_bytes(roots: Iterable[object], limit: int = 20_000, *, besides: Iterable[object] = ()) -> int | None:
    """:func:`held`'s size in bytes."""
    found = held(roots, limit, besides=besides)
    return None if found is None else found[0]


def held(roots: Iterable[object], limit: int = 20_000, *,
         besides: Iterable[object] = ()) -> tuple[int, int] | None:
    """The size in bytes of everything ``roots`` refer to: through containers, a function's closure,
    defaults and attributes, the globals its code names, a bound method's object, any object's
    referents; a tensor counts its elements (``nelement() * element_size()``), anything else
    ``sys.getsizeof``; and how many objects that is (a leak of a few small objects, a NumPy copy every
    50 steps, stays under any threshold of bytes and adds objects all the same). Modules,
    nn.Modules, frames, generators, and classes but the answer's own are not entered. None when more
    than ``limit`` objects are reached (too much to say). What only ``besides`` holds (a list the
    answer returns, and its items) is not counted."""
    besides_ids = {id(o) for o in besides}
    seen: set[int] = set(besides_ids)
    todo = list(roots)
    total = 0
    while todo:
        o = todo.pop()
        if id(o) in seen or _opaque(o):
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
    return total, len(seen) - len(besides_ids)


def _contents(cells: tuple[types.CellType, ...] | None) -> list[object]:
    """What a closure's cells hold (a variable of the enclosing function not assigned yet: skipped)."""
    out = []
    for cell in cells or ():
        try:
            out.append(cell.cell_contents)
        except ValueError:
            pass
    return out


def module_contents(model: nn.Module) -> dict[str, set[str]]:
    """What a model holds besides its hooks: its state_dict's keys, and each module's attributes (an answer
    that leaves a buffer or an attribute on a module changes one of them)."""
    found = {"state_dict": set(model.state_dict())}
    found.update({f"{name or 'the model'} attributes": {k for k in vars(m) if "hook" not in k}
                  for name, m in model.named_modules()})
    return found


def added_to(model: nn.Module, before: dict[str, set[str]]) -> tuple[str, list[str]] | None:
    """The first part of :func:`module_contents` that gained keys since ``before``, and those keys."""
    for where, keys in module_contents(model).items():
        added = sorted(keys - before.get(where, set()))
        if added:
            return where, added
    return None
