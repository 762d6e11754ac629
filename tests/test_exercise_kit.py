"""The kit of hard cases (hooktutor/exercises/kit.py): each builder has the property its
dimension relies on, and the probes see the learner's hooks but never leave or count their own."""

from __future__ import annotations

import pytest
import torch

import hooktutor as ht
from hooktutor.exercises import core, kit


def test_dimensions_are_named_and_documented():
    assert kit.DIMENSIONS == ["nested", "twice", "raises", "nd", "inplace_after", "repeat", "technique",
                              "dtype", "alias", "detached", "reattach", "order", "left_as_found"]
    for dim in kit.DIMENSIONS:
        assert f"``{dim}``" in kit.__doc__
    for name in kit.__all__:
        assert getattr(kit, name).__doc__ or name == "DIMENSIONS"


def test_builders_are_seeded_and_leave_the_global_rng_alone():
    state = torch.random.get_rng_state()
    for build in (kit.Nested, kit.Twice, kit.Raising, kit.InplaceAfter):
        a, b = build(seed=3), build(seed=3)
        assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert torch.equal(kit.randn(2, 3, seed=1), kit.randn(2, 3, seed=1))
    assert torch.equal(torch.random.get_rng_state(), state)


def test_nested_hides_its_layers_from_named_children():
    model = kit.Nested(seed=0)
    assert [n for n, _ in model.named_children()] == ["encoder", "head"]
    assert set(kit.Nested.LEAVES) <= {n for n, _ in model.named_modules()}
    x = kit.randn(2, 4, seed=0)
    inter = model.intermediates(x)
    assert torch.allclose(inter[""], model(x))
    assert inter["encoder.body.0"].shape == (2, 6) and inter["head"].shape == (2, 3)


def test_twice_calls_its_block_twice():
    model = kit.Twice(seed=0)
    x = kit.randn(2, 4, seed=0)
    seen = []
    with model.block.register_forward_hook(lambda m, a, o: seen.append(o.detach().clone())):
        model(x)
    calls = model.block_calls(x)
    assert len(seen) == 2 and all(torch.allclose(s, c[1]) for s, c in zip(seen, calls))


def test_raising_raises_after_its_first_layer():
    model = kit.Raising(seed=0)
    ran = []
    with model.fc1.register_forward_hook(lambda *a: ran.append("fc1")), \
            model.fc2.register_forward_hook(lambda *a: ran.append("fc2")):
        raised, _ = kit.call_expecting_kit_error(model, torch.zeros(1, 4))
    assert raised and ran == ["fc1"]
    model.fail = False
    assert model(torch.zeros(1, 4)).shape == (1, 2)


@pytest.mark.parametrize("dims, shape", [(3, (2, 3, 7)), (4, (2, 3, 5, 5))])
def test_conv_models_have_channels_in_dimension_1(dims, shape):
    assert kit.conv_model(dims, seed=0)(kit.conv_input(dims, seed=0)).shape == shape


def test_inplace_after_overwrites_the_linear_output_and_scribble_changes_shared_memory():
    model = kit.InplaceAfter(seed=0)
    x = kit.randn(4, 3, seed=0)
    kept = []
    with model.lin.register_forward_hook(lambda m, a, o: kept.append((o.detach(), o.detach().clone()))):
        model(x)
    bare, copy = kept[0]
    assert (copy < 0).any() and not torch.equal(bare, copy)
    t = torch.ones(2)
    alias, clone = t.detach(), t.clone()
    kit.scribble(t)
    assert torch.equal(alias, t) and torch.equal(clone, torch.ones(2))


def test_hook_witness_sees_the_learners_hooks_not_its_own():
    model = kit.Nested(seed=0)
    tester = core.Tester()
    tester.track(model)
    with kit.HookWitness({n: model.get_submodule(n) for n in kit.Nested.LEAVES}) as w:
        with model.head.register_forward_hook(lambda *a: None):
            model(kit.randn(1, 4, seed=0))
        model(kit.randn(1, 4, seed=0))
    assert w.calls["head"] == 2 and w.fired("head") == 1 and w.fired("encoder.act") == 0
    assert w.fired("head", "forward_pre") == 0
    assert tester.leaks() == [] and len(ht.list_hooks(model)) == 0


def test_hook_witness_counts_a_global_hook_and_cleans_up_when_the_answer_raises():
    from torch.nn.modules.module import register_module_forward_hook
    model = kit.Raising(seed=0)
    with pytest.raises(kit.KitError):
        with kit.HookWitness({"fc1": model.fc1}) as w:
            with register_module_forward_hook(lambda *a: None):
                model(torch.zeros(1, 4))
    assert w.fired("fc1") == 1 and len(ht.list_hooks(model)) == 0


def test_tensor_hook_witness():
    a = torch.ones(3, requires_grad=True)
    b = a * 2
    with kit.TensorHookWitness({"a": a, "b": b}) as w:
        with b.register_hook(lambda g: g * 10):
            b.sum().backward()
    assert w.reached == {"a": 1, "b": 1} and w.fired("b") == 1 and w.fired("a") == 0
    assert torch.equal(w.grads["a"], torch.full((3,), 20.0))   # after the learner's hook on b
    assert not a._backward_hooks and not b._backward_hooks


def test_grad_witness_tells_backward_from_a_hand_assignment():
    lin = torch.nn.Linear(2, 1)
    lin.bias.requires_grad_(False)
    with kit.GradWitness(dict(lin.named_parameters())) as w:
        lin(torch.ones(1, 2)).sum().backward()
    assert list(w.accumulated) == ["weight"] and w.accumulated["weight"] == 1
    assert w.filled_by_backward("weight") and w.learner_hooks["weight"] == 0
    lin.weight.grad = torch.ones_like(lin.weight) * 7
    assert not w.filled_by_backward("weight")
    assert len(ht.list_hooks(lin)) == 0

    other = torch.nn.Linear(2, 1)
    other.weight.grad = torch.ones_like(other.weight)   # assigned, no backward at all
    with kit.GradWitness({"weight": other.weight}) as w2:
        pass
    assert not w2.filled_by_backward("weight")


def test_grad_witness_sees_a_learners_post_accumulate_hook():
    p = torch.nn.Parameter(torch.ones(2))
    with kit.GradWitness({"p": p}) as w:
        with p.register_post_accumulate_grad_hook(lambda t: None):
            (p * 3).sum().backward()
    assert w.learner_hooks["p"] == 1 and torch.equal(w.grads["p"], torch.full((2,), 3.0))


# -- the variants of the first visible case (hooktutor.exercises.variants) ---------------------------

def _surroundings_wrong_answers():
    from hooktutor.exercises import load_all

    exercises = load_all()
    count, clamp = exercises["start_here.count_calls"], exercises["changing_outputs.clamped_output"]
    steer = exercises["transformer_hooks.steer"]

    def forward_not_call(model, x, layer):
        calls = []
        handle = layer.register_forward_hook(lambda m, a, o: calls.append(1))
        try:
            model.forward(x)
        finally:
            handle.remove()
        return len(calls)

    def attribute(model, x, layer):
        model.seen = True
        return count.reference(model, x, layer)

    def buffer(model, x, layer):
        model.register_buffer("calls", torch.zeros(1))
        return count.reference(model, x, layer)

    def as_bool(model, x, layer):
        n = count.reference(model, x, layer)
        return bool(n) if n == 1 else n

    def default_dtype(model, x, layer):
        torch.set_default_dtype(torch.float64)
        return count.reference(model, x, layer)

    def float_copy(model, x, layer, m):
        return clamp.reference(model, x, layer, m).float()

    def only_in_train(model, x, layer, m):
        out = clamp.reference(model, x, layer, m)
        return out if model.training else out.detach()

    def detaches(model, tokens, module, vector):
        def add(mod, args, output):
            if isinstance(output, tuple):
                return (output[0].detach() + vector, *output[1:])
            return output.detach() + vector
        handle = module.register_forward_hook(add)
        try:
            return model(tokens)
        finally:
            handle.remove()

    def leaves_grad(model, tokens, module, vector):
        out = steer.reference(model, tokens, module, vector)
        out.sum().backward(retain_graph=True)
        return out

    tokens = exercises["hf_hooks.new_token_states"]

    def generation_defaults(model, input_ids, block, new_tokens):
        states = []
        handle = block.register_forward_hook(
            lambda m, a, o: states.append((o[0] if isinstance(o, tuple) else o)[:, -1]))
        try:   # without do_sample=False: the tiny model's defaults happen to be greedy
            sequences = model.generate(input_ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens)
        finally:
            handle.remove()
        return sequences, torch.stack(states, dim=1)

    return [(tokens, generation_defaults, "do_sample=False"), (count, forward_not_call, "model(x)"),
            (count, attribute, "added seen"),
            (count, buffer, "added calls"), (count, as_bool, "a bool is not a number"),
            (count, default_dtype, "default dtype"), (clamp, float_copy, "float64"),
            (clamp, only_in_train, "gradient"), (steer, detaches, "does not reach"),
            (steer, leaves_grad, ".grad")]


@pytest.mark.parametrize("i", range(10))
def test_a_mistake_in_the_surroundings_is_caught_by_a_variant_and_named(i):
    from hooktutor.exercises import variants

    ex, answer, mentions = _surroundings_wrong_answers()[i]
    variants.STRICT = True
    try:
        report = ex.check(answer, hidden=False)
    finally:
        variants.STRICT = False
    assert not report.passed, f"{ex.key}: {answer.__name__} passed"
    assert mentions.lower() in report.text.lower(), report.text
    assert torch.get_default_dtype() == torch.float32, "a setting the answer flipped is restored"


def test_variants_opt_out_by_name_and_the_reference_passes_every_variant():
    from hooktutor.exercises import load_all, variants

    ex = load_all()["start_here.count_calls"]
    answer = _surroundings_wrong_answers()[2][1]   # an attribute added: only the state shows it
    assert ex.check(ex.reference).passed
    ex.not_varied["state"] = "the test"
    try:
        assert ex.check(answer, hidden=False).passed
    finally:
        del ex.not_varied["state"]
    recording = ex._variants_recording
    assert recording is not None and {key[0] for key in recording.reference} == set(variants.VARIANTS)
    applied = {key[0] for key, run in recording.reference.items() if run is not None}
    assert applied == set(variants.VARIANTS) - {"generation"}, "every variant but generation applies to count_calls"


def test_the_tensor_witness_survives_a_none_gradient():
    """A chunk of an output that the loss does not use gets None in backward: the witness (a
    tensor hook) must take it, as lesson 01 teaches every gradient hook to."""
    import torch

    from hooktutor.exercises.kit import TensorHookWitness

    x = torch.randn(3, 4, requires_grad=True)
    a, b = (x * 2).chunk(2, dim=1)
    with TensorHookWitness({"a": a, "b": b}) as w:
        (b ** 2).sum().backward()
    assert w.reached == {"a": 1, "b": 1} and w.grads["a"] is None and w.grads["b"] is not None


def test_the_callers_hooks_of_the_variants_leave_a_compiled_answer_compiled_once():
    """The caller's hooks that every variant puts on every module note that they fired with a flag:
    a count, an int that changes on every call, fails Dynamo's guards and made a compiled answer
    compile again on every call (slow checks, and a graph count that was the kit's, not the
    answer's)."""
    import contextlib

    import torch._dynamo
    from torch import nn

    from hooktutor.exercises import variants

    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=backend)
    def answer(m, x):   # calls the compiled model three times, as count_graphs' answers do
        return [compiled(x) for _ in range(3)][-1]

    callers: set[int] = set()
    try:
        run = variants.run_once(answer, (model, torch.ones(2, 4)), {}, callers, contextlib.nullcontext,
                                backward=False)
    finally:
        torch._dynamo.reset()
    assert run.error is None, run.error
    assert len(graphs) == 1
    assert all(fired == (1, 1) for fired in run.fired.values()), run.fired
    assert not callers and not model[0]._forward_hooks   # the caller's hooks went with the run
