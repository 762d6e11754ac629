"""FSDP2 on one CPU: ``fully_shard`` on two gloo processes, with workers written in a notebook.

Taught in ``13_hooks_at_work.ipynb`` (section 2). ``fully_shard`` (FSDP2, on a CPU torch 2.7 and newer)
splits every parameter of a module into one shard per process and keeps only that shard between
calls. It is built from module hooks: a forward pre-hook gathers the full parameters before the
module runs, a forward hook frees them again, and hooks in the backward pass gather them for
the gradients and reduce-scatter those.

The lesson's hooks are written in the notebook, where the learner reads and changes them.
:func:`hooktutor.distributed.run` takes only a worker it can import (a spawned process, on macOS
and Windows, imports it by name), so :func:`run` sends a notebook's worker as its *source*: the
function, the notebook functions it calls, and the modules and importable names it uses are
rebuilt in every rank. A worker returns plain data (strings, numbers, tensors), as
:func:`describe` makes of a tensor.
"""

from __future__ import annotations

import dis
import inspect
import linecache
import textwrap
import types
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from . import distributed
from .models import MLP

_PLAIN = (bool, int, float, complex, str, bytes, type(None))


def describe(tensor: torch.Tensor | None) -> str:
    """``"DTensor (16, 8), this rank holds (8, 8)"``, ``"Parameter (16, 8)"`` or ``"None"``."""
    if tensor is None:
        return "None"
    to_local = getattr(tensor, "to_local", None)
    if to_local is not None:  # a DTensor: its global shape, and the shard this process holds
        return f"{type(tensor).__name__} {tuple(tensor.shape)}, this rank holds {tuple(to_local().shape)}"
    return f"{type(tensor).__name__} {tuple(tensor.shape)}"


def sharded_mlp(seed: int = 0) -> nn.Module:
    """``MLP(seed=seed)`` with ``fully_shard`` on each Linear, then on the whole model: every Linear
    is a unit of its own (its hooks are FSDP2's), the root another. Call it inside a process group."""
    from torch.distributed.fsdp import fully_shard

    model = MLP(seed=seed)
    for layer in (model.fc1, model.fc2, model.head):
        fully_shard(layer)
    fully_shard(model)
    return model


def _names(code: types.CodeType) -> list[str]:
    """The global names ``code`` and the code nested in it (lambdas, inner functions) read, in order
    (not its attribute names: ``m.weight`` reads no global ``weight``)."""
    names = []
    for op in dis.get_instructions(code):
        if op.opname in ("LOAD_GLOBAL", "LOAD_NAME") and op.argval not in names:
            names.append(op.argval)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names += [n for n in _names(const) if n not in names]
    return names


def _is_notebooks(fn: Any) -> bool:
    return isinstance(fn, types.FunctionType) and fn.__module__ in ("__main__", None)


def _pack(fn: types.FunctionType, sources: dict[str, str], imports: dict[str, tuple], values: dict) -> None:
    """Add ``fn``'s source (and that of the notebook functions it calls) to ``sources``, and what its
    global names refer to: a module or an importable object (``imports``), a plain value (``values``)."""
    if fn.__name__ in sources:
        return
    try:
        sources[fn.__name__] = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError) as exc:
        raise ValueError(f"the source of {fn.__name__!r} cannot be read: define it with `def` in a cell") from exc
    for name in _names(fn.__code__):
        if name not in fn.__globals__:   # a builtin, or a name the notebook has not defined (yet)
            continue
        value = fn.__globals__[name]
        if isinstance(value, types.ModuleType):
            imports[name] = ("module", value.__name__)
        elif _is_notebooks(value):
            _pack(value, sources, imports, values)
        elif isinstance(value, _PLAIN):
            values[name] = value
        elif getattr(value, "__module__", "__main__") != "__main__" and hasattr(value, "__qualname__"):
            imports[name] = (value.__module__, value.__qualname__)
        else:
            raise ValueError(f"{fn.__name__!r} uses {name!r}, a {type(value).__name__} made in the notebook: "
                             "a process cannot receive it; build it inside the worker, or import it there")


def _from_source(rank: int, world_size: int, *, name: str, sources: dict[str, str],
                 imports: dict[str, tuple], values: dict) -> Any:
    """What each rank runs for :func:`run`: rebuild the notebook's worker, call it."""
    import importlib

    namespace: dict[str, Any] = {"__name__": "__notebook_worker__", **values}
    for alias, (module, qualname) in imports.items():
        if module == "module":
            namespace[alias] = importlib.import_module(qualname)
        else:
            value: Any = importlib.import_module(module)
            for part in qualname.split("."):
                value = getattr(value, part)
            namespace[alias] = value
    for function, source in sources.items():
        filename = f"<notebook: {function}>"   # a traceback then quotes the notebook's lines
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        exec(compile(source, filename, "exec"), namespace)
    return namespace[name](rank, world_size)


def run(worker: Callable[[int, int], Any], world_size: int = 2) -> list[Any]:
    """Run ``worker(rank, world_size)``, a function defined in the notebook, in ``world_size``
    processes of one gloo group (:func:`hooktutor.distributed.run`); return what each rank returned.

    The worker is sent as its source, with the notebook functions it calls: it may use modules and
    names imported in the notebook, and plain values (numbers, strings) of the notebook; anything
    else it uses (a model, a tensor, a list) it builds itself.
    """
    import torch.distributed.fsdp  # noqa: F401  (imported here once, not in every forked process)

    if not _is_notebooks(worker):   # a module's function: it can be imported as it is
        return distributed.run(worker, world_size)
    sources: dict[str, str] = {}
    imports: dict[str, tuple] = {}
    values: dict[str, Any] = {}
    _pack(worker, sources, imports, values)
    return distributed.run(_from_source, world_size, name=worker.__name__, sources=sources,
                           imports=imports, values=values)
