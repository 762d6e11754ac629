"""The website's source folder: the lessons as stored (never re-executed), each prepared for
reading, plus a landing page and the guides (``python3 course.py site``, ``hooktutor.course.site``).

What a lesson's site copy changes, and nothing else (every stored output stays byte for byte):

* the set-up cell (tag ``colab-setup``) is removed from the page (MyST-NB's ``remove-cell``);
* each exercise's answer cell (tag ``solution``) is folded (``hide-input``: "Show code cell
  source"), and its hints, read from the exercise's own file, come folded before it;
* a widget's view (``application/vnd.jupyter.widget-view+json``, and the notebook's stored widget
  state) is dropped: a static page has no kernel to draw it. A hooktutor widget's cell is followed
  by pictures of its states instead (``hooktutor.course.site_widgets``);
* the claims' verdicts, the checks' reports and every other output are shown as stored.
"""

from __future__ import annotations

import copy
import html
import json
import re
from dataclasses import dataclass
from pathlib import Path

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
SETUP_TAG = "colab-setup"
SOLUTION_TAG = "solution"
CHECK_TAG = "check"
GUIDES = ["instructors.md", "authoring.md", "torch-versions.md"]  # docs/ pages on the site

_IMPORT = re.compile(r"from hooktutor\.exercises import (\w+) as (\w+)")
_CHECK = re.compile(r"\b(\w+)\.(\w+)\.check\(")


@dataclass
class Lesson:
    """One row of the README's lesson table."""
    stem: str
    level: str
    time: str
    learn: str
    title: str = ""


def lesson_table(readme: str) -> list[Lesson]:
    """The rows of the README's table under "## The lessons" (notebook, level, time, what you learn)."""
    rows = []
    for line in readme.splitlines():
        m = re.match(r"\|\s*`(\d\d_\w+)`\s*\|([^|]*)\|([^|]*)\|([^|]*)\|", line)
        if m:
            rows.append(Lesson(m.group(1), m.group(2).strip(), m.group(3).strip(), m.group(4).strip()))
    if not rows:
        raise ValueError("README.md has no lesson table (rows such as | `00_start_here` | level | time | "
                         "what you learn | ...); the site's landing page is made from it")
    return rows


def source_of(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _tags(cell: dict) -> list[str]:
    return cell.setdefault("metadata", {}).setdefault("tags", [])


def _add_tag(cell: dict, tag: str) -> None:
    tags = _tags(cell)
    if tag not in tags:
        tags.append(tag)


def _markdown(text: str, tag: str, cell_id: str) -> dict:
    return {"cell_type": "markdown", "id": cell_id, "metadata": {"tags": [tag]}, "source": text}


def hints_markdown(title: str, hints: list[str]) -> str:
    """The folded hints of one exercise, as HTML ``<details>`` a static page can open."""
    parts = [f"<details class=\"hooktutor-hints\"><summary>Hints for \u201c{html.escape(title)}\u201d "
             f"({len(hints)}): open one at a time</summary>\n"]
    for number, hint in enumerate(hints, 1):
        body = html.escape(hint)
        body = re.sub(r"`([^`]+)`", r"<code>\1</code>", body)
        parts.append(f"<details class=\"hooktutor-hint\"><summary>Hint {number}</summary><p>{body}</p></details>\n")
    parts.append("</details>")
    return "".join(parts)


def exercise_of(cell_source: str, aliases: dict[str, str]):
    """The exercise a check cell checks (``ex.clip_hook.check(...)``), or None."""
    import importlib

    m = _CHECK.search(cell_source)
    if not m or m.group(1) not in aliases:
        return None
    module = importlib.import_module(f"hooktutor.exercises.{aliases[m.group(1)]}")
    return getattr(module, m.group(2), None)


def prepare_lesson(nb: dict, widget_cells: dict[int, str] | None = None) -> dict:
    """The site copy of a lesson notebook ``nb`` (a dict as stored; not modified).

    ``widget_cells`` maps the index of a widget's cell to the markdown of its static fallback,
    inserted after that cell."""
    nb = copy.deepcopy(nb)
    widget_cells = widget_cells or {}
    nb.get("metadata", {}).pop("widgets", None)
    aliases = {}
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            for module, alias in _IMPORT.findall(source_of(cell)):
                aliases[alias] = module
    out: list[dict] = []
    pending_solution_at: int | None = None  # where the answer cells of the current exercise start
    for index, cell in enumerate(nb["cells"]):
        tags = _tags(cell) if cell["cell_type"] == "code" else cell.get("metadata", {}).get("tags", [])
        if cell["cell_type"] == "code":
            if SETUP_TAG in tags:
                _add_tag(cell, "remove-cell")
            if SOLUTION_TAG in tags:
                _add_tag(cell, "hide-input")
                cell["metadata"]["mystnb"] = {"code_prompt_show": "Show the solution",
                                              "code_prompt_hide": "Hide the solution"}
                if pending_solution_at is None:
                    pending_solution_at = len(out)
            if CHECK_TAG in tags and pending_solution_at is not None:
                exercise = exercise_of(source_of(cell), aliases)
                if exercise is not None and exercise.hints:
                    out.insert(pending_solution_at, _markdown(hints_markdown(exercise.title, exercise.hints),
                                                              "hooktutor-hints", f"site-hints-{index}"))
                pending_solution_at = None
            kept = []
            for output in cell.get("outputs", []):
                data = output.get("data", {})
                if WIDGET_VIEW in data:
                    continue  # a live view: its pictures follow the cell (site_widgets), no JS state here
                kept.append(output)
            cell["outputs"] = kept
        out.append(cell)
        if index in widget_cells:
            out.append(_markdown(widget_cells[index], "hooktutor-widget-fallback", f"site-widget-{index}"))
    nb["cells"] = out
    return nb


def title_of(nb: dict) -> str:
    """The lesson's title: its first heading (``# 01 · Tensor hooks: ...``)."""
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            for line in source_of(cell).splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return ""


def index_page(lessons: list[Lesson], home: str) -> str:
    """The landing page: what the course is, the lesson table linking every lesson, the guides."""
    rows = "\n".join(f"| [{lesson.title or lesson.stem}]({lesson.stem}.ipynb) | {lesson.level} | {lesson.time} | "
                     f"{lesson.learn} |" for lesson in lessons)
    toc = "\n".join(lesson.stem for lesson in lessons)
    guides = "\n".join(Path(g).stem for g in GUIDES)
    return f"""# hooktutor: PyTorch hooks, every claim checked

A course on PyTorch hooks in Jupyter notebooks. **Every claim a lesson makes is executed and
asserted in the notebook**: these pages show each lesson with the outputs stored in the
repository, exactly those the test suite (strict nbval) compares with a fresh run; nothing here
was executed for the site. Exercise solutions and hints are folded; open them when you need them.

To run the lessons yourself (widgets live, exercises blank for you to write): clone
[the repository]({home}) and run `python3 course.py lab`, or open a lesson in Colab from the
README.

## The lessons

| lesson | level | time | what you learn |
|---|---|---|---|
{rows}

## For instructors and authors

- [The instructor's guide](instructors.md): schedules, the student edition, nbgrader.
- [Writing a lesson](authoring.md): the rules every lesson follows.
- [Torch versions](torch-versions.md): which torch release passes which lesson.

```{{toctree}}
:hidden:
:caption: Lessons

{toc}
```

```{{toctree}}
:hidden:
:caption: Guides

{guides}
```
"""


def write_source(root: Path, dest: Path, fallbacks: dict[str, dict[int, str]] | None = None,
                 home: str = "https://github.com/hooktutor/hooktutor") -> list[Lesson]:
    """Write the site's source folder ``dest`` from the checkout ``root``: every lesson of the
    README's table prepared by :func:`prepare_lesson`, the guides, and ``index.md``."""
    fallbacks = fallbacks or {}
    dest.mkdir(parents=True, exist_ok=True)
    lessons = lesson_table((root / "README.md").read_text(encoding="utf-8"))
    for lesson in lessons:
        nb = json.loads((root / "notebooks" / f"{lesson.stem}.ipynb").read_text(encoding="utf-8"))
        lesson.title = title_of(nb)
        site_nb = prepare_lesson(nb, fallbacks.get(lesson.stem))
        write_if_changed(dest / f"{lesson.stem}.ipynb", json.dumps(site_nb, indent=1, ensure_ascii=False) + "\n")
    for guide in GUIDES:
        write_if_changed(dest / guide, (root / "docs" / guide).read_text(encoding="utf-8"))
    write_if_changed(dest / "index.md", index_page(lessons, home))
    return lessons


def write_if_changed(path: Path, text: str) -> None:
    """Sphinx rebuilds only what changed: keep a file's time stamp when its text is the same."""
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")
