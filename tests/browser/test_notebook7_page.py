"""A hook_toggle in Notebook 7 (the ``/notebooks/`` page of the same Jupyter server): clicking
its checkbox attaches the hook and redraws the page within a second, as in JupyterLab.

The widgets fill their ``Output`` widgets from the kernel (never ``with out:``), so the update
must reach a Notebook 7 page the same way. The notebook is the one of
``test_hook_toggle_page.py`` (a SmallCNN, a hook_toggle on ``features.0``, and the probe
button of ``conftest.py`` that prints ``list_hooks`` from the kernel).
"""

from __future__ import annotations

import pytest

from .conftest import CURRENT, Probe, assert_no_errors, open_notebook, run_all, unavailable, write_notebook
from .test_hook_toggle_page import CELLS, HOOK

pytestmark = pytest.mark.browser


@pytest.fixture
def notebook7():
    """The ``notebook`` package (7 or later) adds the ``/notebooks/`` page to the server."""
    try:
        import notebook
    except ImportError:
        unavailable("the notebook package (Notebook 7, installed with nbgrader) is missing")
    if int(notebook.__version__.split(".")[0]) < 7:
        unavailable(f"notebook {notebook.__version__} is installed, not Notebook 7")


@pytest.mark.usefixtures("notebook7")
def test_notebook7_clicking_the_checkbox_attaches_the_hook_and_redraws_within_a_second(page, lab):
    from playwright.sync_api import expect

    open_notebook(page, lab, write_notebook(lab, "toggle_notebook7.ipynb", CELLS), app="notebook")
    expect(page.locator("#main-panel " + CURRENT)).to_have_count(1)  # Notebook 7's shell, not Lab's
    expect(page.locator("#jp-main-dock-panel")).to_have_count(0)
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
    expect(checkbox).to_be_checked()
    assert probe() == [HOOK], "the kernel has exactly the hook the page says"

    checkbox.click()
    expect(status).to_contain_text("(0 hooks on features.0)", timeout=1_000)
    expect(picture).to_have_attribute("src", src_off, timeout=1_000)  # the same picture as before
    expect(status).to_have_text(text_off)
    expect(checkbox).not_to_be_checked()
    assert probe() == []
