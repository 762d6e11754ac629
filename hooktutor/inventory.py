"""Listing and removing every hook attached to a module tree.

Taught in ``00_start_here.ipynb`` (hooks are global state) and used in every lesson
to prove that nothing was left attached.

PyTorch has no public API to enumerate hooks without their handles
(pytorch/pytorch#2847), so this is the **only** module of hooktutor that reads
torch's private hook dictionaries. ``tests/test_torch_internals.py`` pins each
attribute used here, so a torch release that renames one fails loudly there
instead of making ``list_hooks`` silently miss hooks.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.modules import module as _module_mod

# (private dict on nn.Module, kind shown to the learner); flag dicts are read separately.
MODULE_HOOK_DICTS: tuple[tuple[str, str], ...] = (
    ("_forward_pre_hooks", "forward_pre"),
    ("_forward_hooks", "forward"),
    ("_backward_pre_hooks", "backward_pre"),
    ("_backward_hooks", "backward"),
)
# Dicts that only carry flags for ids of the dicts above; cleared together with them.
MODULE_FLAG_DICTS: tuple[str, ...] = (
    "_forward_pre_hooks_with_kwargs",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
)
# Private dicts on a tensor (a parameter): Tensor.register_hook and
# Tensor.register_post_accumulate_grad_hook.
TENSOR_HOOK_DICTS: tuple[tuple[str, str], ...] = (
    ("_backward_hooks", "tensor"),
    ("_post_accumulate_grad_hooks", "post_accumulate"),
)
# Module-level dicts in torch.nn.modules.module for the global hooks
# (register_module_forward_hook and friends).
GLOBAL_HOOK_DICTS: tuple[tuple[str, str], ...] = (
    ("_global_forward_pre_hooks", "forward_pre"),
    ("_global_forward_hooks", "forward"),
    ("_global_backward_pre_hooks", "backward_pre"),
    ("_global_backward_hooks", "backward"),
)
GLOBAL_FLAG_DICTS: tuple[str, ...] = (
    "_global_forward_hooks_with_kwargs",
    "_global_forward_hooks_always_called",
)

GLOBAL = "<global>"
ROOT = "<root>"

KIND_ORDER = ("forward_pre", "forward", "backward_pre", "backward", "backward (legacy)",
              "tensor", "post_accumulate")


@dataclass(frozen=True)
class HookRow:
    """One attached hook: where it is, what kind it is, which function runs."""

    path: str
    kind: str
    function: str
    handle_id: int
    flags: tuple[str, ...] = ()
    hook: Callable | None = None

    @property
    def where(self) -> str:
        return self.path


def _function_name(fn: object) -> str:
    inner = getattr(fn, "func", None)  # functools.partial
    if inner is not None and not hasattr(fn, "__qualname__"):
        return f"partial({_function_name(inner)})"
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    if name is None:
        return _short(type(fn).__qualname__) + " instance"
    return _short(name)


def _short(qualname: str) -> str:
    """``outer.<locals>.hook`` -> ``hook (in outer)``: readable in a table."""
    if ".<locals>." not in qualname:
        return qualname
    outer, _, inner = qualname.rpartition(".<locals>.")
    return f"{inner} (in {outer.rpartition('.<locals>.')[2]})"


def _module_rows(path: str, mod: nn.Module) -> Iterator[HookRow]:
    for attr, kind in MODULE_HOOK_DICTS:
        hooks = getattr(mod, attr)
        for hid, fn in hooks.items():
            flags: list[str] = []
            row_kind = kind
            if attr == "_forward_pre_hooks" and hid in mod._forward_pre_hooks_with_kwargs:
                flags.append("with_kwargs")
            if attr == "_forward_hooks":
                if hid in mod._forward_hooks_with_kwargs:
                    flags.append("with_kwargs")
                if hid in mod._forward_hooks_always_called:
                    flags.append("always_call")
            if attr == "_backward_hooks" and mod._is_full_backward_hook is False:
                row_kind = "backward (legacy)"
            yield HookRow(path, row_kind, _function_name(fn), hid, tuple(flags), fn)


def _tensor_rows(path: str, tensor: torch.Tensor) -> Iterator[HookRow]:
    for attr, kind in TENSOR_HOOK_DICTS:
        hooks = getattr(tensor, attr, None)
        if not hooks:
            continue
        for hid, fn in hooks.items():
            yield HookRow(path, kind, _function_name(fn), hid, (), fn)


def _global_flags(attr: str) -> dict:
    # torch < 2.2 has no global with_kwargs / always_call flags
    return getattr(_module_mod, attr, {})


def _global_rows() -> Iterator[HookRow]:
    for attr, kind in GLOBAL_HOOK_DICTS:
        hooks = getattr(_module_mod, attr)
        for hid, fn in hooks.items():
            flags: list[str] = []
            row_kind = kind
            if attr == "_global_forward_hooks":
                if hid in _global_flags("_global_forward_hooks_with_kwargs"):
                    flags.append("with_kwargs")
                if hid in _global_flags("_global_forward_hooks_always_called"):
                    flags.append("always_call")
            if attr == "_global_backward_hooks" and _module_mod._global_is_full_backward_hook is False:
                row_kind = "backward (legacy)"
            yield HookRow(GLOBAL, row_kind, _function_name(fn), hid, tuple(flags), fn)


def _check_module(module: object, func: str) -> nn.Module:
    if not isinstance(module, nn.Module):
        raise TypeError(
            f"{func}() needs a torch.nn.Module (your model or one of its layers), "
            f"got {type(module).__name__}"
        )
    return module


class HookTable:
    """The hooks attached to a module tree, as a table that reads well in a notebook.

    Made by :func:`list_hooks`. ``len(table)`` counts the hooks, ``table.rows`` holds
    :class:`HookRow` objects, ``table.where(kind=..., path=...)`` filters. The text and
    HTML views list module, kind, function and flags; handle ids (which grow every time a
    hook is registered anywhere) are kept in the rows but not shown, so a notebook that
    prints a table gives the same output when it is run twice.
    """

    def __init__(self, rows: list[HookRow], root_name: str = ""):
        self.rows = list(rows)
        self.root_name = root_name

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[HookRow]:
        return iter(self.rows)

    def __getitem__(self, i: int) -> HookRow:
        return self.rows[i]

    def __bool__(self) -> bool:
        return bool(self.rows)

    def where(self, *, kind: str | None = None, path: str | None = None) -> "HookTable":
        """Only the rows of one kind and/or one module path."""
        rows = [r for r in self.rows
                if (kind is None or r.kind == kind) and (path is None or r.path == path)]
        return HookTable(rows, self.root_name)

    def counts(self) -> dict[str, int]:
        """How many hooks of each kind, for example ``{'forward': 2}``."""
        out: dict[str, int] = {}
        for r in self.rows:
            out[r.kind] = out.get(r.kind, 0) + 1
        return out

    def _lines(self) -> list[tuple[str, str, str, str]]:
        return [(r.path, r.kind, r.function, ", ".join(r.flags)) for r in self.rows]

    def __repr__(self) -> str:
        title = f"{len(self)} hook{'s' if len(self) != 1 else ''} attached"
        if self.root_name:
            title += f" to {self.root_name}"
        if not self.rows:
            return title
        header = ("module", "kind", "function", "flags")
        lines = [header, *self._lines()]
        widths = [max(len(line[i]) for line in lines) for i in range(4)]
        out = [title]
        for line in lines:
            out.append("  " + "  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip())
        return "\n".join(out)

    def _repr_html_(self) -> str:
        title = html.escape(repr(self).splitlines()[0])
        if not self.rows:
            return f"<p><b>{title}</b></p>"
        cells = "".join(
            "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in line) + "</tr>"
            for line in self._lines()
        )
        return (
            f"<p><b>{title}</b></p><table class='hooktutor-hooks'>"
            "<thead><tr><th>module</th><th>kind</th><th>function</th><th>flags</th></tr></thead>"
            f"<tbody>{cells}</tbody></table>"
        )


def list_hooks(module: nn.Module, *, include_global: bool = True) -> HookTable:
    """Every hook attached to ``module`` and its submodules and parameters.

    Lists forward pre-hooks, forward hooks (with their ``with_kwargs`` / ``always_call``
    flags), backward pre-hooks, backward hooks (full or legacy), hooks on parameters
    (``Tensor.register_hook`` and post-accumulate-grad hooks) and, unless
    ``include_global=False``, the global module hooks that fire for every module.

    Taught in ``00_start_here.ipynb``.
    """
    _check_module(module, "list_hooks")
    rows: list[HookRow] = []
    for name, mod in module.named_modules(remove_duplicate=True):
        path = name or ROOT
        rows.extend(_module_rows(path, mod))
        for pname, param in mod.named_parameters(recurse=False):
            rows.extend(_tensor_rows(f"{name}.{pname}" if name else pname, param))
    if include_global:
        rows.extend(_global_rows())
    return HookTable(rows, type(module).__name__)


def global_hook_ids() -> set[tuple[str, int]]:
    """The ids of the global module hooks attached right now (for leak checks)."""
    return {(attr, hid) for attr, _ in GLOBAL_HOOK_DICTS for hid in getattr(_module_mod, attr)}


def remove_global_hooks(only: set[tuple[str, int]] | None = None) -> int:
    """Remove global module hooks (all, or only those in ``only``); return how many."""
    removed = 0
    for attr, _ in GLOBAL_HOOK_DICTS:
        hooks = getattr(_module_mod, attr)
        for hid in list(hooks):
            if only is None or (attr, hid) in only:
                del hooks[hid]
                removed += 1
                for flag_attr in GLOBAL_FLAG_DICTS:
                    _global_flags(flag_attr).pop(hid, None)
    if not _module_mod._global_backward_hooks:
        _module_mod._global_is_full_backward_hook = None
    return removed


def remove_row(model: nn.Module, row: HookRow) -> None:
    """Remove the one hook that ``row`` (from ``list_hooks(model)``) describes."""
    if row.path == GLOBAL:
        remove_global_hooks(only={(attr, row.handle_id) for attr, _ in GLOBAL_HOOK_DICTS})
        return
    if row.kind in ("tensor", "post_accumulate"):
        attr = dict((k, a) for a, k in TENSOR_HOOK_DICTS)[row.kind]
        getattr(model.get_parameter(row.path), attr).pop(row.handle_id, None)
        return
    owner = model if row.path == ROOT else model.get_submodule(row.path)
    for attr in (*(a for a, _ in MODULE_HOOK_DICTS), *MODULE_FLAG_DICTS):
        getattr(owner, attr).pop(row.handle_id, None)
    if not owner._backward_hooks:
        owner._is_full_backward_hook = None


def remove_hooks(module: nn.Module, *, include_global: bool = False) -> int:
    """Remove every hook :func:`list_hooks` would show; return how many were removed.

    Global module hooks are removed only with ``include_global=True``, because they
    affect every model in the process, not just this one. Afterwards every module accepts
    full backward hooks again, even one that once had a legacy ``register_backward_hook``.

    Taught in ``00_start_here.ipynb``.
    """
    _check_module(module, "remove_hooks")
    removed = 0
    for mod in module.modules():
        for attr, _ in MODULE_HOOK_DICTS:
            hooks = getattr(mod, attr)
            removed += len(hooks)
            hooks.clear()
        for attr in MODULE_FLAG_DICTS:
            getattr(mod, attr).clear()
        mod._is_full_backward_hook = None
        for param in mod.parameters(recurse=False):
            for attr, _ in TENSOR_HOOK_DICTS:
                hooks = getattr(param, attr, None)
                if hooks:
                    removed += len(hooks)
                    hooks.clear()
    if include_global:
        removed += remove_global_hooks()
    return removed
