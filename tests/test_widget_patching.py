"""The patch picker of 10_transformer_hooks ("Try it live"), driven the way the controls drive it."""

from __future__ import annotations

import pytest
import torch

import hooktutor as ht
from hooktutor.widgets import close_all, patch_picker
from hooktutor.widgets.patching import NO_PATCH, cache_outputs, patched_logits, recovery

NAMES = ["embed", "blocks.0", "blocks.1"]


@pytest.fixture(scope="module")
def trained():
    model = ht.models.TinyTransformer(seed=0)
    ht.models.train_first_token(model, *ht.data.first_token(256, seed=0), steps=40)
    clean = ht.data.first_token(64, seed=1)[0]
    return model, clean, ht.data.corrupt_first(clean, seed=1)


@pytest.fixture(autouse=True)
def _close_widgets():
    yield
    close_all()


def test_no_patch_shows_the_corrupted_run_and_the_clean_run_is_cached_once(trained):
    model, clean, corrupt = trained
    picker = patch_picker(model, clean, corrupt, NAMES)
    assert picker.recovery == 0.0 and "no patch" in picker.status_text
    assert torch.equal(picker.logits["patched"], picker.logits["corrupted"])
    _, cache = cache_outputs(model, clean, NAMES)
    assert all(torch.equal(picker.cache[n], cache[n]) for n in NAMES)
    assert len(ht.list_hooks(model)) == 0 and picker._view.png


def test_each_pick_patches_one_position_with_a_hook_that_is_gone_afterwards(trained):
    model, clean, corrupt = trained
    picker = patch_picker(model, clean, corrupt, NAMES)
    seen = []
    with model.blocks[0].register_forward_pre_hook(lambda m, a: seen.append(len(m._forward_hooks))):
        picker.pick("blocks.0", 0)
    assert seen == [1], "one forward hook on blocks.0 while the patched run ran"
    assert len(ht.list_hooks(model)) == 0
    want = patched_logits(model, corrupt, model.blocks[0], 0, picker.cache["blocks.0"])
    assert torch.equal(picker.logits["patched"], want[0, -1])
    # the lesson's map: 0.97 at blocks.0 / position 0, 0.03 at position 5, exactly 1 for embed at 0
    assert picker.recovery > 0.9
    assert picker.pick("blocks.0", 5) < 0.1
    assert picker.pick("embed", 0) == pytest.approx(1.0, abs=1e-6)
    assert picker.pick("blocks.1", 5) == pytest.approx(1.0, abs=1e-6) and picker.pick("blocks.1", 0) == 0.0


def test_the_controls_redraw_and_every_pick_redraws(trained):
    model, clean, corrupt = trained
    picker = patch_picker(model, clean, corrupt, NAMES)
    before = picker._view.png
    picker.dropdown.value = "blocks.1"  # what choosing it in the page does
    picker.slider.value = 5
    assert picker._view.png != before and "blocks.1 patched at position 5" in picker.status.value
    for position in (0, 3, 5, 1, 4):  # how long a pick takes: benchmarks/widget_latency.py
        picker.slider.value = position
        assert f"blocks.1 patched at position {position}" in picker.status.value


def test_recovery_is_zero_for_the_corrupted_run_and_one_for_the_clean_run(trained):
    model, clean, corrupt = trained
    clean_logits, _ = cache_outputs(model, clean, [])
    with torch.no_grad():
        corrupt_logits = model(corrupt)
    args = (clean_logits, corrupt_logits, clean[:, 0], corrupt[:, 0])
    assert recovery(corrupt_logits, *args) == 0.0 and recovery(clean_logits, *args) == 1.0
    same = (clean_logits, clean_logits, clean[:, 0], corrupt[:, 0])
    assert recovery(clean_logits, *same) != recovery(clean_logits, *same)  # nan: nothing to recover


def test_recreating_replaces_the_old_one_and_close_is_safe_twice(trained):
    model, clean, corrupt = trained
    old = patch_picker(model, clean, corrupt, NAMES)
    new = patch_picker(model, clean, corrupt, NAMES)  # the cell run again
    assert old.closed and not new.closed
    new.close()
    new.close()
    assert len(ht.list_hooks(model)) == 0


def test_bad_arguments_say_what_to_use(trained):
    model, clean, corrupt = trained
    with pytest.raises(TypeError, match="needs a torch.nn.Module"):
        patch_picker(clean, clean, corrupt, NAMES)
    with pytest.raises(ValueError, match="same shape"):
        patch_picker(model, clean, corrupt[:3], NAMES)
    with pytest.raises(AttributeError):
        patch_picker(model, clean, corrupt, ["blocks.7"])


def test_text_repr_is_short_and_follows_the_pick(trained):
    model, clean, corrupt = trained
    picker = patch_picker(model, clean, corrupt, NAMES)
    assert repr(picker) == f"PatchPicker(3 modules, 6 positions, {NO_PATCH})"
    picker.pick("blocks.0", 2)
    assert repr(picker) == "PatchPicker(3 modules, 6 positions, blocks.0 @ 2)"
