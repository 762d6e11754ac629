"""A learner's hour, in JupyterLab in Chromium at 1366x768: every lesson of the workbook (the
learner's edition, exercises blank), each solution pasted into its answer cell as a learner
pastes what ``ex.<name>.solution()`` shows, then Run All.

After it: the run reached the last cell; no error appears outside the cells that show one on
purpose (tagged ``raises-exception``); no widget output is blank (a lesson's clean-up cell
closes its widget, and the widget must keep its last picture); every check cell says
"correct". A screenshot of each lesson at 1366x768 is kept in test-artifacts/
(learner-hour-NN_name.png), also when the test passes.

The server's kernels compute as a CPU with no vector extensions would
(``cpu_profiles.BROWSER_PROFILE``): the lesson, saved after its Run All, must hold the stored
outputs in every cell that is not an exercise (compared as nbval compares them). With nbval
(this CPU) and tests/test_rerun.py (``avx2``), every stored output is checked on three CPUs.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from .conftest import ARTIFACTS, CURRENT, ROOT, fresh_page, open_notebook

pytestmark = pytest.mark.browser

LAPTOP = {"width": 1366, "height": 768}
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
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
                .some(o => o.innerText.trim().length > 0);
            return !drawn && !text;
        }).length;
        // a cell whose input is hidden (the set-up cell) shows a placeholder without a count
        const hidden = !!cell.querySelector('.jp-InputPlaceholder');
        const prompt = cell.querySelector('.jp-InputArea .jp-InputPrompt');
        return {errors: [...errors].map(e => e.innerText.slice(0, 300)), views: views.length, blank: blank,
                ran: hidden || (!!prompt && /\\[\\d+\\]/.test(prompt.textContent)),
                text: [...cell.querySelectorAll('.jp-OutputArea-output')].map(o => o.innerText).join('\\n')};
    });
}"""


SETTLED = """() => {
    const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
    const busy = [...panel.querySelectorAll('.jp-InputArea .jp-InputPrompt')]
        .some(p => p.textContent.includes('*'));
    const idle = [...document.querySelectorAll('.jp-StatusBar-TextItem')]
        .some(s => /\\|\\s*Idle\\s*$/.test(s.textContent));
    return idle && !busy;
}"""


def run_all_to_the_end(page, timeout_s: float = 120) -> None:
    """Run > Run All Cells, then wait until the kernel is idle with no cell queued for a
    second on end (Run All goes on past a cell tagged raises-exception, and a widget cell may
    keep the kernel busy a moment after its count appears)."""
    import time

    page.locator(".lm-MenuBar-item", has_text=re.compile(r"^\s*Run\s*$")).click()
    page.locator(".lm-Menu-item:visible", has_text=re.compile(r"^\s*Run All Cells\s*$")).click()
    deadline, calm_since = time.monotonic() + timeout_s, None
    page.wait_for_timeout(500)
    while time.monotonic() < deadline:
        if page.evaluate(SETTLED):
            calm_since = calm_since or time.monotonic()
            if time.monotonic() - calm_since > 1.0:
                return
        else:
            calm_since = None
        page.wait_for_timeout(100)
    raise AssertionError(f"Run All did not finish within {timeout_s} s")


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


@pytest.fixture
def laptop(browser, lab, request):
    yield from fresh_page(browser, lab, request, LAPTOP, prefix="learner-hour-")


@pytest.mark.parametrize("source", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_a_lesson_run_all_with_the_solutions_pasted_in(laptop, lab, source):
    name, raising, checks = pasted_workbook_lesson(source, lab.root)
    open_notebook(laptop, lab, name)
    run_all_to_the_end(laptop)
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
    correct = sum(len(re.findall(r"✔ .*: (correct|your prediction is what torch did)", c["text"])) for c in cells)
    assert correct >= checks, f"{name}: {correct} of {checks} checks say correct with the solutions pasted in"
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
    ran = nbformat.read(saved, as_version=4).cells
    stored, subs = nbformat.read(source, as_version=4).cells, sanitizers()
    for index, (cell, want) in enumerate(zip(ran, stored, strict=True)):
        if (cell.cell_type != "code" or cell.metadata.get("nbgrader")
                or "nbval-ignore-output" in want.metadata.get("tags", [])):
            continue
        assert comparable(cell.outputs, subs) == comparable(want.outputs, subs), (
            f"{saved.name}, code cell at index {index} printed other than its stored output in "
            f"JupyterLab, on a CPU computing as {BROWSER_PROFILE} does:\n{cell.source[:300]}")
