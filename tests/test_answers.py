"""One exercise, one file, one source of its solution: the notebooks' answer cells and the
instructors' guide are made from the exercise files (python -m hooktutor answers --write)."""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path

import pytest

from hooktutor.course import answers
from hooktutor.exercises import LESSON_MODULES, load_all, load_predictions
from hooktutor.exercises.core import BEGIN_SOLUTION, END_SOLUTION

ROOT = Path(__file__).resolve().parent.parent
EVERY = {**load_all(), **load_predictions()}


def test_every_answer_cell_is_the_solution_in_its_exercise_file():
    assert answers.stale_answer_cells() == [], "run `python -m hooktutor answers --write` (then regen)"


def test_the_instructors_guide_lists_each_exercise_from_its_file():
    assert answers.stale_guide() == [], "run `python -m hooktutor answers --write`"


def _file_of(ex) -> Path:
    module = sys.modules[(ex.answer if getattr(ex, "answer", None) else ex._solution).__module__]
    return Path(module.__file__)


@pytest.mark.parametrize("key", sorted(EVERY))
def test_each_exercise_lives_in_a_file_of_its_own_named_after_it(key):
    ex = EVERY[key]
    path = _file_of(ex)
    lesson, name = key.split(".")
    assert path == ROOT / "hooktutor" / "exercises" / lesson / f"{name}.py"
    module = sys.modules[f"hooktutor.exercises.{lesson}.{name}"]
    assert module.exercise is ex, f"{path} must define its exercise as `exercise`"
    package = sys.modules[f"hooktutor.exercises.{lesson}"]
    assert getattr(package, name) is ex, f"ex.{name} (the notebook's name) must be the exercise"
    assert lesson in LESSON_MODULES.values()
    source = ex.answer_source()
    assert BEGIN_SOLUTION in source and END_SOLUTION in source, f"{key}: the solution needs its markers"
    assert ex.guide, f"{key}: the file needs a guide text (the mistakes learners make)"


def _body(source: str) -> list[str]:
    inside = source.split(BEGIN_SOLUTION, 1)[1].rsplit(END_SOLUTION, 1)[0]
    lines = [" ".join(ln.split()) for ln in inside.splitlines() if not ln.strip().startswith("#")]
    return [ln for ln in lines if len(ln) >= 20]   # distinctive lines, not `try:` or `model(x)`


def test_no_solution_is_typed_twice():
    """A solution (its distinctive lines, in order) appears in no other file of hooktutor/ (outside
    the solutions of other exercises, which may share a technique) or in the guide; the notebooks'
    answer cells are generated from the solution, and held equal to it."""
    files = [p for p in (ROOT / "hooktutor").rglob("*.py")] + [ROOT / "docs" / "instructors.md"]
    def outside_solutions(text: str) -> str:   # another exercise may use the same technique
        return re.sub(rf"{BEGIN_SOLUTION}.*?{END_SOLUTION}", "", text, flags=re.S)
    texts = {p: "\n".join(n for n in (" ".join(ln.split()) for ln in outside_solutions(
        p.read_text(encoding="utf-8")).splitlines()) if len(n) >= 20) for p in files}
    for key, ex in EVERY.items():
        own = _file_of(ex)
        body = "\n".join(_body(ex.answer_source()))
        elsewhere = [str(p.relative_to(ROOT)) for p, text in texts.items() if p != own and body and body in text]
        assert not elsewhere, f"{key}: its solution is typed again in {elsewhere}"


def test_a_solution_shown_to_the_learner_has_no_markers_and_is_the_answer_cell():
    for ex in load_all().values():
        shown = repr(ex.solution())
        assert BEGIN_SOLUTION not in shown
        body = [ln for ln in ex.answer_source().splitlines() if ln.strip() not in (BEGIN_SOLUTION, END_SOLUTION)]
        assert "\n".join(body) in shown


def test_the_guide_block_is_wrapped_for_reading():
    text = answers.GUIDE.read_text(encoding="utf-8")
    for block in re.findall(r"<!-- exercises of .*?<!-- end of the exercises", text, flags=re.S):
        assert all(len(line) <= 100 for line in block.splitlines()[1:-1])


def test_answers_sources_are_found_by_inspect():
    for ex in EVERY.values():
        assert inspect.getsource(ex.answer if getattr(ex, "answer", None) else ex._solution)


def test_the_authoring_guide_quotes_count_calls_as_its_file_has_it():
    """docs/authoring.md shows the example solution step by step; the quote is held to the file."""
    text = (ROOT / "docs" / "authoring.md").read_text(encoding="utf-8")
    source = load_all()["start_here.count_calls"].answer_source()
    quoted = "\n".join("   " + line if line else "" for line in source.splitlines())
    assert f"   ```python\n{quoted}\n   ```" in text


def test_the_map_of_the_course_in_lesson_00_is_made_from_the_lessons():
    from hooktutor.course import course_map

    assert not course_map.stale_map(), "run `python -m hooktutor answers --write`"
    text = course_map.map_markdown()
    for lesson in course_map.lessons():
        assert f"| {lesson.level} | {lesson.time} |" in text and lesson.learn, lesson.stem
    assert "08 ·" in text and "10 ·" in text
