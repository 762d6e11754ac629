"""Distributed training on one CPU: two processes, the gloo backend, DDP and its hooks.

Taught in ``08_training_hooks.ipynb`` (section 5). On Linux the processes are *forked* from
this one (:data:`START_METHOD`): they start at once, torch already imported, where a fresh
Python would spend about two seconds importing torch and the ``torch._dynamo`` that DDP's
constructor loads. macOS and Windows *spawn* them: the new process imports the function it
runs by its module and name, and a notebook is no module (Linux does the same, from a fork
server, once a forked child could no longer run a backward pass: :func:`start_method`). So the
workers live here, and
:func:`run` refuses a function defined in a notebook on every system alike:

* :func:`run` starts ``world_size`` processes, each joining one gloo process group on
  localhost (a free port chosen at run time), runs ``worker(rank, world_size, **kwargs)`` in
  each and returns what each rank returned. The group is destroyed in a ``finally`` in every
  rank, and no process outlives the call, also when a worker raises (it is re-raised here).
* :func:`ddp_hooks_demo` is the lesson's worker: a DDP-wrapped MLP whose module hooks fire
  in every rank, a communication hook that records the gradient buckets (:func:`record_buckets`,
  also under other DDP settings), the built-in fp16
  compression hook, and ``capture`` / ``list_hooks`` on the wrapped model.
* ``python -m hooktutor.distributed`` runs the same worker under ``torchrun``, which sets
  ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` for every process, on one
  machine or on several; always with gloo and the model on the CPU, GPUs or not (a GPU run
  would join with nccl and put each process's model on its own device: not done here)::

      torchrun --standalone --nproc-per-node=2 -m hooktutor.distributed
      torchrun --nnodes=2 --nproc-per-node=2 --node-rank=0 \\
          --rdzv-backend=c10d --rdzv-endpoint=HOST0:29500 -m hooktutor.distributed
"""

from __future__ import annotations

import datetime
import inspect
import multiprocessing
import os
import socket
import sys
import tempfile
import textwrap
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from .capture import capture
from .data import blobs
from .inventory import list_hooks
from .models import MLP, seeded

TIMEOUT_S = 60.0
# fork: the new process is a copy of this one (its imports included). Safe here: the parent has
# no process group and every rank sets one intra-op thread first. DataLoader workers are forked
# from notebooks the same way. macOS (where forking after some system libraries is unsafe) and
# Windows (no fork) spawn a fresh interpreter instead.
START_METHOD = "fork" if sys.platform.startswith("linux") else "spawn"


def _autograd_refuses_forks() -> bool:
    """Whether a process forked from this one could not run a backward pass.

    Once autograd has started its worker threads in a process (torch 2.15 does so for a
    backward through a ``torch.compile``-d model, even on a CPU), a forked child refuses every
    backward ("Unable to handle autograd's threading in combination with fork-based
    multiprocessing"). A throwaway child tries one tiny backward to find out: a few milliseconds.
    """
    pid = os.fork()
    if pid == 0:  # the child: report by exit code, never return into the caller's code
        code = 1
        try:
            torch.ones(1, requires_grad=True).sum().backward()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) != 0


def start_method() -> str:
    """How :func:`run` starts its processes here and now: :data:`START_METHOD`, or
    ``forkserver`` where a forked process could not run a backward pass (see
    :func:`_autograd_refuses_forks`): the processes are then forked from a server process that
    started fresh, imported torch and this module once, and never ran autograd."""
    global _FORKS_REFUSED
    if START_METHOD == "fork" and not _FORKS_REFUSED:
        _FORKS_REFUSED = _autograd_refuses_forks()   # once refused, always: autograd's threads stay
        if _FORKS_REFUSED:
            multiprocessing.set_forkserver_preload([__name__])
    return "forkserver" if START_METHOD == "fork" and _FORKS_REFUSED else START_METHOD


_FORKS_REFUSED = False


def free_port() -> int:
    """A TCP port on localhost that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank: int, worker: Callable[..., Any], world_size: int, port: int, out: str,
           kwargs: dict[str, Any]) -> None:
    """What each started process runs: join the group, run the worker, save its result, leave."""
    torch.set_num_threads(1)  # two processes on a laptop: one thread each
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world_size, timeout=datetime.timedelta(seconds=TIMEOUT_S))
    try:
        try:
            result = worker(rank, world_size, **kwargs)
        except BaseException:  # the root cause, kept apart from the other ranks' teardown errors
            (Path(out) / f"rank{rank}.error").write_text(traceback.format_exc())
            raise
        torch.save(result, Path(out) / f"rank{rank}.pt")
        dist.barrier()  # leave together: a rank that tears down early can abort the other
    finally:
        dist.destroy_process_group()
    _leave_now()  # a failure above raises as usual instead, so torch.multiprocessing reports it


def _leave_now() -> None:
    """End this rank at once, after its work, its output and the process group are done.

    A normal interpreter exit would now tear down every torch module: about 0.8 s per process
    on a laptop, which the learner waits for, and under load gloo's threads can make that
    teardown abort ("terminate called without an active exception", exit code -6), failing a
    run whose work was complete. Nothing is left to clean up, so skip the teardown.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


class WorkerFailed(RuntimeError):
    """A worker raised in one rank; the message holds that rank's traceback."""


def run(worker: Callable[..., Any], world_size: int = 2, *, timeout: float = TIMEOUT_S,
        **kwargs: Any) -> list[Any]:
    """Run ``worker(rank, world_size, **kwargs)`` in ``world_size`` new processes that form one
    gloo process group on localhost; return the list of what each rank returned.

    ``worker`` must be importable (defined in a module, not in a notebook cell). Every process
    has ended when this returns or raises: a worker's exception is raised here as
    :class:`WorkerFailed`, with the failing rank's traceback; a run longer than ``timeout``
    seconds is stopped with a ``TimeoutError``.
    """
    if not (isinstance(world_size, int) and world_size >= 1):
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    if getattr(worker, "__module__", "__main__") == "__main__":
        raise ValueError(f"{getattr(worker, '__name__', worker)!r} is defined in the notebook (or script) "
                         "itself; a process started with spawn (macOS, Windows) can only run a function it "
                         "can import from a module, so run() takes only those, on every system")
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="hooktutor-ddp-") as out:
        context = mp.start_processes(_entry, args=(worker, world_size, free_port(), out, kwargs),
                                     nprocs=world_size, join=False, start_method=start_method())
        deadline = time.monotonic() + timeout
        try:
            while not context.join(timeout=0.05):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the {world_size} processes did not finish in {timeout:g} s")
        except mp.ProcessRaisedException as exc:
            failed = sorted(Path(out).glob("rank*.error"))
            if failed:  # the worker's own error, not a rank that lost its peer
                raise WorkerFailed(f"{failed[0].stem} raised in {worker.__name__}:\n{failed[0].read_text()}") from exc
            raise
        finally:
            for process in context.processes:
                if process.is_alive():
                    process.terminate()
                process.join()
        return [torch.load(Path(out) / f"rank{rank}.pt", weights_only=False) for rank in range(world_size)]


def leftover_processes() -> list[str]:
    """The child processes of this one that are still alive (started by ``multiprocessing``)."""
    return [p.name for p in multiprocessing.active_children()]


# --- the lesson's worker ------------------------------------------------------------------------

def local_batch(rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch rank ``rank`` trains on: 8 points of ``blobs`` seeded by the rank."""
    return blobs(8, seed=rank)


def _grads(model: nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.grad.detach().clone() for name, p in model.named_parameters()}


def _deep_mlp(seed: int) -> nn.Module:
    """8 -> 512 -> 512 -> 512 -> 3: two hidden ``Linear(512, 512)`` of 1 MiB of gradients each."""
    with seeded(seed):
        return nn.Sequential(nn.Linear(8, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                             nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 3))


class Float64Head(nn.Module):
    """``MLP(seed)`` whose ``head`` computes in float64: gradients of two dtypes in one model."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        self.mlp = MLP(seed=seed)
        self.mlp.head.double()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m = self.mlp
        return m.head(m.act2(m.fc2(m.act1(m.fc1(x)))).double()).float()


class SpareHead(nn.Module):
    """``MLP(hidden=512, seed)`` and a second head that ``forward`` never calls: parameters
    without a gradient, what ``find_unused_parameters=True`` is for."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        self.mlp = MLP(hidden=512, seed=seed)
        with seeded(seed + 1):
            self.spare = nn.Linear(512, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(x)


class Swapped(nn.Module):
    """A ``spare`` layer that ``forward`` never calls (what ``find_unused_parameters=True`` is
    for), then two ``Linear(512, 512)`` registered as ``a`` then ``b`` but run ``b`` first, so
    ``a``'s gradient is complete first. The input is ``x`` repeated to width 512."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        with seeded(seed):
            self.spare = nn.Linear(4, 4, bias=False)
            self.a = nn.Linear(512, 512, bias=False)
            self.b = nn.Linear(512, 512, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.a(self.b(x.repeat(1, 64)))[:, :3]


def arrival_order(ddp: nn.Module, x: torch.Tensor, y: torch.Tensor,
                  loss_fn: Callable[..., torch.Tensor]) -> list[str]:
    """One backward pass of ``ddp``, in time: each parameter whose gradient is complete (its
    post-accumulate-grad hook) and each bucket the communication hook is handed (its index and
    the parameters it holds)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    names = {id(p): n for n, p in ddp.module.named_parameters()}
    events: list[str] = []

    def record_bucket(state, bucket):  # no annotations: DDP checks them (this module's are str)
        held = [names[id(p)] for p in bucket.parameters()]
        events.append(f"comm hook gets bucket {bucket.index()} {held}")
        return default_hooks.allreduce_hook(state, bucket)

    def complete(name):
        return lambda param: events.append(f"{name} gradient complete")

    ddp.register_comm_hook(None, record_bucket)
    handles = [p.register_post_accumulate_grad_hook(complete(n)) for n, p in ddp.module.named_parameters()
               if n != "spare.weight"]
    try:
        loss_fn(ddp(x), y).backward()
    finally:
        for handle in handles:
            handle.remove()
    return events


def record_buckets(ddp: nn.Module, x: torch.Tensor, y: torch.Tensor,
                   loss_fn: Callable[..., torch.Tensor], passes: int) -> list[list[dict[str, Any]]]:
    """Register a communication hook on ``ddp`` that records each bucket (index, numel, bytes,
    dtype, gradient shapes) and all-reduces it as DDP would; run ``passes`` backward passes on
    the same batch; return the buckets of each pass."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    buckets: list[list[dict[str, Any]]] = []

    def record_bucket(state, bucket):  # no annotations: DDP checks them (this module's are str)
        buffer = bucket.buffer()
        buckets[-1].append({"index": bucket.index(), "numel": buffer.numel(),
                            "bytes": buffer.numel() * buffer.element_size(),
                            "dtype": str(buffer.dtype),
                            "shapes": [tuple(g.shape) for g in bucket.gradients()]})
        return default_hooks.allreduce_hook(state, bucket)

    ddp.register_comm_hook(None, record_bucket)
    for _ in range(passes):  # the same batch each time
        buckets.append([])
        ddp.zero_grad(set_to_none=True)
        loss_fn(ddp(x), y).backward()
    return buckets


def sources(*functions: Callable[..., Any]) -> dict[str, str]:
    """``{name: source}`` of functions defined in a notebook, for :func:`ddp_hooks_demo`'s
    ``notebook`` argument: a spawned process cannot import a notebook's function, but it can run
    its source (a forked one could run the function itself; the source works on every system)."""
    return {fn.__name__: textwrap.dedent(inspect.getsource(fn)) for fn in functions}


def _run_source(name: str, source: str, rank: int, world_size: int) -> Any:
    """Define the notebook's function ``name`` from ``source`` here, in this rank, and call it
    as ``name(rank, world_size)``. Its names: torch, nn, dist, DistributedDataParallel, MLP and
    this module as ``distributed`` (what the lesson's cell imports)."""
    from torch.nn.parallel import DistributedDataParallel

    namespace: dict[str, Any] = {"torch": torch, "nn": nn, "dist": dist, "MLP": MLP,
                                 "DistributedDataParallel": DistributedDataParallel,
                                 "distributed": sys.modules[__name__]}
    exec(compile(source, f"<notebook: {name}>", "exec"), namespace)  # the learner's own code
    return namespace[name](rank, world_size)


def ddp_hooks_demo(rank: int, world_size: int, *, seed: int = 0,
                   notebook: dict[str, str] | None = None) -> dict[str, Any]:
    """One forward and backward of a DDP-wrapped ``MLP(seed)`` per hook experiment, in one rank.

    Returns plain data: what the module hook saw, the buckets a communication hook saw in each
    of two passes on a wider ``MLP(hidden=512)`` (one list per pass), the cap of those buckets,
    the same for other DDP settings (``bucket_variants``: the default cap and ``bucket_cap_mb=1``
    on a deeper model, ``find_unused_parameters=True``, a float64 head, ``static_graph=True`` over
    three passes, ``bucket_cap_mb_list`` where torch has it), the order in which gradients complete
    and buckets are handed over (``arrival_order``, on :class:`Swapped`), the gradients with the
    default all-reduce, with the recording hook, and with the fp16 compression hook, what
    ``capture`` and ``list_hooks`` made of the wrapped model, what a tensor hook and a
    post-accumulate-grad hook on ``head.bias`` saw (the rank's own gradient), and what each of
    the ``notebook`` functions returned (``{name: source}``, :func:`sources`), run in this rank.
    """
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel

    x, y = local_batch(rank)
    loss_fn = nn.CrossEntropyLoss()
    result: dict[str, Any] = {"rank": rank, "backend": dist.get_backend(), "world_size": dist.get_world_size()}

    # 1. plain DDP, a module hook on the wrapped layer; its gradients are the average over ranks
    ddp = DistributedDataParallel(MLP(seed=seed))
    result["names"] = [name for name, _ in ddp.named_modules()]
    seen: list[tuple[int, int]] = []
    handle = ddp.module.fc1.register_forward_hook(lambda m, args, out: seen.append((rank, out.shape[0])))
    try:
        loss_fn(ddp(x), y).backward()
    finally:
        handle.remove()
    result["hook_saw"] = seen
    result["device"] = str(next(ddp.parameters()).device)
    result["grads"] = _grads(ddp.module)

    # 2. a communication hook that records each bucket, then all-reduces it as DDP would;
    #    a wider MLP (1 MiB of gradients), buckets of 1 MiB, two backward passes
    ddp = DistributedDataParallel(MLP(hidden=512, seed=seed), bucket_cap_mb=1)
    buckets = record_buckets(ddp, x, y, loss_fn, passes=2)  # the buckets of each pass
    result["buckets"], result["bucket_cap_bytes"] = buckets, ddp.bucket_bytes_cap
    result["grads_comm_hook"] = _grads(ddp.module)

    # 2b. the same recording under other settings: the default cap on a deeper model (the first
    #     rebuilt bucket has a cap of its own), find_unused_parameters=True on a model with an
    #     unused head (no one-bucket first pass, no rebuild), two dtypes (never in one bucket),
    #     static_graph=True (rebuilt after the second pass), per-bucket caps (where torch has them)
    variants = {"deep, default cap": (_deep_mlp(seed), {}),
                "deep, bucket_cap_mb=1": (_deep_mlp(seed), {"bucket_cap_mb": 1}),
                "find_unused_parameters=True": (SpareHead(seed),
                                                {"bucket_cap_mb": 1, "find_unused_parameters": True}),
                "float64 head": (Float64Head(seed), {"bucket_cap_mb": 1}),
                "static_graph=True": (_deep_mlp(seed), {"bucket_cap_mb": 1, "static_graph": True})}
    if "bucket_cap_mb_list" in inspect.signature(DistributedDataParallel).parameters:  # torch 2.13 has it
        variants["bucket_cap_mb_list=[1, 1]"] = (_deep_mlp(seed), {"bucket_cap_mb_list": [1, 1]})
    result["bucket_variants"] = {}
    for label, (model, options) in variants.items():
        ddp = DistributedDataParallel(model, **options)
        passes = record_buckets(ddp, x, y, loss_fn, passes=3 if options.get("static_graph") else 2)
        result["bucket_variants"][label] = {"cap": ddp.bucket_bytes_cap, "passes": passes}
    # 2c. the order DDP hands the buckets over: by index, each once every lower one has gone,
    #     also when a higher one was complete first (a layout cut before the gradients arrived)
    ddp = DistributedDataParallel(Swapped(seed), bucket_cap_mb=1, find_unused_parameters=True)
    result["arrival_order"] = arrival_order(ddp, x, y, loss_fn)

    # 3. the built-in fp16 compression hook
    ddp = DistributedDataParallel(MLP(seed=seed))
    ddp.register_comm_hook(dist.group.WORLD, default_hooks.fp16_compress_hook)
    loss_fn(ddp(x), y).backward()
    result["grads_fp16"] = _grads(ddp.module)

    # 4. hooktutor's helpers on the wrapped model: names with and without the "module." prefix
    ddp = DistributedDataParallel(MLP(seed=seed))
    with capture(ddp, ["fc1", "module.head"], grads=True) as rec:
        loss_fn(ddp(x), y).backward()
        during = list_hooks(ddp, include_global=False)
        result["hooks_during_capture"] = [(r.path, r.kind) for r in during]
        result["where_fc1"] = len(during.where(path="fc1"))
    result["captured"] = {name: tuple(rec[name].shape) for name in rec.names}
    result["captured_grad_fc1"] = rec.grads["fc1"]
    result["hooks_after_capture"] = len(list_hooks(ddp, include_global=False))

    # 5. hooks on a parameter under DDP: they fire with this rank's own gradient, before the
    #    all-reduce writes the average into .grad at the end of backward()
    ddp = DistributedDataParallel(MLP(seed=seed))
    bias, saw = ddp.module.head.bias, {}

    def on_gradient(grad):
        saw["tensor hook"] = grad.detach().clone()

    def on_accumulated(param):
        saw["post-accumulate-grad hook"] = param.grad.detach().clone()

    handles = [bias.register_hook(on_gradient), bias.register_post_accumulate_grad_hook(on_accumulated)]
    try:
        loss_fn(ddp(x), y).backward()
    finally:
        for h in handles:
            h.remove()
    result["parameter_hooks_saw"] = saw
    result["grad_after_backward"] = bias.grad.detach().clone()

    # 6. the notebook's own experiments (``notebook``: their sources, see :func:`sources`)
    result["notebook"] = {name: _run_source(name, source, rank, world_size)
                          for name, source in (notebook or {}).items()}
    return result


def fail_in_rank(rank: int, world_size: int, *, failing: int = 1) -> int:
    """A worker whose rank ``failing`` raises after joining the group: what :func:`run` does then."""
    if rank == failing:
        raise ValueError(f"rank {rank} failed on purpose")
    return rank


def main() -> int:
    """Under ``torchrun``: join the group torchrun describes (RANK, WORLD_SIZE, MASTER_ADDR,
    MASTER_PORT) with gloo, run :func:`ddp_hooks_demo` on the CPU (also where there are GPUs),
    print one line per rank, leave the group."""
    if "RANK" not in os.environ:
        print("start me with torchrun, for example: torchrun --standalone --nproc-per-node=2 "
              "-m hooktutor.distributed", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    try:
        result = ddp_hooks_demo(dist.get_rank(), dist.get_world_size())
        sys.stdout.write(f"rank {result['rank']} of {result['world_size']} ({result['backend']} on "
                         f"{result['device']}): buckets per pass {[len(b) for b in result['buckets']]}, "
                         f"module hook fired {len(result['hook_saw'])}x, "
                         f"captured {sorted(result['captured'])}\n")  # one write: ranks share the terminal
        sys.stdout.flush()
        dist.barrier()
    finally:
        dist.destroy_process_group()
    _leave_now()
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
