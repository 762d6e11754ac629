"""The hook lab (``notebooks/06_hook_lab.ipynb``) in JupyterLab: choosing a mode in a panel's
dropdown attaches the hook, and the page shows it within a second: the pictures, the loss
line and the hook table, which must agree with ``list_hooks`` in the kernel (asked through
the probe button of ``conftest.py``, appended to the copy of the notebook)."""

from __future__ import annotations

import re

import pytest

from .conftest import (
    PROBE,
    ROOT,
    Probe,
    assert_no_errors,
    copy_notebook,
    open_notebook,
    run_all,
    run_cell,
    wait_idle,
)

pytestmark = pytest.mark.browser

LAB = ROOT / "notebooks" / "06_hook_lab.ipynb"
PANEL_CELL = "cnn_panel = HookPanel("


@pytest.mark.skipif(not LAB.exists(), reason="notebooks/06_hook_lab.ipynb is not written yet")
def test_choosing_modes_in_the_panel_attaches_hooks_and_redraws_within_a_second(page, lab):
    from playwright.sync_api import expect

    open_notebook(page, lab, copy_notebook(lab, LAB, extra_cells=[PROBE.format(model="cnn")]))
    run_all(page)
    assert_no_errors(page)
    # The lesson's last cell closes its panels (no hook may outlive a lesson); run the
    # panel's cell again, as a learner would, for a live panel.
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
    expect(rows).to_have_count(1, timeout=1_000)
    expect(loss).not_to_have_text(loss_off, timeout=1_000)
    expect(loss).to_contain_text("features.0=observe")
    assert shown_rows() == [("features.0", "forward", "lab-cnn.observe")] == probe()

    # zero on the layer the activation view shows: every view changes
    mode("features.0").select_option("zero")
    expect(activation).not_to_have_attribute("src", act_off, timeout=1_000)
    expect(gradients).not_to_have_attribute("src", grad_off, timeout=1_000)
    expect(rows.first).to_contain_text("lab-cnn.zero", timeout=1_000)
    expect(loss).to_contain_text("features.0=zero")
    assert shown_rows() == [("features.0", "forward", "lab-cnn.zero")] == probe()

    # a second layer: two rows
    mode("features.4").select_option("scale_grad")
    expect(rows).to_have_count(2, timeout=1_000)
    assert sorted(shown_rows()) == sorted(probe()) == [("features.0", "forward", "lab-cnn.zero"),
                                                      ("features.4", "forward", "lab-cnn.scale_grad(x2)")]

    # off again: the hooks are gone and the page shows exactly what it showed before
    mode("features.4").select_option("off")
    expect(rows).to_have_count(1, timeout=1_000)
    mode("features.0").select_option("off")
    expect(rows).to_have_count(0, timeout=1_000)
    expect(table).to_contain_text("0 hooks attached to SmallCNN")
    expect(activation).to_have_attribute("src", act_off, timeout=1_000)
    expect(gradients).to_have_attribute("src", grad_off, timeout=1_000)
    expect(loss).to_have_text(loss_off, timeout=1_000)
    assert probe() == []

    # the layer selector of the activation view
    panel.locator(".widget-dropdown", has=page.locator("label", has_text=re.compile(r"^show$"))) \
        .locator("select").select_option("features.4")
    expect(activation).not_to_have_attribute("src", act_off, timeout=1_000)
