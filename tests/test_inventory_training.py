"""list_hooks on optimizers and on DDP/DataParallel wrappers, hook_ids for the new kinds, and the
private optimizer hook dicts they read (08_training_hooks)."""

from __future__ import annotations

import pytest
import torch
import torch.optim.optimizer as optim_mod
from torch import nn
from torch.nn.parallel import DataParallel

import hooktutor as ht
from hooktutor import inventory
from hooktutor.models import MLP


@pytest.mark.parametrize("attr, kind", inventory.OPTIMIZER_HOOK_DICTS)
def test_each_optimizer_hook_dict_exists_and_holds_its_registration(attr, kind):
    opt = torch.optim.SGD(MLP(seed=0).parameters(), lr=0.1)
    register = {"step_pre": opt.register_step_pre_hook, "step_post": opt.register_step_post_hook,
                "state_dict_pre": opt.register_state_dict_pre_hook, "state_dict": opt.register_state_dict_post_hook,
                "load_state_dict_pre": opt.register_load_state_dict_pre_hook,
                "load_state_dict_post": opt.register_load_state_dict_post_hook}[kind]

    def hook(*args):
        return None

    handle = register(hook)
    assert dict(getattr(opt, attr)) == {handle.id: hook}, f"torch {torch.__version__} moved {attr}"
    (row,) = ht.list_hooks(opt, include_global=False)
    assert (row.path, row.kind, row.owner, row.handle_id) == ("<optimizer>", kind, "user", handle.id)
    assert inventory.hook_ids(opt, kind) == {handle.id}
    handle.remove()
    assert len(ht.list_hooks(opt, include_global=False)) == 0


def test_global_optimizer_hooks_are_listed_with_any_optimizer_and_only_when_asked():
    opt = torch.optim.Adam(MLP(seed=0).parameters())
    with optim_mod.register_optimizer_step_pre_hook(lambda o, a, k: None), \
            optim_mod.register_optimizer_step_post_hook(lambda o, a, k: None):
        rows = ht.list_hooks(opt)
        assert [(r.path, r.kind) for r in rows] == [("<global>", "step_pre"), ("<global>", "step_post")]
        assert len(ht.list_hooks(opt, include_global=False)) == 0
    assert len(ht.list_hooks(opt)) == 0


def test_state_dict_hook_kinds_have_ids_for_the_exercise_witnesses():
    model = MLP(seed=0)
    handle = model.register_load_state_dict_post_hook(lambda m, keys: None)
    assert inventory.hook_ids(model, "load_state_dict_post") == {handle.id}
    handle.remove()
    with pytest.raises(ValueError, match="unknown hook kind"):
        inventory.hook_ids(model, "step_post")


def test_a_wrapped_model_takes_layer_names_with_or_without_module_prefix():
    model = MLP(seed=0)
    wrapped = DataParallel(model)  # on a CPU it just calls the model; DDP is in test_distributed.py
    handle = model.fc2.register_forward_hook(lambda m, a, o: None)
    try:
        table = ht.list_hooks(wrapped)
        assert [r.path for r in table] == ["module.fc2"]
        assert len(table.where(path="fc2")) == len(table.where(path="module.fc2")) == 1
        assert len(table.where(path="fc1")) == 0
        assert len(ht.list_hooks(model).where(path="module.fc2")) == 0  # an unwrapped model has no prefix
    finally:
        handle.remove()
    with ht.capture(wrapped, ["fc1", "module.head"]) as rec:
        wrapped(torch.ones(2, 8))
    assert rec.names == ["fc1", "module.head"] and ht.get_layer(wrapped, "fc1") is model.fc1
    with pytest.raises(ht.UnknownLayerError, match="did you mean"):
        ht.get_layer(wrapped, "fc9")
    assert len(ht.list_hooks(wrapped)) == 0


def test_list_hooks_refuses_other_objects_and_says_an_optimizer_works_too():
    with pytest.raises(TypeError, match=r"got list \(or a torch.optim.Optimizer\)"):
        ht.list_hooks([nn.Linear(1, 1)])


def test_layer_names_resolve_without_the_prefix_of_torch_compile(in_a_process_of_its_own):
    """torch.compile(model) names the layers `_orig_mod.<name>`; like DDP's `module.`, the
    toolkit accepts the names without it: get_layer, list_hooks(...).where and remove_row, and a
    recording of the compiled model, read with or without the prefix. In a process of its own:
    it calls torch.compile (tests/conftest.py). On Hugging Face models: tests/test_huggingface.py."""
    in_a_process_of_its_own("""
import torch
from torch import nn
import hooktutor as ht
from hooktutor.selection import wrapper_prefix

model = ht.models.MLP(seed=0)
compiled = torch.compile(model, backend="eager")
assert wrapper_prefix(compiled) == "_orig_mod." and wrapper_prefix(model) == ""
assert ht.get_layer(compiled, "fc1") is model.fc1 is ht.get_layer(compiled, "_orig_mod.fc1")
with model.fc1.register_forward_hook(lambda m, a, o: None):
    assert len(ht.list_hooks(compiled).where(path="fc1")) == 1
    ht.inventory.remove_row(compiled, ht.list_hooks(compiled).where(path="fc1")[0])
    assert len(ht.list_hooks(model)) == 0
with ht.capture(compiled) as rec:       # every leaf, named as the wrapper names it; the first call
    compiled(torch.ones(2, 8))          # compiles with the hooks in place
assert rec.names[0] == "_orig_mod.fc1" and rec["fc1"] is rec["_orig_mod.fc1"] and "fc1" in rec
assert rec.calls("fc1") == rec.calls("_orig_mod.fc1") and rec.n_calls("fc1") == 1
""")
