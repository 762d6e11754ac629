"""01_tensor_hooks, exercise: tensor_hooks.grad_norms."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ...inventory import hook_ids
from .. import kit
from ..core import Exercise, Tester
from ._shared import _mlp_problem


def grad_norms(tensors, loss):
    """Run loss.backward() once; return {name: norm of the gradient that reached tensors[name]}."""
    ### BEGIN SOLUTION
    norms = {}
    handles = []

    def recorder(name):
        def hook(grad):
            norms[name] = grad.norm().item()
        return hook

    try:
        for name, tensor in tensors.items():
            handles.append(tensor.register_hook(recorder(name)))
        loss.backward()
    finally:
        for handle in handles:
            handle.remove()
    return norms
    ### END SOLUTION


def _tensor_hook_count(t: torch.Tensor) -> int:
    """How many hooks are attached to ``t`` (tensor and post-accumulate-grad hooks)."""
    return len(hook_ids(t, "tensor")) + len(hook_ids(t, "post_accumulate"))


exercise = Exercise(
    "tensor_hooks.grad_norms", "Record gradient norms in one backward",
    task=("write grad_norms(tensors, loss): `tensors` maps names to tensors that `loss` depends on "
          "(intermediate results or parameters). Run loss.backward() once and return a dict "
          "name -> float, the norm of the gradient that reached each tensor in this backward. Use "
          "one tensor hook per tensor, and remove every hook before returning"),
    hints=[
        "Make an empty dict norms and a list handles. For each (name, tensor), register a hook that "
        "stores grad.norm().item() in norms[name] and returns None.",
        "A lambda or def made inside a for loop sees the loop variable's *last* value when it runs. "
        "Build each hook in a helper function recorder(name), or bind it: lambda g, name=name: ...",
        "Call loss.backward() inside try:, and remove every handle in the finally: block.",
    ],
    solution=grad_norms,
    errors={
        "expected Variable, but hook returned": (
            "your hook returned the norm. A tensor hook returns a new gradient or None: store the "
            "norm in your dict and return nothing."),
        "backward through the graph a second time": (
            "call loss.backward() exactly once, after registering every hook."),
    },
    guide="""a `lambda` made in a loop sees the loop variable's last value, so every hook writes under
    the same name (bind it: `lambda g, name=name: ...`); hooks never removed, or removed
    after `backward()` but not in a `finally:` (a failing backward leaves them on); reading
    `.grad` after backward instead of the gradient the hook receives (a leaf's `.grad`
    accumulates over backwards, an intermediate tensor has none); returning the norm from
    the hook (store it, return nothing).""",
)


def _expect_norms(t: Tester, got, expected: dict[str, float], nudge: str) -> None:
    t.expect_type(got, dict, what="what grad_norms returned", nudge="return the dict name -> norm")
    if isinstance(got, dict) and len(expected) > 1 and len(got) == 1 and set(got) <= set(expected):
        t.expect(False, what="the names in your dict", expected=sorted(expected), got=sorted(got), nudge=(
            "every hook wrote under the same name: a function made in a loop sees the loop "
            "variable's last value when it runs. Bind the name when you make the hook "
            "(recorder(name), or lambda g, name=name: ...)"))
    t.expect(isinstance(got, dict) and set(got) == set(expected), what="the names in your dict",
             expected=sorted(expected), got=sorted(got) if isinstance(got, dict) else got,
             nudge="return a dict with one entry per name of `tensors`")
    for name, value in expected.items():
        norm = got[name]
        if isinstance(norm, torch.Tensor) and norm.numel() == 1:
            norm = norm.item()  # a 0-dim tensor is fine too
        t.expect(isinstance(norm, (int, float)), what=f"the norm recorded for {name!r}", expected="a float",
                 got=norm, nudge="store one number per tensor: grad.norm().item()")
        t.expect(abs(float(norm) - value) <= 1e-4 * max(1.0, value), what=f"the norm recorded for {name!r}",
                 expected=round(value, 5), got=norm, nudge=nudge)


def _expect_no_hooks(t: Tester, tensors: dict) -> None:
    for name, tensor in tensors.items():
        n = _tensor_hook_count(tensor)
        t.expect(n == 0, what=f"hooks left on {name!r}", expected=0, got=n, nudge=(
            f"after grad_norms returned, a hook was still attached to {name!r}. Keep every handle "
            "and call handle.remove() in a finally: block"))


@exercise.case("the outputs of fc1 and fc2 of an MLP")
def _(answer, t: Tester) -> None:
    model, x, y = _mlp_problem(3)
    out, inter = model.forward_with_intermediates(x)   # reference: the same graph again
    names = ["fc1", "fc2"]
    ref = torch.autograd.grad(F.cross_entropy(out, y), [inter[n] for n in names])
    expected = {n: g.norm().item() for n, g in zip(names, ref)}
    out, inter = model.forward_with_intermediates(x)
    tensors = {n: inter[n] for n in names}
    got = answer(tensors, F.cross_entropy(out, y))
    _expect_no_hooks(t, tensors)
    _expect_norms(t, got, expected, "record grad.norm().item() for the gradient your hook receives")


@exercise.case("a weight whose .grad already holds an earlier gradient, and an intermediate output")
def _(answer, t: Tester) -> None:
    model, x, y = _mlp_problem(4)
    t.track(model, "the MLP")
    F.cross_entropy(model(x), y).backward()   # fc1.weight.grad now holds a first gradient
    out, inter = model.forward_with_intermediates(x)
    ref = torch.autograd.grad(F.cross_entropy(out, y), [model.fc1.weight, inter["act2"]])
    expected = {"fc1.weight": ref[0].norm().item(), "act2": ref[1].norm().item()}
    out, inter = model.forward_with_intermediates(x)
    tensors = {"fc1.weight": model.fc1.weight, "act2": inter["act2"]}
    got = answer(tensors, F.cross_entropy(out, y))
    _expect_no_hooks(t, tensors)
    _expect_norms(t, got, expected, (
        "record the gradient of *this* backward, as the hook receives it. A leaf's .grad accumulates "
        "over backwards (here it holds two gradients), and a non-leaf has no .grad at all"))


@exercise.case("a tensor used twice in the loss")
def _(answer, t: Tester) -> None:
    x = torch.tensor([1.0, 2.0, 2.0], requires_grad=True)
    h = x * 1.0
    loss = (h * 2).sum() + (h * 4).sum()   # dloss/dh = 2 + 4 = 6 everywhere: norm 6 * sqrt(3)
    got = answer({"h": h}, loss)
    _expect_no_hooks(t, {"h": h})
    _expect_norms(t, got, {"h": 6.0 * 3 ** 0.5}, (
        "a tensor used twice fires its hook once, with the summed gradient: record that one value"))


@exercise.case("a loss whose backward fails: the hooks must still go")
def _(answer, t: Tester) -> None:
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    h = x * 2
    loss = (h ** 2).sum()
    loss.backward()   # the graph is freed: a second backward of `loss` raises
    try:
        answer({"h": h}, loss)
    except RuntimeError:
        pass   # the error may reach the caller; the hooks must not stay behind
    n = _tensor_hook_count(h)
    t.expect(n == 0, what="hooks left on 'h' after a failed backward", expected=0, got=n, nudge=(
        "loss.backward() raised, and your hook stayed attached. Register the hooks and call "
        "backward inside try:, and remove every handle in the finally: block"))


@exercise.case("conv activations (4-D) and a conv weight: hooks fire and backward() fills .grad",
                 hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(kit.conv_model(4, seed=8), "a small conv net")
    x = kit.conv_input(4, seed=8)
    h = model[0](x)
    ref_h, ref_w = torch.autograd.grad(model[2](model[1](h)).pow(2).mean(), [h, model[0].weight])
    h = model[0](x)
    loss = model[2](model[1](h)).pow(2).mean()
    tensors = {"conv0 output": h, "conv0.weight": model[0].weight}
    with kit.TensorHookWitness(tensors) as hooks, kit.GradWitness({"conv0.weight": model[0].weight}) as grads:
        got = answer(tensors, loss)
    t.expect(grads.accumulated["conv0.weight"] > 0, what="conv0.weight.grad after grad_norms",
             expected="filled by loss.backward()", got="not accumulated", nudge=(
                 "loss.backward() did not run: the task asks for one loss.backward() with a tensor "
                 "hook per tensor (torch.autograd.grad returns gradients without filling .grad)"))
    t.expect(hooks.fired("conv0 output") > 0, what="hooks on the conv output during backward",
             expected="your tensor hook", got="none", nudge=(
                 "record each norm with a tensor hook, tensor.register_hook(...), attached before "
                 "loss.backward()"))
    _expect_no_hooks(t, tensors)
    _expect_norms(t, got, {"conv0 output": ref_h.norm().item(), "conv0.weight": ref_w.norm().item()},
                  "record grad.norm().item() for the whole 4-D gradient your hook receives")


@exercise.wrong("uses torch.autograd.grad instead of hooks and backward()", mentions="loss.backward() did not run",
                  hidden=True)
def _autograd_grad(tensors, loss):
    grads = torch.autograd.grad(loss, list(tensors.values()))
    return {name: g.norm().item() for name, g in zip(tensors, grads)}


@exercise.wrong("a lambda in the loop captures the loop variable late", mentions="last value")
def _late_binding(tensors, loss):
    norms, handles = {}, []
    for name, tensor in tensors.items():
        handles.append(tensor.register_hook(lambda g: norms.__setitem__(name, g.norm().item())))
    loss.backward()
    for h in handles:
        h.remove()
    return norms


@exercise.wrong("never removes its hooks", mentions="still attached")
def _leaky(tensors, loss):
    norms = {}
    for name, tensor in tensors.items():
        tensor.register_hook(lambda g, name=name: norms.__setitem__(name, g.norm().item()))
    loss.backward()
    return norms


@exercise.wrong("removes its hooks, but not in a finally block", mentions="finally")
def _no_finally(tensors, loss):
    norms, handles = {}, []
    for name, tensor in tensors.items():
        handles.append(tensor.register_hook(lambda g, name=name: norms.__setitem__(name, g.norm().item())))
    loss.backward()
    for h in handles:
        h.remove()
    return norms


@exercise.wrong("reads .grad after backward (retain_grad)", mentions="accumulates")
def _reads_grad(tensors, loss):
    for tensor in tensors.values():
        if not tensor.is_leaf:
            tensor.retain_grad()
    loss.backward()
    return {name: tensor.grad.norm().item() for name, tensor in tensors.items()}


@exercise.wrong("returns the norm from the hook", mentions="return nothing")
def _returns_norm(tensors, loss):
    norms, handles = {}, []
    for name, tensor in tensors.items():
        handles.append(tensor.register_hook(lambda g, name=name: norms.setdefault(name, g.norm().item())))
    try:
        loss.backward()
    finally:
        for h in handles:
            h.remove()
    return norms
