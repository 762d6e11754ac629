"""list_hooks / remove_hooks: see and remove every kind of hook on a model."""

from __future__ import annotations

import functools
import warnings

import pytest
import torch
from torch import nn
from torch.nn.modules import module as module_mod
from torch.nn.utils import prune

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
    assert text.splitlines()[1].split() == ["module", "kind", "function", "owner", "flags"]
    assert text.splitlines()[2].split()[:3] == ["fc1", "forward", "<lambda>"]
    assert text.splitlines()[2].split()[-1] == "you"
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


def test_a_tied_parameter_is_listed_once_and_removed_cleanly():
    emb, head = nn.Embedding(5, 3), nn.Linear(3, 5, bias=False)
    head.weight = emb.weight  # tied, as in a language model
    net = nn.Sequential(emb, head)
    fired = []
    emb.weight.register_hook(lambda g: fired.append(1))
    rows = ht.list_hooks(net, include_global=False)
    assert [(r.path, r.kind) for r in rows] == [("0.weight", "tensor")]
    assert ht.remove_hooks(net) == 1
    net(torch.tensor([1, 2])).sum().backward()
    assert fired == [] and len(ht.list_hooks(net, include_global=False)) == 0


def test_torch_operators_used_as_hooks_are_the_users():
    model = MLP(seed=0)
    model.fc1.weight.register_hook(functools.partial(torch.clamp, min=-0.01, max=0.01))
    model.fc2.weight.register_hook(torch.nan_to_num)
    model.fc1.register_forward_hook(lambda m, a, o: None)
    model.head.register_forward_pre_hook(functools.partial(nn.functional.relu))
    rows = ht.list_hooks(model, include_global=False)
    assert [r.owner_label for r in rows] == ["you"] * 4
    assert ht.remove_hooks(model) == 4 and len(ht.list_hooks(model, include_global=False)) == 0


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


# -- hooks PyTorch installs: listed with their owner, left by remove_hooks unless asked --------

def pruned_mlp():
    model = MLP(seed=0)
    prune.l1_unstructured(model.fc1, "weight", amount=0.5)
    return model


def train_steps(model, steps=2):
    """``steps`` SGD steps (forward, backward, optimizer step) on fixed data."""
    x, y = ht.data.blobs(16, seed=1)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    for _ in range(steps):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()


def lazy_net():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch 2.1: "Lazy modules are a new feature..."
        return nn.Sequential(nn.LazyLinear(4), nn.ReLU(), nn.Linear(4, 2))


def old_weight_norm(module):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # FutureWarning/UserWarning: use parametrizations.weight_norm
        return torch.nn.utils.weight_norm(module)


def test_pruned_model_still_trains_after_remove_hooks_and_pruned_weights_stay_zero():
    model = pruned_mlp()
    zeros = model.fc1.weight_mask == 0
    before = model.fc1.weight_orig.detach().clone()
    assert ht.remove_hooks(model) == 0
    train_steps(model, 2)  # the second backward failed when the prune hook was removed
    assert not torch.equal(model.fc1.weight_orig, before), "the model trained"
    assert torch.all(model.fc1.weight[zeros] == 0)
    (row,) = ht.list_hooks(model)
    assert (row.path, row.kind, row.owner, row.mechanism) == ("fc1", "forward_pre", "pytorch", "prune")


def test_lazy_module_still_initialises_after_remove_hooks():
    model = lazy_net()
    model[2].register_forward_hook(noop)
    assert ht.remove_hooks(model) == 1
    out = model(torch.ones(3, 5))
    assert out.shape == (3, 2) and model[0].weight.shape == (4, 5)
    assert len(ht.list_hooks(model)) == 0  # torch removes both lazy hooks once initialised


def test_old_weight_norm_still_recomputes_the_weight_after_remove_hooks():
    torch.manual_seed(0)
    lin = old_weight_norm(nn.Linear(3, 2))
    assert ht.remove_hooks(lin) == 0
    x = torch.ones(1, 3)
    out1 = lin(x)
    with torch.no_grad():
        lin.weight_g.mul_(2.0)
    out2 = lin(x)
    assert torch.allclose(out2 - lin.bias, 2 * (out1 - lin.bias), atol=1e-6)
    (row,) = ht.list_hooks(lin)
    assert (row.kind, row.owner, row.mechanism, row.function) == (
        "forward_pre", "pytorch", "weight_norm", "WeightNorm instance")


def test_spectral_norm_hooks_are_listed_as_pytorchs_including_state_dict_hooks():
    model = MLP(seed=0)
    torch.nn.utils.spectral_norm(model.fc2)
    table = ht.list_hooks(model)
    assert [(r.path, r.kind) for r in table] == [
        ("fc2", "forward_pre"), ("fc2", "state_dict"), ("fc2", "load_state_dict_pre")]
    assert {(r.owner, r.mechanism, r.owner_label) for r in table} == {
        ("pytorch", "spectral_norm", "pytorch (spectral_norm)")}
    assert table[2].function == "SpectralNormLoadStateDictPreHook instance"  # unwrapped from _WrappedHook
    assert len(table.where(owner="pytorch")) == 3 and len(table.where(owner="user")) == 0
    removed = ht.remove_hooks(model)
    assert removed == 0 and len(removed.left) == 3
    model.load_state_dict(model.state_dict())  # the state-dict hooks still do their job


def test_include_pytorch_removes_them_and_the_model_breaks_as_it_would_without():
    model = pruned_mlp()
    removed = ht.remove_hooks(model, include_pytorch=True)
    assert removed == 1 and not removed.left and repr(removed) == "removed 1 hook"
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        train_steps(model, 2)

    lazy = lazy_net()
    assert ht.remove_hooks(lazy, include_pytorch=True) == 2
    with pytest.raises(ValueError, match="Attempted to use an uninitialized parameter"):
        lazy(torch.ones(3, 5))


def test_user_and_pytorch_hooks_on_one_module_only_the_users_go():
    model = pruned_mlp()
    model.fc1.register_forward_hook(noop)
    model.fc1.register_forward_pre_hook(lambda m, a: None)
    model.fc2.register_full_backward_hook(noop)
    lazy = lazy_net()
    model.add_module("extra", lazy)
    lazy[0].register_forward_hook(noop, always_call=True)

    removed = ht.remove_hooks(model)
    assert removed == 4 and isinstance(removed, int)
    assert str(removed) == "4" and f"{removed}" == "4" and f"{removed:>3}" == "  4"
    assert removed + 1 == 5 and type(removed + 1) is int
    assert repr(removed) == (
        "removed 4 hooks; left 3 that PyTorch installed and the model needs "
        "(prune: 1 on fc1, lazy module: 2 on extra.0); "
        "remove_hooks(model, include_pytorch=True) removes those too")
    assert [(r.path, r.kind, r.mechanism) for r in removed.left] == [
        ("fc1", "forward_pre", "prune"),
        ("extra.0", "forward_pre", "lazy module"),
        ("extra.0", "load_state_dict_pre", "lazy module")]
    assert {r.owner for r in removed.removed} == {"user"} and len(removed.removed) == 4
    assert [r.function for r in ht.list_hooks(model)] == [r.function for r in removed.left]
    assert not lazy[0]._forward_hooks_always_called
    (pre,) = model.fc1._forward_pre_hooks.values()
    assert isinstance(pre, prune.BasePruningMethod)
    assert model.fc2._is_full_backward_hook is None  # no backward hook left: accepts a legacy one again
    assert ht.remove_hooks(model) == 0  # nothing of yours left; PyTorch's still there
    assert len(ht.list_hooks(model)) == 3


def test_backward_flag_stays_while_a_pytorch_backward_hook_remains():
    lin = nn.Linear(2, 2)
    lin.register_full_backward_hook(noop)
    lin.register_full_backward_hook(torch.utils.hooks.warn_if_has_hooks)  # stands for a hook torch installs
    removed = ht.remove_hooks(lin)
    assert removed == 1
    assert repr(removed).startswith("removed 1 hook; left 1 that PyTorch installed and the model needs "
                                    "(pytorch (torch.utils.hooks): 1 on <root>)")
    assert lin._is_full_backward_hook is True
    with pytest.raises(RuntimeError, match="Cannot use both regular backward hooks and full backward hooks"):
        lin.register_backward_hook(noop)
    assert ht.remove_hooks(lin, include_pytorch=True) == 1
    assert lin._is_full_backward_hook is None


def test_owner_column_for_user_lambdas_functions_partials_and_capture():
    model = MLP(seed=0)
    model.fc1.register_forward_hook(lambda m, a, o: None)
    model.fc2.register_forward_hook(noop)
    model.head.register_forward_hook(functools.partial(noop, "tag"))
    model.act1.register_forward_hook(functools.partial(torch.utils.hooks.warn_if_has_hooks))  # torch's
    with ht.capture(model, ["act2"]):
        table = ht.list_hooks(model)
        rows = {(r.path, r.owner, r.mechanism, r.owner_label) for r in table}
        assert rows == {
            ("fc1", "user", "", "you"),
            ("fc2", "user", "", "you"),
            ("head", "user", "", "you"),
            ("act2", "user", "", "you"),
            ("act1", "pytorch", "pytorch (torch.utils.hooks)", "pytorch (torch.utils.hooks)"),
        }
        lines = repr(table).splitlines()
        assert lines[1].split() == ["module", "kind", "function", "owner", "flags"]
        assert "<th>owner</th>" in table._repr_html_() and "<td>you</td>" in table._repr_html_()
        assert "<td>pytorch (torch.utils.hooks)</td>" in table._repr_html_()
    ht.remove_hooks(model, include_pytorch=True)


def test_owner_of_bound_methods_builtins_wrapped_and_classes():
    class Recorder:
        def hook(self, *args):
            return None

        def __call__(self, *args):
            return None

    seen = []
    lin = nn.Linear(2, 2)
    lin.register_forward_hook(Recorder().hook)
    lin.register_forward_hook(Recorder())
    lin.weight.register_hook(seen.append)  # a bound builtin: the list's class decides
    lin._register_load_state_dict_pre_hook(noop)  # stored in torch's _WrappedHook
    lin.register_load_state_dict_post_hook(noop)
    lin.register_state_dict_pre_hook(noop)
    table = ht.list_hooks(lin)
    assert {r.owner for r in table} == {"user"}, repr(table)
    assert [r.kind for r in table.where(path="<root>")] == [
        "forward", "forward", "state_dict_pre", "load_state_dict_pre", "load_state_dict_post"]
    assert table.where(kind="load_state_dict_pre")[0].function == "noop"
    assert ht.inventory.hook_owner(prune.L1Unstructured(0.5)) == ("pytorch", "prune")
    assert ht.inventory.hook_owner(print) == ("user", "")
    with pytest.raises(ValueError, match="owner must be"):
        table.where(owner="you")
    assert ht.remove_hooks(lin) == 6 and len(ht.list_hooks(lin)) == 0


def test_a_hook_that_a_library_defines_is_that_librarys_and_stays_unless_asked():
    """The third owner: a hook whose function comes from a library's package (peft here, by its
    module name; transformers and accelerate on real models in tests/test_huggingface.py)."""
    def lora_hook(module, args, output):
        return None
    lora_hook.__module__ = "peft.tuners.lora.layer"
    lin = nn.Linear(2, 2)
    lin.register_forward_hook(lora_hook)
    lin.register_forward_hook(noop)
    table = ht.list_hooks(lin)
    row = table.where(owner="peft")[0]
    assert (row.owner, row.mechanism, row.owner_label, row.is_library, row.is_pytorch) == (
        "peft", "peft.tuners.lora.layer", "peft (peft.tuners.lora.layer)", True, False)
    assert table.where(owner="library").rows == [row] and len(table.where(owner="user")) == 1
    assert ht.inventory.hook_owner(functools.partial(lora_hook)) == ("peft", "peft.tuners.lora.layer")
    with pytest.raises(ValueError, match=r"installed by peft .*include_libraries=True"):
        ht.inventory.remove_row(lin, row)
    removed = ht.remove_hooks(lin)
    assert removed == 1 and repr(removed) == (
        "removed 1 hook; left 1 that peft installed and the model relies on (peft.tuners.lora.layer: 1 on <root>); "
        "remove_hooks(model, include_libraries=True) removes those too")
    assert ht.remove_hooks(lin, include_libraries=True) == 1 and len(ht.list_hooks(lin)) == 0


def test_tables_with_pytorch_hooks_print_the_same_every_time():
    def build():
        model = pruned_mlp()
        model.fc2.register_forward_hook(noop)
        torch.nn.utils.spectral_norm(model.head)
        return model

    first, second = build(), build()
    assert repr(ht.list_hooks(first)) == repr(ht.list_hooks(second))
    assert ht.list_hooks(first)._repr_html_() == ht.list_hooks(second)._repr_html_()
    assert repr(ht.remove_hooks(first)) == repr(ht.remove_hooks(second))


def test_remove_row_refuses_pytorch_rows_unless_asked():
    model = pruned_mlp()
    (row,) = ht.list_hooks(model)
    with pytest.raises(ValueError, match=r"installed by PyTorch \(prune\).*include_pytorch=True"):
        ht.inventory.remove_row(model, row)
    assert len(ht.list_hooks(model)) == 1
    ht.inventory.remove_row(model, row, include_pytorch=True)
    assert len(ht.list_hooks(model)) == 0


def test_remove_row_removes_a_user_state_dict_hook():
    lin = nn.Linear(2, 2)
    fired = []
    lin.register_state_dict_pre_hook(lambda *a: fired.append(1))
    (row,) = ht.list_hooks(lin)
    assert row.kind == "state_dict_pre"
    ht.inventory.remove_row(lin, row)
    lin.state_dict()
    assert fired == [] and len(ht.list_hooks(lin)) == 0


def test_exercise_tester_leaves_pytorch_hooks_but_reports_and_removes_users():
    from hooktutor.exercises.core import Tester

    model = MLP(seed=0)
    t = Tester()
    t.track(model, "the MLP")
    prune.l1_unstructured(model.fc1, "weight", amount=0.5)  # "the answer" prunes the model
    model.fc2.register_forward_hook(noop)  # and forgets a hook of its own
    assert t.leaks() == ["a forward hook (noop) on fc2 of the MLP"]
    (left,) = ht.list_hooks(model)
    assert left.mechanism == "prune"
    train_steps(model, 2)


def test_a_custom_pruning_method_counts_as_prune_and_stays():
    class EveryOther(prune.BasePruningMethod):  # the torch tutorial's way to extend pruning
        PRUNING_TYPE = "unstructured"

        def compute_mask(self, t, default_mask):
            mask = default_mask.clone()
            mask.view(-1)[::2] = 0
            return mask

    model = MLP(seed=0)
    EveryOther.apply(model.fc2, "weight")
    (row,) = ht.list_hooks(model)
    assert (row.owner, row.mechanism, row.function) == (
        "pytorch", "prune", "EveryOther (in test_a_custom_pruning_method_counts_as_prune_and_stays) instance")
    assert ht.remove_hooks(model) == 0
    train_steps(model, 2)
    assert torch.all(model.fc2.weight.view(-1)[::2] == 0)


def test_hook_ids_reports_what_is_attached_by_kind():
    from hooktutor.inventory import hook_ids

    model = MLP(seed=0)
    fwd = model.fc1.register_forward_hook(noop)
    pre = model.fc1.register_forward_pre_hook(noop)
    tensor = model.fc1.weight.register_hook(noop)
    post = model.fc1.weight.register_post_accumulate_grad_hook(noop)
    glob = module_mod.register_module_forward_hook(noop)
    try:
        assert hook_ids(model.fc1, "forward") == {fwd.id} and hook_ids(model.fc1, "forward_pre") == {pre.id}
        assert hook_ids(model.fc2, "forward") == set() and hook_ids(model.fc1, "backward") == set()
        assert hook_ids(model.fc1.weight, "tensor") == {tensor.id}
        assert hook_ids(model.fc1.weight, "post_accumulate") == {post.id}
        assert glob.id in hook_ids(None, "forward")
        with pytest.raises(ValueError, match="unknown hook kind 'fwd'"):
            hook_ids(model.fc1, "fwd")
    finally:
        for handle in (fwd, pre, tensor, post, glob):
            handle.remove()
    assert hook_ids(model.fc1, "forward") == set() and hook_ids(model.fc1.weight, "tensor") == set()


def test_global_registration_hooks_are_listed_and_removed_only_when_asked():
    model = MLP(seed=0)
    fired = []

    def on_buffer(module, name, buffer):
        fired.append(name)

    handles = [module_mod.register_module_module_registration_hook(noop),
               module_mod.register_module_parameter_registration_hook(noop),
               module_mod.register_module_buffer_registration_hook(on_buffer)]
    try:
        table = ht.list_hooks(model)
        assert [(r.path, r.kind) for r in table] == [
            ("<global>", "module_registration"), ("<global>", "parameter_registration"),
            ("<global>", "buffer_registration")]
        assert [r.handle_id for r in table] == [h.id for h in handles]
        assert len(ht.list_hooks(model, include_global=False)) == 0
        assert ht.remove_hooks(model) == 0
        nn.Module().register_buffer("b", torch.ones(1))
        assert fired == ["b"]
        assert ht.remove_hooks(model, include_global=True) == 3
        nn.Module().register_buffer("c", torch.ones(1))   # no registration hook left to fire
        assert fired == ["b"] and len(ht.list_hooks(model)) == 0
    finally:
        for h in handles:
            h.remove()


def test_a_registration_hook_that_stays_is_reported_by_the_leak_check():
    before = ht.inventory.global_hook_ids()
    h = module_mod.register_module_buffer_registration_hook(noop)
    try:
        assert ht.inventory.global_hook_ids() - before == {("_global_buffer_registration_hooks", h.id)}
    finally:
        h.remove()


class _WithBuffer(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2, 2)
        self.register_buffer("scale", torch.ones(2, requires_grad=True))

    def forward(self, x):
        return self.lin(x) * self.scale


def test_tensor_hooks_on_a_buffer_that_requires_grad_are_listed_and_removed():
    model = nn.Sequential(_WithBuffer())
    calls = []
    h1 = model[0].scale.register_hook(lambda grad: calls.append("tensor"))
    h2 = model[0].scale.register_post_accumulate_grad_hook(lambda t: calls.append("post"))
    try:
        table = ht.list_hooks(model, include_global=False)
        assert [(r.path, r.kind) for r in table] == [("0.scale", "tensor"), ("0.scale", "post_accumulate")]
        model(torch.ones(1, 2)).sum().backward()
        assert calls == ["tensor", "post"]
        assert ht.remove_hooks(model) == 2
        model(torch.ones(1, 2)).sum().backward()
        assert calls == ["tensor", "post"], "the removed hooks stopped firing"
        assert len(ht.list_hooks(model, include_global=False)) == 0
    finally:
        h1.remove()
        h2.remove()


def test_remove_row_removes_a_buffer_hook():
    model = _WithBuffer()
    h = model.scale.register_hook(noop)
    try:
        (row,) = ht.list_hooks(model, include_global=False)
        ht.inventory.remove_row(model, row)
        assert not model.scale._backward_hooks
    finally:
        h.remove()


def test_hooks_on_graph_nodes_are_not_listed():
    model = MLP(seed=0)
    node = model.fc1.weight.view_as(model.fc1.weight).grad_fn.next_functions[0][0]   # AccumulateGrad
    h = node.register_hook(noop)
    try:
        assert len(ht.list_hooks(model, include_global=False)) == 0
    finally:
        h.remove()


def test_a_multi_grad_hook_is_the_users_and_remove_hooks_removes_it():
    model = MLP(seed=0)
    fired = []
    torch.autograd.graph.register_multi_grad_hook(
        (model.fc1.weight, model.fc2.weight), lambda grads: fired.append(1))
    rows = ht.list_hooks(model, include_global=False)
    assert [(r.path, r.owner_label) for r in rows] == [("fc1.weight", "you"), ("fc2.weight", "you")]
    assert ht.remove_hooks(model) == 2
    model(torch.ones(1, 8)).sum().backward()
    assert fired == []
