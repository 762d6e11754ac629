"""trace_hooks: the firing order of every kind of hook, forward and backward."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import hooktutor as ht


def nested():
    torch.manual_seed(0)
    return nn.Sequential(nn.Sequential(nn.Linear(2, 2), nn.Tanh()), nn.Linear(2, 1))


def test_forward_order_container_pre_first_forward_last():
    trace = ht.trace_hooks(nested(), torch.ones(1, 2), kinds=("forward_pre", "forward"))
    assert trace.labels() == [
        "forward_pre <root>", "forward_pre 0", "forward_pre 0.0", "forward 0.0", "forward_pre 0.1",
        "forward 0.1", "forward 0", "forward_pre 1", "forward 1", "forward <root>"]


def test_backward_order_matches_torch():
    trace = ht.trace_hooks(nested(), torch.ones(1, 2), kinds=("backward_pre", "backward"))
    assert trace.labels() == [
        "backward_pre <root>", "backward_pre 1", "backward 1", "backward_pre 0", "backward_pre 0.1",
        "backward 0.1", "backward_pre 0.0", "backward 0.0", "backward 0", "backward <root>"]


def test_all_kinds_and_phases_no_hooks_left_and_grads_untouched():
    model = ht.models.MLP(seed=0)
    trace = ht.trace_hooks(model, ht.data.blobs(2)[0])
    assert {e.kind for e in trace} == {"forward_pre", "forward", "backward_pre", "backward", "tensor",
                                       "post_accumulate"}
    assert [e.step for e in trace] == list(range(1, len(trace) + 1))
    assert all(e.phase == "forward" for e in trace.where(kind=("forward_pre", "forward")))
    assert len(trace.where(kind="post_accumulate")) == 6
    assert len(ht.list_hooks(model)) == 0
    assert all(p.grad is None for p in model.parameters())
    assert trace.warnings == []


def test_repr_is_a_timeline():
    text = repr(ht.trace_hooks(nested(), torch.ones(1, 2), kinds=("forward",)))
    lines = text.splitlines()
    assert lines[0] == "Hook trace of Sequential: 5 events"
    assert lines[1] == " forward"
    assert lines[2].split() == ["1", "forward", "0.0", "(Linear)"]


def test_inplace_model_gets_an_explanation_not_the_autograd_error():
    model = ht.models.SmallCNN(inplace=True)
    with pytest.raises(ValueError, match=r"in-place modules \(features.2, features.5\)"):
        ht.trace_hooks(model, ht.data.shapes(2)[0])
    trace = ht.trace_hooks(model, ht.data.shapes(2)[0], kinds=("forward", "tensor"))
    assert len(trace.where(kind="tensor")) > 0
    assert len(ht.list_hooks(model)) == 0


def test_plot_draws_a_figure():
    fig = ht.trace_hooks(nested(), torch.ones(1, 2)).plot()
    assert fig.axes[0].get_title() == "hook firing order in Sequential"


def test_bad_arguments():
    with pytest.raises(TypeError, match="needs a torch.nn.Module"):
        ht.trace_hooks("model", torch.ones(1))
    with pytest.raises(ValueError, match="unknown kind"):
        ht.trace_hooks(nested(), torch.ones(1, 2), kinds=("fwd",))


def test_node_kinds_hook_each_output_s_backward_node_after_its_tensor_hook():
    model = ht.models.MLP(seed=0)
    trace = ht.trace_hooks(model, ht.data.blobs(4, seed=0)[0], kinds=("tensor", "node_pre", "node"))
    assert all(e.phase == "backward" for e in trace)
    for layer, node in (("act2", "ReluBackward0"), ("fc2", "AddmmBackward0"), ("fc1", "AddmmBackward0")):
        events = [e for e in trace if e.path == layer]
        assert [e.kind for e in events] == ["tensor", "node_pre", "node"]
        assert [e.module_type for e in events[1:]] == [node, node]  # node events name the node
    # the model returns head's output: both probes sit on one node and fire in registration order
    assert trace.labels()[:6] == ["tensor head", "tensor <root>", "node_pre head", "node_pre <root>",
                                  "node head", "node <root>"]
    assert len(ht.list_hooks(model)) == 0 and all(p.grad is None for p in model.parameters())
    assert "node_pre" not in ht.trace.ALL_KINDS  # asked for by name: the default trace is unchanged
    fig = trace.plot()
    assert fig.axes[0].get_title() == "hook firing order in MLP"
