"""The library speaks the learner's language when asked (hooktutor/i18n.py), English otherwise.

The Chinese lessons' set-up cell calls ``set_language("zh_CN")``: from then on a check report, a
hint, a task, a widget's label and the doctor's report come from the library's catalogue,
``hooktutor/locale/zh_CN/LC_MESSAGES/hooktutor.po``. Here: English stays exactly English; the
catalogue holds every message the library has now, translated, with its placeholders and code;
a template catalogue entry is found from the finished English text; and every exercise's task and
hints, and the report of its typical wrong answers, read in Chinese.
"""

from __future__ import annotations

import re
import textwrap

import polib
import pytest
import torch

from hooktutor import i18n
from hooktutor.course import library_messages as lm
from hooktutor.exercises.core import Exercise

CJK = re.compile(r"[\u4e00-\u9fff]")


@pytest.fixture(autouse=True)
def english_after(monkeypatch):
    monkeypatch.delenv(i18n.LANG_ENV, raising=False)
    monkeypatch.setattr(i18n, "_chosen", None)
    yield
    i18n._catalogue.cache_clear()


def _exercises() -> list[Exercise]:
    import importlib
    import pkgutil

    import hooktutor.exercises as package

    for mod in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"hooktutor.exercises.{mod.name}")
    return [ex for _, ex in sorted(Exercise.registry.items())]


def test_english_is_the_default_and_nothing_is_looked_up():
    assert i18n.language() == "en"
    text = "a sentence the catalogue has: " + "x"
    assert i18n.tr(text) is text
    assert i18n.fmt("✔ {title}: correct, all {n} checks pass.", title="T", n=3) == "✔ T: correct, all 3 checks pass."


def test_the_library_has_a_chinese_catalogue_and_set_language_switches_to_it_and_back(monkeypatch):
    assert "zh_CN" in i18n.languages()
    i18n.set_language("zh_CN")
    assert i18n.language() == "zh_CN"
    assert CJK.search(i18n.tr("gives a wrong result"))
    i18n.set_language("en")
    assert i18n.tr("gives a wrong result") == "gives a wrong result"
    monkeypatch.setenv(i18n.LANG_ENV, "zh_CN")
    i18n.set_language(None)   # back to English, whatever the environment says
    assert i18n.language() == "en"
    monkeypatch.setattr(i18n, "_chosen", None)
    assert i18n.language() == "zh_CN", "HOOKTUTOR_LANG=zh_CN asks for Chinese for the whole session"
    monkeypatch.setenv(i18n.LANG_ENV, "xx_YY")
    assert i18n.language() == "en", "an unknown language in the environment reads as English"


def test_a_wrong_language_says_which_there_are():
    with pytest.raises(ValueError, match=r"no catalogue for 'zh'.*en, zh_CN"):
        i18n.set_language("zh")
    with pytest.raises(TypeError, match="language code such as 'zh_CN'"):
        i18n.set_language(1)


def _catalogue(tmp_path, monkeypatch, entries):
    po = polib.POFile(wrapwidth=0)
    po.metadata = {"Content-Type": "text/plain; charset=UTF-8"}
    for msgid, msgstr, template in entries:
        po.append(polib.POEntry(msgid=msgid, msgstr=msgstr, flags=[i18n.TEMPLATE_FLAG] if template else []))
    (tmp_path / "xx" / "LC_MESSAGES").mkdir(parents=True)
    po.save(str(tmp_path / "xx" / "LC_MESSAGES" / "hooktutor.po"))
    monkeypatch.setattr(i18n, "LOCALE", tmp_path)
    i18n._catalogue.cache_clear()
    i18n.set_language("xx")


def test_a_template_is_found_from_the_finished_text_and_its_parts_are_translated_too(tmp_path, monkeypatch):
    _catalogue(tmp_path, monkeypatch, [
        ("the hook on {name} fired {n} times", "{name} 上的钩子触发了 {n} 次", True),
        ("{what} is None: nothing was stored. {nudge}", "{what} 是 None：什么也没存下。{nudge}", True),
        ("return the dict", "返回这个字典", False),
        ("{a} and {a} again", "{a} 再 {a}", True),
        ("{n}", "never used: a template without words", True),
        ("{x} broke", "{y} 坏了", True),   # a translation that lost its placeholder
        ("✔ {title}: correct", "✔ {title}：正确", True),
    ])
    assert i18n.tr("the hook on 'fc1' fired 3 times") == "'fc1' 上的钩子触发了 3 次"
    assert i18n.tr("out['fc1'] is None: nothing was stored. return the dict") == \
        "out['fc1'] 是 None：什么也没存下。返回这个字典"
    assert i18n.tr("x and x again") == "x 再 x"
    assert i18n.tr("x and y again") == "x and y again", "a repeated placeholder stands for one value"
    assert i18n.tr("7") == "7"
    assert i18n.tr("fc1 broke") == "fc1 broke", "a broken translation is not used"
    assert i18n.fmt("{x} broke", x="fc1") == "fc1 broke"
    assert i18n.fmt("✔ {title}: correct", title="T") == "✔ T：正确"
    assert i18n.tr(None) is None and i18n.tr(3) == 3


def test_a_status_line_part_never_swallows_the_parts_after_it(tmp_path, monkeypatch):
    """A widget's line "A · B": a template of part A whose placeholder could take " · B" with it
    is not used for the whole line; each part is translated on its own."""
    _catalogue(tmp_path, monkeypatch, [
        ("{name} patched at position {position}", "修补{name}的位置{position}", True),
        ("clean answer back: {back}", "干净答案的恢复程度：{back}", True),
        ("{what} · hooks left attached: {n}", "{what} · 仍挂着的钩子：{n}", True),   # a whole line
    ])
    assert i18n.tr_line("blocks.0 patched at position 0 · clean answer back: 9%") == \
        "修补blocks.0的位置0 · 干净答案的恢复程度：9%"
    assert i18n.tr_line("x · hooks left attached: 3") == "x · 仍挂着的钩子：3"


def test_messages_are_collected_with_named_placeholders(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(textwrap.dedent('''
        """A docstring is never shown."""
        def case(t, got, layer):
            t.expect(got == 1, what=f"calls of {layer.name!r}", expected=1, got=len(got),
                     nudge="count every call, " + f"not only the first {len(got)}")
            if got == "relu":
                raise ValueError(f"no layer {layer!r}; use one of {sorted(t.names)}")
            exercise.wrong("a label", mentions="words a test looks for")
            detail = {"why": N_("a marked sentence in a detail"), "mismatch": N_("another marked one")}
            return "a sentence a helper hands to the report"
    '''))
    found = {text: template for text, template, _ in lm.messages_of(module, broad=True)}
    assert found == {"calls of {name}": True, "count every call, not only the first {n_got}": True,
                     "no layer {layer}; use one of {names}": True,
                     "a sentence a helper hands to the report": False,
                     "a marked sentence in a detail": False, "another marked one": False}


def test_the_library_catalogue_holds_every_message_the_library_has_now_translated():
    for lang in i18n.languages():
        state = lm.state(lang)
        assert not (state.missing or state.obsolete or state.fuzzy), (
            f"{lm.catalogue_path(lang)}: {len(state.missing)} messages missing (first: {state.missing[:1]}), "
            f"{len(state.obsolete)} obsolete (first: {state.obsolete[:1]}), {len(state.fuzzy)} fuzzy: "
            "run python3 course.py translate, then translate what it opened")
        assert not state.untranslated, f"{len(state.untranslated)} untranslated, first: {state.untranslated[:3]}"
        assert not state.problems, "; ".join(state.problems[:5])


def test_every_exercise_speaks_chinese_task_hints_and_title():
    i18n.set_language("zh_CN")
    for ex in _exercises():
        assert CJK.search(i18n.tr(ex.title)), ex.key
        assert CJK.search(i18n.tr(ex.task)), ex.key
        for number, hint in enumerate(ex.hints, 1):
            assert CJK.search(i18n.tr(hint)) and i18n.tr(hint) in ex.hint(number).text, \
                (ex.key, number)
        ex._next_hint = 0


# what a report's title says went wrong (hooktutor/exercises/core.py): each in the learner's language
HEADLINES = ("gives a wrong result", "raised an error", "gave the check something it cannot use",
             "is not written yet", "did not finish in time", "left a hook attached")


def test_every_headline_of_a_report_is_in_the_catalogue():
    i18n.set_language("zh_CN")
    for words in HEADLINES:
        assert CJK.search(i18n.tr(words)), words


@pytest.mark.parametrize("ex", _exercises(), ids=lambda ex: ex.key)
def test_the_typical_wrong_answers_are_explained_in_chinese(ex):
    """Every line of the report a learner reads (its verdict, the case, why, what to do next) is
    Chinese; what was compared and found (code, values) stays as it is."""
    i18n.set_language("zh_CN")
    for label, fn, _ in (ex.wrong_answers + ex.hidden_wrong_answers)[:2]:
        report = ex.check(fn, hidden=True)
        assert not report.passed
        english = [(key, text) for key, text in report._lines()
                   if key in ("title", "case", "why", "next", "also") and not CJK.search(text)]
        assert not english, f"{ex.key}, {label}: still English: {english}"
        title = next(text for key, text in report._lines() if key == "title")
        assert not any(words in title for words in HEADLINES), f"{ex.key}, {label}: {title}"
        assert CJK.search(repr(report)) and CJK.search(report._repr_html_())


def test_chinese_prose_wraps_at_the_terminals_width_and_english_as_before():
    import textwrap as tw

    english = "the quick brown fox jumps over the lazy dog, output.detach().clone() and more " * 4
    assert i18n.wrap(english, 88) == tw.fill(english, width=88, break_long_words=False, break_on_hyphens=False)
    chinese = "保存的输入丢失了负值：ReLU(inplace=True)在你的预钩子运行之后改写了这个张量，请保存一个副本。" * 4
    lines = i18n.wrap(chinese, 40).splitlines()
    assert len(lines) > 4 and "".join(lines) == chinese
    # (a closing mark stays on its line: two columns over at most)
    assert all(i18n.display_width(line) <= 42 for line in lines)
    assert not any(line[0] in "，。：）" for line in lines), "a closing mark never starts a line"
    assert sum(line.count("ReLU(inplace=True)") for line in lines) == 4, "code is never split"


@pytest.mark.parametrize("variant", ["float64", "eval", "mixed", "as given"])
def test_a_variants_report_names_the_result_and_the_variant_in_chinese(variant):
    """What the kit's variants fill into a sentence (the result, the variant's clause, more or
    fewer hooks) is translated with it: no English words inside the Chinese sentence."""
    from hooktutor.exercises import variants

    i18n.set_language("zh_CN")
    said = []
    for got, ref in ((torch.ones(2, dtype=torch.float64), torch.zeros(2, dtype=torch.float64)),
                     (torch.zeros(2, dtype=torch.float32), torch.zeros(2, dtype=torch.float64)), (1.0, 2.0)):
        with pytest.raises(variants.Difference) as caught:
            variants.compare_results(got, ref, variant)
        said += [i18n.tr(caught.value.what), i18n.tr(caught.value.nudge)]
    for state in ((2, 1), (0, 1)):
        with pytest.raises(variants.Difference) as caught:
            variants._compare_state({("fc1", "hooks", "_forward_hooks"): state[0]},
                                    {("fc1", "hooks", "_forward_hooks"): state[1]}, variant)
        said.append(i18n.tr(caught.value.nudge))
    for text in said:
        assert CJK.search(text) and not re.search(r"\b(the result|with|mode|more|fewer|here)\b", text), text
