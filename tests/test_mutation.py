"""Mutation testing of every exercise check (hooktutor.course.mutation): each mutant of each
solution is rejected by its check, or listed in the exercise's file as equivalent, with a reason."""

from __future__ import annotations

import pytest
import torch

from hooktutor.course import mutation
from hooktutor.exercises.core import Exercise
from hooktutor.exercises.core import Tester as CaseTester

EXERCISES = mutation.mutable_exercises()

# The list of equivalent mutants is exact for the pinned torch: on another release a mutant of a
# branch that only older torches take (a private registration) behaves differently.
course_env = pytest.mark.course_env


@course_env
@pytest.mark.parametrize("key", sorted(EXERCISES))
def test_every_mutant_of_the_solution_is_killed_or_listed_as_equivalent(key):
    exercise = EXERCISES[key]
    score = mutation.score(exercise)
    survivors = "\n".join(f"  {o.mutant.id}" for o in score.survivors)
    assert not score.survivors, (
        f"{key}: these mutants of the solution pass the check. Add a case that rejects each, or, if it "
        f"behaves like the solution on every input the task admits, list it in the exercise's file under "
        f"equivalent_mutants with the reason:\n{survivors}\n(python -m hooktutor mutants {key})")
    assert not score.stale, (f"{key}: listed as equivalent, but the check kills it or it no longer exists: "
                             f"{score.stale}")
    assert score.rate >= 0.95
    assert all(reason.strip() for reason in exercise.equivalent_mutants.values()), f"{key}: a reason is empty"


def _toy() -> Exercise:
    def double_grad(t):
        """Make every gradient that reaches t twice as large; return the handle."""
        return t.register_hook(lambda grad: grad * 2)

    ex = Exercise.__new__(Exercise)
    Exercise.__init__(ex, "toy.double_grad", "toy", task="", hints=[], solution=double_grad)
    Exercise.registry.pop("toy.double_grad")

    @ex.case("a leaf used once")
    def _(answer, t: CaseTester) -> None:
        x = torch.ones(3, requires_grad=True)
        y = x * 1.0
        handle = answer(y)
        y.sum().backward()
        handle.remove()
        t.expect(torch.equal(x.grad, torch.full((3,), 2.0)), what="x.grad", expected=2, got=x.grad, nudge="")
    return ex


def test_the_operators_reach_the_hook_mistakes():
    ex = _toy()
    ids = [m.id for m in mutation.mutants(ex._solution)]
    assert any(i.startswith("hook-kind@") and "register_post_accumulate_grad_hook" in i for i in ids)
    assert any(i.startswith("no-hook@") for i in ids)
    assert any(i.startswith("number@") and "2 -> 3" in i for i in ids)
    assert any(i.startswith("arith@") for i in ids)
    outcomes = mutation.run(ex, context=False)
    alive = [o.mutant.id for o in outcomes if not o.killed]
    # one case: the answer that hard-codes the first result passes it (a second case would not)
    assert alive == ["first-result@1: the solution -> what it returned on its first call, every time"]


def test_a_survivor_is_reported_and_an_equivalent_listed_one_is_not():
    ex = _toy()
    weak = Exercise.__new__(Exercise)
    Exercise.__init__(weak, "toy.weak", "toy", task="", hints=[], solution=ex._solution,
                      equivalent_mutants={"no-hook@3: t.register_hook(lambda grad: grad * 2) -> "
                                          "<a handle that removes nothing>": "the check is empty"})
    Exercise.registry.pop("toy.weak")

    @weak.case("runs it")
    def _(answer, t: CaseTester) -> None:
        answer(torch.ones(1, requires_grad=True) * 1.0)
    score = mutation.score(weak)
    assert score.survivors and score.rate < 0.5
    assert score.equivalent == sorted(weak.equivalent_mutants)


def test_the_context_mutants_wrap_the_reference_and_are_killed_by_the_variants():
    """Each context mutant does the wrong thing to the solution's surroundings (detaches its result,
    leaves the model in eval mode, casts to float32, clears a caller's hook, runs under no_grad,
    adds a buffer, flips a global setting, calls .forward()); clamped_output's check kills all."""
    ex = EXERCISES["changing_outputs.clamped_output"]
    ids = [m.id for m in mutation.context_mutants(ex._solution)]
    assert len(ids) == 11 and all(i.startswith("context: ") for i in ids)
    score = mutation.score(ex, code=False)
    assert score.context_total == 11 and score.context_killed == 11, score
    assert torch.get_default_dtype() == torch.float32 and torch.is_grad_enabled()


def test_a_context_mutant_that_changes_nothing_is_not_applicable():
    ex = _toy()   # a tensor hook: no module to switch to eval, no model to call, no result to detach
    outcomes = mutation.run(ex, code=False)
    not_applicable = {o.mutant.id for o in outcomes if not o.applicable}
    assert {"context: eval-after", "context: forward-not-call", "context: add-buffer"} <= not_applicable
