"""13_hooks_at_work, exercise: a logging hook that leaks nothing over a long training run.

Half-right answers an examiner expects, by kit dimension (``kit.DIMENSIONS``):

- detached: appends the output tensor, or ``output.norm()`` without ``.item()``: each entry holds
  the autograd graph of its step (its nodes, and until a backward pass frees them, every activation
  the step saved), so memory grows step by step;
- kept besides: floats in the returned list, but every output (or every 2nd or 4th, detached or
  not, or only the last output or input) kept in a list of the hook's own too: the same leak out of
  sight (the check counts the tensors made during the run that are alive after step 5 and after
  step 200: a correct answer keeps 0 more; and rejects any of them still alive after the last step,
  with a graph or without); or the same as Python floats (``output.tolist()``, in a list of its own or
  in a class attribute), or a NumPy copy every 50 steps, which no tensor count sees: the check also
  measures the bytes and the objects the hook refers to besides the returned list (the answer's own
  classes included), at step 5 and at 200;
- ``output.norm().detach()``: no graph, so no leak of the graph, but a tensor per step where the
  task asks for Python floats (rejected, with a message that says the graph is not the problem);
- reference cycles: the hook refers to ``layer`` (a closure over it, or a bound method of a
  logger object that holds it): layer -> ``_forward_hooks`` -> hook -> layer is a cycle, which
  only the cycle collector frees (with ``gc`` disabled, or between its runs, the layer and its
  parameters stay after ``del model``); the hook should use the ``module`` it receives;
- repeat / reattach: a list shared by every call (a global, or a default argument), or a memo that
  returns the first call's list and handle for the same layer, so two loggers on one layer are not
  independent;
- the handle: returns something that does not remove the hook.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable

import torch
from torch import nn

from ...models import seeded
from ..core import CALLERS_HOOK_IDS, Exercise, Tester, learners_hooks
from ._alive import Created, held, holds_graph


def log_output_norms(layer):
    """(a list that gets the norm of each output of `layer`, as a float; the hook's handle)."""
    ### BEGIN SOLUTION
    norms = []

    def hook(module, args, output):
        norms.append(output.norm().item())

    return norms, layer.register_forward_hook(hook)
    ### END SOLUTION


exercise = Exercise(
    "hooks_at_work.leak_free_logger", "A logging hook that leaks nothing",
    task=("write log_output_norms(layer) that registers ONE forward hook on `layer`; on every call of the layer "
          "it appends the L2 norm of the layer's output (a tensor) to a list, as a Python float. Return (the "
          "list, the hook's handle). It runs for a whole training run: nothing of a step may stay alive after "
          "it (the list holds floats, and the hook keeps no tensor anywhere else), and the hook must not keep "
          "the layer alive (deleting the model frees it "
          "even while the hook is attached); the handle removes the hook; two calls on the same layer give two "
          "independent lists"),
    hints=[
        "output.norm() is a 0-dim tensor that is part of the step's autograd graph: storing it keeps the graph "
        "(its nodes; on a pass without backward(), every activation it saved too) alive. .item() gives a "
        "Python float.",
        "Inside the hook, use the `module` argument it receives, never `layer` from the enclosing function: a "
        "hook that refers to its layer makes a reference cycle (layer -> its hooks -> the hook -> layer) that "
        "plain reference counting cannot free.",
        "Make the list inside log_output_norms, define hook(module, args, output) that appends to it, and "
        "return (the list, layer.register_forward_hook(hook)).",
    ],
    solution=log_output_norms,
    answer_name="log_output_norms",
    guide="""appending the output or `output.norm()` (a tensor that holds the step's graph: its nodes stay, and
    on passes without `backward()` every activation they saved); floats in the list but the outputs
    (every one or every few, detached or not, or only the last output or input) kept in another
    list of the hook's (or as Python floats, `output.tolist()`): the same leak, out of sight;
    keeping `output.grad_fn` (no tensor, but the
    graph, and on a pass without `backward()` the input it saved);
    `output.norm().detach()` (no graph, so
    not that leak, and rejected only because the task asks for floats: ask what a logger's reader
    wants); a hook that refers to `layer` (a closure, or a bound method of an object that keeps the
    layer): a reference cycle through `layer._forward_hooks`, freed only by the cycle collector; a list
    shared by every call (a global); a memo that returns the first logger again for the same layer.""",
)


def _tiny(seed: int) -> nn.Sequential:
    with seeded(seed):
        return nn.Sequential(nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 1))


def _steps(model: nn.Module, n: int, seed: int) -> None:
    """``n`` training steps (forward, backward, a plain SGD update by hand) on one fixed batch. By hand:
    the first torch.optim optimizer of a process imports torch._dynamo, seconds that are no check's."""
    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(seed))
    for _ in range(n):
        model(x).pow(2).mean().backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.01 * p.grad
                p.grad = None


def _unpack(t: Tester, got: object, what: str) -> tuple[list, object]:
    t.expect_type(got, tuple, what=what, nudge="return the pair (the list, the handle)")
    t.expect(len(got) == 2, what=f"len({what})", expected=2, got=len(got), nudge="return (the list, the handle)")
    norms, handle = got
    t.expect_type(norms, list, what=f"{what}[0]", nudge="the first item is the list that the hook appends to")
    t.expect(callable(getattr(handle, "remove", None)), what=f"{what}[1]", expected="a handle with .remove()",
             got=handle, nudge="the second item is the handle that layer.register_forward_hook(hook) returned")
    return norms, handle


def _kept_besides(model: nn.Module, norms: list, skip: set[int]) -> tuple[int, int] | None:
    """The size in bytes, and the number of objects, of what the answer's hooks on ``model`` refer to
    (its own classes' attributes included), and of the attributes set on its modules, but the list of
    norms and its floats; None when it cannot be measured."""
    roots: list[object] = [fn for m in model.modules() for i, fn in m._forward_hooks.items()
                           if i not in skip and i not in CALLERS_HOOK_IDS]
    roots += [v for m in model.modules() for k, v in vars(m).items()
              if k not in ("_parameters", "_buffers", "_modules") and "hook" not in k]
    try:
        return held(roots, besides=[norms])
    except Exception:   # an object of the answer's that will not say its size: no measure, no verdict
        return None


def _expect_floats(t: Tester, norms: list, what: str) -> None:
    for i, entry in enumerate(norms):
        if isinstance(entry, torch.Tensor):
            graph = holds_graph(entry)
            t.expect(False, what=f"{what}[{i}]", expected="a Python float", got=(
                f"a tensor of shape {tuple(entry.shape)}" + (" that holds its step's autograd graph" if graph
                                                              else ", detached")), nudge=(
                "each entry holds the autograd graph of its step (its nodes; on a pass without backward() every "
                "activation it saved as well): over a run, memory grows step by step. Append "
                "output.norm().item(), a float"
                if graph else
                "a detached tensor holds no graph, so that is not the leak; the task asks for Python floats, "
                "though (a logger's list is read, printed and plotted): append output.norm().item()"))
        t.expect_type(entry, float, what=f"{what}[{i}]", nudge="append output.norm().item(), a Python float")


@exercise.case("200 training steps of a tiny model: one float per step, the norm of that step's output")
def _(answer, t: Tester) -> None:
    model = t.track(_tiny(1), "the tiny model")
    want: list[float] = []
    mine = model[0].register_forward_hook(lambda m, args, out: want.append(float(out.detach().norm())))
    try:
        norms, handle = _unpack(t, answer(model[0]), "log_output_norms(model[0])")
        try:
            with Created() as created:   # every tensor the steps make, the hook's included
                _steps(model, 5, seed=1)
                early, held_early = created.alive(), _kept_besides(model, norms, {mine.id})
                _steps(model, 195, seed=1)
            late, held_late = created.alive(), _kept_besides(model, norms, {mine.id})
            # the hook still attached, as it is between two steps of a run: what it keeps of the last one.
            # No gc.collect(): a step's graph that a reference cycle holds until the collector runs is kept
            kept = [(tuple(k.shape), holds_graph(k)) for k in created.kept(besides=model.parameters(),
                                                                            collect=False)]
        finally:
            handle.remove()
    finally:
        mine.remove()
    t.expect(len(norms) == 200, what="len(norms) after 200 steps", expected=200, got=len(norms), nudge=(
        "append once per call of the layer, to a fresh list made by this call of log_output_norms"))
    _expect_floats(t, norms, "norms")
    # the same norm of the same output, computed again: equal up to rounding (1e-6 relative), where a
    # wrong quantity (another layer's output, a squared norm) is off by far more
    off = [i for i, (a, b) in enumerate(zip(norms, want)) if abs(a - b) > 1e-6 * abs(b) + 1e-12]
    t.expect(not off, what=f"norms[{off[0] if off else 0}]", expected=want[off[0]] if off else None,
             got=norms[off[0]] if off else None, nudge="the L2 norm of the layer's output: output.norm().item()")
    # a correct answer keeps no tensor of any step: 0 more at step 200 than at step 5 (measured), and none
    # alive after the last. A tensor kept every 4th step is 49 more; the last output or input kept: 1 alive
    grew = late - early
    with_graph = sum(graph for _, graph in kept)
    t.expect(grew <= 2, what="tensors alive after step 200, against step 5", expected="as many",
             got=f"{grew} more ({with_graph} alive with an autograd graph)", nudge=(
                 "your hook keeps a tensor of every step (or of every few steps), somewhere besides the list of "
                 "floats (another list, an attribute): memory grows step by step, detached or not, and a "
                 "step's output, or a tensor made from it, holds the autograd graph of its step too. Keep "
                 "output.norm().item() only, and nothing else"))
    # what the hook holds besides the list (its closure, defaults, the globals it names, attributes set on
    # the layer, a class of the answer's): the same at step 200 as at step 5 for a correct answer; a second
    # list that gets the output's .tolist() every step grows by hundreds of bytes a step, one of floats by
    # 32; a NumPy copy every 50th step by under 1024 bytes, but by 4 objects
    measured = held_early is not None and held_late is not None
    more, objects = (held_late[0] - held_early[0], held_late[1] - held_early[1]) if measured else (0, 0)
    t.expect(more < 1024 and objects <= 2,
             what="the size of what your hook keeps besides the list, step 200 against step 5",
             expected="the same", got=f"{more:,} bytes more, in {objects} more objects", nudge=(
                 "your hook keeps something of every step besides the list of norms (Python floats, lists from "
                 ".tolist(), an output's grad_fn, which holds that step's autograd graph; in another list or an "
                 "attribute): memory grows with the run, tensors or not. Append output.norm().item() to the "
                 "list you return, and keep nothing else"))
    shapes = [shape for shape, _ in kept]
    t.expect(not kept, what="tensors of the steps alive after the last step (the hook still attached)",
             expected="none (the hook keeps floats only)",
             got=f"{len(kept)}, of shapes {shapes[:3]}" + (f", {with_graph} with an autograd graph" if with_graph
                                                            else ", detached"), nudge=(
                 "a tensor of the last step is kept: your hook holds the output, its input, or a tensor made "
                 "from them (detached or not) until the next call replaces it"
                 + (", with its step's autograd graph" if with_graph else "")
                 + ". Nothing of a step may stay alive after it: append output.norm().item() and keep no tensor"))


@exercise.case("a pass without backward() leaves nothing alive; a fresh list per call; the handle removes "
               "the hook")
def _(answer, t: Tester) -> None:
    model = t.track(_tiny(2), "the tiny model")
    x = torch.randn(2, 3, generator=torch.Generator().manual_seed(2))
    norms, handle = _unpack(t, answer(model[0]), "log_output_norms(model[0])")
    evaluated = torch.randn(2, 3, generator=torch.Generator().manual_seed(3))
    model(evaluated)   # a pass without backward(): its graph holds the input until it is dropped
    graph_input = weakref.ref(evaluated)
    del evaluated
    t.expect(graph_input() is None, what="the input of a forward pass without backward(), after it",
             expected="freed", got="still alive", nudge=(
                 "your hook keeps that pass's autograd graph (output.grad_fn, or a tensor that requires "
                 "grad), and the graph holds the input it saved: keep only the float"))
    model(x)
    t.expect(len(norms) == 2, what="len(norms) after two forwards", expected=2, got=len(norms), nudge=(
        "make a fresh list in every call of log_output_norms: a list outside it (a global, a default "
        "argument) is shared by every logger"))
    handle.remove()
    model(x)
    t.expect(len(norms) == 2 and not learners_hooks(model), what="after handle.remove() and another forward",
             expected="the hook gone: still 2 entries", got=f"{len(norms)} entries", nudge=(
                 "return the handle that layer.register_forward_hook(hook) gave you: its remove() takes the hook off"))


@exercise.case("del model frees the layer while the hook is attached (the cycle collector switched off)")
def _(answer, t: Tester) -> None:
    # the model is not tracked (t.track would hold it): a hook left on it dies with it, which is the point
    was_on = gc.isenabled()
    gc.disable()   # what reference counting frees, without the cycle collector's help
    try:
        model = _tiny(3)
        norms, handle = _unpack(t, answer(model[0]), "log_output_norms(model[0])")
        _steps(model, 3, seed=3)
        layer = weakref.ref(model[0])
        del model
        freed = layer() is None
    finally:
        if was_on:
            gc.enable()
    t.expect(freed, what="the layer after `del model`", expected="freed", got="still alive", nudge=(
        "your hook keeps its layer alive: a hook that refers to `layer` (a closure over it, or a bound method "
        "of an object that holds it) makes a reference cycle, layer -> layer._forward_hooks -> hook -> layer, "
        "which only the cycle collector frees. Use the `module` argument the hook receives"))
    _expect_floats(t, norms, "norms")


@exercise.case("two loggers on the same layer: two lists, each removed by its own handle", hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(_tiny(4), "the tiny model")
    x = torch.randn(2, 3, generator=torch.Generator().manual_seed(4))
    first, first_handle = _unpack(t, answer(model[0]), "the first log_output_norms(model[0])")
    second, second_handle = _unpack(t, answer(model[0]), "the second log_output_norms(model[0])")
    try:
        model(x)
        t.expect(first is not second and (len(first), len(second)) == (1, 1), what="the two lists after one forward",
                 expected="two lists of 1 entry each", got=f"{len(first)} and {len(second)} entries"
                 + (", the same list" if first is second else ""), nudge=(
                     "each call registers its own hook and returns its own list: two loggers on one layer are "
                     "independent (no memo of the loggers already attached)"))
        first_handle.remove()
        model(x)
        t.expect((len(first), len(second)) == (1, 2), what="after the first handle's remove() and a forward",
                 expected="1 and 2 entries", got=f"{len(first)} and {len(second)} entries",
                 nudge="each handle removes its own hook, and only that one")
    finally:
        first_handle.remove()
        second_handle.remove()


# -- the wrong answers peculiar to this exercise -------------------------------------------------

_SHARED: list = []


def _logger(*, entry: Callable = lambda out: out.norm().item(), refer_to_layer=False, shared=False,
            also_keep: Callable | None = None, every: int = 1, last=False):
    """One factory for the near-copy wrong answers: what is appended (``entry``), whether the hook
    refers to ``layer`` (a closure over it), whether the list is shared by every call, and what the
    hook keeps besides: ``also_keep(args, output)``, on every ``every``-th call, in a list of its own
    (``last``: only the last one kept)."""
    def answer(layer):
        norms = _SHARED if shared else []
        kept: list = []

        def hook(module, args, output):
            norms.append(entry(output))
            if also_keep is not None and len(norms) % every == 0:
                if last:
                    kept.clear()
                kept.append(also_keep(args, output))

        def hook_on_layer(module, args, output):
            assert module is layer   # a sanity check that closes over `layer`
            norms.append(entry(output))

        return norms, layer.register_forward_hook(hook_on_layer if refer_to_layer else hook)
    return answer


def _output(args, output):
    return output


exercise.wrong("appends the output tensor", mentions="autograd graph of its step")(_logger(entry=lambda out: out))
exercise.wrong("appends output.norm() without .item()", mentions="autograd graph of its step")(
    _logger(entry=lambda out: out.norm()))
exercise.wrong("appends output.norm().detach()", mentions="not the leak")(
    _logger(entry=lambda out: out.norm().detach()))
exercise.wrong("also keeps every output, in a second list", mentions="grows step by step")(
    _logger(also_keep=_output))
exercise.wrong("also keeps every 2nd output, detached", mentions="grows step by step")(
    _logger(also_keep=lambda args, output: output.detach(), every=2))
exercise.wrong("also keeps a detached copy of every 4th output", mentions="grows step by step")(
    _logger(also_keep=lambda args, output: output.detach().clone(), every=4))
exercise.wrong("also keeps the last output", mentions="with its step's autograd graph")(
    _logger(also_keep=_output, last=True))
exercise.wrong("also keeps the last output, detached", mentions="a tensor of the last step is kept")(
    _logger(also_keep=lambda args, output: output.detach(), last=True))
exercise.wrong("also keeps the last input", mentions="a tensor of the last step is kept")(
    _logger(also_keep=lambda args, output: args[0], last=True))
exercise.wrong("also keeps every output as Python floats (.tolist()), in a second list",
               mentions="tensors or not")(_logger(also_keep=lambda args, output: output.detach().tolist()))
exercise.wrong("also keeps a NumPy copy of every 50th output", mentions="tensors or not")(
    _logger(also_keep=lambda args, output: output.detach().numpy().copy(), every=50))


class _History:
    """Rows kept on a class: what the hook refers to (its class) grows, no instance in sight."""

    rows: list = []


def _class_history(layer):
    norms = []

    def hook(module, args, output):
        norms.append(output.norm().item())
        _History.rows.append(output.detach().tolist())

    return norms, layer.register_forward_hook(hook)


exercise.wrong("also keeps every output as floats in a class attribute", mentions="tensors or not")(_class_history)
exercise.wrong("also keeps every output's grad_fn", mentions="grad_fn, which holds that step's autograd graph")(
    _logger(also_keep=lambda args, output: output.grad_fn))
exercise.wrong("a hook that closes over `layer`", mentions="reference cycle")(_logger(refer_to_layer=True))
exercise.wrong("a list shared by every call", mentions="fresh list")(_logger(shared=True))


class _NormLogger:
    """A logger object that keeps its layer and registers its own bound method: a cycle."""

    def __init__(self, layer: nn.Module) -> None:
        self.layer, self.norms = layer, []
        self.handle = layer.register_forward_hook(self.record)

    def record(self, module, args, output) -> None:
        self.norms.append(output.norm().item())


exercise.wrong("a logger object that keeps the layer and hooks its bound method", mentions="bound method")(
    lambda layer: (lambda logger: (logger.norms, logger.handle))(_NormLogger(layer)))

_MEMO: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@exercise.wrong("returns the first logger again for a layer it has seen", mentions="independent", hidden=True)
def _memoized(layer):
    if layer not in _MEMO:
        _MEMO[layer] = _logger()(layer)
    return _MEMO[layer]
