"""nbgrader, for real, in the instructor's course folder (``python3 course.py lab --instructor``
writes it: hooktutor/course/instructor.py) and from its own ``nbgrader_config.py``: the generated
course grades solutions full and the untouched edition zero, its hidden tests catch an answer that
passes every check the learner can run, and feedback is generated. ``student --nbgrader`` writes the
same nbgrader sources."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from hooktutor.course import student
from hooktutor.exercises import load_all

pytestmark = pytest.mark.course_env

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    course = tmp_path_factory.mktemp("course")
    result = subprocess.run([sys.executable, "-m", "hooktutor", "instructor", str(course)],
                            capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (course / "nbgrader_config.py").exists() and (course / "exchange").is_dir()
    return course


def test_student_nbgrader_writes_the_instructors_nbgrader_sources(course, tmp_path):
    student.write_student_edition(tmp_path / "student", ROOT / "notebooks", nbgrader_course=tmp_path / "c")
    mine = sorted(p.relative_to(tmp_path / "c") for p in (tmp_path / "c" / "source").rglob("*.ipynb"))
    theirs = sorted(p.relative_to(course) for p in (course / "source").rglob("*.ipynb"))
    assert mine == theirs and mine
    for rel in mine:
        assert (tmp_path / "c" / rel).read_bytes() == (course / rel).read_bytes(), rel


def test_nbgrader_gives_full_marks_to_solutions_and_zero_to_the_untouched_edition(course, tmp_path):
    lesson = "00_start_here"
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(tmp_path / "cfg"), JUPYTER_DATA_DIR=str(tmp_path / "data"),
               IPYTHONDIR=str(tmp_path / "ipython"),
               PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    nbgrader = [sys.executable, "-m", "nbgrader"]

    def run(*args):
        result = subprocess.run([*nbgrader, *args], cwd=course, env=env, capture_output=True, text=True)
        assert result.returncode == 0, result.stdout + result.stderr
        return result

    run("generate_assignment", lesson, "--force")
    release = course / "release" / lesson / f"{lesson}.ipynb"
    assert "HIDDEN TESTS" in (course / "source" / lesson / f"{lesson}.ipynb").read_text()
    assert "HIDDEN TESTS" not in release.read_text(), "the release must not show the hidden tests"
    for who, notebook in (("solved", course / "source" / lesson / f"{lesson}.ipynb"), ("untouched", release)):
        folder = course / "submitted" / who / lesson
        folder.mkdir(parents=True)
        shutil.copy(notebook, folder / f"{lesson}.ipynb")
    # an answer that passes every check the learner can run, and only the hidden tests catch
    ex = load_all()["start_here.count_calls"]
    assert ex.check(VISIBLE_ONLY_ANSWER, hidden=False).passed and not ex.check(VISIBLE_ONLY_ANSWER).passed
    tuned = nbformat.read(release, as_version=4)
    answers = {student._answer_name(c.source, "release"): c for c in tuned.cells
               if "solution" in c.metadata.get("tags", [])}
    answers["count_calls"].source = VISIBLE_ONLY_SOURCE
    answers["predict_calls"].source = "def predict_calls():\n    return 2"     # the prediction right: 1 point
    folder = course / "submitted" / "tuned" / lesson
    folder.mkdir(parents=True)
    nbformat.write(tuned, folder / f"{lesson}.ipynb")
    # each submission's kernel is killed once its notebook ran (a torch kernel's clean exit takes seconds)
    log = run("autograde", lesson, "--create", "--force", "--Execute.shutdown_kernel=immediate")
    # nbgrader's own errors ("[AutogradeApp | ERROR] ..."). Not a line from tornado/zmq that a kernel
    # being torn down between two submissions sometimes logs: the scores below say whether grading worked.
    errors = [line for line in (log.stdout + log.stderr).splitlines() if re.search(r"\[\w+ \| ERROR\]", line)]
    assert not errors, "\n".join(errors)

    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        solved = gb.find_submission(lesson, "solved")
        untouched = gb.find_submission(lesson, "untouched")
        assert solved.max_score > 0
        assert solved.score == solved.max_score
        assert untouched.score == 0
        tuned = gb.find_submission(lesson, "tuned")
        assert tuned.score == solved.max_score - 1, "the hidden tests should fail the tuned answer (only)"
    run("generate_feedback", lesson, "--force")
    for who in ("solved", "untouched", "tuned"):
        assert (course / "feedback" / who / lesson / f"{lesson}.html").exists(), who


VISIBLE_ONLY_SOURCE = '''def count_calls(model, x, layer):
    """Runs the model twice (a warm-up first) and counts the calls of the second run only."""
    model(x)
    calls = []
    handle = layer.register_forward_hook(lambda m, a, o: calls.append(1))
    try:
        model(x)
    finally:
        handle.remove()
    return len(calls)'''
_namespace: dict = {}
exec(VISIBLE_ONLY_SOURCE, _namespace)
VISIBLE_ONLY_ANSWER = _namespace["count_calls"]
