"""FSDP2 on two gloo processes (hooktutor/fsdp.py, 13_hooks_at_work): list_hooks and remove_hooks
recognise fully_shard's hooks as PyTorch's, the lesson's rule on what a hook sees holds on set-ups
other than the lesson's (a unit that keeps its weight after forward, layers inside a unit, a unit
inside a unit, a LayerNorm, hooks registered before fully_shard), and fsdp.run runs a notebook's
worker from its source."""

from __future__ import annotations

import pickle
import types
import warnings

import pytest
import torch
import torch.distributed as dist
from torch import nn

from hooktutor import distributed, fsdp
from hooktutor.course.claims import version_tuple
from hooktutor.inventory import hook_owner, list_hooks, remove_hooks
from hooktutor.models import MLP, seeded

pytestmark = pytest.mark.skipif(version_tuple(torch.__version__) < (2, 7, 0),
                                reason="fully_shard runs on a CPU from torch 2.7 on (lesson 13's floor)")

FULL = "Parameter"


def _keep(saw: dict, key: str, value: object) -> None:
    """Note ``value`` under ``key`` once; return None (what a hook returns would replace its input or gradient)."""
    saw.setdefault(key, value)


def _nested(seed: int = 0) -> nn.Module:
    """block (Linear, LayerNorm, inner unit (Linear, ReLU, Linear)), ReLU, head; unsharded."""
    with seeded(seed):
        return nn.Sequential(
            nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16),
                          nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16))),
            nn.ReLU(), nn.Linear(16, 3))


def _views(module: nn.Module, label: str, saw: dict, param: str = "weight") -> list:
    """Pre-hooks and forward hooks, plain and prepended, that note what ``module.<param>`` is."""
    def note(key, m):
        _keep(saw, f"{label}: {key}", fsdp.describe(m.get_parameter(param)))
    return [module.register_forward_pre_hook(lambda m, a: note("pre", m)),
            module.register_forward_pre_hook(lambda m, a: note("pre, prepend", m), prepend=True),
            module.register_forward_hook(lambda m, a, o: note("forward", m)),
            module.register_forward_hook(lambda m, a, o: note("forward, prepend", m), prepend=True)]


def rules_worker(rank: int, world_size: int) -> dict:
    """The lesson's rule on other set-ups than its own, in one step of each model."""
    from torch.distributed.fsdp import fully_shard

    saw: dict = {}
    # 1. the lesson's MLP: fc1 a unit of its own; fc2 a unit that keeps its weight after forward
    mlp = MLP(seed=0)
    fully_shard(mlp.fc1)
    fully_shard(mlp.fc2, reshard_after_forward=False)
    fully_shard(mlp.head)
    fully_shard(mlp)
    handles = _views(mlp.fc1, "fc1", saw) + _views(mlp.fc2, "fc2 kept", saw)
    # 1b. hooks registered BEFORE fully_shard: FSDP2 appends its freeing forward hook after them
    early = MLP(seed=0)
    handles += _views(early.fc1, "fc1 hooked before", saw)
    fully_shard(early.fc1)
    fully_shard(early)
    # 2. a block unit holding a Linear, a LayerNorm and a unit of its own (nested fully_shard)
    nested = _nested()
    block, inner = nested[0], nested[0][2]
    fully_shard(inner)
    fully_shard(block)
    fully_shard(nested)
    handles += (_views(block[0], "block Linear", saw) + _views(block[1], "block LayerNorm", saw)
                + _views(inner, "inner unit", saw, param="0.weight") + _views(inner[2], "inner Linear", saw)
                + _views(nested, "root", saw, param="2.weight"))
    handles.append(block[0].weight.register_hook(lambda g: _keep(saw, "sharded weight's hook", "ran")))

    # 3. modules passed to fully_shard as one list: one unit, freed only after its last module ran
    grouped = MLP(seed=0)
    fully_shard([grouped.fc1, grouped.fc2])
    fully_shard(grouped)
    handles += _views(grouped.fc1, "grouped fc1", saw) + _views(grouped.fc2, "grouped fc2", saw)
    # 4. the gathered weight a pre-hook sees: the same Parameter object on every step (a tensor hook
    # put on it in every call would pile up: lesson 13's `if not hooked`)
    used = saw.setdefault("fc1's gathered weight, by step", [])
    handles.append(mlp.fc1.register_forward_pre_hook(lambda m, a: used.append(id(m.weight))))

    def hook_gathered(module, args):
        if "gathered" not in saw:
            saw["gathered"] = module.weight.register_hook(lambda g: _keep(saw, "gathered grad", g.clone()))
    handles.append(block[0].register_forward_pre_hook(hook_gathered))
    x, y = distributed.local_batch(rank)
    try:
        for model in (mlp, mlp, early, nested, grouped):
            nn.functional.cross_entropy(model(x), y).backward()
    finally:
        for handle in handles + [saw.pop("gathered")]:
            handle.remove()
    return saw


def what_fc1_sees(rank: int, world_size: int) -> dict:
    """The lesson's experiment on fc1 of fsdp.sharded_mlp: hooks of every kind, the gradient's shard."""
    model, saw = fsdp.sharded_mlp(seed=0), {}
    rows = [(row.path, row.kind, row.owner_label) for row in list_hooks(model)]
    weight = model.fc1.weight
    handles = _views(model.fc1, "fc1", saw) + [
        model.fc2.register_full_backward_hook(lambda m, gi, go: _keep(saw, "bwd fc2", fsdp.describe(m.weight))),
        model.fc1.register_full_backward_hook(lambda m, gi, go: _keep(saw, "bwd fc1", fsdp.describe(m.weight))),
        weight.register_hook(lambda g: _keep(saw, "tensor hook", "ran")),
        weight.register_post_accumulate_grad_hook(lambda p: _keep(saw, "post-acc", fsdp.describe(p.grad)))]
    x, y = distributed.local_batch(rank)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Full backward hook is firing")
            nn.functional.cross_entropy(model(x), y).backward()
    finally:
        for handle in handles:
            handle.remove()
    mine = model.fc2.register_forward_hook(lambda m, args, out: None)
    listed, removed = list_hooks(model), remove_hooks(model)
    model.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    return {"rank": rank, "rows": rows, "saw": saw, "shard": weight.grad.to_local().clone(),
            "gathered": weight.grad.full_tensor().clone(),
            "removed": {"listed": len(listed), "yours": sum(r.owner == "user" for r in listed),
                        "removed": int(removed), "left": len(removed.left),
                        "left owners": sorted({r.owner_label for r in removed.left}),
                        "yours gone": mine.id not in model.fc2._forward_hooks},
            "after remove_hooks": fsdp.describe(model.fc1.weight.grad)}


@pytest.fixture(scope="module")
def ranks():
    results = distributed.run(what_fc1_sees, 2)
    assert distributed.leftover_processes() == []   # every process has ended
    assert not dist.is_initialized()                # and this process never joined a group
    return results


@pytest.fixture(scope="module")
def rules():
    return distributed.run(rules_worker, 2)


def test_list_hooks_labels_every_hook_of_fully_shard_pytorch_fsdp2_in_every_rank(ranks):
    for r in ranks:
        rows = r["rows"]
        assert rows and {owner for _, _, owner in rows} == {"pytorch (FSDP2)"}
        # a pre-hook gathers, a forward hook frees: on each sharded module and on the root
        for path in ("<root>", "fc1", "fc2", "head"):
            assert {"forward_pre", "forward"} <= {kind for p, kind, _ in rows if p == path}


def test_remove_hooks_keeps_fsdp2_hooks_and_the_model_still_trains(ranks):
    for r in ranks:
        removed = r["removed"]   # the worker put one hook of its own on fc2 first
        assert removed["yours"] == removed["removed"] == 1 and removed["yours gone"]
        assert removed["left owners"] == ["pytorch (FSDP2)"]
        assert removed["left"] == removed["listed"] - 1 > 0
        assert r["after remove_hooks"].startswith("DTensor")


def test_what_hooks_on_the_module_passed_to_fully_shard_see(ranks):
    for r in ranks:
        saw, shard = r["saw"], "DTensor (16, 8), this rank holds (8, 8)"
        assert saw["fc1: pre"] == saw["fc1: forward, prepend"] == "Parameter (16, 8)"
        assert saw["fc1: pre, prepend"] == saw["fc1: forward"] == shard
        assert saw["bwd fc2"] == "Parameter (16, 16)"
        assert saw["bwd fc1"] == saw["post-acc"] == shard
        assert "tensor hook" not in saw


def test_the_rule_on_other_set_ups(rules):
    for saw in rules:
        # the lesson's rule on the module passed to fully_shard, on a unit nested in a block too
        for unit in ("fc1", "inner unit"):
            assert saw[f"{unit}: pre"].startswith(FULL) and saw[f"{unit}: forward, prepend"].startswith(FULL)
            assert saw[f"{unit}: pre, prepend"].startswith("DTensor")
            assert saw[f"{unit}: forward"].startswith("DTensor")
        # hooks registered before fully_shard: FSDP2's freeing forward hook comes after a forward hook,
        # its gathering pre-hook (prepended) before every pre-hook: each of them sees the full weight
        for kind in ("pre", "pre, prepend", "forward", "forward, prepend"):
            assert saw[f"fc1 hooked before: {kind}"] == "Parameter (16, 8)", (kind, saw[f"fc1 hooked before: {kind}"])
        # a unit that keeps its weight after forward: its forward hook sees the full weight
        assert saw["fc2 kept: forward"] == "Parameter (16, 16)"
        assert saw["fc2 kept: pre, prepend"].startswith("DTensor")
        # the outermost unit is not freed after its forward (reshard_after_forward's default for the root)
        assert saw["root: forward"] == "Parameter (3, 16)"
        # a list given to fully_shard is one unit: lesson 13 scopes its per-module rules to a module
        # passed alone; here a forward hook after fully_shard on the first module sees the full weight
        assert saw["grouped fc1: forward"] == "Parameter (16, 8)", saw["grouped fc1: forward"]
        assert saw["grouped fc2: pre, prepend"] == "Parameter (16, 16)", saw["grouped fc2: pre, prepend"]
        steps = saw["fc1's gathered weight, by step"]
        assert len(steps) == 2 and steps[0] == steps[1], steps   # one Parameter, gathered into again
        # layers inside a unit (a Linear, a LayerNorm, a Linear of a unit inside a unit): full, every hook
        for layer in ("block Linear", "block LayerNorm", "inner Linear"):
            for kind in ("pre", "pre, prepend", "forward", "forward, prepend"):
                assert saw[f"{layer}: {kind}"].startswith(FULL), (layer, kind, saw[f"{layer}: {kind}"])


def test_a_tensor_hook_on_the_gathered_weight_sees_this_ranks_own_full_gradient(rules):
    for rank, saw in enumerate(rules):
        assert "sharded weight's hook" not in saw
        alone = _nested()
        x, y = distributed.local_batch(rank)
        nn.functional.cross_entropy(alone(x), y).backward()
        # the rank's gradient before the reduce-scatter: its own batch's, not the average
        assert torch.allclose(saw["gathered grad"], alone[0][0].weight.grad, rtol=1e-5, atol=1e-7)


def test_each_rank_keeps_its_rows_of_the_averaged_gradient(ranks):
    """The average over the ranks since torch 2.9; on 2.7 and 2.8 FSDP2 over gloo keeps the sum
    (fsdp2-cpu-averages-gradients, pytorch/pytorch#162338)."""
    from hooktutor.course import claims

    grads = []
    for rank in (0, 1):
        model = MLP(seed=0)
        x, y = distributed.local_batch(rank)
        nn.functional.cross_entropy(model(x), y).backward()
        grads.append(model.fc1.weight.grad)
    both = grads[0] + grads[1]
    reduced = both / 2 if claims.expected("fsdp2-cpu-averages-gradients") else both
    for r in ranks:
        rows = slice(8 * r["rank"], 8 * r["rank"] + 8)
        assert torch.allclose(r["shard"], reduced[rows], rtol=1e-5, atol=1e-7)
        assert torch.allclose(r["gathered"], reduced, rtol=1e-5, atol=1e-7)


LABEL = "from the notebook"


def _as_notebooks(fn: types.FunctionType) -> types.FunctionType:
    """``fn`` as if it were defined in a notebook (module ``__main__``): fsdp.run then sends its source."""
    fn.__module__ = "__main__"
    return fn


def _notebook_helper(rank):
    return f"{LABEL} {rank}"


def _notebook_worker(rank, world_size):
    model = fsdp.sharded_mlp(seed=0)
    seen = []
    handle = model.fc1.register_forward_pre_hook(lambda m, args: seen.append(fsdp.describe(m.weight)))
    try:
        model(distributed.local_batch(rank)[0])
    finally:
        handle.remove()
    return _notebook_helper(rank), seen, world_size


def test_fsdp_run_sends_a_notebook_function_its_helpers_and_plain_values_by_source():
    _as_notebooks(_notebook_helper)
    worker = _as_notebooks(_notebook_worker)
    try:
        got = fsdp.run(worker, 2)
    finally:
        _notebook_helper.__module__ = _notebook_worker.__module__ = __name__
    assert got == [(f"{LABEL} {r}", ["Parameter (16, 8)"], 2) for r in (0, 1)]


def test_what_fsdp_run_sends_pickles_as_a_spawned_process_needs_it():
    """macOS and Windows spawn the processes: what they receive is pickled, so it must be plain data."""
    _as_notebooks(_notebook_helper)
    worker = _as_notebooks(_notebook_worker)
    try:
        sources, imports, values = {}, {}, {}
        fsdp._pack(worker, sources, imports, values)
    finally:
        _notebook_helper.__module__ = _notebook_worker.__module__ = __name__
    assert set(sources) == {"_notebook_worker", "_notebook_helper"} and values == {"LABEL": LABEL}
    assert imports["fsdp"] == ("module", "hooktutor.fsdp")
    again = pickle.loads(pickle.dumps((sources, imports, values)))
    assert fsdp._from_source.__module__ == "hooktutor.fsdp" and again == (sources, imports, values)


_MADE_HERE = [1, 2]


def _uses_a_list(rank, world_size):
    return _MADE_HERE


def test_fsdp_run_refuses_a_notebook_object_it_cannot_send():
    worker = _as_notebooks(_uses_a_list)
    try:
        with pytest.raises(ValueError, match="_MADE_HERE"):
            fsdp.run(worker, 2)
    finally:
        worker.__module__ = __name__


def test_the_fsdp2_label_goes_to_torch_fully_shard_modules_only():
    def fake(module_name):
        def hook(*args):
            return None
        hook.__module__ = module_name
        return hook

    assert hook_owner(fake("torch.distributed.fsdp._fully_shard._fsdp_state")) == ("pytorch", "FSDP2")
    assert hook_owner(fake("torch.distributed._composable.fsdp._fsdp_state")) == ("pytorch", "FSDP2")
    assert hook_owner(fake("torch.distributed.fsdp._fully_shard_lookalike"))[1] != "FSDP2"
    assert hook_owner(fake("my_project.fsdp")) == ("user", "")
