"""Pins on every private torch attribute hooktutor relies on (all read in inventory.py).

If a torch release renames or restructures one of these, this file fails with a clear
message instead of list_hooks/remove_hooks silently missing hooks.
"""

from __future__ import annotations

from collections import OrderedDict

import pytest
import torch
from torch import nn
from torch.nn.modules import module as module_mod

from hooktutor import inventory


@pytest.mark.parametrize("attr", [a for a, _ in inventory.MODULE_HOOK_DICTS] + list(inventory.MODULE_FLAG_DICTS))
def test_module_hook_dicts_exist_and_are_dicts(attr):
    m = nn.Linear(1, 1)
    assert isinstance(getattr(m, attr), dict), f"nn.Module.{attr} changed in torch {torch.__version__}"


@pytest.mark.parametrize("register, attr", [
    (lambda m, f: m.register_forward_pre_hook(f), "_forward_pre_hooks"),
    (lambda m, f: m.register_forward_hook(f), "_forward_hooks"),
    (lambda m, f: m.register_full_backward_pre_hook(f), "_backward_pre_hooks"),
    (lambda m, f: m.register_full_backward_hook(f), "_backward_hooks"),
])
def test_each_public_registration_lands_in_its_private_dict_under_the_handle_id(register, attr):
    m = nn.Linear(1, 1)

    def f(*args):
        return None

    h = register(m, f)
    assert getattr(m, attr) == {h.id: f}
    h.remove()
    assert getattr(m, attr) == {}


def test_flag_dicts_record_with_kwargs_and_always_call():
    m = nn.Linear(1, 1)
    pre = m.register_forward_pre_hook(lambda m, a, k: None, with_kwargs=True)
    fwd = m.register_forward_hook(lambda m, a, k, o: None, with_kwargs=True, always_call=True)
    assert pre.id in m._forward_pre_hooks_with_kwargs
    assert fwd.id in m._forward_hooks_with_kwargs and fwd.id in m._forward_hooks_always_called
    pre.remove()
    fwd.remove()
    assert not m._forward_hooks_with_kwargs and not m._forward_hooks_always_called


def test_is_full_backward_hook_flag_and_its_stickiness():
    m = nn.Linear(1, 1)
    assert m._is_full_backward_hook is None
    m.register_backward_hook(lambda *a: None).remove()
    assert m._is_full_backward_hook is False  # not reset by remove(): why remove_hooks resets it
    m._is_full_backward_hook = None
    m.register_full_backward_hook(lambda *a: None).remove()
    assert m._is_full_backward_hook is True


def test_tensor_hook_dicts_on_parameters():
    p = nn.Parameter(torch.ones(2))
    assert p._backward_hooks is None and p._post_accumulate_grad_hooks is None
    h1 = p.register_hook(lambda g: None)
    h2 = p.register_post_accumulate_grad_hook(lambda t: None)
    assert isinstance(p._backward_hooks, OrderedDict) and h1.id in p._backward_hooks
    assert isinstance(p._post_accumulate_grad_hooks, OrderedDict) and h2.id in p._post_accumulate_grad_hooks


def test_clearing_a_parameter_hook_dict_disables_the_hook():
    p = nn.Parameter(torch.ones(2))
    fired = []
    p.register_hook(lambda g: fired.append(1))
    p._backward_hooks.clear()
    (p * 2).sum().backward()
    assert fired == []


TORCH = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])


@pytest.mark.parametrize("attr", [a for a, _ in inventory.GLOBAL_HOOK_DICTS] + ["_global_is_full_backward_hook"])
def test_global_hook_state_exists(attr):
    assert hasattr(module_mod, attr), f"torch.nn.modules.module.{attr} is gone in torch {torch.__version__}"


@pytest.mark.parametrize("attr", inventory.GLOBAL_FLAG_DICTS)
def test_global_flag_dicts_exist_from_torch_2_2(attr):
    if TORCH < (2, 2):
        assert not hasattr(module_mod, attr) or isinstance(getattr(module_mod, attr), dict)
        pytest.skip(f"torch {torch.__version__} has no global hook flags; inventory treats them as empty")
    assert isinstance(getattr(module_mod, attr), dict), f"{attr} changed in torch {torch.__version__}"


def test_global_registration_lands_in_the_global_dicts():
    if TORCH < (2, 2):
        h = module_mod.register_module_forward_hook(lambda m, a, o: None)
        assert h.id in module_mod._global_forward_hooks
        h.remove()
        return
    h = module_mod.register_module_forward_hook(lambda m, a, o: None, always_call=True)
    try:
        assert h.id in module_mod._global_forward_hooks
        assert h.id in module_mod._global_forward_hooks_always_called
    finally:
        h.remove()
    assert h.id not in module_mod._global_forward_hooks_always_called


def test_handle_ids_come_from_one_global_counter():
    from torch.utils.hooks import RemovableHandle

    a = nn.Linear(1, 1).register_forward_hook(lambda *x: None)
    b = nn.Parameter(torch.ones(1)).register_hook(lambda g: None)
    assert b.id == a.id + 1 and RemovableHandle.next_id == b.id + 1
