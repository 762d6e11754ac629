"""The library's words in the learner's language: English unless the learner asks for another.

The Chinese lessons' set-up cell calls ``set_language("zh_CN")``; ``HOOKTUTOR_LANG=zh_CN`` in the
environment does the same for a whole session. From then on an exercise's title, task and hints,
its check reports and nudges, the widgets' labels and the doctor's report come from the catalogue
``hooktutor/locale/<lang>/LC_MESSAGES/hooktutor.po`` (a gettext catalogue, read with polib), and
whatever the catalogue lacks stays English. In English (the default) nothing is looked up, so the
English outputs are exactly what they were.

How a message is found, in the language asked for:

- a text written out in the source (``task="write calls_of(...)"``) is looked up as it is;
- a text the source builds from an f-string (``nudge=f"... {name!r} ..."``) is in the catalogue as
  a template, ``"... {name} ..."``, flagged ``python-brace-format``: the finished English text is
  matched against the template, and the parts that filled its placeholders go into the
  translation's placeholders;
- the library's own frames (``"✔ {title}: correct, all {n} checks pass."``) are formatted through
  :func:`fmt`, which translates the template before it fills it.

``python3 course.py translate`` collects the messages (``hooktutor.course.library_messages``) and
keeps the catalogue in step with the source; ``tests/test_translations.py`` fails while a message
is missing, obsolete, fuzzy or untranslated.

Taught in: ``notebooks/zh_CN/`` (every Chinese lesson's set-up cell calls :func:`set_language`).
"""

from __future__ import annotations

import os
import re
import string
from functools import cache
from pathlib import Path
from typing import Any

LANG_ENV = "HOOKTUTOR_LANG"
LOCALE = Path(__file__).resolve().parent / "locale"
DOMAIN = "hooktutor"
ENGLISH = ("en", "en_US", "en_GB", "C", "")
TEMPLATE_FLAG = "python-brace-format"

_chosen: str | None = None   # set_language's choice; None: the environment's


def languages() -> list[str]:
    """The languages the library can speak besides English (those with a catalogue)."""
    return sorted(p.parent.parent.name for p in LOCALE.glob(f"*/LC_MESSAGES/{DOMAIN}.po"))


def catalogue_path(lang: str) -> Path:
    """Where the library's catalogue for ``lang`` lives (it travels inside the package)."""
    return LOCALE / lang / "LC_MESSAGES" / f"{DOMAIN}.po"


def set_language(lang: str | None) -> None:
    """Speak ``lang`` from now on (``"zh_CN"``); ``"en"`` or ``None`` goes back to English.

    Taught in: ``notebooks/zh_CN/`` (the set-up cell of each Chinese lesson)."""
    global _chosen
    if lang is not None and not isinstance(lang, str):
        raise TypeError(f"set_language takes a language code such as 'zh_CN' or 'en', not {type(lang).__name__}")
    if lang is not None and lang not in ENGLISH and lang not in languages():
        raise ValueError(f"hooktutor has no catalogue for {lang!r}; it speaks "
                         f"{', '.join(['en', *languages()])} (set_language('en') for English)")
    _chosen = "en" if lang is None else lang


def language() -> str:
    """The language the library speaks now: set_language's choice, else ``HOOKTUTOR_LANG``,
    else English (``"en"``). An unknown language in the environment reads as English."""
    lang = _chosen if _chosen is not None else os.environ.get(LANG_ENV, "en")
    return lang if lang in languages() else "en"


class _Catalogue:
    """One language's messages: exact ones in a dict, templates as compiled patterns."""

    def __init__(self, path: Path) -> None:
        import polib

        self.exact: dict[str, str] = {}
        self.templates: list[tuple[re.Pattern, str, str]] = []
        for entry in polib.pofile(str(path), wrapwidth=0):
            if entry.obsolete or not entry.msgstr or "fuzzy" in entry.flags:
                continue
            if TEMPLATE_FLAG in entry.flags:
                self.exact.setdefault(entry.msgid, entry.msgstr)  # a template used by fmt()
                pattern = template_pattern(entry.msgid)
                if pattern is not None:
                    self.templates.append((pattern, entry.msgid, entry.msgstr))
            else:
                self.exact[entry.msgid] = entry.msgstr
        # the most specific template first: the one with the most literal text
        self.templates.sort(key=lambda t: -len(literal_text(t[1])))


def literal_text(template: str) -> str:
    """A template's written-out text, its placeholders left out (a malformed one: as it is)."""
    try:
        return "".join(lit for lit, *_ in string.Formatter().parse(template))
    except ValueError:
        return template


def template_pattern(template: str) -> re.Pattern | None:
    """A pattern that matches the English texts ``template`` formats to, a named group per
    placeholder; None for a template with too little literal text to be recognised (``"{n}"``)."""
    parts, seen = [], set()
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError:
        return None
    if len(re.findall(r"[A-Za-z]{2,}", "".join(lit for lit, *_ in parsed))) < 2:
        return None
    for literal, field, _spec, _conv in parsed:
        parts.append(re.escape(literal))
        if field is None:
            continue
        if not field.isidentifier():
            return None
        parts.append(f"(?P={field})" if field in seen else f"(?P<{field}>.*?)")
        seen.add(field)
    return re.compile("".join(parts), re.S)


@cache
def _catalogue(lang: str) -> _Catalogue | None:
    path = catalogue_path(lang)
    return _Catalogue(path) if path.exists() else None


def _lookup(text: str, cat: _Catalogue, depth: int, sep: str | None = None) -> str | None:
    """``text`` translated (an exact entry, else a template it fills), or None. With ``sep``, a
    template's placeholder never takes a value holding ``sep``: a part of a status line does not
    swallow the parts after it."""
    found = cat.exact.get(text)
    if found is None and text[:1].isupper():   # a message the code capitalised to start a sentence
        found = cat.exact.get(text[:1].lower() + text[1:])
    if found is not None:
        return found
    if depth <= 0:
        return None
    for pattern, _msgid, msgstr in cat.templates:
        match = pattern.fullmatch(text)
        if match is None or (sep and any(sep in v for v in match.groupdict().values())):
            continue
        values = {k: _lookup(v, cat, depth - 1) or v for k, v in match.groupdict().items()}
        try:
            return msgstr.format(**values)
        except (KeyError, IndexError, ValueError):
            return None
    return None


def tr(text: Any) -> Any:
    """``text`` in the learner's language, where the catalogue has it; anything else (English,
    a text the catalogue lacks, a value that is not a string) as it is."""
    if not isinstance(text, str) or not text:
        return text
    lang = language()
    if lang == "en":
        return text
    cat = _catalogue(lang)
    if cat is None:
        return text
    return _lookup(text, cat, depth=2) or text


def tr_line(text: str, sep: str = " · ") -> str:
    """A status line of parts joined by ``sep`` (a widget's): the whole line where the catalogue
    has it, else each part on its own."""
    if language() == "en" or sep not in text:
        return tr(text)
    cat = _catalogue(language())
    whole = _lookup(text, cat, depth=2, sep=sep) if cat is not None else None
    return whole if whole is not None else sep.join(tr(part) for part in text.split(sep))


def fmt(template: str, **fields: Any) -> str:
    """``template.format(**fields)``, the template first translated (a library frame such as
    ``"✔ {title}: correct, all {n} checks pass."``)."""
    lang = language()
    cat = _catalogue(lang) if lang != "en" else None
    chosen = cat.exact.get(template, template) if cat is not None else template
    try:
        return chosen.format(**fields)
    except (KeyError, IndexError, ValueError):   # a translation that lost a placeholder: the English
        return template.format(**fields)


_WIDE_CHARS = "\u1100-\u115f\u2e80-\ua4cf\uac00-\ud7a3\uf900-\ufaff\ufe30-\ufe4f\uff00-\uff60\uffe0-\uffe6"
_WIDE = re.compile(f"[{_WIDE_CHARS}]")
# a run of spaces, one wide character, or a run of anything else (a Latin word, a piece of code)
_TOKEN = re.compile(f"\\s+|[{_WIDE_CHARS}]|[^\\s{_WIDE_CHARS}]+")
_NO_LINE_START = set("，。：；？！）」』、》")


def display_width(text: str) -> int:
    """Columns ``text`` takes in a terminal: a Chinese character or full-width mark takes two."""
    return len(text) + len(_WIDE.findall(text))


def wrap(text: str, width: int, subsequent_indent: str = "") -> str:
    """``text`` on lines of at most ``width`` columns: English as :func:`textwrap.fill` wraps it
    (between words, never inside one); where it has Chinese, also between Chinese characters, never
    inside a Latin word or a piece of code, and never before a closing mark such as ``，`` or ``）``."""
    import textwrap

    if not _WIDE.search(text):
        return textwrap.fill(text, width=width, subsequent_indent=subsequent_indent,
                             break_long_words=False, break_on_hyphens=False)
    lines, line = [], ""
    for token in _TOKEN.findall(text):
        if token.isspace():
            token = " "
            if not line.strip():
                continue
        room = width - display_width(line)
        if display_width(token.rstrip()) > room and line.strip() and token[0] not in _NO_LINE_START \
                and line[-1] not in "（「『《":
            lines.append(line.rstrip())
            line = subsequent_indent
            if token == " ":
                continue
        line += token
    lines.append(line.rstrip())
    return "\n".join(lines)


def N_(text: str) -> str:  # noqa: N802 (gettext's name for a marker)
    """Marks ``text`` as a message for the catalogue without translating it here (it is
    translated where it is shown, with :func:`tr`)."""
    return text
