"""00_start_here, exercise: count the calls of a layer with a hook that cleans up after itself.

Half-right answers an examiner expects, by kit dimension (``kit.DIMENSIONS``):

- repeat: the list lives outside the function, so a second run counts on top of the first;
- twice: counts whether the layer ran (a set, a flag), not how often; or at most two calls (a
  hidden case calls a frozen layer three times, under ``torch.no_grad()``, which also rejects a
  count of the calls whose output requires grad);
- raises: removes the hook after ``model(x)`` but not in ``finally:``, or never removes it;
  catches the model's error (``except Exception: pass``) and returns a count for a forward that
  never finished;
- technique: counts how often the layer appears in the model instead of hooking it: right for
  a Sequential that lists a shared layer twice, wrong for a forward that calls one registered
  layer twice;
- a wrong type: returns the list of calls instead of its length.
"""

from __future__ import annotations

import torch
from torch import nn

from ...models import MLP
from .. import kit
from ..core import Exercise, Tester, learners_hooks


def count_calls(model, x, layer):
    """Run model(x) once; return how many times `layer` was called."""
    ### BEGIN SOLUTION
    calls = []
    handle = layer.register_forward_hook(lambda module, args, output: calls.append(1))
    try:
        model(x)
    finally:
        handle.remove()
    return len(calls)
    ### END SOLUTION


exercise = Exercise(
    "start_here.count_calls", "Count the calls of a layer",
    task=("write count_calls(model, x, layer) that runs model(x) once and returns how many "
          "times `layer` was called, using a forward hook that is removed afterwards"),
    hints=[
        "Inside count_calls, define a hook(module, args, output) that appends to a list, and "
        "attach it with handle = layer.register_forward_hook(hook).",
        "Run model(x), then return len(your_list).",
        "Put model(x) in a try: block and handle.remove() in its finally: block, so the hook is "
        "removed even when the model raises.",
    ],
    solution=count_calls,
    equivalent_mutants={
        "number@5: 1 -> 2": "the hook appends one item per call, whatever the item: the length is the count",
        "number@5: 1 -> 0": "the hook appends one item per call, whatever the item: the length is the count",
    },
    guide="""the hook is never removed; the answer records *whether* the layer ran (a set) instead
    of *how often*, which fails for a layer used twice in one forward ("a module used twice fires
    its hook twice"); the list lives outside the function, so a second call keeps counting from
    the first ("each run must start from zero"); the answer counts the layer's places in the model
    instead of hooking it, which misses a forward that calls one registered layer twice; the
    answer wraps model(x) in `except Exception: pass` to "survive" a model that raises, and hands
    back a count for a forward that never finished (the check wants the error let through).""",
)


def _expect_count(t: Tester, got: object, expected: int, what: str, nudge: str) -> None:
    t.expect_type(got, int, what=what, nudge="return len(your_list), a number")
    t.expect(got == expected, what=what, expected=expected, got=got, nudge=nudge)


@exercise.case("an MLP whose fc2 runs once")
def _(answer, t: Tester) -> None:
    model = t.track(MLP(seed=1), "the MLP")
    got = answer(model, torch.zeros(2, 8), model.fc2)
    _expect_count(t, got, 1, "count_calls(model, x, model.fc2)",
                  "append once per call of the hook and return the length of the list")


@exercise.case("the same model counted three times in a row")
def _(answer, t: Tester) -> None:
    model = t.track(MLP(seed=2), "the MLP")
    got = [answer(model, torch.zeros(1, 8), model.head) for _ in range(3)]
    t.expect_type(got[0], int, what="count_calls(model, x, model.head)", nudge="return len(your_list), a number")
    t.expect(got == [1, 1, 1], what="three calls of count_calls", expected=[1, 1, 1], got=got,
             nudge="each run must start from zero: keep the list inside count_calls, not outside")


@exercise.case("a layer used twice in one forward")
def _(answer, t: Tester) -> None:
    shared = nn.Linear(4, 4)
    model = t.track(nn.Sequential(shared, nn.Tanh(), shared), "a Sequential that reuses one Linear")
    got = answer(model, torch.zeros(1, 4), shared)
    _expect_count(t, got, 2, "count_calls(model, x, shared)",
                  "a module used twice fires its hook twice: count every call, not just whether it ran")


@exercise.case("a layer deep inside a nested model (encoder.body.2)")
def _(answer, t: Tester) -> None:
    model = t.track(kit.Nested(seed=1), "a nested model")
    got = answer(model, kit.randn(2, 4, seed=1), model.encoder.body[2])
    _expect_count(t, got, 1, "count_calls(model, x, model.encoder.body[2])",
                  "hook the layer you were given, wherever it sits in the model, and count its calls")


_SWALLOWED = ("model(x) raised, and your count_calls returned a number as if the forward had "
              "worked: the caller never learns that it failed. Let the error through: put "
              "handle.remove() in the `finally:` block of a try: around model(x), with no `except`")


@exercise.case("a model that raises halfway through its forward: the hook must still go")
def _(answer, t: Tester) -> None:
    model = t.track(kit.Raising(seed=2), "a model that raises halfway (after fc1)")
    with kit.HookWitness({"model": model}) as seen:
        raised, got = kit.call_expecting_kit_error(answer, model, torch.zeros(1, 4), model.fc1)
    left = learners_hooks(model, include_global=True)
    t.expect(not left, what="hooks left on the model after it raised", expected="none",
             got=f"{len(left)} hook(s)", nudge=(
                 "model(x) raised, and your hook stayed attached: call handle.remove() in the "
                 "`finally:` block of a try: around model(x), so it runs even when the model raises"))
    t.expect(raised or not seen.calls["model"], what="what count_calls did when the model raised",
             expected="the model's error, let through",
             got=f"it returned {got!r}", nudge=_SWALLOWED)


@exercise.case("a layer that forward() calls twice but the model registers once", hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(kit.Twice(seed=3), "a model whose forward calls `block` twice")
    with kit.HookWitness({"block": model.block}) as seen:
        got = answer(model, kit.randn(2, 4, seed=3), model.block)
    t.expect(seen.fired("block", "forward") + seen.fired("block", "forward_pre") > 0,
             what="hooks on `block` while the model ran", expected="your forward hook", got="none", nudge=(
                 "no hook was attached to the layer while model(x) ran: count the calls with a forward "
                 "hook (layer.register_forward_hook) and run model(x), instead of looking at how the "
                 "model is built"))
    _expect_count(t, got, 2, "count_calls(model, x, model.block)",
                  "forward() calls `block` twice, so a forward hook on it fires twice")


# -- the wrong answers peculiar to this exercise -------------------------------------------------

def _counter(*, result=len, keep_in=None, remove="finally", call=lambda model, x: model(x)):
    """One factory for the near-copy wrong answers: how the calls are kept (a fresh list, or
    ``keep_in``: a list outside the function, or a set of module ids), what is returned, how
    the hook is removed ("finally", "after": not in a finally block, "never"), and how the model
    is run (``call``)."""
    def answer(model, x, layer):
        calls = [] if keep_in is None else keep_in
        add = (lambda m: calls.add(id(m))) if isinstance(calls, set) else (lambda m: calls.append(1))
        handle = layer.register_forward_hook(lambda m, a, o: add(m))
        if remove == "finally":
            try:
                call(model, x)
            finally:
                handle.remove()
        else:
            call(model, x)
            if remove == "after":
                handle.remove()
        return result(calls)
    return answer


exercise.wrong("returns the list of calls, not its length", mentions="is a list")(_counter(result=list))
exercise.wrong("removes the hook, but not in a finally block", mentions="`finally:` block")(_counter(remove="after"))
exercise.wrong("forgets to remove the hook", mentions="still attached")(_counter(remove="never"))


@exercise.wrong("catches the model's error and returns the count anyway", mentions="never learns")
def _(model, x, layer):
    calls = []
    handle = layer.register_forward_hook(lambda module, args, output: calls.append(1))
    try:
        model(x)
    except Exception:
        pass
    finally:
        handle.remove()
    return len(calls)


@exercise.right("a forward pre-hook, removed by the handle's with block")
def _(model, x, layer):
    calls = []
    with layer.register_forward_pre_hook(lambda module, args: calls.append(1)):
        model(x)
    return len(calls)
exercise.wrong("keeps the list outside the function", mentions="start from zero")(_counter(keep_in=[]))
exercise.wrong("counts at most two calls", mentions="one per call", hidden=True)(
    _counter(result=lambda calls: min(len(calls), 2)))


@exercise.wrong("counts only the calls whose output requires grad", mentions="whatever its output is", hidden=True)
def _needs_grad_only(model, x, layer):
    calls = []
    handle = layer.register_forward_hook(lambda m, a, o: calls.append(1) if o.requires_grad else None)
    try:
        model(x)
    finally:
        handle.remove()
    return len(calls)


@exercise.wrong("counts whether it ran, not how often", mentions="module used twice")
def _ran_once(model, x, layer):
    return _counter(keep_in=set())(model, x, layer)


exercise.wrong("runs model.forward(x), which skips the model's own hooks", mentions="model.forward(x) skips",
               hidden=True)(lambda model, x, layer: _counter(call=lambda m, v: m.forward(v))(model, x, layer))


@exercise.wrong("counts the layer's places in the model instead of hooking it",
                mentions="no hook was attached", hidden=True)
def _counts_structure(model, x, layer):
    return sum(1 for _, m in model.named_modules(remove_duplicate=False) if m is layer)


@exercise.case("a frozen layer used three times in one forward, under torch.no_grad()", hidden=True)
def _(answer, t: Tester) -> None:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(6)
        shared = nn.Linear(4, 4).requires_grad_(False)
    model = t.track(nn.Sequential(shared, nn.Tanh(), shared, nn.Tanh(), shared), "a Sequential that reuses one "
                    "frozen Linear three times")
    with torch.no_grad():
        got = answer(model, torch.zeros(1, 4), shared)
    _expect_count(t, got, 3, "count_calls(model, x, shared) under torch.no_grad()",
                  "count every call of the layer, whatever its output is (a frozen layer, or a forward "
                  "under torch.no_grad(), gives outputs that need no gradient): one per call")


@exercise.case("the model itself as the layer: model(x) calls it once", hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(MLP(seed=4), "the MLP")
    got = answer(model, torch.zeros(1, 8), model)
    _expect_count(t, got, 1, "count_calls(model, x, model)",
                  "run the model as model(x): model.forward(x) skips every hook of the model itself")


@exercise.case("the model runs once, and is left as it was given (in train mode)", hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(kit.Nested(seed=5), "a nested model in train mode")
    with kit.HookWitness({"encoder": model.encoder}) as seen, kit.LeftAsFound(t, model):
        got = answer(model, kit.randn(2, 4, seed=5), model.encoder.body[0])
    t.expect(seen.calls["encoder"] == 1, what="how often count_calls ran the model", expected=1,
             got=seen.calls["encoder"], nudge="run model(x) exactly once: a second run (a warm-up) is a second "
                                              "forward, which a model with state (BatchNorm) notices")
    _expect_count(t, got, 1, "count_calls(model, x, model.encoder.body[0])",
                  "hook the layer you were given and count its calls during the one model(x)")
