"""A hook_toggle in JupyterLab: clicking its checkbox attaches the hook and redraws the page.

The notebook is generated here (a SmallCNN, a hook_toggle on ``features.0``, and the probe
button of ``conftest.py`` that prints ``list_hooks`` from the kernel).
"""

from __future__ import annotations

import pytest

from .conftest import PROBE, Probe, assert_no_errors, open_notebook, run_all, write_notebook

pytestmark = pytest.mark.browser

CELLS = [
    """\
from hooktutor.data import shapes
from hooktutor.models import SmallCNN
from hooktutor.widgets import hook_toggle

cnn = SmallCNN(seed=0)
images, labels = shapes(32, seed=1)""",
    """\
toggle = hook_toggle(cnn, images, "features.0", mode="scale", scale=3.0, targets=labels)
toggle""",
    PROBE.format(model="cnn"),
]

HOOK = ("features.0", "forward", "hook_toggle:SmallCNN:features.0.scale(x3)")


def test_clicking_the_checkbox_attaches_the_hook_and_redraws_the_view_within_a_second(page, lab):
    from playwright.sync_api import expect

    open_notebook(page, lab, write_notebook(lab, "toggle_demo.ipynb", CELLS))
    run_all(page)
    assert_no_errors(page)
    probe = Probe(page)
    widget = page.locator(".hooktutor-hook-toggle")
    checkbox = widget.locator(".hooktutor-toggle input[type=checkbox]")
    status = widget.locator(".hooktutor-status")
    picture = widget.locator(".hooktutor-view img")
    expect(status).to_contain_text("hook off · loss ")
    expect(status).to_contain_text("(0 hooks on features.0)")
    expect(checkbox).not_to_be_checked()
    src_off, text_off = picture.get_attribute("src"), status.text_content()
    assert src_off.startswith("data:image/png")
    assert probe() == []

    checkbox.click()  # the real checkbox on the page
    expect(picture).not_to_have_attribute("src", src_off, timeout=1_000)
    expect(status).to_contain_text("(1 hook on features.0)", timeout=1_000)
    expect(status).to_contain_text("hook on · loss ")
    assert status.text_content() != text_off
    assert probe() == [HOOK], "the kernel has exactly the hook the page says"

    checkbox.click()
    expect(status).to_contain_text("(0 hooks on features.0)", timeout=1_000)
    expect(picture).to_have_attribute("src", src_off, timeout=1_000)  # the same picture as before
    expect(status).to_have_text(text_off)
    assert probe() == []
