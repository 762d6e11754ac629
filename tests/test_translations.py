"""The editions in other languages stay in step with the English source (hooktutor/course/translate.py).

Every catalogue holds exactly the messages its lesson has now (none missing, none the source no
longer has, none fuzzy); every translated entry keeps the English's code spans, placeholders and
bold markers; every edition in ``notebooks/<lang>/`` is what its source and catalogue build now,
and every complete catalogue has its edition. The editions' outputs are held to their stored ones
by strict nbval, as every lesson's are. A changed English sentence therefore turns this red until
its catalogue is translated again and ``python3 course.py translate`` is run.
"""

from __future__ import annotations

import importlib.util
import re
import sys

import nbformat
import pytest

from hooktutor.course import translate as tr

# The catalogues are split with translate-toolkit 3.20, which needs Python 3.11 (pyproject.toml's
# translate extra): on 3.10 the editions still run under nbval, their catalogues are not read here.
pytestmark = pytest.mark.skipif(
    sys.version_info < (3, 11) or importlib.util.find_spec("translate") is None,
    reason="the catalogue checks need translate-toolkit 3.20 (Python 3.11 or newer)")

LESSONS = tr.lessons()
CASES = [(lang, lesson) for lang in tr.LANGUAGES for lesson in LESSONS]
IDS = [f"{lang}-{lesson.stem}" for lang, lesson in CASES]


@pytest.mark.parametrize(("lang", "lesson"), CASES, ids=IDS)
def test_each_catalogue_holds_the_messages_its_lesson_has_now(lang, lesson):
    path = tr.catalogue_path(lesson, lang)
    assert path.exists(), f"{path.relative_to(tr.ROOT)} is missing: run python3 course.py translate"
    state = tr.staleness(lesson, lang)
    assert state.in_sync, (
        f"{path.relative_to(tr.ROOT)} is out of step with {lesson.name}: {len(state.missing)} messages missing "
        f"(first: {state.missing[:1]}), {len(state.obsolete)} no longer in the source (first: {state.obsolete[:1]}), "
        f"{len(state.fuzzy)} fuzzy. Run python3 course.py translate, then translate what it re-opened")
    problems = tr.catalogue_problems(lesson, lang)
    assert not problems, f"{path.relative_to(tr.ROOT)}: " + "; ".join(problems[:5])


@pytest.mark.parametrize(("lang", "lesson"), CASES, ids=IDS)
def test_each_edition_is_what_its_source_and_catalogue_build_now(lang, lesson):
    out = tr.edition_path(lesson, lang)
    complete = tr.staleness(lesson, lang).complete
    if not out.exists():
        assert not complete, f"{lesson.stem}'s {lang} catalogue is complete but {out.relative_to(tr.ROOT)} " \
                             "is missing: run python3 course.py translate"
        pytest.skip(f"{lesson.stem} is not translated into {lang} yet")
    assert complete, f"{out.relative_to(tr.ROOT)} exists, but its catalogue is not complete"
    built, stored = tr.build_edition(lesson, lang), nbformat.read(out, as_version=4)
    assert tr.same_cells(built, stored), (
        f"{out.relative_to(tr.ROOT)} differs from what {lesson.name} and its catalogue build now: "
        "run python3 course.py translate")
    assert stored.metadata["hooktutor"]["edition"] == built.metadata["hooktutor"]["edition"]
    # the code is the source's, token for token, but the comments (nbval_twice.is_edition relies on it)
    # (the set-up cell also switches the library to the edition's language: two lines, added)
    pairs = [(tr.without_language_switch(a.source, lang), b.source)
             for a, b in zip(stored.cells, nbformat.read(lesson, as_version=4).cells, strict=True)
             if a.cell_type == "code"]
    changed = [i for i, (a, b) in enumerate(pairs) if _code_only(a) != _code_only(b)]
    assert not changed, f"{out.relative_to(tr.ROOT)}: code cells {changed} differ from the source's beyond comments"


def _code_only(source: str) -> list:
    import io
    import tokenize

    try:
        return [(t.type, t.string) for t in tokenize.generate_tokens(io.StringIO(source).readline)
                if t.type not in (tokenize.COMMENT, tokenize.NL)]
    except (tokenize.TokenError, SyntaxError):
        return [source]


def test_a_changed_english_paragraph_reopens_its_entry_and_fails_the_check(tmp_path, monkeypatch):
    """One sentence of a lesson changed: its catalogue has a message missing and one obsolete; the
    edition can no longer be built; after the update only that entry is untranslated."""
    import polib

    lesson = LESSONS[0]
    nb = nbformat.read(lesson, as_version=4)
    notebooks, locale = tmp_path / "notebooks", tmp_path / "locale"
    notebooks.mkdir()
    monkeypatch.setattr(tr, "NOTEBOOKS", notebooks)
    monkeypatch.setattr(tr, "LOCALE", locale)
    copy = notebooks / lesson.name
    nbformat.write(nb, copy)
    po = tr.updated_catalogue(copy, "zh_CN")
    for entry in po:
        entry.msgstr = entry.msgid   # "translated" (as itself): only the bookkeeping is under test
    tr.catalogue_path(copy, "zh_CN").parent.mkdir(parents=True)
    po.save(str(tr.catalogue_path(copy, "zh_CN")))
    assert tr.staleness(copy, "zh_CN").complete
    tr.build_edition(copy, "zh_CN")

    cell = next(c for c in nb.cells if c.cell_type == "markdown" and "Welcome" in c.source)
    old = next(m for m in tr.markdown_messages(cell.source) if "Welcome" in m)
    cell.source = cell.source.replace("Welcome to", "Welcome, reader, to")
    nbformat.write(nb, copy)
    state = tr.staleness(copy, "zh_CN")
    assert not state.in_sync and state.obsolete == [old]
    assert len(state.missing) == 1 and "Welcome, reader, to" in state.missing[0]
    with pytest.raises(ValueError, match="not complete"):
        tr.build_edition(copy, "zh_CN")
    tr.updated_catalogue(copy, "zh_CN").save(str(tr.catalogue_path(copy, "zh_CN")))
    after = tr.staleness(copy, "zh_CN")
    assert after.in_sync and after.untranslated == state.missing
    fuzzy = polib.pofile(str(tr.catalogue_path(copy, "zh_CN")))
    fuzzy[0].flags.append("fuzzy")
    fuzzy.save()
    assert tr.staleness(copy, "zh_CN").fuzzy == [fuzzy[0].msgid]


def test_an_edition_written_without_executing_it_is_executed_by_the_next_run(tmp_path, monkeypatch):
    """`translate --no-execute` writes an edition with no outputs; the next `translate` must not call
    it up to date (its cells are the same) but execute it, and then leave it alone."""
    from hooktutor.course import regen

    lesson = LESSONS[0]
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    monkeypatch.setattr(tr, "NOTEBOOKS", notebooks)
    monkeypatch.setattr(tr, "LOCALE", tmp_path / "locale")
    copy = notebooks / lesson.name
    nbformat.write(nbformat.read(lesson, as_version=4), copy)
    monkeypatch.setattr(tr, "lessons", lambda: [copy])
    po = tr.updated_catalogue(copy, "zh_CN")
    for entry in po:
        entry.msgstr = entry.msgid   # "translated" (as itself): only the bookkeeping is under test
    tr.catalogue_path(copy, "zh_CN").parent.mkdir(parents=True)
    po.save(str(tr.catalogue_path(copy, "zh_CN")))
    runs = []

    def fake_execute(path, root=None):   # numbers the code cells, as a kernel would
        runs.append(path)
        nb = nbformat.read(path, as_version=4)
        for n, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
            cell.execution_count = n + 1
        nbformat.write(nb, path)

    monkeypatch.setattr(regen, "execute", fake_execute)
    from hooktutor.course import library_messages  # the library's catalogue is not under test here
    monkeypatch.setattr(library_messages, "save", lambda lang: [])
    monkeypatch.setattr(library_messages, "state", lambda lang: library_messages.State([], [], [], [], []))
    said = []
    assert tr.translate(["zh_CN"], execute=False, say=said.append) == 0 and runs == []
    assert not tr.executed(nbformat.read(tr.edition_path(copy, "zh_CN"), as_version=4))
    assert tr.translate(["zh_CN"], say=said.append) == 0 and runs == [tr.edition_path(copy, "zh_CN")]
    assert tr.translate(["zh_CN"], say=said.append) == 0 and len(runs) == 1
    said = [line for line in said if not line.startswith("zh_CN library")]
    assert "without executing" in said[1] and said[-1].endswith("edition up to date"), said


def test_comments_are_translated_and_the_code_is_left_as_it_is():
    source = ("x = 1  # one input\n# the model\ny = f'#{x}'  # noqa: E501\n"
              "### BEGIN SOLUTION\nz = 2\n### END SOLUTION\n")
    assert tr.comment_messages(source) == ["one input", "the model"]
    table = {"one input": "一个输入", "the model": "模型"}
    out = tr.translate_comments(source, table.get)
    assert out == ("x = 1  # 一个输入\n# 模型\ny = f'#{x}'  # noqa: E501\n"
                   "### BEGIN SOLUTION\nz = 2\n### END SOLUTION\n")
    assert tr.translate_comments("%%timeit\nx = 1  # t\n", table.get) == "%%timeit\nx = 1  # t\n"


def test_a_translation_that_loses_code_a_link_or_bold_is_refused():
    msgid = "A **hook** runs `fn(module, args)`; see {1}."
    assert tr.entry_problems(msgid, "**钩子**运行 `fn(module, args)`；见{1}。") == []
    assert "code span" in tr.entry_problems(msgid, "**钩子**运行 fn；见{1}。")[0]
    assert "placeholder" in tr.entry_problems(msgid, "**钩子**运行 `fn(module, args)`。")[0]
    assert "bold" in tr.entry_problems(msgid, "钩子运行 `fn(module, args)`；见{1}。")[0]
    assert tr.entry_problems("one line", "一行\n两行", comment=True) == ["a code comment must stay on one line"]
    assert tr.entry_problems(msgid, "") == ["not translated"]


def test_the_command_refuses_a_wrong_language_or_argument(capsys):
    assert tr.main(["--lang", "fr"]) == 2
    assert "the editions are zh_CN" in capsys.readouterr().out
    assert tr.main(["--frobnicate"]) == 2
    assert "unknown argument" in capsys.readouterr().out
    assert tr.main(["--check", "99_nothing"]) == 2
    assert "no lesson" in capsys.readouterr().out


def test_the_glossary_exists_for_each_language():
    for lang in tr.LANGUAGES:
        glossary = tr.LOCALE / lang / "glossary.md"
        assert glossary.exists(), glossary
        assert "钩子" in glossary.read_text(encoding="utf-8")


def test_the_chinese_readme_says_which_lessons_are_translated():
    text = (tr.ROOT / "README.zh-CN.md").read_text(encoding="utf-8")
    table = text.split("<!-- zh-lessons:start -->")[1].split("<!-- zh-lessons:end -->")[0]
    rows = dict(re.findall(r"^\| `(\w+)` \| (\S+?)(?:（.*）)? \|(?: .* \|)?$", table, re.M))
    assert list(rows) == [lesson.stem for lesson in LESSONS]
    for lesson in LESSONS:
        done = tr.edition_path(lesson, "zh_CN").exists()
        assert rows[lesson.stem] == ("已翻译" if done else "翻译中"), lesson.stem
    assert "README.zh-CN.md" in (tr.ROOT / "README.md").read_text(encoding="utf-8")


def test_lab_opens_an_edition_by_its_language_and_refuses_one_that_does_not_exist():
    from hooktutor.course import lab

    assert lab.lab_language(["--lang", "zh_CN", "--port=9"]) == ("zh_CN", ["--port=9"])
    assert lab.lab_language(["--lang=zh_CN"]) == ("zh_CN", [])
    assert lab.lab_language(["--lang", "en"]) == (None, [])
    with pytest.raises(ValueError, match="needs a language"):
        lab.lab_language(["--lang"])
    assert lab.editions(tr.NOTEBOOKS) == (["zh_CN"] if any((tr.NOTEBOOKS / "zh_CN").glob("*.ipynb")) else [])


def test_the_chinese_workbook_is_written_from_the_edition(tmp_path):
    from hooktutor.course.workbook import sync

    report = sync(tmp_path / "zh_CN", tr.NOTEBOOKS / "zh_CN")
    written = sorted(p.name for p in (tmp_path / "zh_CN").glob("*.ipynb"))
    assert written == sorted(p.name for p in (tr.NOTEBOOKS / "zh_CN").glob("*.ipynb")) and report.created
    first = nbformat.read(tmp_path / "zh_CN" / written[0], as_version=4)
    assert any("钩子" in c.source for c in first.cells if c.cell_type == "markdown")
    assert not any("### BEGIN SOLUTION" in c.source for c in first.cells)


@pytest.mark.parametrize(("lang", "lesson"), CASES, ids=IDS)
def test_each_edition_prints_what_its_source_prints(lang, lesson):
    """The code is the same, so an edition's stored outputs are its source's, compared as nbval
    compares them, except where the library now speaks the edition's language (a check report, a
    hint, a widget's line): there the output says the same in other words, the same kinds of output,
    the same verdicts (✔ / ✘) and the same numbers, and it is in the edition's language."""
    if str(tr.ROOT / "tests") not in sys.path:
        sys.path.insert(0, str(tr.ROOT / "tests"))
    from _notebook_outputs import comparable, sanitizers

    out = tr.edition_path(lesson, lang)
    if not out.exists():
        pytest.skip(f"{lesson.stem} is not translated into {lang} yet")
    subs = sanitizers()
    pairs = zip(nbformat.read(lesson, as_version=4).cells, nbformat.read(out, as_version=4).cells, strict=True)
    differ = []
    for i, (a, b) in enumerate(pairs):   # (a timing, nbval leaves alone, is not compared)
        if a.cell_type != "code" or "nbval-ignore-output" in a.metadata.get("tags", []):
            continue
        source, edition = comparable(a.outputs, subs), comparable(b.outputs, subs)
        if source == edition:
            continue
        if not _says_the_same(a.outputs, b.outputs, subs):
            differ.append(i)
    assert not differ, f"{out.relative_to(tr.ROOT)}: code cells {differ} print other than {lesson.name}'s"


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e-?\d+)?")
_CJK = re.compile(r"[\u4e00-\u9fff]")


def _plain(output: dict) -> str:
    return output.get("text") or output.get("data", {}).get("text/plain", "") or output.get("evalue", "")


def _says_the_same(source: list, edition: list, subs) -> bool:
    """Whether two cells' outputs differ only in the library's language: the same kinds of output,
    and each that differs is in the edition's language with the same verdicts and numbers."""
    if [(o["output_type"], sorted(o.get("data", {}))) for o in source] != \
            [(o["output_type"], sorted(o.get("data", {}))) for o in edition]:
        return False
    for a, b in zip(source, edition):
        ta, tb = _plain(a), _plain(b)
        for pattern, replacement in subs:
            ta, tb = pattern.sub(replacement, ta), pattern.sub(replacement, tb)
        if ta == tb:
            continue
        if not _CJK.search(tb) or [c for c in ta if c in "✔✘"] != [c for c in tb if c in "✔✘"]:
            return False
        if sorted(_NUMBER.findall(ta)) != sorted(_NUMBER.findall(tb)):
            return False
    return True


def test_a_folded_notes_label_is_a_message_and_is_translated():
    text = "Verdict.\n\n<details><summary>Across releases</summary>\n\nBefore 2.5 it ran.\n\n</details>"
    assert tr.markdown_messages(text) == ["Verdict.", "Before 2.5 it ran.", "Across releases"]
    table = {"Across releases": "跨版本", "Verdict.": "结论。", "Before 2.5 it ran.": "2.5之前它会运行。"}
    out = tr.translate_markdown(text, table.get)
    assert "<summary>跨版本</summary>" in out and "结论。" in out and "2.5之前它会运行。" in out


@pytest.mark.parametrize(("lang", "lesson"), CASES, ids=IDS)
def test_each_editions_code_lines_fit_a_laptop_width(lang, lesson):
    """A translated comment can make a code line longer than the English one: it must still fit the
    100 characters a laptop shows (tests/test_notebook_structure.py holds the source to the same)."""
    out = tr.edition_path(lesson, lang)
    if not out.exists():
        pytest.skip(f"{lesson.stem} is not translated into {lang} yet")
    wide = [(i, len(line)) for i, c in enumerate(nbformat.read(out, as_version=4).cells) if c.cell_type == "code"
            for line in c.source.splitlines() if len(line) > 100]
    assert not wide, f"{out.relative_to(tr.ROOT)}: code lines over 100 characters (cell, width): {wide}; " \
                     "shorten their comments' translations"
