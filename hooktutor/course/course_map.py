"""The map of the course in ``00_start_here.ipynb``, made from the lessons themselves.

Each lesson's first cell states its title and its ``Level: ... · about N minutes`` line; the
README's lesson table says in a few words what each lesson teaches. The map (the markdown cell
of lesson 00 tagged ``course-map``) is made from those two sources by ``python -m hooktutor
answers --write``, and ``tests/test_answers.py`` holds it equal, so the map cannot contradict a
lesson's header again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
README = ROOT / "README.md"
MAP_TAG = "course-map"
START = "00_start_here"


@dataclass
class Lesson:
    stem: str
    title: str
    level: str
    time: str
    learn: str


def _header(path: Path) -> tuple[str, str, str]:
    import nbformat

    first = nbformat.read(path, as_version=4).cells[0].source
    title = re.match(r"#\s*\d\d\s*·\s*(.+)", first.splitlines()[0]).group(1).strip()
    title = title.split(":")[0].strip()
    line = next(ln for ln in first.splitlines() if ln.startswith("Level:"))
    level = line.removeprefix("Level:").split()[0]
    minutes = re.search(r"about (\d+) minutes", line)
    time = f"{minutes.group(1)} min" if minutes else "open-ended"
    if "open-ended" in line and minutes:
        time = f"{minutes.group(1)} min, then open-ended"
    return title, level, time


def _learn() -> dict[str, str]:
    """What each lesson teaches: the README table's "what you learn" column."""
    rows = {}
    for line in README.read_text(encoding="utf-8").splitlines():
        match = re.match(r"\|\s*`(\d\d_\w+)`\s*\|[^|]*\|[^|]*\|([^|]*)\|", line)
        if match:
            rows[match.group(1)] = match.group(2).strip()
    return rows


def lessons() -> list[Lesson]:
    learn = _learn()
    found = []
    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        if path.stem == START:
            continue
        title, level, time = _header(path)
        found.append(Lesson(path.stem, title, level, time, learn.get(path.stem, "")))
    return found


def map_markdown() -> str:
    rows = ["## The map of the course", "",
            "| lesson | level | time | you learn |", "|---|---|---|---|"]
    for lesson in lessons():
        if lesson.stem.startswith("08"):
            rows.append("| **the advanced track, after the capstone** | | | |")
        rows.append(f"| {lesson.stem[:2]} · {lesson.title} | {lesson.level} | {lesson.time} | {lesson.learn} |")
    rows += ["", "Levels and times are each lesson's own (its first cell); a time is for working through the "
                 "whole lesson alone, every exercise included.", "",
             "The lessons use small models and synthetic data from `hooktutor`, built from a seed in",
             "milliseconds: the same numbers on every machine, no downloads."]
    return "\n".join(rows)


def stale_map(*, write: bool = False) -> bool:
    """Whether lesson 00's map differs from the lessons (rewritten when ``write``)."""
    import nbformat

    path = NOTEBOOKS / f"{START}.ipynb"
    nb = nbformat.read(path, as_version=4)
    cells = [c for c in nb.cells if MAP_TAG in c.get("metadata", {}).get("tags", [])]
    if len(cells) != 1:
        raise ValueError(f"{path.name} needs exactly one markdown cell tagged {MAP_TAG!r}")
    want = map_markdown()
    if cells[0].source == want:
        return False
    if write:
        cells[0].source = want
        nbformat.write(nb, path)
    return True
