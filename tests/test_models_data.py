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
