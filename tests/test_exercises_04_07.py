"""The exercise checks of lessons 04, 05 and 07 against answers that return the wrong kind of
thing, plus the facts their hard cases rely on (so a torch release that changes one shows here,
not as a check that silently stops rejecting its wrong answer)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from hooktutor.data import blobs
from hooktutor.exercises import backward_hooks, capstone, inplace_relu, kit
from hooktutor.exercises.backward_hooks._shared import _linear_output_norms, _quiet, _sigmoid_stack
from hooktutor.exercises.backward_hooks.clip_input_grad import _SkipAround
from hooktutor.exercises.capstone.dead_channels import _dim_batches, _probe_model
from hooktutor.exercises.capstone.first_nonfinite import _LSTMThenLog
from hooktutor.exercises.inplace_relu._shared import other_classes_model

MINE = {ex.key: ex for mod in (backward_hooks, capstone, inplace_relu)
        for ex in vars(mod).values() if type(ex).__name__ == "Exercise"}
JUNK = {"None": None, "a list": [], "a float": 3.0, "a str": "fc1", "a tensor": torch.zeros(1),
        "a dict": {}, "a tuple": (None,)}


def test_all_ten_exercises_are_here():
    assert len(MINE) == 10


@pytest.mark.parametrize("key", sorted(MINE))
@pytest.mark.parametrize("junk", sorted(JUNK))
def test_an_answer_of_the_wrong_type_gets_a_nudge_never_a_crash_of_the_check(key, junk):
    value = JUNK[junk]
    report = MINE[key].check(lambda *args, **kwargs: value, hidden=True)
    assert not report.passed
    bad = report.failure
    assert bad is not None and bad.status in ("mismatch", "error", "unusable"), report.text
    assert bad.detail.get("why"), report.text
    assert bad.status != "unusable", f"{key}: {junk} crashed the check:\n{report.text}"


def test_a_hook_that_cuts_the_gradient_leaves_weight_grad_none_and_is_named():
    def cuts(layer, max_abs):
        return layer.register_full_backward_hook(lambda m, gi, go: tuple(None for _ in gi))

    report = backward_hooks.clip_input_grad.check(cuts)
    assert not report.passed and report.failure.status == "mismatch"
    assert "no gradient reached fc1" in report.text.lower()


@pytest.mark.parametrize("key", sorted(MINE))
def test_the_solution_passes_visible_and_hidden_cases(key):
    ex = MINE[key]
    report = ex.check(ex.reference, hidden=True)  # how long it takes: benchmarks/check_times.py
    assert report.passed, report.text


def test_the_reordered_model_backpropagates_in_another_order_than_named_modules():
    model = kit.Reordered(seed=9)
    x, _ = blobs(16, seed=9)
    norms = _linear_output_norms(model, x)
    assert [n for n, _ in model.named_modules() if n] == ["head", "mid", "stem"]
    assert norms["stem"] < norms["mid"] < norms["head"]


def test_a_full_backward_hook_before_any_inplace_module_raises_whatever_its_class():
    model = other_classes_model(seed=17)
    for m in model.modules():
        if isinstance(m, nn.ReLU):
            m.inplace = False
    handle = model.features.conv1.register_full_backward_hook(lambda m, gi, go: None)
    try:
        with pytest.raises(RuntimeError, match="BackwardHookFunction"):
            model(torch.ones(1, 1, 5, 5))
    finally:
        handle.remove()


def test_the_inplace_threshold_makes_live_channels_look_dead_to_a_bare_detach():
    model = _probe_model()
    model.append(nn.Threshold(5.0, 0.0, inplace=True))
    kept = []
    with model[1].register_forward_hook(lambda m, a, o: kept.append((o.detach(), o.detach().clone()))):
        for x in _dim_batches(2, seed=8):
            model(x)
    assert all(bool((bare > 0).sum() == 0) for bare, _ in kept)
    fresh = torch.stack([(c > 0).flatten(2).any(dim=0).any(dim=1) for _, c in kept]).any(dim=0)
    assert fresh.tolist() == [True, False, False, True, False]


def test_the_lstm_returns_a_tuple_that_isfinite_refuses():
    model = _LSTMThenLog(seed=11)
    out = model.lstm(torch.zeros(1, 2, 3))
    assert isinstance(out, tuple)
    with pytest.raises(TypeError, match="not tuple"):
        torch.isfinite(out)


def test_a_full_backward_hook_reads_the_same_float_as_retain_grad_so_a_threshold_can_equal_a_norm():
    model, (x, _) = _sigmoid_stack(4, seed=3), blobs(4, seed=3)
    fired = {}
    handles = [m.register_full_backward_hook(lambda m, gi, go, n=n: fired.__setitem__(n, go[0].norm().item()))
               for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    try:
        with _quiet():
            model(x).sum().backward()
    finally:
        for h in handles:
            h.remove()
    assert fired == _linear_output_norms(model, x)


def test_a_dropout_in_eval_hands_its_hook_the_gradient_the_skip_connection_gets_too():
    results = {}
    for how in ("clamp", "clamp_"):
        model = _SkipAround(seed=7)
        handle = model.drop.register_full_backward_hook(
            lambda m, gi, go, how=how: tuple(getattr(g, how)(-0.5, 0.5) for g in gi))
        try:
            (3.0 * model(kit.randn(4, 3, seed=7))).sum().backward()
        finally:
            handle.remove()
        results[how] = model.fc.bias.grad
    assert results["clamp"].tolist() == [14.0] * 3 and results["clamp_"].tolist() == [4.0] * 3


def test_backward_adds_into_an_existing_grad_in_place():
    w = torch.ones(2, requires_grad=True)
    (w * 2).sum().backward()
    kept = w.grad
    (w * 3).sum().backward()
    assert w.grad is kept and kept.tolist() == [5.0, 5.0]


def test_a_finite_float64_value_beyond_float32s_range_becomes_inf_in_float32():
    x = torch.tensor([1e200], dtype=torch.float64)
    assert torch.isfinite(x).all() and not torch.isfinite(x.float()).all()


@pytest.mark.parametrize("shape", [(4, 5), (4, 5, 3), (4, 5, 3, 3)])
def test_dead_channels_reads_dimension_1_whatever_the_number_of_dimensions(shape):
    model = nn.Sequential(nn.Identity())
    x = -torch.ones(shape)
    x[1, 2] = 1.0   # channel 2 fires, for one example only
    assert capstone.dead_channels.reference(model, model[0], lambda: model(x)) == [0, 1, 3, 4]
