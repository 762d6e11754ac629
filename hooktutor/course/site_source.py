"""The website's source folder: the lessons as stored (never re-executed), each prepared for
reading, plus a landing page and the guides (``python3 course.py site``, ``hooktutor.course.site``).

What a lesson's site copy changes, and nothing else (every stored output stays byte for byte):

* the set-up cell (tag ``colab-setup``) is removed from the page (MyST-NB's ``remove-cell``);
* each exercise's answer cell (tag ``solution``) is folded (``hide-input``: "Show code cell
  source"), and its hints, read from the exercise's own file, come folded before it;
* a widget's view (``application/vnd.jupyter.widget-view+json``, and the notebook's stored widget
  state) is dropped: a static page has no kernel to draw it. A hooktutor widget's cell is followed
  by pictures of its states instead (``hooktutor.course.site_widgets``);
* each solution's ``### BEGIN SOLUTION`` / ``### END SOLUTION`` lines are dropped, as
  ``ex.<name>.solution()`` drops them;
* a figure's alt text is the cell's ``metadata.hooktutor.alt`` (every figure has one: a test),
  given to MyST-NB as the image's ``alt``;
* below the title, buttons open the lesson in Colab or Binder (the learner's edition), download
  the learner's edition of the notebook (``_static/notebooks/``) and view its source;
* the claims' verdicts, the checks' reports and every other output are shown as stored.
"""

from __future__ import annotations

import copy
import html
import json
import re
from dataclasses import dataclass
from pathlib import Path

from .site_text import lab_command

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
    from ..i18n import tr
    from .site_text import hint_label, hints_summary

    title, hints = tr(title), [tr(hint) for hint in hints]   # the exercise's words, in the language spoken
    parts = [f"<details class=\"hooktutor-hints\"><summary>{html.escape(hints_summary(title, len(hints)))}"
             "</summary>\n"]
    for number, hint in enumerate(hints, 1):
        body = html.escape(hint)
        body = re.sub(r"`([^`]+)`", r"<code>\1</code>", body)
        parts.append(f"<details class=\"hooktutor-hint\"><summary>{html.escape(hint_label(number))}</summary>"
                     f"<p>{body}</p></details>\n")
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


BEGIN_SOLUTION, END_SOLUTION = "### BEGIN SOLUTION", "### END SOLUTION"
ALT_KEY = "alt"   # metadata.hooktutor.alt of a cell whose output is a figure


def without_markers(source: str) -> str:
    """A solution's source without its BEGIN/END SOLUTION lines (what ``.solution()`` shows)."""
    return "\n".join(line for line in source.splitlines() if line.strip() not in (BEGIN_SOLUTION, END_SOLUTION))


def figure_cells(nb: dict) -> list[int]:
    """Indices of the code cells with a stored picture (``image/png``) among their outputs."""
    return [i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"
            and any("image/png" in o.get("data", {}) for o in c.get("outputs", []))]


def switch_links(page: str, lang: str, others: list[str]) -> str:
    """The language switch of a page (``page``: its name, ``01_tensor_hooks``) of the edition in
    ``lang``: a link to the same page in each of ``others``. The English site is the root, each
    other edition a folder of it named for its language (``zh_CN/``)."""
    from .site_text import switch_label

    def url(other: str) -> str:
        up = "" if lang == "en" else "../"
        return f"{up}{page}.html" if other == "en" else f"{up}{other}/{page}.html"

    return " ".join(f'<a class="hooktutor-button hooktutor-language" hreflang="{other.replace("_", "-")}" '
                    f'href="{url(other)}">{html.escape(switch_label(other))}</a>' for other in others)


def launch_buttons(stem: str, home: str, lang: str = "en", others: list[str] = ()) -> str:
    """The row of buttons under a lesson's title: Colab and Binder open the learner's edition
    (of the edition in ``lang``), the download is the learner's edition of the notebook, the
    source is the lesson on GitHub; then the same page in each edition of ``others``."""
    from .links import BRANCH, binder_url, colab_url
    from .site_text import launch_labels, launch_note

    edition = None if lang == "en" else lang
    folder = "notebooks" if edition is None else f"notebooks/{edition}"
    labels = launch_labels()
    buttons = [("colab", colab_url(home, f"{stem}.ipynb", edition)),
               ("binder", binder_url(home, f"{stem}.ipynb", edition)),
               ("download", f"_static/notebooks/{stem}.ipynb"),
               ("source", f"{home}/blob/{BRANCH}/{folder}/{stem}.ipynb")]
    links = " ".join(f'<a class="hooktutor-button hooktutor-{kind}" href="{html.escape(url)}"'
                     + (f' download="{stem}.ipynb"' if kind == "download" else "") + f">{html.escape(labels[kind])}</a>"
                     for kind, url in buttons)
    switch = switch_links(stem, lang, list(others))
    return f'<div class="hooktutor-launch">{links}{" " + switch if switch else ""}</div>\n\n{launch_note()}'


def prepare_lesson(nb: dict, widget_cells: dict[int, str] | None = None, *, stem: str = "",
                   home: str = "", lang: str = "en", others: list[str] = ()) -> dict:
    """The site copy of a lesson notebook ``nb`` (a dict as stored; not modified).

    ``widget_cells`` maps the index of a widget's cell to the markdown of its static fallback,
    inserted after that cell; with ``stem`` and ``home`` the launch buttons follow the title (of
    the edition in ``lang``, with a link to the page in each of ``others``)."""
    from .site_text import solution_prompts

    nb = copy.deepcopy(nb)
    show, hide = solution_prompts()
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
                cell["source"] = without_markers(source_of(cell))
                cell["metadata"]["mystnb"] = {"code_prompt_show": show, "code_prompt_hide": hide}
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
            alt = cell.get("metadata", {}).get("hooktutor", {}).get(ALT_KEY)
            if alt:
                cell["metadata"].setdefault("mystnb", {})["image"] = {"alt": alt}
        out.append(cell)
        if stem and home and index == 0 and cell["cell_type"] == "markdown":
            out.append(_markdown(launch_buttons(stem, home, lang, others), "hooktutor-launch", "site-launch"))
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


CORE = ("00", "01", "02", "03", "04", "05", "06", "07")   # the core course; 08 on: the advanced track


def index_page(lessons: list[Lesson], home: str, lang: str = "en", others: list[str] = ()) -> str:
    """The landing page: what the course teaches and how, who it is for, where to start, the
    map of the lessons (levels and times, core course and advanced track), the guides. Its words
    are the catalogue's (``fmt``/``tr``: the language spoken now); ``lang`` is the edition it
    opens (its Colab and Binder links), ``others`` the editions the language switch links to.
    The guides are English, in every edition."""
    from ..i18n import fmt, tr
    from .links import binder_url, colab_url

    edition = None if lang == "en" else lang
    english = lang == "en"   # "what you learn" is the English README's; an edition shows the lesson's title

    def when(time: str) -> str:   # "30 min"
        return fmt("{minutes} min", minutes=time.split()[0]) if time.endswith(" min") else time

    def rows(group: list[Lesson]) -> str:
        return "\n".join(f"| [{lesson.title or lesson.stem}]({lesson.stem}.ipynb) | {lesson.level} | "
                          f"{when(lesson.time)}" + (f" | {lesson.learn} |" if english else " |") for lesson in group)

    core = [lesson for lesson in lessons if lesson.stem[:2] in CORE]
    advanced = [lesson for lesson in lessons if lesson.stem[:2] not in CORE]
    hours = {name: sum(int(m.split()[0]) for m in (x.time for x in group) if m.split()[0].isdigit()) / 60
             for name, group in (("core", core), ("advanced", advanced))}
    first = lessons[0].stem if lessons else "00_start_here"
    toc = "\n".join(lesson.stem for lesson in lessons)
    if english:
        header = fmt("| lesson | level | time | what you learn |")
    else:
        header = fmt("| lesson | level | time |")
    table = header + "\n" + "|---" * header.count("|", 1) + "|"
    switch = switch_links("index", lang, list(others))
    labels = [(f"{first}.html", tr("Start with lesson 00")),
              (colab_url(home, first + ".ipynb", edition), tr("Open lesson 00 in Colab")),
              (binder_url(home, lang=edition), tr("Open the course in Binder")), (home, tr("The repository"))]
    buttons = ('<div class="hooktutor-launch">'
               + " ".join(f'<a class="hooktutor-button" href="{html.escape(url)}">{html.escape(label)}</a>'
                          for url, label in labels)
               + (" " + switch if switch else "") + "</div>")
    lessons_caption = tr("Lessons")
    instructors = "instructors.md"
    guides_list = "\n".join([
        fmt("- [The instructor's guide]({url}): schedules, the student edition, nbgrader.",
            url=instructors),
        fmt("- [Writing a lesson]({url}): the rules every lesson follows.",
            url="authoring.md"),
        fmt("- [Torch versions]({url}): which torch release passes which lesson.",
            url="torch-versions.md")])
    guides_caption = tr("Guides")
    guides_toc = ("\n\n```{toctree}\n:hidden:\n:caption: " + guides_caption + "\n\n"
                  + "\n".join(Path(g).stem for g in GUIDES) + "\n```\n")
    return "\n\n".join([
        fmt("# hooktutor: PyTorch hooks, every claim checked"),
        fmt("A course on PyTorch hooks that you run rather than read: from a first `register_forward_hook` to\n"
            "hooks under `torch.compile`, on Hugging Face models and inside FSDP2 training. **Every claim a\n"
            "lesson makes is executed and asserted in the notebook**, so what these pages say is what torch\n"
            "does: each lesson is shown with the outputs stored in the repository, exactly those the test\n"
            "suite compares with a fresh run (nothing here was executed for the site)."),
        buttons,
        fmt("## What you will learn\n\n"
            "- What each kind of hook receives and what its return value does: tensor hooks, forward\n"
            "  pre-hooks and hooks, full backward hooks, and the legacy `register_backward_hook`'s wrong answers.\n"
            "- How to read and change what a layer computes without editing the model: feature extraction,\n"
            "  ablation, clamping, steering, activation patching, Grad-CAM.\n"
            "- The traps the popular posts fall into, each shown live: `inplace=True` and hooks, `detach()`\n"
            "  that is not a copy, a hook registered twice, a hook that `torch.compile` never runs.\n"
            "- Hooks in real training: optimizers, state dicts, DDP communication hooks, checkpointing,\n"
            "  autocast and `GradScaler`, FSDP2, per-example gradients, leaks."),
        fmt("## Who it is for\n\n"
            "Anyone who trains or inspects PyTorch models and wants to know exactly what a hook does.\n"
            "Studying alone, each exercise checks your answer and says what to change, with hints one at a\n"
            "time and a solution on request. Teaching, the [instructor's guide]({url}) has a\n"
            "90-minute workshop plan, a two-session course, a student edition and nbgrader grading.",
            url=instructors),
        fmt("## Where to start\n\n"
            "Open [lesson 00]({first}.ipynb) (30 minutes), then follow the core course in order; the advanced\n"
            "track comes after the capstone, and each lesson says what it needs. To run the lessons yourself\n"
            "(widgets live, exercises blank for you to write), use the buttons at the top of each lesson, or\n"
            "clone [the repository]({home}) and run `{command}`. Everything runs on a CPU, offline.",
            first=first, home=home, command=lab_command()),
        fmt("## The lessons"),
        fmt("**The core course** (00 to 07, about {hours} hours working alone, every exercise included):",
            hours=f"{hours['core']:.1f}"),
        f"{table}\n{rows(core)}",
        fmt("**The advanced track** (08 to 13, about {hours} hours):", hours=f"{hours['advanced']:.1f}"),
        f"{table}\n{rows(advanced)}",
        fmt("Level: ☆☆☆ a first look, ★★☆ working knowledge, ★★★ what a PyTorch engineer needs."),
        fmt("## For instructors and authors") + "\n\n" + guides_list,
        f"```{{toctree}}\n:hidden:\n:caption: {lessons_caption}\n\n{toc}\n```" + guides_toc.rstrip("\n") + "\n",
    ])


def lessons_folder(root: Path, lang: str) -> Path:
    """Where the lessons of the edition in ``lang`` are: ``notebooks/``, ``notebooks/zh_CN/``."""
    return root / "notebooks" if lang == "en" else root / "notebooks" / lang


def write_source(root: Path, dest: Path, fallbacks: dict[str, dict[int, str]] | None = None,
                 home: str = "https://github.com/hooktutor/hooktutor", lang: str = "en",
                 others: list[str] = ()) -> list[Lesson]:
    """Write the site's source folder ``dest`` from the checkout ``root``: every lesson of the
    README's table prepared by :func:`prepare_lesson`, the guides, and ``index.md``. With
    ``lang`` (``zh_CN``), the edition in that language: its lessons (``notebooks/zh_CN/``) and
    landing page; the guides (English) in each. ``others``: the editions the pages link to."""
    fallbacks = fallbacks or {}
    notebooks = lessons_folder(root, lang)
    dest.mkdir(parents=True, exist_ok=True)
    lessons = lesson_table((root / "README.md").read_text(encoding="utf-8"))
    from .workbook import edition

    downloads = dest / "_static" / "notebooks"
    downloads.mkdir(parents=True, exist_ok=True)
    for lesson in lessons:
        path = notebooks / f"{lesson.stem}.ipynb"
        nb = json.loads(path.read_text(encoding="utf-8"))
        lesson.title = title_of(nb)
        site_nb = prepare_lesson(nb, fallbacks.get(lesson.stem), stem=lesson.stem, home=home, lang=lang,
                                 others=others)
        write_if_changed(dest / f"{lesson.stem}.ipynb", json.dumps(site_nb, indent=1, ensure_ascii=False) + "\n")
        write_if_changed(downloads / path.name, edition(path).decode("utf-8"))   # the learner's edition
    for guide in GUIDES:
        write_if_changed(dest / guide, (root / "docs" / guide).read_text(encoding="utf-8"))
    write_if_changed(dest / "index.md", index_page(lessons, home, lang, others))
    return lessons


def write_if_changed(path: Path, text: str) -> None:
    """Sphinx rebuilds only what changed: keep a file's time stamp when its text is the same."""
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")
