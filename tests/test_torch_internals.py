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


# -- state-dict hooks and the hooks PyTorch itself installs (owner column of list_hooks) ------

PUBLIC_LOAD_PRE = hasattr(nn.Module, "register_load_state_dict_pre_hook")  # not on torch 2.1
PUBLIC_STATE_DICT_POST = hasattr(nn.Module, "register_state_dict_post_hook")  # not on torch 2.1


@pytest.mark.parametrize("attr", [a for a, _ in inventory.STATE_DICT_HOOK_DICTS])
def test_state_dict_hook_dicts_exist_and_are_dicts(attr):
    m = nn.Linear(1, 1)
    assert isinstance(getattr(m, attr), dict), f"nn.Module.{attr} changed in torch {torch.__version__}"


def test_state_dict_registrations_land_in_their_dicts_unwrapped():
    m = nn.Linear(1, 1)

    def f(*args):
        return None

    pre = m.register_state_dict_pre_hook(f)
    post = m._register_state_dict_hook(f)
    load_post = m.register_load_state_dict_post_hook(f)
    assert m._state_dict_pre_hooks == {pre.id: f}
    assert m._state_dict_hooks == {post.id: f}
    assert m._load_state_dict_post_hooks == {load_post.id: f}
    for h in (pre, post, load_post):
        h.remove()
    assert not m._state_dict_pre_hooks and not m._state_dict_hooks and not m._load_state_dict_post_hooks


def test_public_state_dict_post_hook_lands_in_state_dict_hooks():
    if not PUBLIC_STATE_DICT_POST:
        pytest.skip(f"torch {torch.__version__} has no register_state_dict_post_hook (only the private one)")
    m = nn.Linear(1, 1)

    def f(*args):
        return None

    h = m.register_state_dict_post_hook(f)
    assert m._state_dict_hooks == {h.id: f}
    h.remove()


def test_load_state_dict_pre_hooks_are_stored_in_a_wrapped_hook_with_the_hook_in_dot_hook():
    wrapped = module_mod._WrappedHook
    m = nn.Linear(1, 1)

    def f(*args):
        return None

    h = m._register_load_state_dict_pre_hook(f)
    stored = m._load_state_dict_pre_hooks[h.id]
    assert type(stored) is wrapped and stored.hook is f
    assert stored.__module__ == f.__module__  # functools.update_wrapper: why inventory unwraps it first
    h.remove()
    if PUBLIC_LOAD_PRE:
        h = m.register_load_state_dict_pre_hook(f)
        stored = m._load_state_dict_pre_hooks[h.id]
        assert type(stored) is wrapped and stored.hook is f
        h.remove()
    assert not m._load_state_dict_pre_hooks


PLAIN_MODULES = {
    "Linear": lambda: nn.Linear(4, 4),
    "Conv2d": lambda: nn.Conv2d(1, 2, 3),
    "BatchNorm2d": lambda: nn.BatchNorm2d(2),
    "ReLU": lambda: nn.ReLU(),
    "Sequential": lambda: nn.Sequential(nn.Linear(2, 2), nn.ReLU()),
    "MultiheadAttention": lambda: nn.MultiheadAttention(4, 2),
    "TransformerEncoderLayer": lambda: nn.TransformerEncoderLayer(4, 2, 8),
}


@pytest.mark.parametrize("name", PLAIN_MODULES)
def test_plain_modules_carry_no_hooks_of_their_own(name):
    """Checked on torch 2.1.2, 2.13 and 2.15: if a release adds one, list_hooks shows it as
    PyTorch's and remove_hooks leaves it; this test then says so."""
    model = PLAIN_MODULES[name]()
    for sub in model.modules():
        for attr, _ in (*inventory.MODULE_HOOK_DICTS, *inventory.STATE_DICT_HOOK_DICTS):
            assert not getattr(sub, attr), f"{type(sub).__name__}.{attr} is not empty in torch {torch.__version__}"


def _pre_hooks(m):
    return list(m._forward_pre_hooks.values())


def test_prune_registers_the_pruning_method_itself_as_a_forward_pre_hook():
    from torch.nn.utils import prune

    lin = nn.Linear(4, 4)
    prune.l1_unstructured(lin, "weight", amount=0.5)
    (hook,) = _pre_hooks(lin)
    assert isinstance(hook, prune.BasePruningMethod) and type(hook).__module__ == "torch.nn.utils.prune"


def test_old_weight_norm_registers_a_weightnorm_instance():
    import warnings

    from torch.nn.utils.weight_norm import WeightNorm

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecated in favour of parametrizations.weight_norm
        lin = torch.nn.utils.weight_norm(nn.Linear(4, 4))
    (hook,) = _pre_hooks(lin)
    assert isinstance(hook, WeightNorm)


def test_spectral_norm_registers_a_pre_hook_and_two_state_dict_hooks():
    from torch.nn.utils.spectral_norm import SpectralNorm, SpectralNormLoadStateDictPreHook, SpectralNormStateDictHook

    lin = torch.nn.utils.spectral_norm(nn.Linear(4, 4))
    (hook,) = _pre_hooks(lin)
    assert isinstance(hook, SpectralNorm)
    (sd,) = lin._state_dict_hooks.values()
    assert isinstance(sd, SpectralNormStateDictHook)
    (load,) = lin._load_state_dict_pre_hooks.values()
    assert isinstance(load, module_mod._WrappedHook) and isinstance(load.hook, SpectralNormLoadStateDictPreHook)


def test_lazy_modules_register_two_bound_methods_and_drop_them_once_initialised():
    import warnings

    from torch.nn.modules.lazy import LazyModuleMixin

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch 2.1: "Lazy modules are a new feature..."
        lazy = nn.LazyLinear(3)
    ((hid, init),) = lazy._forward_pre_hooks.items()
    (load,) = lazy._load_state_dict_pre_hooks.values()
    assert init.__self__ is lazy and init.__func__ is LazyModuleMixin._infer_parameters
    assert isinstance(load, module_mod._WrappedHook)
    assert load.hook.__self__ is lazy and load.hook.__func__ is LazyModuleMixin._lazy_load_hook
    if TORCH < (2, 2):
        assert hid not in lazy._forward_pre_hooks_with_kwargs
    elif TORCH >= (2, 13):
        assert hid in lazy._forward_pre_hooks_with_kwargs  # with_kwargs=True since about 2.2
    lazy(torch.ones(2, 5))
    assert not lazy._forward_pre_hooks and not lazy._load_state_dict_pre_hooks


def test_quantization_observers_are_module_level_functions_of_quantize():
    import sys
    import warnings

    assert "torch.ao.quantization.quantize" in sys.modules, "imported by torch itself; inventory never imports it"
    import torch.ao.quantization as q

    quantize = sys.modules["torch.ao.quantization.quantize"]  # the package's `quantize` is a function

    model = nn.Sequential(q.QuantStub(), nn.Linear(2, 2), q.DeQuantStub())
    model.qconfig = q.default_qconfig
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecation of torch.ao.quantization on newer torch
        q.prepare(model, inplace=True)
    hooks = [h for m in model.modules() for h in m._forward_hooks.values()]
    assert hooks and all(h is quantize._observer_forward_hook for h in hooks)
    assert callable(quantize._observer_forward_pre_hook)
