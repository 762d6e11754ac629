"""A hook_toggle in JupyterLab: clicking its checkbox attaches the hook and redraws the page.

The notebook is generated here (a SmallCNN, a hook_toggle on ``features.0``, and the probe
button of ``conftest.py`` that prints ``list_hooks`` from the kernel).
"""

from __future__ import annotations

import pytest

from .conftest import PROBE, assert_no_errors, assert_toggle_round_trip, open_notebook, run_all, write_notebook

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


def test_clicking_the_checkbox_attaches_the_hook_and_redraws_the_view(page, lab):
    open_notebook(page, lab, write_notebook(lab, "toggle_demo.ipynb", CELLS))
    run_all(page)
    assert_no_errors(page)
    assert_toggle_round_trip(page, HOOK)
