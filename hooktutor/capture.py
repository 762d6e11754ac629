"""``capture``: record what layers produce, correctly, and always detach afterwards.

Taught in ``02_forward_hooks.ipynb`` (feature extraction done right), verified by the
learner in ``05_inplace_relu_pitfall.ipynb``, and used on Hugging Face models (outputs that
are tuples or ``ModelOutput`` objects, ``generate()`` with a KV cache) in
``12_huggingface_hooks.ipynb``. What it gets right where hand-written hooks go wrong:

* every recorded tensor is a copy (``detach().clone()``): a later in-place op such as
  ``ReLU(inplace=True)`` or a residual ``+=`` cannot change it, while ``detach()`` alone
  shares storage and would be overwritten;
* gradients come from tensor hooks registered on each output as it is produced, not
  from full backward hooks, so networks with in-place ReLUs work;
* inputs are copied in a forward *pre*-hook, before an in-place module overwrites them;
* a module called several times keeps every call, in order;
* under ``torch.no_grad()`` outputs are recorded and gradients are simply absent;
* every hook it added is removed in a ``finally``, hooks you attached yourself stay;
* a structured output (tuple, list, dict, namedtuple, or a transformers ``ModelOutput``, which
  stays a ``ModelOutput`` with attribute access) is recorded as the same structure of copies.

It copies **tensors only**: any other object in an output is kept by reference. A KV cache
(transformers' ``DynamicCache`` in ``out.past_key_values`` / ``out.cache``) is the same object
that ``generate()`` goes on filling, so read what you need from it inside the block, or record
the layer outputs themselves (each new token's call is recorded as a call of its own).
"""

from __future__ import annotations

import functools
import sys
import weakref
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import nn

from ._tree import describe, iter_tensors, map_leaves, map_tensors
from .selection import LayerSpec, check_model, closest, select_layers, wrapper_prefix


class RecordNotFound(LookupError):
    """Asked for a record that does not exist; the message says why and what to do."""


class CompiledModelWarning(UserWarning):
    """``capture`` on a model that ``torch.compile`` wrapped (or one that contains such a wrapper):
    a layer inside the wrapper recorded nothing at all in the block, while the wrapper was called
    and ran code that Dynamo had compiled before the block (no frame was traced in the block), so
    the code may have been compiled without the capture's hooks. When Dynamo traced in the block,
    its hooks were traced in: a layer that recorded nothing then was not called (a branch the
    forward did not take), as in eager, and nothing is said. A layer that recorded in some calls
    and not in others is not reported either: compare its records with the calls you made."""


class capture:  # noqa: N801 - used like a function: ``with capture(model) as rec``
    """Record what the selected layers of ``model`` produce while the block runs.

    ``layers``: ``None`` for every leaf module; a name (``"features.0"``) or a list of
    names; a module class (``nn.Conv2d``); or a predicate ``(name, module) -> bool``.
    ``inputs=True`` also records each call's positional arguments (``rec.inputs``) and
    keyword arguments (``rec.kwargs``), copied *before* the module runs. ``grads=True``
    records the gradient w.r.t. each output (``rec.grads``) when you call ``backward()``
    inside the block. ``to`` moves the copies, for example ``to="cpu"`` on a GPU.

    Any module may be selected, the model itself (``""``) included, whatever it returns: a
    tensor, a tuple, a dict or a Hugging Face ``ModelOutput``. A structured output is recorded
    as the same structure with every tensor copied; only tensors are copied, every other
    object (a KV cache, a number) is kept by reference. Its gradient record has the same
    structure, with a gradient for each tensor the loss reached and ``None`` elsewhere (a
    ``ModelOutput`` leaves those fields out, as it does for any ``None``). On a wrapped model
    (``DistributedDataParallel``, ``torch.compile``) a layer may be named with or without the
    wrapper's prefix (``module.``, ``_orig_mod.``), when capturing and when reading.

    Taught in ``02_forward_hooks.ipynb``; checked against every in-place trap in
    ``05_inplace_relu_pitfall.ipynb``; on Hugging Face models (blocks, attention and MLPs by
    name, ``generate()`` with a cache) in ``12_huggingface_hooks.ipynb``.

    >>> with capture(model, ["features.0"], grads=True) as rec:  # doctest: +SKIP
    ...     model(x).sum().backward()
    >>> rec["features.0"].shape, rec.grads["features.0"].shape  # doctest: +SKIP
    """

    def __init__(self, model: nn.Module, layers: LayerSpec = None, *, inputs: bool = False,
                 grads: bool = False, to: str | torch.device | None = None):
        leaves = _leaf_layers(check_model(model, "capture")) if layers is None else None
        self._layers = leaves if leaves is not None else select_layers(model, layers, func="capture")
        self._to = to
        prefix = wrapper_prefix(model)
        self.recording = Recording(self._layers, inputs=bool(inputs), grads=bool(grads), prefix=prefix)
        self._handles: list[Any] = []
        self._compiled = _compiled_wrappers(model)
        self._traced_before = 0

    def __enter__(self) -> Recording:
        rec = self.recording
        if rec._active:
            raise RuntimeError("this capture() is already active; make a new one for a nested block")
        rec._active = True
        # Everything a hook needs is looked up here, once per layer, so that each call is
        # only a copy and an append (plus a tensor hook per output when grads are wanted).
        copy, to = _copier(self._to), self._to
        add_handle = self._handles.append
        outputs, grads = rec.outputs._store, rec.grads._store
        self._traced_before = _frames_traced() if self._compiled else 0
        try:
            for wrapper in self._compiled:   # counts the calls of each compiled wrapper in the block
                add_handle(wrapper.module.register_forward_pre_hook(wrapper.called))
            for name, module in self._layers:
                if rec._want_inputs:
                    add_handle(module.register_forward_pre_hook(_input_hook(
                        name, rec.inputs._list(name).append, rec.kwargs._list(name).append, copy),
                        with_kwargs=True))
                append_grad = grads.setdefault(name, []).append if rec._want_grads else None
                add_handle(module.register_forward_hook(_output_hook(
                    name, outputs.setdefault(name, []).append, append_grad, add_handle, to)))
        except BaseException:
            self._detach()
            raise
        return rec

    def _detach(self) -> None:
        handles, self._handles = self._handles, []
        for h in handles:
            h.remove()
        self.recording._active = False

    def __exit__(self, kind: object, *exc: object) -> None:
        self._detach()
        if self._compiled and kind is None:
            self._warn_if_compiled_code_skipped_the_hooks()

    def _warn_if_compiled_code_skipped_the_hooks(self) -> None:
        """Hooks added to layers that had none when a compiled model last compiled do not run inside
        that code (dynamo does not guard their empty hook dicts): the recording has holes, and nothing else says so.
        One warning per capture, naming the compiled modules that ran in the block and the
        layers inside them that recorded nothing (only those: a layer with fewer records than
        calls is not reported; nor, before torch 2.13, a silent layer beside ones that recorded)."""
        store, silent, inside, ran = self.recording.outputs._store, [], 0, []
        for wrapper in self._compiled:
            if not wrapper.calls:
                continue   # not called in the block: a hole there is not the compiler's doing
            ran.append(wrapper)
            mine = [name for name, module in self._layers if id(module) in wrapper.inner]
            inside += len(mine)
            silent += [name for name in mine if not store.get(name) and name not in silent]
        if not silent or _frames_traced() != self._traced_before:
            return   # (Dynamo traced in the block, with the hooks in place: those layers were not called)
        from .course import claims

        if len(silent) < inside and not claims.expected("compile-traces-capture-hooks"):
            # Before torch 2.13 capture's hooks break the graph at each layer they are on, so code
            # compiled with them runs those layers outside any graph, where a later capture's hooks
            # run too: a layer silent beside ones that recorded was not called.
            return
        import warnings

        where = ", ".join(repr(w.name) if w.name else "the model" for w in ran)
        shown = ", ".join(silent[:4]) + (", ..." if len(silent) > 4 else "")
        warnings.warn(
            f"capture() recorded {inside - len(silent)} of the {inside} layers of this compiled model "
            f"(torch.compile wrapper: {where}; nothing from {shown}), and the block ran only code compiled "
            "before it: a hook added to a layer that had none when the model last compiled does not run "
            "inside that compiled code (unless the forward simply did not call the layer). Capture on the "
            "original module before compiling (or call torch.compiler.reset() and let the next call "
            "compile again with the hooks in place); lesson 11 shows why.", CompiledModelWarning, stacklevel=3)


class _CompiledWrapper:
    """A ``torch.compile`` wrapper (``OptimizedModule``) in the captured model: its name, the ids of
    the modules it wraps (looked up only for a wrapper that was called), and how often it was
    called while the capture was active."""

    def __init__(self, name: str, module: nn.Module):
        self.name, self.module, self.calls = name, module, 0

    @functools.cached_property
    def inner(self) -> set[int]:
        return {id(m) for m in self.module.modules()}

    def called(self, module: nn.Module, args: Any) -> None:
        self.calls += 1


def _frames_traced() -> int:
    """How many frames Dynamo has been asked to trace in this process so far (it counts each
    call that found no compiled code whose guards hold); 0 when Dynamo was never imported."""
    utils = sys.modules.get("torch._dynamo.utils")
    return int(utils.counters["frames"]["total"]) if utils is not None else 0


def _compiled_wrappers(model: nn.Module) -> list[_CompiledWrapper]:
    """Every ``OptimizedModule`` that ``model`` is, wraps, or contains, outermost first (a wrapper
    registers what it wraps as a submodule: ``_orig_mod``, DDP's ``module``). None where Dynamo,
    whose class ``OptimizedModule`` is, was never imported: then no walk of the model (a capture on
    a small model pays for it on every step)."""
    if "torch._dynamo.eval_frame" not in sys.modules:
        return []
    return [_CompiledWrapper(name, module) for name, module in model.named_modules()
            if type(module).__name__ == "OptimizedModule"]


# -- what a capture recorded --------------------------------------------------------------------

class _Layers:
    """The recorded layer names, shared by a Recording and its Records (no back-reference)."""

    __slots__ = ("names", "prefix")

    def __init__(self, names: list[str], prefix: str = ""):
        self.names = names
        self.prefix = prefix  # a wrapper's "module." / "_orig_mod.": names work with or without it

    def resolve(self, name: object) -> object:
        """The recorded name that ``name`` means: itself, or the same layer with or without the
        prefix of the wrapper the model was captured through (DDP, ``torch.compile``)."""
        prefix = self.prefix
        if not prefix or not isinstance(name, str) or name in self.names:
            return name
        if prefix + name in self.names:
            return prefix + name
        if name.startswith(prefix) and name[len(prefix):] in self.names:
            return name[len(prefix):]
        return name

    def not_recorded(self, name: str) -> str:
        close = closest(name, self.names)
        hint = ("did you mean " + " or ".join(repr(c) for c in close) + "?") if close else \
            f"recorded layers: {', '.join(repr(n) for n in self.names[:12])}"
        return f"{name!r} was not recorded by this capture(); {hint}"


def _finish_grad(name: str, index: int, slot: Any) -> Any:
    """The gradient of one call from its slot, or why there is none. A slot is ``None`` (no
    gradient needed), a :class:`_GradSlot` (a tensor output) or ``(paths, skeleton)``."""
    if slot is None:
        raise RecordNotFound(
            f"no gradient for {name!r} call {index}: its output did not require grad "
            "(recorded under torch.no_grad(), or nothing before it needs a gradient)")
    if isinstance(slot, _ViewGradSlot) and getattr(slot, "grad", _PENDING) is _PENDING and slot.edited():
        raise RecordNotFound(
            f"no gradient for {name!r} call {index}: its output is a view of another tensor (a Flatten's, "
            "a reshape's) that an in-place operation changed after the layer ran (a later "
            "ReLU(inplace=True)?), and torch drops a gradient hook on a view edited in place. Record "
            "the layer that edits it instead, or make that layer not in-place")
    if isinstance(slot, _GradSlot):
        paths, value = {(): getattr(slot, "grad", _PENDING)}, None
    else:
        paths, value = slot
    if all(v is _PENDING for v in paths.values()):
        raise RecordNotFound(
            f"no gradient for {name!r} call {index}: backward has not reached this output. "
            "Either the loss does not use it, or you did not call loss.backward() inside the "
            "`with capture(...)` block (its gradient hooks are removed when the block ends)")
    if () in paths:
        return paths[()]
    # a tensor of a structured output that needed a gradient but got none while others did was
    # not on the way to the loss (BERT's pooler_output when the loss uses last_hidden_state): None
    paths = {p: None if g is _PENDING else g for p, g in paths.items()}
    # the output's structure, each tensor replaced by its gradient, None where none was needed
    # and for every leaf that is not a tensor; a ModelOutput is rebuilt as one (it drops None fields)
    return map_leaves(value, lambda path, leaf: paths.get(path) if leaf is _TENSOR else None)


class Records(Mapping[str, Any]):
    """One kind of record (outputs, inputs, kwargs or grads): ``name -> calls``.

    ``records["fc1"]`` is the record of the single call of ``fc1``; for a module called
    several times use ``records["fc1", i]`` or ``records.calls("fc1")``.
    """

    def __init__(self, kind: str, recording: "Recording | _Layers"):
        self._kind = kind
        # The layer names only, never the Recording itself: a Recording <-> Records cycle
        # would keep every recorded copy alive until the garbage collector ran.
        self._layers = recording if isinstance(recording, _Layers) else recording._layers
        self._store: dict[str, list[Any]] = {}

    # -- mapping protocol -------------------------------------------------------------
    def __iter__(self) -> Iterator[str]:
        return iter([n for n, calls in self._store.items() if calls])

    def __len__(self) -> int:
        return sum(1 for calls in self._store.values() if calls)

    def __contains__(self, name: object) -> bool:
        return bool(self._store.get(self._layers.resolve(name)))  # type: ignore[arg-type]

    def __getitem__(self, key: str | tuple[str, int]) -> Any:
        if isinstance(key, tuple):
            name, index = key
            calls = self.calls(name)
            try:
                return calls[index]
            except IndexError:
                raise RecordNotFound(f"{name!r} was called {len(calls)} time(s); there is no call "
                                     f"number {index}") from None
        calls = self.calls(key)
        if len(calls) > 1:
            raise RecordNotFound(
                f"{key!r} was called {len(calls)} times; pick one call with rec[{key!r}, i] "
                f"(i from 0 to {len(calls) - 1}, or -1 for the last) or get them all with "
                f".calls({key!r})")
        return calls[0]

    def calls(self, name: str) -> list[Any]:
        """Every recorded call of ``name``, in the order the calls happened."""
        name = self._layers.resolve(name)
        if name not in self._layers.names:
            raise RecordNotFound(self._layers.not_recorded(name))
        calls = self._store.get(name, [])
        if not calls:
            raise RecordNotFound(
                f"{name!r} has no {self._kind} recorded: it did not run while capture() was "
                "active (run the model inside the `with` block)")
        if self._kind == "grads":
            return [_finish_grad(name, i, slot) for i, slot in enumerate(calls)]
        return list(calls)

    def _list(self, name: str) -> list[Any]:
        """The list the calls of ``name`` go to (an empty list counts as "not recorded")."""
        return self._store.setdefault(name, [])

    def __repr__(self) -> str:
        return f"<{self._kind} of {len(self)} layer(s): {', '.join(self)}>"


class Recording:
    """What :func:`capture` saw. ``rec[name]`` is the output; also ``.inputs``,
    ``.kwargs``, ``.grads``, ``.calls(name)`` and ``.names``."""

    def __init__(self, layers: list[tuple[str, nn.Module]], *, inputs: bool, grads: bool, prefix: str = ""):
        self._layers = _Layers([n for n, _ in layers], prefix)
        self.layer_names = self._layers.names
        self._modules = layers
        self.outputs = Records("outputs", self._layers)
        self.inputs = Records("inputs", self._layers)
        self.kwargs = Records("kwargs", self._layers)
        self.grads = Records("grads", self._layers)
        self._want_inputs = inputs
        self._want_grads = grads
        self._active = False

    # -- reading ------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        """Names of the layers that recorded at least one call, in model order."""
        return [n for n in self.layer_names if n in self.outputs]

    def __getitem__(self, key: str | tuple[str, int]) -> Any:
        return self.outputs[key]

    def __contains__(self, name: object) -> bool:
        return name in self.outputs

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def calls(self, name: str) -> list[Any]:
        """Every recorded output of ``name``, in call order."""
        return self.outputs.calls(name)

    def n_calls(self, name: str) -> int:
        return len(self.outputs._store.get(self._layers.resolve(name), []))

    # -- display ------------------------------------------------------------------
    def __repr__(self) -> str:
        kinds = ["outputs"] + (["inputs"] if self._want_inputs else []) + \
                (["grads"] if self._want_grads else [])
        lines = [f"Recording of {len(self.names)} layer(s): {' + '.join(kinds)}"
                 + ("" if self.names else " (nothing ran yet)")]
        rows = []
        types = {n: type(m).__name__ for n, m in self._modules}
        for n in self.names:
            calls = self.outputs._store[n]
            row = [n or "<root>", types[n],
                   f"{len(calls)} call{'s' if len(calls) != 1 else ''}",
                   "out " + describe(calls[0])]
            if self._want_grads:
                try:
                    row.append("grad " + describe(self.grads.calls(n)[0]))
                except RecordNotFound:
                    row.append("grad -")
                except Exception as exc:  # a repr never raises: say what went wrong instead
                    row.append(f"grad ? ({type(exc).__name__})")
            rows.append(row)
        if rows:
            widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
            for r in rows:
                lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
        return "\n".join(lines)


# -- the hooks capture() attaches ---------------------------------------------------------------

def _input_hook(name: str, append_args, append_kwargs, copy):
    """The forward pre-hook of ``capture(inputs=True)``: copies of the args and kwargs."""
    def pre_hook(module, args, kwargs):
        append_args(map_tensors(args, copy))
        append_kwargs(map_tensors(dict(kwargs), copy))
    pre_hook.__qualname__ = f"capture.inputs[{name}]"
    return pre_hook


def _output_hook(name: str, append_output, append_grad, add_handle, to):
    """The forward hook of ``capture``: a copy of the output and, when ``append_grad`` is
    given, a gradient slot filled by tensor hooks on the output's tensors.

    The hook's state is bound as default arguments rather than closure cells, so a
    capture over many layers allocates fewer objects (its hooks are made on every entry),
    and a plain tensor output is copied inline, without the generic tree walk.
    """
    def hook(module, args, output, _append_output=append_output, _append_grad=append_grad,
             _add_handle=add_handle, _to=to):
        if isinstance(output, _Tensor):
            copy = output.detach().clone()
            _append_output(copy if _to is None else copy.to(_to))
            if _append_grad is None:
                return
            if not output.requires_grad:
                _append_grad(None)
                return
            slot = _GradSlot() if _to is None else _GradSlotTo(_to)
            if output._is_view():   # an in-place edit of it later drops its hook: say so if it comes
                slot = _ViewGradSlot(slot, output)
            _append_grad(slot)
            _add_handle(output.register_hook(slot.fill))
            return
        _record_structure(name, output, _append_output, _append_grad, _add_handle, _copier(_to))
    hook.__qualname__ = f"capture.outputs[{name}]"
    return hook


def _record_structure(name: str, output: Any, append_output, append_grad, add_handle, copy) -> None:
    append_output(map_tensors(output, copy))
    if append_grad is None:
        return
    needing = [(p, t) for p, t in iter_tensors(output) if t.requires_grad]
    if not needing:
        append_grad(None)
        return
    paths = {p: _PENDING for p, _ in needing}
    append_grad((paths, map_leaves(output, _mark_tensors)))
    for path, t in needing:
        def grad_hook(grad, path=path):
            # None when the loss used another output of the same autograd node (one half of a
            # chunk, mu but not logvar): lesson 01's rule, a hook returns early on None
            paths[path] = None if grad is None else copy(grad)
        grad_hook.__qualname__ = f"capture.grads[{name}]"
        add_handle(t.register_hook(grad_hook))


# -- the speed machinery ----------------------------------------------------------------------
# capture() is often entered once per batch and its hooks run on every call of every layer, so
# what follows trades a little plainness for speed (benchmarks/: capture is at most 1.05x a
# hand-written recorder). None of it changes what is recorded: tests/test_capture.py holds the
# fast leaf walk equal to select_layers(model, None).

_PENDING = object()  # a gradient slot whose tensor hook has not fired yet
_TENSOR = object()   # where a structured output held a tensor (its gradient goes there)


def _mark_tensors(path: tuple, leaf: object) -> object:
    # a mark, not None, where a tensor was: a ModelOutput drops the fields that are None, and the
    # gradient of each tensor must find its place again when the record is read. Other leaves (a
    # KV cache object, a number) are not kept: a gradient record holds no reference to them.
    return _TENSOR if isinstance(leaf, _Tensor) else None


_Tensor = torch.Tensor


def _detached_clone(t: torch.Tensor) -> torch.Tensor:
    return t.detach().clone()


class _GradSlot:
    """The gradient record of one call whose output is a single tensor. ``fill``, bound to
    the slot, is the tensor hook; ``grad`` is unset until it fires. No ``__init__``: making
    one is the cheapest object creation Python has, and it happens on every hooked call."""

    __slots__ = ("grad",)

    def fill(self, grad: torch.Tensor | None) -> None:
        # a tensor hook receives None when the loss used another output of the same node
        # (lesson 01's rule: return early on None): the record is None, no gradient reached it
        self.grad = None if grad is None else grad.detach().clone()
    fill.__qualname__ = "capture.grads"


class _GradSlotTo(_GradSlot):
    """A :class:`_GradSlot` that moves the copy ``.to(to)`` (``capture(..., to=...)``)."""

    __slots__ = ("to",)

    def __init__(self, to):
        self.to = to

    def fill(self, grad: torch.Tensor | None) -> None:
        self.grad = None if grad is None else grad.detach().clone().to(self.to)
    fill.__qualname__ = "capture.grads"


class _ViewGradSlot(_GradSlot):
    """The slot of a tensor output that is a view: the hook goes on the view (``fill`` is the
    inner slot's), and the view's version at the layer's call tells later whether an in-place
    operation changed it, which drops the hook (lesson 01)."""

    __slots__ = ("inner", "view", "version")

    def __init__(self, inner: _GradSlot, output: torch.Tensor):
        self.inner, self.view, self.version = inner, weakref.ref(output), output._version

    def fill(self, grad: torch.Tensor | None) -> None:
        self.inner.fill(grad)
        self.grad = self.inner.grad

    def edited(self) -> bool:
        """Changed in place since the call (or freed, which an edited view's graph no longer holds)."""
        view = self.view()
        return view is None or view._version != self.version


def _copier(to):
    """``t -> t.detach().clone()``, moved ``.to(to)`` when ``to`` is given."""
    if to is None:
        return _detached_clone
    return lambda t: t.detach().clone().to(to)


_PLAIN_TYPES: set[type] = set()  # module classes that keep nn.Module's way of listing children


def _plain(module: nn.Module) -> bool:
    cls = type(module)
    if cls in _PLAIN_TYPES:
        return True
    if (cls.named_modules is nn.Module.named_modules and cls.named_children is nn.Module.named_children
            and cls.children is nn.Module.children):
        _PLAIN_TYPES.add(cls)
        return True
    return False


def _leaf_layers(model: nn.Module) -> list[tuple[str, nn.Module]] | None:
    """``select_layers(model, None)`` (every leaf, in ``named_modules()`` order, each module
    once), walking ``_modules`` directly: a few times faster than the generators, which
    matters because ``capture`` is often entered once per batch. ``None`` if some module
    overrides how children are listed; then ``select_layers`` decides."""
    found: list[tuple[str, nn.Module]] = []
    return found if _walk("", model, found, set()) else None


def _walk(prefix: str, module: nn.Module, found: list, seen: set) -> bool:
    # A module-level function, not a closure calling itself: that would be a reference
    # cycle, and everything it holds would wait for the garbage collector.
    if not _plain(module):
        return False
    seen.add(module)
    leaf = True
    for name, child in module._modules.items():
        if child is None:
            continue
        leaf = False
        if child not in seen and not _walk(f"{prefix}.{name}" if prefix else name, child, found, seen):
            return False
    if leaf:
        found.append((prefix, module))
    return True
