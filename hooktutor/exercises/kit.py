"""The kit of hard cases every exercise check draws on: small seeded models and probes.

A check is worth what it rejects, and the same few dimensions catch most half-right answers
(the design's "one kit of hard cases, many exercises"). Each exercise names the
dimensions that apply to it in its ``DIMENSIONS`` comment and uses the builders below:

``nested``
    :class:`Nested`: a ``Sequential`` inside a module inside the model, so a walk over
    ``model.named_children()`` (or ``model[i]``) misses the layers that do the work.
``twice``
    :class:`Twice`: one ``Linear`` called twice in one forward, so the first call is not
    the last one and a hook fires twice.
``raises``
    :class:`Raising`: a model that raises :class:`KitError` halfway through its forward
    (after its first layer ran), so a hook removed without ``finally:`` stays attached.
``nd``
    :func:`conv_model` and :func:`randn`: 3-D ``(N, C, L)`` and 4-D ``(N, C, H, W)``
    tensors, so an answer that assumes ``(N, features)`` is caught.
``inplace_after``
    :class:`InplaceAfter` (an in-place ReLU right after a ``Linear``) and :func:`scribble`
    (an in-place edit, by the check, of a tensor after the answer returned), so a stored
    bare ``detach()`` (which shares memory) shows the later change.
``repeat``
    the same answer run again on the same model (no builder needed): state kept outside the
    function, or a hook left from the first run, shows in the second.
``technique``
    :class:`HookWitness` (which kinds of hooks other than the kit's were attached to a
    module while it ran), :class:`TensorHookWitness` (the same for tensor hooks during
    backward) and :class:`GradWitness` (a parameter's ``.grad`` was accumulated by
    ``backward()``, not assigned by hand): they prove the technique asked for was used.

The dimensions below came from the survivors of mutation testing (``hooktutor.course.mutation``):
each is a way a mutant of a solution, or a learner, got through a check that lacked it.

``dtype``
    :func:`in_dtype`: the model and its input in float64 (or bfloat16), so an answer that
    builds float32 tensors of its own, or compares with a float32 constant, is caught.
``alias``
    :class:`Residual`: a layer's output also feeds a residual that is added *in place* after
    the layer ran, so a stored bare reference (or ``detach()``) changes under the answer, and a
    hook that edits its output in place changes the residual branch too.
``detached``
    :func:`expect_detached`: a stored tensor must not hold the autograd graph (no ``grad_fn``,
    no ``requires_grad``): keeping it keeps every activation of the step alive.
``reattach``
    :func:`hook_count`: the hooks on a module, a tensor or an optimizer, to prove that calling
    the answer twice on the same object does not stack a second hook (or removes the first).
``order``
    :class:`Reordered` (modules defined in another order than they run) and :func:`freeze`
    (some parameters frozen), so an answer that follows ``named_modules()`` or assumes every
    parameter trains is caught.
``left_as_found``
    :class:`LeftAsFound`: train/eval mode of every module, ``requires_grad`` of every
    parameter, whether each parameter has a ``.grad``, the grad mode, and the hooks of an
    optimizer are as they were after the answer.

Some dimensions every check gets without asking: after its cases pass, the first visible case's
call runs again in variants of its surroundings (:mod:`hooktutor.exercises.variants`: float64 and
bfloat16, eval and mixed train/eval modules, a caller's hook on every module, a backward
through the result, every module's state and the process-wide settings compared with the
reference's). A case still builds these dimensions itself where the task needs more than one call.

Every builder takes a ``seed`` and leaves the global random state alone; every model is
tiny (a few dozen weights), so a check built from them stays far under its time budget.

The probes are context managers: attach them around the learner's call (``with
HookWitness(...) as w: answer(...)``); they remove their own hooks on exit, also when the
answer raises, and count only hooks that are not theirs, so they never count as the
learner's hooks and never appear as a leak in :meth:`Tester.leaks <.core.Tester.leaks>`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import nn

from ..inventory import hook_ids, list_hooks
from ..models import seeded
from .core import CALLERS_HOOK_IDS, learners_hooks

DIMENSIONS: list[str] = ["nested", "twice", "raises", "nd", "inplace_after", "repeat", "technique",
                         "dtype", "alias", "detached", "reattach", "order", "left_as_found"]

__all__ = [
    "DIMENSIONS", "KitError", "Nested", "Twice", "Raising", "InplaceAfter", "conv_model", "conv_input", "randn",
    "scribble", "call_expecting_kit_error", "HookWitness", "TensorHookWitness", "GradWitness",
    "in_dtype", "Residual", "expect_detached", "hook_count", "Reordered", "freeze", "LeftAsFound",
]


def randn(*shape: int, seed: int = 0, scale: float = 1.0) -> torch.Tensor:
    """A seeded standard normal tensor of ``shape`` (times ``scale``); the global RNG is untouched."""
    g = torch.Generator().manual_seed(seed)
    return scale * torch.randn(*shape, generator=g)


# -- nested ---------------------------------------------------------------------------------

class _Block(nn.Module):
    """``act(body(x))`` with ``body = Sequential(Linear(4, 6), ReLU, Linear(6, 6))``."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 6))
        self.act = nn.Tanh()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.body(x))


class Nested(nn.Module):
    """Dimension ``nested``: ``head(encoder(x))`` where ``encoder`` is a module holding a
    ``Sequential`` (``encoder.body``). Input ``(N, 4)``, output ``(N, 3)``.

    ``named_children()`` of the model gives only ``encoder`` and ``head``; the layers that
    compute are ``encoder.body.0`` (Linear), ``encoder.body.1`` (ReLU), ``encoder.body.2``
    (Linear), ``encoder.act`` (Tanh) and ``head`` (Linear): :attr:`LEAVES`.
    """

    LEAVES = ("encoder.body.0", "encoder.body.1", "encoder.body.2", "encoder.act", "head")

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        with seeded(seed):
            self.encoder = _Block()
            self.head = nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x))

    def intermediates(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """Every module's output by qualified name (``""`` is the model), computed with
        ``.forward`` so no hook fires; detached copies."""
        out: dict[str, torch.Tensor] = {}
        h = x
        for i, layer in enumerate(self.encoder.body):
            h = layer.forward(h)
            out[f"encoder.body.{i}"] = h.detach().clone()
        out["encoder.body"] = h.detach().clone()
        h = self.encoder.act.forward(h)
        out["encoder.act"] = out["encoder"] = h.detach().clone()
        h = self.head.forward(h)
        out["head"] = out[""] = h.detach().clone()
        return out


# -- twice ----------------------------------------------------------------------------------

class Twice(nn.Module):
    """Dimension ``twice``: ``out(block(tanh(block(x))))``, ``block`` a ``Linear(4, 4)`` called
    twice in one forward. Input ``(N, 4)``, output ``(N, 2)``."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        with seeded(seed):
            self.block = nn.Linear(4, 4)
            self.out = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.block(torch.tanh(self.block(x))))

    def block_calls(self, x: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """``[(input, output), (input, output)]`` of the two calls of ``block``, without hooks."""
        first_in = x.detach().clone()
        first = self.block.forward(first_in).detach()
        second_in = torch.tanh(first)
        second = self.block.forward(second_in).detach()
        return [(first_in, first.clone()), (second_in.clone(), second.clone())]


# -- raises ---------------------------------------------------------------------------------

class KitError(RuntimeError):
    """What :class:`Raising` raises halfway through its forward."""


class Raising(nn.Module):
    """Dimension ``raises``: ``fc1`` runs, then the forward raises :class:`KitError` (while
    ``fail`` is True) before ``fc2`` and ``head`` run. Input ``(N, 4)``.

    With ``fail=False`` it is an ordinary ``head(relu(fc2(relu(fc1(x)))))``.
    """

    def __init__(self, seed: int = 0, *, fail: bool = True) -> None:
        super().__init__()
        with seeded(seed):
            self.fc1 = nn.Linear(4, 4)
            self.fc2 = nn.Linear(4, 4)
            self.head = nn.Linear(4, 2)
        self.fail = fail

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(x))
        if self.fail:
            raise KitError("the check's model raised halfway through its forward (on purpose)")
        return self.head(torch.relu(self.fc2(h)))


def call_expecting_kit_error(fn: Any, *args: Any, **kwargs: Any) -> tuple[bool, Any]:
    """Call ``fn(*args, **kwargs)``; return ``(raised, result)``, swallowing :class:`KitError`
    (an answer may let the model's error through, or catch it: both are fine)."""
    try:
        return False, fn(*args, **kwargs)
    except KitError:
        return True, None


def expect_clean_after_raise(t: Any, answer: Any, *extra: Any, seed: int) -> None:
    """Dimension ``raises`` as a whole case: ``answer(model, x, model.fc1, *extra)`` on a
    :class:`Raising` model, then no hook of the learner's may be left on it (a hook removed
    after ``model(x)`` instead of in a ``finally:`` stays when the model raises)."""

    model = t.track(Raising(seed=seed), "a model that raises halfway (after fc1)")
    call_expecting_kit_error(answer, model, torch.zeros(1, 4), model.fc1, *extra)
    left = learners_hooks(model, include_global=True)
    t.expect(not left, what="hooks left on the model after it raised", expected="none",
             got=f"{len(left)} hook(s)", nudge=(
                 "model(x) raised, and your hook stayed attached: call handle.remove() in the "
                 "`finally:` block of a try: around model(x), so it runs even when the model raises"))


# -- nd -------------------------------------------------------------------------------------

def conv_model(dims: int = 4, seed: int = 0) -> nn.Sequential:
    """Dimension ``nd``: ``Conv(2->4, k=3, pad=1), ReLU, Conv(4->3, k=1)``: ``Conv2d`` for
    ``dims=4`` (input ``(N, 2, H, W)``), ``Conv1d`` for ``dims=3`` (input ``(N, 2, L)``).
    Channels are dimension 1 of every output."""
    conv = {3: nn.Conv1d, 4: nn.Conv2d}[dims]
    with seeded(seed):
        return nn.Sequential(conv(2, 4, 3, padding=1), nn.ReLU(), conv(4, 3, 1))


def conv_input(dims: int = 4, seed: int = 0, batch: int = 2) -> torch.Tensor:
    """A seeded input for :func:`conv_model`: ``(batch, 2, 5, 5)`` or ``(batch, 2, 7)``."""
    return randn(batch, 2, 5, 5, seed=seed) if dims == 4 else randn(batch, 2, 7, seed=seed)


# -- inplace_after --------------------------------------------------------------------------

class InplaceAfter(nn.Module):
    """Dimension ``inplace_after``: ``act(lin(x))`` with ``act = ReLU(inplace=True)``, so the
    output of ``lin`` (and the input of ``act``) is overwritten right after ``lin`` returns.
    The weights make about half of ``lin``'s outputs negative. Input ``(N, 3)``."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        with seeded(seed):
            self.lin = nn.Linear(3, 3)
        with torch.no_grad():
            self.lin.bias.zero_()
        self.act = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.lin(x))


@torch.no_grad()
def scribble(*tensors: torch.Tensor, value: float = 1000.0) -> None:
    """Dimension ``inplace_after``: add ``value`` in place to each tensor (under no_grad), as
    code that runs after the answer might. A recording that holds a bare ``detach()`` or the
    tensor itself shows the change; a ``clone()`` does not."""
    for t in tensors:
        t.add_(value)


# -- technique: probes ------------------------------------------------------------------------

_MODULE_KINDS = ("forward_pre", "forward", "backward_pre", "backward")


def _named(items: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> list[tuple[str, Any]]:
    return list(items.items()) if isinstance(items, Mapping) else list(items)


class _Witness:
    """What the witnesses share: on entering, one probe of the kit's on each watched item, its
    handle remembered (so the probe never counts as the learner's hook); on exit, all removed,
    also when attaching failed halfway."""

    def __init__(self) -> None:
        self._handles: list[Any] = []
        self._mine: set[int] = set()

    def _watched(self) -> list[tuple[str, Any]]:
        raise NotImplementedError

    def _attach(self, name: str, item: Any) -> Any:
        raise NotImplementedError

    def __enter__(self):
        try:
            for name, item in self._watched():
                handle = self._attach(name, item)
                self._handles.append(handle)
                self._mine.add(handle.id)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()


class HookWitness(_Witness):
    """Dimension ``technique``: which kinds of hooks, other than the kit's, were attached to
    each watched module (or globally) while it ran.

    ``with HookWitness({"fc1": model.fc1}) as w: answer(model, x)``; then ``w.calls["fc1"]``
    is how often fc1 ran and ``w.fired("fc1", "forward")`` how many of those calls had a
    forward hook attached that is not the kit's (a hook attached while the module runs fires).
    Kinds: ``forward_pre``, ``forward``, ``backward_pre``, ``backward``; a global module hook
    of that kind counts too. The witness is a forward pre-hook put first (``prepend=True``)
    and removed on exit.
    """

    def __init__(self, modules: Mapping[str, nn.Module] | Iterable[tuple[str, nn.Module]]):
        self.modules = _named(modules)
        self.calls: dict[str, int] = {name: 0 for name, _ in self.modules}
        self._with: dict[str, dict[str, int]] = {name: {k: 0 for k in _MODULE_KINDS} for name, _ in self.modules}
        super().__init__()

    def _probe(self, name: str) -> Any:
        def witness(module: nn.Module, args: tuple) -> None:
            self.calls[name] += 1
            for kind in _MODULE_KINDS:
                if hook_ids(module, kind) - self._mine - CALLERS_HOOK_IDS or hook_ids(None, kind):
                    self._with[name][kind] += 1
        return witness

    def fired(self, name: str, kind: str = "forward") -> int:
        """How many calls of module ``name`` ran with a non-kit hook of ``kind`` attached."""
        return self._with[name][kind]

    def _watched(self) -> list[tuple[str, Any]]:
        return self.modules

    def _attach(self, name: str, item: Any) -> Any:
        return item.register_forward_pre_hook(self._probe(name), prepend=True)


class TensorHookWitness(_Witness):
    """Dimension ``technique``: whether tensor hooks other than the kit's were attached to
    each watched tensor when backward reached it.

    ``with TensorHookWitness({"h": h}) as w: answer(...)``; ``w.reached["h"]`` counts how
    often backward reached ``h`` (with the gradient the kit saw last in ``w.grads["h"]``,
    before any other hook changed it) and ``w.fired("h")`` how often a non-kit hook was
    attached at that moment. Enter it before the answer registers its hooks (the kit's hook
    runs first, hooks run in registration order); removed on exit.
    """

    def __init__(self, tensors: Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]]):
        self.tensors = _named(tensors)
        self.reached: dict[str, int] = {name: 0 for name, _ in self.tensors}
        self.grads: dict[str, torch.Tensor] = {}
        self._with: dict[str, int] = {name: 0 for name, _ in self.tensors}
        super().__init__()

    def _probe(self, name: str, tensor: torch.Tensor) -> Any:
        def witness(grad: torch.Tensor | None) -> None:
            self.reached[name] += 1
            # a tensor the loss did not use gets None (a chunk of an output): nothing to copy
            self.grads[name] = None if grad is None else grad.detach().clone()
            if hook_ids(tensor, "tensor") - self._mine:
                self._with[name] += 1
        return witness

    def fired(self, name: str) -> int:
        """How often backward reached tensor ``name`` with a non-kit tensor hook attached."""
        return self._with[name]

    def _watched(self) -> list[tuple[str, Any]]:
        return self.tensors

    def _attach(self, name: str, item: Any) -> Any:
        return item.register_hook(self._probe(name, item))


class GradWitness(_Witness):
    """Dimension ``technique``: a parameter's ``.grad`` was accumulated by ``backward()``.

    A post-accumulate-grad hook (the kit's, registered first, so it runs before any the
    learner adds) counts in ``w.accumulated[name]`` each time backward accumulated into the
    parameter and keeps a copy of the ``.grad`` it saw then (``w.grads[name]``).
    ``w.filled_by_backward(name)`` says whether the parameter's ``.grad`` now is the one
    backward left (not ``None``, not assigned or edited by hand afterwards).
    ``w.learner_hooks[name]`` counts the accumulations during which a non-kit
    post-accumulate-grad hook was attached. Parameters that do not require grad are skipped.
    """

    def __init__(self, params: Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]]):
        self.params = [(n, p) for n, p in _named(params) if p.requires_grad]
        self.accumulated: dict[str, int] = {name: 0 for name, _ in self.params}
        self.learner_hooks: dict[str, int] = {name: 0 for name, _ in self.params}
        self.grads: dict[str, torch.Tensor] = {}
        super().__init__()

    def _probe(self, name: str) -> Any:
        def witness(param: torch.Tensor) -> None:
            self.accumulated[name] += 1
            if param.grad is not None:
                self.grads[name] = param.grad.detach().clone()
            if hook_ids(param, "post_accumulate") - self._mine:
                self.learner_hooks[name] += 1
        return witness

    def filled_by_backward(self, name: str) -> bool:
        """True when ``.grad`` of ``name`` equals what backward accumulated last."""
        param = dict(self.params)[name]
        return (self.accumulated[name] > 0 and param.grad is not None and name in self.grads
                and torch.equal(param.grad.detach(), self.grads[name]))

    def _watched(self) -> list[tuple[str, Any]]:
        return self.params

    def _attach(self, name: str, item: Any) -> Any:
        return item.register_post_accumulate_grad_hook(self._probe(name))


# -- dtype ----------------------------------------------------------------------------------

def in_dtype(model: nn.Module, *inputs: torch.Tensor, dtype: torch.dtype = torch.float64) -> tuple:
    """``model`` converted to ``dtype`` in place, and ``inputs`` converted: ``(model, *inputs)``."""
    model.to(dtype)
    return (model, *(x.to(dtype) for x in inputs))


# -- alias ----------------------------------------------------------------------------------

class Residual(nn.Module):
    """``out = body(fc(x)); out += fc(x)``: the output of ``body`` is changed in place after its
    hooks ran, and the output of ``fc`` feeds two branches (``body`` and the residual)."""

    def __init__(self, seed: int = 0, width: int = 4) -> None:
        super().__init__()
        with seeded(seed):
            self.fc = nn.Linear(width, width)
            self.body = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        out = self.body(h)
        out += h
        return out

    def outputs(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """What ``fc`` and ``body`` returned when they ran (``body``'s before the in-place add)."""
        with torch.no_grad():
            h = self.fc(x)
            return {"fc": h.clone(), "body": self.body(h).clone()}


# -- detached -------------------------------------------------------------------------------

def expect_detached(t: Any, value: torch.Tensor, *, what: str) -> None:
    """``value`` must hold no autograd graph: what a recorder keeps must not keep the step alive."""
    if isinstance(value, torch.Tensor) and (value.requires_grad or value.grad_fn is not None):
        t.expect(False, what=what, expected="a tensor without autograd history", got=(
            f"a tensor with grad_fn={type(value.grad_fn).__name__}" if value.grad_fn is not None
            else "a tensor that requires grad"), nudge=(
            "what you keep still holds the autograd graph (and every activation it saved): store "
            "tensor.detach().clone(), or compute the value under torch.no_grad()"))


# -- reattach -------------------------------------------------------------------------------

def hook_count(obj: Any) -> int:
    """How many hooks sit on ``obj``: a module (with its submodules and parameters), a tensor,
    or an optimizer (global hooks not counted)."""
    if isinstance(obj, (nn.Module, torch.optim.Optimizer)):   # not the caller's stand-ins of a Tester
        return len([r for r in list_hooks(obj, include_global=False) if r.handle_id not in CALLERS_HOOK_IDS])
    if isinstance(obj, torch.Tensor):
        return len(hook_ids(obj, "tensor")) + len(hook_ids(obj, "post_accumulate"))
    raise TypeError(f"hook_count() counts the hooks of a module, a tensor or an optimizer, not a {type(obj).__name__}")


# -- order ----------------------------------------------------------------------------------

class Reordered(nn.Module):
    """Defines ``head``, ``mid``, ``stem`` in that order but runs ``stem`` first: the order of
    ``named_modules()`` is not the order of the forward (nor, reversed, of the backward)."""

    def __init__(self, seed: int = 0, inputs: int = 8, width: int = 16) -> None:
        super().__init__()
        with seeded(seed):
            self.head = nn.Linear(width, 1)
            self.mid = nn.Linear(width, width)
            self.stem = nn.Linear(inputs, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.sigmoid(self.mid(torch.sigmoid(self.stem(x)))))


def freeze(model: nn.Module, *names: str) -> nn.Module:
    """``requires_grad=False`` for the parameters of the submodules (or parameters) named."""
    for name in names:
        target = model.get_submodule(name) if name in dict(model.named_modules()) else model.get_parameter(name)
        for p in target.parameters() if isinstance(target, nn.Module) else [target]:
            p.requires_grad_(False)
    return model


# -- left_as_found --------------------------------------------------------------------------

class LeftAsFound:
    """Around the answer: ``with LeftAsFound(t, model, optimizer=opt): answer(...)`` fails the
    case when the answer leaves a module in another train/eval mode, a parameter with another
    ``requires_grad`` (with ``grads=True``: a ``.grad`` it did not have), the grad mode switched,
    or another number of hooks on the optimizer. To check the result first: ``found = LeftAsFound(...).__enter__()``,
    the answer, the result's checks, then ``found.expect_as_found()``."""

    def __init__(self, t: Any, model: nn.Module, *, optimizer: torch.optim.Optimizer | None = None,
                 name: str = "the model", grads: bool = False) -> None:
        self.t, self.model, self.optimizer, self.name, self.grads = t, model, optimizer, name, grads

    def _state(self) -> dict[str, Any]:
        state: dict[str, Any] = {f"{n or 'the model'}.training": m.training for n, m in self.model.named_modules()}
        state.update({f"{n}.requires_grad": p.requires_grad for n, p in self.model.named_parameters()})
        if self.grads:   # an answer whose task runs no backward of its own
            state.update({f"{n}.grad is None": p.grad is None for n, p in self.model.named_parameters()})
        state["torch.is_grad_enabled()"] = torch.is_grad_enabled()
        if self.optimizer is not None:
            state["hooks on the optimizer"] = hook_count(self.optimizer)
        return state

    def __enter__(self) -> LeftAsFound:
        self.before = self._state()
        return self

    def __exit__(self, kind: Any, *exc: Any) -> None:
        if kind is None:
            self.expect_as_found()

    def expect_as_found(self) -> None:
        """Fail the case if something differs from when the block was entered (call it after the
        checks of the answer's result, to report a wrong result first)."""
        after = self._state()
        changed = [k for k in self.before if k in after and after[k] != self.before[k]]   # (prune renames a weight)
        if changed:
            first = changed[0]
            self.t.expect(False, what=f"{first} after your answer ran on {self.name}", expected=self.before[first],
                          got=after[first], nudge=(
                              "leave what you were given as you found it: restore train()/eval(), "
                              "requires_grad and the grad mode you changed (in a finally: block), clear "
                              "the .grad your backward() filled (model.zero_grad(set_to_none=True)), and "
                              "remove the hooks you put on the optimizer"))



class TensorHookWatch:
    """Dimension ``technique`` for tasks that ask for a tensor hook on a layer's output: the check's
    own forward hook on ``layer``, attached before the answer's, puts a tensor hook on the layer's
    output and, when backward reaches it, counts the other tensor hooks registered on that same
    tensor (version): the answer's. An answer that gets the gradient another way (a full backward
    hook, ``torch.autograd.grad`` on a kept output, ``retain_grad``) leaves none. Removed on exit.
    Used by ``05_inplace_relu_pitfall`` (pre_relu_grad) and ``07_capstone`` (grad_cam)."""

    def __init__(self, layer: nn.Module):
        self.layer, self.reached, self.others = layer, 0, 0

    def __enter__(self) -> TensorHookWatch:
        def on_output(module, args, output):
            if not (isinstance(output, torch.Tensor) and output.requires_grad):
                return
            handle = output.register_hook(lambda grad: self._count(handle))
        self.handle = self.layer.register_forward_hook(on_output)
        return self

    def _count(self, handle: Any) -> None:
        self.reached += 1
        hooks = handle.hooks_dict_ref()   # the hooks of the version the check's hook sits on
        self.others += len([key for key in hooks if key != handle.id]) if hooks is not None else 0

    def expect_tensor_hook(self, t: Any, name: str, nudge: str) -> None:
        t.expect(self.reached == 0 or self.others > 0, what=f"tensor hooks on the output of {name!r}",
                 expected="yours, when backward reached it", got="none", nudge=nudge)

    def __exit__(self, *exc: Any) -> None:
        self.handle.remove()
