"""HookSet: a cell run any number of times leaves exactly one hook attached."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import hooktutor as ht
from hooktutor.models import MLP


def test_same_name_replaces_so_rerunning_a_cell_keeps_one_hook():
    model = MLP(seed=0)
    hooks = ht.HookSet("test-rerun")
    fired = []
    for _ in range(3):  # "the cell was run three times"
        hooks.forward("count", model.fc1, lambda m, a, o: fired.append(1))
    model(torch.zeros(1, 8))
    assert fired == [1]
    assert len(ht.list_hooks(model)) == 1 and len(hooks) == 1
    hooks.clear()


def test_recreating_a_set_of_the_same_name_removes_the_old_sets_hooks():
    model = MLP(seed=0)
    first = ht.HookSet("test-recreate")
    first.forward("a", model.fc1, lambda m, a, o: None)
    first.forward_pre("b", model.fc2, lambda m, a: None)
    second = ht.HookSet("test-recreate")  # the cell that made the set ran again
    assert second.replaced_previous == 2
    assert len(first) == 0 and len(ht.list_hooks(model)) == 0
    second.clear()


def test_every_kind_and_kwargs_pass_through():
    model = MLP(seed=0)
    with ht.HookSet("test-kinds") as hooks:
        hooks.forward_pre("pre", model.fc1, lambda m, a, k: None, with_kwargs=True)
        hooks.forward("fwd", model.fc1, lambda m, a, o: None, always_call=True)
        hooks.backward_pre("bpre", model.fc2, lambda m, g: None)
        hooks.backward("bwd", model.fc2, lambda m, gi, go: None)
        hooks.tensor("grad", model.head.weight, lambda g: None)
        hooks.post_accumulate("step", model.head.bias, lambda p: None)
        kinds = sorted((r.path, r.kind, r.flags) for r in ht.list_hooks(model))
        assert kinds == sorted([("fc1", "forward_pre", ("with_kwargs",)), ("fc1", "forward", ("always_call",)),
                                ("fc2", "backward_pre", ()), ("fc2", "backward", ()),
                                ("head.weight", "tensor", ()), ("head.bias", "post_accumulate", ())])
        assert hooks.names == ["pre", "fwd", "bpre", "bwd", "grad", "step"]
    assert len(ht.list_hooks(model)) == 0


def test_context_manager_clears_on_error_too():
    model = MLP(seed=0)
    with pytest.raises(ValueError):
        with ht.HookSet("test-error") as hooks:
            hooks.forward("a", model.fc1, lambda m, a, o: None)
            raise ValueError
    assert len(ht.list_hooks(model)) == 0


def test_remove_and_clear_report_what_they_did():
    model = MLP(seed=0)
    hooks = ht.HookSet("test-remove")
    hooks.forward("a", model.fc1, lambda m, a, o: None)
    hooks.forward("b", model.fc2, lambda m, a, o: None)
    assert hooks.remove("a") is True and hooks.remove("a") is False
    assert "b" in hooks and "a" not in hooks
    assert hooks.clear() == 1 and len(ht.list_hooks(model)) == 0


def test_repr_lists_named_hooks():
    model = MLP(seed=0)
    hooks = ht.HookSet("test-repr")

    def save(m, a, o):
        return None

    hooks.forward("save", model.fc1, save)
    assert repr(hooks) == "HookSet('test-repr') with 1 hook\n  save: forward hook on Linear (save)"
    hooks.clear()


@pytest.mark.parametrize("target, kind, message", [
    (torch.zeros(1), "forward", "a 'forward' hook goes on an nn.Module, got Tensor"),
    (nn.Linear(1, 1), "tensor", "a 'tensor' hook goes on a tensor, got Linear"),
])
def test_wrong_targets_are_typeerrors(target, kind, message):
    with pytest.raises(TypeError, match=message):
        ht.HookSet("test-types").add("x", target, kind, lambda *a: None)


def test_unknown_kind_lists_the_kinds():
    with pytest.raises(ValueError, match="unknown hook kind 'fwd'; use one of 'forward_pre'"):
        ht.HookSet("test-kind").add("x", nn.Linear(1, 1), "fwd", lambda *a: None)


def test_non_callable_hook():
    with pytest.raises(TypeError, match="the hook must be a function, got int"):
        ht.HookSet("test-callable").forward("x", nn.Linear(1, 1), 3)


def test_a_replacement_torch_refuses_leaves_the_old_hook_in_place():
    w = torch.ones(2, requires_grad=True)
    hooks = ht.HookSet("test-refused")
    try:
        hooks.tensor("double", w, lambda g: g * 2)
        with pytest.raises(RuntimeError, match="doesn't require gradient"):
            hooks.tensor("double", torch.ones(2), lambda g: g * 3)  # torch refuses: no grad
        (w * 1).sum().backward()
        assert w.grad.tolist() == [2.0, 2.0] and len(hooks) == 1
    finally:
        hooks.clear()



def test_a_claim_with_an_earlier_window_is_expected_there_and_said_so():
    """compile-skips-late-global-hook shows in torch 2.3 and 2.4, not in 2.5 and 2.6, and again
    from 2.7: `also` holds the window, expected() honours it and check()'s words name it."""
    from hooktutor.course import claims as registry

    want = {"2.2.2": False, "2.3.1": True, "2.4.1": True, "2.5.1": False, "2.6.0": False, "2.7.1": True,
            "2.13.0": True}
    got = {v: registry.expected("compile-skips-late-global-hook", v) for v in want}
    assert got == want
    assert registry.releases_with_it("compile-skips-late-global-hook") == "torch 2.3 to 2.4 and 2.7 and newer"
    assert registry.releases_with_it("compile-skips-late-hook") == "torch 2.5 and newer"
