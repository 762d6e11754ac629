"""FSDP2 on one CPU: ``fully_shard`` on two gloo processes, the hooks it installs, what yours see.

Taught in ``13_hooks_at_work.ipynb`` (section 2). ``fully_shard`` (FSDP2, torch 2.6 and newer)
splits every parameter of a module into one shard per process and keeps only that shard between
calls. It is built from module hooks: a forward pre-hook gathers the full parameters before the
module runs, a forward hook frees them again, and hooks in the backward pass gather them for
the gradients and reduce-scatter those. :func:`fsdp_hooks_demo` runs in every rank of
:func:`hooktutor.distributed.run` (which starts the processes: a worker must live in a module,
not in a notebook cell) and returns plain data about one forward and backward of a sharded
``MLP``: the hooks FSDP2 installed as :func:`hooktutor.list_hooks` lists them, what your hooks
saw, the gradient shard of each rank, and what happens when FSDP2's hooks are taken away.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import nn

from .distributed import local_batch
from .inventory import list_hooks, remove_hooks
from .models import MLP


def describe(tensor: torch.Tensor | None) -> str:
    """``"DTensor (16, 8), this rank holds (8, 8)"``, ``"Parameter (16, 8)"`` or ``"None"``."""
    if tensor is None:
        return "None"
    to_local = getattr(tensor, "to_local", None)
    if to_local is not None:  # a DTensor: its global shape, and the shard this process holds
        return f"{type(tensor).__name__} {tuple(tensor.shape)}, this rank holds {tuple(to_local().shape)}"
    return f"{type(tensor).__name__} {tuple(tensor.shape)}"


def sharded_mlp(seed: int = 0) -> nn.Module:
    """``MLP(seed=seed)`` with ``fully_shard`` on each Linear, then on the whole model (the usual
    recipe: one FSDP unit per block, and the root). Call it inside a process group."""
    from torch.distributed.fsdp import fully_shard

    model = MLP(seed=seed)
    for layer in (model.fc1, model.fc2, model.head):
        fully_shard(layer)
    fully_shard(model)
    return model


def fsdp_hooks_demo(rank: int, world_size: int, *, seed: int = 0) -> dict[str, Any]:
    """One rank of the lesson's experiment (run it with ``distributed.run``); returns plain data.

    ``fsdp_rows``: ``(module, kind of hook, owner)`` of every hook FSDP2 installed;
    ``saw``: what each of your hooks saw of the weight of its layer (forward pre-hooks and
    forward hooks on ``fc1``, registered after ``fully_shard`` with and without ``prepend=True``;
    full backward hooks on ``fc2`` and on ``fc1``, whose input needs no grad) or of the gradient
    of ``fc1.weight`` (a tensor hook and a post-accumulate-grad hook on the parameter itself);
    ``grad``: ``fc1.weight.grad`` as this rank holds it (its shard) and as all ranks hold it
    together (``full_tensor()``); ``removed``: what ``remove_hooks(model)`` listed, removed and
    left, with one hook of yours on ``fc2``;
    ``cleared``: the error of a forward after every hook dict is cleared by hand.
    """
    torch.manual_seed(seed)
    model = sharded_mlp(seed)
    result: dict[str, Any] = {"rank": rank, "outside": describe(model.fc1.weight)}
    result["fsdp_rows"] = [(row.path, row.kind, row.owner_label) for row in list_hooks(model)]

    saw: dict[str, str] = {}

    def note(key: str, value: str) -> None:
        saw.setdefault(key, value)   # the first call's view

    fc1, fc2 = model.fc1, model.fc2
    weight = fc1.weight              # the sharded parameter, as the model holds it between calls
    handles = [
        fc1.register_forward_pre_hook(lambda m, args: note("forward pre-hook", describe(m.weight))),
        fc1.register_forward_pre_hook(lambda m, args: note("forward pre-hook, prepend=True",
                                                           describe(m.weight)), prepend=True),
        fc1.register_forward_hook(lambda m, args, out: note("forward hook", describe(m.weight))),
        fc1.register_forward_hook(lambda m, args, out: note("forward hook, prepend=True",
                                                            describe(m.weight)), prepend=True),
        fc2.register_full_backward_hook(lambda m, gin, gout: note("full backward hook on fc2",
                                                                   describe(m.weight))),
        fc1.register_full_backward_hook(lambda m, gin, gout: note("full backward hook on fc1",
                                                                   describe(m.weight))),
        weight.register_hook(lambda grad: note("tensor hook on the parameter", describe(grad))),
        weight.register_post_accumulate_grad_hook(
            lambda p: note("post-accumulate-grad hook", describe(p.grad))),
    ]
    x, y = local_batch(rank)         # a batch as a data loader gives it: it needs no grad
    try:
        with warnings.catch_warnings():  # fc1's full backward hook: its input needs no grad
            warnings.filterwarnings("ignore", "Full backward hook is firing")
            nn.functional.cross_entropy(model(x), y).backward()
    finally:
        for handle in handles:
            handle.remove()
    result["saw"] = saw
    result["grad"] = {"this rank": weight.grad.to_local().clone(),
                      "all ranks": weight.grad.full_tensor().clone(), "describe": describe(weight.grad)}
    mine = fc2.register_forward_hook(lambda m, args, out: None)    # one hook of yours
    listed = list_hooks(model)
    removed = remove_hooks(model)
    result["removed"] = {"listed": len(listed), "yours listed": sum(r.owner == "user" for r in listed),
                         "removed": int(removed), "left": len(removed.left),
                         "left owners": sorted({row.owner_label for row in removed.left}),
                         "yours gone": mine.id not in fc2._forward_hooks}
    model.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()   # FSDP2's hooks are still there: it works
    result["after remove_hooks"] = describe(model.fc1.weight.grad)

    cleared = sharded_mlp(seed)
    for module in cleared.modules():   # what "remove every hook" snippets do
        module._forward_pre_hooks.clear()
        module._forward_hooks.clear()
    try:
        cleared(x)
        result["cleared"] = "no error"
    except Exception as exc:  # the error a learner meets; its type and message go to the lesson
        result["cleared"] = f"{type(exc).__name__}: {exc}"
    return result
