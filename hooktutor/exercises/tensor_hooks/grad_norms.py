"""01_tensor_hooks, exercise: record the norm of the gradient that reaches each of several tensors.

Half-right answers an examiner expects, by kit dimension (``kit.DIMENSIONS``):

- technique: reads ``.grad`` after backward (``retain_grad``): a leaf's ``.grad`` accumulates over
  backwards and a non-leaf has none; or computes the gradients with ``torch.autograd.grad``, so no
  hook fires and no ``.grad`` is filled; or resets the leaves' ``.grad`` first to read it after;
- raises: removes the hooks after ``loss.backward()`` but not in ``finally:`` (a backward that
  fails leaves them on), or never;
- left_as_found: "removes" the hooks by clearing ``tensor._backward_hooks`` (the caller's own hooks
  go too); runs ``loss.backward(inputs=...)``, so the other parameters get no gradient; calls
  ``retain_grad()`` on the caller's intermediate tensors "to be safe" (their ``.grad`` stays filled,
  for good);
- alias: one tensor under two names: one hook per distinct tensor keeps the first name only;
- order: collects the norms in a list and pairs them with the names by position (backward fires
  the hooks in its own order, not in the dict's);
- twice: a tensor used twice in the loss fires its hook once, with the summed gradient;
- nd: conv activations (4-D): the norm of the whole gradient;
- repeat: the dict lives outside the function (a second call returns stale names);
- closures: a lambda made in a loop sees the loop variable's last value, so every hook writes
  under the same name; a hook that returns the norm (torch refuses it); a hook that stores
  ``grad.norm()``, a 0-dim tensor, instead of the float the task asks for;
- technique, again: hooks on the intermediate tensors only, and for a parameter ``.grad`` after
  backward minus ``.grad`` before: right on a plain backward, wrong (or a crash) once something
  else changes ``.grad`` during backward, such as the post-accumulate SGD step of section 11.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

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


exercise = Exercise(
    "tensor_hooks.grad_norms", "Record gradient norms in one backward",
    task=("write grad_norms(tensors, loss): `tensors` maps names to tensors that `loss` depends on "
          "(intermediate results or parameters). Run loss.backward() once and return a dict "
          "name -> float, the norm of the gradient that reached each tensor in this backward (one "
          "call of its hook: the loss has no reentrant checkpoint, section 7). Use "
          "one tensor hook per name (one tensor may come under two names), and remove every hook you "
          "added before returning; the caller's own hooks and its parameters' .grad are left to it: "
          "loss.backward() accumulates as usual"),
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
    the hook (store it, return nothing). The check also catches answers that clear
    `tensor._backward_hooks` (the caller's own hooks go too), that reset a leaf's `.grad` to read
    it afterwards or run `loss.backward(inputs=...)` (the caller's accumulated gradients change),
    that keep one hook per distinct tensor (one tensor under two names loses a name), and that
    collect the norms in a list and pair them with the names by order (backward runs in its own
    order, not the dict's), that store `grad.norm()` (a 0-dim tensor, not a float), and that hook
    only the intermediate tensors and take a parameter's norm from `.grad` after minus before
    (wrong once a post-accumulate hook changes `.grad` during backward), and that record in hooks
    but also call `retain_grad()` on the caller's intermediate tensors (their `.grad` stays filled,
    and retain_grad cannot be undone).""",
)


def _expect_norms(t: Tester, got, expected: dict[str, float], nudge: str) -> None:
    """``expected`` in the order of the ``tensors`` given: a late-bound loop variable leaves only the last name."""
    t.expect_type(got, dict, what="what grad_norms returned", nudge="return the dict name -> norm")
    if isinstance(got, dict) and len(expected) > 1 and list(got) == list(expected)[-1:]:
        t.expect(False, what="the names in your dict", expected=sorted(expected), got=sorted(got), nudge=(
            "every hook wrote under the same name: a function made in a loop sees the loop "
            "variable's last value when it runs. Bind the name when you make the hook "
            "(recorder(name), or lambda g, name=name: ...)"))
    t.expect(isinstance(got, dict) and set(got) == set(expected), what="the names in your dict",
             expected=sorted(expected), got=sorted(got) if isinstance(got, dict) else got,
             nudge="return a dict with one entry per name of `tensors` (one tensor may come under two "
                   "names: register one hook per name)")
    for name, value in expected.items():
        norm = got[name]
        t.expect(isinstance(norm, (int, float)) and not isinstance(norm, bool),
                 what=f"the norm recorded for {name!r}", expected="a float", got=norm, nudge=(
                     "store a Python float per name, grad.norm().item(): grad.norm() is a 0-dim "
                     "tensor, not the number the task asks for"))
        t.expect(abs(float(norm) - value) <= 1e-4 * max(1.0, value), what=f"the norm recorded for {name!r}",
                 expected=round(value, 5), got=norm, nudge=nudge)


def _expect_no_hooks(t: Tester, tensors: dict, before: dict[str, int] | None = None) -> None:
    for name, tensor in tensors.items():
        n, was = kit.hook_count(tensor), (before or {}).get(name, 0)
        t.expect(n <= was, what=f"hooks left on {name!r}", expected=was, got=n, nudge=(
            f"after grad_norms returned, a hook was still attached to {name!r}. Keep every handle "
            "and call handle.remove() in a finally: block"))
        t.expect(n == was, what=f"hooks on {name!r} after grad_norms", expected=was, got=n, nudge=(
            f"the caller's own hook on {name!r} is gone: remove only the hooks you added, with their "
            "handles (never clear tensor._backward_hooks)"))


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
    F.cross_entropy(model(x), y).backward()   # every .grad now holds a first gradient
    first = {n: p.grad.clone() for n, p in model.named_parameters()}
    out, inter = model.forward_with_intermediates(x)
    ref = torch.autograd.grad(F.cross_entropy(out, y), [model.fc1.weight, inter["act2"], model.fc2.weight])
    expected = {"fc1.weight": ref[0].norm().item(), "act2": ref[1].norm().item()}
    out, inter = model.forward_with_intermediates(x)
    tensors = {"fc1.weight": model.fc1.weight, "act2": inter["act2"]}
    with kit.TensorHookWitness({"fc1.weight": model.fc1.weight}) as hooks:
        got = answer(tensors, F.cross_entropy(out, y))
    _expect_no_hooks(t, tensors)
    _expect_norms(t, got, expected, (
        "record the gradient of *this* backward, as the hook receives it. A leaf's .grad accumulates "
        "over backwards (here it holds two gradients), and a non-leaf has no .grad at all"))
    t.expect_close(model.fc1.weight.grad, first["fc1.weight"] + ref[0], what="fc1.weight.grad after grad_norms",
                   nudge=("the caller's fc1.weight.grad held an earlier gradient, and loss.backward() adds "
                          "this one to it: run loss.backward() itself, leave .grad alone (no .grad = None) "
                          "and read the norm in the hook"))
    t.expect_close(model.fc2.weight.grad, first["fc2.weight"] + ref[2], what="fc2.weight.grad (not in `tensors`)",
                   nudge=("run loss.backward() itself: every parameter gets its gradient as usual, not only "
                          "those in `tensors` (no backward(inputs=...))"))
    t.expect(hooks.fired("fc1.weight") > 0, what="hooks on fc1.weight during backward",
             expected="your tensor hook", got="none", nudge=(
                 "record a parameter's norm with a tensor hook too: .grad after backward minus .grad "
                 "before is the gradient of this backward only while nothing else touches .grad "
                 "(a post-accumulate hook that steps and frees it, as in section 11, breaks it)"))
    t.expect(not inter["act2"].retains_grad, what="act2.retains_grad after grad_norms", expected=False,
             got=True, nudge=(
                 "you called retain_grad() on the caller's intermediate tensor: it now keeps a .grad (and "
                 "its memory) after every backward, and retain_grad() cannot be undone. The hook already "
                 "receives the gradient: record its norm there and leave the tensor as you found it"))


@exercise.case("a tensor used twice in the loss")
def _(answer, t: Tester) -> None:
    x = torch.tensor([1.0, 2.0, 2.0], requires_grad=True)
    h = x * 1.0
    loss = (h * 2).sum() + (h * 4).sum()   # dloss/dh = 2 + 4 = 6 everywhere: norm 6 * sqrt(3)
    got = answer({"h": h}, loss)
    _expect_no_hooks(t, {"h": h})
    _expect_norms(t, got, {"h": 6.0 * 3 ** 0.5}, (
        "a tensor used twice fires its hook once, with the summed gradient: record that one value"))


@exercise.case("a tensor that carries the caller's own hook: it stays, and fires")
def _(answer, t: Tester) -> None:
    x = torch.tensor([3.0, 4.0], requires_grad=True)
    h = x * 1.0
    fired = []
    theirs = h.register_hook(lambda grad: fired.append(1))
    try:
        got = answer({"h": h}, (h * 2.0).sum())   # dloss/dh = [2, 2]: norm 2 * sqrt(2)
        _expect_no_hooks(t, {"h": h}, before={"h": 1})
    finally:
        theirs.remove()
    t.expect(fired == [1], what="the caller's hook on h", expected="fired once", got=f"fired {len(fired)} times",
             nudge="the caller's own hook must fire as usual during your backward")
    _expect_norms(t, got, {"h": 2.0 * 2 ** 0.5}, "record grad.norm().item() for the gradient your hook receives")


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
    n = kit.hook_count(h)
    t.expect(n == 0, what="hooks left on 'h' after a failed backward", expected=0, got=n, nudge=(
        "loss.backward() raised, and your hook stayed attached. Register the hooks and call "
        "backward inside try:, and remove every handle in the finally: block"))


@exercise.case("one tensor under two names", hidden=True)
def _(answer, t: Tester) -> None:
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    h = x * 1.0
    got = answer({"h": h, "also h": h}, (h * 3.0).sum())   # dloss/dh = [3, 3]: norm 3 * sqrt(2)
    _expect_no_hooks(t, {"h": h})
    _expect_norms(t, got, {"h": 3.0 * 2 ** 0.5, "also h": 3.0 * 2 ** 0.5},
                  "each name gets the norm of its tensor's gradient, also when two names share a tensor")


@exercise.case("names in another order than backward reaches the tensors", hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(kit.Reordered(seed=23, inputs=3, width=4), "a model that runs stem, mid, head")
    x = kit.randn(5, 3, seed=23)
    names = ["mid", "head", "stem"]   # backward reaches head, mid, stem: neither this order nor its reverse

    def outputs():
        stem = model.stem(x)
        mid = model.mid(torch.sigmoid(stem))
        head = model.head(torch.sigmoid(mid))
        return {"stem": stem, "mid": mid, "head": head}, head.pow(2).mean()
    inter, loss = outputs()
    ref = torch.autograd.grad(loss, [inter[n] for n in names])
    expected = {n: g.norm().item() for n, g in zip(names, ref)}
    inter, loss = outputs()
    tensors = {n: inter[n] for n in names}
    got = answer(tensors, loss)
    _expect_no_hooks(t, tensors)
    _expect_norms(t, got, expected, (
        "store each norm under its own name, in the hook made for that name: backward reaches the "
        "tensors in its own order (from the loss back), not in the order of the dict"))


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


# -- the wrong answers peculiar to this exercise -------------------------------------------------

def _by_hooks(*, late=False, remove="finally", returns_norm=False, distinct=False, by_order=False,
              as_tensor=False, backward=lambda loss, tensors: loss.backward()):
    """One factory for the near-copy wrong answers: a lambda bound to the loop variable late
    (``late``); how the hooks go ("finally", "after": not in a finally block, "never", "clear":
    ``tensor._backward_hooks.clear()``); a hook that returns the norm; one hook per distinct tensor
    (``distinct``); norms collected in a list and paired with the names by reversed order
    (``by_order``); the 0-dim tensor ``grad.norm()`` stored instead of a float (``as_tensor``);
    how backward runs."""
    def answer(tensors, loss):
        norms, handles, seen, order = {}, [], set(), []
        for name, tensor in tensors.items():
            if distinct and id(tensor) in seen:
                continue
            seen.add(id(tensor))
            if by_order:
                hook = lambda g: order.append(g.norm().item())   # noqa: E731
            elif late:
                hook = lambda g: norms.__setitem__(name, g.norm().item())   # noqa: E731, B023
            elif returns_norm:
                hook = lambda g, name=name: norms.setdefault(name, g.norm().item())   # noqa: E731
            elif as_tensor:
                hook = lambda g, name=name: norms.__setitem__(name, g.norm())   # noqa: E731
            else:
                hook = lambda g, name=name: norms.__setitem__(name, g.norm().item())   # noqa: E731
            handles.append(tensor.register_hook(hook))
        if remove == "finally":
            try:
                backward(loss, tensors)
            finally:
                for handle in handles:
                    handle.remove()
        else:
            backward(loss, tensors)
            if remove == "after":
                for handle in handles:
                    handle.remove()
            elif remove == "clear":
                for tensor in tensors.values():
                    tensor._backward_hooks.clear()
        if by_order:   # "backward runs from the loss back, so the list is the dict reversed"
            return dict(zip(tensors, reversed(order)))
        return norms
    return answer


exercise.wrong("a lambda in the loop captures the loop variable late", mentions="last value")(
    _by_hooks(late=True, remove="after"))
exercise.wrong("never removes its hooks", mentions="still attached")(_by_hooks(remove="never"))
exercise.wrong("removes its hooks, but not in a finally block", mentions="finally")(_by_hooks(remove="after"))
exercise.wrong("returns the norm from the hook", mentions="return nothing")(_by_hooks(returns_norm=True))
exercise.wrong("removes the hooks by clearing tensor._backward_hooks", mentions="caller's own hook")(
    _by_hooks(remove="clear"))
exercise.wrong("runs loss.backward(inputs=...) on the tensors only", mentions="backward(inputs=...)")(
    _by_hooks(backward=lambda loss, tensors: loss.backward(inputs=list(tensors.values()))))
exercise.wrong("stores grad.norm(), a 0-dim tensor, not a float", mentions="0-dim")(
    _by_hooks(as_tensor=True))
exercise.wrong("one hook per distinct tensor", mentions="two names", hidden=True)(_by_hooks(distinct=True))
exercise.wrong("pairs the norms with the names by order", mentions="its own order", hidden=True)(
    _by_hooks(by_order=True))


@exercise.wrong("uses torch.autograd.grad instead of hooks and backward()",
                mentions="run loss.backward() itself")
def _autograd_grad(tensors, loss):
    grads = torch.autograd.grad(loss, list(tensors.values()))
    return {name: g.norm().item() for name, g in zip(tensors, grads)}


@exercise.wrong("records in hooks, but also calls retain_grad() on the intermediates", mentions="cannot be undone")
def _(tensors, loss):
    norms, handles = {}, []
    try:
        for name, tensor in tensors.items():
            if not tensor.is_leaf:
                tensor.retain_grad()
            handles.append(tensor.register_hook(lambda grad, name=name: norms.__setitem__(name, grad.norm().item())))
        loss.backward()
    finally:
        for handle in handles:
            handle.remove()
    return norms


@exercise.wrong("reads .grad after backward (retain_grad)", mentions="accumulates")
def _reads_grad(tensors, loss):
    for tensor in tensors.values():
        if not tensor.is_leaf:
            tensor.retain_grad()
    loss.backward()
    return {name: tensor.grad.norm().item() for name, tensor in tensors.items()}


@exercise.wrong("resets the leaves' .grad, then reads it after backward", mentions="leave .grad alone")
def _resets_grad(tensors, loss):
    norms, handles = {}, []
    try:
        for name, tensor in tensors.items():
            if tensor.is_leaf:
                tensor.grad = None   # "so that .grad holds this backward only"
            else:
                handles.append(tensor.register_hook(lambda g, name=name: norms.__setitem__(name, g.norm().item())))
        loss.backward()
    finally:
        for handle in handles:
            handle.remove()
    norms.update({name: tensor.grad.norm().item() for name, tensor in tensors.items() if tensor.is_leaf})
    return norms


@exercise.wrong("hooks only on intermediate tensors; a parameter's .grad after minus before",
                mentions="tensor hook too")
def _grad_difference(tensors, loss):
    norms, handles = {}, []
    before = {name: None if tensor.grad is None else tensor.grad.clone()
              for name, tensor in tensors.items() if tensor.is_leaf}
    try:
        for name, tensor in tensors.items():
            if not tensor.is_leaf:
                handles.append(tensor.register_hook(lambda g, name=name: norms.__setitem__(name, g.norm().item())))
        loss.backward()
    finally:
        for handle in handles:
            handle.remove()
    for name, old in before.items():
        grad = tensors[name].grad
        norms[name] = (grad if old is None else grad - old).norm().item()
    return norms


exercise.equivalent_mutants["context: no-grad"] = "loss.backward() runs the same under no_grad: the graph exists"
exercise.equivalent_mutants["context: inference-mode"] = "the backward of a graph built before the call runs the same"
