"""Exercises of ``04_backward_hooks.ipynb``: module backward hooks put to work.

* :data:`output_grad_norms` — the gradient norm per layer, read from full backward hooks.
* :data:`clip_input_grad` — a full backward hook that clips ``grad_input``.
* :data:`first_vanishing_layer` — where, walking back from the output, the gradient dies.
"""

from __future__ import annotations

import copy
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from ..data import blobs
from ..models import MLP, TwoInputNet, seeded
from . import kit
from .core import Exercise, Tester
from .predict import Prediction

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


def _nested_sigmoid_stack(depth: int, width: int = 16, *, seed: int) -> nn.Sequential:
    """``blocks.0.fc blocks.0.act ... blocks.N.fc blocks.N.act head``: the sigmoid stack with
    every Linear but ``head`` one level down, where ``named_children()`` does not look."""
    blocks: OrderedDict[str, nn.Module] = OrderedDict()
    with seeded(seed):
        for i in range(depth):
            blocks[str(i)] = nn.Sequential(OrderedDict([
                ("fc", nn.Linear(8 if i == 0 else width, width)), ("act", nn.Sigmoid())]))
        head = nn.Linear(width, 1)
    return nn.Sequential(OrderedDict([("blocks", nn.Sequential(blocks)), ("head", head)]))


class _Reordered(nn.Module):
    """Defines ``head``, ``mid``, ``stem`` in that order but runs ``stem`` first: the order of
    ``named_modules()`` is not the order of the forward (nor, reversed, of the backward)."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        with seeded(seed):
            self.head = nn.Linear(16, 1)
            self.mid = nn.Linear(16, 16)
            self.stem = nn.Linear(8, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.sigmoid(self.mid(torch.sigmoid(self.stem(x)))))


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


def _reference_norms(model: nn.Sequential, x: torch.Tensor) -> dict[str, float]:
    """Norm of d(model(x).sum())/d(output) of every Linear child, without any hook."""
    model = copy.deepcopy(model)
    outs: dict[str, torch.Tensor] = {}
    h = x
    for name, layer in model.named_children():
        h = layer.forward(h)
        if isinstance(layer, nn.Linear):
            h.retain_grad()
            outs[name] = h
    h.sum().backward()
    return {name: float(out.grad.norm()) for name, out in outs.items()}


# --------------------------------------------------------------------------------------
# 1. output_grad_norms
# --------------------------------------------------------------------------------------

def _output_grad_norms_solution(model: nn.Module, x: torch.Tensor) -> dict[str, float]:
    norms = {}
    handles = []

    def make_hook(name):
        def hook(module, grad_input, grad_output):
            norms[name] = grad_output[0].norm().item()
        return hook

    try:
        for name, module in model.named_modules():
            if isinstance(module, nn.Linear):
                handles.append(module.register_full_backward_hook(make_hook(name)))
        model(x).sum().backward()
    finally:
        for handle in handles:
            handle.remove()
    return norms


output_grad_norms = Exercise(
    "backward_hooks.output_grad_norms", "Gradient norm per layer",
    task=("write output_grad_norms(model, x) that puts a full backward hook on every nn.Linear "
          "of `model`, runs model(x).sum().backward() and returns a dict: the Linear's name -> "
          "the norm (a float) of the gradient with respect to that layer's output. Every hook "
          "must be removed afterwards, also when the model raises"),
    hints=[
        "Walk model.named_modules(), keep the nn.Linear ones, and attach "
        "module.register_full_backward_hook(hook) to each; keep every handle in a list.",
        "The hook is hook(module, grad_input, grad_output). The gradient with respect to the "
        "layer's output is grad_output[0]; grad_input is about the layer's input.",
        "Each hook needs to know its layer's name: build it in a small function make_hook(name) "
        "that returns the hook, then store norms[name] = grad_output[0].norm().item().",
        "Run the forward and backward in try: and remove every handle in finally:.",
    ],
    solution=_output_grad_norms_solution,
    errors={
        "'NoneType' object has no attribute": (
            "grad_input[0] is None for the first layer when x does not require grad. The gradient "
            "with respect to a layer's output is grad_output[0], which is always there."),
        "Cannot use both regular backward hooks and full backward hooks": (
            "a legacy register_backward_hook was attached to this module before; use only "
            "register_full_backward_hook."),
    },
)


def _check_norms(answer: Callable, t: Tester, model: nn.Sequential, x: torch.Tensor, what: str) -> None:
    expected = _linear_output_norms(model, x)
    with _quiet():
        got = answer(model, x)
    t.expect_type(got, dict, what=what, nudge="return the dict name -> norm that your hooks filled")
    names = sorted(str(k) for k in got)
    missing = [n for n in expected if n not in got]
    nested = missing and all("." in n for n in missing) and set(got) <= set(expected)
    t.expect(names == sorted(expected), what=f"the names in {what}", expected=sorted(expected), got=names,
             nudge=("the Linears inside submodules are missing: model.named_children() stops at the first "
                    "level, model.named_modules() goes into every submodule" if nested else
                    "one entry per nn.Linear, keyed by its name from model.named_modules()"))
    for name, value in expected.items():
        g = got[name]
        g = float(g) if isinstance(g, (float, int)) or (isinstance(g, torch.Tensor) and g.numel() == 1) else g
        ok = isinstance(g, float) and abs(g - value) <= 1e-4 * abs(value) + 1e-12
        t.expect(ok, what=f"{what}[{name!r}]", expected=round(value, 6) if value > 1e-4 else value,
                 got=g, nudge="store grad_output[0].norm().item(): grad_output[0] is the gradient "
                              "with respect to the layer's output (grad_input is about its input)")


@output_grad_norms.case("an MLP (fc1, fc2, head) whose input does not require grad")
def _(answer, t: Tester) -> None:
    model = t.track(MLP(seed=1), "the MLP")
    x, _ = blobs(16, seed=1)
    _check_norms(answer, t, model, x, "output_grad_norms(mlp, x)")


@output_grad_norms.case("a 6-layer sigmoid stack, where the norms shrink towards the input")
def _(answer, t: Tester) -> None:
    model = t.track(_sigmoid_stack(6, seed=4), "the sigmoid stack")
    x, _ = blobs(12, seed=4)
    _check_norms(answer, t, model, x, "output_grad_norms(stack, x)")


@output_grad_norms.case("the same model measured twice in a row")
def _(answer, t: Tester) -> None:
    model = t.track(MLP(seed=5), "the MLP")
    x, _ = blobs(8, seed=5)
    with _quiet():
        first = answer(model, x)
    _check_norms(answer, t, model, x, "the second output_grad_norms(mlp, x)")
    with _quiet():
        third = answer(model, x)
    t.expect(first == third, what="two calls on the same model", expected=first, got=third,
             nudge="start every call with a new dict and leave no hook behind")


@output_grad_norms.case("a nested model (Linears inside a submodule) on a 3-D input (N, T, features)")
def _(answer, t: Tester) -> None:
    model = t.track(kit.Nested(seed=3), "the nested model")
    x = kit.randn(2, 3, 4, seed=3)
    linears = _linears(model)
    with kit.HookWitness(linears) as witness:
        _check_norms(answer, t, model, x, "output_grad_norms(nested, x)")
    unhooked = [n for n in linears if witness.fired(n, "backward") == 0]
    t.expect(not unhooked, what="full backward hooks attached while the model ran", expected=list(linears),
             got=[n for n in linears if n not in unhooked],
             nudge="the numbers are right, but not from full backward hooks: the task is to read them in "
                   "hooks attached with module.register_full_backward_hook")


@output_grad_norms.case("a model that raises halfway through its forward: no hook may stay", hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(kit.Raising(seed=4), "the model that raises")
    with _quiet():
        kit.call_expecting_kit_error(answer, model, kit.randn(3, 4, seed=4))
    # the leak check after this case reports a hook that was not removed in a finally:


# Half-right answers (DIMENSIONS: nested, nd, repeat, raises, technique): reads grad_input;
# leaves the hooks on; late binding puts every norm under one name; walks named_children()
# (misses nested Linears); reads the norms from tensor hooks instead of full backward hooks;
# forgets to return the dict; removes the hooks without finally (hidden: the model raises).

@output_grad_norms.wrong("reads grad_input instead of grad_output", mentions="grad_output[0]")
def _uses_grad_input(model, x):
    norms, handles = {}, []
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            handles.append(module.register_full_backward_hook(
                lambda m, gi, go, name=name: norms.__setitem__(name, gi[0].norm().item())))
    try:
        model(x).sum().backward()
    finally:
        for h in handles:
            h.remove()
    return norms


@output_grad_norms.wrong("forgets to remove the hooks", mentions="still attached")
def _leaky_norms(model, x):
    norms = {}
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            module.register_full_backward_hook(
                lambda m, gi, go, name=name: norms.__setitem__(name, go[0].norm().item()))
    model(x).sum().backward()
    return norms


@output_grad_norms.wrong("uses one name for every hook (late binding in a loop)", mentions="one entry per")
def _late_binding(model, x):
    norms, handles = {}, []
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            handles.append(module.register_full_backward_hook(
                lambda m, gi, go: norms.__setitem__(name, go[0].norm().item())))
    try:
        model(x).sum().backward()
    finally:
        for h in handles:
            h.remove()
    return norms


@output_grad_norms.wrong("walks model.named_children(): misses nested Linears", mentions="named_modules()")
def _children_only(model, x):
    norms, handles = {}, []
    for name, module in model.named_children():
        if isinstance(module, nn.Linear):
            handles.append(module.register_full_backward_hook(
                lambda m, gi, go, name=name: norms.__setitem__(name, go[0].norm().item())))
    try:
        model(x).sum().backward()
    finally:
        for h in handles:
            h.remove()
    return norms


@output_grad_norms.wrong("reads the gradients with tensor hooks, not full backward hooks",
                         mentions="register_full_backward_hook")
def _tensor_hooks_instead(model, x):
    norms, handles = {}, []

    def on_output(name):
        def hook(module, args, output):
            output.register_hook(lambda g: norms.__setitem__(name, g.norm().item()))
        return hook

    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            handles.append(module.register_forward_hook(on_output(name)))
    try:
        model(x).sum().backward()
    finally:
        for h in handles:
            h.remove()
    return norms


@output_grad_norms.wrong("forgets to return the dict", mentions="None (nothing was returned)")
def _returns_nothing(model, x):
    _output_grad_norms_solution(model, x)


@output_grad_norms.wrong("removes the hooks after backward, not in a finally:", mentions="still attached",
                         hidden=True)
def _norms_no_finally(model, x):
    norms, handles = {}, []
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            handles.append(module.register_full_backward_hook(
                lambda m, gi, go, name=name: norms.__setitem__(name, go[0].norm().item())))
    model(x).sum().backward()
    for h in handles:
        h.remove()
    return norms


# --------------------------------------------------------------------------------------
# 2. clip_input_grad
# --------------------------------------------------------------------------------------

def _clip_input_grad_solution(layer: nn.Module, max_abs: float):
    def hook(module, grad_input, grad_output):
        return tuple(None if g is None else g.clamp(-max_abs, max_abs) for g in grad_input)
    return layer.register_full_backward_hook(hook)


clip_input_grad = Exercise(
    "backward_hooks.clip_input_grad", "Clip the gradient leaving a layer",
    task=("write clip_input_grad(layer, max_abs) that attaches a full backward hook to `layer` "
          "which clamps every entry of grad_input to [-max_abs, max_abs], and returns the hook's "
          "handle (the caller removes it). The layer's own parameter gradients must not change"),
    hints=[
        "A full backward hook that returns something replaces grad_input: return a tuple with one "
        "entry per entry of grad_input.",
        "grad_input holds None for an input that is not a tensor (and for every input when none "
        "requires grad): keep None as None, clamp the others with g.clamp(-max_abs, max_abs).",
        "Use register_full_backward_hook, not the legacy register_backward_hook: the legacy "
        "grad_input of a Linear also holds its bias and weight gradients.",
        "return layer.register_full_backward_hook(hook): the handle is what the caller removes.",
    ],
    solution=_clip_input_grad_solution,
    errors={
        "invalid number of grad_input": (
            "return a tuple with one entry per entry of grad_input, even when there is only one: "
            "a bare tensor is read as a sequence of its rows."),
        "has changed the size of value": (
            "return a tuple with one entry per entry of grad_input, even when there is only one: "
            "a bare tensor is read as a sequence of its rows."),
        "'NoneType' object has no attribute": (
            "grad_input holds None for inputs that are not tensors (or when no input requires "
            "grad): keep None entries as None and clamp only the tensors."),
        "Cannot use both regular backward hooks and full backward hooks": (
            "a legacy register_backward_hook was attached to this module before; use only "
            "register_full_backward_hook."),
    },
)


def _handle_of(answer: Callable, t: Tester, layer: nn.Module, max_abs: float):
    handle = answer(layer, max_abs)
    t.expect_type(handle, RemovableHandle, what="clip_input_grad(layer, max_abs)",
                  nudge="return the handle that register_full_backward_hook gave you, so that the caller "
                        "can remove the hook")
    return handle


@clip_input_grad.case("fc2 of an MLP: fc1 gets the clipped gradient, fc2's own gradients stay")
def _(answer, t: Tester) -> None:
    model = t.track(MLP(seed=2), "the MLP")
    reference = copy.deepcopy(model)
    x, _ = blobs(16, seed=2)
    limit = 0.05
    # reference: clamp the gradient of fc2's input (act1's output) with a tensor hook
    hidden = reference.act1(reference.fc1(x))
    hidden.register_hook(lambda g: g.clamp(-limit, limit))
    reference.head(reference.act2(reference.fc2(hidden))).sum().backward()
    upper_only = copy.deepcopy(model)  # what clamp(max=max_abs) alone gives
    hidden_u = upper_only.act1(upper_only.fc1(x))
    hidden_u.register_hook(lambda g: g.clamp(max=limit))
    upper_only.head(upper_only.act2(upper_only.fc2(hidden_u))).sum().backward()
    with _quiet():
        handle = _handle_of(answer, t, model.fc2, limit)
        try:
            model(x).sum().backward()
        finally:
            handle.remove()
    t.expect_type(model.fc1.weight.grad, torch.Tensor, what="model.fc1.weight.grad",
                  nudge="no gradient reached fc1: return the clamped grad_input (a detach() or a None "
                        "where a tensor was cuts the backward pass)")
    t.expect_close(model.fc2.weight.grad, reference.fc2.weight.grad, what="model.fc2.weight.grad",
                   nudge="the hooked layer's own weight gradient changed. Change only grad_input, in a "
                         "full backward hook: the legacy register_backward_hook's grad_input also holds "
                         "the layer's bias and weight gradients")
    t.expect_close(model.fc1.weight.grad, reference.fc1.weight.grad, what="model.fc1.weight.grad",
                   nudge="the layers before fc2 must receive grad_input clamped to [-max_abs, max_abs]: "
                         "return the clamped tuple from the hook",
                   wrong={"upper only": (upper_only.fc1.weight.grad, (
                       "only the upper side was clamped: the negative entries must be clamped to -max_abs "
                       "too, g.clamp(-max_abs, max_abs)"))})


@clip_input_grad.case("a module with two tensor inputs a and b, both requiring grad", hidden=True)
def _(answer, t: Tester) -> None:
    net = t.track(TwoInputNet(3, seed=3), "the TwoInputNet")
    a = torch.linspace(-2, 2, 6).reshape(2, 3).requires_grad_()
    b = torch.ones(2, 3, requires_grad=True)
    net(a, b, scale=5.0).sum().backward()
    want_a, want_b = a.grad.clamp(-1.0, 1.0), b.grad.clamp(-1.0, 1.0)
    a.grad = b.grad = None
    with _quiet():
        handle = _handle_of(answer, t, net, 1.0)
        try:
            net(a, b, scale=5.0).sum().backward()
        finally:
            handle.remove()
    t.expect_close(a.grad, want_a, what="a.grad", nudge="clamp grad_input[0] too")
    t.expect_close(b.grad, want_b, what="b.grad",
                   nudge="grad_input has one entry per positional tensor input, and b's gradient came "
                         "through unclamped: clamp every entry of grad_input, not just grad_input[0]")


@clip_input_grad.case("a Linear called twice in one forward: both calls clip", hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(kit.Twice(seed=5), "the model that calls its block twice")
    limit = 0.02
    x = kit.randn(3, 4, seed=5).requires_grad_()
    # reference: clamp the gradient of each call's input with tensor hooks, no module hook
    a = x.detach().clone().requires_grad_()
    a.register_hook(lambda g: g.clamp(-limit, limit))
    inner = torch.tanh(model.block.forward(a))
    inner.register_hook(lambda g: g.clamp(-limit, limit))
    model.out.forward(model.block.forward(inner)).sum().backward()
    want_x, want_w = a.grad.clone(), model.block.weight.grad.clone()
    model.zero_grad(set_to_none=True)
    with _quiet():
        handle = _handle_of(answer, t, model.block, limit)
        try:
            model(x).sum().backward()
        finally:
            handle.remove()
    t.expect_close(x.grad, want_x, what="x.grad",
                   nudge="the hook fires once per call of the layer: clamp grad_input every time")
    t.expect_close(model.block.weight.grad, want_w, what="model.block.weight.grad",
                   nudge="the gradient between the two calls must be clamped too (the hook fires for the "
                         "second call first), and the layer's own weight gradient comes from those values")


@clip_input_grad.case("the last conv of a small CNN, on 4-D tensors (N, C, H, W)")
def _(answer, t: Tester) -> None:
    model = t.track(kit.conv_model(4, seed=6), "the small CNN")
    reference = copy.deepcopy(model)
    x = kit.conv_input(4, seed=6)
    limit = 0.05
    hidden = reference[1](reference[0](x))
    hidden.register_hook(lambda g: g.clamp(-limit, limit))
    reference[2](hidden).sum().backward()
    with _quiet():
        handle = _handle_of(answer, t, model[2], limit)
        try:
            model(x).sum().backward()
        finally:
            handle.remove()
    t.expect_type(model[0].weight.grad, torch.Tensor, what="model[0].weight.grad",
                  nudge="no gradient reached the first conv: return the clamped grad_input")
    t.expect_close(model[0].weight.grad, reference[0].weight.grad, what="model[0].weight.grad",
                   nudge="the layers before the hooked conv must receive grad_input clamped entry by entry; "
                         "clamp works on tensors of any shape")
    t.expect_close(model[2].weight.grad, reference[2].weight.grad, what="model[2].weight.grad",
                   nudge="the hooked layer's own weight gradient must stay as it was: change only grad_input")


@clip_input_grad.case("the same module called with b = 0.5, a Python float")
def _(answer, t: Tester) -> None:
    net = t.track(TwoInputNet(3, seed=3), "the TwoInputNet")
    a = torch.linspace(-2, 2, 6).reshape(2, 3).requires_grad_()
    net(a, 0.5, scale=5.0).sum().backward()
    want = a.grad.clamp(-1.0, 1.0)
    a.grad = None
    with _quiet():
        handle = _handle_of(answer, t, net, 1.0)
        try:
            net(a, 0.5, scale=5.0).sum().backward()
        finally:
            handle.remove()
    t.expect_close(a.grad, want, what="a.grad",
                   nudge="grad_input is (gradient for a, None): clamp the tensor, keep the None")


@clip_input_grad.case("the first layer, whose input does not require grad")
def _(answer, t: Tester) -> None:
    model = t.track(MLP(seed=6), "the MLP")
    x, _ = blobs(8, seed=6)
    model(x).sum().backward()
    want = model.fc1.weight.grad.clone()
    model.zero_grad()
    with _quiet():
        handle = _handle_of(answer, t, model.fc1, 0.01)
        try:
            model(x).sum().backward()
        finally:
            handle.remove()
    t.expect_close(model.fc1.weight.grad, want, what="model.fc1.weight.grad",
                   nudge="here grad_input is (None,): return (None,) or the tuple unchanged")


# Half-right answers (DIMENSIONS: nd, twice, technique): returns a bare tensor; uses the legacy
# register_backward_hook (it clips the layer's own weight gradient); clamps None entries; clamps
# only the upper side; forgets to return the handle; clamps only grad_input[0] (hidden: a module
# with two tensor inputs).

@clip_input_grad.wrong("returns a tensor instead of a tuple", mentions="tuple")
def _bare_tensor(layer, max_abs):
    def hook(module, grad_input, grad_output):
        return grad_input[0].clamp(-max_abs, max_abs)
    return layer.register_full_backward_hook(hook)


@clip_input_grad.wrong("uses the legacy register_backward_hook", mentions="legacy")
def _legacy(layer, max_abs):
    def hook(module, grad_input, grad_output):
        return tuple(None if g is None else g.clamp(-max_abs, max_abs) for g in grad_input)
    return layer.register_backward_hook(hook)


@clip_input_grad.wrong("clamps None entries too", mentions="keep None")
def _forgets_none(layer, max_abs):
    def hook(module, grad_input, grad_output):
        return tuple(g.clamp(-max_abs, max_abs) for g in grad_input)
    return layer.register_full_backward_hook(hook)


@clip_input_grad.wrong("clamps only the upper side: clamp(max=max_abs)", mentions="negative entries")
def _upper_only(layer, max_abs):
    def hook(module, grad_input, grad_output):
        return tuple(None if g is None else g.clamp(max=max_abs) for g in grad_input)
    return layer.register_full_backward_hook(hook)


@clip_input_grad.wrong("attaches the hook but forgets to return the handle", mentions="None (nothing was returned)")
def _no_handle(layer, max_abs):
    def hook(module, grad_input, grad_output):
        return tuple(None if g is None else g.clamp(-max_abs, max_abs) for g in grad_input)
    layer.register_full_backward_hook(hook)


@clip_input_grad.wrong("clamps only grad_input[0]", mentions="not just grad_input[0]", hidden=True)
def _first_only(layer, max_abs):
    def hook(module, grad_input, grad_output):
        first = None if grad_input[0] is None else grad_input[0].clamp(-max_abs, max_abs)
        return (first,) + tuple(grad_input[1:])
    return layer.register_full_backward_hook(hook)


# --------------------------------------------------------------------------------------
# 3. first_vanishing_layer
# --------------------------------------------------------------------------------------

def _first_vanishing_layer_solution(model: nn.Module, x: torch.Tensor, threshold: float) -> str | None:
    fired = []  # (name, norm) in firing order: backward runs from the output to the input
    handles = []
    try:
        for name, module in model.named_modules():
            if isinstance(module, nn.Linear):
                handles.append(module.register_full_backward_hook(
                    lambda m, gi, go, name=name: fired.append((name, go[0].norm().item()))))
        model(x).sum().backward()
    finally:
        for handle in handles:
            handle.remove()
    for name, norm in fired:
        if norm < threshold:
            return name
    return None


first_vanishing_layer = Exercise(
    "backward_hooks.first_vanishing_layer", "Find where the gradient vanishes",
    task=("write first_vanishing_layer(model, x, threshold) that runs model(x).sum().backward() "
          "with full backward hooks on every nn.Linear and returns the name of the first Linear, "
          "walking from the output towards the input, whose output gradient has a norm below "
          "`threshold` (None if there is none). Every hook must be removed afterwards, also when the "
          "model raises"),
    hints=[
        "Record (name, grad_output[0].norm().item()) in each Linear's full backward hook.",
        "Backward hooks fire from the output towards the input, so a list appended in the hooks "
        "is already in the order you need.",
        "Return the first recorded name whose norm is below the threshold, or None; remove the "
        "handles in a finally: block.",
    ],
    solution=_first_vanishing_layer_solution,
    errors={"'NoneType' object has no attribute": (
        "grad_input[0] is None for the first layer when x does not require grad; measure "
        "grad_output[0], the gradient with respect to the layer's output.")},
)


def _check_vanishing(answer: Callable, t: Tester, model: nn.Sequential, x: torch.Tensor,
                     threshold: float, expected: str | None, what: str) -> None:
    with _quiet():
        got = answer(model, x, threshold)
    t.expect_type(got, (str, type(None)), what=what,
                  nudge="return only the layer's name (or None), not its norm or the module")
    nested = (isinstance(expected, str) and "." in expected and got is None
              or isinstance(got, str) and "." not in got and isinstance(expected, str) and "." in expected)
    t.expect(not nested or got == expected, what=what, expected=expected, got=got,
             nudge="the Linears inside submodules were not measured: model.named_children() stops at the "
                   "first level, model.named_modules() goes into every submodule")
    t.expect(got == expected, what=what, expected=expected, got=got,
             nudge=("walk from the output towards the input and stop at the first Linear whose "
                    "grad_output[0] norm is below the threshold (backward hooks fire in that order)"
                    if expected is not None else
                    "no Linear is below this threshold: return None"))


@first_vanishing_layer.case("an 8-layer sigmoid stack where fc1 to fc4 are below the threshold")
def _(answer, t: Tester) -> None:
    model = t.track(_sigmoid_stack(8, seed=0), "the sigmoid stack")
    x, _ = blobs(32, seed=0)
    norms = _reference_norms(model, x)
    threshold = (norms["fc4"] * norms["fc5"]) ** 0.5
    _check_vanishing(answer, t, model, x, threshold, "fc4", "first_vanishing_layer(stack, x, threshold)")


@first_vanishing_layer.case("a threshold below every norm")
def _(answer, t: Tester) -> None:
    model = t.track(_sigmoid_stack(5, seed=7), "the sigmoid stack")
    x, _ = blobs(16, seed=7)
    threshold = min(_reference_norms(model, x).values()) / 10
    _check_vanishing(answer, t, model, x, threshold, None, "first_vanishing_layer(stack, x, tiny)")


@first_vanishing_layer.case("an MLP and a threshold above every norm: the output layer itself")
def _(answer, t: Tester) -> None:
    model = t.track(MLP(seed=8), "the MLP")
    x, _ = blobs(16, seed=8)
    threshold = max(_reference_norms(model, x).values()) * 10
    _check_vanishing(answer, t, model, x, threshold, "head", "first_vanishing_layer(mlp, x, huge)")


@first_vanishing_layer.case("a nested sigmoid stack (Linears inside blocks) on a 3-D input")
def _(answer, t: Tester) -> None:
    model = t.track(_nested_sigmoid_stack(6, seed=2), "the nested sigmoid stack")
    x = blobs(12, seed=2)[0].reshape(4, 3, 8)
    norms = _linear_output_norms(model, x)
    threshold = (norms["blocks.2.fc"] * norms["blocks.3.fc"]) ** 0.5
    _check_vanishing(answer, t, model, x, threshold, "blocks.2.fc",
                     "first_vanishing_layer(nested stack, x, threshold)")


@first_vanishing_layer.case("a model that defines head, mid, stem but runs stem, mid, head", hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(_Reordered(seed=9), "the reordered model")
    x, _ = blobs(16, seed=9)
    norms = _linear_output_norms(model, x)
    threshold = (norms["mid"] * norms["head"]) ** 0.5
    with _quiet():
        got = answer(model, x, threshold)
    t.expect(got == "mid", what="first_vanishing_layer(reordered model, x, threshold)", expected="mid",
             got=got, nudge="the order of model.named_modules() (the order the layers were defined in) is "
                            "not the order of the backward pass: record the names in the order your hooks "
                            "fire, which is from the output towards the input")


@first_vanishing_layer.case("a model that raises halfway through its forward: no hook may stay", hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(kit.Raising(seed=10), "the model that raises")
    with _quiet():
        kit.call_expecting_kit_error(answer, model, kit.randn(3, 4, seed=10), 0.1)


# Half-right answers (DIMENSIONS: nested, nd, raises, technique): scans from the input; leaves
# the hooks on; walks named_children() (misses nested Linears); returns (name, norm) instead of
# the name; measures grad_input; walks reversed(named_modules()) instead of the firing order
# (hidden: a model defined in another order than it runs).

@first_vanishing_layer.wrong("scans from the input instead of from the output", mentions="from the output")
def _from_input(model, x, threshold):
    norms, handles = {}, []
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            handles.append(module.register_full_backward_hook(
                lambda m, gi, go, name=name: norms.__setitem__(name, go[0].norm().item())))
    try:
        model(x).sum().backward()
    finally:
        for h in handles:
            h.remove()
    names = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]  # input -> output
    return next((n for n in names if norms[n] < threshold), None)


@first_vanishing_layer.wrong("forgets to remove the hooks", mentions="still attached")
def _leaky_vanishing(model, x, threshold):
    fired = []
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            module.register_full_backward_hook(
                lambda m, gi, go, name=name: fired.append((name, go[0].norm().item())))
    model(x).sum().backward()
    return next((n for n, v in fired if v < threshold), None)


@first_vanishing_layer.wrong("walks model.named_children(): misses nested Linears", mentions="named_modules()")
def _vanishing_children(model, x, threshold):
    fired, handles = [], []
    for name, module in model.named_children():
        if isinstance(module, nn.Linear):
            handles.append(module.register_full_backward_hook(
                lambda m, gi, go, name=name: fired.append((name, go[0].norm().item()))))
    try:
        model(x).sum().backward()
    finally:
        for h in handles:
            h.remove()
    return next((n for n, v in fired if v < threshold), None)


@first_vanishing_layer.wrong("returns (name, norm) instead of the name", mentions="only the layer's name")
def _name_and_norm(model, x, threshold):
    fired, handles = [], []
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            handles.append(module.register_full_backward_hook(
                lambda m, gi, go, name=name: fired.append((name, go[0].norm().item()))))
    try:
        model(x).sum().backward()
    finally:
        for h in handles:
            h.remove()
    return next(((n, v) for n, v in fired if v < threshold), None)


@first_vanishing_layer.wrong("measures grad_input[0] instead of grad_output[0]", mentions="grad_output[0]")
def _vanishing_grad_input(model, x, threshold):
    fired, handles = [], []
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            handles.append(module.register_full_backward_hook(
                lambda m, gi, go, name=name: fired.append((name, gi[0].norm().item()))))
    try:
        model(x).sum().backward()
    finally:
        for h in handles:
            h.remove()
    return next((n for n, v in fired if v < threshold), None)


@first_vanishing_layer.wrong("walks reversed(named_modules()) instead of the order the hooks fire",
                             mentions="order your hooks fire", hidden=True)
def _reversed_definition_order(model, x, threshold):
    norms, handles = {}, []
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            handles.append(module.register_full_backward_hook(
                lambda m, gi, go, name=name: norms.__setitem__(name, go[0].norm().item())))
    try:
        model(x).sum().backward()
    finally:
        for h in handles:
            h.remove()
    names = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    return next((n for n in reversed(names) if norms[n] < threshold), None)


# -- predict, then run -----------------------------------------------------------------------

def _observe_zeroed_grad_input() -> dict[str, str]:
    """A full backward hook on an MLP's fc2 returns grad_input * 0: which weight gradients change?"""
    x, y = blobs(8, seed=0)

    def weight_grads(hooked: bool) -> dict[str, torch.Tensor]:
        model = MLP(seed=0)
        handle = model.fc2.register_full_backward_hook(
            lambda module, grad_input, grad_output: tuple(g * 0 for g in grad_input)) if hooked else None
        try:
            nn.functional.cross_entropy(model(x), y).backward()
        finally:
            if handle is not None:
                handle.remove()
        return {f"{name}.weight.grad": model.get_submodule(name).weight.grad for name in ("fc1", "fc2", "head")}

    plain, hooked = weight_grads(False), weight_grads(True)
    return {key: "unchanged" if torch.equal(hooked[key], plain[key]) else
            "zero" if not hooked[key].any() else "changed" for key in plain}


zeroed_grad_input = Prediction(
    "backward_hooks.zeroed_grad_input", "Predict: a full backward hook that zeroes grad_input",
    task=("a dict with the keys 'fc1.weight.grad', 'fc2.weight.grad', 'head.weight.grad', each "
          "'zero', 'unchanged' or 'changed' (against the same backward without the hook)"),
    answer_name="predict_grads",
    observe=_observe_zeroed_grad_input,
    choices=("zero", "unchanged", "changed"),
    hints=["grad_input of a full backward hook is the gradient with respect to the module's input: "
           "what flows on towards the layers before it.",
           "Backward runs from the loss towards the input: head first, then fc2, then fc1."],
    explain={
        "fc1.weight.grad": "the returned grad_input is what flows on to the layers before fc2: zeros "
                           "reach act1 and fc1, so fc1's weight gets a zero gradient.",
        "fc2.weight.grad": "a full backward hook's grad_input holds only the gradient for the module's "
                           "input, never for its own parameters: fc2.weight.grad is computed from "
                           "grad_output and stays as it was (the legacy hook is the one that could zero it).",
        "head.weight.grad": "head comes after fc2: its gradient was computed before backward reached fc2.",
    },
    summary="replacing grad_input changes every layer before the module, never the module's own "
            "parameters or the layers after it.",
)
zeroed_grad_input.wrong("the module's own weights zeroed too",
                        {"fc1.weight.grad": "zero", "fc2.weight.grad": "zero", "head.weight.grad": "unchanged"},
                        "only the gradient for the module's")
zeroed_grad_input.wrong("the return value is ignored",
                        {"fc1.weight.grad": "unchanged", "fc2.weight.grad": "unchanged",
                         "head.weight.grad": "unchanged"}, "zeros reach act1 and fc1")
zeroed_grad_input.wrong("everything zero",
                        {"fc1.weight.grad": "zero", "fc2.weight.grad": "zero", "head.weight.grad": "zero"},
                        "head comes after fc2")
