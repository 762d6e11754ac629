"""The saved-tensors widget of 09_autograd_graph_hooks ("Try it live"), driven the way a click drives it."""

from __future__ import annotations

import pytest
import torch

import hooktutor as ht
from hooktutor.models import deep_mlp
from hooktutor.widgets import close_all, saved_tensors_toggle
from hooktutor.widgets.saved import _counted, memory_by_layer, relative_error, saved_run


@pytest.fixture
def data():
    return ht.data.blobs(32, seed=0)


@pytest.fixture(autouse=True)
def _close_widgets():
    yield
    close_all()


def by_hand(model, x, y, *, bfloat16):
    """The memory of the activations autograd keeps, per leaf, counted by hand: each Linear saves its input
    and each ReLU its output, which is the next Linear's input, so one storage per ReLU (counted in the
    ReLU) plus the model's input (in the first Linear); bfloat16 takes 2 bytes a number instead of 4.
    The weights are the model's own and are not counted."""
    width = 2 if bfloat16 else 4
    per_layer = {}
    h = x
    for i, (name, layer) in enumerate(model.named_children()):
        per_layer[name] = h.numel() * width if i == 0 else 0
        h = layer(h)
        if isinstance(layer, torch.nn.ReLU):
            per_layer[name] = h.numel() * width
    return per_layer


def test_the_memory_per_layer_counts_each_saved_activation_once(data):
    x, y = data
    model = deep_mlp(depth=3, width=16, seed=0)
    for bfloat16 in (False, True):
        run = saved_run(model, x, y, bfloat16=bfloat16)
        assert run.per_layer == by_hand(model, x, y, bfloat16=bfloat16)
        # handed to pack: the model's input once, each ReLU's output twice (the ReLU, the next Linear)
        assert run.handed == 4 * (x.numel() + 2 * 3 * 32 * 16)


def test_memory_by_layer_counts_a_storage_once_where_it_is_first_held():
    a, b = torch.zeros(4), torch.zeros(2, dtype=torch.float64)
    kept = [("one", a), ("two", a.view(2, 2)), ("two", b), ("three", a[1:])]
    assert memory_by_layer(kept) == {"one": 16, "two": 16, "three": 0}


def test_the_pair_copies_each_tensor_once_and_a_copy_per_save_would_not_save_memory(data):
    """What the widget's pair saves is real: per tensor, not per save."""
    x, y = data
    model = deep_mlp(depth=4, width=64, seed=0)
    plain, packed = saved_run(model, x, y, bfloat16=False), saved_run(model, x, y, bfloat16=True)
    assert 2 * packed.total == plain.total < plain.handed == packed.handed
    # the same forward with a bfloat16 copy per save: each ReLU output copied twice, hardly less memory
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    copies = []

    def per_save(tensor):
        if tensor.untyped_storage().data_ptr() in params:
            return tensor
        copies.append(tensor.to(torch.bfloat16))
        return copies[-1]

    with torch.autograd.graph.saved_tensors_hooks(per_save, lambda t: t.float()):
        model(x)
    assert memory_by_layer([("", c) for c in copies])[""] > 0.95 * plain.total  # 33,280 of 33,792 bytes


def test_on_a_3d_input_the_pair_still_copies_each_storage_once(data):
    """On a contiguous 3-D input each Linear saves its input flattened to 2-D: a view, another tensor
    object over the ReLU output's storage. A pair keyed on the object copied it twice; this one once."""
    x, y = data
    layers = deep_mlp(depth=3, width=16, seed=0)
    model = torch.nn.Sequential(torch.nn.Unflatten(0, (4, 8)), *layers, torch.nn.Flatten(0, 1))
    objects = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: objects.append(t) or t, lambda t: t):
        model(x)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    acts = [t for t in objects if t.untyped_storage().data_ptr() not in params]  # not the weights
    assert len({id(t) for t in acts}) == 7 and len({t.untyped_storage().data_ptr() for t in acts}) == 4
    plain, packed = saved_run(model, x, y, bfloat16=False), saved_run(model, x, y, bfloat16=True)
    assert plain.total == 4 * (x.numel() + 3 * 32 * 16)  # the input and each ReLU's output, once
    assert {n: 2 * b for n, b in packed.per_layer.items()} == plain.per_layer
    # each save gets a view of the copy with its own shape: the gradients move by bfloat16 rounding only
    assert 1e-5 < relative_error(packed.grads, plain.grads) < 1e-2


def test_an_in_place_edit_gets_a_fresh_copy():
    """The same memory saved before and after an in-place edit: the second save must not be handed the
    first one's copy (backward of exp_ reads its result)."""
    w = torch.tensor([0.5, -1.0, 2.0], requires_grad=True)

    def exp_grad(bfloat16):
        w.grad = None
        with _counted(lambda tensor, stored: None, bfloat16, torch.nn.Linear(1, 1)):
            a = w * 1
            _unused = a * w  # saves a
            a.exp_()  # edits a in place and saves the new value
        a.sum().backward()
        return w.grad

    plain = exp_grad(False)
    assert torch.equal(plain, torch.exp(w.detach()))
    assert torch.allclose(exp_grad(True), plain, rtol=2**-7)  # bfloat16 rounding, not the old value


def test_a_click_keeps_the_activations_in_bfloat16_the_forward_stays_and_the_gradients_move_a_little(data):
    x, y = data
    toggle = saved_tensors_toggle(deep_mlp(depth=4, width=32, seed=0), x, y)
    assert toggle.run is toggle.reference and toggle.error == 0.0
    toggle.value = True
    assert toggle.run.total * 2 == toggle.reference.total
    assert torch.equal(toggle.run.output, toggle.reference.output)
    # bfloat16 keeps 8 bits of mantissa (a relative rounding error up to 2**-9, about 0.2%): the
    # gradients move by far less than 1% and by far more than float32 rounding (1e-6)
    assert 1e-5 < toggle.error < 1e-2
    assert "forward output identical" in toggle.status_text and "bfloat16 on" in toggle.status_text
    assert f"in memory: {toggle.run.total:,} bytes" in toggle.status_text
    toggle.value = False
    assert toggle.error == 0.0 and "bfloat16 off" in toggle.status_text


def test_every_click_redraws_and_the_model_passed_in_is_never_changed(data):
    x, y = data
    model = deep_mlp(depth=4, width=32, seed=0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    toggle = saved_tensors_toggle(model, x, y)
    first = toggle._view.png
    toggle.value = True  # how long a click takes: benchmarks/widget_latency.py
    assert toggle._view.png and toggle._view.png != first
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters()) and len(ht.list_hooks(model)) == 0
    assert len(ht.list_hooks(toggle.model)) == 0  # the per-layer pre-hooks live only during a run


def test_recreating_replaces_the_old_one(data):
    x, y = data
    old = saved_tensors_toggle(deep_mlp(depth=2, width=8, seed=0), x, y)
    new = saved_tensors_toggle(deep_mlp(depth=2, width=8, seed=0), x, y)  # the cell run again
    assert old.closed and not new.closed
    new.close()
    new.close()
    assert new.closed


def test_relative_error_and_bad_arguments():
    a = [torch.tensor([3.0, 4.0])]
    assert relative_error(a, a) == 0.0
    assert relative_error([torch.tensor([3.0, 4.5])], a) == pytest.approx(0.1)
    with pytest.raises(TypeError, match="needs a torch.nn.Module"):
        saved_tensors_toggle(torch.zeros(2), torch.zeros(2, 8), torch.zeros(2, dtype=torch.long))


def test_text_repr_is_short_and_follows_the_state(data):
    x, y = data
    toggle = saved_tensors_toggle(deep_mlp(depth=2, width=8, seed=0), x, y)
    assert repr(toggle) == "SavedTensorsToggle(bfloat16 off, 5 layers)"
    toggle.value = True
    assert repr(toggle) == "SavedTensorsToggle(bfloat16 on, 5 layers)"
