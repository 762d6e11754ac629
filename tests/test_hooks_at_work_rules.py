"""The general rules of 13_hooks_at_work's mixed-precision and per-example sections (recap, verdicts), on
set-ups other than the lesson's own: other optimizers (fused and not), bfloat16 beside float16, a
convolution beside a Linear. The lesson shows SGD, fused Adam and fused SGD on an MLP in float16."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from hooktutor.data import blobs
from hooktutor.models import MLP

OPTIMIZERS = {
    "Adam": lambda p: torch.optim.Adam(p, lr=0.1, foreach=False),
    "Adagrad": lambda p: torch.optim.Adagrad(p, lr=0.1),
    "AdamW, fused": lambda p: torch.optim.AdamW(p, lr=0.1, fused=True),
    "Adagrad, fused": lambda p: torch.optim.Adagrad(p, lr=0.1, fused=True),
    "SGD, fused": lambda p: torch.optim.SGD(p, lr=0.1, fused=True),
}


def _step(make, dtype, init_scale):
    """One GradScaler step: (the tensor hook's gradient / the step pre-hook's, / the post-hook's,
    whether the pre-hook ran, whether the weight changed)."""
    x, y = blobs(8, seed=0)
    model = MLP(seed=0)
    optimizer = make(model.parameters())
    scaler, seen = torch.amp.GradScaler("cpu", init_scale=init_scale), {}
    bias, before = model.head.bias, model.head.bias.detach().clone()
    handles = [bias.register_hook(lambda g: seen.update(hook=g.clone())),
               optimizer.register_step_pre_hook(lambda *a: seen.update(pre=bias.grad.clone())),
               optimizer.register_step_post_hook(lambda *a: seen.update(post=bias.grad.clone()))]
    try:
        with torch.autocast("cpu", dtype=dtype):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
    finally:
        for handle in handles:
            handle.remove()
    ratio = {k: (seen["hook"] / seen[k]).unique().tolist() if k in seen else None for k in ("pre", "post")}
    return ratio["pre"], ratio["post"], "pre" in seen, not torch.equal(before, bias), \
        getattr(optimizer, "_step_supports_amp_scaling", False)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_step_hooks_under_a_grad_scaler(name, dtype):
    pre, post, ran, changed, unscales_itself = _step(OPTIMIZERS[name], dtype, 2.0 ** 16)
    # GradScaler leaves the unscaling to an optimizer that says it does it in its step (a fused one):
    # every fused optimizer here on the pinned torch; fused Adagrad not yet on 2.11.0 (observed), where
    # GradScaler unscales before its step as for the others
    release = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])
    assert unscales_itself == name.endswith("fused") or release < (2, 13)
    if unscales_itself:   # the pre-hook sees the scaled gradient, the post-hook the unscaled one
        assert (pre, post, changed) == ([1.0], [65536.0], True)
    else:                        # the scaler unscaled .grad before step(): both see the true gradient
        assert (pre, post, changed) == ([65536.0], [65536.0], True)
    pre, post, ran, changed, _ = _step(OPTIMIZERS[name], dtype, 2.0 ** 40)
    if dtype == torch.bfloat16:   # float32's range: 2**40 overflows nothing, the step is taken
        assert ran and changed
        return
    # a step the scaler skips: a fused optimizer's hooks run (and it leaves the weight), the others' do not
    assert not changed
    assert ran == unscales_itself and (post is not None) == ran


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
def test_a_forward_hook_sees_the_lowered_dtype_of_a_conv_and_the_given_one_of_a_layernorm(dtype):
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Conv2d(2, 4, 3), nn.Flatten(), nn.LayerNorm(16))
    seen = {}
    handles = [m.register_forward_hook(lambda m, args, out: seen.update({type(m).__name__: (
        args[0].dtype, out.dtype)})) for m in model]
    try:
        with torch.autocast("cpu", dtype=dtype):
            out = model(torch.randn(3, 2, 4, 4))
        out.float().sum().backward()
    finally:
        for handle in handles:
            handle.remove()
    assert seen["Conv2d"] == (torch.float32, dtype)
    assert seen["LayerNorm"] == (dtype, dtype)
    assert model[0].weight.grad.dtype == torch.float32   # the parameter and its gradient stay float32


def _per_example(model, x, y, one_input_per_layer):
    """Per-example gradients of every Linear's weight from a pre-hook and a full backward hook, for a
    cross-entropy summed over the batch: one input kept per layer (lesson 13's section 3 function) or
    one per call (exercise 1's rule), the uses of a Linear summed."""
    kept, grads, handles = {}, {}, []

    def keep(module, args):
        if one_input_per_layer:
            kept[module] = [args[0].detach()]
        else:
            kept.setdefault(module, []).append(args[0].detach())

    def per_example(module, grad_input, grad_output):
        a = kept[module][-1] if one_input_per_layer else kept[module].pop()
        g = torch.einsum("bo,bi->boi", grad_output[0], a)
        grads[module] = g if one_input_per_layer or module not in grads else grads[module] + g

    for layer in model.modules():
        if isinstance(layer, nn.Linear):
            handles += [layer.register_forward_pre_hook(keep), layer.register_full_backward_hook(per_example)]
    try:
        with warnings.catch_warnings():   # the first Linear's input needs no grad: harmless here
            warnings.filterwarnings("ignore", "Full backward hook is firing")
            F.cross_entropy(model(x), y, reduction="sum").backward()
    finally:
        for handle in handles:
            handle.remove()
    return {name: grads[m] for name, m in model.named_modules() if m in grads}


class _TwiceLinear(nn.Module):
    def __init__(self):
        super().__init__()
        with torch.random.fork_rng():
            torch.manual_seed(0)
            self.block, self.head = nn.Linear(4, 4), nn.Linear(4, 3)

    def forward(self, x):
        return self.head(torch.tanh(self.block(torch.tanh(self.block(x)))))


def test_per_example_gradients_of_a_linear_called_twice_need_one_input_per_call():
    """Lesson 13, section 3: one kept input per layer is silently wrong on a Linear called twice; one per
    call, popped in backward, with the two uses summed, equals torch.func."""
    from torch.func import functional_call, grad, vmap

    model = _TwiceLinear()
    x = torch.randn(6, 4, generator=torch.Generator().manual_seed(0))
    y = torch.tensor([0, 1, 2, 0, 1, 2])
    params = {name: p.detach() for name, p in model.named_parameters()}
    one = lambda p, inp, label: F.cross_entropy(functional_call(model, p, (inp[None],)), label[None],  # noqa: E731
                                                reduction="sum")
    want = vmap(grad(one), in_dims=(None, 0, 0))(params, x, y)["block.weight"]
    # sums of a few float32 products in another order: 1e-6; the wrong pairing is off by 1e-1 and more
    assert torch.allclose(_per_example(model, x, y, one_input_per_layer=False)["block"], want, atol=1e-5)
    assert not torch.allclose(_per_example(model, x, y, one_input_per_layer=True)["block"], want, atol=1e-2)


def test_a_full_backward_hook_makes_an_in_place_op_on_the_output_raise():
    """Lesson 13, section 3: nn.ReLU(inplace=True) after a Linear that carries a full backward hook raises."""
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(inplace=True), nn.Linear(8, 3))
    x, y = torch.randn(6, 4), torch.tensor([0, 1, 2, 0, 1, 2])
    with pytest.raises(RuntimeError, match="is being modified inplace"):
        _per_example(model, x, y, one_input_per_layer=False)
    # while autograd records only (the second fresh review's O3): under no_grad or inference_mode the
    # full hook wraps nothing, and the in-place ReLU runs
    for mode in (torch.no_grad, torch.inference_mode):
        with model[0].register_full_backward_hook(lambda m, gi, go: None), mode():
            model(x)


@pytest.mark.parametrize("setup", ["backward", "retain_graph", "unused head"])
def test_a_backward_frees_what_a_kept_outputs_graph_saved_only_where_it_runs_through_it(setup):
    """Lesson 13, cell 52 (the third fresh read's O3): a hook that keeps `output` keeps its graph; a
    backward() through that output frees what its nodes saved (the input batch), one with
    retain_graph=True does not, and neither does a backward that never reaches it (a head the loss
    does not use)."""
    import weakref

    torch.manual_seed(0)
    trunk, main, aux = nn.Linear(4, 4), nn.Linear(4, 2), nn.Linear(4, 2)
    kept, alive = [], []
    hooked = aux if setup == "unused head" else trunk
    with hooked.register_forward_hook(lambda m, a, o: kept.append(o)):
        for _ in range(5):
            x = torch.randn(3, 4)
            h = torch.relu(trunk(x))
            pred = main(h)
            side = aux(h)   # only the kept output uses it where setup == "unused head"
            loss = pred.sum() + (0 if setup == "unused head" else side.sum())
            loss.backward(retain_graph=setup == "retain_graph")
            alive.append(weakref.ref(h if setup == "unused head" else x))
            del x, h, pred, side, loss
    living = sum(r() is not None for r in alive)
    assert living == (0 if setup == "backward" else 5), (setup, living)
