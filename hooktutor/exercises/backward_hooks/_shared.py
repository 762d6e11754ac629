"""Helpers shared by several exercises of ``04_backward_hooks.ipynb``."""

from __future__ import annotations

import copy
import warnings
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from ...inventory import list_hooks
from ...models import seeded
from .. import kit

# The two warnings a learner's (or a typical wrong) answer may trigger; a check reports the
# mistake itself, so they are not printed again (with file paths) below the check cell.
_EXPECTED_WARNINGS = ("Full backward hook is firing", "Using a non-full backward hook")


@contextmanager
def _quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        for text in _EXPECTED_WARNINGS:
            warnings.filterwarnings("ignore", message=text)
        yield


def _sigmoid_stack(depth: int, width: int = 16, *, seed: int) -> nn.Sequential:
    """``fc1 act1 ... fcN actN head``: Linear + Sigmoid layers, where gradients vanish."""
    layers: OrderedDict[str, nn.Module] = OrderedDict()
    with seeded(seed):
        for i in range(1, depth + 1):
            layers[f"fc{i}"] = nn.Linear(8 if i == 1 else width, width)
            layers[f"act{i}"] = nn.Sigmoid()
        layers["head"] = nn.Linear(width, 1)
    return nn.Sequential(layers)


def _linear_output_norms(model: nn.Module, x: torch.Tensor) -> dict[str, float]:
    """Norm of d(model(x).sum())/d(output) of every nn.Linear of any model (nested ones too),
    from retain_grad() on a copy: no hook of the learner's kind is involved."""
    model = copy.deepcopy(model)
    outs: dict[str, torch.Tensor] = {}

    def keep(name: str):
        def hook(module, args, output):
            output.retain_grad()
            outs[name] = output
        return hook

    handles = [m.register_forward_hook(keep(n)) for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    try:
        model(x).sum().backward()
    finally:
        for h in handles:
            h.remove()
    return {name: float(out.grad.norm()) for name, out in outs.items()}


def _linears(model: nn.Module) -> dict[str, nn.Module]:
    return {n: m for n, m in model.named_modules() if isinstance(m, nn.Linear)}


class FullHookWitness(kit.HookWitness):
    """Dimension ``technique`` for backward hooks: :class:`kit.HookWitness`, and for each watched
    module how many of its calls ran with a learner's *legacy* backward hook on it
    (``register_backward_hook``: on a ``Linear`` it gives the same ``grad_output`` as the full
    hook, so only the kind of hook tells the two apart). A general builder: it could join the kit."""

    def __init__(self, modules: Any):
        super().__init__(modules)
        self.legacy: dict[str, int] = {name: 0 for name, _ in self.modules}

    def _probe(self, name: str) -> Any:
        seen = super()._probe(name)

        def witness(module: nn.Module, args: tuple) -> None:
            seen(module, args)
            if any(r.kind == "backward (legacy)" for r in list_hooks(module, include_global=False).rows):
                self.legacy[name] += 1
        return witness


def expect_full_hooks(t: Any, witness: FullHookWitness, *, pre_hooks_too: bool = False) -> None:
    """Every module the witness watched ran with a full backward hook of the learner's on it
    (``pre_hooks_too``: or a full backward pre-hook, for a task that reads only ``grad_output``,
    which both kinds receive)."""
    names = [name for name, _ in witness.modules]
    legacy = [n for n in names if witness.legacy[n]]
    t.expect(not legacy, what="the kind of backward hook on the Linears", expected="full backward hooks",
             got=f"legacy register_backward_hook on {', '.join(legacy)}", nudge=(
                 "the numbers are right here, but register_backward_hook is the legacy hook: it sees only "
                 "the last operation of the module, which is wrong for modules made of several; use "
                 "module.register_full_backward_hook"))
    unhooked = [n for n in names if witness.fired(n, "backward") == 0
                and not (pre_hooks_too and witness.fired(n, "backward_pre"))]
    t.expect(not unhooked, what="full backward hooks attached while the model ran", expected=names,
             got=[n for n in names if n not in unhooked], nudge=(
                 "the numbers are right, but not from full backward hooks: the task is to read them in "
                 "hooks attached with module.register_full_backward_hook"
                 + (" (or register_full_backward_pre_hook)" if pre_hooks_too else "")))


class _SubLinear(nn.Linear):
    """A subclass of ``nn.Linear`` (a user-defined one, as a LoRA-style layer is): still a Linear."""


def _with_sublinear(model: nn.Module, name: str) -> nn.Module:
    """``model`` with its Linear ``name`` replaced by a :class:`_SubLinear` holding the same weights."""
    old = model.get_submodule(name)
    new = _SubLinear(old.in_features, old.out_features, bias=old.bias is not None)
    new.load_state_dict(old.state_dict())
    parent, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, child, new)
    return model


def _grads(model: nn.Module) -> dict[str, torch.Tensor | None]:
    return {n: None if p.grad is None else p.grad.detach().clone() for n, p in model.named_parameters()}


def _halfway_through_a_step(model: nn.Module, x: torch.Tensor) -> None:
    """Fill every ``.grad`` of ``model`` as a training step would (one backward of some loss)."""
    model(x).pow(2).mean().backward()


def _what_backward_adds(model: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
    """What one ``model(x).sum().backward()`` adds to each ``.grad`` (on a copy, no hooks)."""
    ref = copy.deepcopy(model)
    ref.zero_grad(set_to_none=True)
    with _quiet():
        ref(x).sum().backward()
    return {n: p.grad for n, p in ref.named_parameters()}


def expect_one_backward_added(t: Any, model: nn.Module, before: dict, added: dict, *, times: int = 1) -> None:
    """Dimension ``left_as_found``: every ``.grad`` of ``model`` holds what it held plus what the
    task's ``model(x).sum().backward()`` adds (``times`` of them): nothing zeroed before or after."""
    for name, p in model.named_parameters():
        want = added[name] * times if before[name] is None else before[name] + added[name] * times
        got = p.grad
        ok = got is not None and got.shape == want.shape and torch.allclose(got, want, rtol=1e-5, atol=1e-7)
        t.expect(ok, what=f"{name}.grad after your answer", expected=want, got=got, nudge=(
            "the task's model(x).sum().backward() adds its gradients to what .grad held (the model may be "
            "halfway through a training step): do not zero the gradients before or after it"))


def expect_input_as_found(t: Any, x: torch.Tensor, what: str) -> None:
    """Dimension ``left_as_found`` for the input: it did not require grad, and still does not."""
    t.expect(not x.requires_grad and x.grad is None, what=f"x after {what}", expected="x as given: no requires_grad",
             got=f"requires_grad={x.requires_grad}, grad={'set' if x.grad is not None else None}", nudge=(
                 "leave the caller's input as you found it: x.requires_grad_() changes their tensor. The warning "
                 "about inputs that do not require grad is harmless here"))
