"""The learner's workbook: the lessons to work in, exercises blank, never overwriting their work.

``python3 course.py lab`` opens JupyterLab on ``workbook/`` (next to ``course.py``), not on
``notebooks/``: the notebooks there hold every solution, so a learner studying alone would see
each answer before writing it. Before Lab starts, :func:`sync` writes the student edition of
every lesson (:mod:`hooktutor.course.student`: answers stubbed, outputs cleared, hints, checks and
``ex.<name>.solution()`` kept) into the workbook:

* a lesson not in the workbook yet is written;
* a lesson the learner has not changed since it was written is replaced when the course's
  edition changes (after a ``git pull``);
* a lesson the learner has changed is **never** touched; when the course's edition of it
  changed, the report says so and how to get it (move the file away, start Lab again).

What was written is remembered by content hash in ``workbook/.hooktutor-workbook.json``.
Taught in ``00_start_here.ipynb`` (the "Start over" row of "How the course works").
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .student import MarkingError, convert, lessons

MANIFEST = ".hooktutor-workbook.json"
PACKAGED_LESSONS = Path(__file__).resolve().parents[1] / "lessons"  # in a wheel (setup.py puts them there)
CHECKOUT_LESSONS = Path(__file__).resolve().parents[2] / "notebooks"  # in a git checkout


def course_lessons() -> Path:
    """The folder of the course's lessons (the instructor's edition, solutions included): the ones
    an installed wheel carries, else ``notebooks/`` of the checkout this package runs from."""
    if any(PACKAGED_LESSONS.glob("*.ipynb")):
        return PACKAGED_LESSONS
    return CHECKOUT_LESSONS


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def edition(path: Path) -> bytes:
    """The workbook edition of the source notebook at ``path``, as the bytes written to disk."""
    import nbformat

    nb, _ = convert(nbformat.read(path, as_version=4), path.stem, keep_solutions=False)
    return nbformat.writes(nb).encode("utf-8") + b"\n"


@dataclass
class SyncReport:
    """What :func:`sync` did, lesson by lesson (file names)."""

    folder: Path
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    current: list[str] = field(default_factory=list)  # nothing to do: the edition, or the learner's own work
    kept: list[str] = field(default_factory=list)  # changed by the learner; the course's edition differs

    def lines(self) -> list[str]:
        out = []
        if self.created:
            out.append(f"wrote {len(self.created)} lesson(s) to {self.folder}: {', '.join(self.created)}")
        if self.updated:
            out.append(f"updated {len(self.updated)} lesson(s) you had not changed: {', '.join(self.updated)}")
        for name in self.kept:
            out.append(f"kept your {name}: the course has a newer edition of it. To get that one, move yours "
                       f"away (e.g. rename it to {Path(name).stem}-mine.ipynb) and start the course again")
        if not out:
            out.append(f"your workbook {self.folder} is up to date ({len(self.current)} lessons)")
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())


def _read_manifest(folder: Path) -> dict[str, dict[str, str]]:
    """File name -> {"written": digest of what sync last wrote}; empty when missing or unreadable."""
    try:
        data = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    files = data.get("files") if isinstance(data, dict) else None
    return files if isinstance(files, dict) else {}


def _trust(data: bytes) -> None:
    """Mark a lesson we wrote as trusted, as Jupyter marks a notebook you saved yourself: else
    the server logs "Notebook ... is not trusted" for every lesson the learner opens."""
    try:
        import nbformat
        from nbformat.sign import NotebookNotary

        NotebookNotary().sign(nbformat.reads(data.decode("utf-8"), as_version=4))
    except Exception:  # noqa: BLE001 - a signature database we cannot write only costs a log line
        pass


def sync(folder: Path, source: Path) -> SyncReport:
    """Bring the workbook ``folder`` up to date with the lessons in ``source`` (see the module
    docstring); never overwrite a lesson the learner has changed."""
    return sync_files(folder, {path.name: (lambda path=path: edition(path)) for path in lessons(Path(source))})


def sync_files(folder: Path, editions: dict[str, Callable[[], bytes]]) -> SyncReport:
    """Write each ``editions[name]()`` to ``folder / name`` (a name may hold sub-folders), by the
    workbook's rules: a missing file is written, a file nobody changed since it was written is
    replaced when its edition changed, a changed one is never touched (the report names it).
    The instructor's course folder (:mod:`hooktutor.course.instructor`) is kept the same way."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    manifest = _read_manifest(folder)
    report = SyncReport(folder)
    for name, make in editions.items():
        new = make()
        new_digest = _digest(new)
        target = folder / name
        written = manifest.get(name, {}).get("written")
        if not target.exists():
            report.created.append(name)
        else:
            on_disk = _digest(target.read_bytes())
            if on_disk == new_digest:
                report.current.append(name)
                manifest[name] = {"written": new_digest}
                continue
            if on_disk != written:  # the learner's work (or a file this never wrote): leave it
                if written is None or new_digest != written:  # and say, each time, that a newer one exists
                    report.kept.append(name)
                else:
                    report.current.append(name)
                continue
            report.updated.append(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(new)
        manifest[name] = {"written": new_digest}
        if name.endswith(".ipynb"):
            _trust(new)
    (folder / MANIFEST).write_text(json.dumps({"files": manifest}, indent=1, sort_keys=True) + "\n",
                                   encoding="utf-8")
    return report


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="hooktutor workbook",
                                     description="Write or update the learner's workbook (exercises blank).")
    parser.add_argument("folder", type=Path, help="the workbook folder (course.py lab uses workbook/)")
    parser.add_argument("--source", type=Path, default=None,
                        help="the source notebooks (default: the lessons the installed package carries, "
                             "or notebooks/ of this checkout)")
    args = parser.parse_args(argv)
    args.source = args.source or course_lessons()
    if not args.source.is_dir():
        parser.error(f"no notebooks folder at {args.source}")
    try:
        report = sync(args.folder, args.source)
    except MarkingError as exc:
        print(f"cannot write the workbook: {exc}")
        return 1
    print(report)
    return 0
