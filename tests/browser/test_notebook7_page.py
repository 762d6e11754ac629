"""A hook_toggle in Notebook 7 (the ``/notebooks/`` page of the same Jupyter server): clicking
its checkbox attaches the hook and redraws the page, as in JupyterLab.

The widgets fill their ``Output`` widgets from the kernel (never ``with out:``), so the update
must reach a Notebook 7 page the same way. The notebook is the one of
``test_hook_toggle_page.py`` (a SmallCNN, a hook_toggle on ``features.0``, and the probe
button of ``conftest.py`` that prints ``list_hooks`` from the kernel).
"""

from __future__ import annotations

import pytest

from .conftest import (
    CURRENT,
    assert_no_errors,
    assert_toggle_round_trip,
    open_notebook,
    run_all,
    unavailable,
    write_notebook,
)
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
def test_notebook7_clicking_the_checkbox_attaches_the_hook_and_redraws(page, lab):
    from playwright.sync_api import expect

    open_notebook(page, lab, write_notebook(lab, "toggle_notebook7.ipynb", CELLS), app="notebook")
    expect(page.locator("#main-panel " + CURRENT)).to_have_count(1)  # Notebook 7's shell, not Lab's
    expect(page.locator("#jp-main-dock-panel")).to_have_count(0)
    run_all(page)
    assert_no_errors(page)
    assert_toggle_round_trip(page, HOOK)
