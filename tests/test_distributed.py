"""Two gloo processes on this CPU: DDP and its hooks, capture and list_hooks on the wrapped model,
and no process or process group left behind (hooktutor/distributed.py, 08_training_hooks)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from hooktutor import distributed
from hooktutor.models import MLP

ROOT = Path(__file__).resolve().parent.parent


def parameter_hooks(rank, world_size):
    """Lesson 08's notebook experiment, as the lesson writes it: it runs in every rank from its
    source (distributed.sources), with the names the worker gives it."""
    ddp = DistributedDataParallel(MLP(seed=0))
    bias, saw = ddp.module.head.bias, {}

    def on_gradient(grad):
        saw["tensor hook"] = grad.detach().clone()

    def on_accumulated(param):
        saw["post-accumulate-grad hook"] = param.grad.detach().clone()

    x, y = distributed.local_batch(rank)
    handles = [bias.register_hook(on_gradient), bias.register_post_accumulate_grad_hook(on_accumulated)]
    try:
        nn.functional.cross_entropy(ddp(x), y).backward()
    finally:
        for handle in handles:
            handle.remove()
    return {"saw": saw, "grad": bias.grad.detach().clone()}


@pytest.fixture(scope="module")
def ranks():
    results = distributed.run(distributed.ddp_hooks_demo, 2, notebook=distributed.sources(parameter_hooks))
    assert distributed.leftover_processes() == []  # every process has ended
    assert not dist.is_initialized()  # and this process never joined a group
    return results


def local_grads(rank: int, hidden: int = 16) -> dict[str, torch.Tensor]:
    model = MLP(hidden=hidden, seed=0)
    x, y = distributed.local_batch(rank)
    nn.functional.cross_entropy(model(x), y).backward()
    return {name: p.grad for name, p in model.named_parameters()}


def test_each_rank_ran_on_the_cpu_with_gloo_and_its_module_hook_fired(ranks):
    assert [r["rank"] for r in ranks] == [0, 1]
    for r in ranks:
        assert (r["backend"], r["world_size"], r["device"]) == ("gloo", 2, "cpu")
        assert r["hook_saw"] == [(r["rank"], 8)]  # the hook on the wrapped layer, in its own rank


def test_ddp_gradients_are_the_average_of_the_ranks_local_gradients(ranks):
    g0, g1 = local_grads(0), local_grads(1)
    for name in g0:
        assert torch.equal(ranks[0]["grads"][name], ranks[1]["grads"][name])
        # all-reduce sums in another order than (g0 + g1) / 2 may: a float32 rounding, 1e-6 relative
        assert torch.allclose(ranks[0]["grads"][name], (g0[name] + g1[name]) / 2, rtol=1e-5, atol=1e-7)


def test_the_comm_hook_sees_every_gradient_once_per_pass_and_changes_nothing(ranks):
    r = ranks[0]
    params = dict(MLP(hidden=512, seed=0).named_parameters())
    assert len(r["buckets"]) == 2  # two passes
    for buckets in r["buckets"]:
        shapes = sorted(s for b in buckets for s in b["shapes"])
        assert shapes == sorted(tuple(p.shape) for p in params.values())
        assert sum(b["numel"] for b in buckets) == sum(p.numel() for p in params.values())
        assert [b["index"] for b in buckets] == list(range(len(buckets)))
    g0, g1 = local_grads(0, hidden=512), local_grads(1, hidden=512)
    for name, grad in r["grads_comm_hook"].items():
        assert torch.allclose(grad, (g0[name] + g1[name]) / 2, rtol=1e-5, atol=1e-7)


def test_one_bucket_on_the_first_pass_then_buckets_that_fill_past_the_cap(ranks):
    first, second = ranks[0]["buckets"]
    cap = ranks[0]["bucket_cap_bytes"]
    assert cap == 2**20  # bucket_cap_mb=1
    assert len(first) == 1  # all gradients in one bucket, whatever the cap
    assert len(second) == 2  # rebuilt: the 1 MiB layer fc2 closes the first bucket
    assert all(b["bytes"] >= cap for b in second[:-1]) and second[0]["bytes"] > cap
    assert (3, 512) in second[0]["shapes"] and (512, 8) in second[-1]["shapes"]  # last layer first
    assert ranks[1]["buckets"] == ranks[0]["buckets"]


def test_the_first_rebuilt_bucket_has_a_cap_of_its_own_by_default(ranks):
    mib = 2**20
    variants = ranks[0]["bucket_variants"]
    default, capped = variants["deep, default cap"], variants["deep, bucket_cap_mb=1"]
    assert default["cap"] == 25 * mib and capped["cap"] == mib
    assert [len(p) for p in default["passes"]] == [1, 2]  # not one 2 MiB bucket, under a 25 MiB cap
    first, later = default["passes"][1]
    assert mib <= first["bytes"] < 2 * mib and later["bytes"] > mib  # 1 MiB for the first only
    assert [len(p) for p in capped["passes"]] == [1, 3]
    assert all(mib <= b["bytes"] < 2 * mib for b in capped["passes"][1][:-1])
    assert ranks[1]["bucket_variants"] == variants


def test_find_unused_parameters_buckets_from_the_start_and_dtypes_never_share_a_bucket(ranks):
    variants = ranks[0]["bucket_variants"]
    unused = variants["find_unused_parameters=True"]["passes"]
    assert len(unused[0]) == 2 and unused[1] == unused[0]  # no one-bucket first pass, no rebuild
    assert (3, 512) in unused[0][0]["shapes"] and (512, 512) in unused[0][1]["shapes"]
    model = distributed.SpareHead(seed=0)
    assert sum(b["numel"] for b in unused[0]) == sum(p.numel() for p in model.parameters())
    for passes in variants["float64 head"]["passes"]:
        assert sorted(b["dtype"] for b in passes) == ["torch.float32", "torch.float64"]
    (float64,) = [b for b in variants["float64 head"]["passes"][0] if b["dtype"] == "torch.float64"]
    assert sorted(float64["shapes"]) == [(3,), (3, 16)]  # the head's gradients, alone


def test_static_graph_rebuilds_after_the_second_pass_and_per_bucket_caps_cut_the_first(ranks):
    import inspect

    variants = ranks[0]["bucket_variants"]
    static = variants["static_graph=True"]["passes"]
    assert [len(p) for p in static] == [1, 1, 3] and static[2] == variants["deep, bucket_cap_mb=1"]["passes"][1]
    has_list = "bucket_cap_mb_list" in inspect.signature(DistributedDataParallel).parameters
    assert ("bucket_cap_mb_list=[1, 1]" in variants) == has_list
    if has_list:  # cut by size in the first pass, rebuilt in arrival order after it
        listed = variants["bucket_cap_mb_list=[1, 1]"]["passes"]
        assert len(listed[0]) > 1 and listed[1] == variants["deep, bucket_cap_mb=1"]["passes"][1]


def test_buckets_are_handed_over_in_index_order_not_when_complete(ranks):
    order = ranks[0]["arrival_order"]
    assert order == ["a.weight gradient complete", "b.weight gradient complete",
                     "comm hook gets bucket 0 ['b.weight']",
                     "comm hook gets bucket 1 ['spare.weight', 'a.weight']"]
    assert ranks[1]["arrival_order"] == order


def test_the_counting_allreduce_check_sees_one_bucket_then_several():
    import importlib

    # the module, not the Exercise that the package exports under the same name
    ex = importlib.import_module("hooktutor.exercises.training_hooks.counting_allreduce")

    source = ex.answer_source(ex.counting_allreduce)
    for dtype in (torch.float32, torch.float64):
        ranks = distributed.run(ex.ddp_worker, 2, source=source, name="counting_allreduce", dtype=dtype,
                                passes=2, bucket_cap_mb=ex.BUCKET_CAP_MB)
        truth = ranks[0]["truth"]
        assert [i for i, _ in truth] == [0, 0, 1], (dtype, truth)  # pass 1: one; pass 2: two
        assert ranks[0]["state"] == truth


def test_the_counting_allreduce_check_says_when_it_ran_ddp_a_second_time(monkeypatch):
    import importlib

    from hooktutor.exercises.training_hooks import counting_allreduce as exercise

    module = importlib.import_module("hooktutor.exercises.training_hooks.counting_allreduce")
    calls = []

    def hangs(*args, **kwargs):
        calls.append(kwargs.get("timeout"))
        raise TimeoutError("the 2 processes did not finish in 10 s")

    monkeypatch.setattr(module.distributed, "run", hangs)
    with pytest.warns(module.RetriedRun, match="did not end .TimeoutError: the 2 processes .*ran once more"):
        report = exercise.check(exercise.reference)
    assert len(calls) == 2, "a run that did not end is tried once more, never more"
    assert not report.passed and "a run that ends" in report.text


def test_fp16_compression_rounds_the_gradients_to_half_precision(ranks):
    for name, g in ranks[0]["grads_fp16"].items():
        exact = ranks[0]["grads"][name]
        assert torch.equal(g, g.half().float())  # every value is a float16 value
        assert torch.allclose(g, exact, rtol=2e-3, atol=1e-4)  # float16 keeps 11 bits: 5e-4 relative
    assert any(not torch.equal(ranks[0]["grads_fp16"][n], ranks[0]["grads"][n]) for n in ranks[0]["grads"])


def test_capture_and_list_hooks_take_layer_names_with_or_without_the_module_prefix(ranks):
    for r in ranks:
        assert r["names"][:3] == ["", "module", "module.fc1"]
        assert r["captured"] == {"fc1": (8, 16), "module.head": (8, 3)}
        assert sorted(r["hooks_during_capture"]) == [("module.fc1", "forward"), ("module.head", "forward")]
        assert r["where_fc1"] == 1
        assert r["hooks_after_capture"] == 0
        assert r["captured_grad_fc1"].shape == (8, 16)


def test_a_failing_rank_is_raised_here_and_leaves_no_process():
    with pytest.raises(distributed.WorkerFailed, match="(?s)rank1 raised in fail_in_rank.*rank 1 failed on purpose"):
        distributed.run(distributed.fail_in_rank, 2)
    assert distributed.leftover_processes() == []


@pytest.mark.skipif(distributed.START_METHOD != "fork", reason="processes are spawned here anyway")
def test_processes_are_forked_unless_a_forked_child_could_not_run_a_backward(monkeypatch, in_a_process_of_its_own):
    # a fresh process (this one may have compiled already): an eager backward keeps forks usable
    out = in_a_process_of_its_own("""
import torch
from hooktutor import distributed
torch.ones(2, requires_grad=True).sum().backward()
print(distributed._autograd_refuses_forks(), distributed.start_method())
""")
    assert out.split()[-2:] == ["False", "fork"]
    # after a backward through a compiled model torch 2.15 refuses backward in forked children
    monkeypatch.setattr(distributed, "_FORKS_REFUSED", False)   # put back after the test
    monkeypatch.setattr(distributed, "_autograd_refuses_forks", lambda: True)
    assert distributed.start_method() == "forkserver"


def test_a_worker_defined_in_main_is_refused_with_the_reason():
    def worker(rank, world_size):
        return rank
    worker.__module__ = "__main__"
    with pytest.raises(ValueError, match="can only run a function it can import"):
        distributed.run(worker, 2)


def test_the_torchrun_command_of_the_lesson_starts_the_same_worker():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                             "-m", "hooktutor.distributed"], capture_output=True, text=True, env=env, cwd=ROOT,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = sorted(line for line in result.stdout.splitlines() if line.startswith("rank "))
    assert lines == [f"rank {r} of 2 (gloo on cpu): buckets per pass [1, 2], module hook fired 1x, "
                     "captured ['fc1', 'module.head']" for r in (0, 1)]


def test_a_notebook_function_runs_in_every_rank_from_its_source_like_the_packages_own(ranks):
    for r in ranks:
        mine = r["notebook"]["parameter_hooks"]
        assert torch.equal(mine["grad"], r["grad_after_backward"])
        assert mine["saw"].keys() == r["parameter_hooks_saw"].keys()
        assert all(torch.equal(mine["saw"][k], r["parameter_hooks_saw"][k]) for k in mine["saw"])
    assert not torch.equal(ranks[0]["notebook"]["parameter_hooks"]["saw"]["tensor hook"],
                           ranks[1]["notebook"]["parameter_hooks"]["saw"]["tensor hook"])  # local
