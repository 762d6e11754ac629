"""The student edition: generated from the source, runs as described, and nbgrader grades it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from hooktutor.course import student

pytestmark = pytest.mark.course_env

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "notebooks"
LESSONS = [p for p in sorted(SOURCE.glob("*.ipynb")) if any(
    student.SOLUTION_TAG in c.get("metadata", {}).get("tags", [])
    for c in nbformat.read(p, as_version=4).cells)]


@pytest.fixture(scope="module")
def edition(tmp_path_factory) -> tuple[Path, Path]:
    out = tmp_path_factory.mktemp("student")
    course = tmp_path_factory.mktemp("course")
    result = subprocess.run([sys.executable, "-m", "hooktutor", "student", str(out), "--nbgrader", str(course)],
                            capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    return out, course


def test_every_lesson_with_exercises_has_at_least_three():
    assert LESSONS, "no lesson has exercise cells"
    for path in LESSONS:
        if path.stem[:2] in {"00", "06"}:   # the start and the open-ended lab: one exercise each
            continue
        nb = nbformat.read(path, as_version=4)
        checks = [c for c in nb.cells if student.CHECK_TAG in c.get("metadata", {}).get("tags", [])]
        assert len(checks) >= 3, f"{path.name} has {len(checks)} checked exercises; the template asks for three"


def test_edition_has_no_solutions_no_outputs_and_check_cells(edition):
    out, _ = edition
    assert sorted(p.name for p in out.glob("*.ipynb")) == sorted(p.name for p in SOURCE.glob("*.ipynb"))
    for path in LESSONS:
        nb = nbformat.read(out / path.name, as_version=4)
        text = "\n".join(c.source for c in nb.cells)
        assert student.BEGIN not in text and student.END not in text
        solutions = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]
        grades = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
        assert solutions and len(grades) == len(solutions)
        assert all(student.STUB in c.source for c in solutions)
        assert all(".check(" in c.source and ".grade(" not in c.source for c in grades)
        assert all(not c.outputs and c.execution_count is None for c in nb.cells if c.cell_type == "code")


def test_markers_are_validated():
    with pytest.raises(student.MarkingError, match="needs ### BEGIN SOLUTION"):
        student.strip_solution("def f():\n    return 1\n")
    with pytest.raises(student.MarkingError, match="without ### END SOLUTION"):
        student.strip_solution("def f():\n    ### BEGIN SOLUTION\n    return 1\n")
    assert student.strip_solution("def f(x):\n    ### BEGIN SOLUTION\n    return x\n    ### END SOLUTION") == (
        "def f(x):\n    " + student.STUB)
