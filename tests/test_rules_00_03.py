"""The general rules of lessons 00-03, each checked on a set-up other than the lesson's own
(another layer kind, a loss other than `sum`, checkpointing, a nested module, another dtype).
A rule that breaks here is scoped in the lesson instead (review r00-03)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
from torch.utils.checkpoint import checkpoint

from hooktutor.models import seeded

# -- lesson 00 -------------------------------------------------------------------------------


def test_nothing_deduplicates_hooks_of_any_kind():
    """00: "nothing de-duplicates hooks, not even the same function": every kind, not only a
    forward hook."""
    with seeded(0):
        conv = nn.Conv2d(1, 2, 3)
    calls = []

    def note(*_):
        calls.append(1)

    x = torch.randn(1, 1, 5, 5, requires_grad=True)
    handles = []
    for _ in range(2):
        handles += [conv.register_forward_pre_hook(note), conv.register_full_backward_hook(note),
                    conv.weight.register_hook(note), conv.weight.register_post_accumulate_grad_hook(note),
                    register_module_forward_pre_hook(note)]
    try:
        F.mse_loss(conv(x), torch.zeros(1, 2, 3, 3)).backward()
    finally:
        for h in handles:
            h.remove()
    assert len(calls) == 5 * 2


# -- lesson 01 -------------------------------------------------------------------------------


def test_a_leaf_hook_sees_the_old_grad_and_hooks_chain_in_order_on_a_float64_conv_weight():
    with seeded(0):
        conv = nn.Conv2d(1, 2, 3).double()
    x = torch.randn(2, 1, 5, 5, dtype=torch.float64)
    seen = []

    def first(grad):
        seen.append(("first", conv.weight.grad is None))
        return grad + 1

    def second(grad):
        seen.append(("second", conv.weight.grad is None))
        return grad * 10

    F.mse_loss(conv(x), torch.zeros(2, 2, 3, 3, dtype=torch.float64)).backward()
    plain = conv.weight.grad.clone()
    conv.weight.grad = None
    with conv.weight.register_hook(first), conv.weight.register_hook(second):
        F.mse_loss(conv(x), torch.zeros(2, 2, 3, 3, dtype=torch.float64)).backward()
    assert seen == [("first", True), ("second", True)]        # before .grad is filled in
    assert torch.allclose(conv.weight.grad, (plain + 1) * 10)  # add one, then times ten


@pytest.mark.parametrize("split", ["chunk", "split", "unbind"])
def test_the_unused_output_of_a_multi_output_op_gets_none(split):
    """01 section 2 names chunk, split and unbind; the lesson's cell runs chunk."""
    x = torch.arange(4.0, requires_grad=True)
    parts = {"chunk": lambda t: t.chunk(2), "split": lambda t: t.split(2),
             "unbind": lambda t: t.view(2, 2).unbind()}[split](x * 1)
    received = []
    with parts[1].register_hook(lambda grad: received.append(grad)):
        F.mse_loss(parts[0], torch.zeros(2)).backward()
    assert received == [None]


def test_a_tensor_used_twice_gets_one_call_under_a_mean_loss_and_non_reentrant_checkpoint():
    """01 section 7: one call with the summed gradient; only a *reentrant* checkpoint splits it."""
    with seeded(0):
        lin = nn.Linear(3, 3)
    x = torch.randn(4, 3, requires_grad=True)
    for use_reentrant, calls_expected in ((False, 1), (True, 2)):
        calls = []
        with lin.weight.register_hook(lambda grad: calls.append(grad.clone())):
            out = checkpoint(lambda t: torch.tanh(lin(t)), x, use_reentrant=use_reentrant)
            (out.mean() + lin(x).pow(2).mean()).backward()   # the weight used inside and outside
        assert len(calls) == calls_expected, use_reentrant
    lin.weight.grad = None
    (torch.tanh(lin(x)).mean() + lin(x).pow(2).mean()).backward()
    assert torch.allclose(sum(calls), lin.weight.grad)        # the two parts add up to the gradient


def test_retain_grad_holds_the_changed_gradient_in_either_order_float64_mean_loss():
    for retain_first in (True, False):
        x = torch.tensor([1.0, -2.0, 3.0], dtype=torch.float64, requires_grad=True)
        h = torch.sigmoid(x)
        if retain_first:
            h.retain_grad()
        handle = h.register_hook(lambda grad: grad * 3)
        if not retain_first:
            h.retain_grad()
        (h ** 2).mean().backward()
        handle.remove()
        assert torch.allclose(h.grad, 3 * 2 * h.detach() / 3)


def test_post_accumulate_hook_sees_what_the_tensor_hooks_returned_on_a_bias_under_cross_entropy():
    with seeded(0):
        lin = nn.Linear(4, 3)
    x, y = torch.randn(5, 4), torch.tensor([0, 1, 2, 0, 1])
    F.cross_entropy(lin(x), y).backward()
    plain = lin.bias.grad.clone()
    lin.bias.grad = None
    seen = []
    with lin.bias.register_hook(lambda grad: grad * 2), \
            lin.bias.register_post_accumulate_grad_hook(lambda p: seen.append(p.grad.clone())):
        F.cross_entropy(lin(x), y).backward()
    assert len(seen) == 1 and torch.allclose(seen[0], 2 * plain)


# -- lesson 02 -------------------------------------------------------------------------------


def test_hook_order_on_a_nested_conv_block_global_first_pre_hooks_before_forward_hooks():
    with seeded(0):
        block = nn.Sequential(nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU()))
    conv, order = block[0][0], []
    handles = [conv.register_forward_hook(lambda *a: order.append("forward 1")),
               conv.register_forward_pre_hook(lambda *a: order.append("pre 1")),
               conv.register_forward_hook(lambda *a: order.append("forward 0"), prepend=True),
               conv.register_forward_pre_hook(lambda *a: order.append("pre 0"), prepend=True),
               register_module_forward_pre_hook(
                   lambda m, a: order.append("global pre") if m is conv else None),
               register_module_forward_hook(
                   lambda m, a, o: order.append("global forward") if m is conv else None)]
    try:
        block(torch.randn(1, 1, 5, 5))
    finally:
        for h in handles:
            h.remove()
    assert order == ["global pre", "pre 0", "pre 1", "global forward", "forward 0", "forward 1"]


@pytest.mark.parametrize("mode", ["eval", "no_grad", "inference_mode"])
def test_forward_hooks_fire_in_eval_no_grad_and_inference_mode_on_an_lstm(mode):
    with seeded(0):
        lstm = nn.LSTM(3, 2, batch_first=True)
    fired = []
    ctx = {"eval": torch.enable_grad, "no_grad": torch.no_grad, "inference_mode": torch.inference_mode}[mode]
    if mode == "eval":
        lstm.eval()
    with lstm.register_forward_hook(lambda m, a, o: fired.append(type(o).__name__)), ctx():
        lstm(torch.randn(2, 4, 3))
    assert fired == ["tuple"]


# -- lesson 03 -------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_returning_a_new_tensor_never_breaks_backward_even_for_outputs_that_are_their_input(dtype):
    """03: "Returning a new tensor worked everywhere. That is the rule to keep", on the layers
    whose in-place edit breaks backward after a Sigmoid, and in other dtypes."""
    for layer in (nn.Identity(), nn.Dropout(0.5).eval(), nn.Flatten(), nn.Sigmoid(), nn.Softmax(dim=1)):
        with seeded(0):
            net = nn.Sequential(nn.Linear(3, 3), nn.Sigmoid(), layer).to(dtype)
        with layer.register_forward_hook(lambda m, a, o: o * 2):
            F.mse_loss(net(torch.ones(4, 3, dtype=dtype)), torch.zeros(4, 3, dtype=dtype)).backward()
        assert net[0].weight.grad is not None and net[0].weight.grad.dtype == dtype


def test_a_pre_hooks_single_value_becomes_a_one_tuple_on_a_module_with_a_default_argument():
    class Scaled(nn.Module):
        def forward(self, x, scale=1.0):
            return x * scale

    m, x = Scaled(), torch.ones(2)
    with m.register_forward_pre_hook(lambda mod, args: args[0] * 2):
        assert torch.equal(m(x, 5.0), x * 2)    # scale=5.0 was dropped: the default 1.0 ran


def test_a_hook_on_an_intermediate_output_scales_a_tied_downstream_weight_by_its_upstream_share():
    """01's claim verdict: "Parameters downstream (the head) are never affected" holds for a
    parameter used only downstream. A weight tied to an upstream layer (a language model's output
    layer sharing the embedding's weight) gets the upstream part of its gradient scaled."""
    with seeded(0):
        emb, mid = nn.Embedding(5, 4), nn.Linear(4, 4)
    tokens = torch.tensor([0, 3, 1])

    def weight_grad(scale=None):
        emb.weight.grad = None
        h = mid(emb(tokens))                       # the embedding weight is used upstream of h...
        handle = h.register_hook(lambda grad: grad * scale) if scale else None
        logits = F.linear(torch.tanh(h), emb.weight)   # ...and downstream, as the output layer
        F.cross_entropy(logits, torch.tensor([1, 2, 4])).backward()
        if handle is not None:
            handle.remove()
        return emb.weight.grad.clone()

    plain, hooked = weight_grad(), weight_grad(10.0)
    assert not torch.allclose(hooked, plain) and not torch.allclose(hooked, 10 * plain)
    head_only = nn.Linear(4, 5)                     # an untied head: never affected
    for scale in (None, 10.0):
        head_only.weight.grad = None
        h = mid(emb(tokens))
        handle = h.register_hook(lambda grad: grad * 10.0) if scale else None
        F.cross_entropy(head_only(torch.tanh(h)), torch.tensor([1, 2, 4])).backward()
        if handle is not None:
            handle.remove()
        if scale is None:
            untied = head_only.weight.grad.clone()
    assert torch.equal(head_only.weight.grad, untied)


# -- adv0003's read ---------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:Using a non-full backward hook:FutureWarning")
@pytest.mark.parametrize("kind, wraps", [("register_full_backward_hook", True),
                                         ("register_full_backward_pre_hook", True),
                                         ("register_backward_hook", False)])
def test_only_the_full_backward_hooks_wrap_the_output_a_forward_hook_saw(kind, wraps):
    """02 cell 8 (adv0003 O1): "a full backward hook or full backward pre-hook on the module ...
    wraps an output that requires grad in a new tensor (the legacy register_backward_hook wraps
    nothing)", on a Conv2d with a float64 input."""
    with seeded(0):
        conv = nn.Conv2d(2, 3, 3).double()
    seen = {}
    x = torch.ones(1, 2, 5, 5, dtype=torch.float64, requires_grad=True)
    with conv.register_forward_hook(lambda m, a, out: seen.update(out=out)), \
            getattr(conv, kind)(lambda *args: None):
        result = conv(x)
    assert (seen["out"] is not result) == wraps
    assert torch.equal(seen["out"], result)


@pytest.mark.parametrize("reentrant", [True, False])
def test_a_checkpointed_module_fires_its_forward_hooks_again_in_backward(reentrant):
    """02 cells 21 and the recap (adv0003 O2): the pre/forward pair of a container holds "in one
    forward"; a checkpointed block runs its hooks again during backward, after the root's forward
    hook. The non-reentrant checkpoint stops the rerun early: a pre-hook fires without its
    forward hook. On a nested Linear-Tanh block under a mean loss."""

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            with seeded(0):
                self.block = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
                self.head = nn.Linear(4, 1)

        def forward(self, x):
            return self.head(checkpoint(self.block, x, use_reentrant=reentrant))

    net, log = Net(), []
    handles = []
    for name, module in net.named_modules():
        name = name or "<root>"
        handles.append(module.register_forward_pre_hook(lambda m, a, name=name: log.append(f"pre {name}")))
        handles.append(module.register_forward_hook(lambda m, a, o, name=name: log.append(f"fwd {name}")))
    try:
        out = net(torch.ones(2, 4, requires_grad=True))
        in_forward = list(log)
        out.mean().backward()
    finally:
        for handle in handles:
            handle.remove()
    in_backward = log[len(in_forward):]
    assert in_forward[-1] == "fwd <root>" and in_forward.count("fwd block.0") == 1
    assert in_backward[:3] == ["pre block", "pre block.0", "fwd block.0"]
    if reentrant:
        assert in_backward == ["pre block", "pre block.0", "fwd block.0", "pre block.1", "fwd block.1",
                               "fwd block"]
    else:   # the early stop: block.1's pre-hook fires, its forward hook and block's do not
        assert in_backward[-1] == "pre block.1" and "fwd block" not in in_backward


@pytest.mark.parametrize("kind", ["register_module_full_backward_hook", "register_module_full_backward_pre_hook"])
def test_a_global_full_backward_hook_wraps_the_output_a_forward_hook_saw_too(kind):
    """02 cell 8 (the fresh review's F1): a global full backward (pre-)hook, on no module in
    particular, wraps every module's output that requires grad, as one on the module does."""
    import torch.nn.modules.module as module_hooks

    with seeded(0):
        layer = nn.Linear(3, 2)
    seen = {}
    with layer.register_forward_hook(lambda m, a, out: seen.update(out=out)), \
            getattr(module_hooks, kind)(lambda *args: None):
        result = layer(torch.ones(1, 3))
    assert seen["out"] is not result and torch.equal(seen["out"], result)


@pytest.mark.parametrize("reentrant", [True, False])
def test_a_checkpointed_module_that_saves_nothing_runs_again_only_under_the_reentrant_checkpoint(reentrant):
    """02 cell 21 and the recap (the fresh review's F3): the non-reentrant checkpoint reruns a module
    when backward needs a tensor it saved; `x * 2 + 1` saves none, so its hooks fire once; the
    reentrant one always reruns the block."""

    class Affine(nn.Module):
        def forward(self, x):
            return x * 2 + 1

    block, log = Affine(), []
    with block.register_forward_pre_hook(lambda m, a: log.append("pre")), \
            block.register_forward_hook(lambda m, a, o: log.append("fwd")):
        out = checkpoint(block, torch.ones(2, 3, requires_grad=True), use_reentrant=reentrant)
        out.pow(2).sum().backward()
    assert log == (["pre", "fwd"] * 2 if reentrant else ["pre", "fwd"])


@pytest.mark.parametrize("order", ["saver first", "saver last"])
def test_the_non_reentrant_checkpoint_reruns_every_module_before_the_last_saved_tensor(order):
    """02 cell 21 and the recap (the second fresh review's O1): the recomputation runs the block from
    its start and stops once the last tensor backward needs is saved again, so a module that saves
    nothing is run again when it comes before a layer that saves (its output is that layer's saved
    input), and not when it comes after every one."""

    class Affine(nn.Module):
        def forward(self, x):
            return x * 2 + 1

    torch.manual_seed(0)
    affine, linear = Affine(), nn.Linear(3, 3)
    block = nn.Sequential(linear, affine) if order == "saver first" else nn.Sequential(affine, linear)
    log = []
    with affine.register_forward_pre_hook(lambda m, a: log.append("pre")), \
            affine.register_forward_hook(lambda m, a, o: log.append("fwd")):
        out = checkpoint(block, torch.ones(2, 3, requires_grad=True), use_reentrant=False)
        out.pow(2).sum().backward()
    assert log == (["pre", "fwd"] if order == "saver first" else ["pre", "fwd"] * 2)


@pytest.mark.parametrize("loss", ["sum", "mean", "cross-entropy"])
@pytest.mark.parametrize("act", [nn.ReLU, nn.LeakyReLU, nn.GELU, nn.Identity, nn.Sigmoid, nn.Tanh])
def test_a_data_edit_gives_the_no_hook_gradients_where_no_backward_reads_the_edited_values(act, loss):
    """03 cell 24 and the recap (the second fresh review's O2): `output.data.mul_(3)` on the
    activation gives the gradients of the model without the hook when the activation's backward
    reads none of the edited values (ReLU: their signs only; LeakyReLU, GELU, Identity: their input)
    and the gradient reaching it does not depend on them (a sum or a mean through a linear head);
    a layer that saved its output (Sigmoid, Tanh), or cross-entropy, gives those of neither."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), act(), nn.Linear(6, 3))
    x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))

    def fc1_grad(hook=None):
        model.zero_grad()
        handle = model[1].register_forward_hook(hook) if hook else None
        try:
            out = model(x)
            {"sum": out.sum(), "mean": out.mean(), "cross-entropy": nn.functional.cross_entropy(out, y)}[
                loss].backward()
        finally:
            if handle:
                handle.remove()
        return model[0].weight.grad.clone()

    no_hook = fc1_grad()
    def edit_data(module, args, output):
        output.data.mul_(3)   # returns None: the output stays the tensor autograd knows

    edited = fc1_grad(edit_data)
    scaled = fc1_grad(lambda m, a, o: o * 3)
    same = torch.allclose(edited, no_hook)
    assert same == (act not in (nn.Sigmoid, nn.Tanh) and loss != "cross-entropy")
    if not same:
        assert not torch.allclose(edited, scaled)


def test_an_entry_rebound_in_a_container_output_takes_effect_without_a_return():
    """03 cell 69's verdict and the recap (the fresh review's F4): for a tensor output, rebinding a
    name does nothing; an output that is a dict or a list is changed by rebinding one of its
    entries, with None returned, as an in-place edit is; a ModelOutput too (lesson 12's outputs)."""
    from transformers.modeling_outputs import BaseModelOutput

    class Returns(nn.Module):
        def __init__(self, kind):
            super().__init__()
            self.kind = kind

        def forward(self, x):
            y = x * 2
            return {"y": y} if self.kind == "dict" else [y] if self.kind == "list" else BaseModelOutput(
                last_hidden_state=y)

    def zero_entry(module, args, output):
        if isinstance(output, list):
            output[0] = output[0] * 0
        elif isinstance(output, BaseModelOutput):
            output.last_hidden_state = output.last_hidden_state * 0
        else:
            output["y"] = output["y"] * 0   # returns None

    for kind in ("dict", "list", "ModelOutput"):
        module = Returns(kind)
        with module.register_forward_hook(zero_entry):
            out = module(torch.ones(2))
        value = out[0] if kind != "dict" else out["y"]
        assert torch.equal(value, torch.zeros(2)), kind

    def rebind_name(module, args, output):
        output = output * 0   # noqa: F841 - the mistake: a new tensor bound to the name, not returned

    layer = nn.Linear(2, 2)
    base = layer(torch.ones(2)).detach()
    with layer.register_forward_hook(rebind_name):
        assert torch.equal(layer(torch.ones(2)), base)   # nothing changes


def test_a_hook_added_during_a_modules_first_call_fires_in_its_second_call_of_the_same_forward():
    """02's recap (the fresh review's F2): a forward hook that adds another forward hook to its own
    module does not fire in that call, but does in the module's next call, in the same forward
    when the forward calls the module twice."""
    with seeded(0):
        shared = nn.Linear(3, 3)
    model, log, added = nn.Sequential(shared, nn.Tanh(), shared), [], []

    def add_one(module, args, output):
        log.append("orig")
        if not added:
            added.append(module.register_forward_hook(lambda m, a, o: log.append("added")))

    try:
        with shared.register_forward_hook(add_one):
            model(torch.ones(1, 3))
    finally:
        for handle in added:
            handle.remove()
    assert log == ["orig", "orig", "added"]


def test_the_unused_state_of_an_lstm_gets_no_hook_call_not_a_none():
    """01 cell 7 (the fresh review's F5): "one output of an operation" is one autograd node; an
    LSTM's c comes from another node than out, so with a loss on out a hook on c is never called."""
    with seeded(0):
        lstm = nn.LSTM(3, 4, batch_first=True)
    out, (h, c) = lstm(torch.ones(1, 2, 3))
    got = []
    c.register_hook(lambda grad: got.append(grad))
    out.sum().backward()
    assert got == [] and out.grad_fn is not c.grad_fn


@pytest.mark.parametrize("view", [True, False])
def test_a_hook_on_a_view_is_dropped_by_an_in_place_operation_on_the_view(view):
    """01 cell 14 (the fresh review's F6): on a tensor that is not a view, a hook registered before
    an in-place operation still runs (first the later hooks); on a view it never runs."""
    x = torch.ones(2, requires_grad=True)
    base = x * 1
    v = base[:] if view else base
    got = []
    v.register_hook(lambda grad: got.append(grad.clone()))
    v.mul_(2)
    v.sum().backward()
    assert (got == []) == view
    assert x.grad.tolist() == [2.0, 2.0]


def test_a_backward_hook_put_in_the_graph_inside_a_with_block_fires_after_it():
    """00 cell 12 (the third fresh read's O3): the handle's `with` block detaches the hook at its end,
    but a full backward hook that a forward inside the block put into the graph fires in a backward
    run after the block, with no hook left on the module."""
    torch.manual_seed(0)
    layer, fired = nn.Linear(3, 2), []
    x = torch.randn(4, 3, requires_grad=True)
    with layer.register_full_backward_hook(lambda m, gi, go: fired.append(1)):
        out = layer(x)
    assert not layer._backward_hooks
    out.sum().backward()
    assert fired == [1]


def test_a_late_hook_on_the_wrapper_torch_compile_returns_runs():
    """02's recap (the third fresh read's O2): a late hook on a layer is skipped, one on the wrapper
    that torch.compile returns runs: Python calls it around the compiled forward."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    compiled, fired = torch.compile(model, backend="eager"), []
    try:
        compiled(torch.ones(2, 4))
        with compiled.register_forward_hook(lambda m, a, o: fired.append("wrapper")), \
                model[0].register_forward_hook(lambda m, a, o: fired.append("layer")):
            compiled(torch.ones(2, 4))
    finally:
        torch._dynamo.reset()
    assert fired == ["wrapper"]
