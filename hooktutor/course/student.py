"""The student edition and the nbgrader course, generated from the one source.

``python -m hooktutor student OUTDIR`` (or ``python3 course.py student OUTDIR``, or
``make student``) writes every lesson with each exercise's solution replaced by a stub that
raises ``NotImplementedError``, all outputs cleared, hints and checks kept. Never edit the
student edition by hand: change the source notebook and generate it again.

How solutions are marked in the source notebooks (docs/authoring.md, docs/instructors.md):
an answer cell is tagged ``solution`` and holds its solution between ``### BEGIN SOLUTION``
and ``### END SOLUTION`` lines; its check cell is tagged ``check`` and calls
``ex.<name>.check(answer)``, in the student edition too: it shows the report and never stops
the notebook, so Run All through a lesson whose exercises are still blank reaches its end, each
blank one reported as not written yet. What nbgrader scores is the hidden-tests block of the
nbgrader source (``grade(answer, hidden=True)``): it fails the cell until the answer passes.

``--nbgrader COURSE`` also writes an nbgrader course folder: ``nbgrader_config.py`` and
``source/<lesson>/<lesson>.ipynb`` with solutions and nbgrader cell metadata, so that
``nbgrader generate_assignment <lesson>`` produces exactly the student edition and
``nbgrader autograde <lesson>`` scores submissions.
"""

from __future__ import annotations

import argparse
import copy
import re
import shutil
from pathlib import Path

BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
STUB = 'raise NotImplementedError("write your answer here, then run the check below")'
SOLUTION_TAG = "solution"
CHECK_TAG = "check"
SCHEMA_VERSION = 3


class MarkingError(ValueError):
    """A source notebook's exercise cells are not marked the documented way."""


def _tags(cell) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def _answer_name(source: str, where: str) -> str:
    m = re.search(r"^(?:def|class)\s+(\w+)\s*[(:]", source, flags=re.M)
    if not m:
        raise MarkingError(f"{where}: a solution cell must define a function (def name(...):) or a "
                           "class (class Name:)")
    return m.group(1)


def strip_solution(source: str, where: str = "cell") -> str:
    """Replace every BEGIN/END SOLUTION region with the stub, at the region's indentation."""
    lines = source.splitlines()
    out: list[str] = []
    inside = False
    replaced = False
    for line in lines:
        stripped = line.strip()
        if stripped == BEGIN:
            if inside:
                raise MarkingError(f"{where}: {BEGIN} inside another solution region")
            inside = True
            indent = line[: len(line) - len(line.lstrip())]
            out.append(f"{indent}{STUB}")
            replaced = True
        elif stripped == END:
            if not inside:
                raise MarkingError(f"{where}: {END} without {BEGIN}")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise MarkingError(f"{where}: {BEGIN} without {END}")
    if not replaced:
        raise MarkingError(f"{where}: a cell tagged '{SOLUTION_TAG}' needs {BEGIN} / {END} lines")
    return "\n".join(out)


def _check_source(source: str, where: str) -> str:
    if ".check(" not in source:
        raise MarkingError(f"{where}: a cell tagged '{CHECK_TAG}' must call ex.<name>.check(answer)")
    return source


HIDDEN_BEGIN, HIDDEN_END = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"


def _with_hidden_tests(source: str, where: str) -> str:
    """The check cell of the nbgrader source, plus nbgrader's hidden tests: the same exercise's
    ``grade(answer, hidden=True)``, which runs every case (those kept for grading too) and fails
    the cell unless the answer passes. ``generate_assignment`` removes the block from the release
    (so it equals the student edition) and ``autograde`` puts it back, so a graded answer meets
    cases the learner never saw, and a blank or wrong one scores nothing."""
    calls = re.findall(r"^(\s*)(.*)\.check\((\s*\w+\s*)\)\s*$", source, flags=re.M)
    if not calls:
        raise MarkingError(f"{where}: a check cell must end in ex.<name>.check(answer)")
    hidden = "\n".join(f"{indent}{obj}.grade({arg.strip()}, hidden=True)" for indent, obj, arg in calls)
    return f"{source.rstrip()}\n{HIDDEN_BEGIN}\n{hidden}\n{HIDDEN_END}"


def _nbgrader_meta(kind: str, grade_id: str) -> dict:
    meta = {"grade_id": grade_id, "schema_version": SCHEMA_VERSION, "task": False}
    if kind == "solution":
        meta.update(solution=True, grade=False, locked=False)
    else:
        meta.update(solution=False, grade=True, locked=True, points=1)
    return meta


def convert(nb, stem: str, *, keep_solutions: bool):
    """A copy of ``nb`` with nbgrader metadata; solutions stubbed unless ``keep_solutions``."""
    nb = copy.deepcopy(nb)
    seen_ids: set[str] = set()
    answers: list[str] = []
    for index, cell in enumerate(nb.cells):
        tags = _tags(cell)
        where = f"{stem}, cell {index}"
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        if SOLUTION_TAG in tags:
            name = _answer_name(cell.source, where)
            grade_id = f"{stem}-{name}"
            if not keep_solutions:
                cell.source = strip_solution(cell.source, where)
            else:
                strip_solution(cell.source, where)  # validates the markers
            answers.append(name)
            cell.metadata["nbgrader"] = _nbgrader_meta("solution", grade_id)
        elif CHECK_TAG in tags:
            match = re.search(r"\.check\(\s*(\w+)", cell.source)
            name = match.group(1) if match else f"check{index}"
            grade_id = f"{stem}-check-{name}"
            cell.source = _check_source(cell.source, where)
            if keep_solutions:   # the nbgrader source: hidden tests too
                cell.source = _with_hidden_tests(cell.source, where)
            cell.metadata["nbgrader"] = _nbgrader_meta("grade", grade_id)
        else:
            continue
        if grade_id in seen_ids:
            raise MarkingError(f"{where}: two exercise cells would share the id {grade_id!r}")
        seen_ids.add(grade_id)
    nb.metadata.pop("widgets", None)
    return nb, answers


def lessons(source_dir: Path) -> list[Path]:
    return sorted(p for p in source_dir.glob("*.ipynb"))


NBGRADER_CONFIG = '''\
# nbgrader configuration for the hooktutor course (generated by `python -m hooktutor student`).
c = get_config()  # noqa: F821
c.CourseDirectory.course_id = "hooktutor"
# the same stub as the student edition, so generate_assignment reproduces it exactly
c.ClearSolutions.code_stub = {{"python": {stub!r}}}
c.ClearSolutions.begin_solution_delimeter = "BEGIN SOLUTION"
c.ClearSolutions.end_solution_delimeter = "END SOLUTION"
c.Execute.timeout = 120
'''


def write_student_edition(out_dir: Path, source_dir: Path, *, nbgrader_course: Path | None = None) -> list[Path]:
    """Write the student edition of every notebook in ``source_dir`` into ``out_dir``."""
    import nbformat

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for path in lessons(source_dir):
        nb = nbformat.read(path, as_version=4)
        student, _ = convert(nb, path.stem, keep_solutions=False)
        target = out_dir / path.name
        nbformat.write(student, target)
        written.append(target)
        if nbgrader_course is not None:
            from .instructor import nbgrader_source  # the instructor's course folder writes the same

            graded = nbgrader_source(path)
            if graded is not None:
                folder = nbgrader_course / "source" / path.stem
                folder.mkdir(parents=True, exist_ok=True)
                (folder / path.name).write_bytes(graded)
    if nbgrader_course is not None:
        (nbgrader_course / "nbgrader_config.py").write_text(
            NBGRADER_CONFIG.format(stub=STUB))
    return written


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m hooktutor student",
                                     description="Write the student edition of the course.")
    parser.add_argument("out_dir", type=Path, help="folder for the student notebooks")
    parser.add_argument("--source", type=Path, default=None,
                        help="the source notebooks (default: notebooks/ of this checkout, or the lessons "
                             "an installed wheel carries)")
    parser.add_argument("--nbgrader", type=Path, metavar="COURSE", default=None,
                        help="also write an nbgrader course folder (source/ and nbgrader_config.py)")
    parser.add_argument("--clean", action="store_true", help="empty OUT_DIR first")
    args = parser.parse_args(argv)
    if args.source is None:
        from .workbook import course_lessons  # a circular import at the top (workbook imports this)

        args.source = course_lessons()
    if not args.source.is_dir():
        parser.error(f"no notebooks folder at {args.source}")
    if args.clean and args.out_dir.exists():
        shutil.rmtree(args.out_dir)
    try:
        written = write_student_edition(args.out_dir, args.source, nbgrader_course=args.nbgrader)
    except MarkingError as exc:
        print(f"cannot make the student edition: {exc}")
        return 1
    print(f"wrote {len(written)} student notebooks to {args.out_dir}")
    if args.nbgrader is not None:
        print(f"wrote the nbgrader course to {args.nbgrader} (cd there; nbgrader generate_assignment NAME)")
    return 0
