"""11_compile_and_export, predict, then run: which hooks a compiled model runs, and how often it compiles."""

from __future__ import annotations

import torch
import torch._dynamo

from ..predict import Prediction
from ._shared import GraphCounter, compiling, mlp

LATE_KEYS = ("calls of fc1's hook, registered before compiling, in 3 compiled calls",
             "graphs compiled in those 3 calls",
             "calls of fc2's hook, added after the first compiled call, in 2 more calls",
             "calls of fc2's hook in 2 calls after torch._dynamo.reset()")
_COUNTS = (0, 1, 2, 3)


def _observe_late_hooks() -> dict:
    """An MLP ``Linear(4, 8), ReLU, Linear(8, 3)`` compiled with the "eager" backend and a counting backend."""
    truth = {}
    x = torch.ones(2, 4)
    with compiling(), torch.no_grad():
        try:
            torch._dynamo.reset()
            model, fc1_calls, counter = mlp(0), [], GraphCounter()
            with model[0].register_forward_hook(lambda m, a, o: fc1_calls.append(1)):
                compiled = torch.compile(model, backend=counter)
                for _ in range(3):
                    compiled(x)
            truth[LATE_KEYS[0]], truth[LATE_KEYS[1]] = len(fc1_calls), counter.graphs
            torch._dynamo.reset()
            model, fc2_calls = mlp(0), {"n": 0}
            compiled = torch.compile(model, backend="eager")
            compiled(x)

            def count(module, args, output):
                fc2_calls["n"] += 1

            with model[2].register_forward_hook(count):
                compiled(x)
                compiled(x)
                truth[LATE_KEYS[2]] = fc2_calls["n"]
                fc2_calls["n"] = 0
                torch._dynamo.reset()
                compiled(x)
                compiled(x)
                truth[LATE_KEYS[3]] = fc2_calls["n"]
        finally:
            torch._dynamo.reset()
    return {k: truth[k] for k in LATE_KEYS}


def predict_late_hooks():
    """One count per key, 0 to 3."""
    ### BEGIN SOLUTION
    return {"calls of fc1's hook, registered before compiling, in 3 compiled calls": 3,
            "graphs compiled in those 3 calls": 3,
            "calls of fc2's hook, added after the first compiled call, in 2 more calls": 0,
            "calls of fc2's hook in 2 calls after torch._dynamo.reset()": 2}
    ### END SOLUTION


exercise = Prediction(
    "compile_hooks.late_hooks", "Predict: which hooks a compiled model runs",
    task="a dict with one count (0 to 3) per key: " + "; ".join(LATE_KEYS),
    answer_name="predict_late_hooks",
    answer=predict_late_hooks,
    observe=_observe_late_hooks,
    choices={k: _COUNTS for k in LATE_KEYS},
    hints=["torch.compile traces the model, hooks included, on its first call, and reuses that code while its "
           "guards (cheap checks before each call) hold. What does a hook that appends to a list change between "
           "two calls?",
           "A layer with no hook at compile time: does the compiled code check its hooks before each call? And "
           "after torch._dynamo.reset(), what does the next call do?"],
    explain={
        LATE_KEYS[0]: "a hook present when the model is compiled is traced in, and its side effect (the append) is "
                      "replayed on every compiled call.",
        LATE_KEYS[1]: "the traced code read the list's length, so it is guarded on it: after each call the list is "
                      "longer, the guard fails, and the next call compiles again.",
        LATE_KEYS[2]: "fc2's call is inside the compiled graph (Dynamo inlines built-in layers like fc2), and the "
                      "compiled code does not guard the empty hook dicts of the modules it traced: fc2 had no hook "
                      "when the model was compiled, so the late hook is skipped (a module that ran outside any "
                      "graph would run it).",
        LATE_KEYS[3]: "torch._dynamo.reset() forgets the compiled code; the next call traces the model again, with "
                      "fc2's hook in place.",
    },
    summary=("hooks present at compile time run on every call, and a hook with a side effect on a list can make "
             "every call compile again; a hook added later to a layer inside the graph that had none is skipped "
             "until the model compiles again (here after torch._dynamo.reset())."),
    guide=""""every call reuses one graph" (the fc1 hook's append is guarded: one compile per
    call); "a hook added later fires like in eager" (since torch 2.5 it is skipped on a layer
    that had no hook); "reset() removes the hooks" (it removes compiled code; the hooks stay
    and are traced in at the next call).""",
)

exercise.wrong("every call reuses one graph", dict(zip(LATE_KEYS, (3, 1, 0, 2))), "guarded on it")
exercise.wrong("a late hook fires as in eager", dict(zip(LATE_KEYS, (3, 3, 2, 2))), "late hook is skipped",
               since="compile-skips-late-hook")   # what torch did before 2.5
exercise.wrong("reset() removes the hooks", dict(zip(LATE_KEYS, (3, 3, 0, 0))), "with fc2's hook in place")
