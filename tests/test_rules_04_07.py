"""The general rules of lessons 04-07, each checked on a set-up other than the lesson's own.

A lesson states a rule ("grad_input holds zeros for a tensor that does not require grad", "a
read-only hook does not change training") and checks it on its own small model. The tests here
try to break each rule where a learner will use it: another layer kind (convolutions, nested
blocks), a loss other than ``sum``, float64, checkpointing, another optimiser. A torch release
that changes a rule fails here, next to the lesson cell that states it.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from hooktutor.models import SmallCNN, seeded

torch.set_num_threads(1)


def _images(n=4, seed=0, dtype=torch.float32):
    return torch.randn(n, 1, 16, 16, generator=torch.Generator().manual_seed(seed), dtype=dtype)


class _TwoConvInputs(nn.Module):
    """conv(a) + 10 * b: two positional tensor inputs, as lesson 04's TwoInputNet, on images."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 1, 3, padding=1)

    def forward(self, a, b, scale=1.0):
        return scale * (self.conv(a) + 10 * b)


# ---- lesson 04 -------------------------------------------------------------------------------

def test_04_grad_input_one_entry_per_positional_input_zeros_and_none_on_a_conv_in_float64():
    with seeded(0):
        net = _TwoConvInputs().double()
    a, b = _images(2, 1, torch.float64).requires_grad_(), _images(2, 2, torch.float64)
    scale = torch.tensor(3.0, dtype=torch.float64, requires_grad=True)
    seen = {}
    with net.register_full_backward_hook(lambda m, gi, go: seen.update(gi=gi, go=go)):
        F.mse_loss(net(a, b, scale=scale), torch.zeros_like(b)).backward()
    assert len(seen["gi"]) == 2                              # a and b; not scale, not the weights
    assert torch.equal(seen["gi"][0], a.grad)
    assert torch.equal(seen["gi"][1], torch.zeros_like(b))   # b needs no grad: zeros
    assert scale.grad is not None                            # a keyword tensor: .grad, never gi
    with net.register_full_backward_hook(lambda m, gi, go: seen.update(gi=gi)):
        net(a.detach().requires_grad_(), 0.5).pow(2).mean().backward()
    assert seen["gi"][1] is None                             # not a tensor: None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                      # the no-input-grad warning
        with net.register_full_backward_hook(lambda m, gi, go: seen.update(gi=gi)):
            net(a.detach(), b).pow(2).mean().backward()
    assert seen["gi"] == (None, None)                        # no input requires grad: all None


def test_04_first_conv_fires_with_none_and_refuses_a_tuple_holding_a_tensor():
    model, x, fired = SmallCNN(seed=0), _images(), []
    first = model.features[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with first.register_full_backward_hook(lambda m, gi, go: fired.append((gi, go[0].shape))):
            F.cross_entropy(model(x), torch.tensor([0, 1, 2, 0])).backward()
        assert fired == [((None,), torch.Size([4, 8, 16, 16]))]
        with first.register_full_backward_hook(lambda m, gi, go: (torch.zeros(4, 1, 16, 16),)), \
                pytest.raises(RuntimeError, match="should always return None or None for all"):
            model(x).sum().backward()
        frozen, fired = SmallCNN(seed=0), []
        frozen.features[0].requires_grad_(False)   # its output needs no grad: never fires
        with frozen.features[0].register_full_backward_hook(lambda m, gi, go: fired.append(1)):
            frozen(x).sum().backward()
    assert fired == []


def test_04_a_new_grad_input_leaves_the_layer_and_later_ones_alone_on_a_cnn():
    x, y = _images(), torch.tensor([0, 1, 2, 0])
    plain = SmallCNN(seed=0)
    F.cross_entropy(plain(x), y).backward()
    hooked = SmallCNN(seed=0)
    with hooked.features[4].register_full_backward_hook(
            lambda m, gi, go: tuple(torch.zeros_like(g) for g in gi)):
        F.cross_entropy(hooked(x), y).backward()
    for name in ("features.4.weight", "classifier.weight"):          # the layer and after it
        assert torch.equal(hooked.get_parameter(name).grad, plain.get_parameter(name).grad)
    assert (hooked.features[0].weight.grad == 0).all()              # before it: zeros


def test_04_a_new_grad_output_changes_the_layer_and_earlier_ones_on_a_cnn():
    x, y = _images(), torch.tensor([0, 1, 2, 0])
    plain = SmallCNN(seed=0)
    F.cross_entropy(plain(x), y).backward()
    hooked = SmallCNN(seed=0)
    with hooked.features[4].register_full_backward_pre_hook(lambda m, go: (2 * go[0],)):
        F.cross_entropy(hooked(x), y).backward()
    assert torch.equal(hooked.features[4].weight.grad, 2 * plain.features[4].weight.grad)
    assert torch.allclose(hooked.features[0].weight.grad, 2 * plain.features[0].weight.grad)
    assert torch.equal(hooked.classifier.weight.grad, plain.classifier.weight.grad)


def test_04_firing_order_on_a_nested_cnn_with_cross_entropy():
    model, order = SmallCNN(seed=0), []
    handles = []
    for name, module in model.named_modules():
        handles.append(module.register_full_backward_pre_hook(
            lambda m, go, name=name: order.append(("pre", name or "<root>"))))
        handles.append(module.register_full_backward_hook(
            lambda m, gi, go, name=name: order.append(("full", name or "<root>"))))
    try:
        F.cross_entropy(model(_images().requires_grad_()), torch.tensor([0, 1, 2, 0])).backward()
    finally:
        for handle in handles:
            handle.remove()
    assert order[0] == ("pre", "<root>") and order[-1] == ("full", "<root>")
    leaves = [n for kind, n in order if kind == "full" and n not in ("<root>", "features")]
    assert leaves == ["classifier", "pool", *[f"features.{i}" for i in range(5, -1, -1)]]
    features = [i for i, event in enumerate(order) if event[1].startswith("features")]
    assert order[features[0]] == ("pre", "features") and order[features[-1]] == ("full", "features")


def test_04_a_conv_called_twice_fires_twice_nearest_the_output_first():
    with seeded(0):
        conv = nn.Conv2d(1, 1, 3, padding=1)
    fired = []
    x = _images(2).requires_grad_()
    with conv.register_full_backward_hook(lambda m, gi, go: fired.append(go[0].clone())):
        out = conv(torch.tanh(conv(x)))
        F.mse_loss(out, torch.zeros_like(out)).backward()
    inner = conv(x)
    mid = torch.tanh(inner)
    outer = conv(mid)
    g_outer, g_inner = torch.autograd.grad(F.mse_loss(outer, torch.zeros_like(outer)), [outer, inner])
    assert len(fired) == 2
    assert torch.allclose(fired[0], g_outer) and torch.allclose(fired[1], g_inner)


@pytest.mark.parametrize("layer", ["conv", "linear"])
def test_04_hooks_fixed_by_the_call_that_records_the_graph(layer):
    """Lesson 04 section 10 on a Conv block and a Linear block, with an MSE loss."""
    def fires(change, use_reentrant):
        with seeded(0):
            if layer == "conv":
                hooked, rest = nn.Conv2d(1, 2, 3, padding=1), nn.Sequential(nn.ReLU(), nn.Flatten())
                batch = _images(2).requires_grad_()
            else:
                hooked, rest = nn.Linear(8, 4), nn.Sigmoid()
                batch = torch.randn(3, 8, generator=torch.Generator().manual_seed(0)).requires_grad_()
        block, fired = nn.Sequential(hooked, rest), []
        handle = hooked.register_full_backward_hook(lambda m, gi, go: fired.append(1))
        if change == "added":
            handle.remove()
        h = block(batch) if use_reentrant is None else checkpoint(block, batch,
                                                                  use_reentrant=use_reentrant)
        if change == "added":
            handle = hooked.register_full_backward_hook(lambda m, gi, go: fired.append(1))
        else:
            handle.remove()
        with handle:
            F.mse_loss(h, torch.ones_like(h)).backward()
        return len(fired)

    assert [fires(c, r) for r in (None, False, True) for c in ("removed", "added")] == [1, 0, 1, 0, 0, 1]


def test_04_the_sigmoid_stack_shrinks_at_every_layer_when_wider_and_in_float64():
    """Lesson 04 section 11: 'with the default initialisation every layer shrinks the gradient'."""
    with seeded(3):
        layers = []
        for i in range(6):
            layers += [nn.Linear(8 if i == 0 else 64, 64), nn.Sigmoid()]
        model = nn.Sequential(*layers, nn.Linear(64, 1)).double()
    norms = []
    handles = [m.register_full_backward_hook(lambda m, gi, go: norms.append(go[0].norm().item()))
               for m in model if isinstance(m, nn.Linear)]
    try:
        x = torch.randn(32, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
        x.requires_grad_()
        F.mse_loss(model(x), torch.zeros(32, 1, dtype=torch.float64)).backward()
    finally:
        for handle in handles:
            handle.remove()
    assert all(a > b for a, b in zip(norms, norms[1:]))


def test_04_a_new_grad_input_reaches_earlier_layers_only_through_the_module_with_a_skip():
    """Lesson 04 section 3 (adv0407-O4): what a full hook returns is what flows back INTO the module's
    input; a skip connection around the module still carries its own share to the layers before."""
    x = _images(dtype=torch.float64)

    def stem_grad(hooked, detach_body_input):
        with seeded(0):
            stem, body = nn.Conv2d(1, 2, 3, padding=1).double(), nn.Conv2d(2, 2, 3, padding=1).double()
        handle = body.register_full_backward_hook(
            lambda m, gi, go: tuple(torch.zeros_like(g) for g in gi)) if hooked else None
        try:
            h = torch.tanh(stem(x))
            out = body(h.detach() if detach_body_input else h) + h          # the skip: + h
            F.cross_entropy(out.flatten(1)[:, :3], torch.tensor([0, 1, 2, 0])).backward()
        finally:
            if handle is not None:
                handle.remove()
        return stem.weight.grad

    zeroed, skip_only = stem_grad(True, False), stem_grad(False, True)
    assert zeroed.abs().max() > 0                                   # not zeros: the skip's share
    assert torch.allclose(zeroed, skip_only, rtol=1e-12, atol=1e-14)  # and nothing through body


@pytest.mark.parametrize("register", ["register_full_backward_hook", "register_full_backward_pre_hook"])
def test_04_a_full_hook_on_a_module_returning_torch_return_types_fails_in_the_forward(register):
    """Lesson 04 cell 'grad_output has one entry per output tensor' (adv0407-O2): the named tuples of
    torch.topk/max/sort make the FORWARD of a module with a full backward (pre-)hook raise a TypeError
    (the hook machinery rebuilds the tuple with type(result)(*items)); a plain tuple of the same
    tensors works. A torch release that fixes it fails here: then the lesson's sentence goes."""
    class TopTwo(nn.Module):
        def __init__(self, plain):
            super().__init__()
            self.plain = plain

        def forward(self, h):
            result = h.topk(2, dim=1)
            return tuple(result) if self.plain else result

    hook = (lambda m, go: None) if "pre" in register else (lambda m, gi, go: None)
    named, plain = TopTwo(plain=False), TopTwo(plain=True)
    assert isinstance(named(torch.randn(3, 4)), tuple)        # it is a tuple of tensors
    with getattr(named, register)(hook), pytest.raises(TypeError, match="return_types"):
        named(torch.randn(3, 4, requires_grad=True))
    with getattr(plain, register)(hook):
        values, _ = plain(torch.randn(3, 4, requires_grad=True))
    values.sum().backward()


# ---- lesson 05 -------------------------------------------------------------------------------

@pytest.mark.parametrize("act", [nn.ReLU, nn.LeakyReLU, nn.ELU, nn.Hardtanh])
def test_05_a_full_hook_before_any_inplace_activation_raises_and_a_pre_hook_clone_fixes_it(act):
    def outcome(pre_clone):
        with seeded(0):
            net = nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), act(inplace=True), nn.Flatten())
        handles = [net[0].register_full_backward_hook(lambda m, gi, go: None)]
        if pre_clone:
            handles.append(net[1].register_forward_pre_hook(lambda m, args: (args[0].clone(),)))
        try:
            F.mse_loss(net(_images(2).requires_grad_()), torch.zeros(2, 2 * 16 * 16)).backward()
            return "works"
        except RuntimeError as error:
            return str(error)
        finally:
            for handle in handles:
                handle.remove()

    assert "is a view and is being modified inplace" in outcome(False)
    assert outcome(True) == "works"


def test_05_a_forward_hook_returning_a_clone_fixes_nothing_before_an_inplace_elu():
    with seeded(0):
        net = nn.Sequential(nn.Linear(4, 4), nn.ELU(inplace=True))
    with net[0].register_full_backward_hook(lambda m, gi, go: None), \
            net[0].register_forward_hook(lambda m, args, out: out.clone()), \
            pytest.raises(RuntimeError, match="is a view and is being modified inplace"):
        net(torch.ones(2, 4))


def test_05_writing_a_value_that_requires_grad_into_a_wrapped_input_raises_on_a_conv_module():
    class AddsIntoB(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(1, 1, 3, padding=1)

        def forward(self, a, b):
            b.add_(self.conv(a))          # b needs no grad; the conv's output does
            return b

    with seeded(0):
        module = AddsIntoB()
    module(_images(1), _images(1, 1)).sum().backward()          # legal without the hook
    with module.register_full_backward_hook(lambda m, gi, go: None), \
            pytest.raises(RuntimeError, match="created in no_grad mode and is being modified inplace"):
        module(_images(1).requires_grad_(), _images(1, 1))


def test_05_a_write_that_leaves_a_wrapped_input_without_grad_is_allowed():
    """Lesson 05 idea 4: refused when the view requires grad, 'or would after the write'."""
    class ScalesB(nn.Module):
        def forward(self, a, b):
            b.mul_(2)                     # b needs no grad, and still needs none after the write
            return a * b

    module, a, b = ScalesB(), torch.ones(2, requires_grad=True), torch.ones(2)
    with module.register_full_backward_hook(lambda m, gi, go: None):
        module(a, b).sum().backward()
    assert a.grad.tolist() == [2.0, 2.0]
    assert b.tolist() == [2.0, 2.0]       # the wrapper's view shares the caller's b: it changed too


def test_05_a_pre_hook_sees_the_raw_input_of_an_inplace_leaky_relu_only_through_a_copy():
    seen = {}

    def pre(module, args):
        seen["alias"], seen["copy"] = args[0], args[0].clone()

    act = nn.LeakyReLU(0.1, inplace=True)
    with act.register_forward_pre_hook(pre):
        act(torch.tensor([-1.0, 2.0]) * 1)
    assert seen["copy"].tolist() == [-1.0, 2.0]
    assert torch.allclose(seen["alias"], torch.tensor([-0.1, 2.0]))    # rewritten under it


def test_05_inplace_leaky_relu_keeps_less_for_backward_on_a_linear_stack_in_float64():
    def kept(act):
        with seeded(0):
            net = nn.Sequential(nn.Linear(16, 32), act, nn.Linear(32, 4)).double()
        saved = {}

        def pack(tensor):
            saved[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            out = net(torch.ones(8, 16, dtype=torch.float64))
        out.sum().backward()
        return sum(saved.values())

    assert kept(nn.ReLU()) == kept(nn.ReLU(inplace=True))
    assert kept(nn.LeakyReLU()) - kept(nn.LeakyReLU(inplace=True)) == 8 * 32 * 8


# ---- lesson 06 -------------------------------------------------------------------------------

def test_06_scale_grad_doubles_exactly_only_where_every_path_runs_through_the_layer():
    with seeded(0):
        stem, body = nn.Linear(4, 4), nn.Linear(4, 4)
    x = torch.ones(2, 4)

    def stem_grad(skip, scale):
        def hook(module, args, output):
            output.register_hook(lambda grad: grad * scale)

        with body.register_forward_hook(hook):
            h = stem(x)
            out = body(h) + h if skip else body(h)
            (grad,) = torch.autograd.grad(out.pow(2).sum(), [stem.weight])
        return grad

    assert torch.equal(stem_grad(False, 2.0), 2 * stem_grad(False, 1.0))
    assert not torch.allclose(stem_grad(True, 2.0), 2 * stem_grad(True, 1.0))


# ---- lesson 07 -------------------------------------------------------------------------------

def test_07_a_read_only_hook_leaves_training_unchanged_with_dropout_adam_and_mse():
    def train(hook):
        with seeded(0):
            net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 2))
        optimizer = torch.optim.Adam(net.parameters(), lr=1e-2)
        torch.manual_seed(0)
        handle = net[1].register_forward_hook(hook) if hook else None
        try:
            for step in range(5):
                x = torch.randn(16, 8, generator=torch.Generator().manual_seed(step))
                loss = F.mse_loss(net(x), x[:, :2])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        finally:
            if handle:
                handle.remove()
        return [p.detach().clone() for p in net.parameters()]

    log = []
    plain = train(None)
    reads = train(lambda m, args, out: log.append((out.detach().mean().item(), (out == 0).float().mean())))
    samples = train(lambda m, args, out: log.append(torch.rand(1)))     # draws random numbers
    assert len(log) == 10 and all(torch.equal(a, b) for a, b in zip(plain, reads))
    assert not all(torch.equal(a, b) for a, b in zip(plain, samples))  # the claim's own limit


def test_07_grad_cam_equals_cam_on_another_gap_linear_network_in_float64():
    with seeded(1):
        body = nn.Sequential(nn.Conv2d(1, 6, 3, padding=1), nn.ReLU(), nn.Conv2d(6, 5, 3, stride=2),
                             nn.ReLU())
        head = nn.Linear(5, 4)
    body, head = body.double(), head.double()
    x = _images(3, 5, torch.float64)
    activation = body(x)
    logits = head(activation.mean(dim=(2, 3)))
    target = torch.tensor([0, 3, 1])
    (gradient,) = torch.autograd.grad(logits[torch.arange(3), target].sum(), activation)
    grad_cam = F.relu((gradient.mean(dim=(2, 3))[:, :, None, None] * activation).sum(dim=1))
    h, w = activation.shape[-2:]
    cam = F.relu(torch.einsum("nk,nkhw->nhw", head.weight[target], activation)) / (h * w)
    assert torch.allclose(grad_cam, cam, atol=1e-12)


def test_04_the_scale_grad_toggle_works_on_a_cnn_with_inplace_relus():
    """Lesson 04 'Try it live': a tensor hook, so unlike a full backward hook it works there."""
    from hooktutor.data import shapes
    from hooktutor.widgets import hook_toggle

    x, y = shapes(8, seed=0)
    toggle = hook_toggle(SmallCNN(inplace=True, seed=0), x, "features.4", mode="scale_grad",
                         view="gradients", targets=y, name="test-rules-04-toggle")
    try:
        before = dict(toggle.snapshot.grad_norms)
        toggle.value = True
        after = dict(toggle.snapshot.grad_norms)
    finally:
        toggle.close()
    assert after["features.0"] == pytest.approx(2 * before["features.0"], rel=1e-6)
    assert after["classifier"] == before["classifier"]


@pytest.mark.parametrize("use_reentrant, stage", [(False, "forward"), (True, "backward")])
def test_04_the_inplace_error_of_a_full_hook_under_checkpointing(use_reentrant, stage):
    """Lesson 04 sections 9 and 10: the error comes where the block's graph is recorded."""
    with seeded(0):
        block = nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.ReLU(inplace=True))
    where = "forward"
    with block[0].register_full_backward_hook(lambda m, gi, go: None), \
            pytest.raises(RuntimeError, match="is a view and is being modified inplace"):
        h = checkpoint(block, _images(2).requires_grad_(), use_reentrant=use_reentrant)
        where = "backward"
        F.mse_loss(h, torch.zeros_like(h)).backward()
    assert where == stage


def test_07_the_capstone_run_has_no_loss_spike_with_a_smaller_learning_rate():
    """Lesson 07 section 1: the epoch-3 spike (6.3, against at most 1.13 in epochs 0-2) comes from
    the step size: the same loop, seeds and data with lr 0.01 instead of 0.05 stays below 1.5
    after its first epoch (measured: 1.09 at most)."""
    from hooktutor.data import batches, shapes

    x_train, y_train = shapes(600, seed=0)
    model = SmallCNN(num_classes=3, seed=0)
    torch.manual_seed(0)
    velocity = [torch.zeros_like(p) for p in model.parameters()]
    model.train()
    losses = []
    for epoch in range(10):
        for xb, yb in batches(x_train, y_train, batch_size=32, seed=epoch):
            loss = F.cross_entropy(model(xb), yb)
            model.zero_grad()
            loss.backward()
            losses.append(loss.item())
            with torch.no_grad():
                for p, v in zip(model.parameters(), velocity):
                    v.mul_(0.9).add_(p.grad)
                    p.sub_(0.01 * v)
    assert len(losses) == 190 and max(losses[19:]) < 1.5


# -- the fresh review of 2026-12 ---------------------------------------------------------------


def test_under_the_non_reentrant_checkpoint_a_late_full_hook_does_not_fire_but_the_rerun_wraps():
    """04 cell 65 and 05 cell 45 (the fresh review's F1): with use_reentrant=False a full backward
    hook added after the forward does not fire, but backward runs the block again with it
    attached, and next to ReLU(inplace=True) that rerun raises the in-place error in the backward."""
    torch.manual_seed(0)
    block = nn.Sequential(nn.Linear(3, 3), nn.ReLU(inplace=True))
    x = torch.randn(2, 3, requires_grad=True)
    fired = []
    out = checkpoint(block, x, use_reentrant=False)
    with block[0].register_full_backward_hook(lambda m, gi, go: fired.append(1)):
        with pytest.raises(RuntimeError, match="BackwardHookFunction"):
            out.sum().backward()
    plain = nn.Sequential(nn.Linear(3, 3), nn.ReLU())   # no in-place layer: runs, and the hook stays silent
    out = checkpoint(plain, x, use_reentrant=False)
    with plain[0].register_full_backward_hook(lambda m, gi, go: fired.append(1)):
        out.sum().backward()
    assert fired == []


def test_a_full_hook_next_to_an_inplace_relu_fails_in_the_forward_only_when_its_output_requires_grad():
    """04 cell 60 (the fresh review's F2): what counts is the hooked layer's output; an input that
    requires grad with an output that does not (a forward that detaches) wraps nothing to refuse."""

    class Detaching(nn.Module):
        def forward(self, x):
            return x.detach() * 2

    x = torch.ones(2, 3, requires_grad=True)
    detaching, relu = Detaching(), nn.ReLU(inplace=True)
    with detaching.register_full_backward_hook(lambda m, gi, go: None):
        out = relu(detaching(x))   # no error
    assert not out.requires_grad
    linear = nn.Linear(3, 3)
    with linear.register_full_backward_hook(lambda m, gi, go: None):
        with pytest.raises(RuntimeError, match="BackwardHookFunction"):
            relu(linear(x))


@pytest.mark.filterwarnings("ignore:For backward hooks to be called")
@pytest.mark.parametrize("kind", ["list", "dict"])
def test_a_module_returning_a_list_or_a_dict_never_fires_its_full_backward_hooks(kind):
    """04's recap (the fresh review's F3): full backward hooks and pre-hooks fire for a tensor or a
    tuple output; for a list or a dict (a Hugging Face ModelOutput is one) neither fires, and torch
    warns in the forward."""

    class Returns(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 3)

        def forward(self, x):
            y = self.fc(x)
            return [y] if kind == "list" else {"y": y}

    module, fired = Returns(), []
    with module.register_full_backward_hook(lambda m, gi, go: fired.append("full")), \
            module.register_full_backward_pre_hook(lambda m, go: fired.append("pre")):
        with pytest.warns(UserWarning, match="For backward hooks to be called"):
            out = module(torch.ones(1, 3, requires_grad=True))
        (out[0] if kind == "list" else out["y"]).sum().backward()
    assert fired == []


def test_after_a_write_under_no_grad_differentiable_uses_raise_and_comparisons_do_not():
    """05 cell 45 (the fresh review's F4): the wrapped tensor written under no_grad fails at its
    next differentiable use (or a view, or reading grad_fn); a comparison, argmax or torch.equal
    records nothing and goes through."""
    linear = nn.Linear(3, 3)
    x = torch.ones(2, 3, requires_grad=True)
    with linear.register_full_backward_hook(lambda m, gi, go: None):
        out = linear(x)
    with torch.no_grad():
        out.mul_(2)
    assert (out > 0).dtype == torch.bool and out.argmax().numel() == 1 and torch.equal(out, out)
    for use in (lambda t: t * 2, lambda t: t.view(-1), lambda t: t.grad_fn):
        with pytest.raises(RuntimeError):
            use(out)


# -- the second fresh review of 04-07 (2026-12-06): each rule where it stops holding --

def test_a_tensor_nested_in_a_returned_tuple_gets_no_grad_output_entry_and_fires_nothing_alone():
    """04 cells 10 and 116: nn.LSTM returns (out, (h_n, c_n)): grad_output has two entries, the
    second None even where the loss uses h_n; a loss on h_n alone fires neither the full hook nor
    the pre-hook, and torch warns nothing."""
    torch.manual_seed(0)
    lstm, x = nn.LSTM(3, 4, batch_first=True), torch.randn(2, 5, 3, requires_grad=True)
    full, pre = [], []
    with lstm.register_full_backward_hook(lambda m, gi, go: full.append(go)), \
            lstm.register_full_backward_pre_hook(lambda m, go: pre.append(go)), \
            warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        out, (h_n, _) = lstm(x)
        (out.sum() + h_n.sum()).backward()
        assert len(full) == 1 and len(full[0]) == 2 and full[0][1] is None
        full.clear(), pre.clear()
        out, (h_n, _) = lstm(x)
        h_n.sum().backward()
    assert (full, pre) == ([], []) and x.grad is not None
    assert not [w for w in said if "hook" in str(w.message).lower()]


@pytest.mark.parametrize("other_call", ["under no_grad", "logged only", "on the loss's path"])
def test_a_module_called_twice_fires_once_per_call_on_the_losss_path(other_call):
    """04 cell 36 and the recap: a second call under no_grad, or one whose output the loss does not
    use, fires no backward hook."""
    torch.manual_seed(0)
    layer, x = nn.Linear(3, 3), torch.randn(2, 3, requires_grad=True)
    fired = []
    with layer.register_full_backward_hook(lambda m, gi, go: fired.append(1)):
        first = layer(x)
        if other_call == "under no_grad":
            with torch.no_grad():
                layer(x)
            loss = first.sum()
        elif other_call == "logged only":
            logged = layer(x)   # noqa: F841 - kept, never in the loss
            loss = first.sum()
        else:
            loss = (first + layer(x)).sum()
        loss.backward()
    assert len(fired) == (2 if other_call == "on the loss's path" else 1)


def test_views_and_conversions_that_change_nothing_share_the_outputs_memory():
    """04 cell 98: a reduction or a comparison is a new tensor; flatten(), .t(), .contiguous() and
    .float() of a contiguous float32 output are its own memory, so an in-place ReLU after the
    layer overwrites what a hook kept without a clone."""
    out = torch.randn(4, 3)
    kept = {"norm": out.norm(dim=1), "negative": out < 0, "flatten": out.flatten(), "t": out.t(),
            "contiguous": out.contiguous(), "float": out.float()}
    before = {k: v.clone() for k, v in kept.items()}
    out.relu_()
    changed = {k for k in kept if not torch.equal(kept[k], before[k])}
    assert changed == {"flatten", "t", "contiguous", "float"}


@pytest.mark.parametrize("returns", ["a list", "a tensor nested in a tuple"])
def test_an_in_place_op_on_an_output_the_full_hook_does_not_wrap_raises_nothing(returns):
    """05 cell 39: the full hook wraps a returned tensor or a tensor entry of the returned tuple;
    a list output or a tensor nested deeper is not wrapped: relu_() on it raises nothing, and the
    hook never fires."""
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 3)

        def forward(self, x):
            h = self.fc(x)
            return [h] if returns == "a list" else (h.sum(), (h,))

    torch.manual_seed(0)
    block, fired = Block(), []
    x = torch.randn(2, 3, requires_grad=True)
    with block.register_full_backward_hook(lambda m, gi, go: fired.append(1)), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")   # torch warns about a list output
        out = block(x)
        h = out[0] if returns == "a list" else out[1][0]
        h.relu_().sum().backward()
    assert fired == []


def test_scaling_a_layer_before_a_train_mode_batchnorm_leaves_the_loss_unchanged():
    """06 cells 3 and 28: a forward hook that scales an output changes what follows only as far as
    the next layers pass it on: a BatchNorm in train mode divides the scale out again."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.LazyLinear(2))
    x, y = torch.randn(8, 1, 6, 6), torch.randint(0, 2, (8,))
    model(x)   # materialise the lazy layer
    plain = nn.functional.cross_entropy(model(x), y)
    with model[0].register_forward_hook(lambda m, a, o: o * 4.0):
        scaled = nn.functional.cross_entropy(model(x), y)
    assert torch.allclose(plain, scaled, atol=1e-4)
    with model[2].register_forward_hook(lambda m, a, o: o * 4.0):   # after the BatchNorm: it shows
        assert not torch.allclose(plain, nn.functional.cross_entropy(model(x), y), atol=1e-4)


def test_a_module_that_masks_a_nan_hides_it_from_the_hunter_where_built_in_layers_pass_it_on():
    """07 cell 29: ReLU, Hardtanh and MaxPool pass a NaN on; torch.where(x > 0, x, 0) and fmax read
    it and return finite values."""
    x = torch.tensor([[1.0, float("nan"), -2.0, 3.0]])
    assert not torch.isfinite(nn.ReLU()(x)).all() and not torch.isfinite(nn.Hardtanh()(x)).all()
    assert not torch.isfinite(nn.MaxPool1d(2)(x)).all()
    assert torch.isfinite(torch.where(x > 0, x, 0.0)).all()
    assert torch.isfinite(torch.fmax(x, torch.zeros_like(x))).all()


@pytest.mark.parametrize("does", ["a tensor hook on the output", "requires_grad_(False)"])
def test_a_forward_hook_that_returns_none_can_still_change_training(does):
    """07 recap: a forward hook that returns None, writes nothing in place and draws nothing changes
    training when it registers a gradient hook or switches requires_grad; only a hook that reads
    leaves the step as it was."""
    def step(hook=None):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        handle = model[0].register_forward_hook(hook) if hook else None
        try:
            model(torch.ones(2, 3)).pow(2).sum().backward()
            optimizer.step()
        finally:
            if handle:
                handle.remove()
        return model.state_dict()

    def reads(module, args, output):
        output.norm().item()

    def changes(module, args, output):
        if does == "a tensor hook on the output":
            output.register_hook(lambda grad: grad * 2)
        else:
            module.weight.requires_grad_(False)

    plain = step()
    assert all(torch.equal(plain[k], v) for k, v in step(reads).items())
    assert not all(torch.equal(plain[k], v) for k, v in step(changes).items())


@pytest.mark.parametrize("after", ["conv", "dropout"])
def test_an_in_place_leaky_relu_keeps_one_activation_less_only_where_the_next_layer_saves_it(after):
    """05's recap (the third fresh read's O1): an in-place LeakyReLU saves its output, which is its
    input's memory; where the next layer saves the activation's output (a Conv right after it) that
    is one activation less than out of place; through a train-mode Dropout, which saves a mask, both
    keep the same bytes."""
    def saved_bytes(inplace):
        torch.manual_seed(0)
        if after == "conv":
            model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.LeakyReLU(inplace=inplace), nn.Conv2d(4, 4, 3))
            x = torch.randn(2, 1, 8, 8, requires_grad=True)
        else:
            model = nn.Sequential(nn.Linear(8, 16), nn.LeakyReLU(inplace=inplace), nn.Dropout(0.5), nn.Linear(16, 4))
            x = torch.randn(4, 8, requires_grad=True)
        model.train()
        seen = {}

        def pack(t):
            seen[(t.untyped_storage().data_ptr(), t.dtype)] = t.untyped_storage().nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            model(x)
        params = {(p.untyped_storage().data_ptr(), p.dtype) for p in model.parameters()}
        return sum(n for k, n in seen.items() if k not in params)

    assert (saved_bytes(True) < saved_bytes(False)) == (after == "conv")
