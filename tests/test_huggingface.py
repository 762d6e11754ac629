"""The toolkit on Hugging Face models (lesson 12, ``12_huggingface_hooks.ipynb``): ``capture``
with gradients on blocks, attention, MLPs and the root of six architectures, the hooks that
transformers and accelerate put on a model in ``list_hooks`` / ``remove_hooks``, ``generate()``
with a KV cache under ``capture``, and layer names through ``torch.compile``.

Every model is built from a tiny config with random weights, seeded, offline (no download):
the six configs are made once for the module, each test builds its own model from one.
Skipped, with the reason, where transformers (or accelerate) cannot be imported or cannot use
the installed torch (the compat environments of old torch releases); the course environment
has both, pinned (``tests/test_packaging.py`` checks it).
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")   # never a download, even by mistake
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

import hooktutor as ht  # noqa: E402
from hooktutor._tree import iter_tensors  # noqa: E402
from hooktutor.course import claims  # noqa: E402


def _import_transformers():
    try:
        import transformers
    except Exception as exc:  # not installed, or broken against this torch
        pytest.skip(f"transformers cannot be imported here ({type(exc).__name__}: {exc}); lesson 12 and "
                    "these tests need it (python3 course.py test installs the pinned one)", allow_module_level=True)
    from transformers.utils import is_torch_available

    if not is_torch_available():
        pytest.skip(f"transformers {transformers.__version__} cannot use torch {torch.__version__} "
                    "(it needs a newer torch)", allow_module_level=True)
    from hooktutor.course.other_torches import NOTEBOOKS, not_admitted

    why = not_admitted(NOTEBOOKS / "12_huggingface_hooks.ipynb", torch.__version__)
    if why:   # compat's transformers 4.x environment: there for the probes of lesson 12's claims
        pytest.skip(f"lesson 12 is not admitted here: it {why}", allow_module_level=True)
    transformers.logging.set_verbosity_error()   # no config chatter in the test output
    return transformers


transformers = _import_transformers()
# transformers leaves output-capturing hooks on a model since 5.2 (hooktutor/course/claims.py)
CAPTURING = claims.expected("hf-output-capturing-hooks")


def _accelerate_hooks():
    try:
        from accelerate import cpu_offload
        from accelerate.hooks import ModelHook, add_hook_to_module
    except Exception as exc:
        pytest.skip(f"accelerate cannot be imported here ({type(exc).__name__}: {exc})")
    return cpu_offload, ModelHook, add_hook_to_module


VOCAB = 100
IDS = torch.arange(2, 12).reshape(2, 5)           # token ids made directly: no tokenizer, no download


def _vit_names(config) -> tuple[str, str, str]:
    """ViT's block, attention and MLP: ``layers.0...`` in recent transformers, ``encoder.layer.0...``
    (the MLP's first half ``intermediate``) in the older 5.x releases."""
    names = {n for n, _ in transformers.ViTModel(config).named_modules()}
    if "layers.0.mlp" in names:
        return "layers.0", "layers.0.attention", "layers.0.mlp"
    return "encoder.layer.0", "encoder.layer.0.attention", "encoder.layer.0.intermediate"


def _configs() -> dict[str, tuple]:
    """(model class, config, block, attention, mlp, inputs) per architecture, tiny: hidden 16,
    2 layers, vocab 100."""
    t = transformers
    vit = t.ViTConfig(image_size=8, patch_size=4, num_channels=3, hidden_size=16, num_hidden_layers=2,
                      num_attention_heads=2, intermediate_size=32)
    text = {"input_ids": IDS}
    seq2seq = {"input_ids": IDS, "decoder_input_ids": IDS[:, :3]}
    return {
        "llama": (t.LlamaForCausalLM, t.LlamaConfig(
            vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
            num_key_value_heads=1, max_position_embeddings=32, bos_token_id=0, eos_token_id=1, pad_token_id=0),
            "model.layers.0", "model.layers.0.self_attn", "model.layers.0.mlp", text),
        "gpt2": (t.GPT2LMHeadModel, t.GPT2Config(
            vocab_size=VOCAB, n_positions=32, n_embd=16, n_layer=2, n_head=2, bos_token_id=0, eos_token_id=1,
            pad_token_id=0),
            "transformer.h.0", "transformer.h.0.attn", "transformer.h.0.mlp", text),
        "bert": (t.BertModel, t.BertConfig(
            vocab_size=VOCAB, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
            max_position_embeddings=32),
            "encoder.layer.0", "encoder.layer.0.attention", "encoder.layer.0.intermediate", text),
        "t5": (t.T5ForConditionalGeneration, t.T5Config(
            vocab_size=VOCAB, d_model=16, d_kv=8, d_ff=32, num_layers=2, num_heads=2, decoder_start_token_id=0),
            "decoder.block.0", "decoder.block.0.layer.1.EncDecAttention", "decoder.block.0.layer.2.DenseReluDense",
            seq2seq),
        "bart": (t.BartForConditionalGeneration, t.BartConfig(
            vocab_size=VOCAB, d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
            decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=32),
            "model.decoder.layers.0", "model.decoder.layers.0.encoder_attn", "model.decoder.layers.0.fc1", seq2seq),
        "vit": (t.ViTModel, vit, *_vit_names(vit),
            {"pixel_values": torch.linspace(-1, 1, 2 * 3 * 8 * 8).reshape(2, 3, 8, 8)}),
    }


ARCHS = ["llama", "gpt2", "bert", "t5", "bart", "vit"]


@pytest.fixture(scope="module")
def configs():
    return _configs()


def build(configs, arch: str, seed: int = 0):
    cls, config, *_ = configs[arch]
    torch.manual_seed(seed)
    return cls(config).eval()   # eval: no dropout, so two runs are the same computation


def inputs(configs, arch: str) -> dict:
    return dict(configs[arch][-1])


def _main_output(out) -> torch.Tensor:
    return out[0]   # logits, or last_hidden_state: the first field of a ModelOutput


@pytest.mark.parametrize("arch", ARCHS)
def test_capture_with_grads_on_blocks_attention_mlp_and_the_root(configs, arch):
    """The issue's bar: grads=True on modules that return a ModelOutput, a tuple or a tensor,
    the root included; every gradient equals the one autograd gives the same tensor, and the
    recording's repr never raises (it raised KeyError on a ModelOutput)."""
    model, kw = build(configs, arch), inputs(configs, arch)
    block, attn, mlp = configs[arch][2:5]
    names = [block, attn, mlp, ""]
    kept: dict[str, object] = {}

    def keep(name):
        def hook(module, args, output):
            for _, t in iter_tensors(output):
                if t.requires_grad:
                    t.retain_grad()
            kept[name] = output
        return hook

    handles = [ht.get_layer(model, n).register_forward_hook(keep(n)) for n in names]
    try:
        with ht.capture(model, names, grads=True) as rec:
            out = model(**kw)
            pending = repr(rec)   # before backward: the gradients are pending, and repr says so
            _main_output(out).pow(2).sum().backward()
        text = repr(rec)
    finally:
        for h in handles:
            h.remove()
    assert pending.count("grad -") == 4, pending
    assert text.splitlines()[0] == "Recording of 4 layer(s): outputs + grads"
    assert all(f"{n or '<root>'}  " in text for n in names) and "grad ?" not in text, text
    # the root: the same ModelOutput class, read by attribute, copied (not the model's tensor)
    root, root_grad = rec[""], rec.grads[""]
    assert type(root) is type(out) is type(root_grad)
    assert torch.equal(_main_output(root), _main_output(out))
    assert _main_output(root).data_ptr() != _main_output(out).data_ptr()
    assert torch.equal(_main_output(root_grad), 2 * _main_output(out).detach())
    for name in names:
        recorded, grads, live = rec[name], rec.grads[name], kept[name]
        assert type(recorded) is type(live)
        got = dict(iter_tensors(grads))
        # a gradient for every tensor the loss reached (BERT's pooler_output it does not: None)
        expected = {p: t.grad for p, t in iter_tensors(live) if t.requires_grad and t.grad is not None}
        assert got.keys() == expected.keys() and expected, (name, got.keys(), expected.keys())
        for path, grad in expected.items():
            assert torch.equal(got[path], grad), (name, path)
        for path, t in iter_tensors(live):
            assert torch.equal(dict(iter_tensors(recorded))[path], t), (name, path)


def test_capture_copies_tensors_only_a_kv_cache_is_kept_by_reference(configs):
    model = build(configs, "llama")
    with ht.capture(model, [""]) as rec:
        out = model(IDS, use_cache=True)
    key = next(k for k, v in out.items() if not isinstance(v, torch.Tensor))   # "cache" (5.x) / "past_key_values"
    assert "Cache" in type(out[key]).__name__
    assert rec[""][key] is out[key]                       # the cache object itself, by reference
    assert rec[""].logits.data_ptr() != out.logits.data_ptr()   # the tensors are copies
    assert f"{key}: {type(out[key]).__name__}" in repr(rec)


@pytest.mark.parametrize("arch, block", [("llama", "model.layers.0"), ("gpt2", "transformer.h.0")])
def test_generate_with_a_cache_calls_each_block_once_per_token_and_capture_records_each_call(configs, arch, block):
    """generate() with a KV cache: the prompt pass sees the whole prompt, every later call a
    sequence of length one; capture records each call, and the first equals a plain forward's."""
    model = build(configs, arch)
    new = 3
    with ht.capture(model, [block]) as rec:
        generated = model.generate(IDS, max_new_tokens=new, min_new_tokens=new, do_sample=False, use_cache=True)
    assert generated.shape == (2, IDS.shape[1] + new)
    calls = rec.calls(block)
    hidden = [c if isinstance(c, torch.Tensor) else c[0] for c in calls]   # a tensor, or a tuple on older releases
    assert [h.shape[1] for h in hidden] == [IDS.shape[1]] + [1] * (new - 1)
    with ht.capture(model, [block]) as plain:
        model(IDS, use_cache=False)
    first = plain[block] if isinstance(plain[block], torch.Tensor) else plain[block][0]
    assert torch.allclose(hidden[0], first, atol=1e-6)   # the same computation, up to kernel choice
    assert len(ht.list_hooks(model).where(owner="user")) == 0


@pytest.mark.parametrize("arch", ARCHS)
def test_transformers_hooks_are_its_own_and_survive_remove_hooks(configs, arch):
    """output_hidden_states=True installs forward hooks (once, lazily) that list_hooks shows as
    transformers' own; remove_hooks keeps them and says so, so output_hidden_states still works;
    include_libraries=True removes them and transformers installs them again when next asked."""
    model, kw = build(configs, arch), inputs(configs, arch)
    before = model(**kw, output_hidden_states=True)
    key = "hidden_states" if "hidden_states" in before else "decoder_hidden_states"
    library = ht.list_hooks(model).where(owner="transformers")
    if not CAPTURING:   # before transformers 5.2: collected inside the call, no hook left
        assert len(ht.list_hooks(model)) == 0 and len(before[key]) > 0
        return
    assert len(library) >= 2 and len(library) == len(ht.list_hooks(model).where(owner="library"))
    assert {(r.kind, r.owner, r.mechanism, r.owner_label, r.is_library) for r in library} == {
        ("forward", "transformers", "output capturing", "transformers (output capturing)", True)}
    block = configs[arch][2]
    ht.get_layer(model, block).register_forward_hook(lambda m, a, o: None)
    removed = ht.remove_hooks(model)
    assert removed == 1 and len(removed.left) == len(library)
    assert repr(removed).startswith(f"removed 1 hook; left {len(library)} that transformers installed and the "
                                    "model relies on (output capturing: ")
    assert repr(removed).endswith("remove_hooks(model, include_libraries=True) removes those too")
    with pytest.raises(ValueError, match=r"installed by transformers \(output capturing\).*include_libraries=True"):
        ht.inventory.remove_row(model, library[0])
    after = model(**kw, output_hidden_states=True)
    assert len(after[key]) == len(before[key]) > 0
    assert all(torch.equal(a, b) for a, b in zip(after[key], before[key]))
    # removed too when asked; transformers then installs them again instead of returning nothing
    assert ht.remove_hooks(model, include_libraries=True) == len(library)
    assert len(ht.list_hooks(model)) == 0
    again = model(**kw, output_hidden_states=True)
    assert len(again[key]) == len(before[key])
    assert len(ht.list_hooks(model).where(owner="transformers")) == len(library)


def test_without_the_reset_transformers_hooks_removed_by_hand_leave_hidden_states_empty(configs):
    """Why remove_hooks keeps them: deleted from the dicts by hand (what "remove every hook"
    snippets do), transformers never installs them again and output_hidden_states is empty."""
    model = build(configs, "llama")
    model(IDS, output_hidden_states=True)
    for m in model.modules():
        m._forward_hooks.clear()
    left = model(IDS, output_hidden_states=True).hidden_states
    # none since transformers 5.23, the final norm's alone from 5.2, all 3 before (no hook to clear)
    assert len(left) == (0 if claims.expected("hf-cleared-hooks-no-hidden-state") else 1 if CAPTURING else 3)


def test_accelerates_patched_forward_is_listed_as_rows_of_their_own(configs):
    """accelerate's hooks replace forward (module._hf_hook): no torch hook dict shows them. They
    are rows of kind patched_forward, accelerate's kept by remove_hooks, yours (a ModelHook of
    your own) removed like any hook of yours; cpu_offload's are undone with accelerate's own
    remove_hook_from_module (the weights come back from the offload map)."""
    cpu_offload, model_hook, add_hook_to_module = _accelerate_hooks()
    model = build(configs, "llama")
    reference = model(IDS).logits

    class CountCalls(model_hook):
        calls = 0

        def pre_forward(self, module, *args, **kwargs):
            CountCalls.calls += 1
            return args, kwargs

    mlp = model.model.layers[1].mlp
    add_hook_to_module(mlp, CountCalls())
    cpu_offload(model.model.layers[0], execution_device="cpu")
    assert model.model.layers[0].self_attn.q_proj.weight.device.type == "meta"   # offloaded
    table = ht.list_hooks(model)
    patched = table.where(kind="patched_forward")
    assert len(patched) == len(table) and "_hf_hook" in mlp.__dict__
    mine = patched.where(path="model.layers.1.mlp")
    assert [(r.function, r.owner, r.owner_label) for r in mine] == [("CountCalls", "user", "you")]
    theirs = patched.where(owner="accelerate")
    assert len(theirs) == len(patched) - 1 > 0
    assert {(r.function, r.owner_label) for r in theirs} == {("AlignDevicesHook", "accelerate (add_hook_to_module)")}
    assert torch.allclose(model(IDS).logits, reference, atol=1e-6)
    # an accelerate hook runs when forward() is called directly; a torch forward hook does not
    fired = []
    with mlp.register_forward_hook(lambda m, a, o: fired.append(1)):
        calls = CountCalls.calls
        mlp.forward(torch.zeros(1, 16))
        assert CountCalls.calls == calls + 1 and fired == []

    removed = ht.remove_hooks(model)
    assert removed == 1 and "_hf_hook" not in mlp.__dict__ and "forward" not in mlp.__dict__
    assert f"left {len(theirs)} that accelerate installed and the model relies on (add_hook_to_module: " \
        in repr(removed)
    assert model.model.layers[0].self_attn.q_proj.weight.device.type == "meta"
    assert ht.remove_hooks(model, include_libraries=True) == len(theirs)
    assert len(ht.list_hooks(model)) == 0
    layer0 = model.model.layers[0]
    assert all(p.device.type == "cpu" for p in layer0.parameters())
    assert not any("forward" in m.__dict__ or "_hf_hook" in m.__dict__ for m in model.modules())
    assert torch.allclose(model(IDS).logits, reference, atol=1e-6)


def test_global_registration_hooks_are_listed_and_removed_on_a_hugging_face_model(configs):
    """Building a model registers parameters, buffers and modules: the global registration hooks
    fire for each, and list_hooks / remove_hooks(include_global=True) treat them like the rest."""
    from torch.nn.modules import module as module_mod

    names = []
    handle = module_mod.register_module_parameter_registration_hook(lambda m, n, p: names.append(n))
    try:
        model = build(configs, "gpt2")
        assert "weight" in names
        rows = ht.list_hooks(model).where(kind="parameter_registration")
        assert [(r.path, r.owner) for r in rows] == [("<global>", "user")]
        assert ht.remove_hooks(model, include_global=True) == 1
        names.clear()
        build(configs, "gpt2")
        assert names == []
    finally:
        handle.remove()


_COMPILED = """
import os
os.environ["HF_HUB_OFFLINE"] = "1"
import torch
import transformers
import hooktutor as ht
transformers.logging.set_verbosity_error()
torch.manual_seed(0)
config = transformers.LlamaConfig(vocab_size=100, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                  num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32)
model = transformers.LlamaForCausalLM(config).eval()
ids = torch.arange(2, 12).reshape(2, 5)
compiled = torch.compile(model, backend="eager")
block = "model.layers.0"
assert ht.get_layer(compiled, block) is model.model.layers[0] is ht.get_layer(compiled, "_orig_mod." + block)
mlp = "_orig_mod." + block + ".mlp"                 # one name with the prefix, one without
with ht.capture(compiled, [block, mlp], grads=True) as rec:   # compiled with the hooks in place
    compiled(ids).logits.sum().backward()
assert rec.names == [block, mlp] and rec.n_calls("_orig_mod." + block) == 1
assert torch.equal(rec[block], rec["_orig_mod." + block]) and rec.grads[block].shape == rec[block].shape
assert rec[mlp] is rec[block + ".mlp"] and rec.grads[block + ".mlp"].shape == (2, 5, 16)
assert "_orig_mod." + block in rec and block + ".mlp" in rec
with model.model.layers[1].register_forward_hook(lambda m, a, o: None):
    assert len(ht.list_hooks(compiled).where(path="model.layers.1")) == 1
print("ok")
"""


@pytest.mark.skipif(not hasattr(torch.compiler, "is_exporting"),
                    reason="transformers 5's masking code calls torch.compiler.is_exporting, which this torch "
                           "lacks (2.6 does): Dynamo stops on the AttributeError while compiling the model")
def test_layer_names_of_a_compiled_hugging_face_model_work_without_orig_mod(in_a_process_of_its_own):
    """torch.compile names every layer `_orig_mod.<name>`: capture, its recording, get_layer and
    list_hooks take the names with or without it. In a process of its own: it compiles."""
    assert in_a_process_of_its_own(_COMPILED).strip().endswith("ok")


# -- lesson 12's rules about output_hidden_states, on other architectures than the lesson's Llama --------

_LAYERS = {"llama": "model.layers", "gpt2": "transformer.h", "bert": "encoder.layer"}


def _steer(module, args, output):
    """Adds 1 to a block's hidden states, whatever the block returns (a tensor, or a tuple)."""
    if isinstance(output, tuple):
        return (output[0] + 1, *output[1:])
    return output + 1


@pytest.mark.parametrize("arch", sorted(_LAYERS))
def test_hidden_states_start_with_the_first_layers_input_and_end_with_last_hidden_state(configs, arch):
    """hidden_states[0] is what the first layer receives (a pre-hook that doubles it doubles the
    entry, since transformers 5.2); the last entry is last_hidden_state: the final norm's output in
    Llama and GPT-2, the last layer's output in BERT, which has no final norm."""
    model, kw = build(configs, arch), inputs(configs, arch)
    layers = ht.get_layer(model, _LAYERS[arch])
    with ht.capture(model, [f"{_LAYERS[arch]}.{len(layers) - 1}"]) as rec:
        out = model(**kw, output_hidden_states=True)
    assert len(out.hidden_states) == len(layers) + 1
    assert torch.equal(out.hidden_states[-1], model.base_model(**kw).last_hidden_state)
    last_layer = rec[f"{_LAYERS[arch]}.{len(layers) - 1}"]
    last_layer = last_layer[0] if isinstance(last_layer, tuple) else last_layer
    # BERT has no final norm: its last entry is the last layer's output; Llama and GPT-2 end in a norm
    assert torch.equal(out.hidden_states[-1], last_layer) == (arch == "bert")
    if CAPTURING:
        with layers[0].register_forward_pre_hook(lambda m, args: (2 * args[0], *args[1:])):
            doubled = model(**kw, output_hidden_states=True).hidden_states[0]
        assert torch.equal(doubled, 2 * out.hidden_states[0])   # doubling is exact


@pytest.mark.parametrize("arch", sorted(_LAYERS))
def test_a_late_steering_hook_is_missing_from_its_own_layers_entry_only(configs, arch):
    """On a model asked for hidden states before (transformers' hooks first), a steering hook on
    layer 0 leaves hidden_states[1] unsteered, and every later entry, the last included, steered;
    registered with prepend=True, it runs before them and its entry is steered too."""
    model, kw = build(configs, arch), inputs(configs, arch)
    plain = model(**kw, output_hidden_states=True).hidden_states
    with ht.get_layer(model, _LAYERS[arch])[0].register_forward_hook(_steer):
        steered = model(**kw, output_hidden_states=True).hidden_states
    assert torch.equal(steered[0], plain[0])
    assert torch.equal(steered[1], plain[1]) == CAPTURING   # from 4.54 to 5.1 too, but the flag is 5.2's
    assert all(not torch.equal(s, p) for s, p in zip(steered[2:], plain[2:]))
    if CAPTURING:   # registered after them but put first (prepend=True, lesson 02): its entry is steered
        with ht.get_layer(model, _LAYERS[arch])[0].register_forward_hook(_steer, prepend=True):
            first = model(**kw, output_hidden_states=True).hidden_states
        assert not torch.equal(first[1], plain[1])
        assert all(torch.equal(f, s) for f, s in zip(first[2:], steered[2:]))   # the same steered run after it


def test_an_architecture_without_capture_outputs_leaves_no_hook_and_shows_a_late_steering_hook(configs):
    """Bloom (in transformers 5.24 not built on capture_outputs) collects the hidden states in its own
    loop: no hook left, and a steering hook registered after the first call shows in its entry."""
    model = transformers.BloomForCausalLM(transformers.BloomConfig(vocab_size=VOCAB, hidden_size=16, n_layer=2,
                                                                   n_head=2)).eval()
    plain = model(IDS, output_hidden_states=True).hidden_states
    assert len(plain) == 3 and len(ht.list_hooks(model)) == 0
    with model.transformer.h[0].register_forward_hook(_steer):
        steered = model(IDS, output_hidden_states=True).hidden_states
    assert not torch.equal(steered[1], plain[1]) and len(ht.list_hooks(model)) == 0


def test_a_pre_hook_on_the_first_block_does_not_show_in_hidden_states_without_capture_outputs(configs):
    """Lesson 12's recap scopes "hidden_states[0] is what the first layer receives, a pre-hook changes it"
    to capture_outputs architectures: Bloom's loop records its entry before it calls the block, so the
    entry is what block 0 receives without its pre-hooks, and one that doubles it does not show."""
    model = transformers.BloomForCausalLM(transformers.BloomConfig(vocab_size=VOCAB, hidden_size=16, n_layer=2,
                                                                   n_head=2)).eval()
    received = {}
    with model.transformer.h[0].register_forward_pre_hook(lambda m, args: received.update(x=args[0])):
        plain = model(IDS, output_hidden_states=True).hidden_states
    with model.transformer.h[0].register_forward_pre_hook(lambda m, args: (2 * args[0], *args[1:])):
        doubled = model(IDS, output_hidden_states=True).hidden_states
    assert torch.equal(plain[0], received["x"])   # what block 0 receives ...
    assert torch.equal(doubled[0], plain[0])      # ... before its pre-hooks ran


def test_the_default_attention_depends_on_the_architecture():
    """Lessons 12's "sdpa, the default" is Llama's and T5's (a config that names no attention); Bloom,
    which has no sdpa path, defaults to eager."""
    t = transformers
    made = {
        "llama": t.LlamaForCausalLM(t.LlamaConfig(vocab_size=VOCAB, hidden_size=16, intermediate_size=32,
                                                  num_hidden_layers=1, num_attention_heads=2,
                                                  num_key_value_heads=1)),
        "t5": t.T5ForConditionalGeneration(t.T5Config(vocab_size=VOCAB, d_model=16, d_kv=8, d_ff=32, num_layers=1,
                                                      num_heads=2)),
        "bloom": t.BloomForCausalLM(t.BloomConfig(vocab_size=VOCAB, hidden_size=16, n_layer=1, n_head=2)),
    }
    assert {name: model.config._attn_implementation for name, model in made.items()} == {
        "llama": "sdpa", "t5": "sdpa", "bloom": "eager"}


def test_generate_without_min_new_tokens_stops_at_eos_with_fewer_calls(configs):
    """Lesson 12, section 5: "new_tokens calls in all" holds when generation runs to its end: without
    min_new_tokens, a sequence whose second greedy token is the EOS stops there, after two calls."""
    model, one = build(configs, "llama"), IDS[:1]
    free = model.generate(one, max_new_tokens=4, min_new_tokens=4, do_sample=False)
    assert free.shape == (1, 9)
    model.generation_config.eos_token_id = int(free[0, 6])   # the second new token is now the EOS
    calls = []
    with model.model.layers[0].register_forward_hook(lambda m, args, out: calls.append(ht_first(out).shape[1])):
        stopped = model.generate(one, max_new_tokens=4, do_sample=False)
    assert int(free[0, 5]) != int(free[0, 6])   # the EOS is not also the first new token
    assert stopped.shape == (1, 7) and calls == [5, 1]


def test_prompt_lookup_decoding_hands_a_block_several_tokens_per_call(configs):
    """Lesson 12's "one new token per call" is scoped to plain decoding: prompt-lookup decoding,
    greedy and cached too, proposes tokens copied from the prompt and checks them in one call, so a
    block sees more than one token in some call after the first (a hook reading output[:, -1]
    there misses positions)."""
    model = build(configs, "llama")
    repeating = torch.tensor([[5, 17, 42, 5, 17, 42, 5, 17]])   # something for the lookup to find
    lengths = []
    with model.model.layers[0].register_forward_hook(lambda m, args, out: lengths.append(ht_first(out).shape[1])):
        model.generate(repeating, max_new_tokens=6, min_new_tokens=6, do_sample=False, prompt_lookup_num_tokens=3)
    assert lengths[0] > repeating.shape[1] or any(n > 1 for n in lengths[1:]), lengths


def test_generate_on_t5_runs_the_encoder_once_and_the_decoder_one_token_per_call(configs):
    """Lesson 12, section 5, on an encoder-decoder: the encoder's blocks run once, on the prompt; the
    decoder's blocks never see the prompt: every one of their new_tokens calls has one token (the first,
    the decoder's start token)."""
    model, lengths = build(configs, "t5"), {"encoder.block.0": [], "decoder.block.0": []}
    kinds, keywords = [], set()
    handles = [model.get_submodule(name).register_forward_hook(
        lambda m, args, out, name=name: lengths[name].append(ht_first(out).shape[1])) for name in lengths]
    handles.append(model.get_submodule("decoder.block.0").register_forward_hook(
        lambda m, args, kwargs, out: kinds.append(type(out)) or keywords.update(kwargs), with_kwargs=True))
    try:
        model.generate(IDS, max_new_tokens=4, min_new_tokens=4, do_sample=False)
    finally:
        for handle in handles:
            handle.remove()
    assert lengths == {"encoder.block.0": [IDS.shape[1]], "decoder.block.0": [1, 1, 1, 1]}
    # the recap: a T5 block returns a tuple (read output[0][:, -1]) and is given no position_ids
    assert set(kinds) == {tuple} and "position_ids" not in keywords, (kinds, keywords)


def ht_first(output):
    """The hidden states in what a block returns: the tensor, or element 0 of a tuple."""
    return output[0] if isinstance(output, tuple) else output


def test_position_ids_count_each_rows_tokens_from_its_first_real_one_under_left_padding(configs):
    """Lesson 12, section 5: under generate() the decoder layers get position_ids; in a left-padded batch
    they count each row's real tokens, so position 2 is another column in each row."""
    model, seen = build(configs, "llama"), []
    padded = torch.tensor([[5, 17, 42, 8, 99], [0, 0, 61, 20, 7]])   # row 1: two pads in front
    with model.model.layers[0].register_forward_hook(
            lambda m, args, kwargs, out: seen.append(kwargs["position_ids"].tolist()), with_kwargs=True):
        model.generate(padded, attention_mask=(padded != 0).long(), max_new_tokens=2, min_new_tokens=2,
                       do_sample=False, pad_token_id=0)
    assert seen[0] == [[0, 1, 2, 3, 4], [0, 0, 0, 1, 2]]   # the two pads: 0 (masked)
    assert seen[1] == [[5], [3]]
    # a plain call builds no per-row positions (the second fresh review's O1): every row counts 0, 1, ...
    seen.clear()
    with model.model.layers[0].register_forward_hook(
            lambda m, args, kwargs, out: seen.append(kwargs["position_ids"].tolist()), with_kwargs=True):
        model(padded, attention_mask=(padded != 0).long())
    assert seen == [[[0, 1, 2, 3, 4]]]


def test_the_hidden_states_exercise_accepts_its_right_alternatives():
    """A right answer that is not the solution's (pre-hooks keeping each decoder layer's input, as
    transformers records hidden_states[0]) passes every case, the kept ones included."""
    import importlib

    from hooktutor.exercises import hf_hooks

    module = importlib.import_module("hooktutor.exercises.hf_hooks.hidden_states")
    assert module.right_answers
    for label, answer in module.right_answers.items():
        report = hf_hooks.hidden_states.check(answer, hidden=True)
        assert report.passed, (label, repr(report))


_ATTENTION = {"llama": "model.layers.0.self_attn", "gpt2": "transformer.h.0.attn",
              "bert": "encoder.layer.0.attention.self", "t5": "encoder.block.0.layer.0.SelfAttention"}


@pytest.mark.parametrize("arch", sorted(_ATTENTION))
def test_an_attention_modules_hook_gets_weights_under_eager_attention_only(configs, arch):
    """Lesson 12's verdict on 'hook the attention module to get the attention weights': under the
    default sdpa the weights are None, under eager attention a (batch, heads, query, key) tensor, the
    last entry of what the module returns (T5's has a position bias before it)."""
    import copy

    cls, config, *_ = configs[arch]
    model, kw = cls(copy.deepcopy(config)).eval(), inputs(configs, arch)   # a config of its own: switched
    assert model.config._attn_implementation == "sdpa"
    seen = []
    with ht.get_layer(model, _ATTENTION[arch]).register_forward_hook(lambda m, a, out: seen.append(out)):
        model(**kw)
        model.set_attn_implementation("eager")
        model(**kw)
    sdpa, eager = seen
    assert sdpa[-1] is None and eager[-1].shape == (2, 2, 5, 5)
    # the weights are the last entry: T5's attention returns (output, position_bias, weights), and
    # its output[1], a (1, heads, query, key) bias, is there under sdpa too
    assert len(sdpa) == len(eager) == (3 if arch == "t5" else 2)
    if arch == "t5":
        assert sdpa[1] is not None and sdpa[1].shape == (1, 2, 5, 5)


@pytest.mark.parametrize("arch", ["llama", "gpt2", "t5"])
def test_a_model_outputs_fields_none_left_out_the_cache_by_name_and_sdpa_attentions_empty(configs, arch):
    """Lesson 12's recap on other architectures: a ModelOutput leaves out its None fields (the cache,
    with use_cache=False), the cache is the field `cache` (since transformers 5.24; `past_key_values`
    still answers), and under sdpa output_attentions gives an empty tuple (since 5.2) per field."""
    model, kw = build(configs, arch), inputs(configs, arch)
    assert model.config._attn_implementation == "sdpa"
    field = "cache" if claims.expected("hf-model-output-cache-field") else "past_key_values"
    out, no_cache = model(**kw), model(**kw, use_cache=False)
    assert field in out.keys() and field not in no_cache.keys()
    assert getattr(out, field) is out.past_key_values and getattr(no_cache, field) is None
    asked = model(**kw, output_attentions=True)
    attentions = {k: v for k, v in asked.items() if k.endswith("attentions")}
    assert attentions
    if claims.expected("hf-sdpa-attentions-empty-tuple"):
        assert all(v == () for v in attentions.values()), attentions


def test_an_in_place_steering_hook_after_transformers_hooks_shows_in_its_own_layers_entry(configs):
    """Lesson 12, cells 65 and 69 (the third fresh read's O1): transformers' capture hooks keep the
    layer's output itself, so a steering hook registered after them that returns a new tensor is
    missing from its layer's entry of hidden_states, and one that edits the output in place is not."""
    model = build(configs, "llama")
    ids = torch.tensor([[5, 17, 42, 8, 99]])
    layer = model.model.layers[0]
    with torch.no_grad():
        model(ids, output_hidden_states=True)   # the capture hooks are installed on the first call that asks
        plain = model(ids, output_hidden_states=True).hidden_states[1].clone()
        vector = torch.ones(plain.shape[-1])
        shown = {}
        for kind, hook in (("new", lambda m, a, o: o + vector), ("in place", lambda m, a, o: o.add_(vector))):
            with layer.register_forward_hook(hook):
                entry = model(ids, output_hidden_states=True).hidden_states[1]
            shown[kind] = torch.allclose(entry, plain + vector)
    assert shown == {"new": False, "in place": True}


def test_prefill_chunk_size_splits_the_prompt_into_several_calls_of_each_block(configs):
    """Lesson 12's recap (the third fresh read's O2): greedy generate() with the cache calls a block once
    with the prompt and once per further token, without prefill_chunk_size; with it, the prompt is
    several calls."""
    from transformers import GenerationConfig

    if not hasattr(GenerationConfig(), "prefill_chunk_size"):
        pytest.skip(f"transformers {transformers.__version__} has no prefill_chunk_size")
    model, ids = build(configs, "llama"), torch.tensor([[5, 17, 42, 8, 99, 31]])
    lengths = {}
    for label, extra in (("plain", {}), ("chunked", {"prefill_chunk_size": 2})):
        seen = []
        with model.model.layers[0].register_forward_hook(lambda m, a, o: seen.append(ht_first(o).shape[1])):
            model.generate(ids, max_new_tokens=3, min_new_tokens=3, do_sample=False, **extra)
        lengths[label] = seen
    assert lengths == {"plain": [6, 1, 1], "chunked": [2, 2, 2, 1, 1]}
