"""One source for every solution: the notebooks' answer cells and the guide's entries are made
from the exercise files (``python -m hooktutor answers --write``; a test holds them equal).

Each exercise lives in a file of its own, ``hooktutor/exercises/<lesson>/<exercise>.py``, with
its task, hints, solution, cases and wrong answers. The instructor's answer cell in the lesson
is the solution's source from that file, markers included, so a solution is typed once and
cannot drift; the student edition then stubs what lies between the markers. The instructors'
guide lists, under each lesson, the mistakes learners make in each exercise: the ``guide`` text
of each file, in the order the lesson asks for them.
"""

from __future__ import annotations

import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
GUIDE = ROOT / "docs" / "instructors.md"
SOLUTION_TAG, CHECK_TAG = "solution", "check"

_IMPORT = re.compile(r"from hooktutor\.exercises import (\w+) as ex\b")
_CALL = re.compile(r"\bex\.(\w+)\.(?:check|grade)\(")


@dataclass
class Answer:
    """An answer cell of a lesson and the exercise whose check follows it."""

    lesson: str
    index: int       # the cell's index in the notebook
    exercise: object  # hooktutor.exercises.core.Exercise

    @property
    def where(self) -> str:
        return f"{self.lesson} cell {self.index} ({self.exercise.key})"


def _tags(cell) -> list[str]:
    return cell.get("metadata", {}).get("tags", [])


def answers(nb, lesson: str) -> list[Answer]:
    """Every answer cell of ``nb`` with its exercise: the check cell after an answer cell names
    the exercise (``ex.<name>.check(...)``), the last ``from hooktutor.exercises import <lesson>
    as ex`` before it the lesson module."""
    import importlib

    found, module = [], None
    pending: int | None = None
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        imported = _IMPORT.findall(cell.source)
        if imported:
            module = imported[-1]
        if SOLUTION_TAG in _tags(cell):
            pending = index
        elif CHECK_TAG in _tags(cell) and pending is not None:
            call = _CALL.search(cell.source)
            if call is None or module is None:
                raise ValueError(f"{lesson} cell {index}: a check cell must import the lesson's exercises "
                                 "as ex and call ex.<name>.check(...)")
            lessons = importlib.import_module(f"hooktutor.exercises.{module}")
            exercise = getattr(lessons, call.group(1), None)
            if exercise is None:
                raise ValueError(f"{lesson} cell {index}: hooktutor.exercises.{module} has no {call.group(1)}")
            found.append(Answer(lesson, pending, exercise))
            pending = None
    return found


def lesson_paths(folder: Path = NOTEBOOKS) -> list[Path]:
    return sorted(p for p in folder.glob("[0-9][0-9]_*.ipynb"))


def stale_answer_cells(paths: list[Path] | None = None, *, write: bool = False) -> list[str]:
    """The answer cells that differ from their exercise file (rewritten when ``write``)."""
    import nbformat

    stale = []
    for path in paths or lesson_paths():
        nb = nbformat.read(path, as_version=4)
        changed = False
        for answer in answers(nb, path.stem):
            want = answer.exercise.answer_source()
            if nb.cells[answer.index].source != want:
                stale.append(answer.where)
                nb.cells[answer.index].source = want
                changed = True
        if write and changed:
            nbformat.write(nb, path)
    return stale


# -- the instructors' guide -----------------------------------------------------------------------

def _markers(lesson: str) -> tuple[str, str]:
    return (f"<!-- exercises of {lesson}: generated from hooktutor/exercises/ by "
            "`python -m hooktutor answers --write`; edit the exercise files, not this list -->",
            f"<!-- end of the exercises of {lesson} -->")


def guide_entries(lesson: str, found: list[Answer]) -> str:
    """The generated block of the guide for one lesson: one bullet per exercise, in lesson order."""
    from hooktutor.exercises.predict import Prediction

    begin, end = _markers(lesson)
    lines = [begin]
    for answer in found:
        ex = answer.exercise
        if not ex.guide:
            raise ValueError(f"{ex.key}: its file has no guide text (the mistakes learners make)")
        kind = " (predict, then run)" if isinstance(ex, Prediction) else ""
        lines.append(textwrap.fill(f"- **{ex.title}**{kind}: {ex.guide}", width=100, subsequent_indent="  ",
                                   break_on_hyphens=False, break_long_words=False))
    lines.append(end)
    return "\n".join(lines)


def stale_guide(paths: list[Path] | None = None, *, write: bool = False) -> list[str]:
    """The lessons whose generated block in docs/instructors.md differs (rewritten when ``write``)."""
    import nbformat

    text = GUIDE.read_text(encoding="utf-8")
    stale = []
    for path in paths or lesson_paths():
        found = answers(nbformat.read(path, as_version=4), path.stem)
        if not found:
            continue
        want = guide_entries(path.stem, found)
        begin, end = _markers(path.stem)
        match = re.search(re.escape(begin) + r".*?" + re.escape(end), text, flags=re.S)
        if match is None:
            raise ValueError(f"docs/instructors.md has no generated block for {path.stem}: put the two "
                             f"marker lines under its heading:\n{begin}\n{end}")
        if match.group(0) != want:
            stale.append(path.stem)
            text = text[:match.start()] + want + text[match.end():]
    if write and stale:
        GUIDE.write_text(text, encoding="utf-8")
    return stale


def main(argv: list[str]) -> int:
    write = "--write" in argv
    paths = [Path(a).resolve() for a in argv if a.endswith(".ipynb")] or None
    from .course_map import stale_map

    cells, lessons = stale_answer_cells(paths, write=write), stale_guide(paths, write=write)
    course_map = stale_map(write=write)
    if course_map:
        print(f"{'rewrote' if write else 'differs from the lessons'}: the map of the course in lesson 00")
    for where in cells:
        print(f"{'rewrote' if write else 'differs from its exercise file'}: {where}")
    for lesson in lessons:
        print(f"{'rewrote' if write else 'differs from the exercise files'}: the guide's list for {lesson}")
    if not cells and not lessons and not course_map:
        print("every answer cell and the guide agree with the exercise files")
        return 0
    if not write:
        print("run `python -m hooktutor answers --write`, then `python3 course.py regen` for the lessons whose "
              "solution changed", file=sys.stderr)
        return 1
    return 0
