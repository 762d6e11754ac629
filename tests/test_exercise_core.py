"""The checker's own promises, on a small exercise made for the test: whose mistake an error is,
type guards, hidden cases for grading, and the instructor's switch that hides solutions."""

from __future__ import annotations

import time

import pytest
import torch
from torch import nn

from hooktutor.exercises import core
from hooktutor.exercises.core import Exercise
from hooktutor.models import MLP


def _double_grad_solution(model):
    """Return the weight gradient of model.lin after one backward of model(x).sum()."""
    model(torch.ones(1, 2)).sum().backward()
    return model.lin.weight.grad


def make_exercise(key: str) -> Exercise:
    core.REGISTRY.pop(key, None)
    ex = Exercise(key, "Weight gradient", task="return lin.weight.grad after one backward",
                  hints=["call backward()", "read .grad"], solution=_double_grad_solution,
                  answer_name="weight_grad")

    def model():
        torch.manual_seed(0)
        m = nn.Module()
        m.lin = nn.Linear(2, 2)
        m.forward = lambda x: m.lin(x)
        return m

    @ex.case("a Linear(2, 2)")
    def _visible(answer, t):
        m = t.track(model())
        got = answer(m)
        t.expect_type(got, torch.Tensor, what="the returned gradient", nudge="return lin.weight.grad")
        t.expect(torch.allclose(got, torch.ones(2, 2)), what="the gradient", expected=torch.ones(2, 2),
                 got=got, nudge="backward of the sum")

    @ex.case("the same, asked twice in a row", hidden=True)
    def _hidden(answer, t):
        for _ in range(2):
            got = answer(t.track(model()))
            t.expect(torch.allclose(got, torch.ones(2, 2)), what="the second gradient",
                     expected=torch.ones(2, 2), got=got, nudge="a fresh model each time: no state between calls")

    @ex.case("the check uses the gradient's norm")
    def _crashes_on_none(answer, t):
        m = model()
        answer(m)
        m.lin.weight.grad.norm()   # the check trusts the answer to have run backward()

    return ex


@pytest.fixture
def ex():
    exercise = make_exercise("test_core.weight_grad")
    yield exercise
    core.REGISTRY.pop("test_core.weight_grad", None)


def test_the_solution_passes_visible_and_hidden_cases(ex):
    assert ex.check(_double_grad_solution).passed
    report = ex.check(_double_grad_solution, hidden=True)
    assert report.passed and len(report.results) == 3


def test_a_wrong_type_is_named_not_a_crash(ex):
    report = ex.check(lambda m: m.lin.weight.grad.tolist() if m(torch.ones(1, 2)).sum().backward() is None else 0)
    assert report.failure.status == "mismatch"
    assert "The returned gradient is a list, but should be a Tensor" in report.text


def test_none_returned_is_named(ex):
    report = ex.check(lambda m: None)
    assert "The returned gradient is None (nothing was returned)" in report.text


def test_an_error_in_the_learners_code_is_theirs(ex):
    def answer(m):
        return m.lin.weight.grad.clone()          # no backward(): .grad is None, and *this* line fails

    report = ex.check(answer)
    assert report.failure.status == "error" and "raised an error" in report.text


def test_a_crash_inside_the_check_names_the_cause(ex):
    def answer(m):
        with torch.no_grad():                     # no graph: backward never fills .grad
            return torch.ones(2, 2)

    ex.cases = [c for c in ex.cases if c[0] == "the check uses the gradient's norm"]
    report = ex.check(answer)
    assert report.failure.status == "unusable"
    assert "gave the check something it cannot use" in report.text
    assert "a .grad that backward() never filled" in report.text


def test_cases_kept_for_grading_run_unless_the_instructor_holds_them_back(ex, monkeypatch):
    calls = []

    def stateful(m, _seen=[]):                   # noqa: B006 - the mistake on purpose
        calls.append(1)
        _seen.append(1)
        m(torch.ones(1, 2)).sum().backward()
        return m.lin.weight.grad * len(_seen) if len(_seen) > 2 else m.lin.weight.grad

    ex.cases = ex.cases[:1]
    ex.not_varied["all"] = "the test counts the calls of the cases (the variants call the answer again)"
    assert ex.check(stateful, hidden=False).passed
    report = ex.check(stateful)
    assert not report.passed and "no state between calls" in report.text
    assert "kept for grading" in report.text and "asked twice in a row" not in report.text
    monkeypatch.setenv(core.HOLD_BACK_ENV, "on")
    stateful.__defaults__[0].clear()
    assert ex.check(stateful).passed
    stateful.__defaults__[0].clear()
    assert not ex.check(stateful, hidden=True).passed


def test_solutions_switched_off_for_a_graded_class(ex, monkeypatch):
    monkeypatch.setenv(core.SOLUTIONS_ENV, "off")
    assert not core.solutions_available()
    assert "switched off for this course" in repr(ex.solution())
    assert "def weight_grad" not in repr(ex.solution())
    with pytest.raises(core.SolutionsOff, match="HOOKTUTOR_SOLUTIONS=off"):
        ex.reference  # noqa: B018
    report = ex.check(lambda m: None)
    assert ".hint() gives a hint" in report.text and ".solution()" not in report.text
    assert "that was the last hint" in repr(ex.hint(2)) and "solution" not in repr(ex.hint(2))
    monkeypatch.setenv(core.SOLUTIONS_ENV, "on")
    assert "def weight_grad" in repr(ex.solution())


def test_a_tracked_model_keeps_the_callers_hooks():
    """An answer that clears a module's hook dicts (everybody's hooks) is told so; the caller's
    stand-in hooks never count as the answer's."""
    from hooktutor.exercises import start_here
    from hooktutor.exercises.core import CALLERS_HOOK_IDS, learners_hooks

    ex = start_here.count_calls

    def clears(model, x, layer):
        calls = []
        layer.register_forward_hook(lambda m, a, o: calls.append(1))
        model(x)
        layer._forward_hooks.clear()          # "removes" the hook, and everybody else's
        return len(calls)

    report = ex.check(clears)
    assert not report.passed and "a hook it did not attach" in report.text, report.text

    assert ex.check(ex.reference).passed and not CALLERS_HOOK_IDS   # every stand-in removed again
    model = MLP(seed=0)
    with model.fc1.register_forward_hook(lambda m, a, o: None):
        assert len(learners_hooks(model)) == 1


def test_the_time_limit_counts_cpu_time_and_a_wall_clock_backstop_stops_a_hang():
    import time

    with core._Deadline(0.2, wall=5.0):
        time.sleep(0.3)   # waiting is no computing: a busy machine does not stop a right answer
    with pytest.raises(core.TimeLimitExceeded, match="wall"):
        with core._Deadline(5.0, wall=0.2):
            time.sleep(1.0)
    with pytest.raises(core.TimeLimitExceeded, match="cpu"):
        with core._Deadline(0.1, wall=5.0):
            while True:
                pass


def test_a_time_limit_swallowed_where_it_landed_still_stops_the_code():
    """The limit's exception can land in a weakref callback during garbage collection, where Python
    prints it and goes on: the limit raises again; a learner's `except Exception` does not catch it;
    a block that swallows every raise (a bare `except:`) and completes raises at its end. Nothing is
    printed as ignored."""
    import gc
    import sys
    import weakref

    class Node:
        pass

    seen: list = []
    old_hook = sys.unraisablehook
    sys.unraisablehook = seen.append
    try:
        def slow_callback(ref):   # where the CPU limit lands: inside garbage collection
            end = time.process_time() + 0.3
            while time.process_time() < end:
                pass

        with pytest.raises(core.TimeLimitExceeded, match="cpu"):
            with core._Deadline(0.1, wall=20.0):
                node = Node()
                node.self, keep = node, weakref.ref(node, slow_callback)
                del node
                gc.collect()      # the first raise is swallowed by the callback
                while True:       # and the loop after it is stopped all the same
                    pass
        assert keep() is None
        with pytest.raises(core.TimeLimitExceeded, match="cpu"):
            with core._Deadline(0.1, wall=20.0):
                while True:
                    try:
                        sum(range(1000))
                    except Exception:   # a learner's catch-all does not catch it (a BaseException)
                        pass
        with pytest.raises(core.TimeLimitExceeded, match="cpu"):
            with core._Deadline(0.1, wall=20.0):
                end = time.process_time() + 1.5
                while time.process_time() < end:   # every raise swallowed by a bare except:
                    try:
                        sum(range(1000))
                    except:  # noqa: E722
                        pass
                # the block ends: over time all the same
    finally:
        sys.unraisablehook = old_hook
    assert not any(isinstance(u.exc_value, core.TimeLimitExceeded) for u in seen)


def test_a_slow_first_call_is_run_again_after_a_warm_up_not_called_endless(ex):
    """A first call that loads a kernel or imports a module takes longer than the limit: the check
    warms up with the reference, then runs the answer once more with a limit relative to it."""
    import time

    first = []

    def slow_once(model):
        if not first:
            first.append(1)
            end = time.process_time() + 0.3
            while time.process_time() < end:
                pass
        return _double_grad_solution(model)

    ex.time_limit = 0.2
    report = ex.check(slow_once, hidden=False)
    assert report.failure is None or report.failure.status != "timeout", report.text

    def spins(model):
        while True:
            pass
    report = ex.check(spins)
    assert report.failure.status == "timeout" and "twice" in report.text


def test_a_right_alternative_is_registered_and_kept_apart_from_the_wrong_answers(ex):
    @ex.right("reads the gradient through autograd.grad")
    def _by_grad(model):
        return _double_grad_solution(model)
    assert [label for label, _ in ex.right_answers] == ["reads the gradient through autograd.grad"]
    assert not ex.wrong_answers


def test_a_process_wide_setting_left_changed_is_said_and_restored(ex):
    def flips(model):
        torch.set_anomaly_enabled(True)
        return _double_grad_solution(model)
    report = ex.check(flips)
    assert not report.passed and "anomaly mode" in report.text and "finally" in report.text
    assert not torch.is_anomaly_enabled()


@pytest.mark.parametrize("key", ["capstone.first_nonfinite", "hooks_at_work.conv_absmax",
                                 "compile_hooks.with_intermediates"])
def test_a_float64_default_dtype_set_in_the_notebook_neither_fails_a_right_answer_nor_stays_changed(key):
    """A learner's notebook may set torch.set_default_dtype(torch.float64); the check's cases build
    their own models and inputs in float32 (these three failed or crashed on their reference before),
    and the notebook's default is put back after the check."""
    from hooktutor.exercises import load_all

    exercise = load_all()[key]
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        report = exercise.check(exercise.reference, hidden=True)
        assert torch.get_default_dtype() == torch.float64
    finally:
        torch.set_default_dtype(before)
    assert report.passed, repr(report)
