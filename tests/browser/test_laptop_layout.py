"""The widgets at a laptop size (1366x768): every lesson's "Try it live" widget, after Run
All (the hook lab's panel: tests/browser/test_hook_lab_page.py, on that file's Run All). No
label, description, button or choice shown is cut off (its text fits its box: scrollWidth
within clientWidth, and a dropdown's chosen text within the dropdown), and every control
changes what is shown (a picture, the status line, the table).
Screenshots go to test-artifacts/ (laptop-*.png).

The lessons' widget cells are taken verbatim from the notebooks and run in one generated
notebook, after a set-up cell of stand-ins for the names they use (so one kernel and one
Run All cover every lesson, instead of executing seven lessons in full).
"""

from __future__ import annotations

import ast
import builtins
import re
import time

import pytest

from .conftest import (
    ARTIFACTS,
    CURRENT,
    ROOT,
    WAIT_MS,
    assert_no_errors,
    fresh_page,
    open_notebook,
    run_all,
    wait_idle,
    write_notebook,
)

pytestmark = pytest.mark.browser

LAPTOP = {"width": 1366, "height": 768}
NOTEBOOKS = ROOT / "notebooks"
HOOK_LAB = NOTEBOOKS / "06_hook_lab.ipynb"

# Stand-ins for what each lesson has defined by the time its "Try it live" cell runs: a
# common cell, then one cell per lesson just before its widget. Lesson 03's trained
# classifier gets its own class, so its toggle's default name differs from lesson 02's toggle
# on an MLP's fc1 (a widget made under a name in use closes the one holding it).
COMMON = """\
import torch

from hooktutor.data import blobs, shapes
from hooktutor.models import MLP, SmallCNN


class TrainedMLP(MLP):
    pass


def fresh(inplace=False):
    return SmallCNN(inplace=inplace, seed=0)"""
# Lessons whose "Try it live" is a function to call with other arguments, not a widget.
NO_WIDGET = {"11_compile_and_export",   # a checkbox would hide the order of register, call, reset
             "12_huggingface_hooks",    # what to watch is the tokens a steered model generates
             "13_hooks_at_work"}        # what to watch is a few numbers of one GradScaler step

STANDINS = {
    "01_tensor_hooks": "x_blobs, y_blobs = blobs(96, seed=0)",
    "02_forward_hooks": "x, y = blobs(96, seed=0)",
    "03_changing_outputs": "clf = TrainedMLP(seed=0)\nx_all, y_all = blobs(96, seed=0)",
    "04_backward_hooks": "x, y = blobs(96, seed=0)",
    "05_inplace_relu_pitfall": "x, y = shapes(32, seed=1)",
    "07_capstone": "model = SmallCNN(seed=0)\nx_test, y_test = shapes(64, seed=1)",
    "08_training_hooks": "import hooktutor",
    "09_autograd_graph_hooks": "from hooktutor.models import deep_mlp\nx, y = blobs(32, seed=0)",
    "10_transformer_hooks": "from hooktutor.data import corrupt_first, first_token\n"
                            "from hooktutor.models import TinyTransformer\n"
                            "model = TinyTransformer(seed=0)\nclean = first_token(64, seed=1)[0]\n"
                            "corrupt = corrupt_first(clean, seed=1)\nnames = ['embed', 'blocks.0', 'blocks.1']",
}

# Every label-like element of a widget whose text must fit its box.
TRUNCATED = """(root) => {
    const found = [];
    const sel = '.widget-label, .widget-label-basic, label, button, .widget-readout, .widget-html-content, '
        + '.widget-inline-hbox > span';
    for (const el of root.querySelectorAll(sel)) {
        if (!el.offsetParent || !el.textContent.trim()) continue;
        if (el.scrollWidth > el.clientWidth + 1) found.push(el.className + ': ' + el.textContent.trim());
    }
    const canvas = document.createElement('canvas').getContext('2d');
    for (const el of root.querySelectorAll('select')) {
        if (!el.offsetParent || el.selectedIndex < 0) continue;
        const style = getComputedStyle(el);
        canvas.font = style.font;
        const text = el.options[el.selectedIndex].text;
        const room = el.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
        if (canvas.measureText(text).width > room) found.push('select: ' + text);
    }
    return found;
}"""


def assert_nothing_cut_off(locator, what: str) -> None:
    cut = locator.evaluate(TRUNCATED)
    assert not cut, f"{what}: cut off at {LAPTOP['width']}x{LAPTOP['height']}: {cut}"


def shot(locator, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    locator.scroll_into_view_if_needed()
    locator.screenshot(path=str(ARTIFACTS / f"laptop-{name}.png"))


def changed(read, before, seconds: float = 15.0) -> bool:
    """Whether ``read()`` differs from ``before`` within ``seconds`` (the page applies the
    kernel's updates one message at a time)."""
    deadline = time.monotonic() + seconds
    while read() == before:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.fixture
def laptop(browser, lab, request):
    """A fresh page at 1366x768 on a server with no kernel running."""
    yield from fresh_page(browser, lab, request, LAPTOP, prefix="laptop-")


def try_it_live_cells() -> list[tuple[str, str]]:
    """(lesson, source) of the code cell that makes each lesson's "Try it live" widget."""
    import nbformat

    found = []
    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        if path == HOOK_LAB or path.stem in NO_WIDGET:
            continue
        cells = nbformat.read(path, as_version=4).cells
        heading = next((i for i, c in enumerate(cells) if c.cell_type == "markdown"
                        and re.search(r"^#+\s*Try it live", c.source, re.M)), None)
        if heading is None:
            continue
        cell = next(c for c in cells[heading + 1:] if c.cell_type == "code")
        found.append((path.stem, cell.source))
    return found


def bound_names(source: str) -> set[str]:
    """The names ``source`` defines (imports, assignments, functions, classes)."""
    tree = ast.parse(source)
    bound = {a.asname or a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
             for a in n.names}
    bound |= {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    return bound | {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def free_names(source: str) -> set[str]:
    """The names ``source`` uses without defining them."""
    used = {n.id for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return used - bound_names(source) - set(dir(builtins))


def test_every_lesson_widget_fits_a_laptop_screen_and_every_click_shows(laptop, lab):
    from playwright.sync_api import expect

    cells = try_it_live_cells()
    assert len(cells) >= 6, f"expected a Try it live widget in each of lessons 01-05 and 07, found {cells}"
    source = [COMMON]
    for lesson, cell in cells:
        assert lesson in STANDINS, f"{lesson} has a Try it live widget: add stand-ins for it to STANDINS"
        missing = free_names(cell) - bound_names(COMMON) - bound_names(STANDINS[lesson])
        assert not missing, f"{lesson}'s Try it live cell uses {missing}: add stand-ins for them to STANDINS"
        source += [STANDINS[lesson], cell]
    open_notebook(laptop, lab, write_notebook(lab, "try_it_live.ipynb", source))
    run_all(laptop)
    assert_no_errors(laptop)
    code_cells = laptop.locator(CURRENT + " .jp-CodeCell")
    for index, (lesson, _) in enumerate(cells):
        widget = code_cells.nth(2 + 2 * index).locator(
            ".hooktutor-hook-toggle, .hooktutor-inplace-switch, .hooktutor-ema-toggle, .hooktutor-saved-toggle, "
            ".hooktutor-patch-picker")
        expect(widget).to_have_count(1)
        dropdown = widget.locator(".hooktutor-toggle select")  # lesson 10's patch picker: a module to patch
        if dropdown.count():
            click, unclick = (lambda: dropdown.select_option(index=2)), (lambda: dropdown.select_option(index=0))
        else:
            checkbox = widget.locator(".hooktutor-toggle input[type=checkbox]")
            click = unclick = checkbox.click
        status = widget.locator(".hooktutor-status")
        view = widget.locator(".hooktutor-view")
        shot(widget, f"{lesson}-try-it-live")
        assert_nothing_cut_off(widget, f"{lesson}'s Try it live widget")
        before_status, before_view = status.text_content(), view.inner_html()
        click()
        expect(status).not_to_have_text(before_status, timeout=WAIT_MS)
        # the view changes where the lesson's hook changes it (lesson 02's hook only observes)
        if "observe" not in dict(cells)[lesson]:
            assert changed(view.inner_html, before_view), f"{lesson}: ticking the box left the view as it was"
        shot(widget, f"{lesson}-try-it-live-ticked")
        assert_nothing_cut_off(widget, f"{lesson}'s Try it live widget, ticked")
        unclick()
        expect(status).to_have_text(before_status, timeout=WAIT_MS)
        wait_idle(laptop)
