"""Every widget's pictures are legible in JupyterLab at a laptop size (1366x768), and the
HookPanel shows what a control changes without scrolling.

One generated notebook holds a widget of each kind (hook_toggle with its histogram and its
gradients view, inplace_switch, ema_toggle, saved_tensors_toggle, patch_picker, HookPanel);
its last cell prints, from the kernel, the smallest text of each picture in pixels of the PNG
(``PngView.text_px()``: the figure's smallest font size in points times dpi / 72). The page
gives each image's scale (its displayed width over its natural width); their product is the
height of the smallest text on screen, which must be at least 12 px and at least the
notebook's code font. Screenshots go to test-artifacts/ (legible-*.png).
"""

from __future__ import annotations

import json
import re
import time

import pytest

from .conftest import (
    ARTIFACTS,
    CURRENT,
    assert_no_errors,
    fresh_page,
    open_notebook,
    run_all,
    wait_idle,
    write_notebook,
)

pytestmark = pytest.mark.browser

LAPTOP = {"width": 1366, "height": 768}
LEGIBLE_PX = 12.0

SETUP = """\
import json

import hooktutor as ht
from hooktutor.widgets import (HookPanel, ema_toggle, hook_toggle, inplace_switch, patch_picker,
                               saved_tensors_toggle)

x, y = ht.data.shapes(32, seed=1)
xs, ys = ht.data.blobs(96, seed=0)
clean = ht.data.first_token(64, seed=1)[0]"""

# (name, the cell that makes the widget, the expression listing its views, the widget's CSS class)
WIDGETS = [
    ("hook_toggle-histogram", 'w_hist = hook_toggle(ht.models.SmallCNN(seed=0), x, "features.0", mode="zero", '
                              'targets=y)\nw_hist', "[w_hist._view]", "hooktutor-hook-toggle"),
    ("hook_toggle-gradients", 'w_grad = hook_toggle(ht.models.MLP(seed=0), xs, "fc1", mode="scale_grad", '
                              'scale=10.0, targets=ys)\nw_grad', "[w_grad._view]", "hooktutor-hook-toggle"),
    ("inplace_switch", 'w_inplace = inplace_switch(ht.models.SmallCNN(seed=0), x, "features.1")\nw_inplace',
     "[w_inplace._view]", "hooktutor-inplace-switch"),
    ("ema_toggle", "w_ema = ema_toggle(ht.models.MLP(seed=0), *ht.data.blobs(32, seed=0, spread=2.0))\nw_ema",
     "[w_ema._view]", "hooktutor-ema-toggle"),
    ("saved_tensors_toggle", "w_saved = saved_tensors_toggle(ht.models.deep_mlp(depth=4, width=64, seed=0), "
                             "*ht.data.blobs(32, seed=0))\nw_saved", "[w_saved._view]", "hooktutor-saved-toggle"),
    ("patch_picker", "w_patch = patch_picker(ht.models.TinyTransformer(seed=0), clean, "
                     "ht.data.corrupt_first(clean, seed=1), ['embed', 'blocks.0', 'blocks.1'])\nw_patch",
     "[w_patch._view]", "hooktutor-patch-picker"),
    ("HookPanel", "w_panel = HookPanel(ht.models.SmallCNN(seed=0), x, y, name='legible-panel')\nw_panel",
     "[w_panel._act_view, w_panel._grad_view]", "hooktutor-panel"),
]
REPORT = "print('TEXT_PX ' + json.dumps({{{}}}))".format(
    ", ".join(f"{name!r}: [v.text_px() for v in {views}]" for name, _, views, _ in WIDGETS))

# the part of the notebook on screen: its scrolling area, cut to the window
VISIBLE = f"""() => {{
    const r = document.querySelector('{CURRENT} .jp-WindowedPanel-outer').getBoundingClientRect();
    return {{top: Math.max(r.top, 0), bottom: Math.min(r.bottom, window.innerHeight),
             left: Math.max(r.left, 0), right: Math.min(r.right, window.innerWidth)}};
}}"""
IMAGES = """(root) => [...root.querySelectorAll('.hooktutor-view img, .hooktutor-activation img, '
                                           + '.hooktutor-gradients img')].map(img => {
    const r = img.getBoundingClientRect();
    return {natural: [img.naturalWidth, img.naturalHeight], shown: [r.width, r.height]};
})"""


@pytest.fixture
def laptop(browser, lab, request):
    """A fresh page at 1366x768 on a server with no kernel running."""
    yield from fresh_page(browser, lab, request, LAPTOP, prefix="legible-")


def shot(locator, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    locator.scroll_into_view_if_needed()
    locator.screenshot(path=str(ARTIFACTS / f"legible-{name}.png"))


def box(locator) -> dict:
    return locator.evaluate("el => { const r = el.getBoundingClientRect(); "
                            "return {top: r.top, bottom: r.bottom, left: r.left, right: r.right}; }")


def assert_on_screen(page, parts: dict, after: str) -> None:
    """Each of ``parts`` (name: locator) lies inside the notebook's visible area."""
    view = page.evaluate(VISIBLE)
    off = {}
    for name, locator in parts.items():
        for i in range(locator.count()):
            b = box(locator.nth(i))
            if b["top"] < view["top"] - 1 or b["bottom"] > view["bottom"] + 1 \
                    or b["left"] < view["left"] - 1 or b["right"] > view["right"] + 1:
                off[f"{name}[{i}]"] = b
    assert not off, f"after {after}, off screen at 1366x768 (visible area {view}): {off}"


def test_every_widget_picture_is_legible_and_the_panel_shows_what_changes(laptop, lab):
    from playwright.sync_api import expect

    cells = [SETUP, *(cell for _, cell, _, _ in WIDGETS), REPORT]
    open_notebook(laptop, lab, write_notebook(lab, "legible.ipynb", cells))
    run_all(laptop)
    assert_no_errors(laptop)
    code_cells = laptop.locator(CURRENT + " .jp-CodeCell")
    report = code_cells.nth(len(cells) - 1).locator(".jp-OutputArea-output").inner_text()
    text_px = json.loads(re.search(r"TEXT_PX (.*)", report).group(1))
    code_px = float(laptop.locator(CURRENT + " .jp-CodeCell .cm-content").first.evaluate(
        "el => parseFloat(getComputedStyle(el).fontSize)"))
    needed = max(LEGIBLE_PX, code_px)

    measured = {}
    for index, (name, _, _, css) in enumerate(WIDGETS):
        widget = code_cells.nth(1 + index).locator(f".{css}")
        expect(widget).to_have_count(1)
        images = widget.evaluate(IMAGES)
        assert len(images) == len(text_px[name]) >= 1, (name, images, text_px[name])
        for image, px in zip(images, text_px[name]):
            (nw, nh), (w, h) = image["natural"], image["shown"]
            assert nw > 0 and nh > 0, f"{name}: an image did not load"
            scale = w / nw
            assert abs(h / nh - scale) < 0.02, f"{name}: the image is stretched: {image}"
            on_screen = px * scale
            measured[name] = min(measured.get(name, on_screen), on_screen)
            assert on_screen >= needed, (
                f"{name}: the smallest text of a {nw}x{nh} picture is {px:.1f} px in the PNG, shown at "
                f"{scale:.2f}x: {on_screen:.1f} px on screen, less than {needed:.0f} px (the code font is "
                f"{code_px:.0f} px)")
        shot(widget, name)
    print("smallest text on screen, px:", {k: round(v, 1) for k, v in measured.items()})

    # The HookPanel: scrolled so that its top is at the top of the notebook, as a learner who
    # reached it would have it, every control leaves what it changes on screen. A learner's
    # first click in the panel makes its cell the active one, which Lab keeps in place while
    # outputs grow (scroll anchoring); select_option() does not click, so click the panel's title.
    panel = code_cells.nth(len(WIDGETS)).locator(".hooktutor-panel")
    panel.evaluate("el => el.scrollIntoView({block: 'start'})")
    panel.get_by_text("hook on each layer").click()
    view = laptop.evaluate(VISIBLE)
    assert box(panel)["bottom"] - box(panel)["top"] <= view["bottom"] - view["top"], \
        "the HookPanel is taller than the notebook's area at 1366x768"
    loss = panel.locator(".hooktutor-loss")
    table = panel.locator(".hooktutor-table")
    charts = panel.locator(".hooktutor-activation img, .hooktutor-gradients img")

    def mode(layer: str):
        label = laptop.locator("label", has_text=re.compile(rf"^{re.escape(layer)}$"))
        return panel.locator(".hooktutor-mode", has=label).locator("select")

    status = panel.locator(".hooktutor-panel-status")
    activation = panel.locator(".hooktutor-activation img")

    def act(action, control, what: str, shown) -> None:
        """Do ``action``, wait until ``shown()`` changes, then check that the parts are on screen."""
        before = shown()
        action()
        deadline = time.monotonic() + 15  # generous: only a page that never redraws fails
        while shown() == before:
            assert time.monotonic() < deadline, f"{what} changed nothing shown"
            time.sleep(0.05)
        wait_idle(laptop)
        assert_on_screen(laptop, {"the control": control, "the loss": loss, "the hook table": table,
                                  "a chart": charts}, what)

    # every layer's hook on, one after the other: the hook table grows to its longest
    layers = ["features.0", "features.1", "features.2", "features.3", "features.4", "features.5", "pool",
              "classifier"]
    for layer, choice in zip(layers, ["zero", "observe", "scale", "observe", "scale_grad", "observe", "observe",
                                      "scale_grad"]):
        act(lambda: mode(layer).select_option(choice), mode(layer), f"{layer} -> {choice}",
            lambda: loss.inner_text() + table.inner_text())
    inplace = panel.locator(".hooktutor-inplace input[type=checkbox]")
    act(lambda: inplace.click(), inplace, "the in-place switch", status.inner_text)
    feature_maps = panel.get_by_role("button", name="feature maps")
    act(lambda: feature_maps.click(), feature_maps, "feature maps", lambda: activation.get_attribute("src"))
    ARTIFACTS.mkdir(exist_ok=True)
    laptop.screenshot(path=str(ARTIFACTS / "legible-HookPanel-screen.png"))  # the whole window, after the clicks
    expect(table).to_contain_text("8 hooks attached")
