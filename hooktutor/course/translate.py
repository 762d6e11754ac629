"""Editions of the course in other languages, from one source: the English notebooks.

``python3 course.py translate`` (``python -m hooktutor translate``) does three things for each
language of :data:`LANGUAGES`:

1. **Catalogues, beside the source.** One gettext catalogue per lesson,
   ``locale/<lang>/LC_MESSAGES/lessons/NN_name.po``: an entry for each paragraph of the lesson's
   Markdown cells (a heading, a paragraph, a list item, a table cell, a quote; split by
   translate-toolkit's Markdown store, which parses with mistletoe) and for each comment of its
   code cells. It is brought up to date with the source (polib reads and writes it): an entry the
   source no longer has is dropped, a new one is added untranslated, a translation is kept as long
   as its English text is unchanged, so a changed sentence re-opens one entry, not a page.
2. **The edition**, ``notebooks/<lang>/NN_name.ipynb``, for each lesson whose catalogue is
   complete (no entry untranslated or fuzzy): its Markdown cells from the catalogue, its code cells
   the same code with their comments translated.
3. **Its outputs**: the edition is executed as ``regen`` executes a lesson, so its stored outputs
   are its own, and strict nbval runs it in the test command like every lesson.

``tests/test_translations.py`` fails when a catalogue lacks a message the source has, keeps one
the source no longer has, or holds a fuzzy entry, and when an edition differs from what its
source and catalogue build now: a changed English sentence cannot ship with stale Chinese.
Terms follow ``locale/<lang>/glossary.md``.

Taught nowhere: how the course is made, for its authors and translators (docs/translating.md).
"""

from __future__ import annotations

import copy
import hashlib
import io
import re
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
LOCALE = ROOT / "locale"
LANGUAGES = {"zh_CN": "简体中文"}
# what an edition's set-up cell adds, so that the library speaks the edition's language: its
# comment, in that language (the code is the same in every edition)
SPEAKS = {"zh_CN": "从这里起，练习的检查报告、提示和小部件都用中文"}
_SETUP_MARK = "show_errors_short()"

# comments that are markers, not prose: solution markers, directives to tools, cell magics
_NOT_PROSE = re.compile(r"^#+\s*(BEGIN|END) (SOLUTION|HIDDEN TESTS)|^#\s*(noqa|type:|fmt:|pragma|ruff:|%%)|^#!")


def catalogue_path(lesson: Path, lang: str) -> Path:
    """Where the catalogue of ``lesson`` (a source notebook) for ``lang`` lives."""
    return LOCALE / lang / "LC_MESSAGES" / "lessons" / f"{lesson.stem}.po"


def edition_path(lesson: Path, lang: str) -> Path:
    """Where the ``lang`` edition of ``lesson`` is written."""
    return NOTEBOOKS / lang / lesson.name


def _shown(path: Path) -> str:
    """``path`` as a learner reads it: relative to the checkout where it lies inside it."""
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)


def lessons() -> list[Path]:
    """The source lessons, in order."""
    return sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


# -- splitting into messages -------------------------------------------------------------------

def _markdown_store(text: str, lookup=None):
    from translate.storage.markdown import MarkdownFile

    if lookup is None:
        return MarkdownFile(inputfile=io.BytesIO(text.encode()), extract_code_blocks=False)
    return MarkdownFile(inputfile=io.BytesIO(text.encode()), extract_code_blocks=False,
                        callback=lambda s: lookup(s) or s, lookup_callback=lookup)


# the label of a folded note (<details><summary>Across releases</summary>): HTML, which the Markdown
# store leaves as it is
_SUMMARY = re.compile(r"(<summary>)(.*?)(</summary>)", re.S)


def markdown_messages(text: str) -> list[str]:
    """The messages of one Markdown cell, paragraph by paragraph (code blocks are not prose), and
    the label of each folded note."""
    found = [unit.source for unit in _markdown_store(text).units if unit.source.strip()]
    return found + [m.group(2).strip() for m in _SUMMARY.finditer(text) if m.group(2).strip()]


def translate_markdown(text: str, lookup) -> str:
    """``text`` with each paragraph (and folded note's label) replaced by its ``lookup``
    (None: left in English)."""
    out = _markdown_store(text, lookup).filesrc.rstrip("\n")
    return _SUMMARY.sub(lambda m: m.group(1) + (lookup(m.group(2).strip()) or m.group(2)) + m.group(3), out)


def _comment_tokens(source: str) -> list[tokenize.TokenInfo] | None:
    """The comment tokens of a code cell, or None where it is not plain Python (a cell magic)."""
    try:
        return [tok for tok in tokenize.generate_tokens(io.StringIO(source).readline)
                if tok.type == tokenize.COMMENT and not _NOT_PROSE.match(tok.string)]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None


def _comment_text(token: str) -> str:
    return token.lstrip("#").strip()


def comment_messages(source: str) -> list[str]:
    """The messages of one code cell: the text of each comment, without its ``#``."""
    return [text for tok in _comment_tokens(source) or [] if (text := _comment_text(tok.string))]


def translate_comments(source: str, lookup) -> str:
    """``source`` with each comment's text replaced by ``lookup(text)`` (None: left as it is).
    The code itself is unchanged, character for character."""
    tokens = _comment_tokens(source)
    if not tokens:
        return source
    lines = source.splitlines(keepends=True)
    for tok in reversed(tokens):   # from the end: earlier positions stay valid
        text = _comment_text(tok.string)
        new = lookup(text) if text else None
        if not new:
            continue
        row, col = tok.start
        line = lines[row - 1]
        prefix = tok.string[:len(tok.string) - len(tok.string.lstrip("#"))]
        lines[row - 1] = line[:col] + f"{prefix} {new}" + line[tok.end[1]:]
    return "".join(lines)


@dataclass
class Messages:
    """A lesson's messages in order of first appearance, each with the cells it appears in."""

    where: dict[str, list[str]] = field(default_factory=dict)

    def add(self, msgid: str, place: str) -> None:
        self.where.setdefault(msgid, [])
        if place not in self.where[msgid]:
            self.where[msgid].append(place)


def lesson_messages(nb) -> Messages:
    """Every message of a source notebook (``nb``: read by nbformat)."""
    found = Messages()
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            for msgid in markdown_messages(cell.source):
                found.add(msgid, f"cell {index}")
        elif cell.cell_type == "code":
            for msgid in comment_messages(cell.source):
                found.add(msgid, f"cell {index} (comment)")
    return found


# -- catalogues -----------------------------------------------------------------------------------

def _header(lesson: Path, lang: str) -> dict[str, str]:
    return {"Project-Id-Version": f"hooktutor {lesson.stem}", "Language": lang,
            "MIME-Version": "1.0", "Content-Type": "text/plain; charset=UTF-8",
            "Content-Transfer-Encoding": "8bit"}


def read_catalogue(path: Path):
    import polib

    return polib.pofile(str(path), wrapwidth=0) if path.exists() else None


def updated_catalogue(lesson: Path, lang: str):
    """The catalogue of ``lesson`` brought up to date with its source (not saved): one entry per
    message in the source's order; translations (and fuzzy flags) kept where the English text is
    the same; entries the source no longer has dropped."""
    import nbformat
    import polib

    messages = lesson_messages(nbformat.read(lesson, as_version=4))
    old = read_catalogue(catalogue_path(lesson, lang))
    kept = {e.msgid: e for e in old if not e.obsolete} if old is not None else {}
    po = polib.POFile(wrapwidth=0)
    po.metadata = _header(lesson, lang)
    for msgid, places in messages.where.items():
        before = kept.get(msgid)
        entry = polib.POEntry(msgid=msgid, msgstr=before.msgstr if before else "",
                              occurrences=[(lesson.name, place.replace(" (comment)", "-comment").replace(" ", "-"))
                                           for place in places],
                              flags=list(before.flags) if before else [],
                              tcomment=before.tcomment if before else "")
        po.append(entry)
    return po


@dataclass
class Staleness:
    """How a catalogue differs from its source."""

    missing: list[str]      # in the source, not in the catalogue
    obsolete: list[str]     # in the catalogue (or kept as #~), not in the source
    fuzzy: list[str]
    untranslated: list[str]

    @property
    def in_sync(self) -> bool:
        return not (self.missing or self.obsolete or self.fuzzy)

    @property
    def complete(self) -> bool:
        return self.in_sync and not self.untranslated


def staleness(lesson: Path, lang: str) -> Staleness:
    """``lesson``'s catalogue for ``lang`` against the source as it is now."""
    import nbformat

    want = list(lesson_messages(nbformat.read(lesson, as_version=4)).where)
    po = read_catalogue(catalogue_path(lesson, lang))
    entries = list(po) if po is not None else []
    have = {e.msgid for e in entries if not e.obsolete}
    return Staleness(missing=[m for m in want if m not in have],
                     obsolete=[e.msgid for e in entries if e.obsolete or e.msgid not in set(want)],
                     fuzzy=[e.msgid for e in entries if "fuzzy" in e.flags and not e.obsolete],
                     untranslated=[e.msgid for e in entries
                                   if not e.obsolete and "fuzzy" not in e.flags and not e.msgstr])


_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
_PLACEHOLDER = re.compile(r"\{\d+\}")
_EMPHASIS = re.compile(r"\*\*|__")


def _rendered(text: str) -> dict[str, int]:
    """How many bold, italic and code elements Markdown renders ``text`` with (markdown-it)."""
    from markdown_it import MarkdownIt

    counts = {"bold": 0, "italic": 0, "code": 0}
    for token in MarkdownIt("commonmark").parseInline(text):
        for child in token.children or []:
            kind = {"strong_open": "bold", "em_open": "italic", "code_inline": "code"}.get(child.type)
            if kind:
                counts[kind] += 1
    return counts


def entry_problems(msgid: str, msgstr: str, *, comment: bool = False) -> list[str]:
    """What is wrong with one translation, as a translator should hear it: the code spans
    (`` `...` ``), placeholders (``{1}``, a link or an inline element) and bold markers of the
    English must all be there, unchanged; a comment stays one line."""
    problems = []
    if not msgstr.strip():
        return ["not translated"]
    for name, pattern in (("code span", _CODE_SPAN), ("placeholder", _PLACEHOLDER)):
        want = sorted(m.group(0) for m in pattern.finditer(msgid))
        got = sorted(m.group(0) for m in pattern.finditer(msgstr))
        if want != got:
            lost = [w for w in want if w not in got]
            added = [g for g in got if g not in want]
            problems.append(f"{name}s differ from the English: missing {lost}, not in the English {added}")
    if len(_EMPHASIS.findall(msgid)) != len(_EMPHASIS.findall(msgstr)):
        problems.append("bold markers (**) differ in number from the English")
    elif not comment and (want := _rendered(msgid)) != (got := _rendered(msgstr)):
        problems.append(f"renders with {got} where the English has {want}: a `**` or `*` that closes "
                        "after punctuation (。：）or a code span) and right before a Chinese character is shown "
                        "as asterisks; move the punctuation outside the markers")
    if comment and "\n" in msgstr:
        problems.append("a code comment must stay on one line")
    return problems


def catalogue_problems(lesson: Path, lang: str) -> list[str]:
    """Every entry of ``lesson``'s catalogue that :func:`entry_problems` finds fault with
    (untranslated entries not counted: :func:`staleness` lists those)."""
    po = read_catalogue(catalogue_path(lesson, lang))
    found = []
    for e in po or []:
        if e.obsolete or not e.msgstr:
            continue
        # polib keeps "file:cell-3-comment" whole (its line part is not a number)
        comment = bool(e.occurrences) and all(f"{f}:{n}".rstrip(":").endswith("-comment") for f, n in e.occurrences)
        found += [f"{e.msgid[:60]!r}: {p}" for p in entry_problems(e.msgid, e.msgstr, comment=comment)]
    return found


# -- the edition -----------------------------------------------------------------------------------

def source_digest(nb) -> str:
    """A digest of what an edition is built from in its source: every cell's type and text."""
    h = hashlib.sha256()
    for cell in nb.cells:
        h.update(cell.cell_type.encode() + b"\0" + cell.source.encode() + b"\0")
    return h.hexdigest()[:16]


def build_edition(lesson: Path, lang: str):
    """The ``lang`` edition of ``lesson``, before execution: its cells translated from the
    catalogue, its outputs cleared (``execute`` stores the edition's own). Raises ``ValueError``
    when the catalogue is not complete."""
    import nbformat

    state = staleness(lesson, lang)
    problems = catalogue_problems(lesson, lang)
    if problems:
        raise ValueError(f"{_shown(catalogue_path(lesson, lang))}: {len(problems)} entries "
                         f"to fix, first: {problems[0]}")
    if not state.complete:
        raise ValueError(f"{_shown(catalogue_path(lesson, lang))} is not complete: "
                         f"{len(state.missing)} missing, {len(state.untranslated)} untranslated, "
                         f"{len(state.fuzzy)} fuzzy, {len(state.obsolete)} obsolete")
    source = nbformat.read(lesson, as_version=4)
    table = {e.msgid: e.msgstr for e in read_catalogue(catalogue_path(lesson, lang)) if not e.obsolete}
    edition = copy.deepcopy(source)

    def lookup(text: str) -> str | None:
        return table.get(text) or None

    for cell in edition.cells:
        if cell.cell_type == "markdown":
            cell.source = translate_markdown(cell.source, lookup)
        elif cell.cell_type == "code":
            cell.source = with_language_switch(translate_comments(cell.source, lookup), lang)
            cell.outputs, cell.execution_count = [], None
    edition.metadata.setdefault("hooktutor", {})["edition"] = {
        "language": lang, "source": f"notebooks/{lesson.name}", "source_digest": source_digest(source)}
    return edition


def language_switch(lang: str) -> str:
    """The lines an edition's set-up cell ends with: the library speaks ``lang`` from then on."""
    return f'\n\nfrom hooktutor.i18n import set_language\n\nset_language("{lang}")   # {SPEAKS[lang]}'


def with_language_switch(source: str, lang: str) -> str:
    """A set-up cell's source (the one that calls ``show_errors_short()``) with :func:`language_switch`
    at its end; any other cell as it is."""
    return source + language_switch(lang) if _SETUP_MARK in source else source


def without_language_switch(source: str, lang: str) -> str:
    """The inverse of :func:`with_language_switch`: what the source's cell was."""
    tail = language_switch(lang)
    return source[: -len(tail)] if source.endswith(tail) else source


def same_cells(a, b) -> bool:
    """Whether two notebooks have the same cells (type and text; outputs not compared)."""
    return [(c.cell_type, c.source) for c in a.cells] == [(c.cell_type, c.source) for c in b.cells]


def executed(nb) -> bool:
    """Whether every code cell of ``nb`` has run (an edition written by ``--no-execute`` has not)."""
    return all(c.execution_count is not None for c in nb.cells if c.cell_type == "code")


def translate(langs: list[str] | None = None, *, execute: bool = True, say=print) -> int:
    """``course.py translate``: update every catalogue, write and execute every edition whose
    catalogue is complete and whose cells changed. Returns 0, or 1 when an edition could not be
    executed."""
    import nbformat

    from . import library_messages
    from .regen import execute as run_notebook

    failed = 0
    for lang in langs or list(LANGUAGES):
        library = library_messages.save(lang)   # the library's own words: exercise feedback, widgets
        open_ = library_messages.state(lang)
        say(f"{lang} library: {len(library) - len(open_.untranslated)} of {len(library)} messages translated"
            + (f", {len(open_.problems)} to fix" if open_.problems else "")
            + f" ({_shown(library_messages.catalogue_path(lang))})")
        for lesson in lessons():
            po = updated_catalogue(lesson, lang)
            path = catalogue_path(lesson, lang)
            path.parent.mkdir(parents=True, exist_ok=True)
            po.save(str(path))
            state = staleness(lesson, lang)
            done = len(po) - len(state.untranslated)
            if not state.complete:
                say(f"{lang} {lesson.stem}: {done} of {len(po)} messages translated; edition not built")
                continue
            edition = build_edition(lesson, lang)
            out = edition_path(lesson, lang)
            current = nbformat.read(out, as_version=4) if out.exists() else None
            if current is not None and same_cells(current, edition) and current.metadata.get(
                    "hooktutor", {}).get("edition") == edition.metadata["hooktutor"]["edition"]:
                if executed(current) or not execute:
                    say(f"{lang} {lesson.stem}: complete, edition up to date"
                        + ("" if executed(current) else " (not executed yet)"))
                    continue
                say(f"{lang} {lesson.stem}: complete; the edition was written without executing it")
            else:
                out.parent.mkdir(parents=True, exist_ok=True)
                nbformat.write(edition, out)
                say(f"{lang} {lesson.stem}: complete; wrote {_shown(out)}")
            if execute:
                say(f"{lang} {lesson.stem}: executing {_shown(out)}")
                try:
                    run_notebook(out, root=ROOT)
                except Exception as exc:   # a cell failed: say which, go on with the next lesson
                    say(f"{lang} {lesson.stem}: FAILED to execute: {str(exc).strip().splitlines()[-1][:300]}")
                    failed = 1
    return failed


def main(argv: list[str]) -> int:
    """``python -m hooktutor translate [--no-execute] [--check LESSON...|library] [--lang LANG]``."""
    langs, execute, check = None, True, []
    rest = list(argv)
    while rest:
        arg = rest.pop(0)
        if arg == "--lang" and rest:
            langs = [rest.pop(0)]
        elif arg == "--no-execute":
            execute = False
        elif arg == "--check":
            check, rest = rest, []
        else:
            print(f"translate: unknown argument {arg!r}; use --lang LANG, --no-execute, --check LESSON...")
            return 2
    import importlib.util

    if not all(importlib.util.find_spec(name) for name in ("polib", "mistletoe", "translate")):
        print("translate needs translate-toolkit 3.20 or newer (Python 3.11 or newer) and polib: "
              "run it with the course's environment (python3 course.py translate)")
        return 2
    if langs and any(lang not in LANGUAGES for lang in langs):
        print(f"translate: no edition {langs[0]!r}; the editions are {', '.join(LANGUAGES)}")
        return 2
    if check:   # a translator's check of one or more catalogues, nothing written
        bad = 0
        for lang in langs or list(LANGUAGES):
            for name in check:
                if name == "library":
                    from . import library_messages

                    lib = library_messages.state(lang)
                    print(f"{lang} library: {len(lib.untranslated)} untranslated, {len(lib.fuzzy)} fuzzy, "
                          f"{len(lib.missing)} missing, {len(lib.obsolete)} obsolete, {len(lib.problems)} to fix")
                    for line in lib.problems:
                        print("  " + line)
                    bad |= not lib.complete
                    continue
                lesson = next((p for p in lessons() if p.stem.startswith(name)), None)
                if lesson is None:
                    print(f"translate: no lesson {name!r}; use a name such as 00_start_here or 00")
                    return 2
                state, problems = staleness(lesson, lang), catalogue_problems(lesson, lang)
                print(f"{lang} {lesson.stem}: {len(state.untranslated)} untranslated, {len(state.fuzzy)} fuzzy, "
                      f"{len(state.missing)} missing, {len(state.obsolete)} obsolete, {len(problems)} to fix")
                for line in problems:
                    print("  " + line)
                bad |= bool(problems or not state.complete)
        return 1 if bad else 0
    return translate(langs, execute=execute)
