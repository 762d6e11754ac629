"""The instructor's course folder: a copy of the lessons and an nbgrader course, never the tracked files.

``python3 course.py lab --instructor`` opens JupyterLab on ``course/`` (next to ``course.py``,
ignored by git), which :func:`prepare` writes and keeps up to date:

* ``course/lessons/``: the instructor's edition of every lesson (solutions and stored outputs), a
  copy of ``notebooks/``. Run All and Save there change nothing that git tracks, so a ``git pull``
  never conflicts; a lesson saved with other outputs is kept as it is, and the report says when the
  course has a newer edition of it (move it away and start Lab again to get that one);
* ``course/source/<lesson>/<lesson>.ipynb``: the nbgrader source of each lesson with exercises
  (what ``python -m hooktutor student --nbgrader`` writes: solutions, nbgrader metadata, hidden
  tests), kept by the same rule, so an assignment edited in nbgrader's panel is not overwritten;
* ``course/nbgrader_config.py``: the course id, the student edition's stub, and the exchange
  ``course/exchange/`` (created here), so the Formgrader lists the course's assignments and
  ``nbgrader generate_assignment``, ``autograde`` and ``generate_feedback`` run from ``course/``
  as docs/instructors.md says.

The rules are the workbook's (:func:`hooktutor.course.workbook.sync_files`). Taught in
docs/instructors.md ("Instructor mode").
"""

from __future__ import annotations

import argparse
from pathlib import Path

from .student import STUB, MarkingError, convert, lessons
from .workbook import SyncReport, course_lessons, sync_files

LESSONS = "lessons"
NBGRADER_CONFIG = """\
# nbgrader configuration of the instructor's course folder (written by `python3 course.py lab
# --instructor`, i.e. `python -m hooktutor instructor`; yours to change: it is not overwritten).
c = get_config()  # noqa: F821
c.CourseDirectory.course_id = "hooktutor"
c.CourseDirectory.root = {root!r}
# a local exchange for release_assignment / fetch / submit / collect on one machine
c.Exchange.root = {exchange!r}
# the student edition's stub, so generate_assignment reproduces it exactly
c.ClearSolutions.code_stub = {{"python": {stub!r}}}
c.ClearSolutions.begin_solution_delimeter = "BEGIN SOLUTION"
c.ClearSolutions.end_solution_delimeter = "END SOLUTION"
c.Execute.timeout = 120
"""


def nbgrader_source(path: Path) -> bytes | None:
    """The nbgrader source of the lesson at ``path`` (``None`` for a lesson without exercises)."""
    import nbformat

    nb, answers = convert(nbformat.read(path, as_version=4), path.stem, keep_solutions=True)
    return nbformat.writes(nb).encode("utf-8") + b"\n" if answers else None


def nbgrader_config(root: Path) -> bytes:
    """The course folder's ``nbgrader_config.py`` (absolute paths: nbgrader runs from anywhere)."""
    root = Path(root).resolve()
    return NBGRADER_CONFIG.format(root=str(root), exchange=str(root / "exchange"), stub=STUB).encode()


def prepare(root: Path, source: Path | None = None) -> SyncReport:
    """Write or update the instructor's course folder ``root`` from the lessons in ``source``
    (default: the course's own); never overwrite a file the instructor changed."""
    root = Path(root)
    source = Path(source) if source is not None else course_lessons()
    editions = {}
    for path in lessons(source):
        editions[f"{LESSONS}/{path.name}"] = path.read_bytes
        graded = nbgrader_source(path)
        if graded is not None:
            editions[f"source/{path.stem}/{path.name}"] = (lambda data=graded: data)
    editions["nbgrader_config.py"] = lambda: nbgrader_config(root)
    report = sync_files(root, editions)
    (root / "exchange").mkdir(exist_ok=True)
    return report


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m hooktutor instructor",
                                     description="Write or update the instructor's course folder "
                                                 "(lessons/, source/, nbgrader_config.py, exchange/).")
    parser.add_argument("folder", type=Path, help="the course folder (course.py lab --instructor uses course/)")
    parser.add_argument("--source", type=Path, default=None,
                        help="the source notebooks (default: notebooks/ of this checkout)")
    args = parser.parse_args(argv)
    try:
        report = prepare(args.folder, args.source)
    except MarkingError as exc:
        print(f"cannot write the course folder: {exc}")
        return 1
    print(summary(report))
    return 0


def summary(report: SyncReport) -> str:
    """A few lines for the terminal: how many files were written or updated, which were kept."""
    lessons_ = sum(1 for p in (Path(report.folder) / LESSONS).glob("*.ipynb"))
    sources = sum(1 for p in (Path(report.folder) / "source").glob("*/*.ipynb"))
    lines = [f"course folder {report.folder}: {lessons_} lessons in {LESSONS}/, {sources} nbgrader "
             f"assignments in source/ ({len(report.created)} files written, {len(report.updated)} updated)"]
    for name in report.kept:
        lines.append(f"kept your {name}: the course has a newer edition of it. To get that one, move yours "
                     "away and start the instructor's Lab again")
    return "\n".join(lines)
