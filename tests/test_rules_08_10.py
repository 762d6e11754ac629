"""The general rules of lessons 08, 09 and 10, checked on set-ups other than the lessons' own
(another layer kind, a nested module, another optimizer, another loss), so that a rule a lesson
states holds where a learner will use it. Each test names the lesson and the sentence it backs."""

from __future__ import annotations

import copy
import functools
import warnings

import pytest
import torch
import torch.utils.checkpoint as ckpt
from torch import nn
from torch.nn.utils import prune

from hooktutor.course import claims
from hooktutor.models import seeded


def _nested():
    """A model two levels deep: ``body.0`` is a Conv1d inside a Sequential inside the root."""
    with seeded(0):
        return nn.Sequential(nn.Sequential(nn.Conv1d(2, 2, 3), nn.ReLU()), nn.Flatten(),
                             nn.Linear(4, 3))


# --- lesson 08, section 2: deepcopy and hooks --------------------------------------------------

class _Counting:
    def __init__(self):
        self.calls = 0

    def hook(self, module, args, output):
        self.calls += 1


def _count(state, module, args, output):
    state["calls"] += 1


@pytest.mark.parametrize("kind", ["bound method", "functools.partial"])
def test_08_deepcopy_copies_a_hook_that_is_an_object_with_its_state(kind):
    """Lesson 08: 'a bound method, a functools.partial ... is deep-copied with its state'."""
    model = _nested()
    if kind == "bound method":
        owner = _Counting()
        hook, calls = owner.hook, lambda h: h.__self__.calls
    else:
        hook, calls = functools.partial(_count, {"calls": 0}), lambda h: h.args[0]["calls"]
    with model[0][0].register_forward_hook(hook):
        twin = copy.deepcopy(model)
    (copied,) = twin[0][0]._forward_hooks.values()
    twin(torch.ones(1, 2, 4))
    assert copied is not hook and (calls(hook), calls(copied)) == (0, 1)


def test_08_deepcopy_of_pruned_or_old_weight_norm_works_after_an_inference_mode_forward():
    """Lesson 08 recap: 'a forward under no_grad or inference_mode is fine'; a Conv1d this time."""
    with seeded(0), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the old weight_norm's deprecation warning
        layers = [prune.l1_unstructured(nn.Conv1d(2, 2, 3), "weight", amount=0.5),
                  nn.utils.weight_norm(nn.Conv1d(2, 2, 3))]
    for layer in layers:
        layer(torch.ones(1, 2, 4))  # a training forward: weight has a graph
        with pytest.raises(RuntimeError, match="graph leaves"):
            copy.deepcopy(layer)
        with torch.inference_mode():
            layer(torch.ones(1, 2, 4))
        copy.deepcopy(layer)  # no error


@pytest.mark.parametrize("make", [lambda ps: torch.optim.Adam(ps, lr=0.1),
                                  lambda ps: torch.optim.RMSprop(ps, lr=0.1)])
def test_08_an_optimizers_deepcopy_has_no_step_hooks(make):
    """Lesson 08: 'An optimizer is the other way round: its copy has no step hooks' (not SGD)."""
    optimizer = make(_nested().parameters())
    with optimizer.register_step_pre_hook(lambda o, a, k: None), \
            optimizer.register_step_post_hook(lambda o, a, k: None):
        copied = copy.deepcopy(optimizer)
    assert not copied._optimizer_step_pre_hooks and not copied._optimizer_step_post_hooks


# --- lesson 08, section 3: state-dict hooks, on a nested module --------------------------------

def test_08_load_pre_hook_on_a_nested_module_sees_its_prefix_and_strict_is_always_true():
    """Lesson 08: a load pre-hook on a submodule gets the keys under its prefix, stray ones
    included, and its `strict` is True whatever load_state_dict was called with."""
    model, seen = _nested(), {}
    inner = model[0][0]
    public = claims.expected("module-state-dict-hooks-public")
    register = (inner.register_load_state_dict_pre_hook if public
                else functools.partial(inner._register_load_state_dict_pre_hook, with_module=True))

    def hook(module, state_dict, prefix, local_metadata, strict, *rest):
        seen.setdefault("calls", []).append((prefix, sorted(state_dict), strict))

    checkpoint = {**model.state_dict(), "0.0.stray": torch.zeros(1)}
    with register(hook):
        model.load_state_dict(checkpoint, strict=False)
        model.load_state_dict(model.state_dict())  # strict
    assert seen["calls"] == [("0.0.", ["0.0.bias", "0.0.stray", "0.0.weight"], True),
                             ("0.0.", ["0.0.bias", "0.0.weight"], True)]


def test_08_a_public_state_dict_post_hook_that_returns_a_dict_raises_on_a_submodule_too():
    """Lesson 08: 'Since torch 2.5 the public one must return None: a returned dict raises'."""
    if not claims.expected("module-state-dict-hooks-public"):
        pytest.skip("no public state-dict post-hook before torch 2.5")
    model = _nested()
    with model[0][0].register_state_dict_post_hook(lambda m, sd, prefix, meta: {"only": 1}):
        with pytest.raises(RuntimeError, match="must return None"):
            model.state_dict()


# --- lesson 08, section 4: optimizer hooks -----------------------------------------------------

def test_08_step_hooks_fire_twice_in_an_adam_subclass_that_calls_super_step():
    """Lesson 08: a subclass whose step calls super().step() fires each hook twice, once an
    optimizer of the parent class has been built (Adam this time, not SGD)."""
    class ClippingAdam(torch.optim.Adam):
        def step(self, closure=None):
            return super().step(closure)

    torch.optim.Adam([nn.Parameter(torch.ones(1))])  # wraps Adam.step
    p = nn.Parameter(torch.ones(2))
    p.grad = torch.ones(2)
    opt, fired = ClippingAdam([p], lr=0.1), []
    with opt.register_step_pre_hook(lambda o, a, k: fired.append("pre")), \
            opt.register_step_post_hook(lambda o, a, k: fired.append("post")):
        opt.step()
    assert fired == ["pre", "pre", "post", "post"]


def test_08_one_adam_per_parameter_in_backward_gives_the_weights_of_one_adam_step():
    """Lesson 08: 'with one small optimizer per parameter, that gives exactly the weights of
    optimizer.step()': Adam and an MSE loss this time, two steps."""
    x, target = torch.linspace(-1, 1, 8).reshape(2, 4), torch.ones(2, 3)
    model_a, model_b = _linear_pair()
    optimizer = torch.optim.Adam(model_a.parameters(), lr=0.01, foreach=False)
    per_param = {p: torch.optim.Adam([p], lr=0.01, foreach=False) for p in model_b.parameters()}

    def step_now(p):
        per_param[p].step()
        per_param[p].zero_grad()

    handles = [p.register_post_accumulate_grad_hook(step_now) for p in model_b.parameters()]
    try:
        for _ in range(2):
            optimizer.zero_grad()
            nn.functional.mse_loss(model_a(x), target).backward()
            optimizer.step()
            nn.functional.mse_loss(model_b(x), target).backward()
    finally:
        for h in handles:
            h.remove()
    assert all(torch.equal(p, q) for p, q in zip(model_a.parameters(), model_b.parameters()))


def _linear_pair():
    with seeded(0):
        a = nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 3))
    return a, copy.deepcopy(a)


def test_08_the_global_step_hooks_import_by_the_lessons_spelling_and_fire_for_any_optimizer():
    """Lesson 08, the step-order prediction and the API table: 'from torch.optim.optimizer import
    register_optimizer_step_pre_hook, and _post_hook likewise': the spelling works, and the hooks
    fire for an optimizer built after them (RMSprop this time)."""
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    p = nn.Parameter(torch.ones(2))
    p.grad = torch.ones(2)
    fired = []
    with register_optimizer_step_pre_hook(lambda o, a, k: fired.append("pre")), \
            register_optimizer_step_post_hook(lambda o, a, k: fired.append("post")):
        torch.optim.RMSprop([p], lr=0.1).step()
    assert fired == ["pre", "post"]


def _ddp_first_buckets(rank, world_size):
    """DDP's first-pass bucket sizes (bytes) for an Embedding and a Linear, the embedding dense,
    then sparse; DDP's defaults."""
    from torch.nn.parallel import DistributedDataParallel

    sizes = {}
    for sparse in (False, True):
        with seeded(0):
            model = nn.Sequential(nn.Embedding(10, 4, sparse=sparse), nn.Linear(4, 3))
        ddp = DistributedDataParallel(model)
        ddp(torch.tensor([[1, 2, 3]])).sum().backward()
        sizes[sparse] = sorted(int(b) for b in str(ddp._get_ddp_logging_data()["bucket_sizes"]).split(","))
    return sizes


def test_08_a_sparse_gradient_gets_a_ddp_bucket_of_its_own_in_the_first_pass():
    """Lesson 08, section 5: 'the first backward pass puts all dense gradients of one dtype in one
    bucket ... (a sparse gradient, of nn.Embedding(sparse=True), gets a bucket of its own)'."""
    from hooktutor import distributed

    (sizes,) = distributed.run(_ddp_first_buckets, 1)
    assert sizes[False] == [4 * (10 * 4 + 4 * 3 + 3)]  # every gradient float32, dense: one bucket
    assert sizes[True] == [4 * (4 * 3 + 3), 4 * 10 * 4]  # the sparse embedding's: a bucket of its own


# --- lesson 09 -------------------------------------------------------------------------------

def test_09_a_linear_saves_its_input_only_when_its_weight_needs_a_gradient():
    """Lesson 09: 'Each Linear saves its input (for the weight's gradient, when the weight
    requires grad) and, when its input needs a gradient, its weight'."""
    with seeded(0):
        layer = nn.Linear(4, 3)
    x = torch.ones(2, 4, requires_grad=True)

    def saved_by(layer, inp):
        kept = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: kept.append(t) or t, lambda t: t):
            layer(inp)
        weight = layer.weight.untyped_storage().data_ptr()
        return sorted("weight" if t.untyped_storage().data_ptr() == weight else "input" for t in kept)

    assert saved_by(layer, x) == ["input", "weight"]
    assert saved_by(layer, x.detach()) == ["input"]  # no gradient for the input: no weight saved
    layer.weight.requires_grad_(False)
    assert saved_by(layer, x) == ["weight"]  # no gradient for the weight: no input saved


def test_09_reentrant_checkpoint_asked_for_weights_on_a_nested_conv_model():
    """Lesson 09: the reentrant checkpoint asked only for the weights: torch.autograd.grad
    reports them unused, backward(inputs=...) leaves .grad empty without a word; a nested Conv1d
    model and a cross-entropy loss this time."""
    model = _nested()
    inp, label = torch.ones(1, 2, 4, requires_grad=True), torch.tensor([1])
    weights = list(model.parameters())
    loss = nn.functional.cross_entropy(ckpt.checkpoint(model, inp, use_reentrant=True), label)
    with pytest.raises(RuntimeError, match="not have been used in the graph"):
        torch.autograd.grad(loss, weights, retain_graph=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loss.backward(inputs=weights)
    assert all(p.grad is None for p in weights) and not caught
    loss = nn.functional.cross_entropy(ckpt.checkpoint(model, inp, use_reentrant=False), label)
    loss.backward(inputs=weights)
    assert all(p.grad is not None for p in weights)


def test_09_what_a_hook_keeps_under_vmap_answers_to_shape_and_repr_but_not_to_reads():
    """Lesson 09: a tensor a hook kept under vmap 'raises when read after vmap returns (its
    shape, dtype and even its printout still answer)'; a Conv1d this time."""
    with seeded(0):
        conv = nn.Conv1d(2, 3, kernel_size=3)
    kept = []
    with conv.register_forward_hook(lambda m, a, o: kept.append(o.detach().clone())):
        torch.func.vmap(conv)(torch.ones(5, 2, 8))
    (escaped,) = kept
    assert tuple(escaped.shape) == (3, 6) and escaped.dtype == torch.float32
    assert isinstance(repr(escaped), str)
    with pytest.raises(RuntimeError, match="escaped"):
        escaped.sum()


def test_09_an_always_call_forward_hook_fires_with_none_when_the_recomputation_stops_early():
    """Lesson 09: under the non-reentrant checkpoint's early stop 'a forward hook registered with
    always_call=True does fire, with output=None'."""
    with seeded(0):
        block = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 4))
    seen = []
    with block.register_forward_hook(lambda m, a, o: seen.append(o is None), always_call=True):
        ckpt.checkpoint(block, torch.ones(2, 4, requires_grad=True), use_reentrant=False).sum().backward()
    assert seen == [False, True]  # the forward, then the stopped recomputation


def test_09_only_the_innermost_saved_tensors_pair_is_called():
    """Lesson 09, section 1: every operation that saves a tensor calls pack, 'unless a pair entered
    inside yours takes over: only the innermost pair is called' (save_on_cpu, another pair, a
    non-reentrant checkpoint's own)."""
    outer, inner = [], []
    w = torch.ones(3, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: outer.append(t) or t, lambda t: t):
        (w * w).sum()
        assert len(outer) == 2  # mul saves both of its inputs
        with torch.autograd.graph.save_on_cpu():
            (w * w).sum()
        with torch.autograd.graph.saved_tensors_hooks(lambda t: inner.append(t) or t, lambda t: t):
            (w * w).sum()
        assert len(outer) == 2 and len(inner) == 2
        ckpt.checkpoint(lambda t: (t * t).sin(), w, use_reentrant=False)
        # the checkpoint's input, not the three tensors its ops saved (w, w and w * w); torch 2.11
        # also packs an empty placeholder of the checkpoint's own
        packed = [t for t in outer[2:] if t.numel()]
        assert len(packed) == 1 and torch.equal(packed[0], w)


def test_09_under_torch_func_grad_only_a_tensor_hook_registered_inside_fires():
    """Lesson 09, the torch.func verdict: 'a tensor hook registered inside the transformed function
    fires under grad; one registered before it, on a parameter or on the input, does not'."""
    from torch.func import functional_call, grad

    with seeded(0):
        lin = nn.Linear(4, 2)
    x, fired = torch.ones(4, requires_grad=True), []
    with lin.weight.register_hook(lambda g: fired.append("parameter")), \
            x.register_hook(lambda g: fired.append("input")):
        grads = grad(lambda params: functional_call(lin, params, (x,)).sum())(dict(lin.named_parameters()))
        grad(lambda inp: lin(inp).sum())(x)
    assert sorted(grads) == ["bias", "weight"] and fired == []

    def inside(inp):
        out = lin(inp)
        out.register_hook(lambda g: fired.append("inside"))
        return out.sum()

    grad(inside)(x)
    assert fired == ["inside"]


# --- lesson 10 -------------------------------------------------------------------------------

def test_10_a_forward_pre_hook_on_a_submodule_switches_the_encoder_fast_path_off():
    """Lesson 10: 'since torch 2.5 a forward hook or pre-hook on the layer or a submodule switches
    that layer's fast path off'; a pre-hook on norm1 of a lone encoder layer this time."""
    with seeded(0):
        layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True).eval()
    fired = []
    with layer.norm1.register_forward_pre_hook(lambda m, a: fired.append(1)), torch.no_grad():
        layer(torch.ones(2, 5, 16))
    assert bool(fired) == claims.expected("encoder-fastpath-off-with-hooks")


@pytest.mark.parametrize("where", ["a backward hook on the layer", "a forward hook on the encoder"])
def test_10_only_a_forward_or_pre_hook_within_the_layer_keeps_it_off_the_fast_path(where):
    """Lesson 02, cell "model.eval() or torch.no_grad() switches hooks off": a global hook misses the
    submodules the fused kernel skips unless a forward hook or pre-hook on the layer or a submodule
    keeps it off that path; a full backward hook on the layer, or a forward hook on the
    nn.TransformerEncoder that holds it, does not (and no grad is needed, so the kernel runs)."""
    from torch.nn.modules.module import register_module_forward_hook

    with seeded(0):
        layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
        encoder = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False).eval()
    inner = encoder.layers[0]
    handle = (inner.register_full_backward_hook(lambda m, gi, go: None) if "backward" in where
              else encoder.register_forward_hook(lambda m, a, o: None))
    seen = []
    with handle, register_module_forward_hook(lambda m, a, o: seen.append(m)), torch.no_grad():
        encoder(torch.ones(2, 3, 8))
    assert inner.linear1 not in seen and inner in seen, where


def test_10_the_checks_tracking_keeps_an_encoder_layer_off_its_fast_path():
    """docs/authoring.md: `t.track` hooks every module, which since torch 2.5 keeps a
    TransformerEncoderLayer off its fast path: a case about the fast path needs an untracked
    model."""
    from torch.nn.modules.module import register_module_forward_hook

    from hooktutor.data import first_token
    from hooktutor.exercises.core import Tester
    from hooktutor.models import TinyTransformer

    tokens, _ = first_token(4, seed=0)
    model = TinyTransformer(seed=0).eval()

    def modules_called():
        seen = []
        with register_module_forward_hook(lambda m, a, o: seen.append(m)), torch.inference_mode():
            model(tokens)
        return len(seen)

    untracked = modules_called()
    t = Tester()
    t.track(model)
    try:
        tracked = modules_called()
    finally:
        t.leaks()
    assert (tracked > untracked) == claims.expected("encoder-fastpath-off-with-hooks")
    assert modules_called() == untracked  # the tracking's hooks are gone again


def test_10_a_torch_function_mode_intercepts_a_function_that_has_no_module_hook():
    """Lesson 10, the recap: a function has no module hook, but 'a TorchFunctionMode intercepts the
    call itself without a change to the model's code'; lesson 10's plain Block, tanh silenced."""
    from torch.overrides import TorchFunctionMode

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            with seeded(0):
                self.lin = nn.Linear(4, 4)

        def forward(self, x):
            return 2 * torch.tanh(self.lin(x))  # a function: no module to hook

    class ZeroTanh(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            return torch.zeros_like(out) if func is torch.tanh else out

    block, inp = Block(), torch.ones(3, 4)
    with ZeroTanh():
        silenced = block(inp)
    assert torch.equal(silenced, torch.zeros(3, 4)) and block(inp).abs().sum() > 0


# -- the fresh review of 2026-12 ---------------------------------------------------------------


def test_a_pruned_layer_copies_as_it_comes_only_where_its_weight_was_computed_without_a_graph():
    """08 cell 20 and the recap (the fresh review's F1): prune computes `weight` from weight_orig
    with autograd recording when the weight requires grad and grad mode is on; a frozen layer, or
    one pruned under torch.no_grad(), holds a leaf and copies as it comes."""
    def pruned(frozen=False, no_grad=False):
        with seeded(0):
            layer = nn.Linear(4, 4)
        layer.requires_grad_(not frozen)
        with torch.no_grad() if no_grad else torch.enable_grad():
            prune.l1_unstructured(layer, "weight", amount=0.5)
        return layer

    with pytest.raises(RuntimeError):
        copy.deepcopy(pruned())
    for kw in ({"frozen": True}, {"no_grad": True}):
        copy.deepcopy(pruned(**kw))   # no error
    frozen, later = pruned(frozen=True), pruned(no_grad=True)
    frozen(torch.ones(1, 4))
    later(torch.ones(1, 4))   # a training forward: the pre-hook computes weight with a graph now
    copy.deepcopy(frozen)
    with pytest.raises(RuntimeError):
        copy.deepcopy(later)


def test_hooks_removed_after_a_steps_backward_break_the_very_next_step_of_a_pruned_layer():
    """08 cell 8 (the fresh review's F4): with prune's pre-hook gone, `weight` stays the tensor the
    last call computed; removed after a step's backward (its graph freed), the next step fails."""
    import hooktutor as ht

    with seeded(0):
        layer = nn.Linear(4, 2)
    prune.l1_unstructured(layer, "weight", amount=0.5)
    x = torch.ones(3, 4)
    layer(x).sum().backward()   # a whole step: forward and backward
    ht.remove_hooks(layer, include_pytorch=True)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        layer(x).sum().backward()


def _net(seed=0):
    with seeded(seed):
        return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))


def test_a_bfloat16_pack_leaves_the_loss_alone_unless_the_loss_takes_a_gradient_itself():
    """09 cell 93 and the recap (the fresh review's F2): what pack returns reaches only backward, so
    a plain loss is bit for bit the same; a gradient penalty (autograd.grad with create_graph=True
    inside the loss) unpacks during the forward, and its loss moves."""
    x = torch.randn(16, 4, generator=torch.Generator().manual_seed(0), requires_grad=True)

    def losses(penalty):
        net = _net()
        out = net(x)
        if not penalty:
            return out.pow(2).mean()
        (g,) = torch.autograd.grad(out.sum(), x, create_graph=True)
        return out.pow(2).mean() + g.pow(2).sum()

    pair = (lambda t: t.to(torch.bfloat16) if t.is_floating_point() else t, lambda t: t.float())
    for penalty in (False, True):
        plain = losses(penalty)
        with torch.autograd.graph.saved_tensors_hooks(*pair):
            packed = losses(penalty)
        assert torch.equal(plain, packed) != penalty, penalty


@pytest.mark.parametrize("saves", [True, False])
def test_the_non_reentrant_checkpoint_reruns_a_block_only_for_a_tensor_it_saved(saves):
    """09 cell 91 (the fresh review's F3): a block that saves a tensor (a Tanh) runs again in
    backward, its pre-hook firing; one that saves none (x * 2) is not run again at all."""

    class Scale(nn.Module):
        def forward(self, x):
            return x * 2

    block, log = nn.Sequential(nn.Tanh() if saves else Scale(), Scale()), []
    with block.register_forward_pre_hook(lambda m, a: log.append("pre")):
        out = ckpt.checkpoint(block, torch.ones(2, 3, requires_grad=True), use_reentrant=False)
        out.pow(2).sum().backward()
    assert log == (["pre", "pre"] if saves else ["pre"])


@pytest.mark.parametrize("reentrant", [True, False])
def test_an_optimizer_in_backward_steps_twice_under_the_reentrant_checkpoint_for_a_shared_parameter(
        reentrant):
    """08 cell 56 (the second fresh review's O1): one optimizer per parameter, stepped from its
    post-accumulate-grad hook, gives the weights of optimizer.step() after backward where each
    gradient is accumulated once; a layer used inside and outside a reentrant checkpoint gets its
    hook once per inner backward and steps on parts of its gradient."""
    def build():
        torch.manual_seed(0)
        return nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(fc1, fc2, x):
        h = ckpt.checkpoint(lambda t: fc2(torch.relu(fc1(t))), x, use_reentrant=reentrant)
        return fc2(h).pow(2).sum()

    x = torch.randn(3, 4, requires_grad=True)
    fc1, fc2 = build()
    optimizer = torch.optim.SGD([*fc1.parameters(), *fc2.parameters()], lr=0.1)
    forward(fc1, fc2, x).backward()
    optimizer.step()

    fc1b, fc2b = build()
    calls = []
    handles = []
    for p in [*fc1b.parameters(), *fc2b.parameters()]:
        opt = torch.optim.SGD([p], lr=0.1)

        def step(param, opt=opt):
            calls.append(param)
            opt.step()
            opt.zero_grad()
        handles.append(p.register_post_accumulate_grad_hook(step))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # the reentrant checkpoint warns when no input needs grad
            forward(fc1b, fc2b, x).backward()
    finally:
        for h in handles:
            h.remove()
    same = all(torch.equal(a, b) for a, b in zip([*fc1.parameters(), *fc2.parameters()],
                                                  [*fc1b.parameters(), *fc2b.parameters()]))
    twice = sum(c is fc2b.weight for c in calls)
    assert (same, twice) == ((False, 2) if reentrant else (True, 1))


@pytest.mark.parametrize("reentrant", [True, False])
def test_a_multi_grad_hook_fires_twice_in_one_backward_under_the_reentrant_checkpoint(reentrant):
    """09 cell 60 (the third fresh read's O3): register_multi_grad_hook calls fn once per backward
    pass; a tensor used inside and outside a reentrant checkpoint is reached by the checkpoint's
    inner backward too, and fn runs twice in one .backward(); the non-reentrant checkpoint, once."""
    torch.manual_seed(0)
    w = torch.randn(3, requires_grad=True)
    x = torch.randn(3, requires_grad=True)
    calls = []
    handle = torch.autograd.graph.register_multi_grad_hook((w,), lambda grads: calls.append(grads[0].clone()))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            inner = ckpt.checkpoint(lambda t: (t * w).sin(), x, use_reentrant=reentrant)
            (inner + w).sum().backward()
    finally:
        handle.remove()
    assert len(calls) == (2 if reentrant else 1)
