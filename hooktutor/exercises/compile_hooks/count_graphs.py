"""11_compile_and_export, exercise: count the graphs torch.compile makes over several calls, with a
backend of your own (how to see recompiles and graph breaks without reading logs).

Half-right answers an examiner expects, by kit dimension (``kit.DIMENSIONS``):

- technique: returns the number of calls; counts the graphs the last call compiled; counts the
  graphs of one call only
  (``torch._dynamo.explain``), which misses the recompiles of later calls; compiles with the
  default backend (code generation: slow, and not what is asked), or a named backend with Dynamo's
  private counter (``torch._dynamo.utils.counters``) in place of a backend of one's own, or a
  backend of one's own that counts nothing (``lambda gm, example_inputs: gm.forward``) with that
  counter read for the count (it counts every compile of the process: the check adds to it while
  the answer runs, one for each graph the answer's backend gets, and takes that off again after);
  a backend of one's own registered with ``torch._dynamo.register_backend(name=...)`` and passed
  by its name is right (the check resolves the name through Dynamo's registry);
- repeat: keeps what was compiled before (no ``torch._dynamo.reset()`` first): the answer's new
  ``torch.compile`` with its own backend does not reuse that code (it compiles again), but the
  earlier compile holds a slot of Dynamo's limit of compiled versions per function: at the limit,
  the answer's call runs uncompiled and its backend sees nothing;
- calls=0: calls the model once "to compile it", then ``calls - 1`` more times;
- twice: a graph break in the forward gives two graphs per compile, not one;
- left_as_found: ``model.compile(backend=...)`` compiles the caller's model in place, for good; on
  torch 2.13 it also traces nothing of an ``nn.Sequential`` (whose forward is torch.nn's), so
  its count is wrong too;
- the hook the caller attached (a list append) makes every call compile again: the answer
  must call the model as often as asked, not stop after the first call or two (a case calls it
  three times and counts the calls).
"""

from __future__ import annotations

import contextlib

import torch
import torch._dynamo
from torch import nn

from ...inventory import global_hook_ids
from ...models import seeded
from .. import kit
from ..core import Exercise, Tester
from ..variants import compile_settings
from ._shared import GraphCounter, compiling, mlp, recompile_limit


def count_graphs(model, x, calls):
    """Compile `model` with a backend that counts the graphs it gets; call it `calls` times on x;
    return how many graphs were compiled."""
    ### BEGIN SOLUTION
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward  # run the graph as it is: no code generation

    torch._dynamo.reset()  # nothing compiled before may be reused
    compiled = torch.compile(model, backend=backend)
    for _ in range(calls):
        compiled(x)
    return len(graphs)
    ### END SOLUTION


exercise = Exercise(
    "compile_hooks.count_graphs", "Count the graphs torch.compile makes",
    task=("write count_graphs(model, x, calls) that compiles `model` with torch.compile and a backend of your own "
          "that counts the graphs it is given (a backend is a function (gm, example_inputs) returning a callable; "
          "return gm.forward to run the graph as it is), calls the compiled model `calls` times on x, and returns "
          "how many graphs were compiled. Nothing compiled before your call may be reused"),
    hints=[
        "A backend receives each graph Dynamo captured, as a torch.fx.GraphModule: append it to a list and return "
        "gm.forward.",
        "One compile can hand the backend more than one graph (a forward written out line by line, with a graph "
        "break in it: one graph before the break, one after), or none (in an nn.Sequential the layers after a "
        "break run uncompiled); a guard that fails gives a recompile on a later call: call the compiled model "
        "`calls` times and count everything the backend received.",
        "Call torch._dynamo.reset() first, so that the count starts from nothing compiled; then "
        "torch.compile(model, backend=your_backend) and the calls.",
    ],
    solution=count_graphs,
    guide="""returning the number of calls; counting what the last call compiled (0 once
    the code is compiled); counting the graphs of one call with
    `torch._dynamo.explain` (a hook that appends to a list compiles again on every call);
    calling the model once "to compile it" and then `calls - 1` more times (wrong for
    `calls=0`); no `torch._dynamo.reset()` first (a model compiled before shares Dynamo's
    limit of compiled versions, and falls back to uncompiled calls); compiling with the
    default backend (slow, and counts nothing).""",
)
exercise.check_budget_s = 5.0   # a check that compiles: ten compiles (0.05-0.2 s each, more under load)
exercise.time_limit = 10.0      # per case: a first compile on a busy machine can pass the usual 2 s


class _Breaks(nn.Module):
    """``fc2(graph break(relu(fc1(x))))``: a graph break in the middle, two graphs per compile."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        with seeded(seed):
            self.fc1, self.fc2 = nn.Linear(4, 4), nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(x))
        torch._dynamo.graph_break()
        return self.fc2(h)


_TRUTHS: dict = {}   # what the check's own counter saw, per case and process state (see _truth)


def _world() -> tuple:
    """What besides the case decides how many graphs a compile gives: the torch, its
    ``torch.compile``, Dynamo's settings and stance (``variants.compile_settings``), and the global
    module hooks, by their handles' ids (not their number: a no-op hook swapped for one that
    appends to a list keeps the number and changes the count). A learner's answer or cell may have
    changed any of them."""
    return torch.__version__, compile_settings(), tuple(sorted(global_hook_ids()))


def _truth(model: nn.Module, x: torch.Tensor, calls: int, key: tuple | None = None) -> int:
    """How many graphs a counting backend gets over ``calls`` calls, from nothing compiled. With
    ``key`` (the case: its model's class and seed, x's shape, the calls, the hook, and
    :func:`_world`), a count made before in the same process state is reused: a check run again
    (a learner's next try, or the mutation test's many) compiles half as often."""
    if key is not None and key in _TRUTHS:
        return _TRUTHS[key]
    counter = GraphCounter()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=counter)
    with torch.no_grad():
        for _ in range(calls):
            compiled(x)
    torch._dynamo.reset()
    if key is not None:
        _TRUTHS[key] = counter.graphs
    return counter.graphs


def _run(answer, t: Tester, build, x: torch.Tensor, calls: int, *, hook: bool = False, cached: bool = False,
         seed: int) -> None:
    """``answer`` on a model from ``build`` (with a list-appending forward hook on its first layer
    when ``hook``); the count must be what a counting
    backend sees on the installed torch (computed now, by the check's own counter), and with the
    hook the model must have been called ``calls`` times. ``cached``: the check compiles and calls
    the model itself before the answer runs (``calls`` times: its counter is the truth), with
    Dynamo's limit of compiled versions per function set to 1: an answer that does not reset
    first finds that slot taken (its own torch.compile would compile again, but the limit is hit:
    the call runs uncompiled) and counts too few graphs. ``seed``: the case's, naming its count in
    the cache of :func:`_truth`."""
    with compiling():
        fired: list = []
        model = build()
        first = next(m for m in model.modules() if isinstance(m, nn.Linear))
        handle = first.register_forward_hook(lambda m, a, o: fired.append(1)) if hook else None
        try:
            limit = recompile_limit(1) if cached else contextlib.nullcontext()
            with limit:
                if cached:   # the check's own compile and calls, which the answer finds in place: its truth too
                    torch._dynamo.reset()
                    counter = GraphCounter()
                    earlier = torch.compile(model, backend=counter)
                    with torch.no_grad():
                        for _ in range(calls):
                            earlier(x)
                    want = counter.graphs
                else:
                    key = (type(model).__name__, seed, tuple(x.shape), calls, hook, _world())
                    counted_now = key not in _TRUTHS
                    want = _truth(model, x, calls, key)
                if hook and (cached or counted_now):   # the check's own calls, where it made them
                    t.expect(fired == [1] * calls, what="(the check's own run)", expected=calls, got=len(fired),
                             nudge="")
                fired.clear()
                with torch.no_grad(), _backends_passed(answer) as backends:
                    got = answer(model, x, calls)
            # (no HookWitness on the model: its counting pre-hook would be compiled in, and a hook
            # that counts in Python makes every call compile again)
            what = "count_graphs(model, x, calls)"
            t.expect_type(got, int, what=what, nudge="return the number of graphs, an int")
            if hook:
                t.expect(len(fired) == calls, what="calls of the model", expected=calls, got=len(fired),
                         nudge="call the compiled model `calls` times")
            t.expect(not getattr(model, "_compiled_call_impl", None), what="the model after your answer",
                     expected="as it was", got="compiled in place (model.compile())", nudge=(
                         "model.compile() compiles the caller's model in place, for good, and on a module whose "
                         "forward is torch.nn's (an nn.Sequential) it may trace nothing at all: compile a wrapper "
                         "with torch.compile(model, backend=...)"))
            private = ("count in a backend of your own, the graphs it receives: Dynamo's counters "
                       "(torch._dynamo.utils.counters) are private and count every compile of the process, "
                       "not only your answer's")
            t.expect(got == want or got not in backends.counted, what=what, expected=want, got=got, nudge=(
                f"{private} (the check added to them while your answer ran)"))
            t.expect(got == want, what=what, expected=want, got=got, nudge=(
                "count every graph your backend receives, over all the calls, starting from nothing compiled: "
                "a hook that appends to a list can make a call compile again, and a graph break can give a "
                "compile more than one graph"))
            mine = any(callable(b) or (isinstance(b, str) and b in backends.own) for b in backends)
            t.expect(mine, what="the backends your answer compiled with",
                     expected="a function of yours (gm, example_inputs)",
                     got=[b if isinstance(b, str) else type(b).__name__ for b in backends],
                     nudge=("count with a backend of your own, passed as torch.compile(model, backend=your_function) "
                            "(or registered with torch._dynamo.register_backend and passed by its name): a counter "
                            "of Dynamo's own (torch._dynamo.utils.counters) is private, and a named backend of "
                            "torch's (\"eager\", \"inductor\") hands you nothing to count"))
            t.expect(got == backends.calls, what="the graphs your backend received", expected=got,
                     got=backends.calls, nudge=private)
        finally:
            if handle is not None:
                handle.remove()
            torch._dynamo.reset()


class _Passed(list):
    """The backends an answer passed to ``torch.compile``, and what they did: ``calls``, how often
    the answer's own backends were called (one graph each); ``own``, the names of backends of the
    answer's own it passed by name; ``counted``, what Dynamo's private counters of graphs and frames
    read when the answer returned (the check adds one to each for each call of the answer's
    backend: read as a count, each is twice the truth)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls, self.own, self.counted = 0, set(), ()


# Dynamo's private counters of compiled graphs and frames: what an answer might read in place of
# counting in its backend (each equals the number of graphs on the cases' models)
_PRIVATE_COUNTS = (("stats", "unique_graphs"), ("frames", "ok"), ("frames", "total"))


def _torchs(fn) -> bool:
    """A backend of torch's own (``torch._dynamo.backends.debugging.eager``, ``inductor``): not one
    that an answer wrote."""
    module = getattr(fn, "__module__", None) or type(fn).__module__ or ""
    return module == "torch" or module.startswith("torch.")


@contextlib.contextmanager
def _registry_kept(answer):
    """Dynamo's registry of backend names (``torch._dynamo.register_backend``) as it was before the
    block, after it: a name the answer registers does not stay registered (torch has no public way
    to unregister one: the private dicts of ``torch._dynamo.backends.registry`` are restored). A
    name registered to a function defined inside ``answer`` by an earlier run of it (a run of the
    check's variants, which no block covers) is stale and is dropped first: the answer can
    register it again."""
    from torch._dynamo.backends import registry
    tables = [d for d in (getattr(registry, "_COMPILER_FNS", None), getattr(registry, "_BACKENDS", None))
              if isinstance(d, dict)]
    inside = f"{getattr(answer, '__qualname__', '')}.<locals>."
    module = getattr(answer, "__module__", None)
    for name, fn in list(tables[0].items()) if tables else ():
        if getattr(fn, "__module__", None) == module and getattr(fn, "__qualname__", "").startswith(inside):
            for d in tables:
                d.pop(name, None)
    saved = [dict(d) for d in tables]   # (the stale names dropped for good)
    try:
        yield
    finally:
        for d, before in zip(tables, saved):
            d.clear()
            d.update(before)


@contextlib.contextmanager
def _backends_passed(answer=None):
    """The ``backend`` of every ``torch.compile`` call made in the block (the default's name, where
    none is given), collected by a stand-in for ``torch.compile`` put back in a ``finally``. A
    backend that is a callable, or a name registered to a function not torch's (the answer's own,
    resolved with ``torch._dynamo.lookup_backend``), is passed on wrapped: each call of it is
    counted, and adds one to each of Dynamo's private counters of graphs (taken off again at the
    end), so that an answer that reads those counts twice the truth, not the truth."""
    from torch._dynamo.utils import counters
    backends = _Passed()
    real = torch.compile
    added = [0]

    def counted(fn):
        def backend(gm, example_inputs):
            compiled = fn(gm, example_inputs)
            backends.calls += 1
            for group, key in _PRIVATE_COUNTS:
                counters[group][key] += 1
            added[0] += 1
            return compiled
        return backend

    def recording(*args, **kwargs):
        backend = kwargs.get("backend", "inductor")
        backends.append(backend)
        if isinstance(backend, str):
            try:
                fn = torch._dynamo.lookup_backend(backend)
            except Exception:   # noqa: BLE001 - no such name: torch.compile says so itself
                fn = None
            if fn is not None and not _torchs(fn):
                backends.own.add(backend)
                kwargs["backend"] = counted(fn)
        elif callable(backend):
            kwargs["backend"] = counted(backend)
        return real(*args, **kwargs)

    torch.compile = recording
    try:
        with _registry_kept(answer) if answer is not None else contextlib.nullcontext():
            yield backends
    finally:
        torch.compile = real
        backends.counted = tuple(counters[group][key] for group, key in _PRIVATE_COUNTS)
        for group, key in _PRIVATE_COUNTS:
            counters[group][key] = max(0, counters[group][key] - added[0])


@exercise.case("an MLP whose first layer has a hook that appends to a list, called three times")
def _(answer, t: Tester) -> None:
    _run(answer, t, lambda: mlp(51), kit.randn(2, 4, seed=51), 3, hook=True, seed=51)


@exercise.case("a model with a graph break in its forward, called three times")
def _(answer, t: Tester) -> None:
    _run(answer, t, lambda: _Breaks(52), kit.randn(3, 4, seed=52), 3, seed=52)


@exercise.case("a model compiled and called before, at Dynamo's recompile limit", hidden=True)
def _(answer, t: Tester) -> None:
    _run(answer, t, lambda: mlp(54), kit.randn(2, 4, seed=54), 2, cached=True, seed=54)


@exercise.case("no call at all (calls=0), a model with a graph break", hidden=True)
def _(answer, t: Tester) -> None:
    _run(answer, t, lambda: _Breaks(53), kit.randn(2, 4, seed=53), 0, seed=53)


def _counting(model, x, calls, *, reset: bool = True, per_call: bool = False):
    """One factory for the near-copy wrong answers."""
    counter = GraphCounter()
    if reset:
        torch._dynamo.reset()
    compiled = torch.compile(model, backend=counter)
    for _ in range(calls):
        compiled(x)
    return calls if per_call else counter.graphs


@exercise.wrong("returns the number of calls", mentions="count every graph")
def _calls(model, x, calls):
    return _counting(model, x, calls, per_call=True)


@exercise.wrong("counts the graphs of one call with torch._dynamo.explain", mentions="can make a call compile again")
def _explain(model, x, calls):
    torch._dynamo.reset()
    count = torch._dynamo.explain(model)(x).graph_count
    for _ in range(calls - 1):
        model(x)
    return count


@exercise.wrong("counts the graphs of the last call only", mentions="over all the calls")
def _last_call(model, x, calls):
    counter = GraphCounter()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=counter)
    before = 0
    for _ in range(calls):
        before = counter.graphs
        compiled(x)
    return counter.graphs - before


@exercise.wrong("calls the compiled model once to compile it, then calls - 1 more times", mentions="count every graph",
                hidden=True)
def _first_call_apart(model, x, calls):
    counter = GraphCounter()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=counter)
    compiled(x)   # "the first call compiles"
    for _ in range(calls - 1):
        compiled(x)
    return counter.graphs


@exercise.wrong("calls the compiled model at most twice", mentions="`calls` times")
def _at_most_twice(model, x, calls):
    return _counting(model, x, min(calls, 2))


@exercise.wrong("does not reset first", mentions="starting from nothing compiled", hidden=True)
def _no_reset(model, x, calls):
    return _counting(model, x, calls, reset=False)


@exercise.wrong("counts with a named backend and Dynamo's private counter", mentions="a backend of your own")
def _dynamo_counter(model, x, calls):
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(model, backend="eager")
    for _ in range(calls):
        compiled(x)
    return counters["stats"]["unique_graphs"]


@exercise.wrong("a backend of its own that counts nothing, and Dynamo's private counter read for the count",
                mentions="Dynamo's counters (torch._dynamo.utils.counters) are private")
def _own_backend_dynamo_counter(model, x, calls):
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(model, backend=lambda gm, example_inputs: gm.forward)
    for _ in range(calls):
        compiled(x)
    return counters["stats"]["unique_graphs"]


@exercise.right("a counting backend registered with torch._dynamo.register_backend(name=...), passed by its name")
def _registered_backend(model, x, calls):
    graphs = []
    name = "hooktutor_count_graphs_right"

    @torch._dynamo.register_backend(name=name)
    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    try:
        torch._dynamo.reset()
        compiled = torch.compile(model, backend=name)
        for _ in range(calls):
            compiled(x)
        return len(graphs)
    finally:   # torch has no public way to unregister a name: its registry's private dicts
        from torch._dynamo.backends import registry
        registry._COMPILER_FNS.pop(name, None)
        registry._BACKENDS.pop(name, None)


@exercise.wrong("compiles the model in place with model.compile()", mentions="model.compile()")
def _module_compile(model, x, calls):
    counter = GraphCounter()
    torch._dynamo.reset()
    if hasattr(model, "compile"):     # torch 2.2 and newer
        model.compile(backend=counter)   # sets the caller's model's _compiled_call_impl, for good
    else:                             # what it does, on torch 2.1
        model._compiled_call_impl = torch.compile(model._call_impl, backend=counter)
    for _ in range(calls):
        model(x)
    return counter.graphs


for _variant in ("float64", "bfloat16", "eval", "mixed"):   # (the variant "as given" runs)
    exercise.not_varied[_variant] = "each variant compiles afresh (a second or more); the cases vary the graphs"
