"""Listing and removing every hook attached to a module tree.

Taught in ``00_start_here.ipynb`` (a hook is state on the module) and used in every lesson
to prove that nothing was left attached.

PyTorch has no public API to enumerate hooks without their handles
(pytorch/pytorch#2847), so this is the **only** module of hooktutor that reads
torch's private hook dictionaries. ``tests/test_torch_internals.py`` pins each
attribute used here, so a torch release that renames one fails loudly there
instead of making ``list_hooks`` silently miss hooks.

PyTorch itself puts hooks on some models, and the model needs them:
``torch.nn.utils.prune`` (a forward pre-hook per pruned parameter), the old
``torch.nn.utils.weight_norm`` / ``spectral_norm`` (forward pre-hooks; spectral_norm also
state-dict hooks), Lazy modules (a forward pre-hook that creates the parameters and a
load-state-dict pre-hook) and eager-mode quantization observers. Libraries put hooks on
models too: transformers installs forward hooks the first time ``output_hidden_states`` or
``output_attentions`` is asked for and needs them from then on, and accelerate (device maps,
``cpu_offload``) replaces a module's ``forward`` and keeps its hook object in
``module._hf_hook``, where no torch hook dict shows it. Every row says who installed its hook
(``owner``: ``"user"``, ``"pytorch"`` or the library's name, such as ``"transformers"``, and a
``mechanism`` label), and ``remove_hooks`` / ``remove_row`` leave PyTorch's and the libraries'
hooks alone unless asked. The libraries are taught in ``12_huggingface_hooks.ipynb``.
"""

from __future__ import annotations

import functools
import html
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.modules import module as _module_mod
from torch.nn.modules.lazy import LazyModuleMixin
from torch.nn.utils.prune import BasePruningMethod
from torch.nn.utils.spectral_norm import SpectralNorm, SpectralNormLoadStateDictPreHook, SpectralNormStateDictHook
from torch.nn.utils.weight_norm import WeightNorm

from .selection import wrapper_prefix

# (private dict on nn.Module, kind shown to the learner); flag dicts are read separately.
MODULE_HOOK_DICTS: tuple[tuple[str, str], ...] = (
    ("_forward_pre_hooks", "forward_pre"),
    ("_forward_hooks", "forward"),
    ("_backward_pre_hooks", "backward_pre"),
    ("_backward_hooks", "backward"),
)
# The state-dict hooks (``register_state_dict_pre_hook``, ``_register_state_dict_hook`` /
# ``register_state_dict_post_hook``, ``_register_load_state_dict_pre_hook`` /
# ``register_load_state_dict_pre_hook`` (stored wrapped in a ``_WrappedHook``),
# ``register_load_state_dict_post_hook``). Every nn.Module has all four on torch 2.1 to 2.15;
# they are read with getattr so a module or a torch without one gives no rows, not an error.
STATE_DICT_HOOK_DICTS: tuple[tuple[str, str], ...] = (
    ("_state_dict_pre_hooks", "state_dict_pre"),
    ("_state_dict_hooks", "state_dict"),
    ("_load_state_dict_pre_hooks", "load_state_dict_pre"),
    ("_load_state_dict_post_hooks", "load_state_dict_post"),
)
# Dicts that only carry flags for ids of the dicts above; cleared together with them.
MODULE_FLAG_DICTS: tuple[str, ...] = (
    "_forward_pre_hooks_with_kwargs",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
)
# Private dicts on a tensor (a parameter, or a buffer that requires grad): Tensor.register_hook
# and Tensor.register_post_accumulate_grad_hook.
TENSOR_HOOK_DICTS: tuple[tuple[str, str], ...] = (
    ("_backward_hooks", "tensor"),
    ("_post_accumulate_grad_hooks", "post_accumulate"),
)
# Module-level dicts in torch.nn.modules.module for the global hooks
# (register_module_forward_hook and friends), and the global registration hooks, which fire
# when any module registers a buffer, a parameter or a submodule
# (register_module_buffer_registration_hook and friends).
GLOBAL_HOOK_DICTS: tuple[tuple[str, str], ...] = (
    ("_global_forward_pre_hooks", "forward_pre"),
    ("_global_forward_hooks", "forward"),
    ("_global_backward_pre_hooks", "backward_pre"),
    ("_global_backward_hooks", "backward"),
    ("_global_module_registration_hooks", "module_registration"),
    ("_global_parameter_registration_hooks", "parameter_registration"),
    ("_global_buffer_registration_hooks", "buffer_registration"),
)
GLOBAL_FLAG_DICTS: tuple[str, ...] = (
    "_global_forward_hooks_with_kwargs",
    "_global_forward_hooks_always_called",
)
# Private dicts on a torch.optim.Optimizer (register_step_pre_hook and friends), the same on
# torch 2.1 to 2.15, and the module-level dicts of the global optimizer step hooks
# (torch.optim.optimizer.register_optimizer_step_pre_hook / _post_hook).
OPTIMIZER_HOOK_DICTS: tuple[tuple[str, str], ...] = (
    ("_optimizer_step_pre_hooks", "step_pre"),
    ("_optimizer_step_post_hooks", "step_post"),
    ("_optimizer_state_dict_pre_hooks", "state_dict_pre"),
    ("_optimizer_state_dict_post_hooks", "state_dict"),
    ("_optimizer_load_state_dict_pre_hooks", "load_state_dict_pre"),
    ("_optimizer_load_state_dict_post_hooks", "load_state_dict_post"),
)
GLOBAL_OPTIMIZER_HOOK_DICTS: tuple[tuple[str, str], ...] = (
    ("_global_optimizer_pre_hooks", "step_pre"),
    ("_global_optimizer_post_hooks", "step_post"),
)

GLOBAL = "<global>"
ROOT = "<root>"

OPTIMIZER = "<optimizer>"

USER = "user"
PYTORCH = "pytorch"
LIBRARY = "library"  # for ``where(owner=...)``: any library's hooks; a row's owner is the library's name
# The libraries whose hooks list_hooks attributes to them, by the top-level package that defines
# the hook function or class: {package: the name shown as the owner}. Add yours to this dict.
LIBRARIES: dict[str, str] = {
    "transformers": "transformers", "accelerate": "accelerate", "peft": "peft", "diffusers": "diffusers",
    "bitsandbytes": "bitsandbytes", "deepspeed": "deepspeed", "optimum": "optimum", "timm": "timm",
    "lightning": "lightning", "pytorch_lightning": "lightning", "torchao": "torchao", "captum": "captum",
}
# The hooks of a library that have a name of their own in the owner column (the function's
# qualified name, or its last part): {(package, name): mechanism}. Any other is labelled with the
# module that defines it ("transformers (transformers.integrations.neftune)").
_LIBRARY_MECHANISMS: dict[tuple[str, str], str] = {
    # transformers 5: forward hooks installed once, lazily, by the capture_outputs decorator the first
    # time output_hidden_states / output_attentions is asked for (transformers.utils.output_capturing)
    ("transformers", "output_capturing_hook"): "output capturing",
    ("transformers", "make_inputs_require_grads"): "enable_input_require_grads",
    ("transformers", "neftune_post_forward_hook"): "neftune",
}
PATCHED_FORWARD = "patched_forward"  # accelerate's add_hook_to_module: module._hf_hook and a new forward
# How torch stores a load_state_dict pre-hook: the hook is in its ``.hook``.
_WrappedHook = getattr(_module_mod, "_WrappedHook", None)
# The classes whose instances PyTorch registers as hooks, by mechanism.
_MECHANISM_CLASSES: tuple[tuple[type, str], ...] = (
    (BasePruningMethod, "prune"),
    (WeightNorm, "weight_norm"),
    (SpectralNorm, "spectral_norm"),
    (SpectralNormStateDictHook, "spectral_norm"),
    (SpectralNormLoadStateDictPreHook, "spectral_norm"),
)
_QUANTIZE_MODULE = "torch.ao.quantization.quantize"
_OBSERVER_HOOKS = ("_observer_forward_hook", "_observer_forward_pre_hook")


@dataclass(frozen=True)
class HookRow:
    """One attached hook: where it is, what kind it is, which function runs."""

    path: str
    kind: str
    function: str
    handle_id: int
    flags: tuple[str, ...] = ()
    hook: Callable | None = None
    # "user" (you, hooktutor's helpers), "pytorch" (torch installed it) or a library's name
    # ("transformers", "accelerate", ...: see LIBRARIES)
    owner: str = USER
    # for PyTorch's hooks: "prune", "lazy module", "pytorch (torch.x)"...; for a library's:
    # "output capturing", "add_hook_to_module", or the module that defines the hook
    mechanism: str = ""

    @property
    def is_pytorch(self) -> bool:
        """True for a hook PyTorch installed (and the model needs); see :func:`hook_owner`."""
        return self.owner == PYTORCH

    @property
    def is_library(self) -> bool:
        """True for a hook a library installed (transformers, accelerate, peft, ...)."""
        return self.owner not in (USER, PYTORCH)

    @property
    def owner_label(self) -> str:
        """The owner column of the table: ``you``, ``pytorch (prune)``,
        ``transformers (output capturing)`` and the like."""
        if self.is_library:
            return f"{self.owner} ({self.mechanism})"
        if not self.is_pytorch:
            return "you"
        return self.mechanism if self.mechanism.startswith("pytorch (") else f"pytorch ({self.mechanism})"


def _unwrap(hook: object) -> tuple[object, type | None]:
    """What defines ``hook`` (a function or a class) and, for a bound method, its object's class.

    functools.partial -> ``.func``; torch's ``_WrappedHook`` -> ``.hook``; bound method ->
    ``__func__`` (and ``type(__self__)``); a callable instance -> its class.
    """
    obj = hook
    for _ in range(20):  # partials of wrapped partials...; a bound on silly nesting
        if isinstance(obj, functools.partial):
            obj = obj.func
        elif _WrappedHook is not None and isinstance(obj, _WrappedHook):
            obj = obj.hook
        else:
            break
    if isinstance(obj, types.MethodType):
        return obj.__func__, type(obj.__self__)
    if isinstance(obj, types.BuiltinFunctionType):  # print, or a bound builtin like list.append
        bound = getattr(obj, "__self__", None)
        if getattr(obj, "__module__", None) is None and bound is not None and not isinstance(bound, types.ModuleType):
            return type(bound), None
        return obj, None
    if isinstance(obj, (types.FunctionType, type)):
        return obj, None
    return type(obj), None


def _is_torch_module(name: object) -> bool:
    return isinstance(name, str) and (name == "torch" or name.startswith("torch."))


# Where torch's operators live: a hook that *is* one of them (``torch.nan_to_num``, a
# ``functools.partial(torch.clamp, ...)``, ``F.relu``) is your choice of function, never a hook
# that torch installed for a mechanism of its own.
_OPERATOR_MODULES = frozenset({"torch", "torch.functional", "torch.nn.functional", "torch.special",
                               "torch.linalg", "torch.fft", "torch._tensor", "torch._ops"})


def _is_operator(defining: object, module_name: str | None) -> bool:
    return isinstance(defining, types.BuiltinFunctionType) or module_name in _OPERATOR_MODULES


# torch's helpers that install hooks on your behalf, for a function of yours: their hooks are yours
_ON_YOUR_BEHALF = ("register_multi_grad_hook.",)


def _installed_for_you(defining: object) -> bool:
    qualname = getattr(defining, "__qualname__", "")
    return isinstance(qualname, str) and qualname.startswith(_ON_YOUR_BEHALF)


def _library(module_name: object) -> str | None:
    """The library (a value of :data:`LIBRARIES`) whose package defines ``module_name``, if any."""
    if not isinstance(module_name, str):
        return None
    return LIBRARIES.get(module_name.partition(".")[0])


def _library_mechanism(package: str, defining: object, module_name: str) -> str:
    qualname = getattr(defining, "__qualname__", "")
    for name in (qualname, qualname.rpartition(".")[2]) if isinstance(qualname, str) else ():
        mechanism = _LIBRARY_MECHANISMS.get((package, name))
        if mechanism:
            return mechanism
    return module_name


def hook_owner(hook: object) -> tuple[str, str]:
    """``(owner, mechanism)`` of a hook object: who installed it, and how.

    A hook whose function or class comes from a library's package (:data:`LIBRARIES`:
    transformers, accelerate, peft, ...) is owned by that library: ``("transformers", "output
    capturing")`` for the hooks behind ``output_hidden_states`` / ``output_attentions``, and
    ``("library name", "the.defining.module")`` for the others (taught in
    ``12_huggingface_hooks.ipynb``). Otherwise:

    The hook is unwrapped (see :func:`_unwrap`); when the function or class that defines it
    comes from the ``torch`` package, the owner is ``"pytorch"`` and the mechanism one of
    ``prune``, ``weight_norm``, ``spectral_norm``, ``lazy module``, ``quantization observer``,
    ``FSDP2`` (the hooks of ``fully_shard``, taught in ``13_hooks_at_work.ipynb``) or
    ``pytorch (torch.some.module)``. An instance of your own subclass of a pruning method
    (``torch.nn.utils.prune.BasePruningMethod``) counts as ``prune`` too: torch's pruning
    installed it and the model needs it. Anything else (your functions, lambdas, hooktutor's
    helpers, torch's own operators used as hooks, such as ``torch.nan_to_num`` or
    ``functools.partial(torch.clamp, min=-1, max=1)``, and the tensor hooks with which
    ``torch.autograd.graph.register_multi_grad_hook`` runs your function) is ``("user", "")``. It fills the owner
    column of :func:`list_hooks`, taught in ``00_start_here.ipynb``.
    """
    defining, self_cls = _unwrap(hook)
    if isinstance(defining, type):
        for cls, mechanism in _MECHANISM_CLASSES:
            # also your own subclass (a custom pruning method): torch's machinery installed
            # the hook, and the model needs it just the same
            if issubclass(defining, cls):
                return PYTORCH, mechanism
    module_name = getattr(defining, "__module__", None)
    if module_name is None and self_cls is not None:
        module_name = self_cls.__module__
    library = _library(module_name)
    if library is not None:
        return library, _library_mechanism(module_name.partition(".")[0], defining, module_name)
    if not _is_torch_module(module_name) or _is_operator(defining, module_name) or _installed_for_you(defining):
        return USER, ""
    if self_cls is not None and issubclass(self_cls, LazyModuleMixin):
        return PYTORCH, "lazy module"
    quantize = sys.modules.get(_QUANTIZE_MODULE)  # imported by torch itself; never import it here
    if quantize is not None and any(defining is getattr(quantize, n, None) for n in _OBSERVER_HOOKS):
        return PYTORCH, "quantization observer"
    for prefix, mechanism in _TORCH_MECHANISMS:
        if module_name == prefix or module_name.startswith(prefix + "."):
            return PYTORCH, mechanism
    return PYTORCH, f"pytorch ({module_name})"


# torch's packages whose hooks get a name of their own in the owner column
_TORCH_MECHANISMS = (
    ("torch.distributed.fsdp._fully_shard", "FSDP2"),    # fully_shard, torch 2.6 and newer (on a CPU 2.7)
    ("torch.distributed._composable.fsdp", "FSDP2"),     # the same before it became public
)


def _row(path: str, kind: str, hid: int, fn: Callable, flags: tuple[str, ...] = ()) -> HookRow:
    owner, mechanism = hook_owner(fn)
    return HookRow(path, kind, _function_name(fn), hid, flags, fn, owner, mechanism)


def _function_name(fn: object) -> str:
    if _WrappedHook is not None and isinstance(fn, _WrappedHook):
        return _function_name(fn.hook)
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
            yield _row(path, row_kind, hid, fn, tuple(flags))
    for attr, kind in STATE_DICT_HOOK_DICTS:
        for hid, fn in (getattr(mod, attr, None) or {}).items():
            yield _row(path, kind, hid, fn)
    patched = _patched_forward_row(path, mod)
    if patched is not None:
        yield patched


def _patched_forward_row(path: str, mod: nn.Module) -> HookRow | None:
    """accelerate's ``add_hook_to_module`` (device maps, ``cpu_offload``, ``dispatch_model``) keeps
    its hook object in ``module._hf_hook`` and replaces ``module.forward`` with a function that calls
    ``hook.pre_forward``, the old forward and ``hook.post_forward``: no torch hook dict holds it, and
    it runs even when ``forward()`` is called directly (torch's hooks do not). One row per module;
    its function names the hook's class (a ``SequentialHook`` its parts), its owner is the package
    that defines that class (``accelerate`` for its own hooks, you for your ``ModelHook``)."""
    hook = mod.__dict__.get("_hf_hook")
    if hook is None:
        return None
    parts = getattr(hook, "hooks", None)
    name = type(hook).__name__
    if isinstance(parts, (tuple, list)) and parts:
        name += "(" + ", ".join(type(h).__name__ for h in parts) + ")"
    owner, mechanism = hook_owner(hook)
    if owner != USER and owner != PYTORCH:
        mechanism = "add_hook_to_module"
    return HookRow(path, PATCHED_FORWARD, name, id(hook), (), hook, owner, mechanism)


def _tensor_rows(path: str, tensor: torch.Tensor) -> Iterator[HookRow]:
    for attr, kind in TENSOR_HOOK_DICTS:
        hooks = getattr(tensor, attr, None)
        if not hooks:
            continue
        for hid, fn in hooks.items():
            yield _row(path, kind, hid, fn)


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
            yield _row(GLOBAL, row_kind, hid, fn, tuple(flags))


def _check_module(module: object, func: str) -> nn.Module:
    if not isinstance(module, nn.Module):
        also = " (or a torch.optim.Optimizer)" if func == "list_hooks" else ""
        raise TypeError(
            f"{func}() needs a torch.nn.Module (your model or one of its layers), "
            f"got {type(module).__name__}{also}"
        )
    return module


class HookTable:
    """The hooks attached to a module tree, as a table that reads well in a notebook.

    Made by :func:`list_hooks`. ``len(table)`` counts the hooks, ``table.rows`` holds
    :class:`HookRow` objects, ``table.where(kind=..., path=..., owner=...)`` filters. The
    text and HTML views list module, kind, function, owner (``you``, ``pytorch (prune)`` and
    the like for a hook PyTorch installed, ``transformers (output capturing)`` and the like for
    a library's) and flags; handle ids (which grow every time a
    hook is registered anywhere) are kept in the rows but not shown, so a notebook that
    prints a table gives the same output when it is run twice.
    """

    COLUMNS = ("module", "kind", "function", "owner", "flags")

    def __init__(self, rows: list[HookRow], root_name: str = "", prefix: str = ""):
        self.rows = list(rows)
        self.root_name = root_name
        self.prefix = prefix  # "module." for a DDP / DataParallel wrapper: where(path=) accepts both names

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[HookRow]:
        return iter(self.rows)

    def __getitem__(self, i: int) -> HookRow:
        return self.rows[i]

    def __bool__(self) -> bool:
        return bool(self.rows)

    def where(self, *, kind: str | None = None, path: str | None = None,
              owner: str | None = None) -> "HookTable":
        """Only the rows of one kind, one module path and/or one owner: ``"user"``,
        ``"pytorch"``, ``"library"`` (any library's) or a library's name (``"transformers"``)."""
        if owner not in (None, USER, PYTORCH, LIBRARY, *LIBRARIES.values()):
            raise ValueError(f"owner must be {USER!r}, {PYTORCH!r}, {LIBRARY!r} or a library's name "
                             f"({', '.join(repr(n) for n in dict.fromkeys(LIBRARIES.values()))}), got {owner!r}")
        paths = None if path is None else {path, self.prefix + path} if self.prefix else {path}
        rows = [r for r in self.rows
                if (kind is None or r.kind == kind) and (paths is None or r.path in paths)
                and (owner is None or r.owner == owner or (owner == LIBRARY and r.is_library))]
        return HookTable(rows, self.root_name, self.prefix)

    def counts(self) -> dict[str, int]:
        """How many hooks of each kind, for example ``{'forward': 2}``."""
        out: dict[str, int] = {}
        for r in self.rows:
            out[r.kind] = out.get(r.kind, 0) + 1
        return out

    def _lines(self) -> list[tuple[str, ...]]:
        return [(r.path, r.kind, r.function, r.owner_label, ", ".join(r.flags)) for r in self.rows]

    def __repr__(self) -> str:
        title = f"{len(self)} hook{'s' if len(self) != 1 else ''} attached"
        if self.root_name:
            title += f" to {self.root_name}"
        if not self.rows:
            return title
        lines = [self.COLUMNS, *self._lines()]
        widths = [max(len(line[i]) for line in lines) for i in range(len(self.COLUMNS))]
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
        head = "".join(f"<th>{c}</th>" for c in self.COLUMNS)
        return (
            f"<p><b>{title}</b></p><table class='hooktutor-hooks'>"
            f"<thead><tr>{head}</tr></thead><tbody>{cells}</tbody></table>"
        )


def _optimizer_rows(optimizer: torch.optim.Optimizer, include_global: bool) -> list[HookRow]:
    rows = [_row(OPTIMIZER, kind, hid, fn) for attr, kind in OPTIMIZER_HOOK_DICTS
            for hid, fn in (getattr(optimizer, attr, None) or {}).items()]
    if include_global:
        import torch.optim.optimizer as optim_mod

        rows += [_row(GLOBAL, kind, hid, fn) for attr, kind in GLOBAL_OPTIMIZER_HOOK_DICTS
                 for hid, fn in (getattr(optim_mod, attr, None) or {}).items()]
    return rows


def list_hooks(module: nn.Module | torch.optim.Optimizer, *, include_global: bool = True) -> HookTable:
    """Every hook attached to ``module`` and its submodules and parameters, and who owns it.

    Given an optimizer instead, its hooks (``step_pre``, ``step_post``, and its state-dict
    hooks) and, unless ``include_global=False``, the global optimizer step hooks
    (``torch.optim.optimizer.register_optimizer_step_pre_hook`` / ``_post_hook``), all taught
    in ``08_training_hooks.ipynb``. A ``DistributedDataParallel`` (or ``DataParallel``)
    wrapper lists the wrapped model's layers as ``module.<name>``; ``table.where(path=...)``
    accepts the name with or without that prefix.

    Lists forward pre-hooks, forward hooks (with their ``with_kwargs`` / ``always_call``
    flags), backward pre-hooks, backward hooks (full or legacy), state-dict hooks
    (``state_dict_pre``, ``state_dict``, ``load_state_dict_pre``, ``load_state_dict_post``),
    hooks on parameters and on buffers that require grad (``Tensor.register_hook`` and
    post-accumulate-grad hooks; a parameter shared by two modules, such as tied embedding
    weights, is listed once, under its first name) and, unless ``include_global=False``, the
    global module hooks that fire for every module and the global registration hooks
    (``module_registration``, ``parameter_registration``, ``buffer_registration``) that fire
    when any module registers one. Not listed: hooks on autograd graph nodes
    (``grad_fn.register_hook``, a parameter's ``AccumulateGrad`` node), which belong to the
    graph, not to the model.

    The owner column tells your hooks (``you``: your functions, lambdas, partials, and the
    hooks of hooktutor's helpers such as ``capture``) from those PyTorch installed and the
    model needs: ``pytorch (prune)``, ``pytorch (weight_norm)``, ``pytorch (spectral_norm)``,
    ``pytorch (lazy module)``, ``pytorch (quantization observer)``, ``pytorch (FSDP2)`` (the
    hooks with which ``fully_shard`` gathers and frees parameters: 13_hooks_at_work.ipynb), or
    ``pytorch (torch.some.module)`` for any other hook defined inside torch. A hook a library
    installed is owned by that library (:data:`LIBRARIES`): ``transformers (output capturing)``
    for the forward hooks transformers 5 puts on the decoder layers and attention modules the
    first time ``output_hidden_states`` or ``output_attentions`` is asked for (it never puts them
    back: remove them and those outputs come back empty), ``accelerate (add_hook_to_module)``
    for accelerate's hooks. These are rows of kind ``patched_forward``, one per module with a
    ``module._hf_hook``: accelerate replaces the module's ``forward``, so no torch hook dict
    shows them, and they run even when ``module.forward(...)`` is called directly.
    ``row.owner`` is ``"user"``, ``"pytorch"`` or the library's name, ``row.mechanism`` the label.

    Taught in ``00_start_here.ipynb``; the libraries' hooks in ``12_huggingface_hooks.ipynb``.
    """
    if isinstance(module, torch.optim.Optimizer):
        return HookTable(_optimizer_rows(module, include_global), type(module).__name__)
    _check_module(module, "list_hooks")
    rows: list[HookRow] = []
    seen: set[int] = set()  # a tied parameter (one tensor in two modules) is listed once
    for name, mod in module.named_modules(remove_duplicate=True):
        path = name or ROOT
        rows.extend(_module_rows(path, mod))
        tensors = (*mod.named_parameters(recurse=False), *mod.named_buffers(recurse=False))
        for tname, tensor in tensors:
            if tensor is not None and id(tensor) not in seen:
                seen.add(id(tensor))
                rows.extend(_tensor_rows(f"{name}.{tname}" if name else tname, tensor))
    if include_global:
        rows.extend(_global_rows())
    return HookTable(rows, type(module).__name__, wrapper_prefix(module))


_KIND_DICTS = {kind: attr for attr, kind in (*MODULE_HOOK_DICTS, *STATE_DICT_HOOK_DICTS, *TENSOR_HOOK_DICTS)}
_OPTIMIZER_KIND_DICTS = {kind: attr for attr, kind in OPTIMIZER_HOOK_DICTS}
_GLOBAL_KIND_DICTS = {kind: attr for attr, kind in GLOBAL_HOOK_DICTS}


def hook_ids(obj: nn.Module | torch.Tensor | torch.optim.Optimizer | None, kind: str) -> set[int]:
    """The handle ids of the hooks of one ``kind`` attached right now: to a module
    (``forward_pre``, ``forward``, ``backward_pre``, ``backward``, and the state-dict kinds
    ``state_dict_pre``, ``state_dict``, ``load_state_dict_pre``, ``load_state_dict_post``), to a
    tensor (``tensor``, ``post_accumulate``), to an optimizer (``step_pre``, ``step_post`` and
    its state-dict kinds), or globally (``obj=None``, module kinds). For checks that must know
    what is attached while a model runs (the exercise kit's witnesses), without reading torch's
    private dicts outside this module."""
    if obj is None:
        return set(getattr(_module_mod, _GLOBAL_KIND_DICTS[kind], None) or {})
    if isinstance(obj, torch.optim.Optimizer):
        return set(getattr(obj, _OPTIMIZER_KIND_DICTS[kind], None) or {})
    attr = _KIND_DICTS.get(kind)
    if attr is None:
        raise ValueError(f"unknown hook kind {kind!r}; one of {', '.join(_KIND_DICTS)}")
    return set(getattr(obj, attr, None) or {})


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


def _owner_module(model: nn.Module, row: HookRow) -> nn.Module:
    return model if row.path == ROOT else model.get_submodule(row.path)


def _drop(model: nn.Module, row: HookRow) -> None:
    """Delete the hook of ``row`` from its dict (and its flags); no questions asked."""
    if row.path == GLOBAL:
        remove_global_hooks(only={(attr, row.handle_id) for attr, _ in GLOBAL_HOOK_DICTS})
        return
    if row.kind in ("tensor", "post_accumulate"):
        attr = dict((k, a) for a, k in TENSOR_HOOK_DICTS)[row.kind]
        try:
            tensor = model.get_parameter(row.path)
        except AttributeError:  # a buffer that requires grad
            tensor = model.get_buffer(row.path)
        hooks = getattr(tensor, attr, None)
        if hooks:
            hooks.pop(row.handle_id, None)
        return
    owner = _owner_module(model, row)
    if row.kind == PATCHED_FORWARD:
        _unpatch_forward(owner, row)
        return
    for attr in (*(a for a, _ in MODULE_HOOK_DICTS), *(a for a, _ in STATE_DICT_HOOK_DICTS), *MODULE_FLAG_DICTS):
        hooks = getattr(owner, attr, None)
        if hooks is not None:
            hooks.pop(row.handle_id, None)


def _unpatch_forward(module: nn.Module, row: HookRow) -> None:
    """Undo accelerate's ``add_hook_to_module`` on one module, as accelerate does it: its
    ``remove_hook_from_module`` calls the hook's ``detach_hook`` (which puts offloaded weights
    back) and restores the original ``forward``."""
    if module.__dict__.get("_hf_hook") is not row.hook:
        return  # already gone, or replaced by another hook since the table was made
    hooks_mod = sys.modules.get("accelerate.hooks")  # loaded: it made the hook; never import it here
    remove = getattr(hooks_mod, "remove_hook_from_module", None)
    if remove is not None:
        remove(module)
    else:  # a hook object made without accelerate.hooks: do what it does
        detach = getattr(row.hook, "detach_hook", None)
        if callable(detach):
            detach(module)
        del module.__dict__["_hf_hook"]
        old = module.__dict__.pop("_old_forward", None)
        module.__dict__.pop("forward", None)
        if old is not None:
            module.forward = old
    # accelerate puts the old forward back as an instance attribute, a bound method of the class's
    # forward: drop it when it is just that, so that the module is as it was before the hook
    restored = module.__dict__.get("forward")
    if getattr(restored, "__self__", None) is module and getattr(restored, "__func__", None) is type(module).forward:
        del module.__dict__["forward"]


_OUTPUT_CAPTURING = ("transformers", "output capturing")


def _let_transformers_reinstall_output_capturing(model: nn.Module) -> None:
    """transformers installs its output-capturing hooks once and marks the model
    (``_output_capturing_hooks_installed``); with every one of them removed, clear the mark so
    that the next ``output_hidden_states=True`` installs them again instead of returning nothing."""
    for mod in model.modules():
        if not mod.__dict__.get("_output_capturing_hooks_installed"):
            continue
        if not any((r.owner, r.mechanism) == _OUTPUT_CAPTURING for r in list_hooks(mod, include_global=False)):
            mod._output_capturing_hooks_installed = False


def reset_backward_flag(module: nn.Module) -> None:
    """A module with no backward hook left accepts full and legacy ones again (torch remembers
    which kind it had; the widgets call this after removing theirs)."""
    if not module._backward_hooks:
        module._is_full_backward_hook = None


def remove_row(model: nn.Module, row: HookRow, *, include_pytorch: bool = False,
               include_libraries: bool = False) -> None:
    """Remove the one hook that ``row`` (from ``list_hooks(model)``) describes.

    A hook PyTorch installed (``row.is_pytorch``: prune, weight_norm, a Lazy module...) is
    refused with a ``ValueError``, because the model needs it; pass ``include_pytorch=True``
    to remove it anyway. A hook a library installed (``row.is_library``: transformers,
    accelerate, ...) is refused the same way unless ``include_libraries=True``. Taught in
    ``00_start_here.ipynb`` (with :func:`remove_hooks`), the libraries' in
    ``12_huggingface_hooks.ipynb``.
    """
    if row.is_pytorch and not include_pytorch:
        raise ValueError(
            f"the {row.kind} hook {row.function} on {row.path} was installed by PyTorch "
            f"({row.mechanism}) and the model needs it; remove_row(model, row, include_pytorch=True) "
            "removes it anyway")
    if row.is_library and not include_libraries:
        raise ValueError(
            f"the {row.kind} hook {row.function} on {row.path} was installed by {row.owner} "
            f"({row.mechanism}) and the model relies on it; remove_row(model, row, include_libraries=True) "
            "removes it anyway")
    _drop(model, row)
    if row.path not in (GLOBAL,) and row.kind not in ("tensor", "post_accumulate"):
        reset_backward_flag(_owner_module(model, row))
    if row.is_library:
        _let_transformers_reinstall_output_capturing(model)


def _paths(paths: list[str]) -> str:
    if len(paths) == 1:
        return paths[0]
    if len(paths) == 2:
        return f"{paths[0]} and {paths[1]}"
    return f"{len(paths)} modules"


class RemovedHooks(int):
    """What :func:`remove_hooks` returns: the number of hooks removed, as an ``int``.

    ``str()``, ``print()`` and f-strings give the plain number; the notebook repr also says
    which hooks PyTorch installed were left, and why. ``.removed`` and ``.left`` are
    :class:`HookTable` objects of the hooks removed and of those left in place. Shown in
    ``00_start_here.ipynb``; the libraries' hooks it leaves in ``12_huggingface_hooks.ipynb``.
    """

    removed: HookTable
    left: HookTable

    def __new__(cls, removed: HookTable, left: HookTable) -> "RemovedHooks":
        self = super().__new__(cls, len(removed))
        self.removed, self.left = removed, left
        return self

    def __repr__(self) -> str:
        n = int(self)
        text = f"removed {n} hook{'s' if n != 1 else ''}"
        if not self.left:
            return text
        # one group per installer: PyTorch first, then each library in the order met
        by_owner: dict[str, list[HookRow]] = {}
        for r in sorted(self.left, key=lambda r: not r.is_pytorch):
            by_owner.setdefault(r.owner, []).append(r)
        parts, flags = [], []
        for owner, rows in by_owner.items():
            groups: dict[str, list[str]] = {}
            counts: dict[str, int] = {}
            for r in rows:
                paths = groups.setdefault(r.mechanism, [])
                if r.path not in paths:
                    paths.append(r.path)
                counts[r.mechanism] = counts.get(r.mechanism, 0) + 1
            why = ", ".join(f"{m}: {counts[m]} on {_paths(p)}" for m, p in groups.items())
            if owner == PYTORCH:
                parts.append(f"{len(rows)} that PyTorch installed and the model needs ({why})")
                flags.append("include_pytorch=True")
            else:
                parts.append(f"{len(rows)} that {owner} installed and the model relies on ({why})")
                if "include_libraries=True" not in flags:
                    flags.append("include_libraries=True")
        left = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
        return f"{text}; left {left}; remove_hooks(model, {', '.join(flags)}) removes those too"

    def _repr_pretty_(self, p: object, cycle: bool) -> None:
        p.text(repr(self))  # type: ignore[attr-defined]

    def __str__(self) -> str:
        return str(int(self))

    def __format__(self, spec: str) -> str:
        return format(int(self), spec)

    def __reduce__(self) -> tuple:
        return (int, (int(self),))


def remove_hooks(module: nn.Module, *, include_global: bool = False,
                 include_pytorch: bool = False, include_libraries: bool = False) -> RemovedHooks:
    """Remove your hooks (every row of :func:`list_hooks` owned by you); return how many.

    Hooks PyTorch installed and the model needs (prune, weight_norm, spectral_norm, Lazy
    modules, quantization observers, see the owner column of ``list_hooks``) are left in
    place: without them a pruned model fails on its second backward and a Lazy module never
    creates its parameters. ``include_pytorch=True`` removes them too. Hooks a library
    installed are left in place the same way (transformers' output-capturing hooks, without
    which ``output_hidden_states=True`` returns nothing; accelerate's patched ``forward``, which
    moves weights and inputs between devices); ``include_libraries=True`` removes them too
    (accelerate's with its own ``remove_hook_from_module``, and transformers is then told to
    install its output-capturing hooks again when next asked). Global module hooks are
    removed only with ``include_global=True``, because they affect every model in the
    process, not just this one. Afterwards every module without a backward hook left accepts
    full backward hooks again, even one that once had a legacy ``register_backward_hook``.

    The result is an ``int`` (``assert remove_hooks(m) == 3``, ``print`` shows ``3``) whose
    notebook repr reads, for example, ``removed 3 hooks; left 1 that PyTorch installed and
    the model needs (prune: 1 on fc1); remove_hooks(model, include_pytorch=True) removes
    those too``; ``.left`` and ``.removed`` are :class:`HookTable` objects.

    Taught in ``00_start_here.ipynb``; the libraries' hooks in ``12_huggingface_hooks.ipynb``.
    """
    _check_module(module, "remove_hooks")
    table = list_hooks(module, include_global=include_global)
    removed: list[HookRow] = []
    left: list[HookRow] = []
    for row in table:
        if (row.is_pytorch and not include_pytorch) or (row.is_library and not include_libraries):
            left.append(row)
        else:
            _drop(module, row)
            removed.append(row)
    for mod in module.modules():
        reset_backward_flag(mod)
    if any(r.is_library for r in removed):
        _let_transformers_reinstall_output_capturing(module)
    return RemovedHooks(HookTable(removed, table.root_name), HookTable(left, table.root_name))
