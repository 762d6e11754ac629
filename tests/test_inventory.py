"""list_hooks / remove_hooks: see and remove every kind of hook on a model."""

from __future__ import annotations

import functools

import pytest
import torch
from torch import nn
from torch.nn.modules import module as module_mod

import hooktutor as ht
from hooktutor.models import MLP


def noop(*args, **kwargs):
    return None


def fully_hooked_mlp():
    model = MLP(seed=0)
    model.register_forward_pre_hook(noop)
    model.fc1.register_forward_pre_hook(noop, with_kwargs=True)
    model.fc1.register_forward_hook(noop)
    model.fc1.register_forward_hook(noop, with_kwargs=True, always_call=True)
    model.fc2.register_full_backward_pre_hook(noop)
    model.fc2.register_full_backward_hook(noop)
    model.head.register_backward_hook(noop)  # legacy
    model.head.weight.register_hook(noop)
    model.head.bias.register_post_accumulate_grad_hook(noop)
    return model


def test_list_hooks_finds_every_kind_with_flags():
    model = fully_hooked_mlp()
    table = ht.list_hooks(model)
    rows = {(r.path, r.kind, r.flags) for r in table}
    assert rows == {
        ("<root>", "forward_pre", ()),
        ("fc1", "forward_pre", ("with_kwargs",)),
        ("fc1", "forward", ()),
        ("fc1", "forward", ("with_kwargs", "always_call")),
        ("fc2", "backward_pre", ()),
        ("fc2", "backward", ()),
        ("head", "backward (legacy)", ()),
        ("head.weight", "tensor", ()),
        ("head.bias", "post_accumulate", ()),
    }
    assert len(table) == 9
    assert table.counts()["forward"] == 2
    assert len(table.where(path="fc1")) == 3
    assert all(r.function == "noop" for r in table)
    ht.remove_hooks(model)


def test_rows_carry_the_real_handle_ids():
    model = MLP(seed=0)
    h = model.fc2.register_forward_hook(noop)
    (row,) = ht.list_hooks(model)
    assert row.handle_id == h.id and row.hook is noop
    h.remove()
    assert len(ht.list_hooks(model)) == 0


def test_text_and_html_reprs_read_well_and_omit_handle_ids():
    model = MLP(seed=0)
    h = model.fc1.register_forward_hook(lambda m, a, o: None)
    text = repr(ht.list_hooks(model))
    assert text.splitlines()[0] == "1 hook attached to MLP"
    assert text.splitlines()[1].split() == ["module", "kind", "function", "flags"]
    assert text.splitlines()[2].split()[:3] == ["fc1", "forward", "<lambda>"]
    html = ht.list_hooks(model)._repr_html_()
    assert "<table" in html and "<td>fc1</td>" in html and "<td>&lt;lambda&gt; (in test_text_and_html" in html
    h.remove()
    assert repr(ht.list_hooks(model)) == "0 hooks attached to MLP"


def test_function_names_for_partials_and_callables():
    class Recorder:
        def __call__(self, m, a, o):
            return None

    model = MLP(seed=0)
    model.fc1.register_forward_hook(functools.partial(noop, 1))
    model.fc2.register_forward_hook(Recorder())
    names = [r.function for r in ht.list_hooks(model)]
    assert names == ["partial(noop)",
                     "Recorder (in test_function_names_for_partials_and_callables) instance"]
    ht.remove_hooks(model)


def test_remove_hooks_counts_and_removes_everything_and_hooks_stop_firing():
    model = fully_hooked_mlp()
    fired = []
    model.act1.register_forward_hook(lambda m, a, o: fired.append(1))
    assert ht.remove_hooks(model) == 10
    assert len(ht.list_hooks(model)) == 0
    model(torch.zeros(1, 8)).sum().backward()
    assert fired == []


def test_removed_parameter_hooks_really_stop_firing():
    lin = nn.Linear(2, 1)
    fired = []
    lin.weight.register_hook(lambda g: fired.append("tensor"))
    lin.bias.register_post_accumulate_grad_hook(lambda p: fired.append("post"))
    lin(torch.ones(1, 2)).sum().backward()
    assert sorted(fired) == ["post", "tensor"]
    assert ht.remove_hooks(lin) == 2
    fired.clear()
    lin(torch.ones(1, 2)).sum().backward()
    assert fired == []


def test_after_remove_hooks_a_module_with_a_legacy_hook_accepts_a_full_one():
    lin = nn.Linear(2, 2)
    lin.register_backward_hook(noop).remove()
    with pytest.raises(RuntimeError, match="Cannot use both regular backward hooks and full backward hooks"):
        lin.register_full_backward_hook(noop)
    ht.remove_hooks(lin)
    h = lin.register_full_backward_hook(noop)
    assert ht.list_hooks(lin)[0].kind == "backward"
    h.remove()


def test_global_hooks_are_listed_but_removed_only_when_asked():
    model = MLP(seed=0)
    h = module_mod.register_module_forward_hook(noop)
    try:
        table = ht.list_hooks(model)
        assert [(r.path, r.kind) for r in table] == [("<global>", "forward")]
        assert len(ht.list_hooks(model, include_global=False)) == 0
        assert ht.remove_hooks(model) == 0
        assert h.id in module_mod._global_forward_hooks
        assert ht.remove_hooks(model, include_global=True) == 1
        assert h.id not in module_mod._global_forward_hooks
    finally:
        h.remove()


def test_hooks_user_handles_still_work_after_remove_hooks():
    model = MLP(seed=0)
    h = model.fc1.register_forward_hook(noop)
    ht.remove_hooks(model)
    h.remove()  # must not raise on an already-cleared dict


def test_shared_module_listed_once():
    shared = nn.Linear(2, 2)
    net = nn.Sequential(shared, shared)
    shared.register_forward_hook(noop)
    assert len(ht.list_hooks(net)) == 1
    ht.remove_hooks(net)


def test_remove_row_removes_only_that_hook():
    model = MLP(seed=0)
    keep = model.fc1.register_forward_hook(noop)
    model.fc1.register_forward_hook(lambda m, a, o: None, always_call=True)
    model.fc2.weight.register_hook(noop)
    table = ht.list_hooks(model)
    for row in table:
        if row.handle_id != keep.id:
            ht.inventory.remove_row(model, row)
    (left,) = ht.list_hooks(model)
    assert left.handle_id == keep.id
    assert not model.fc1._forward_hooks_always_called
    keep.remove()


@pytest.mark.parametrize("func", [ht.list_hooks, ht.remove_hooks])
def test_wrong_type_is_a_clear_typeerror(func):
    with pytest.raises(TypeError, match=r"needs a torch.nn.Module \(your model or one of its layers\), got list"):
        func([nn.Linear(1, 1)])
