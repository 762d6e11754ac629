"""``capture``: record what layers produce, correctly, and always detach afterwards.

Taught in ``02_forward_hooks.ipynb`` (feature extraction done right) and verified by the
learner in ``05_inplace_relu_pitfall.ipynb``. What it gets right where hand-written hooks
go wrong:

* every recorded tensor is a copy (``detach().clone()``): a later in-place op such as
  ``ReLU(inplace=True)`` or a residual ``+=`` cannot change it, while ``detach()`` alone
  shares storage and would be overwritten;
* gradients come from tensor hooks registered on each output as it is produced, not
  from full backward hooks, so networks with in-place ReLUs work;
* inputs are copied in a forward *pre*-hook, before an in-place module overwrites them;
* a module called several times keeps every call, in order;
* under ``torch.no_grad()`` outputs are recorded and gradients are simply absent;
* every hook it added is removed in a ``finally``, hooks you attached yourself stay.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import nn

from ._tree import describe, iter_tensors, map_tensors, set_at
from .selection import LayerSpec, closest, select_layers

_PENDING = object()  # a gradient slot whose tensor hook has not fired yet


def _detached_clone(t: torch.Tensor) -> torch.Tensor:
    return t.detach().clone()


class RecordNotFound(LookupError):
    """Asked for a record that does not exist; the message says why and what to do."""


class _Layers:
    """The recorded layer names, shared by a Recording and its Records (no back-reference)."""

    __slots__ = ("names",)

    def __init__(self, names: list[str]):
        self.names = names

    def not_recorded(self, name: str) -> str:
        close = closest(name, self.names)
        hint = ("did you mean " + " or ".join(repr(c) for c in close) + "?") if close else \
            f"recorded layers: {', '.join(repr(n) for n in self.names[:12])}"
        return f"{name!r} was not recorded by this capture(); {hint}"


def _finish_grad(name: str, index: int, slot: Any) -> Any:
    """The gradient of one call from its slot ``(paths, skeleton)``, or why there is none."""
    if slot is None:
        raise RecordNotFound(
            f"no gradient for {name!r} call {index}: its output did not require grad "
            "(recorded under torch.no_grad(), or nothing before it needs a gradient)")
    paths, value = slot
    if any(v is _PENDING for v in paths.values()):
        raise RecordNotFound(
            f"no gradient for {name!r} call {index} yet: call loss.backward() inside the "
            "`with capture(...)` block; its gradient hooks are removed when the block ends")
    if () in paths:
        return paths[()]
    out = value
    for path, grad in paths.items():
        out = set_at(out, path, grad)
    return out


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
        # One list per layer, made up front so the hooks append without a lookup.
        self._store: dict[str, list[Any]] = {n: [] for n in self._layers.names}

    # -- mapping protocol -------------------------------------------------------------
    def __iter__(self) -> Iterator[str]:
        return iter([n for n, calls in self._store.items() if calls])

    def __len__(self) -> int:
        return sum(1 for calls in self._store.values() if calls)

    def __contains__(self, name: object) -> bool:
        return bool(self._store.get(name))  # type: ignore[arg-type]

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

    def _append(self, name: str, value: Any) -> None:
        self._store.setdefault(name, []).append(value)

    def __repr__(self) -> str:
        return f"<{self._kind} of {len(self)} layer(s): {', '.join(self)}>"


class Recording:
    """What :func:`capture` saw. ``rec[name]`` is the output; also ``.inputs``,
    ``.kwargs``, ``.grads``, ``.calls(name)`` and ``.names``."""

    def __init__(self, layers: list[tuple[str, nn.Module]], *, inputs: bool, grads: bool):
        self._layers = _Layers([n for n, _ in layers])
        self.layer_names = self._layers.names
        self._types = {n: type(m).__name__ for n, m in layers}
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
        return len(self.outputs._store.get(name, []))

    def _not_recorded(self, name: str) -> str:
        return self._layers.not_recorded(name)

    def _finish_grad(self, name: str, index: int, slot: Any) -> Any:
        return _finish_grad(name, index, slot)

    # -- display ------------------------------------------------------------------
    def __repr__(self) -> str:
        kinds = ["outputs"] + (["inputs"] if self._want_inputs else []) + \
                (["grads"] if self._want_grads else [])
        lines = [f"Recording of {len(self.names)} layer(s): {' + '.join(kinds)}"
                 + ("" if self.names else " (nothing ran yet)")]
        rows = []
        for n in self.names:
            calls = self.outputs._store[n]
            row = [n or "<root>", self._types[n],
                   f"{len(calls)} call{'s' if len(calls) != 1 else ''}",
                   "out " + describe(calls[0])]
            if self._want_grads:
                try:
                    row.append("grad " + describe(self.grads.calls(n)[0]))
                except RecordNotFound:
                    row.append("grad -")
            rows.append(row)
        if rows:
            widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
            for r in rows:
                lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
        return "\n".join(lines)


class capture:  # noqa: N801 - used like a function: ``with capture(model) as rec``
    """Record what the selected layers of ``model`` produce while the block runs.

    ``layers``: ``None`` for every leaf module; a name (``"features.0"``) or a list of
    names; a module class (``nn.Conv2d``); or a predicate ``(name, module) -> bool``.
    ``inputs=True`` also records each call's positional arguments (``rec.inputs``) and
    keyword arguments (``rec.kwargs``), copied *before* the module runs. ``grads=True``
    records the gradient w.r.t. each output (``rec.grads``) when you call ``backward()``
    inside the block. ``to`` moves the copies, for example ``to="cpu"`` on a GPU.

    Taught in ``02_forward_hooks.ipynb``; checked against every in-place trap in
    ``05_inplace_relu_pitfall.ipynb``.

    >>> with capture(model, ["features.0"], grads=True) as rec:  # doctest: +SKIP
    ...     model(x).sum().backward()
    >>> rec["features.0"].shape, rec.grads["features.0"].shape  # doctest: +SKIP
    """

    def __init__(self, model: nn.Module, layers: LayerSpec = None, *, inputs: bool = False,
                 grads: bool = False, to: str | torch.device | None = None):
        self._layers = select_layers(model, layers, func="capture")
        self._to = to
        self.recording = Recording(self._layers, inputs=bool(inputs), grads=bool(grads))
        self._handles: list[Any] = []

    def _copy(self, t: torch.Tensor) -> torch.Tensor:
        t = t.detach().clone()
        return t.to(self._to) if self._to is not None else t

    def _copier(self):
        """The copy function for recorded tensors, chosen once rather than on every call."""
        if self._to is None:
            return _detached_clone
        return self._copy

    def _on_input(self, name: str):
        append_args = self.recording.inputs._store[name].append
        append_kwargs = self.recording.kwargs._store[name].append
        copy = self._copier()

        def pre_hook(module, args, kwargs):
            append_args(map_tensors(args, copy))
            append_kwargs(map_tensors(dict(kwargs), copy))
        pre_hook.__qualname__ = f"capture.inputs[{name}]"
        return pre_hook

    def _on_output(self, name: str):
        # Everything a call needs is looked up here, once per layer: the hot path below is
        # a copy and an append, plus one tensor hook per output when gradients are wanted.
        append_output = self.recording.outputs._store[name].append
        append_grad = self.recording.grads._store[name].append
        want_grads = self.recording._want_grads
        add_handle = self._handles.append
        copy = self._copier()
        grad_name = f"capture.grads[{name}]"
        tensor = torch.Tensor

        def hook(module, args, output):
            if isinstance(output, tensor):  # the common case: no tree walk
                append_output(copy(output))
                if not want_grads:
                    return
                if not output.requires_grad:
                    append_grad(None)
                    return
                paths: dict[tuple, Any] = {(): _PENDING}
                append_grad((paths, None))

                def grad_hook(grad):
                    paths[()] = copy(grad)
                grad_hook.__qualname__ = grad_name
                add_handle(output.register_hook(grad_hook))
                return
            append_output(map_tensors(output, copy))
            if not want_grads:
                return
            needing = [(p, t) for p, t in iter_tensors(output) if t.requires_grad]
            if not needing:
                append_grad(None)
                return
            paths = {p: _PENDING for p, _ in needing}
            append_grad((paths, map_tensors(output, lambda t: None)))
            for path, t in needing:
                def grad_hook(grad, path=path):
                    paths[path] = copy(grad)
                grad_hook.__qualname__ = grad_name
                add_handle(t.register_hook(grad_hook))
        hook.__qualname__ = f"capture.outputs[{name}]"
        return hook

    def __enter__(self) -> Recording:
        if self.recording._active:
            raise RuntimeError("this capture() is already active; make a new one for a nested block")
        self.recording._active = True
        try:
            for name, module in self._layers:
                if self.recording._want_inputs:
                    self._handles.append(module.register_forward_pre_hook(
                        self._on_input(name), with_kwargs=True))
                self._handles.append(module.register_forward_hook(self._on_output(name)))
        except BaseException:
            self._detach()
            raise
        return self.recording

    def _detach(self) -> None:
        handles, self._handles = self._handles, []
        for h in handles:
            h.remove()
        self.recording._active = False

    def __exit__(self, *exc: object) -> None:
        self._detach()
