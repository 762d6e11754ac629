"""Every exercise check accepts its solution and rejects its typical wrong answers by name."""

from __future__ import annotations

import pytest
import torch

import hooktutor as ht
from hooktutor.course import claims
from hooktutor.exercises import load_all

EXERCISES = load_all()
WRONG = [(key, label, fn, mentions) for key, ex in EXERCISES.items() for label, fn, mentions in ex.wrong_answers]
RIGHT = [(key, label, fn) for key, ex in EXERCISES.items() for label, fn in ex.right_answers]


def skip_where_not_wrong(ex, label):
    """A wrong answer registered with ``since=<claim>`` is wrong only where the claim holds."""
    claim_id = ex.wrong_since.get(label)
    if claim_id and not claims.expected(claim_id):
        pytest.skip(f"'{label}' is right on torch {claims.installed()} "
                    f"({claim_id}: since {claims.claim(claim_id).since})")


def test_there_are_exercises():
    assert len(EXERCISES) >= 1


@pytest.mark.parametrize("key", sorted(EXERCISES))
def test_solution_passes_and_leaves_no_hooks(key):
    ex = EXERCISES[key]
    report = ex.check(ex.reference)
    assert report.passed, repr(report)
    assert repr(report).startswith("✔")
    # How fast a check is, is a benchmark figure (benchmarks/check_times.py: each check against its
    # budget and as a multiple of a plain training step timed beside it), never a test: a hang is
    # stopped by the check's own time limit (hooktutor/exercises/core.py, _Deadline).


@pytest.mark.parametrize("key, label, fn", RIGHT, ids=[f"{k}: {lbl}" for k, lbl, _ in RIGHT])
def test_a_right_alternative_passes_every_case_and_variant(key, label, fn):
    report = EXERCISES[key].check(fn)
    assert report.passed, f"{key}: the right answer '{label}' is rejected:\n{report!r}"


@pytest.mark.parametrize("key", sorted(EXERCISES))
def test_each_exercise_has_hints_solution_three_wrong_answers_and_a_hidden_case(key):
    ex = EXERCISES[key]
    assert len(ex.cases) >= 2, "at least two cases"
    assert ex.hints[-1] and "ex.solution()" not in repr(ex.hint(len(ex.hints)))
    assert len(ex.hints) >= 2, "at least two hints"
    assert len(ex.wrong_answers) >= 3, "at least three typical wrong answers, proved rejected"
    assert ex.hidden_cases, "at least one hidden case, for nbgrader's hidden tests"
    assert ex.hidden_wrong_answers, "at least one wrong answer that only the hidden cases catch"
    assert f"def {ex.answer_name}(" in repr(ex.solution()) or f"class {ex.answer_name}:" in repr(ex.solution())


@pytest.mark.parametrize("key", sorted(EXERCISES))
def test_the_solution_passes_the_hidden_cases_too(key):
    ex = EXERCISES[key]
    report = ex.check(ex.reference, hidden=True)
    assert report.passed, repr(report)
    assert len(report.results) == len(ex.cases) + len(ex.hidden_cases)


HIDDEN_WRONG = [(key, label, fn, mentions) for key, ex in EXERCISES.items()
                for label, fn, mentions in ex.hidden_wrong_answers]


@pytest.mark.parametrize("key, label, fn, mentions", HIDDEN_WRONG, ids=[f"{k}: {lbl}" for k, lbl, _, _ in HIDDEN_WRONG])
def test_hidden_wrong_answer_passes_the_visible_cases_and_fails_the_hidden_ones(key, label, fn, mentions, monkeypatch):
    """A wrong answer that only the cases kept for grading catch: they do, and name it (on their own:
    the variants of the first visible case, which may catch it already, are off here)."""
    ex = EXERCISES[key]
    skip_where_not_wrong(ex, label)
    monkeypatch.setitem(ex.not_varied, "all", "the cases kept for grading, on their own")
    assert ex.check(fn, hidden=False).passed, f"{key}: '{label}' should pass the visible cases (that is its point)"
    report = ex.check(fn)   # a learner's check runs the cases kept for grading too
    assert not report.passed, f"{key}: the cases kept for grading accepted '{label}'"
    assert mentions.lower() in report.text.lower(), (  # advice starts with a capital: compare in lower case
        f"{key}: the report for '{label}' should mention {mentions!r}:\n{report.text}")
    bad = report.failure
    assert bad.kept_for_grading and "kept for grading" in report.text
    assert bad.description not in report.text, "a case kept for grading is never shown"
    assert "expected:" not in repr(report) and "got:" not in repr(report)
    # the instructor's switch for a graded class holds those cases back until autograde
    monkeypatch.setenv("HOOKTUTOR_HOLD_BACK", "on")
    assert ex.check(fn).passed and not ex.check(fn, hidden=True).passed


@pytest.mark.parametrize("key, label, fn, mentions", WRONG, ids=[f"{k}: {lbl}" for k, lbl, _, _ in WRONG])
def test_wrong_answer_is_rejected_with_a_message_naming_the_mistake(key, label, fn, mentions):
    skip_where_not_wrong(EXERCISES[key], label)
    report = EXERCISES[key].check(fn)
    assert not report.passed, f"{key} accepted the wrong answer '{label}'"
    assert mentions.lower() in report.text.lower(), (  # advice starts with a capital: compare in lower case
        f"{key}: the report for '{label}' should mention {mentions!r}:\n{report.text}")
    # short, and it says what to change
    assert len(repr(report).splitlines()) <= 16, repr(report)
    assert report.failure is None or report.failure.detail.get("why"), repr(report)
    # never a bare error from inside the check: a value it cannot use comes with its cause named
    if report.failure is not None and report.failure.status == "unusable":
        assert report.failure.detail.get("why"), f"{key}: '{label}' crashed the check without a nudge"


@pytest.mark.parametrize("key", sorted(EXERCISES))
def test_unfinished_stub_and_exceptions_are_reported_kindly(key):
    ex = EXERCISES[key]

    def stub(*args, **kwargs):
        raise NotImplementedError("write your answer here")

    report = ex.check(stub)
    assert not report.passed and "is not written yet" in repr(report)

    def broken(*args, **kwargs):
        raise KeyError("oops")

    report = ex.check(broken)
    assert "raised an error" in report.text and "KeyError" in report.text


def test_a_not_implemented_error_of_torch_in_the_check_is_not_an_unfinished_answer():
    """Only the answer's own NotImplementedError (the stub) reads "not written yet": torch's, raised in
    the check on a sparse tensor the answer returned, says what the check could not use."""
    ex = EXERCISES["hooks_at_work.per_sample_norms"]
    report = ex.check(lambda model, x, loss_fn: ex.reference(model, x, loss_fn).to_sparse())
    assert report.failure.status == "unusable" and "not written yet" not in report.text
    assert "SparseCPU" in report.text and "dense tensors" in report.text


def test_endless_loop_is_stopped_and_the_check_survives():
    ex = EXERCISES["start_here.count_calls"]

    def spin(*args):
        while True:
            pass

    ex_time, ex.time_limit = ex.time_limit, 0.2
    try:
        report = ex.check(spin)
    finally:
        ex.time_limit = ex_time
    assert "did not finish in time" in repr(report)


def test_not_a_function():
    report = EXERCISES["start_here.count_calls"].check(None)
    assert not report.passed and "needs your function itself" in repr(report)


def test_leaked_global_hook_is_removed_and_reported():
    from torch.nn.modules.module import register_module_forward_hook

    ex = EXERCISES["start_here.count_calls"]

    def leaks_global(model, x, layer):
        register_module_forward_hook(lambda m, a, o: None)
        return ex.reference(model, x, layer)

    report = ex.check(leaks_global)
    assert not report.passed and "global module hook" in report.text
    assert len([r for r in ht.list_hooks(ht.models.MLP()) if r.path == "<global>"]) == 0


def test_hints_one_at_a_time_and_by_number():
    ex = EXERCISES["start_here.count_calls"]
    ex._next_hint = 0
    assert repr(ex.hint()).startswith("Hint 1 of 3")
    assert repr(ex.hint()).startswith("Hint 2 of 3")
    assert repr(ex.hint(1)).startswith("Hint 1 of 3")
    assert "there is no hint 9" in repr(ex.hint(9))
    ex._next_hint = 0


def test_html_report_is_styled():
    ex = EXERCISES["start_here.count_calls"]
    assert "hooktutor-check" in ex.check(ex.reference)._repr_html_()


def test_a_pytorch_hook_added_by_the_answer_is_no_leak_and_stays_but_a_user_hook_is_reported(monkeypatch):
    from torch.nn.utils import prune

    ex = EXERCISES["start_here.count_calls"]
    monkeypatch.setitem(ex.not_varied, "state", "pruning changes the layer's parameters, on purpose here")
    pruned = []

    def prunes_then_counts(model, x, layer):
        if isinstance(getattr(layer, "weight", None), torch.nn.Parameter) and not prune.is_pruned(layer):
            prune.l1_unstructured(layer, "weight", amount=0.5)  # torch adds a forward pre-hook
            pruned.append(layer)
        return ex.reference(model, x, layer)

    report = ex.check(prunes_then_counts)
    assert report.passed, repr(report)
    assert len(pruned) >= len(ex.cases)   # every case ran, each pruning its own layer (not the model itself)
    for layer in pruned:
        (row,) = ht.list_hooks(layer)
        assert (row.kind, row.owner, row.mechanism) == ("forward_pre", "pytorch", "prune")

    pruned.clear()

    def prunes_and_leaks(model, x, layer):
        count = prunes_then_counts(model, x, layer)
        layer.register_forward_hook(lambda m, a, o: None)
        return count

    report = ex.check(prunes_and_leaks)
    assert not report.passed and "left a hook attached" in report.text
    assert "a forward hook (<lambda> (in prunes_and_leaks)) on fc2 of the MLP was still attached." in report.text
    assert "(and 1 more)" not in report.text and "forward_pre" not in report.text
    (layer,) = pruned  # the check stops at the first failing case
    assert [(r.kind, r.mechanism) for r in ht.list_hooks(layer)] == [("forward_pre", "prune")]


@pytest.mark.parametrize("key", ["start_here.count_calls", "tensor_hooks.clip_hook", "forward_hooks.recorder"])
def test_a_wrong_parameter_list_is_said_as_such(key):
    """An answer with a parameter too few is told how the check calls it (the task's def line),
    not that its result has the wrong type or shape."""
    ex = EXERCISES[key]

    def wrong_parameters():
        return None

    wrong_parameters.__name__ = ex.answer_name
    report = ex.check(wrong_parameters)
    assert not report.passed and "raised an error" in report.text, report.text
    assert "parameters do not match" in report.text and ex.signature_line() in report.text, report.text
    assert "type and shape" not in report.text
