"""The toolkit on a CUDA model: what a learner on a Colab GPU runtime or a lab machine meets.

The course itself runs on the CPU; these tests run only where torch sees a GPU (they are
skipped everywhere else, CI included) and check that every helper that attaches hooks works
the same on CUDA tensors: records stay on the model's device unless ``to=`` moves them,
gradients equal autograd's, nothing stays attached, and the widgets' computations run.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import hooktutor as ht
from hooktutor.data import shapes
from hooktutor.models import MLP, SmallCNN

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

CUDA = torch.device("cuda")


def cnn_and_batch(inplace=True):
    model = SmallCNN(inplace=inplace, seed=0).to(CUDA)
    x, y = shapes(8, seed=0)
    return model, x.to(CUDA), y.to(CUDA)


def test_capture_records_on_the_models_device_and_matches_autograd():
    model, x, y = cnn_and_batch()
    with ht.capture(model, ["features.0", "features.1"], grads=True) as rec:
        loss = F.cross_entropy(model(x), y)
        loss.backward()
    assert rec["features.1"].device.type == "cuda" and rec.grads["features.1"].device.type == "cuda"
    assert (rec["features.1"] < 0).any(), "the copy must keep the values the in-place ReLU overwrote"
    twin = SmallCNN(inplace=False, seed=0).to(CUDA)       # the same weights, no in-place ReLU
    bn_out = twin.features[1](twin.features[0](x))
    logits = twin.classifier(twin.pool(twin.features[2:](bn_out)).flatten(1))
    (grad,) = torch.autograd.grad(F.cross_entropy(logits, y), bn_out)
    torch.testing.assert_close(rec.grads["features.1"], grad)
    assert len(ht.list_hooks(model)) == 0


def test_capture_to_cpu_moves_the_copies():
    model, x, _ = cnn_and_batch()
    with ht.capture(model, ["features.4"], grads=True, to="cpu") as rec:
        model(x).sum().backward()
    assert rec["features.4"].device.type == "cpu" and rec.grads["features.4"].device.type == "cpu"


def test_trace_hooks_and_hookset_on_cuda():
    model = MLP(seed=0).to(CUDA)
    x = torch.randn(4, 8, device=CUDA)
    trace = ht.trace_hooks(model, x)
    assert len(trace.events) > 0
    with ht.HookSet("cuda-test") as hooks:
        hooks.forward("fc1", model.fc1, lambda m, a, o: o * 0)
        assert torch.count_nonzero(model.fc1(x)) == 0
    assert len(ht.list_hooks(model)) == 0


def test_full_backward_hook_next_to_an_inplace_relu_raises_on_cuda_too():
    model, x, _ = cnn_and_batch(inplace=True)
    handle = model.features[1].register_full_backward_hook(lambda m, gi, go: None)
    try:
        with pytest.raises(RuntimeError, match="is a view and is being modified inplace"):
            model(x)
    finally:
        handle.remove()


def test_widget_computation_runs_on_cuda():
    from hooktutor.widgets import hook_toggle

    model, x, y = cnn_and_batch(inplace=False)
    toggle = hook_toggle(model, x, "features.4", mode="zero", targets=y, view="loss", name="cuda-toggle")
    try:
        toggle.value = True
        assert len(ht.list_hooks(model)) == 1
        toggle.value = False
        assert len(ht.list_hooks(model)) == 0
    finally:
        toggle.close()
