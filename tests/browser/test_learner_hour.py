"""A learner's hour, in JupyterLab in Chromium at 1366x768: every lesson of the workbook (the
learner's edition, exercises blank; the Chinese workbook's where the lesson has its Chinese
edition), each solution pasted into its answer cell as a learner pastes what
``ex.<name>.solution()`` shows, then Run All.

After it: the run reached the last cell; no error appears outside the cells that show one on
purpose (tagged ``raises-exception``); no widget output is blank (a lesson's clean-up cell
closes its widget, and the widget must keep its last picture); every check cell says
"correct". A screenshot of each lesson at 1366x768 is kept in test-artifacts/
(learner-hour-NN_name.png), also when the test passes.

The server's kernels compute as a CPU with no vector extensions would
(``cpu_profiles.BROWSER_PROFILE``): the lesson, saved after its Run All, must hold the stored
outputs in every cell that is not an exercise (compared as nbval compares them). With nbval
(``avx2``, hooktutor/course/nbval_twice.py) and the CPU that stored them, every stored output
is checked on three CPUs.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

import nbformat
import pytest

from .conftest import ARTIFACTS, CURRENT, ROOT, WAIT_MS, close_all, load_lab, open_in_lab

pytestmark = pytest.mark.browser

LAPTOP = {"width": 1366, "height": 768}
# Where a lesson has its Chinese edition (notebooks/zh_CN/, hooktutor/course/translate.py), the
# learner's hour runs that one: its code is the English lesson's, token for token but the comments
# (tests/test_translations.py), so it checks the same code and, besides, the Chinese prose in Lab.
EDITION = "zh_CN"
NOTEBOOKS = [p.parent / EDITION / p.name if (p.parent / EDITION / p.name).exists() else p
             for p in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))]
RAISES = "raises-exception"


def pasted_workbook_lesson(source: Path, folder: Path) -> tuple[str, set[int], int]:
    """The learner's edition of ``source`` in ``folder``, every answer cell replaced by what its
    exercise's ``solution()`` shows (its first line is a comment naming the exercise). Returns
    the file name, the indices (among code cells) of the cells tagged raises-exception, and how
    many check cells it has."""
    from hooktutor.course import student
    from hooktutor.course.answers import answers

    original = nbformat.read(source, as_version=4)
    edition, _ = student.convert(original, source.stem, keep_solutions=False)
    for answer in answers(original, source.stem):
        shown = repr(answer.exercise.solution()).split("\n", 1)[1]
        edition.cells[answer.index].source = shown
    code = [c for c in edition.cells if c.cell_type == "code"]
    raising = {i for i, c in enumerate(code) if RAISES in c.metadata.get("tags", [])}
    checks = sum(student.CHECK_TAG in c.metadata.get("tags", []) for c in code)
    nbformat.write(edition, folder / source.name)
    return source.name, raising, checks


CELL_REPORT = """() => {
    const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
    return [...panel.querySelectorAll('.jp-CodeCell')].map(cell => {
        const errors = cell.querySelectorAll('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]');
        const views = [...cell.querySelectorAll(
                '.jp-OutputArea-output .widget-box, .jp-OutputArea-output .jupyter-widgets.widget-container')]
            .filter(v => !v.parentElement.closest('.widget-box'));
        const blank = views.filter(v => {
            const images = [...v.querySelectorAll('img')];
            const drawn = images.some(img => img.complete && img.naturalWidth > 0);
            const text = [...v.querySelectorAll('.widget-output, .jp-OutputArea-output')]
                .some(o => o.textContent.trim().length > 0);
            return !drawn && !text;
        }).length;
        // a cell whose input is hidden (the set-up cell) shows a placeholder without a count
        const hidden = !!cell.querySelector('.jp-InputPlaceholder');
        const prompt = cell.querySelector('.jp-InputArea .jp-InputPrompt');
        return {errors: [...errors].map(e => e.textContent.slice(0, 300)), views: views.length, blank: blank,
                ran: hidden || (!!prompt && /\\[\\d+\\]/.test(prompt.textContent)),
                text: [...cell.querySelectorAll('.jp-OutputArea-output')].map(o => o.textContent).join('\\n')};
    });
}"""


# Run All has finished: the kernel is idle, no cell is queued, and every code cell has its
# count (or hides its input). Or Run All stopped at a cell showing an error that is not tagged
# raises-exception (Run All goes on past those): then it has stayed so for a second, and the
# report says where it stopped. Lab may leave the kernel idle a moment between two cells of a
# Run All, so a calm moment alone does not say Run All has ended.
FINISHED = """(raising) => {
    const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
    const cells = [...panel.querySelectorAll('.jp-CodeCell')];
    const prompts = cells.map(cell => {
        const prompt = cell.querySelector('.jp-InputArea .jp-InputPrompt');
        return cell.querySelector('.jp-InputPlaceholder') ? 'hidden' : (prompt ? prompt.textContent : '');
    });
    const idle = [...document.querySelectorAll('.jp-StatusBar-TextItem')]
        .some(s => /\\|\\s*Idle\\s*$/.test(s.textContent));
    if (!idle || prompts.some(p => p.includes('*'))) { window._calmSince = null; return false; }
    if (prompts.every(p => p === 'hidden' || /\\[\\d+\\]/.test(p))) return true;
    const stray = cells.some((cell, i) => !raising.includes(i) && cell.querySelector(
        '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'));
    if (!stray) { window._calmSince = null; return false; }
    window._calmSince = window._calmSince || performance.now();
    return performance.now() - window._calmSince > 1000;
}"""

# Every widget view of the outputs is drawn: each widget-view output holds its view, and every
# picture in an output has loaded.
DRAWN = """() => {
    const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
    const outputs = [...panel.querySelectorAll(
        '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.widget-view+json"]')];
    return outputs.every(o => o.childElementCount > 0)
        && [...panel.querySelectorAll('.jp-OutputArea-output img')].every(img => img.complete);
}"""


def run_all_to_the_end(page, raising: set[int], timeout_s: float = 120) -> None:
    """Run > Run All Cells, then wait until Run All has finished (``FINISHED``; ``raising``:
    the code cells tagged raises-exception) and every widget picture is drawn (``DRAWN``)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    page.evaluate("() => { window._calmSince = null; }")
    page.locator(".lm-MenuBar-item", has_text=re.compile(r"^\s*Run\s*$")).click()
    page.locator(".lm-Menu-item:visible", has_text=re.compile(r"^\s*Run All Cells\s*$")).click()
    try:
        page.wait_for_function(FINISHED, arg=sorted(raising), timeout=timeout_s * 1000, polling=100)
        page.wait_for_function(DRAWN, timeout=10_000, polling="raf")
    except PlaywrightTimeout:
        ran = [c["ran"] for c in page.evaluate(CELL_REPORT)]
        raise AssertionError(f"Run All did not finish within {timeout_s} s (code cells not run: "
                             f"{[i for i, r in enumerate(ran) if not r][:10]})") from None


LEGIBILITY = """() => {
    const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
    const scales = [...panel.querySelectorAll('.jp-OutputArea-output .widget-output img, .jupyter-widgets img')]
        .filter(img => img.complete && img.naturalWidth > 0 && img.offsetParent)
        .map(img => img.clientWidth / img.naturalWidth);
    const panels = [...panel.querySelectorAll('.hooktutor-panel')].map(p => {
        const top = p.getBoundingClientRect().top;
        const parts = ['.hooktutor-loss', '.hooktutor-table', '.hooktutor-activation', '.hooktutor-gradients']
            .map(s => p.querySelector(s)).filter(Boolean);
        return Math.max(...parts.map(e => e.getBoundingClientRect().bottom - top));
    });
    return {scales, panels};
}"""


@pytest.fixture(scope="module")
def loaded_lab(browser, lab):
    """One browser context at 1366x768 with JupyterLab loaded, for every lesson of this file
    (each test opens its lesson in it and closes it after: no page load per lesson)."""
    lab.delete_sessions()
    context = browser.new_context(viewport=LAPTOP)
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    try:
        load_lab(page, lab)
        yield page
    finally:
        with contextlib.suppress(Exception):
            context.close()
        lab.delete_sessions()


def lesson_of(item) -> Path | None:
    callspec = getattr(item, "callspec", None)
    return callspec.params.get("source") if callspec and item.module.__name__ == __name__ else None


@pytest.fixture
def laptop(loaded_lab, lab, request):
    """The loaded Lab page with no tab open and this lesson's kernel started (the next
    lesson's too, so it boots while this one runs). After the test: its tab closed, its
    kernel shut down; on a failure a full-page screenshot in test-artifacts/ and Lab loaded
    afresh for the next lesson."""
    lesson = lesson_of(request.node)
    items = request.session.items
    later = [lesson_of(item) for item in items[items.index(request.node) + 1:]]
    running = {session["path"] for session in lab.api("GET", "/api/sessions") or []}
    for source in [lesson, *[p for p in later if p][:1]]:
        if source.name not in running:
            lab.start_kernel(source.name)
    try:
        yield loaded_lab
    finally:
        report = getattr(request.node, "rep_call", None)
        failed = report is None or report.failed
        if failed:
            ARTIFACTS.mkdir(exist_ok=True)
            name = "learner-hour-" + re.sub(r"[^\w.-]+", "_", request.node.name)
            with contextlib.suppress(Exception):
                loaded_lab.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
                print(f"screenshot: {ARTIFACTS / f'{name}.png'}")
        try:
            close_all(loaded_lab)
        except Exception:
            failed = True
        lab.delete_sessions(lesson.name)
        if failed:
            load_lab(loaded_lab, lab)


@pytest.mark.parametrize("source", NOTEBOOKS, ids=[p.stem + ("-" + EDITION if p.parent.name == EDITION else "")
                                                   for p in NOTEBOOKS])
def test_a_lesson_run_all_with_the_solutions_pasted_in(laptop, lab, source):
    name, raising, checks = pasted_workbook_lesson(source, lab.root)
    open_in_lab(laptop, name)
    run_all_to_the_end(laptop, raising)
    cells = laptop.evaluate(CELL_REPORT)
    ARTIFACTS.mkdir(exist_ok=True)
    laptop.screenshot(path=str(ARTIFACTS / f"learner-hour-{source.stem}.png"))
    stray = [(i, c["errors"][0]) for i, c in enumerate(cells) if c["errors"] and i not in raising]
    assert not stray, f"{name}: errors outside the cells that show one on purpose: {stray}"
    assert all(c["ran"] for c in cells), f"{name}: Run All stopped at code cell " \
        f"{next(i for i, c in enumerate(cells) if not c['ran'])}"
    blank = [i for i, c in enumerate(cells) if c["blank"]]
    assert not blank, f"{name}: blank widget output in code cells {blank}"
    # every widget picture is legible: shown at a scale where its text is as large as the code font
    from hooktutor.widgets._render import DPI, FONT_PT  # every widget's text (test_widget_text.py: each one)

    seen = laptop.evaluate(LEGIBILITY)
    small = [round(FONT_PT * DPI / 72 * s, 1) for s in seen["scales"] if FONT_PT * DPI / 72 * s < 12.5]
    assert not small, f"{name}: widget text shown {small} px high at 1366x768; it must be 12.5 px or more"
    # a hook lab panel shows what its controls change (loss, hook table, charts) without scrolling
    lab_chrome = 160   # Lab's menu, tab bar, toolbar and status bar at 1366x768
    assert all(h <= LAPTOP["height"] - lab_chrome for h in seen["panels"]), (
        f"{name}: a HookPanel needs {seen['panels']} px of height; {LAPTOP['height'] - lab_chrome} px are in view")
    # (in the Chinese edition the library speaks Chinese: its set-up cell calls set_language)
    said = r"✔ .*：(正确，|你的预测与torch的实际行为一致)" if source.parent.name == EDITION \
        else r"✔ .*: (correct|your prediction is what torch did)"
    correct = sum(len(re.findall(said, c["text"])) for c in cells)
    assert correct >= checks, f"{name}: {correct} of {checks} checks say correct with the solutions pasted in"
    if source.parent.name == EDITION:   # the edition's prose, as Lab shows it: its title in Chinese
        title = laptop.evaluate("() => document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) "
                                ".jp-MarkdownOutput h1').textContent")
        assert re.search(r"[\u4e00-\u9fff]", title), f"{name}: the {EDITION} edition shows the title {title!r}"
    assert_the_stored_outputs(laptop, lab.root / name, source)


def assert_the_stored_outputs(page, saved: Path, source: Path) -> None:
    """Save the notebook (Ctrl+S) and compare every cell that is not an exercise with the stored
    outputs of ``source``, as nbval compares them."""
    import time

    from _notebook_outputs import comparable, sanitizers

    from hooktutor.course.cpu_profiles import BROWSER_PROFILE

    before = saved.stat().st_mtime_ns
    page.locator(CURRENT + " .jp-Notebook").press("Control+s")
    deadline = time.monotonic() + 30
    while saved.stat().st_mtime_ns == before or page.locator(".jp-mod-dirty").count():
        assert time.monotonic() < deadline, f"{saved.name} was not saved within 30 s"
        page.wait_for_timeout(100)
    from hooktutor.course.other_torches import outputs_not_comparable

    if why := outputs_not_comparable(source):   # lesson 12 on Python 3.10 (conftest.py: the same for nbval)
        import warnings

        warnings.warn(pytest.PytestWarning(f"{source.name}: outputs not compared here: {why}"), stacklevel=1)
        return
    ran = nbformat.read(saved, as_version=4).cells
    stored, subs = nbformat.read(source, as_version=4).cells, sanitizers()
    for index, (cell, want) in enumerate(zip(ran, stored, strict=True)):
        if (cell.cell_type != "code" or cell.metadata.get("nbgrader")
                or "nbval-ignore-output" in want.metadata.get("tags", [])):
            continue
        assert comparable(cell.outputs, subs) == comparable(want.outputs, subs), (
            f"{saved.name}, code cell at index {index} printed other than its stored output in "
            f"JupyterLab, on a CPU computing as {BROWSER_PROFILE} does:\n{cell.source[:300]}")
