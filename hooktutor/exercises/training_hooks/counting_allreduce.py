"""08_training_hooks, exercise 4: a DDP communication hook of the learner's own, checked on
two and three gloo processes.

The check cannot hand a function defined in a notebook to new processes (a spawned process
imports what it runs by module and name, and a notebook is no module), so it sends the
answer's *source*: the worker below compiles it in a namespace with ``torch``, ``dist``
(``torch.distributed``) and ``default_hooks``, and registers it with
``register_comm_hook(state, hook)`` on a DDP model, for two backward passes. DDP hands the first
pass's gradients over in one bucket, whatever its size; it then rebuilds its buckets, and with
``bucket_cap_mb=1`` on an MLP 512 wide (1 MiB in ``fc2.weight`` alone) the second pass has two
(``tests/test_distributed.py`` holds it to that, in float32 and float64). A trusted run with the
same model and batches gives the truth: the buckets DDP hands out and the averaged gradients.

Half-right answers an examiner expects, by kit dimension (``kit.DIMENSIONS``):

- technique: returns the bucket's own buffer in a finished future (no all-reduce: every
  process keeps its own gradient); returns the all-reduce's future itself, whose value is a
  list (DDP fails inside); returns nothing (a hook without ``return``: DDP's reducer takes the
  ``None`` for a Future and the process dies in backward, so the check's wrapper stops it first
  and says what was returned);
- arithmetic: sums instead of averaging; divides by 2 instead of the number of processes
  (right on two, wrong on three);
- state: records into a list of its own instead of ``state``; records the number of
  gradients instead of the number of values; records its first call only;
- repeat: two passes (DDP lays its buckets out anew after the first: one bucket, then two);
- dtype: a float64 model.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import textwrap
import traceback
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.multiprocessing import ProcessExitedException

from ... import distributed
from ...data import blobs
from ...models import MLP
from ..core import Exercise, Tester


def counting_allreduce(state, bucket):
    """DDP's communication hook: record (index, numel) of each bucket in `state`, and return a
    future whose value is the bucket's buffer averaged over the processes."""
    ### BEGIN SOLUTION
    state.append((bucket.index(), bucket.buffer().numel()))
    averaged = bucket.buffer() / dist.get_world_size()
    work = dist.all_reduce(averaged, async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])
    ### END SOLUTION


exercise = Exercise(
    "training_hooks.counting_allreduce", "A communication hook of your own",
    task=("write counting_allreduce(state, bucket), a DDP communication hook: append (bucket.index(), "
          "bucket.buffer().numel()) to state (the list given to register_comm_hook), and return a "
          "torch.futures.Future whose value is the bucket's buffer averaged over the processes. The check "
          "runs its source in new processes: use only torch, dist (torch.distributed), default_hooks and "
          "what you import inside the function"),
    hints=[
        "DDP calls the hook once per bucket, as hook(state, bucket): bucket.buffer() is one flat tensor "
        "with the bucket's gradients, bucket.index() its number. Record first: state.append((bucket.index(), "
        "bucket.buffer().numel())).",
        "dist.all_reduce(tensor, async_op=True) starts a sum over the processes and returns a work object; "
        "work.get_future() is a Future whose value is a list with the tensor. Divide by "
        "dist.get_world_size() (before or after) to get the average.",
        "DDP wants a Future of one tensor: return work.get_future().then(lambda fut: fut.value()[0]), or "
        "hand the bucket to the built-in hook after recording: return default_hooks.allreduce_hook(None, "
        "bucket).",
    ],
    solution=counting_allreduce,
    equivalent_mutants={
        "number@8: 0 -> -1": "the all-reduce's future holds a list of one tensor: its last item is its first",
    },
    guide="""returning `bucket.buffer()` in a finished future without an all-reduce (each process
    keeps its own gradient, and the models drift apart); returning the all-reduce's own future,
    whose value is a list (DDP fails with an internal assert), or nothing at all (a missing
    `return`); summing without dividing, or
    dividing by 2 rather than `dist.get_world_size()`; recording into a list of its own instead
    of `state`, or `len(bucket.gradients())` instead of the number of values; using a name
    defined in the notebook (the check runs the hook's source in new processes).""",
)

# three DDP runs of two or three processes each: about 0.3 s on a quiet laptop, more under load,
# more on torch 2.1, whose processes import torch._dynamo for DDP (a second or two each), and
# about 2 s more where the processes start from a fork server (distributed.start_method: torch
# 2.15 after a compiled backward in the same process)
exercise.check_budget_s = 5.0
exercise.time_limit = 30.0   # per case; each run of the processes stops after 10 s (below)
exercise.mutant_time_limit_s = 12.0   # a case starts processes: seconds on a loaded machine

_NAMESPACE_NOTE = ("the check runs your function's source in new processes, which have only torch, dist "
                   "(torch.distributed) and default_hooks: import anything else inside the function, and "
                   "append your records to state, the list DDP passes to the hook")


def answer_source(answer: Callable) -> str:
    """The source of ``answer`` (a mutant carries its own), dedented; ValueError with what to do."""
    source = getattr(answer, "__hooktutor_source__", None)
    if source is None:
        if getattr(answer, "__name__", "<lambda>") == "<lambda>" or not inspect.isfunction(answer):
            raise ValueError("write the hook as a function: def counting_allreduce(state, bucket): ...")
        try:
            source = inspect.getsource(answer)
        except (OSError, TypeError):
            raise ValueError("its source cannot be read: define it with def in a cell of its own and run that "
                             "cell") from None
    tree = ast.parse(textwrap.dedent(source))
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    if not defs:
        raise ValueError("write the hook as a function: def counting_allreduce(state, bucket): ...")
    defs[0].decorator_list = []   # a decorator would run in the processes too
    return ast.unparse(defs[0])


def _batch(rank: int, step: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = blobs(8, seed=100 + 10 * rank + step)
    return x.to(dtype), y


def _passes(model: nn.Module, rank: int, passes: int, dtype: torch.dtype) -> list[dict[str, torch.Tensor]]:
    """``passes`` forward and backward passes on this rank's batches; the gradients after each."""
    grads = []
    for step in range(passes):
        model.zero_grad(set_to_none=True)
        x, y = _batch(rank, step, dtype)
        nn.functional.cross_entropy(model(x), y).backward()
        inner = getattr(model, "module", model)   # DDP's parameters are named module.<name>
        grads.append({n: p.grad.detach().clone() for n, p in inner.named_parameters()})
    return grads


# DDP puts every gradient of the first pass in one bucket; from the second pass on, a bucket
# closes once it holds bucket_cap_mb MiB. The first rebuilt bucket's cap is 1 MiB on torch 2.1
# whatever bucket_cap_mb says (newer releases use bucket_cap_mb), so 1 MiB, and fc2.weight of 1 MiB
# (float32; 2 MiB in float64), give two buckets on every supported torch.
HIDDEN, BUCKET_CAP_MB = 512, 1


def _model(dtype: torch.dtype) -> nn.Module:
    return MLP(hidden=HIDDEN, seed=0).to(dtype)


def _ddp(dtype: torch.dtype, bucket_cap_mb: float) -> nn.Module:
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(_model(dtype), bucket_cap_mb=bucket_cap_mb)


def _trusted(state, bucket):   # no annotations: DDP checks them, and this module's are strings
    state.append((bucket.index(), bucket.buffer().numel()))
    return default_hooks.allreduce_hook(None, bucket)


class _NotAFuture(TypeError):
    """The answer's hook returned something other than a Future (noted in the result)."""


def _raising_as_itself(hook: Callable, result: dict[str, Any]) -> Callable:
    """``hook``, noting in ``result`` an exception it raises itself (DDP's own errors, about
    what it returned, are not noted), and what it returned when that is no Future at all: DDP's
    reducer takes ``None`` (a hook without ``return``) as a Future and the process dies of a
    segmentation fault in backward (torch 2.13), so the hook stops there with an error instead."""
    def noted(state, bucket):   # no annotations: DDP checks them, and this module's are strings
        try:
            returned = hook(state, bucket)
        except Exception as exc:
            result["raised"] = (type(exc).__name__, str(exc)[:300])
            raise
        if not isinstance(returned, torch._C.Future):   # get_future() gives the C type; Future() its subclass
            result["returned"] = type(returned).__name__
            raise _NotAFuture(f"the hook returned {type(returned).__name__}, not a torch.futures.Future")
        return returned
    return noted


def ddp_worker(rank: int, world_size: int, *, source: str, name: str, dtype: torch.dtype, passes: int,
               bucket_cap_mb: float) -> dict[str, Any]:
    """Runs in every process: the truth (a trusted recording hook), each rank's own gradients
    (no DDP), then the answer compiled from ``source``. An error is returned, not raised: both
    ranks run the same code, so both return it."""
    from ...models import seeded

    with seeded(0):
        alone = _model(dtype)
    result: dict[str, Any] = {"local": _passes(alone, rank, passes, dtype)}
    truth: list = []
    ddp = _ddp(dtype, bucket_cap_mb)
    ddp.register_comm_hook(truth, _trusted)
    result["truth"], result["truth_grads"] = truth, _passes(ddp, rank, passes, dtype)
    namespace: dict[str, Any] = {"torch": torch, "dist": dist, "default_hooks": default_hooks,
                                 "__name__": "your_answer"}
    try:
        exec(compile(source, "<your answer>", "exec", dont_inherit=True), namespace)  # noqa: S102 - theirs
        hook = _raising_as_itself(namespace[name], result)
        state: list = []
        ddp = _ddp(dtype, bucket_cap_mb)
        ddp.register_comm_hook(state, hook)
        result["grads"] = _passes(ddp, rank, passes, dtype)
        result["state"] = [tuple(s) if isinstance(s, (list, tuple)) else s for s in state]
    except Exception as exc:  # the learner's hook raised (in DDP, or compiling)
        last = traceback.format_exception_only(type(exc), exc)[-1].strip()
        result["error"] = last[:400]
    return result


def _explain_error(error: str) -> str:
    if "NameError" in error:
        return _NAMESPACE_NOTE
    if "isPyObject" in error or "Future" in error or "future" in error:
        return ("return a torch.futures.Future whose value is one tensor: "
                "work.get_future().then(lambda fut: fut.value()[0]), where work = dist.all_reduce(..., async_op=True)")
    return "read the error above: it happened inside your hook, in the processes the check started"


class RetriedRun(RuntimeWarning):
    """The check's DDP run timed out or lost a process, and ran once more (the report is the second's)."""


def _run(answer: Callable, t: Tester, world_size: int, dtype: torch.dtype, passes: int) -> list[dict[str, Any]]:
    try:
        source = answer_source(answer)
    except ValueError as exc:
        t.expect(False, what="your answer", expected="a function defined with def", got=answer, nudge=str(exc))
    name = getattr(answer, "__name__", "counting_allreduce")
    try:
        try:
            ranks = distributed.run(ddp_worker, world_size, timeout=10, source=source, name=name, dtype=dtype,
                                    passes=passes, bucket_cap_mb=BUCKET_CAP_MB)
        except (TimeoutError, ProcessExitedException) as first:
            # once more: on torch 2.1 about one forked run in twenty hangs before the hook runs (measured
            # here: 4 checks of 25, never on the pinned torch), and a process forked from a busy test
            # runner can die of a signal in backward; a hook that hangs or crashes does so again. The
            # retry is said out loud (a warning under the report, in pytest's summary): never silent
            why = (str(first).strip().splitlines() or [type(first).__name__])[-1][:200]
            warnings.warn(f"the check's DDP run on {world_size} processes did not end ({type(first).__name__}: "
                          f"{why}); it ran once more, and the report is that second run's", RetriedRun,
                          stacklevel=2)
            ranks = distributed.run(ddp_worker, world_size, timeout=10, source=source, name=name, dtype=dtype,
                                    passes=passes, bucket_cap_mb=BUCKET_CAP_MB)
    except Exception as exc:  # a process that died or hung: a hook that all-reduces on some ranks only
        t.expect(False, what=f"DDP on {world_size} processes", expected="a run that ends",
                 got=(str(exc).strip().splitlines() or [type(exc).__name__])[-1][:300],
                 nudge="every process must call the same collectives in the same order")
    raised = ranks[0].get("raised")
    if raised is not None and raised[0] == "NameError":
        t.expect(False, what=f"your hook, under DDP on {world_size} processes", expected="no error",
                 got=f"NameError: {raised[1]}", nudge=_NAMESPACE_NOTE)
    if raised is not None:   # the hook itself raised: report it as the check reports any answer's error
        kind = getattr(builtins, raised[0], None)
        kind = kind if isinstance(kind, type) and issubclass(kind, Exception) else RuntimeError
        # a blank answer's NotImplementedError reads as it would in the notebook: "not written yet"
        message = raised[1] if kind is NotImplementedError else f"{raised[1]} (in the processes the check started)"
        try:
            error = kind(message)
        except TypeError:   # an exception class that wants other arguments
            error = RuntimeError(f"{raised[0]}: {message}")
        # raised from a frame named for the learner's code, which it came from: the check reports
        # it as the answer's error, not as one of its own
        exec(compile("raise error", "<your hook, in the processes the check started>", "exec"),  # noqa: S102
             {"error": error})
    returned = ranks[0].get("returned")
    if returned is not None:
        t.expect(False, what="what your hook returned", expected="a torch.futures.Future whose value is one tensor",
                 got="None (no return statement)" if returned == "NoneType" else f"a {returned}",
                 nudge="return the all-reduce's future: return work.get_future().then(lambda fut: fut.value()[0]), "
                       "where work = dist.all_reduce(..., async_op=True)")
    error = ranks[0].get("error")
    t.expect(error is None, what=f"your hook, under DDP on {world_size} processes", expected="no error",
             got=error, nudge=_explain_error(error or ""))
    return ranks


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    tol = (1e-12, 1e-12) if a.dtype == torch.float64 else (1e-5, 1e-7)
    return a.shape == b.shape and a.dtype == b.dtype and torch.allclose(a, b, rtol=tol[0], atol=tol[1])


def _expect_gradients(t: Tester, ranks: list[dict[str, Any]], world_size: int) -> None:
    for rank, r in enumerate(ranks):
        for step, (got, want) in enumerate(zip(r["grads"], r["truth_grads"])):
            for name, value in got.items():
                if _close(value, want[name]):
                    continue
                local = r["local"][step][name]
                total = sum(q["local"][step][name] for q in ranks)
                nudge = "average: all-reduce bucket.buffer() and divide by dist.get_world_size()"
                if _close(value, local):
                    nudge = ("each process kept its own gradient: the hook must all-reduce the buffer "
                             "(dist.all_reduce(..., async_op=True)) and return that work's future")
                elif _close(value, total):
                    nudge = "that is the sum over the processes: divide by dist.get_world_size()"
                elif world_size != 2 and _close(value, total / 2):
                    nudge = f"divided by 2 on {world_size} processes: divide by dist.get_world_size()"
                t.expect(False, what=f"{name}.grad on rank {rank} after pass {step + 1}",
                         expected="the average of the processes' gradients", got="another value", nudge=nudge)


def _expect_records(t: Tester, ranks: list[dict[str, Any]]) -> None:
    for rank, r in enumerate(ranks):
        got, want = r["state"], r["truth"]
        t.expect(len(got) > 0, what=f"state on rank {rank}", expected=want, got=got,
                 nudge="append to state, the list DDP passes to your hook (register_comm_hook(state, hook))")
        t.expect(len(got) == len(want), what=f"how many records on rank {rank}", expected=len(want),
                 got=len(got), nudge="one record per call: DDP calls the hook once per bucket, in every pass")
        t.expect(sorted(got, key=repr) == sorted(want, key=repr), what=f"state on rank {rank}", expected=want,
                 got=got, nudge="record (bucket.index(), bucket.buffer().numel()): the number of values "
                                "in the bucket's flat buffer, not the number of gradients")


@exercise.case("DDP on two processes, two passes: one bucket, then two")
def _(answer, t: Tester) -> None:
    ranks = _run(answer, t, 2, torch.float32, passes=2)
    _expect_gradients(t, ranks, 2)
    _expect_records(t, ranks)


@exercise.case("DDP on two processes, a float64 model, two passes")
def _(answer, t: Tester) -> None:
    ranks = _run(answer, t, 2, torch.float64, passes=2)
    _expect_gradients(t, ranks, 2)
    _expect_records(t, ranks)


@exercise.case("DDP on three processes, two passes", hidden=True)
def _(answer, t: Tester) -> None:
    ranks = _run(answer, t, 3, torch.float32, passes=2)
    _expect_gradients(t, ranks, 3)
    _expect_records(t, ranks)


# -- the wrong answers peculiar to this exercise (self-contained: the check sends their source) --

@exercise.wrong("records and all-reduces, but forgets to return the future", mentions="no return statement")
def no_return(state, bucket):
    state.append((bucket.index(), bucket.buffer().numel()))
    dist.all_reduce(bucket.buffer() / dist.get_world_size(), async_op=True)


@exercise.wrong("returns the buffer without an all-reduce", mentions="kept its own gradient")
def no_allreduce(state, bucket):
    state.append((bucket.index(), bucket.buffer().numel()))
    fut = torch.futures.Future()
    fut.set_result(bucket.buffer())
    return fut


@exercise.wrong("returns the all-reduce's own future (its value is a list)", mentions="value is one tensor")
def raw_future(state, bucket):
    state.append((bucket.index(), bucket.buffer().numel()))
    bucket.buffer().div_(dist.get_world_size())
    return dist.all_reduce(bucket.buffer(), async_op=True).get_future()


@exercise.wrong("sums, never divides", mentions="divide by dist.get_world_size()")
def sums(state, bucket):
    state.append((bucket.index(), bucket.buffer().numel()))
    return dist.all_reduce(bucket.buffer(), async_op=True).get_future().then(lambda fut: fut.value()[0])


@exercise.wrong("divides by 2", mentions="dist.get_world_size()", hidden=True)
def halves(state, bucket):
    state.append((bucket.index(), bucket.buffer().numel()))
    averaged = bucket.buffer() / 2
    return dist.all_reduce(averaged, async_op=True).get_future().then(lambda fut: fut.value()[0])


RECORDS: list = []


@exercise.wrong("records into a list of its own", mentions="records to state")
def own_list(state, bucket):
    RECORDS.append((bucket.index(), bucket.buffer().numel()))
    return default_hooks.allreduce_hook(None, bucket)


@exercise.wrong("records the number of gradients", mentions="not the number of gradients")
def counts_gradients(state, bucket):
    state.append((bucket.index(), len(bucket.gradients())))
    return default_hooks.allreduce_hook(None, bucket)


@exercise.wrong("records its first call only", mentions="once per bucket, in every pass")
def first_call_only(state, bucket):
    if not state:
        state.append((bucket.index(), bucket.buffer().numel()))
    return default_hooks.allreduce_hook(None, bucket)


@exercise.wrong("uses a name the processes do not have", mentions="import anything else")
def uses_notebook_name(state, bucket):
    state.append((bucket.index(), bucket.buffer().numel()))
    return allreduce_hook(None, bucket)  # noqa: F821 - imported in the notebook, not in the processes


exercise.wrong("a lambda", mentions="as a function")(
    lambda state, bucket: default_hooks.allreduce_hook(None, bucket))
