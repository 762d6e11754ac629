"""Predict-then-run exercises: each compares a written prediction with what torch does now,
rejects the plausible wrong predictions with the reason, and reads bad input kindly."""

from __future__ import annotations

import pytest

from hooktutor.course import claims, student
from hooktutor.exercises import LESSON_MODULES, load_predictions
from hooktutor.exercises.predict import Prediction

PREDICTIONS = load_predictions()
WRONG = [(key, label, value, mentions) for key, ex in PREDICTIONS.items()
         for label, value, mentions in ex.wrong_predictions]


def test_every_lesson_has_a_prediction():
    modules = {key.split(".")[0] for key in PREDICTIONS}
    assert set(LESSON_MODULES.values()) <= modules, f"no prediction in {set(LESSON_MODULES.values()) - modules}"


@pytest.mark.parametrize("key", sorted(PREDICTIONS))
def test_the_truth_passes(key):
    ex = PREDICTIONS[key]
    report = ex.check(ex.reference)
    assert report.passed and repr(report).startswith("✔"), repr(report)
    assert ex.summary in report.text


@pytest.mark.parametrize("key", sorted(PREDICTIONS))
def test_hints_three_wrong_predictions_and_a_solution_that_is_computed(key):
    ex = PREDICTIONS[key]
    assert len(ex.hints) >= 2 and len(ex.wrong_predictions) >= 3
    shown = repr(ex.solution())
    assert f"def {ex.answer_name}():" in shown and "computed just now" in shown


@pytest.mark.parametrize("key, label, value, mentions", WRONG, ids=[f"{k}: {lbl}" for k, lbl, _, _ in WRONG])
def test_a_wrong_prediction_is_rejected_with_the_reason(key, label, value, mentions):
    claim_id = PREDICTIONS[key].wrong_since.get(label)
    if claim_id and not claims.expected(claim_id):   # wrong only where that claim holds
        pytest.skip(f"'{label}' is what torch {claims.installed()} does ({claim_id})")
    report = PREDICTIONS[key].check(value)
    assert not report.passed, f"{key} accepted the wrong prediction '{label}'"
    assert "torch did something else" in report.text
    assert mentions in report.text, f"{key}: '{label}' should be explained with {mentions!r}:\n{report.text}"


@pytest.mark.parametrize("key", sorted(PREDICTIONS))
def test_the_stub_and_unreadable_predictions_get_a_kind_message(key):
    ex = PREDICTIONS[key]
    def stub():
        raise NotImplementedError("write your answer here, then run the check below")

    for unfinished in (stub, ...):    # the student edition's stub; a bare `...`
        report = ex.check(unfinished)
        assert not report.passed and report.failure.status == "unfinished"
        assert "is not written yet" in report.text

    def broken():
        return {}["oops"]

    report = ex.check(broken)
    assert report.failure.status == "error" and "KeyError" in report.text
    assert ex.check(lambda: ex.reference).passed, "a function that returns the prediction is the usual answer"
    for junk in (None, 3.5, "something", [object()], {"not a key": 1}):
        report = ex.check(junk)
        assert not report.passed
        assert report.failure.status in ("unusable", "mismatch"), report.text


def test_case_spaces_and_a_shape_written_as_a_list_do_not_matter():
    ex = PREDICTIONS["tensor_hooks.doubling_hook"]
    truth = ex.reference
    assert ex.check({k: f"  {v.upper()} " for k, v in truth.items()}).passed
    assert ex.check({**truth, "v.grad": None}).passed, "Python's None reads as 'None'"


def test_a_table_names_the_missing_key_and_a_value_outside_the_choices():
    ex = PREDICTIONS["backward_hooks.zeroed_grad_input"]
    report = ex.check({"fc1.weight.grad": "zero"})
    assert "it has no entry for 'fc2.weight.grad'" in report.text
    report = ex.check({**ex.reference, "fc1.weight.grad": "tiny"})
    assert "'tiny' for 'fc1.weight.grad' is not one of the choices" in report.text


def test_an_order_names_the_first_place_that_differs():
    ex = PREDICTIONS["forward_hooks.block_order"]
    truth = ex.reference
    swapped = [truth[0], truth[2], truth[1], *truth[3:]]
    report = ex.check(swapped)
    assert "place 2" in report.text and "torch did something else (1 difference)" in report.text
    assert "not one of the choices" in ex.check([*truth[:-1], "layer4"]).text


def test_the_truth_is_computed_now_not_stored(monkeypatch):
    ex = PREDICTIONS["start_here.registered_twice"]
    monkeypatch.setattr(ex, "observe", lambda: 1)     # a torch in which registering twice replaced
    assert ex.check(1).passed and not ex.check(2).passed


def test_grade_fails_the_cell_until_the_prediction_is_right():
    ex = PREDICTIONS["start_here.registered_twice"]
    with pytest.raises(NotImplementedError):
        ex.grade(...)
    with pytest.raises(AssertionError):
        ex.grade(1)
    ex.grade(ex.reference, hidden=True)


def test_the_student_edition_stubs_a_prediction_like_any_answer():
    source = 'def predict_calls():\n    """An int."""\n    ### BEGIN SOLUTION\n    return 2\n    ### END SOLUTION\n'
    stubbed = student.strip_solution(source, "test")
    assert student.STUB in stubbed and "return 2" not in stubbed
    namespace: dict = {}
    exec(stubbed, namespace)                     # the cell runs: Run All is not stopped by it
    report = PREDICTIONS["start_here.registered_twice"].check(namespace["predict_calls"])
    assert report.failure.status == "unfinished"


def test_a_key_cannot_be_registered_twice():
    ex = PREDICTIONS["start_here.registered_twice"]
    with pytest.raises(ValueError, match="exists already"):
        Prediction(ex.key, "again", task="", hints=[], observe=ex.observe, explain={}, summary="",
                   answer_name="x")


def test_a_bool_is_not_a_number_in_a_prediction():
    """``False == 0`` in Python; a prediction of a count that says False is not the count 0."""
    ex = PREDICTIONS["graph_hooks.checkpoint_calls"]
    truth = ex.reference
    key = next(k for k, v in truth.items() if v in (0, 1))
    assert ex.check(truth).passed
    report = ex.check({**truth, key: bool(truth[key])})
    assert not report.passed and "is not one of the choices" in report.text
    count = PREDICTIONS["start_here.registered_twice"]
    assert not count.check(True).passed and count.check(count.reference).passed
