"""The learner's workbook (hooktutor/course/workbook.py): what ``python3 course.py lab`` opens.

A learner studying alone gets every lesson with its exercises blank; a ``git pull`` that
changes a lesson updates the copies they have not touched and never one they worked in.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import nbformat
import pytest

from hooktutor.course import workbook

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
LESSON = "01_tensor_hooks.ipynb"


@pytest.fixture
def course(tmp_path):
    """A course source with two lessons (copies, so a test can change them)."""
    source = tmp_path / "notebooks"
    source.mkdir()
    for name in ("00_start_here.ipynb", LESSON):
        shutil.copy(NOTEBOOKS / name, source / name)
    return source, tmp_path / "workbook"


def change_the_course(source: Path, name: str = LESSON) -> None:
    """What a git pull that edits a lesson's text does to the source."""
    nb = nbformat.read(source / name, as_version=4)
    nb.cells[0].source += "\n\n(revised)"
    nbformat.write(nb, source / name)


def test_first_sync_writes_every_lesson_without_solutions_or_outputs(course):
    source, folder = course
    report = workbook.sync(folder, source)
    assert report.created == ["00_start_here.ipynb", LESSON] and not report.kept
    nb = nbformat.read(folder / LESSON, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.outputs == [] for c in code)
    answers = [c.source for c in code if "solution" in c.metadata.get("tags", [])]
    assert answers and all("BEGIN SOLUTION" not in a and "NotImplementedError" in a for a in answers)
    assert any(".solution()" in c.source or "solution()" in c.source for c in nb.cells)  # on request, still
    assert "wrote 2 lesson(s)" in str(report)


def test_a_second_sync_changes_nothing(course):
    source, folder = course
    workbook.sync(folder, source)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    report = workbook.sync(folder, source)
    assert report.current == ["00_start_here.ipynb", LESSON] and not (report.created or report.updated or report.kept)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert str(report) == f"your workbook {folder} is up to date (2 lessons)"


def test_an_untouched_lesson_follows_the_course(course):
    source, folder = course
    workbook.sync(folder, source)
    change_the_course(source)
    report = workbook.sync(folder, source)
    assert report.updated == [LESSON]
    assert "(revised)" in nbformat.read(folder / LESSON, as_version=4).cells[0].source
    assert workbook.sync(folder, source).current == ["00_start_here.ipynb", LESSON]


def test_a_lesson_the_learner_worked_in_is_never_overwritten(course):
    source, folder = course
    workbook.sync(folder, source)
    mine = folder / LESSON
    mine.write_text(mine.read_text().replace("NotImplementedError", "NotImplementedError  # my attempt", 1))
    work = mine.read_bytes()
    assert workbook.sync(folder, source).current == ["00_start_here.ipynb", LESSON]  # nothing new to offer
    change_the_course(source)
    for _ in range(2):  # said at every start, never done
        report = workbook.sync(folder, source)
        assert report.kept == [LESSON] and mine.read_bytes() == work
        assert f"kept your {LESSON}" in str(report) and "01_tensor_hooks-mine.ipynb" in str(report)
    mine.rename(folder / "01_tensor_hooks-mine.ipynb")  # what the message says to do
    report = workbook.sync(folder, source)
    assert report.created == [LESSON] and "(revised)" in (folder / LESSON).read_text()
    assert (folder / "01_tensor_hooks-mine.ipynb").read_bytes() == work


def test_a_lost_or_broken_manifest_never_costs_the_learner_work(course):
    source, folder = course
    workbook.sync(folder, source)
    mine = folder / LESSON
    mine.write_text(mine.read_text().replace("NotImplementedError", "NotImplementedError  # mine", 1))
    work = mine.read_bytes()
    (folder / workbook.MANIFEST).write_text("{not json")
    change_the_course(source)
    report = workbook.sync(folder, source)
    assert report.kept == [LESSON] and mine.read_bytes() == work
    assert json.loads((folder / workbook.MANIFEST).read_text())["files"]  # rewritten, readable again


def test_the_command_line(course, capsys):
    source, folder = course
    assert workbook.main([str(folder), "--source", str(source)]) == 0
    assert "wrote 2 lesson(s)" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        workbook.main([str(folder), "--source", str(source / "missing")])
    assert "no notebooks folder" in capsys.readouterr().err


def test_the_lessons_written_are_trusted_so_the_server_does_not_log_each_one(course, tmp_path, monkeypatch):
    from nbformat.sign import NotebookNotary

    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "jupyter-data"))  # its signature database
    source, folder = course
    workbook.sync(folder, source)
    notary = NotebookNotary()
    assert notary.check_signature(nbformat.read(folder / LESSON, as_version=4))
    notary.store.close()
