"""FSDP2 on two gloo processes (hooktutor/fsdp.py, 13_hooks_at_work): list_hooks and remove_hooks
recognise fully_shard's hooks as PyTorch's, and the lesson's findings hold in every rank."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch import nn

from hooktutor import distributed
from hooktutor.course.claims import version_tuple
from hooktutor.inventory import hook_owner

pytestmark = pytest.mark.skipif(version_tuple(torch.__version__) < (2, 6, 0),
                                reason="fully_shard is public from torch 2.6 on (lesson 13's floor)")


@pytest.fixture(scope="module")
def ranks():
    from hooktutor import fsdp

    results = distributed.run(fsdp.fsdp_hooks_demo, 2)
    assert distributed.leftover_processes() == []   # every process has ended
    assert not dist.is_initialized()                # and this process never joined a group
    return results


def test_list_hooks_labels_every_hook_of_fully_shard_pytorch_fsdp2_in_every_rank(ranks):
    for r in ranks:
        rows = r["fsdp_rows"]
        assert rows and {owner for _, _, owner in rows} == {"pytorch (FSDP2)"}
        # a pre-hook gathers, a forward hook frees: on each sharded module and on the root
        for path in ("<root>", "fc1", "fc2", "head"):
            assert {"forward_pre", "forward"} <= {kind for p, kind, _ in rows if p == path}


def test_remove_hooks_keeps_fsdp2_hooks_and_the_model_still_trains(ranks):
    for r in ranks:
        removed = r["removed"]   # the worker put one hook of its own on fc2 first
        assert removed["yours listed"] == removed["removed"] == 1 and removed["yours gone"]
        assert removed["left owners"] == ["pytorch (FSDP2)"]
        assert removed["left"] == removed["listed"] - 1 > 0
        assert r["after remove_hooks"].startswith("DTensor")
        assert r["cleared"].startswith("RuntimeError")     # clearing the dicts by hand breaks it


def test_what_your_hooks_see_full_weight_in_pre_hooks_a_shard_after_and_no_tensor_hook(ranks):
    for r in ranks:
        saw, shard = r["saw"], "DTensor (16, 8), this rank holds (8, 8)"
        assert saw["forward pre-hook"] == saw["forward hook, prepend=True"] == "Parameter (16, 8)"
        assert saw["forward pre-hook, prepend=True"] == saw["forward hook"] == shard
        assert saw["full backward hook on fc2"] == "Parameter (16, 16)"
        assert saw["full backward hook on fc1"] == saw["post-accumulate-grad hook"] == shard
        assert "tensor hook on the parameter" not in saw


def test_each_rank_keeps_its_rows_of_the_averaged_gradient(ranks):
    from hooktutor.models import MLP

    grads = []
    for rank in (0, 1):
        model = MLP(seed=0)
        x, y = distributed.local_batch(rank)
        nn.functional.cross_entropy(model(x), y).backward()
        grads.append(model.fc1.weight.grad)
    average = (grads[0] + grads[1]) / 2
    for r in ranks:
        rows = slice(8 * r["rank"], 8 * r["rank"] + 8)
        assert torch.allclose(r["grad"]["this rank"], average[rows], rtol=1e-5, atol=1e-7)
        assert torch.allclose(r["grad"]["all ranks"], average, rtol=1e-5, atol=1e-7)


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
