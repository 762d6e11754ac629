"""The hook lab (``notebooks/06_hook_lab.ipynb``) in JupyterLab: choosing a mode in a panel's
dropdown attaches the hook, and the page shows it: the pictures, the loss
line and the hook table, which must agree with ``list_hooks`` in the kernel (asked through
the probe button of ``conftest.py``, appended to the copy of the notebook). At a laptop size
(1366x768) no label, button or choice of its panel is cut off and every control changes what
is shown (screenshots in test-artifacts/laptop-hook-lab*.png).

The lesson's cells up to its CNN panel (the panel's cell makes its own model and data) are run
once (Run All, in one page) for both tests: each runs the panel's cell again for a fresh panel on
a fresh model, as a learner would, and sets its own window size. The whole lesson runs in the
browser in tests/browser/test_learner_hour.py.
"""

from __future__ import annotations

import re

import pytest

from .conftest import (
    PROBE,
    ROOT,
    WAIT_MS,
    Probe,
    assert_no_errors,
    copy_notebook,
    open_notebook,
    run_all,
    run_cell,
    screenshot_if_failed,
    wait_idle,
)
from .test_laptop_layout import LAPTOP, assert_nothing_cut_off, changed, shot

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not (ROOT / "notebooks" / "06_hook_lab.ipynb").exists(),
                                 reason="notebooks/06_hook_lab.ipynb is not written yet")]

LAB = ROOT / "notebooks" / "06_hook_lab.ipynb"
PANEL_CELL = "cnn_panel = HookPanel("


@pytest.fixture(scope="module")
def ran_hook_lab(browser, lab):
    """One page with the lesson to its CNN panel (and the probe cell) after Run All, no error
    shown; a server with no other kernel running."""
    lab.delete_sessions()
    context = browser.new_context(viewport=LAPTOP)
    context.set_default_timeout(WAIT_MS)
    pg = context.new_page()
    try:
        open_notebook(pg, lab, copy_notebook(lab, LAB, extra_cells=[PROBE.format(model="cnn")],
                                             upto=PANEL_CELL))
        run_all(pg)
        yield pg
    finally:
        context.close()


def hook_lab_at(pg, request, viewport: dict):
    """The page of ``ran_hook_lab`` at ``viewport``; a screenshot if the test fails."""
    pg.set_viewport_size(viewport)
    try:
        yield pg
    finally:
        screenshot_if_failed(pg, request, prefix="hook-lab-")


@pytest.fixture
def page(ran_hook_lab, request):
    yield from hook_lab_at(ran_hook_lab, request, {"width": 1400, "height": 1000})


@pytest.fixture
def laptop(ran_hook_lab, request):
    yield from hook_lab_at(ran_hook_lab, request, LAPTOP)


def test_choosing_modes_in_the_panel_attaches_hooks_and_redraws(page):
    from playwright.sync_api import expect

    assert_no_errors(page)
    # Run the panel's cell again, as a learner would, for a live panel on a fresh model.
    run_cell(page, PANEL_CELL)
    panel = page.locator(".hooktutor-panel").filter(has_text="HookPanel: SmallCNN")
    expect(panel.locator(".hooktutor-mode select")).to_have_count(8)
    wait_idle(page)
    probe = Probe(page)

    def mode(layer: str):
        label = page.locator("label", has_text=re.compile(rf"^{re.escape(layer)}$"))
        return panel.locator(".hooktutor-mode", has=label).locator("select")

    loss = panel.locator(".hooktutor-loss")
    table = panel.locator(".hooktutor-table")
    rows = table.locator("table.hooktutor-hooks tbody tr")
    activation = panel.locator(".hooktutor-activation img")
    gradients = panel.locator(".hooktutor-gradients img")

    def shown_rows() -> list[tuple[str, ...]]:
        return [tuple(row.locator("td").all_inner_texts()[:3]) for row in rows.all()]

    expect(table).to_contain_text("0 hooks attached to SmallCNN")
    expect(rows).to_have_count(0)
    loss_off, act_off, grad_off = loss.text_content(), activation.get_attribute("src"), gradients.get_attribute("src")
    assert probe() == []

    # observe: a hook that changes nothing but the status line and the table
    mode("features.0").select_option("observe")
    expect(rows).to_have_count(1, timeout=WAIT_MS)
    expect(loss).not_to_have_text(loss_off, timeout=WAIT_MS)
    expect(loss).to_contain_text("features.0=observe")
    assert shown_rows() == [("features.0", "forward", "lab-cnn.observe")] == probe()

    # zero on the layer the activation view shows: every view changes
    mode("features.0").select_option("zero")
    expect(activation).not_to_have_attribute("src", act_off, timeout=WAIT_MS)
    expect(gradients).not_to_have_attribute("src", grad_off, timeout=WAIT_MS)
    expect(rows.first).to_contain_text("lab-cnn.zero", timeout=WAIT_MS)
    expect(loss).to_contain_text("features.0=zero")
    assert shown_rows() == [("features.0", "forward", "lab-cnn.zero")] == probe()

    # a second layer: two rows
    mode("features.4").select_option("scale_grad")
    expect(rows).to_have_count(2, timeout=WAIT_MS)
    assert sorted(shown_rows()) == sorted(probe()) == [("features.0", "forward", "lab-cnn.zero"),
                                                      ("features.4", "forward", "lab-cnn.scale_grad(x2)")]

    # off again: the hooks are gone and the page shows exactly what it showed before
    mode("features.4").select_option("off")
    expect(rows).to_have_count(1, timeout=WAIT_MS)
    mode("features.0").select_option("off")
    expect(rows).to_have_count(0, timeout=WAIT_MS)
    expect(table).to_contain_text("0 hooks attached to SmallCNN")
    expect(activation).to_have_attribute("src", act_off, timeout=WAIT_MS)
    expect(gradients).to_have_attribute("src", grad_off, timeout=WAIT_MS)
    expect(loss).to_have_text(loss_off, timeout=WAIT_MS)
    assert probe() == []

    # the layer selector of the activation view
    panel.locator(".widget-dropdown", has=page.locator("label", has_text=re.compile(r"^show$"))) \
        .locator("select").select_option("features.4")
    expect(activation).not_to_have_attribute("src", act_off, timeout=WAIT_MS)


def test_the_hook_lab_fits_a_laptop_screen_and_every_control_shows(laptop):
    from playwright.sync_api import expect

    assert_no_errors(laptop)
    run_cell(laptop, PANEL_CELL)  # a fresh live panel on a fresh model
    panel = laptop.locator(".hooktutor-panel").filter(has_text="HookPanel: SmallCNN")
    expect(panel.locator(".hooktutor-mode select")).to_have_count(8)
    wait_idle(laptop)
    shot(panel, "hook-lab")
    assert_nothing_cut_off(panel, "the hook lab")

    loss = panel.locator(".hooktutor-loss")
    table = panel.locator(".hooktutor-table")
    activation = panel.locator(".hooktutor-activation img")
    gradients = panel.locator(".hooktutor-gradients img")
    status = panel.locator(".hooktutor-panel-status")

    def shown() -> tuple:
        return (loss.inner_text(), table.inner_text(), activation.get_attribute("src"),
                gradients.get_attribute("src"), status.inner_text())

    def changes(action, what: str) -> None:
        before = shown()
        action()
        assert changed(shown, before), f"{what} changed nothing shown"
        wait_idle(laptop)

    def labelled(cls: str, label: str):
        return panel.locator(cls, has=laptop.locator("label", has_text=re.compile(rf"^{re.escape(label)}$")))

    mode = lambda layer: labelled(".hooktutor-mode", layer).locator("select")  # noqa: E731
    changes(lambda: mode("features.0").select_option("scale"), "a mode dropdown")
    changes(lambda: panel.locator(".hooktutor-scale input[type=range], .hooktutor-scale .noUi-handle")
            .first.focus() or laptop.keyboard.press("ArrowRight"), "the scale slider")
    changes(lambda: mode("features.0").select_option("off"), "a mode dropdown back to off")
    changes(lambda: labelled(".widget-dropdown", "show").locator("select").select_option("features.4"),
            "the layer shown")
    changes(lambda: panel.get_by_role("button", name="feature maps").click(), "histogram / feature maps")
    inplace = panel.locator(".hooktutor-inplace input[type=checkbox]")
    for store in ("a copy (clone)", "output.detach()"):
        if store == "output.detach()":
            changes(lambda: panel.get_by_role("button", name=store).click(), "the stored kind")
        changes(lambda: inplace.click(), f"the in-place switch while the panel stores {store}")
        shot(panel, f"hook-lab-inplace-{'copy' if 'copy' in store else 'detach'}")
        assert_nothing_cut_off(panel, "the hook lab")
        changes(lambda: inplace.click(), f"the in-place switch back, storing {store}")
