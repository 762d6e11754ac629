"""The live widgets, driven from Python the way a click drives them (no browser, no kernel).

Setting ``toggle.value`` (or ``panel.set_mode``) calls the widget's observer synchronously,
exactly as a click in JupyterLab does, so everything a learner sees can be asserted here:
which hooks are attached (``hooktutor.list_hooks``), what the views show (the Output
widgets' ``outputs``, the PNG bytes, the status/loss text) and what the hooks do to the loss
and the gradients, recomputed by hand. The browser tests (``tests/browser/``) check that the
page really shows it.
"""

from __future__ import annotations

import ast
import base64
import copy
import html
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import hooktutor as ht
from hooktutor import UnknownLayerError, list_hooks
from hooktutor.models import MLP, SmallCNN, inplace_modules
from hooktutor.widgets import MODES, close_all, hook_toggle, inplace_switch

WIDGETS_DIR = Path(ht.__file__).resolve().parent / "widgets"

try:  # the full panel (06_hook_lab.ipynb) is optional until it exists
    from hooktutor.widgets import HookPanel
except ImportError:
    HookPanel = None

needs_panel = pytest.mark.skipif(HookPanel is None, reason="hooktutor.widgets.HookPanel is not written yet")


# -- fixtures and helpers ------------------------------------------------------------------

@pytest.fixture(autouse=True)
def _close_widgets():
    """Every test starts and ends with no live widget (widgets are registered by name)."""
    close_all()
    yield
    close_all()


@pytest.fixture
def mlp():
    x, y = ht.data.blobs(32, seed=0)
    return MLP(seed=0), x, y


@pytest.fixture
def cnn():
    x, y = ht.data.shapes(32, seed=0)
    return SmallCNN(seed=0), x, y


def png_of(out) -> bytes:
    """The PNG an Output widget shows (it must show exactly one picture)."""
    assert len(out.outputs) == 1, out.outputs
    data = out.outputs[0].get("data", {})
    assert "image/png" in data, f"the view shows no picture: {out.outputs}"
    return base64.b64decode(data["image/png"])


def text_of(out) -> str:
    """The text an Output widget shows (one stream or one text/plain display)."""
    assert len(out.outputs) == 1, out.outputs
    o = out.outputs[0]
    return o["text"] if o["output_type"] == "stream" else o["data"]["text/plain"]


def plain_text(html_text: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", html_text))


def hooks_on(model, path=None):
    table = list_hooks(model)
    return table if path is None else table.where(path=path)


def state(model):
    """Every parameter, buffer and ``.grad`` of ``model``: what a widget must leave alone."""
    return ({k: v.detach().clone() for k, v in model.state_dict().items()},
            [None if p.grad is None else p.grad.clone() for p in model.parameters()])


def assert_same_state(model, before):
    params, grads = before
    now_params, now_grads = state(model)
    for k in params:
        assert torch.equal(params[k], now_params[k]), f"the widget changed {k}"
    assert all(g is None for g in now_grads) == all(g is None for g in grads)


def by_hand_cnn(model, x, layer_index: int, factor: float):
    """SmallCNN's logits with ``features[layer_index]``'s output multiplied by ``factor``."""
    h = x
    for i, layer in enumerate(model.features):
        h = layer.forward(h)  # .forward: no hook fires
        if i == layer_index:
            h = h * factor
    return model.classifier.forward(model.pool.forward(h).flatten(1))


# -- hook_toggle: attaching and detaching -----------------------------------------------

@pytest.mark.parametrize("which, layer", [("mlp", "fc1"), ("mlp", "head"), ("cnn", "features.0"),
                                          ("cnn", "classifier")])
@pytest.mark.parametrize("mode", ["observe", "zero", "scale", "scale_grad"])
def test_a_click_attaches_exactly_one_forward_hook_and_the_next_removes_it(request, which, layer, mode):
    model, x, y = request.getfixturevalue(which)
    toggle = hook_toggle(model, x, layer, mode=mode, targets=y)
    assert len(hooks_on(model)) == 0, "a new toggle starts unticked, with no hook"
    assert toggle.value is False
    for _ in range(2):  # on, off, on, off: never more than one hook
        toggle.value = True
        rows = hooks_on(model)
        assert len(rows) == 1, rows
        assert (rows[0].path, rows[0].kind) == (layer, "forward")
        assert rows[0].function.startswith(toggle.name), "the hook is named after its widget"
        assert mode in rows[0].function
        assert "(1 hook on" in plain_text(toggle.status.value)
        toggle.value = False
        assert len(hooks_on(model)) == 0
        assert "(0 hooks on" in plain_text(toggle.status.value)


def test_the_hook_count_shown_is_the_count_on_the_layer_including_hooks_from_elsewhere(mlp):
    model, x, y = mlp
    toggle = hook_toggle(model, x, "fc1", targets=y)
    handle = model.fc1.register_forward_hook(lambda m, a, o: None)
    try:
        toggle.value = True
        assert "(2 hooks on fc1)" in plain_text(toggle.status.value)
        toggle.value = False
        assert "(1 hook on fc1)" in plain_text(toggle.status.value)
        assert len(hooks_on(model)) == 1, "the toggle removes only its own hook"
    finally:
        handle.remove()


# -- hook_toggle: the views ---------------------------------------------------------------

@pytest.mark.parametrize("which, layer", [("mlp", "fc2"), ("cnn", "features.4")])
def test_every_click_redraws_the_picture_and_the_status_line(request, which, layer):
    model, x, y = request.getfixturevalue(which)
    toggle = hook_toggle(model, x, layer, mode="scale", scale=3.0, targets=y)
    off_png, off_text = png_of(toggle.out), toggle.loss_text
    assert off_text.startswith("hook off · loss ")
    toggle.value = True
    on_png, on_text = png_of(toggle.out), toggle.loss_text
    assert on_png != off_png, "the histogram must change when the hook scales the layer's output"
    assert on_text.startswith("hook on · loss ") and on_text != off_text
    assert html.escape(on_text) in toggle.status.value
    toggle.value = False
    assert png_of(toggle.out) == off_png, "switching off shows exactly the picture of before"
    assert toggle.loss_text == off_text
    assert len(toggle.out.outputs) == 1, "the view is replaced, never appended to"


def test_the_view_replaces_its_output_instead_of_appending(mlp):
    model, x, y = mlp
    toggle = hook_toggle(model, x, "fc1", targets=y)
    for i in range(6):
        toggle.value = i % 2 == 0
        assert len(toggle.out.outputs) == 1


@pytest.mark.parametrize("which, layer, before", [("mlp", "fc2", ["fc1", "act1"]),
                                                  ("cnn", "features.4", ["features.0", "features.1",
                                                                         "features.2", "features.3"])])
def test_gradients_view_shows_that_zeroing_a_layer_stops_the_gradient_before_it(request, which, layer, before):
    model, x, y = request.getfixturevalue(which)
    toggle = hook_toggle(model, x, layer, mode="zero", targets=y, view="gradients")
    off_png = png_of(toggle.out)
    assert all(toggle.snapshot.grad_norms[n] > 0 for n in before)
    toggle.value = True
    assert png_of(toggle.out) != off_png
    assert all(toggle.snapshot.grad_norms[n] == 0 for n in before), toggle.snapshot.grad_norms
    toggle.value = False
    assert png_of(toggle.out) == off_png


def test_loss_view_compares_the_loss_with_and_without_the_hook(mlp):
    model, x, y = mlp
    toggle = hook_toggle(model, x, "fc1", mode="zero", targets=y, view="loss")
    off_loss = toggle.snapshot.loss
    off = text_of(toggle.out)
    assert off.startswith("loss without the hook") and f"{off_loss:.4f}" in off
    assert off not in toggle.status.value  # the view does not repeat the status line
    toggle.value = True
    on = text_of(toggle.out)
    assert f"{toggle.snapshot.loss:.4f}" in on and f"without it: {off_loss:.4f}" in on
    assert f"change {toggle.snapshot.loss - off_loss:+.4f}" in on
    toggle.close()


def test_views_are_filled_from_the_kernel_and_nothing_is_printed(mlp, capsys):
    # With `with out:` a plain Python process (no IPython kernel) would print to stdout and
    # leave out.outputs empty; the widgets set out.outputs directly instead.
    model, x, y = mlp
    toggle = hook_toggle(model, x, "fc1", targets=y)
    toggle.value = True
    toggle.value = False
    assert toggle.out.outputs and png_of(toggle.out)[:4] == b"\x89PNG"
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""


def test_no_widget_module_uses_with_out():
    offenders = []
    for path in sorted(WIDGETS_DIR.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.With, ast.AsyncWith)):
                for item in node.items:
                    src = ast.unparse(item.context_expr)
                    if re.search(r"(^|\.)(out|output|view)\w*$", src, re.IGNORECASE):
                        offenders.append(f"{path.name}:{node.lineno}: with {src}:")
    assert not offenders, "Output widgets must be filled with out.outputs = ..., not `with out:`:\n" + \
        "\n".join(offenders)


# -- hook_toggle: what the hooks do, checked by hand ---------------------------------------

def test_zero_and_scale_change_the_loss_exactly_as_computed_by_hand_on_the_mlp(mlp):
    model, x, y = mlp
    with torch.no_grad():
        plain = F.cross_entropy(model(x), y).item()
        zeroed = F.cross_entropy(model.head(model.act2(model.fc2(model.act1(model.fc1(x) * 0)))), y).item()
        halved = F.cross_entropy(model.head(model.act2(model.fc2(model.act1(model.fc1(x))) * 0.5)), y).item()
    zero = hook_toggle(model, x, "fc1", mode="zero", targets=y)
    scale = hook_toggle(model, x, "act2", mode="scale", scale=0.5, targets=y)
    assert zero.snapshot.loss == pytest.approx(plain, abs=1e-6)
    zero.value = True
    assert zero.snapshot.loss == pytest.approx(zeroed, abs=1e-6)
    assert f"loss {zeroed:.4f} (cross-entropy)" in zero.loss_text
    zero.value = False
    scale.value = True
    assert scale.snapshot.loss == pytest.approx(halved, abs=1e-6)
    scale.value = False
    assert scale.snapshot.loss == pytest.approx(plain, abs=1e-6)


@pytest.mark.parametrize("index, mode, factor", [(4, "zero", 0.0), (4, "scale", 0.5), (5, "scale", 2.0)])
def test_zero_and_scale_change_the_loss_exactly_as_computed_by_hand_on_the_cnn(cnn, index, mode, factor):
    model, x, y = cnn
    reference = copy.deepcopy(model)
    with torch.no_grad():
        expected = F.cross_entropy(by_hand_cnn(reference, x, index, factor), y).item()
    toggle = hook_toggle(model, x, f"features.{index}", mode=mode, scale=factor if mode == "scale" else 2.0,
                         targets=y)
    toggle.value = True
    assert toggle.snapshot.loss == pytest.approx(expected, abs=1e-5)
    assert toggle.snapshot.output is not None
    assert f"loss {expected:.4f}" in toggle.loss_text


def test_observe_changes_nothing_but_reports_what_it_saw(mlp):
    model, x, y = mlp
    toggle = hook_toggle(model, x, "fc1", mode="observe", targets=y)
    off_loss = toggle.snapshot.loss
    toggle.value = True
    assert toggle.snapshot.loss == off_loss
    with torch.no_grad():
        expected_mean = float(model.fc1(x).mean())
    assert f"observed mean {expected_mean:.4f}" in toggle.loss_text
    toggle.value = False
    assert "observed" not in toggle.loss_text


def grads_by_hand(model, x, y, params):
    return torch.autograd.grad(F.cross_entropy(model(x), y), params)


def test_scale_grad_scales_the_gradient_of_the_layer_and_everything_before_it_on_the_mlp(mlp):
    model, x, y = mlp
    params = [model.fc1.weight, model.fc2.weight, model.fc2.bias, model.head.weight]
    toggle = hook_toggle(model, x, "fc2", mode="scale_grad", scale=3.0, targets=y)
    g_off = grads_by_hand(model, x, y, params)
    toggle.value = True
    g_on = grads_by_hand(model, x, y, params)
    for before, after in zip(g_off[:3], g_on[:3]):  # fc1 and fc2 feed into the hooked output
        torch.testing.assert_close(after, 3.0 * before)
    torch.testing.assert_close(g_on[3], g_off[3])  # the head comes after it: unchanged
    with torch.no_grad():
        assert toggle.snapshot.loss == pytest.approx(F.cross_entropy(model(x), y).item(), abs=1e-6), \
            "scale_grad leaves the forward pass (and the loss) alone"
    toggle.value = False
    for before, after in zip(g_off, grads_by_hand(model, x, y, params)):
        torch.testing.assert_close(after, before)


def test_scale_grad_survives_a_layer_output_whose_gradient_is_none():
    """The layer's output is one half of a chunk and the loss uses the other half: its tensor
    hook is called with grad=None (lesson 01) and must return None, not crash backward()."""
    from hooktutor.widgets._modes import make_hook

    class FirstHalf(torch.nn.Module):
        def forward(self, x):
            first, self.second = x.chunk(2, dim=-1)
            return first

    layer = FirstHalf()
    x = torch.randn(3, 4, requires_grad=True)
    with layer.register_forward_hook(make_hook("scale_grad", 3.0, "test", "half")):
        layer(x)
        layer.second.square().mean().backward()
    assert torch.equal(x.grad[:, :2], torch.zeros(3, 2))      # no gradient reached the unused half
    assert torch.allclose(x.grad[:, 2:], 2 * x.detach()[:, 2:] / 6)


def test_scale_grad_on_the_cnn_scales_the_gradient_flow_view(cnn):
    model, x, y = cnn
    toggle = hook_toggle(model, x, "features.4", mode="scale_grad", scale=0.25, targets=y, view="gradients")
    norms_off, png_off = dict(toggle.snapshot.grad_norms), png_of(toggle.out)
    (w_off,) = grads_by_hand(model, x, y, [model.features[0].weight])
    toggle.value = True
    norms_on = toggle.snapshot.grad_norms
    (w_on,) = grads_by_hand(model, x, y, [model.features[0].weight])
    torch.testing.assert_close(w_on, 0.25 * w_off, rtol=1e-4, atol=1e-7)
    for name in ("features.0", "features.1", "features.2", "features.3"):
        assert norms_on[name] == pytest.approx(0.25 * norms_off[name], rel=1e-4), name
    for name in ("features.5", "pool", "classifier"):
        assert norms_on[name] == pytest.approx(norms_off[name], rel=1e-6), name
    assert png_of(toggle.out) != png_off


@pytest.mark.parametrize("which, layer", [("mlp", "fc1"), ("cnn", "features.1")])
def test_toggling_leaves_weights_buffers_and_grads_alone(request, which, layer):
    model, x, y = request.getfixturevalue(which)
    before = state(model)  # SmallCNN's BatchNorm running statistics included
    toggle = hook_toggle(model, x, layer, mode="scale", targets=y, view="gradients")
    for on in (True, False, True):
        toggle.value = on
    toggle.close()
    assert_same_state(model, before)
    assert all(p.grad is None for p in model.parameters())


def test_the_loss_is_loss_fn_then_cross_entropy_for_labels_then_the_sum_of_the_output(mlp):
    model, x, y = mlp
    with torch.no_grad():
        out = model(x)
    plain = hook_toggle(model, x, "fc1", name="a")
    assert plain.snapshot.loss == pytest.approx(out.sum().item(), rel=1e-5)
    assert "(sum of output)" in plain.loss_text
    labels = hook_toggle(model, x, "fc1", targets=y, name="b")
    assert labels.snapshot.loss == pytest.approx(F.cross_entropy(out, y).item(), abs=1e-6)

    def half_mse(output, target):
        return 0.5 * F.mse_loss(output, target)

    wanted = torch.ones(32, 3)
    custom = hook_toggle(model, x, "fc1", targets=wanted, loss_fn=half_mse, name="c")
    assert custom.snapshot.loss == pytest.approx(half_mse(out, wanted).item(), abs=1e-6)
    assert "(half_mse)" in custom.loss_text


def test_a_model_with_two_inputs_works_and_a_model_returning_a_tuple_shows_the_error():
    model = ht.models.TwoInputNet(seed=0)
    a, b = torch.randn(4, 2, generator=torch.Generator().manual_seed(0)), torch.ones(4, 2)
    toggle = hook_toggle(model, (a, b), "mix", mode="zero", view="loss")
    toggle.value = True
    assert toggle.snapshot.loss == pytest.approx(float((10 * b).sum()), abs=1e-5)  # mix(a) zeroed
    assert len(hooks_on(model)) == 1

    class TwoOutputs(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(2, 2)

        def forward(self, x):
            return self.fc(x), x

    bad = TwoOutputs()
    shown = hook_toggle(bad, a, "fc", name="bad")  # no exception escapes a click or the display
    assert text_of(shown.out) == "TypeError: the widgets need a model that returns one tensor, got tuple"
    assert "error: TypeError" in shown.loss_text
    shown.value = True
    assert len(hooks_on(bad)) == 1 and "error: TypeError" in shown.loss_text


# -- hook_toggle: re-running the cell, closing ---------------------------------------------

def test_recreating_a_toggle_replaces_the_old_one_and_its_hook(mlp):
    model, x, y = mlp
    first = hook_toggle(model, x, "fc1", targets=y)
    first.value = True
    second = hook_toggle(model, x, "fc1", targets=y)  # the same cell run again
    assert first.closed and len(hooks_on(model)) == 0
    second.value = True
    assert len(hooks_on(model)) == 1
    first.value = True  # the old checkbox is dead: it attaches nothing
    assert len(hooks_on(model)) == 1
    third = hook_toggle(MLP(seed=0), x, "fc1", targets=y)  # a rebuilt model, same cell
    assert second.closed and len(hooks_on(model)) == 0
    third.close()


def test_recreating_under_an_explicit_name_replaces_and_different_names_coexist(mlp):
    model, x, y = mlp
    a = hook_toggle(model, x, "fc1", name="demo")
    a.value = True
    b = hook_toggle(model, x, "fc2", name="demo")
    b.value = True
    assert [r.path for r in hooks_on(model)] == ["fc2"]
    c = hook_toggle(model, x, "fc1", mode="observe", name="other")
    c.value = True
    assert sorted(r.path for r in hooks_on(model)) == ["fc1", "fc2"]
    assert close_all() == 2
    assert len(hooks_on(model)) == 0


def test_close_removes_the_hook_and_can_be_called_twice(cnn):
    model, x, y = cnn
    toggle = hook_toggle(model, x, "features.0", targets=y)
    toggle.value = True
    toggle.close()
    assert len(hooks_on(model)) == 0 and toggle.closed
    toggle.close()
    toggle.value = True  # a closed widget does nothing
    assert len(hooks_on(model)) == 0


def test_a_closed_widget_keeps_its_last_picture_on_the_page(cnn):
    """A lesson's clean-up cell closes its widget: what the widget showed must stay (Run All
    used to leave the "Try it live" output blank), with its controls off and a closed note."""
    from hooktutor.widgets._base import CLOSED_NOTE

    model, x, y = cnn
    toggle = hook_toggle(model, x, "features.0", targets=y)
    toggle.value = True
    picture = toggle.out.outputs
    toggle.close()
    assert toggle.widget.comm is not None and toggle.out.comm is not None, "the views stay on the page"
    assert toggle.out.outputs == picture and picture, "the last picture stays"
    assert toggle.checkbox.disabled
    assert CLOSED_NOTE in toggle.widget.children[-1].value


def test_a_failed_creation_leaves_the_working_widget_of_that_name_alone(mlp):
    model, x, y = mlp
    toggle = hook_toggle(model, x, "fc1", targets=y)
    toggle.value = True
    with pytest.raises(UnknownLayerError):
        hook_toggle(model, x, "fc_1", targets=y)
    assert not toggle.closed and len(hooks_on(model, "fc1")) == 1


# -- hook_toggle: errors and repr -----------------------------------------------------------

def test_a_misspelt_layer_raises_unknown_layer_error_with_a_suggestion(mlp, cnn):
    model, x, y = mlp
    with pytest.raises(UnknownLayerError, match=r"'fc_1' is not a module of MLP; did you mean 'fc1'"):
        hook_toggle(model, x, "fc_1")
    cnn_model, cx, _ = cnn
    with pytest.raises(UnknownLayerError, match=r"did you mean 'features\.0'"):
        hook_toggle(cnn_model, cx, "feature.0")
    with pytest.raises(UnknownLayerError, match=r"did you mean 'features\.1'"):
        inplace_switch(cnn_model, cx, "features1")
    assert len(hooks_on(model)) == 0 and len(hooks_on(cnn_model)) == 0


@pytest.mark.parametrize("kwargs, error, message", [
    ({"mode": "double"}, ValueError,
     r"unknown hook mode 'double'; use one of 'observe', 'zero', 'scale', 'scale_grad'"),
    ({"mode": "off"}, ValueError, r"unknown hook mode 'off'"),
    ({"view": "heatmap"}, ValueError, r"unknown view 'heatmap'; use one of 'histogram', 'gradients', 'loss'"),
    ({"scale": "2"}, TypeError, r"scale must be a number such as 0\.5 or 2\.0, got str"),
    ({"scale": True}, TypeError, r"scale must be a number"),
])
def test_a_wrong_mode_view_or_scale_says_what_to_use(mlp, kwargs, error, message):
    model, x, y = mlp
    with pytest.raises(error, match=message):
        hook_toggle(model, x, "fc1", **kwargs)
    assert len(hooks_on(model)) == 0


def test_a_model_that_is_not_a_module_is_refused(mlp):
    _, x, _ = mlp
    with pytest.raises(TypeError, match="needs a torch.nn.Module"):
        hook_toggle(MLP, x, "fc1")


def test_text_repr_is_short_deterministic_and_follows_the_state(mlp):
    model, x, y = mlp
    toggle = hook_toggle(model, x, "fc1", mode="zero", targets=y)
    assert repr(toggle) == "HookToggle(fc1, mode='zero', off)"
    bundle = toggle._repr_mimebundle_()
    assert bundle["text/plain"] == "HookToggle(fc1, mode='zero', off)"
    assert "application/vnd.jupyter.widget-view+json" in bundle, "in Lab it renders as a live widget"
    toggle.value = True
    assert repr(toggle) == toggle._repr_mimebundle_()["text/plain"] == "HookToggle(fc1, mode='zero', on)"
    again = hook_toggle(MLP(seed=0), x, "fc1", mode="zero", targets=y)  # a fresh run of the cell
    assert repr(again) == "HookToggle(fc1, mode='zero', off)"
    assert not re.search(r"0x[0-9a-f]+|\d{5,}", repr(again))


# -- inplace_switch ---------------------------------------------------------------------------

def test_inplace_switch_flips_every_relu_and_shows_the_corrupted_stored_activation(cnn):
    model, x, _ = cnn
    switch = inplace_switch(model, x, "features.1")
    assert repr(switch) == "InplaceSwitch(features.1, inplace=off)"
    off_png, off_status = png_of(switch.out), plain_text(switch.status.value)
    assert "ReLUs in place: no" in off_status and "full backward hook: works" in off_status
    assert not switch.outcome.corrupted and switch.outcome.stored_negative > 0.2
    switch.value = True
    assert inplace_modules(model) == ["features.2", "features.5"]
    on_status = plain_text(switch.status.value)
    assert "ReLUs in place: yes" in on_status
    # torch 2.13 says "BackwardHookFunction", torch 2.1 "BackwardHookFunctionBackward"
    assert re.search(r"Output 0 of BackwardHookFunction(Backward)? is a view and is being modified inplace",
                     on_status)
    assert switch.outcome.corrupted and switch.outcome.stored_negative == 0 and switch.outcome.stored_min == 0
    assert switch.outcome.true_negative > 0.2, "a clone taken at the same moment keeps its negatives"
    assert png_of(switch.out) != off_png
    assert repr(switch) == "InplaceSwitch(features.1, inplace=on)"
    assert len(hooks_on(model)) == 0, "its two hooks are removed before each redraw"
    switch.value = False
    assert inplace_modules(model) == [] and png_of(switch.out) == off_png


def test_inplace_switch_close_restores_the_flags_and_leaves_no_hooks(cnn):
    model, x, _ = cnn
    switch = inplace_switch(model, x)
    switch.value = True
    switch.close()
    assert inplace_modules(model) == [] and len(hooks_on(model)) == 0
    born_inplace = SmallCNN(inplace=True, seed=0)
    other = inplace_switch(born_inplace, x)
    assert other.value is True
    other.value = False
    assert inplace_modules(born_inplace) == []
    other.close()
    assert inplace_modules(born_inplace) == ["features.2", "features.5"]


def test_recreating_an_inplace_switch_restores_the_flags_first(cnn):
    model, x, _ = cnn
    first = inplace_switch(model, x)
    first.value = True
    second = inplace_switch(model, x)  # the cell run again
    assert first.closed and second.value is False and inplace_modules(model) == []
    second.close()
    assert inplace_modules(model) == []


def test_after_the_switch_the_layer_takes_any_kind_of_backward_hook(cnn):
    model, x, y = cnn
    switch = inplace_switch(model, x, "features.1")
    switch.value = True  # the full backward hook failed here
    switch.value = False
    layer = model.features[1]
    assert layer._backward_hooks == {} and len(hooks_on(model)) == 0
    seen = []
    handle = layer.register_full_backward_hook(lambda m, gi, go: seen.append(go[0].shape))
    try:
        F.cross_entropy(model(x), y).backward()
    finally:
        handle.remove()
    assert seen == [torch.Size([32, 8, 16, 16])]
    assert all(p.grad is not None for p in model.parameters())


def test_inplace_switch_needs_a_module_with_an_inplace_flag():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh())
    with pytest.raises(ValueError, match="has no module with an `inplace` switch"):
        inplace_switch(model, torch.zeros(2, 4), "0")


def test_inplace_switch_leaves_weights_and_buffers_alone(cnn):
    model, x, _ = cnn
    before = state(model)
    switch = inplace_switch(model, x)
    switch.value = True
    switch.value = False
    switch.close()
    assert_same_state(model, before)


# -- HookPanel (06_hook_lab.ipynb) --------------------------------------------------------------

def test_modes_are_the_documented_ones():
    assert MODES == ("off", "observe", "zero", "scale", "scale_grad")


@pytest.fixture
def cnn_panel(cnn):
    model, x, y = cnn
    return HookPanel(model, x, y, name="test-panel"), model, x, y


def table_rows(panel) -> list[tuple[str, str, str]]:
    """The rows of the hook table the panel shows (its HTML), as (module, kind, function)."""
    body = re.findall(r"<tbody>(.*?)</tbody>", panel.table_html.value, re.S)
    rows = re.findall(r"<tr>(.*?)</tr>", body[0], re.S) if body else []
    return [tuple(html.unescape(c) for c in re.findall(r"<td>(.*?)</td>", r, re.S)[:3]) for r in rows]


def rows_of(table) -> list[tuple[str, str, str]]:
    return [(r.path, r.kind, r.function) for r in table]


@needs_panel
def test_panel_has_one_mode_dropdown_per_layer_with_every_mode(cnn_panel):
    panel, model, _, _ = cnn_panel
    leaves = [n for n, m in model.named_modules() if n and not list(m.children())]
    assert list(panel.selectors) == leaves
    for layer, dd in panel.selectors.items():
        assert dd.description == layer
        assert tuple(dd.options) == MODES and dd.value == "off"
        assert "hooktutor-mode" in dd._dom_classes
    assert len(hooks_on(model)) == 0 and table_rows(panel) == []
    assert "0 hooks attached" in panel.table_html.value


@needs_panel
def test_choosing_a_mode_in_the_dropdown_attaches_the_hook_and_updates_the_table(cnn_panel):
    panel, model, _, _ = cnn_panel
    loss_before, text_before = panel.snapshot.loss, plain_text(panel.loss_html.value)
    panel.selectors["features.0"].value = "observe"  # what choosing it on the page does
    assert rows_of(hooks_on(model)) == [("features.0", "forward", "test-panel.observe")]
    assert table_rows(panel) == rows_of(list_hooks(model)) == rows_of(panel.table)
    assert panel.snapshot.loss == loss_before, "observe changes nothing"
    assert plain_text(panel.loss_html.value) != text_before, "the status names the observed layer"
    assert "features.0=observe" in plain_text(panel.loss_html.value)
    panel.selectors["features.4"].value = "zero"
    assert sorted(table_rows(panel)) == sorted(rows_of(list_hooks(model)))
    assert len(table_rows(panel)) == 2
    panel.selectors["features.0"].value = "off"
    panel.selectors["features.4"].value = "off"
    assert len(hooks_on(model)) == 0 and table_rows(panel) == []
    assert panel.snapshot.loss == loss_before


@needs_panel
def test_switching_modes_replaces_the_hook_instead_of_adding_one(cnn_panel):
    panel, model, _, _ = cnn_panel
    for mode in ("observe", "zero", "scale", "scale_grad", "zero"):
        panel.set_mode("features.4", mode)
        assert len(hooks_on(model)) == 1
        assert table_rows(panel)[0][2].startswith(f"test-panel.{mode}")
    assert repr(panel) == "HookPanel(SmallCNN, 8 layers, 1 hooks on)" or \
        repr(panel) == "HookPanel(SmallCNN, 8 layers, 1 hook on)"


@needs_panel
def test_panel_views_redraw_on_every_change(cnn_panel):
    panel, model, _, _ = cnn_panel
    act, grads, loss = png_of(panel.act_out), png_of(panel.grad_out), plain_text(panel.loss_html.value)
    panel.set_mode("features.0", "scale", scale=0.5)  # the layer the activation view shows
    assert png_of(panel.act_out) != act
    assert png_of(panel.grad_out) != grads
    assert plain_text(panel.loss_html.value) != loss
    assert "scale x0.5 (on features.0)" in plain_text(panel.loss_html.value)
    panel.set_mode("features.0", "off")
    assert png_of(panel.act_out) == act and png_of(panel.grad_out) == grads
    # the same loss line as at the start; the slider stays at 0.5, and the status says so
    assert plain_text(panel.loss_html.value) == loss.replace("scale x2 ", "scale x0.5 ")
    panel.show_layer.value = "features.4"  # the layer selector of the activation view
    hist = png_of(panel.act_out)
    assert hist != act
    panel.show_kind.value = "feature maps"
    assert png_of(panel.act_out) != hist
    for out in (panel.act_out, panel.grad_out):
        assert len(out.outputs) == 1


@needs_panel
@pytest.mark.parametrize("index, mode, factor", [(4, "zero", 0.0), (1, "scale", 0.5), (5, "scale", 2.0)])
def test_panel_zero_and_scale_change_the_loss_as_computed_by_hand(cnn_panel, index, mode, factor):
    panel, model, x, y = cnn_panel
    reference = copy.deepcopy(model)
    with torch.no_grad():
        expected = F.cross_entropy(by_hand_cnn(reference, x, index, factor), y).item()
    panel.set_mode(f"features.{index}", mode, scale=factor if mode == "scale" else None)
    assert panel.snapshot.loss == pytest.approx(expected, abs=1e-5)
    assert f"loss {expected:.4f} (cross-entropy)" in panel.loss_text


@needs_panel
def test_panel_scale_grad_scales_the_gradient_as_autograd_grad_shows(cnn_panel):
    panel, model, x, y = cnn_panel
    params = [model.features[0].weight, model.features[4].weight, model.classifier.weight]
    g_off, norms_off, loss_off = grads_by_hand(model, x, y, params), dict(panel.snapshot.grad_norms), \
        panel.snapshot.loss
    panel.set_mode("features.4", "scale_grad", scale=2.0)
    g_on = grads_by_hand(model, x, y, params)
    torch.testing.assert_close(g_on[0], 2.0 * g_off[0], rtol=1e-4, atol=1e-7)
    torch.testing.assert_close(g_on[1], 2.0 * g_off[1], rtol=1e-4, atol=1e-7)
    torch.testing.assert_close(g_on[2], g_off[2])
    assert panel.snapshot.loss == loss_off
    for name in panel.layers:
        expected = 2.0 if name in {f"features.{i}" for i in range(5)} else 1.0
        assert panel.snapshot.grad_norms[name] == pytest.approx(expected * norms_off[name], rel=1e-4), name


@needs_panel
def test_panel_on_the_mlp(mlp):
    model, x, y = mlp
    panel = HookPanel(model, x, y, name="test-mlp")
    assert list(panel.selectors) == ["fc1", "act1", "fc2", "act2", "head"]
    with torch.no_grad():
        expected = F.cross_entropy(model.head(model.act2(model.fc2(model.act1(model.fc1(x)) * 0))), y).item()
    panel.set_mode("act1", "zero")
    assert panel.snapshot.loss == pytest.approx(expected, abs=1e-6)
    assert panel.snapshot.grad_norms["fc1"] == 0 and panel.snapshot.grad_norms["head"] > 0
    assert table_rows(panel) == rows_of(list_hooks(model)) == [("act1", "forward", "test-mlp.zero")]
    panel.close()
    assert len(hooks_on(model)) == 0


@needs_panel
def test_panel_layers_argument_limits_the_dropdowns(mlp):
    model, x, y = mlp
    panel = HookPanel(model, x, y, layers=["fc1", "head"], name="test-mlp")
    assert list(panel.selectors) == ["fc1", "head"]
    with pytest.raises(UnknownLayerError, match="did you mean 'fc2'"):
        HookPanel(model, x, y, layers=["fc_2"], name="test-mlp")
    assert not panel.closed, "a failed panel does not close the working one of that name"


@needs_panel
def test_recreating_a_panel_replaces_it_and_close_removes_every_hook(cnn):
    model, x, y = cnn
    first = HookPanel(model, x, y, name="lab")
    first.set_mode("features.0", "zero")
    first.set_mode("features.4", "scale_grad")
    assert len(hooks_on(model)) == 2
    second = HookPanel(model, x, y, name="lab")  # the cell run again
    assert first.closed and len(hooks_on(model)) == 0
    first.selectors["features.0"].value = "observe"  # a dead panel attaches nothing
    assert len(hooks_on(model)) == 0
    second.set_mode("classifier", "observe")
    other = HookPanel(MLP(seed=0), *ht.data.blobs(8, seed=0), name="lab-mlp")  # another name: both live
    other.set_mode("fc1", "zero")
    assert len(hooks_on(model)) == 1 and len(hooks_on(other.model)) == 1
    second.close()
    second.close()
    assert len(hooks_on(model)) == 0 and len(hooks_on(other.model)) == 1
    other.close()
    assert len(hooks_on(other.model)) == 0


@needs_panel
def test_panel_close_restores_the_inplace_flags(cnn_panel):
    panel, model, _, _ = cnn_panel
    panel.set_inplace(True)
    panel.set_mode("features.1", "observe")
    assert inplace_modules(model) == ["features.2", "features.5"]
    panel.show_layer.value = "features.1"
    panel.store.value = "output.detach()"
    assert float(panel.shown_activation.min()) == 0.0, "the in-place ReLU overwrote the kept tensor"
    panel.close()
    assert inplace_modules(model) == [] and len(hooks_on(model)) == 0


@needs_panel
def test_panel_reset_switches_everything_off_and_shows_the_first_views_again(cnn_panel):
    panel, model, _, _ = cnn_panel
    act, grads, loss = png_of(panel.act_out), png_of(panel.grad_out), panel.loss_text
    panel.set_mode("features.0", "zero")
    panel.set_mode("classifier", "scale", scale=0.5)
    panel.set_inplace(True)
    panel.show_layer.value = "features.4"
    panel.reset()
    assert len(hooks_on(model)) == 0 and set(panel.modes.values()) == {"off"}
    assert inplace_modules(model) == [] and panel.show_layer.value == "features.0"
    assert (png_of(panel.act_out), png_of(panel.grad_out), panel.loss_text) == (act, grads, loss)


@needs_panel
def test_panel_leaves_weights_buffers_and_grads_alone(cnn_panel):
    panel, model, _, _ = cnn_panel
    before = state(model)
    for mode in ("zero", "scale", "scale_grad", "off"):
        panel.set_mode("features.1", mode)
    panel.close()
    assert_same_state(model, before)
    assert all(p.grad is None for p in model.parameters())


@needs_panel
def test_panel_errors_say_what_was_wrong(cnn_panel):
    panel, model, _, _ = cnn_panel
    with pytest.raises(UnknownLayerError, match=r"'features\.9' is not a module of SmallCNN; did you mean"):
        panel.set_mode("features.9", "zero")
    with pytest.raises(ValueError, match=r"'features' is not one of this panel's layers: features\.0"):
        panel.set_mode("features", "zero")
    with pytest.raises(ValueError, match=r"unknown hook mode 'zap'; use one of 'off', 'observe'"):
        panel.set_mode("features.0", "zap")
    with pytest.raises(TypeError, match="scale must be a number"):
        panel.set_mode("features.0", "scale", scale="big")
    with pytest.raises(TypeError, match="needs a torch.nn.Module"):
        HookPanel("model", None)
    assert len(hooks_on(model)) == 0 and all(m == "off" for m in panel.modes.values())


@needs_panel
@pytest.mark.parametrize("scale", [10.0, -1.0])
def test_panel_never_silently_uses_another_scale_than_asked(cnn_panel, scale):
    # set_mode(..., scale=s) must either use s or refuse it with an error; the scale slider
    # (0 to 4) must not quietly clamp it.
    panel, model, x, y = cnn_panel
    reference = copy.deepcopy(model)
    with torch.no_grad():
        expected = F.cross_entropy(by_hand_cnn(reference, x, 5, scale), y).item()
    try:
        panel.set_mode("features.5", "scale", scale=scale)
    except (ValueError, TypeError):
        return
    assert panel.snapshot.loss == pytest.approx(expected, abs=1e-5), \
        f"asked for scale {scale}, the hook uses {panel.scale_slider.value}"


@needs_panel
def test_panel_text_repr_is_short_and_deterministic(cnn):
    model, x, y = cnn
    panel = HookPanel(model, x, y, name="lab")
    assert repr(panel) == panel._repr_mimebundle_()["text/plain"] == "HookPanel(SmallCNN, 8 layers, 0 hooks on)"
    assert "application/vnd.jupyter.widget-view+json" in panel._repr_mimebundle_()
    again = HookPanel(SmallCNN(seed=0), x, y, name="lab")
    assert repr(again) == "HookPanel(SmallCNN, 8 layers, 0 hooks on)"


# -- the latency benchmark measures real work ----------------------------------------------------

def test_the_latency_benchmark_toggles_every_widget_and_each_toggle_redraws():
    import importlib.util

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "widget_latency.py"
    spec = importlib.util.spec_from_file_location("widget_latency", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    cases = bench._cases()
    assert any(label.startswith("hook_toggle") for label, _ in cases)
    assert any(label.startswith("HookPanel") for label, _ in cases) == (HookPanel is not None)
    for _label, make in cases:
        flip, redrawn, close = make()
        try:
            samples = bench._time_toggles(flip, redrawn, repeats=2, warmup=0)  # raises if nothing redrew
        finally:
            close()
        assert len(samples) == 2 and all(s > 0 for s in samples)
    rows = [("b", 50.0, 60.0), ("a", 120.0, 130.0)]
    text = bench.table(rows, quick=True)
    assert re.search(r"median.*?(\d+(?:\.\d+)?)\s*ms", text).group(1) == "50.0"  # what benchmarks/run.py reads
    assert "goal met: NO" in text


@needs_panel
@pytest.mark.parametrize("store", ["a copy (clone)", "output.detach()"])
def test_panel_inplace_switch_says_what_changed_in_every_store_mode(cnn_panel, store):
    """Ticking "ReLUs in place" changes what the page shows whatever the view stores: the
    status line counts the in-place ReLUs and says what happened to a copy and to a stored
    ``output.detach()`` of the layer shown (features.1, a BatchNorm before a ReLU)."""
    panel, model, _, _ = cnn_panel
    panel.set_inplace(False)
    panel.show_layer.value = "features.1"
    panel.store.value = store
    off_text, off_png = plain_text(panel.inplace_html.value), png_of(panel.act_out)
    total = len(panel._original_inplace)
    assert f"in place: 0 of {total} ReLUs (inplace=False)" in off_text
    panel.set_inplace(True)
    on_text = plain_text(panel.inplace_html.value)
    assert on_text != off_text and panel.inplace_text == on_text.strip()
    assert f"in place: {total} of {total} ReLUs (inplace=True)" in on_text
    if store == "a copy (clone)":
        assert "the copy of features.1 shown is unaffected" in on_text
        assert "a stored output.detach() would now be overwritten (negatives 0%)" in on_text
        assert png_of(panel.act_out) == off_png  # the copy really is unaffected
        assert "would be intact too" in off_text
    else:
        assert "the output.detach() of features.1 shown is overwritten in place (negatives 0%" in on_text
        assert png_of(panel.act_out) != off_png
        assert "the output.detach() of features.1 shown is intact" in off_text
    panel.set_inplace(False)
    assert plain_text(panel.inplace_html.value) == off_text
    assert repr(panel) == "HookPanel(SmallCNN, 8 layers, 0 hooks on)"  # the stored text/plain repr


@needs_panel
def test_panel_scale_slider_shows_its_value_even_with_no_scale_mode_on(cnn_panel):
    panel, _, _, _ = cnn_panel
    before = plain_text(panel.loss_html.value)
    assert "scale x2 (used by the scale and scale_grad modes)" in before
    panel.scale_slider.value = 3.0
    assert "scale x3 (used by the scale and scale_grad modes)" in plain_text(panel.loss_html.value)


def test_panel_without_inplace_modules_has_an_empty_inplace_status():
    pytest.importorskip("ipywidgets")
    from hooktutor.widgets import HookPanel

    net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))
    panel = HookPanel(net, torch.randn(5, 4), name="test-no-inplace")
    try:
        assert panel.inplace_box is None and panel.inplace_html.value == "" and panel.inplace_text == ""
    finally:
        panel.close()


def test_the_histograms_draw_a_layer_whose_output_holds_inf_or_nan():
    """A hook that scales by a huge factor, or a model that diverged, leaves inf or nan in a
    layer's output: the hook lab's histogram (and the static one) draws the finite values and
    counts the others in its title, where numpy's histogram would refuse the range."""
    from hooktutor import plots

    values = torch.tensor([1.0, float("inf"), -2.0, float("nan"), 0.0])
    live = plots.LiveHistogram()
    assert live.png(values, "features.0").startswith(b"\x89PNG")
    assert live.title.get_text() == "features.0\nmin -2.00, zeros 33%, 2 inf/nan"
    assert live.png(torch.tensor([float("inf")])).startswith(b"\x89PNG")
    assert plots.histogram(values).axes[0].get_title() == "activations  (min -2.00, zeros 33%, 2 inf/nan)"
    assert plots.histogram(torch.tensor([float("nan")])).axes[0].get_title() == "activations  (1 inf/nan)"
    live.png(torch.tensor([1.0, 2.0]))
    assert "inf/nan" not in live.title.get_text()   # said only where there are some
