"""nbgrader, for real: the generated course grades solutions full and the untouched edition zero."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.course_env

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("student")
    course = tmp_path_factory.mktemp("course")
    result = subprocess.run([sys.executable, "-m", "hooktutor", "student", str(out), "--nbgrader", str(course)],
                            capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    return course


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
    for who, notebook in (("solved", course / "source" / lesson / f"{lesson}.ipynb"), ("untouched", release)):
        folder = course / "submitted" / who / lesson
        folder.mkdir(parents=True)
        shutil.copy(notebook, folder / f"{lesson}.ipynb")
    log = run("autograde", lesson, "--create", "--force")
    assert "ERROR" not in log.stdout + log.stderr

    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        solved = gb.find_submission(lesson, "solved")
        untouched = gb.find_submission(lesson, "untouched")
        assert solved.max_score > 0
        assert solved.score == solved.max_score
        assert untouched.score == 0
