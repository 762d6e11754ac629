"""Seeded models and synthetic data: small, deterministic, and what the lessons expect."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from hooktutor import data, models


def test_models_are_seeded_and_do_not_touch_global_rng():
    torch.manual_seed(123)
    expected = torch.rand(1)
    torch.manual_seed(123)
    a, b = models.MLP(seed=5), models.MLP(seed=5)
    assert torch.rand(1) == expected
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert not torch.equal(models.MLP(seed=6).fc1.weight, a.fc1.weight)


def test_mlp_names_and_intermediates_match_forward():
    m = models.MLP(seed=0)
    assert [n for n, _ in m.named_children()] == ["fc1", "act1", "fc2", "act2", "head"]
    x, _ = data.blobs(5)
    out, inter = m.forward_with_intermediates(x)
    assert torch.equal(out, m(x)) and list(inter) == ["fc1", "act1", "fc2", "act2", "head"]


def test_cnn_layout_inplace_switch_and_intermediates():
    m = models.SmallCNN(inplace=True, seed=0)
    names = [n for n, _ in m.named_modules() if n]
    assert names[:7] == ["features", "features.0", "features.1", "features.2", "features.3", "features.4",
                         "features.5"]
    assert models.inplace_modules(m) == ["features.2", "features.5"]
    assert models.set_inplace(m, False) == ["features.2", "features.5"]
    assert models.inplace_modules(m) == []
    x, _ = data.shapes(4)
    out, inter = m.forward_with_intermediates(x)
    assert out.shape == (4, 3) and torch.allclose(out, m(x))
    assert inter["features.0"].min() < 0


def test_two_input_net_keyword():
    m = models.TwoInputNet(seed=0)
    a, b = torch.ones(1, 2), torch.ones(1, 2)
    assert torch.allclose(m(a, b, scale=2.0), 2 * m(a, b))


def test_deep_mlp_depth():
    m = models.deep_mlp(depth=20)
    assert sum(isinstance(x, nn.Linear) for x in m) == 21
    with pytest.raises(ValueError, match="depth must be at least 1"):
        models.deep_mlp(depth=0)


def test_set_inplace_wrong_type():
    with pytest.raises(TypeError, match="set_inplace\\(\\) needs an nn.Module"):
        models.set_inplace("cnn", True)


def test_shapes_are_deterministic_balanced_and_distinct():
    x1, y1 = data.shapes(30, seed=1)
    x2, y2 = data.shapes(30, seed=1)
    assert x1.shape == (30, 1, 16, 16) and torch.equal(x1, x2) and torch.equal(y1, y2)
    assert y1.bincount().tolist() == [10, 10, 10]
    assert not torch.equal(data.shapes(30, seed=2)[0], x1)
    clean, labels = data.shapes(3, noise=0.0)
    filled = [float(clean[i].sum()) for i in range(3)]
    assert filled[0] > filled[2] > 0  # a filled square has more pixels than a thin cross


def test_shapes_learnable_by_nearest_mean():
    """The classes really differ: a trivial classifier beats chance by far."""
    x, y = data.shapes(90, seed=0, noise=0.0)
    filled = x.flatten(1).sum(1)
    means = torch.stack([filled[y == c].mean() for c in range(3)])
    pred = (filled[:, None] - means[None]).abs().argmin(1)
    assert (pred == y).float().mean() > 0.6


def test_blobs_and_batches():
    x, y = data.blobs(10, features=4, classes=2, seed=0)
    assert x.shape == (10, 4) and y.tolist() == [0, 1] * 5
    seen = torch.cat([yb for _, yb in data.batches(x, y, batch_size=4, seed=0)])
    assert sorted(seen.tolist()) == sorted(y.tolist())
    assert [len(b[0]) for b in data.batches(x, y, batch_size=4)] == [4, 4, 2]
    with pytest.raises(ValueError, match="differ in length"):
        list(data.batches(x, y[:3]))


@pytest.mark.parametrize("call, message", [
    (lambda: data.shapes(0), "n must be at least 1"),
    (lambda: data.shapes(2, size=4), "size must be at least 8"),
])
def test_bad_data_arguments(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def _block_input(channels=4, seed=0):
    return torch.randn(2, channels, 8, 8, generator=torch.Generator().manual_seed(seed))


def test_basic_block_has_torchvisions_layout_and_one_relu_called_twice():
    block = models.BasicBlock(seed=0)
    assert [n for n, _ in block.named_children()] == ["conv1", "bn1", "relu", "conv2", "bn2"]
    assert isinstance(block.relu, nn.ReLU) and block.relu.inplace and models.inplace_modules(block) == ["relu"]
    assert block.conv1.bias is None and block.downsample is None
    calls = {name: 0 for name, _ in block.named_children()}
    handles = [m.register_forward_hook(lambda mod, a, o, n=n: calls.__setitem__(n, calls[n] + 1))
               for n, m in block.named_children()]
    try:
        out = block(_block_input())
    finally:
        for h in handles:
            h.remove()
    assert calls == {"conv1": 1, "bn1": 1, "relu": 2, "conv2": 1, "bn2": 1}
    assert out.shape == (2, 4, 8, 8) and out.min() == 0


def test_basic_block_is_seeded():
    torch.manual_seed(1)
    expected = torch.rand(1)
    torch.manual_seed(1)
    a, b = models.BasicBlock(seed=3), models.BasicBlock(seed=3)
    assert torch.rand(1) == expected
    assert all(torch.equal(p, q) for p, q in zip(a.state_dict().values(), b.state_dict().values()))
    assert not torch.equal(models.BasicBlock(seed=4).conv1.weight, a.conv1.weight)


def test_basic_block_adds_the_identity_in_place_into_bn2s_output():
    block = models.BasicBlock(seed=0)
    x = _block_input()
    out_ref, inter = block.forward_with_intermediates(x)
    kept = {}

    def keep(module, args, output):
        kept["detach"], kept["clone"], kept["version"] = output.detach(), output.detach().clone(), output._version

    with block.bn2.register_forward_hook(keep):
        out = block(x)
    assert kept["version"] == 0 and kept["detach"]._version == 2      # += and the second ReLU
    assert kept["detach"].data_ptr() == out.data_ptr()                 # the block returns bn2's tensor
    assert torch.equal(kept["clone"], inter["bn2"]) and not torch.equal(kept["detach"], inter["bn2"])
    assert torch.equal(inter["add"], inter["bn2"] + x) and torch.equal(kept["detach"], torch.relu(inter["add"]))
    assert torch.equal(out, out_ref) and torch.equal(out, inter["relu", 1])
    assert torch.equal(inter["relu", 0], torch.relu(inter["bn1"]))
    assert torch.equal(x, _block_input())                              # the input is left alone


def test_basic_block_downsample_and_tiny_resnet_shapes():
    block = models.BasicBlock(4, 8, stride=2, seed=0)
    assert isinstance(block.downsample, nn.Sequential)
    out, inter = block.forward_with_intermediates(_block_input())
    assert out.shape == inter["downsample"].shape == (2, 8, 4, 4) and torch.equal(out, block(_block_input()))
    net = models.TinyResNet(seed=0)
    x, _ = data.shapes(4)
    assert net(x).shape == (4, 3)
    assert models.inplace_modules(net) == ["relu", "layer1.0.relu", "layer1.1.relu"]
    assert torch.equal(net.layer1[0].conv1.weight, models.BasicBlock(seed=1).conv1.weight)
    assert torch.equal(net.fc.weight, models.TinyResNet(seed=0).fc.weight)
    assert not torch.equal(net.fc.weight, models.TinyResNet(seed=1).fc.weight)
