"""What changes from one torch (or transformers) release to the next, for the lessons that depend on it.

The course runs on every torch that ``pyproject.toml`` admits (2.1.2 and newer), and lesson 12 on
every transformers it admits (5.0 and newer). Where a lesson's claim or an error text it shows
differs between releases, it is registered here, once: the library it is about (``"torch"``, or
``"transformers"`` for those of :mod:`hooktutor.course.claims_transformers`), what the behaviour
was before, what it is since, the first release that has the new one, and a probe that tells
which of the two the installed library shows. A lesson cell keys its expectation on the
installed version of that library and asserts the behaviour it sees::

    from hooktutor.course import claims
    if versions.expected("legacy-hook-future-warning"):   # since torch 2.4
        ...

``python3 course.py compat`` runs every probe on each tested torch and transformers and fails when
a probe contradicts the registry; ``python -m hooktutor.course.claims`` prints them for this
environment.
"""

from __future__ import annotations

import json
import re
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Claim:
    id: str
    kind: str          # "behaviour": a lesson teaches it; "wording": the text of an error a lesson shows
    lessons: tuple[str, ...]
    where: str         # the cells, in words
    before: str        # what torch did before `since`
    after: str         # what it does from `since` on
    since: str         # the first release of `library` that does `after`
    evidence: str      # how `since` was established
    probe: Callable[[], bool]  # True when the installed library does `after`
    library: str = "torch"     # whose release `since` is: "torch" or "transformers"
    # Earlier releases that show `after` too, where a behaviour came, went and came back: half-open
    # ranges (first, first_without) of `library` releases, e.g. (("2.3.0", "2.5.0"),) for 2.3 and 2.4.
    also: tuple[tuple[str, str], ...] = ()


def version_tuple(version: str) -> tuple[int, int, int]:
    """``"2.13.0+cpu"`` -> ``(2, 13, 0)``."""
    parts = [int(p) for p in re.findall(r"\d+", version.split("+")[0])[:3]]
    return tuple((parts + [0, 0, 0])[:3])  # type: ignore[return-value]


def installed(library: str = "torch") -> str:
    """The installed release of ``library`` ("torch", "transformers", ...)."""
    if library == "torch":
        import torch
        return torch.__version__
    from importlib.metadata import version
    return version(library)


def unusable(library: str) -> str | None:
    """Why the claims about ``library`` cannot be probed here (not installed, or it disables itself
    on this torch, as transformers 5 does below torch 2.6), or None."""
    if library == "torch":
        return None
    try:
        module = __import__(library)
    except Exception as exc:  # not installed, or broken against this torch
        return f"{library} cannot be imported ({type(exc).__name__}: {str(exc)[:120]})"
    if library == "transformers":
        from transformers.utils import is_torch_available

        if not is_torch_available():
            return f"transformers {module.__version__} cannot use torch {installed()}"
    return None


# --- probes: each builds the smallest case and reports whether the new behaviour shows --------------

def _warnings_through_backward(register) -> list:
    """The warnings of one forward and backward through a ``Linear`` whose input needs no grad,
    with the hook that ``register(linear)`` attaches (its handle is removed afterwards)."""
    import torch
    from torch import nn

    lin = nn.Linear(2, 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with register(lin):
            lin(torch.ones(1, 2)).sum().backward()
    return caught


def _legacy_hook_future_warning() -> bool:
    caught = _warnings_through_backward(lambda lin: lin.register_backward_hook(lambda m, gi, go: None))
    found = [w.category for w in caught if "non-full backward hook" in str(w.message)]
    assert found, "the legacy backward hook gave no warning at all"
    return found[0] is FutureWarning


def _full_hook_no_input_warning() -> bool:
    caught = _warnings_through_backward(lambda lin: lin.register_full_backward_hook(lambda m, gi, go: None))
    return any(str(w.message).startswith("Full backward hook is firing") for w in caught)


def _modules_a_late_hook_sees(register) -> tuple[list, object]:
    """The modules a hook sees in the second call of a compiled nn.Sequential (Linear, ReLU, Linear)
    when ``register(model, note)`` adds it (returning its handle) after the first; and the model."""
    import torch
    import torch._dynamo
    from torch import nn

    torch._dynamo.reset()
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 2))
    compiled = torch.compile(model, backend="eager")
    x = torch.ones(1, 2)
    compiled(x)
    seen = []
    try:
        with warnings.catch_warnings():   # newer torch warns of a global hook beside compile
            warnings.simplefilter("ignore")
            with register(model, lambda m, a, o: seen.append(m)):
                compiled(x)
    finally:
        torch._dynamo.reset()
    return seen, model


def _compile_skips_late_hook() -> bool:
    seen, model = _modules_a_late_hook_sees(lambda model, note: model[2].register_forward_hook(note))
    return not seen


def _compile_skips_late_global_hook() -> bool:
    from torch.nn.modules.module import register_module_forward_hook

    seen, model = _modules_a_late_hook_sees(lambda model, note: register_module_forward_hook(note))
    return not any(m is model[2] for m in seen)


def _error_names_forward_op() -> bool:
    import torch
    from torch import nn

    net = nn.Sequential(nn.Linear(2, 2), nn.ReLU(inplace=True))
    with net[0].register_full_backward_hook(lambda m, gi, go: None):
        try:
            net(torch.ones(1, 2))
        except RuntimeError as error:
            message = str(error)
    assert "is a view and is being modified inplace" in message, message
    return message.startswith("Output 0 of BackwardHookFunction is")


def _addmm_prefix() -> bool:
    import torch

    try:
        torch.nn.functional.linear(torch.zeros(2, 5), torch.zeros(16, 8), torch.zeros(16))
    except RuntimeError as error:
        message = str(error)
    assert "mat1 and mat2 shapes cannot be multiplied" in message, message
    return message.startswith("addmm: ")


def _module_state_dict_hooks_public() -> bool:
    import torch
    from torch import nn

    public = hasattr(nn.Module, "register_state_dict_post_hook")
    assert public == hasattr(nn.Module, "register_load_state_dict_pre_hook"), "one of the two public APIs only"
    if not public:
        return False
    lin = nn.Linear(1, 1)
    with lin.register_state_dict_post_hook(lambda module, state_dict, prefix, meta: {"x": torch.zeros(1)}):
        try:
            lin.state_dict()
        except RuntimeError as error:
            return "must return None" in str(error)
    return False


def _gradient_edge() -> bool:
    import torch
    import torch.autograd.graph as graph

    if not hasattr(graph, "get_gradient_edge"):
        return False
    x = torch.ones(2, requires_grad=True)
    h = x * 2
    edge = graph.get_gradient_edge(h)
    (grad,) = torch.autograd.grad((h * 3).sum(), edge)
    return bool(torch.equal(grad, torch.full((2,), 3.0)))


def _multi_grad_hook_any() -> bool:
    import inspect

    import torch
    from torch.autograd.graph import register_multi_grad_hook

    if "mode" not in inspect.signature(register_multi_grad_hook).parameters:
        return False
    a, b = torch.ones(2, requires_grad=True), torch.ones(2, requires_grad=True)
    seen = []
    with register_multi_grad_hook((a, b), seen.append, mode="any"):
        (a * 2 + b * 3).sum().backward()
    return len(seen) == 1 and isinstance(seen[0], torch.Tensor)


def _module_tracker() -> bool:
    try:
        from torch.utils.module_tracker import ModuleTracker
    except ImportError:
        return False
    return hasattr(ModuleTracker(), "is_bw")


def _encoder_fastpath_off_with_hooks() -> bool:
    import torch
    from torch import nn

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True).eval()
    fired = []
    with layer.self_attn.register_forward_hook(lambda m, a, o: fired.append(True)):
        with torch.inference_mode():
            layer(torch.ones(2, 3, 8))
    return bool(fired)


def _compiler_is_compiling() -> bool:
    import torch
    import torch._dynamo

    is_compiling = getattr(torch.compiler, "is_compiling", None)
    if is_compiling is None:
        return False

    def branch(x):   # which branch runs tells whether is_compiling() was True: traced, or eager
        return x + 1 if is_compiling() else x - 1

    x = torch.zeros(1)
    torch._dynamo.reset()
    try:
        traced = torch.compile(branch, backend="eager")(x)
    finally:
        torch._dynamo.reset()
    return bool(traced.item() == 1 and branch(x).item() == -1)   # True while tracing, False in eager


def _export_non_strict() -> bool:
    import torch

    exported = _non_strict_export_of_a_hooked_layer()
    if exported is None:
        return False
    ran, program, hooked = exported
    # the hook ran in the export's trace (and once in the eager call), and the program computes the
    # hooked output: the same operations, float32 rounding only (1e-6), the hook adds 1
    return len(ran) >= 2 and torch.allclose(program.module()(torch.ones(1, 2)), hooked, atol=1e-6)


def _export_non_strict_traces_once() -> bool:
    exported = _non_strict_export_of_a_hooked_layer()
    return exported is not None and len(exported[0]) == 2   # once in the trace, once eagerly


def _non_strict_export_of_a_hooked_layer():
    """A Linear whose forward hook adds 1 and notes each call, exported with ``strict=False``, then
    called once eagerly: ``(the hook's calls, the program, the hooked output)``; None where
    ``torch.export.export`` has no ``strict`` (before torch 2.2)."""
    import inspect

    import torch
    import torch.export
    from torch import nn

    if "strict" not in inspect.signature(torch.export.export).parameters:
        return None
    layer, x, ran = nn.Linear(2, 2), torch.ones(1, 2), []
    with layer.register_forward_hook(lambda m, a, o: ran.append(1) or o + 1):   # runs in the trace
        program = torch.export.export(layer, (x,), strict=False)
        hooked = layer(x)
    return ran, program, hooked


def _mha_fastpath_switch() -> bool:
    import torch

    return hasattr(getattr(torch.backends, "mha", None), "set_fastpath_enabled")


def _fsdp2_sharded_grad(rank: int, world_size: int):
    """One Linear under ``fully_shard``, in a gloo group: rank r's input is r + 1 everywhere, so its own
    gradient is r + 1 in every entry (the probe of fsdp2-cpu-averages-gradients, in each process)."""
    import torch
    from torch import nn
    from torch.distributed.fsdp import fully_shard

    layer = nn.Linear(2, 2, bias=False)
    fully_shard(layer)
    layer(torch.full((1, 2), float(rank + 1))).sum().backward()
    return layer.weight.grad.full_tensor()


def _fsdp2_cpu_averages_gradients() -> bool:
    import torch

    if version_tuple(torch.__version__) < (2, 7, 0):   # FSDP2 does not run on a CPU before 2.7
        return False                                  # (lesson 13's floor): nothing to average
    from .. import distributed

    grad = distributed.run(_fsdp2_sharded_grad, 2)[0]
    average, total = torch.full_like(grad, 1.5), torch.full_like(grad, 3.0)   # (1 + 2) / 2 and 1 + 2
    assert torch.equal(grad, average) or torch.equal(grad, total), grad
    return torch.equal(grad, average)


def _ao_quantization_deprecated() -> bool:
    import torch
    from torch import nn

    model = nn.Sequential(nn.Linear(2, 2))
    model.qconfig = torch.ao.quantization.default_qconfig
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.ao.quantization.prepare(model, inplace=True)
    return any("torch.ao.quantization is deprecated" in str(w.message) for w in caught)


def _graph_count_of(fn, *args) -> int:
    """How many graphs Dynamo makes for one call of ``fn(*args)`` and a backward of its output."""
    import torch
    import torch._dynamo

    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    try:
        torch.compile(fn, backend=backend)(*args).sum().backward()
    finally:
        torch._dynamo.reset()
    return len(graphs)


def _compile_traces_tensor_hook() -> bool:
    import torch
    from torch import nn

    # the lesson's set-up: a forward hook registers a tensor hook (no side effect) on the layer's output
    layer = nn.Linear(2, 2)
    with layer.register_forward_hook(lambda m, a, o: o.register_hook(lambda grad: grad * 0.5) and None):
        return _graph_count_of(lambda x: layer(x * 2) * 3, torch.ones(1, 2, requires_grad=True)) == 1


def _compile_traces_capture_hooks() -> bool:
    import torch
    import torch._dynamo

    from .. import capture
    from ..models import MLP

    model, graphs = MLP(seed=0), []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    try:
        compiled = torch.compile(model, backend=backend)
        with capture(compiled):
            compiled(torch.ones(2, 8))
    finally:
        torch._dynamo.reset()
    return len(graphs) == 1


def _compile_hook_break_compiles_module_forward() -> bool:
    import torch
    from torch import nn

    layers = [nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 1)]

    def forward(inp):   # the lesson's `Written`: the layers called one by one (no loop: a break in a
        fc1, act1, fc2, act2, head = layers   # loop would leave the whole frame uncompiled)
        return head(act2(fc2(act1(fc1(inp)))))

    def tensor_hook(grad):   # a side effect: the graph breaks at register_hook on every release
        seen.append(1)
        return grad

    seen = []
    with layers[2].register_forward_hook(lambda m, a, o: o.register_hook(tensor_hook) and None):
        graphs = _graph_count_of(forward, torch.ones(1, 2, requires_grad=True))
    assert graphs in (2, 3), f"the hook's graph break gave {graphs} graphs"
    return graphs == 3   # before the hooked layer, its own forward, after it; 2: its forward in no graph


def _export_strict_tensor_hook_exports() -> bool:
    import inspect

    import torch
    import torch._dynamo
    import torch.export
    from torch import nn

    if "strict" not in inspect.signature(torch.export.export).parameters:
        return False   # before torch 2.2: Dynamo's export fails on a forward hook anyway (export-non-strict)
    layer = nn.Linear(2, 2)

    def hook(module, args, output):   # the lesson's section 5: a tensor hook from a forward hook
        output.register_hook(lambda grad: grad * 0.5)

    try:
        with layer.register_forward_hook(hook):
            torch.export.export(layer, (torch.ones(1, 2),), strict=True)
    except torch._dynamo.exc.Unsupported as error:
        if "intermediate hooks" not in str(error):
            raise
        return False
    finally:
        torch._dynamo.reset()
    return True


def _export_strict_tensor_hook_grad() -> bool:
    import torch
    import torch.export
    from torch import nn

    if not _export_strict_tensor_hook_exports():
        return False   # no program at all (export-strict-tensor-hook-exports): none whose backward reaches x
    layer = nn.Linear(2, 2)

    def hook(module, args, output):   # the lesson's section 5: a tensor hook from a forward hook
        output.register_hook(lambda grad: grad * 0.5)

    with layer.register_forward_hook(hook):
        program = torch.export.export(layer, (torch.ones(1, 2),), strict=True)
    x = torch.ones(1, 2, requires_grad=True)
    program.module()(x).sum().backward()
    return x.grad is not None


def _compile_module_backward_hook_reason() -> bool:
    import torch
    import torch._dynamo
    from torch import nn
    from torch._dynamo.utils import counters

    model = nn.Linear(2, 2)
    counters["graph_break"].clear()
    with model.register_full_backward_hook(lambda m, gi, go: None):
        _graph_count_of(lambda x: model(x * 2) * 2, torch.ones(1, 2, requires_grad=True))
    reasons = list(counters["graph_break"])
    assert reasons, "a full backward hook on a module no longer breaks the graph"
    return any("backwards hooks require compiled autograd" in r.lower() for r in reasons)


def _compile_traces_torch_nn_root_hooks() -> bool:
    import torch
    import torch._dynamo
    from torch import nn

    model, ran = nn.Sequential(nn.Embedding(4, 2)), []
    compiled = torch.compile(model, backend="eager")
    torch._dynamo.reset()
    try:
        with model.register_forward_hook(lambda m, a, o: ran.append(o), always_call=True):
            compiled(torch.tensor([0]))
            ran.clear()
            try:
                compiled(torch.tensor([9]))   # past the 4 rows: raises inside the compiled graph
            except IndexError:
                pass
    finally:
        torch._dynamo.reset()
    return not ran


def _module_compile_method() -> bool:
    import torch
    import torch._dynamo
    from torch import nn

    if not hasattr(nn.Module, "compile"):
        return False
    model = nn.Linear(2, 2)
    try:
        model.compile(backend="eager")   # compiles nothing yet: sets the call that model(...) runs
        return getattr(model, "_compiled_call_impl", None) is not None
    finally:
        torch._dynamo.reset()


def _module_compile_traces_torch_nn_forward() -> bool:
    import torch
    import torch._dynamo
    from torch import nn

    if not hasattr(nn.Module, "compile"):
        return False
    graphs = []
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    torch._dynamo.reset()
    try:
        model.compile(backend=lambda gm, example_inputs: graphs.append(gm) or gm.forward)
        model(torch.ones(1, 2))
    finally:
        torch._dynamo.reset()
    return bool(graphs)   # no graph: nn.Sequential.compile() ran the call eagerly (its frames skipped)


def _compile_guards_every_hook_kind() -> bool:
    import torch
    import torch._dynamo
    from torch import nn

    def late_hook_runs(kind_at_compile: str | None) -> bool:
        """Whether a forward pre-hook added after the first compiled call runs in the next one, on a
        Linear that had a no-op hook of ``kind_at_compile`` (or none) when it compiled."""
        model, ran = nn.Sequential(nn.Linear(2, 2)), []
        register = {"forward": model[0].register_forward_hook, None: None}[kind_at_compile]
        handle = register(lambda m, a, o: None) if register else None
        torch._dynamo.reset()
        try:
            compiled = torch.compile(model, backend="eager")
            compiled(torch.zeros(1, 2))
            with model[0].register_forward_pre_hook(lambda m, a: ran.append(1) and None):
                compiled(torch.zeros(1, 2))
        finally:
            if handle is not None:
                handle.remove()
            torch._dynamo.reset()
        return bool(ran)

    # (before torch 2.5 a late hook on a built-in layer runs anyway: not what this claim is about)
    return not late_hook_runs(None) and late_hook_runs("forward")


from .claims_transformers import claims as _transformers_claims  # noqa: E402

CLAIMS: dict[str, Claim] = {c.id: c for c in [
    Claim(
        id="legacy-hook-future-warning",
        kind="behaviour",
        lessons=("04_backward_hooks",),
        where="section 7 (the legacy hook side by side with a full one, and the warning it gives)",
        before="the legacy `register_backward_hook` warns that it misses gradients with a `UserWarning`",
        after="the same warning is a `FutureWarning` (shown by default, a removal is announced)",
        since="2.4.0",
        evidence="torch/nn/modules/module.py, `_maybe_warn_non_full_backward_hook`: its `warnings.warn` call "
                 "gives no category (so a UserWarning) up to the 2.3.1 wheel and `FutureWarning` from the 2.4.0 "
                 "wheel on",
        probe=_legacy_hook_future_warning,
    ),
    Claim(
        id="full-hook-no-input-warning",
        kind="behaviour",
        lessons=("04_backward_hooks",),
        where="section 2 (the first layer's full hook) and the claim '`grad_input` is `None` for inputs that do "
              "not require grad'",
        before="a full backward hook that fires on the module's outputs, because no input requires grad, "
               "does so silently",
        after="it fires the same way and warns once: a `UserWarning` 'Full backward hook is firing when "
              "gradients are computed with respect to module outputs ...'",
        since="2.8.0",
        evidence="torch/utils/hooks.py, `BackwardHook._set_user_hook`: the warning is absent from the 2.7.1 "
                 "wheel and present in the 2.8.0 wheel (pytorch/pytorch#155339)",
        probe=_full_hook_no_input_warning,
    ),
    Claim(
        id="compile-skips-late-hook",
        kind="behaviour",
        lessons=("02_forward_hooks", "11_compile_and_export"),
        where="02 section 10 (the warning, one cell); 11: the prediction, section 1 (late hooks, removal and "
              "replacement), section 2 (a late full backward hook), section 4 (capture on a compiled model), "
              "'Try it live' and the claims",
        before="a forward hook added after the first compiled call, on a built-in layer that had no hook, "
               "fires: the compiled graph calls the layer as a module (`call_module`), hooks included",
        after="the compiled graph inlines built-in layers (`F.linear`, ...), so that late hook does not fire "
              "until `torch._dynamo.reset()` and a new compile",
        since="2.5.0",
        evidence="torch/_dynamo/config.py: `inline_inbuilt_nn_modules` defaults to False (opt-in by environment "
                 "variable) up to the 2.4.1 wheel and to True from the 2.5.0 wheel on; the probe was run on "
                 "2.4.1 (fires) and 2.5.1 (does not fire)",
        probe=_compile_skips_late_hook,
    ),
    Claim(
        id="compile-skips-late-global-hook",
        kind="behaviour",
        lessons=("02_forward_hooks", "11_compile_and_export"),
        where="02 section 10 (a late global hook, the second cell); 11: the claim 'set "
              "skip_nnmodule_hook_guards = False and hooks added after compiling run'",
        before="a global module forward hook registered after the first compiled call fires for the compiled "
               "model's modules (and for the compiled wrapper), with Dynamo's default settings and with its "
               "hook guards on (2.2, 2.5 and 2.6; 2.3 and 2.4 skip it as 2.7 does)",
        after="in a model compiled with no hook on any of its modules, such a global hook fires only for the "
              "compiled wrapper (`OptimizedModule`), never for a module inside the compiled graph, with the hook "
              "guards on too (`skip_nnmodule_hook_guards=False`); a root of one's own class runs it too, and "
              "where a layer had a hook as the model compiled it runs in every module (since 2.5: "
              "tests/test_rules_11.py)",
        since="2.7.0",
        evidence="observed: the 2.5.1 and 2.6.0 wheels fire the late global hook for every module of the lesson's MLP "
                 "(with the guards off and on), while a late hook on fc2 itself is skipped there "
                 "(compile-skips-late-hook); the 2.7.1 and 2.8.0 wheels (the probe alone), 2.9.1 (every "
                 "lesson: lessons 02 and 11 failed their asserts there while the registry said 2.11), 2.11.0 "
                 "(Colab's), 2.12.1, 2.13.0 and 2.14.1 fire it for the wrapper only. Not a single change: "
                 "the 2.2.2 wheel fires it, the 2.3.1 and 2.4.1 wheels skip it as 2.7 does, and 2.5 brought "
                 "it back, so the registry holds 2.3 and 2.4 as a window (`also`), and the lessons' asserts expect it "
                 "there; compat runs no release of 2.2 to 2.5 (the 2.3.1 and 2.4.1 wheels ran the probe alone)",
        probe=_compile_skips_late_global_hook,
        also=(("2.3.0", "2.5.0"),),
    ),
    Claim(
        id="compiler-is-compiling",
        kind="behaviour",
        lessons=("11_compile_and_export",),
        where="section 3 (a hook that does its debugging part only outside a trace, with `is_compiling()`)",
        before="`torch.compiler` has no `is_compiling`; the private `torch._dynamo.is_compiling()` says whether "
               "Dynamo is tracing",
        after="`torch.compiler.is_compiling()` is public: True while `torch.compile` or `torch.export` traces, "
              "False in eager code",
        since="2.3.0",
        evidence="the `__all__` of torch/compiler/__init__.py in the 2.2 documentation's module source lists compile, "
                 "assume_constant_result, reset, allow_in_graph, list_backends, disable and "
                 "cudagraph_mark_step_begin, no is_compiling; the 2.3 API reference (torch.compiler_api.rst) "
                 "lists is_compiling and is_dynamo_compiling; the 2.1.2 wheel lacks it, the 2.6.0, 2.11.0, 2.12.1, "
                 "2.13.0, 2.14.1 and 2.15.0 wheels have it (python3 course.py compat); 2.2 to 2.5 were not run",
        probe=_compiler_is_compiling,
    ),
    Claim(
        id="export-non-strict",
        kind="behaviour",
        lessons=("11_compile_and_export",),
        where="section 5 (`torch.export` and hooks: what an exported program keeps of forward hooks, backward "
              "hooks, a parametrization) and the claim 'torch.export throws away forward hooks'",
        before="`torch.export.export(f, args, kwargs, constraints)` traces with Dynamo only (no `strict` keyword); "
               "on 2.1.2 it fails on the lesson's models, with a forward hook ('graph-captured input #1 ... is "
               "not among original args'), with a full backward hook (Unsupported) and with a parametrization",
        after="`torch.export.export(..., strict=False)` traces the Python forward as it is (hooks run during "
              "the trace) with fake tensors",
        since="2.2.0",
        evidence="pytorch/pytorch#114697 ('Adding an option to torch.export called strict=True', merged November "
                 "2023, before the 2.2 branch cut) separates the strict and non-strict paths; the 2.1.2 wheel's "
                 "signature has no `strict`, the 2.6.0, 2.11.0, 2.12.1, 2.13.0, 2.14.1 and 2.15.0 wheels have it and "
                 "run the lesson's export cells; the 2.2.2, 2.3.1, 2.4.1 and 2.5.1 wheels (the probe alone) have "
                 "it and bake the hook into the program, but run the hook twice while exporting "
                 "(export-non-strict-traces-once)",
        probe=_export_non_strict,
    ),
    Claim(
        id="export-non-strict-traces-once",
        kind="behaviour",
        lessons=("11_compile_and_export",),
        where="section 5 (`torch.export` and hooks: the hook calls during a non-strict export) and the verdict "
              "of the claim 'torch.export throws away forward hooks' (a hook's side effects happen once, at export)",
        before="a non-strict export runs the forward (and its hooks) twice while it traces: a hook's Python side "
               "effects happen twice at export",
        after="it runs the forward once: a hook's side effects happen once, at export",
        since="2.6.0",
        evidence="observed with the probe: the 2.2.2, 2.3.1, 2.4.1 and 2.5.1 wheels call the hook twice during "
                 "`export(..., strict=False)` (the program still computes the hooked output), the 2.6.0, 2.7.1, "
                 "2.8.0, 2.9.1, 2.10.0 and 2.13.0 wheels once; lesson 11 asserted once unconditionally",
        probe=_export_non_strict_traces_once,
    ),
    Claim(
        id="compile-module-backward-hook-reason",
        kind="wording",
        lessons=("11_compile_and_export",),
        where="section 2 (a full backward hook on a submodule of a compiled model: the graph break's reason)",
        before="Dynamo breaks the graph at a submodule with a full backward hook with a generic reason "
               "('call_function args: UnspecializedNNModuleVariable(Linear) ListVariable() ...')",
        after="the reason names the cause: 'Module-level backwards hooks require compiled autograd.'",
        since="2.3.0",
        evidence="pytorch/pytorch#120685 ('[dynamo] Support module backwards hooks', merged March 2024, before "
                 "the 2.3 branch cut) adds the BackwardHookVariable whose graph break gives this reason; the "
                 "2.1.2 wheel gives the generic one, the 2.6.0, 2.11.0, 2.12.1, 2.13.0, 2.14.1 and 2.15.0 wheels "
                 "this one. Releases 2.2 to 2.5 were not run here",
        probe=_compile_module_backward_hook_reason,
    ),
    Claim(
        id="compile-traces-tensor-hook",
        kind="behaviour",
        lessons=("11_compile_and_export",),
        where="section 2 (a tensor hook that a forward hook registers on fc2's output, under torch.compile)",
        before="`register_hook` on an intermediate tensor breaks the graph (2.1.2: unsupported call; later "
               "releases: 'Compilation of intermediate hooks requires compiled autograd')",
        after="Dynamo traces `register_hook` on an intermediate tensor into the graph when the hook has no "
              "side effect (one graph; a hook that appends to a list still breaks it)",
        since="2.13.0",
        evidence="observed with the lesson's set-up (the probe: a forward hook registers the tensor hook): the "
                 "2.1.2, 2.6.0, 2.11.0 (what Colab ships) and 2.12.1 wheels break the graph, the 2.13.0, 2.14.1 "
                 "and 2.15.0 wheels trace the hook; 2.12.1 is the last release before 2.13.0, so 2.13.0 is the "
                 "first. pytorch/pytorch#172126 ('Support hooks on intermediate tensors in dynamo', January "
                 "2026) made a hook registered in the traced function itself traceable already in 2.11.0; one "
                 "registered from a module's forward hook came later",
        probe=_compile_traces_tensor_hook,
    ),
    Claim(
        id="compile-hook-break-compiles-module-forward",
        kind="behaviour",
        lessons=("11_compile_and_export",),
        where="section 2 (a tensor hook that a forward hook registers on fc2's output, under torch.compile: "
              "the graphs where it breaks the graph)",
        before="where a forward hook or pre-hook on a built-in layer breaks the graph (a `register_hook` "
               "Dynamo does not trace: compile-traces-tensor-hook; a tensor hook with a side effect, "
               "`torch._dynamo.graph_break()`, on every release), the layer's own forward runs outside any "
               "graph: the lesson's `Written(MLP)` with the hook on fc2 makes 2 graphs (fc1 and act1; act2 "
               "and head). A module of one's own class there is a graph of its own on every release run",
        after="the hooked built-in layer's own forward is compiled as a graph of its own, as a module of "
              "one's own class always was: 3 graphs (fc1 and act1; fc2's `linear`; act2 and head)",
        since="2.12.0",
        evidence="observed with the lesson's model and the probe (a tensor hook that appends to a list): the "
                 "2.6.0 wheel makes 2 graphs, the 2.12.1, 2.13.0, 2.14.1 and 2.15.0 wheels 3; lesson 11's "
                 "section 2 asserted 2 graphs on the 2.11.0 wheel (its tensor hook breaks the graph there), "
                 "and fails on the 2.12.1 wheel with 3. 2.12.0 was not run, but its torch/_dynamo and torch/nn "
                 "are identical, file by file, to the 2.12.1 wheel's",
        probe=_compile_hook_break_compiles_module_forward,
    ),
    Claim(
        id="compile-traces-capture-hooks",
        kind="behaviour",
        lessons=("11_compile_and_export",),
        where="section 4 (capture on a compiled model: which calls record, and the warning)",
        before="the recording hooks of `hooktutor.capture` break the compiled model's graph at every layer "
               "(Dynamo does not trace the list method they call): each layer runs outside a graph, so hooks "
               "added after the first compiled call run too",
        after="Dynamo traces capture's hooks into the one graph of the compiled model, so what "
              "compile-skips-late-hook says holds for them: hooks added later are skipped",
        since="2.13.0",
        evidence="observed: the 2.11.0 wheel (Colab's) makes 5 graphs for the lesson's MLP with capture's hooks "
                 "(and warns that it cannot trace `list.append`), the 2.13.0 wheel one; the 2.6.0 and 2.12.1 "
                 "wheels break the graph as 2.11.0 does, the 2.14.1 and 2.15.0 wheels trace the hooks as 2.13.0 "
                 "does, and 2.12.1 is the last release before 2.13.0, so 2.13.0 is the first",
        probe=_compile_traces_capture_hooks,
    ),
    Claim(
        id="export-strict-tensor-hook-exports",
        kind="behaviour",
        lessons=("11_compile_and_export",),
        where="section 5 (`torch.export` and a tensor hook that a forward hook registers, strict=True)",
        before="a strict export of a module whose forward hook registers a tensor hook raises Dynamo's "
               "Unsupported ('Compilation of intermediate hooks requires compiled autograd'): there is no "
               "program (before torch 2.2 there is no `strict` keyword, and export fails on a forward hook "
               "anyway: export-non-strict)",
        after="the strict export succeeds: the program drops the tensor hook (what its backward computes: "
              "export-strict-tensor-hook-grad)",
        since="2.11.0",
        evidence="observed: the 2.6.0, 2.7.1, 2.8.0, 2.9.1 and 2.10.0 wheels raise Unsupported, the 2.11.0 "
                 "(Colab's), 2.12.1, 2.13.0, 2.14.1 and 2.15.0 wheels export",
        probe=_export_strict_tensor_hook_exports,
    ),
    Claim(
        id="export-strict-tensor-hook-grad",
        kind="behaviour",
        lessons=("11_compile_and_export",),
        where="section 5 (`torch.export` and a tensor hook that a forward hook registers, strict=True)",
        before="(where that strict export succeeds, export-strict-tensor-hook-exports) the program that a "
               "strict export of a module makes, whose forward hook registers a tensor hook, computes an output "
               "whose backward reaches no input: `x.grad` stays None",
        after="the program's backward reaches the input, with the gradient of the unhooked module (the tensor "
              "hook is dropped)",
        since="2.13.0",
        evidence="observed: the 2.6.0, 2.11.0 (Colab's) and 2.12.1 wheels leave `x.grad` None, the 2.13.0, "
                 "2.14.1 and 2.15.0 wheels fill it; 2.12.1 is the last release before 2.13.0, so 2.13.0 is the "
                 "first",
        probe=_export_strict_tensor_hook_grad,
    ),
    Claim(
        id="module-compile-method",
        kind="behaviour",
        lessons=("11_compile_and_export",),
        where="section 1 (`model.compile()` next to `torch.compile(model)`)",
        before="`nn.Module` has no `compile` method (torch.compile(model) is the only way)",
        after="`model.compile()` exists and compiles the module's own call in place (it sets "
              "`model._compiled_call_impl = torch.compile(model._call_impl)`): `model(...)` runs the compiled "
              "call from then on",
        since="2.2.0",
        evidence="the 2.6.0, 2.11.0, 2.12.1, 2.13.0, 2.14.1 and 2.15.0 wheels have the method and set "
                 "`_compiled_call_impl`; not established here: the release that added it (taken to be 2.2.0: "
                 "no compat run has probed 2.1.2 or 2.2 to 2.5 since this claim was registered)",
        probe=_module_compile_method,
    ),
    Claim(
        id="module-compile-traces-torch-nn-forward",
        kind="behaviour",
        lessons=("11_compile_and_export",),
        where="section 1 (`model.compile()` next to `torch.compile(model)`: the graphs each makes for an "
              "`nn.Sequential` and for a module of your own), the verdict 'hooks are ignored by a compiled "
              "model' and the recap",
        before="(where `model.compile()` exists, module-compile-method) for a module whose forward is torch.nn's "
               "(`nn.Sequential`, `nn.Linear`) it compiles only code of one's own that those frames call: "
               "Dynamo skips the torch.nn frames, so the layers run eagerly and a late hook runs, except "
               "where a hook registered before compiling brings its layer into a graph (on 2.12 and 2.13 a "
               "hooked first Linear is a graph of its own, a hooked Linear after an unhooked one is not; on "
               "2.6 the hook alone is compiled); a hook that computes a tensor and appends it to a list "
               "compiles again on every call; "
               "the forward of a module of one's own class, at the root or inside an `nn.Sequential`, is "
               "compiled as with torch.compile(model) (a late hook on a layer it calls is skipped), while a late "
               "hook on such a module inside an `nn.Sequential` runs (its call is torch.nn's)",
        after="a module whose forward is torch.nn's is compiled too: an `nn.Sequential` of built-in layers is "
              "one graph, and a hook added later to a layer inside it, or to a module of one's own inside it, "
              "is skipped; unlike torch.compile(model), the root's own hook dicts are guarded, empty ones too, "
              "so a hook added later to the root compiles it again and runs",
        since="2.14.0",
        evidence="observed: the 2.6.0, 2.11.0, 2.12.1 and 2.13.0 wheels hand the backend no graph for an "
                 "nn.Sequential (2.11.0 with the probe of module-compile-skips-torch-nn-forward, the claim this "
                 "one replaced), the 2.14.1 and 2.15.0 wheels one graph. The cause: "
                 "`OptimizedModule._should_wrap_module_call_impl` in torch/_dynamo/eval_frame.py, absent from "
                 "the 2.13.0 wheel, puts `_call_impl` through `wrap_inline` when the module's forward has a "
                 "skip rule (torch.nn's). 2.14.0 was not run, but its torch/_dynamo and torch/nn are identical, "
                 "file by file, to the 2.14.1 wheel's",
        probe=_module_compile_traces_torch_nn_forward,
    ),
    Claim(
        id="compile-guards-every-hook-kind",
        kind="behaviour",
        lessons=("02_forward_hooks", "11_compile_and_export"),
        where="02 section 10 (a late pre-hook on a layer that had a forward hook); 11 section 1 (late hooks: "
              "a hook of another kind on a layer that had hooks), 'Try it live' and the recap",
        before="(where late hooks are skipped, compile-skips-late-hook) Dynamo guards only the hook dicts of a "
               "module that were non-empty when it compiled, kind by kind: a late forward pre-hook on a layer "
               "that had only a forward hook is skipped, no recompile",
        after="a module that had any hook when it compiled has all its hook dicts guarded: a late hook of "
              "another kind on it makes the next call compile again, and runs",
        since="2.14.0",
        evidence="observed: the 2.6.0, 2.11.0, 2.12.1 and 2.13.0 wheels skip the late pre-hook (no new graph), "
                 "the 2.14.1 and 2.15.0 wheels compile again and run it. 2.14.0 was not run, but its "
                 "torch/_dynamo (where the guards on the hook dicts are built) and torch/nn are identical, file "
                 "by file, to the 2.14.1 wheel's, so 2.14.0 is taken as the first release. The 2.1.2 wheel runs "
                 "late hooks on built-in layers anyway (the probe checks that a late hook on a layer without "
                 "hooks is skipped first)",
        probe=_compile_guards_every_hook_kind,
    ),
    Claim(
        id="compile-traces-torch-nn-root-hooks",
        kind="behaviour",
        lessons=("11_compile_and_export",),
        where="section 1 (`always_call` under compile: the hooks of the compiled root when the compiled "
              "forward raises) and the recap",
        before="the root's `always_call` hook runs when the compiled forward raises, whatever the root's class",
        after="for a root whose forward is torch.nn's (`nn.Sequential`), `torch.compile` traces the root's "
              "call, hooks included (`wrap_inline` in torch/_dynamo/eval_frame.py), so the hook is part of "
              "the graph and does not run when it raises; a root of your own class still has its hooks "
              "called by Python around the compiled forward",
        since="2.2.0",
        evidence="observed: the 2.1.2 wheel runs the hook; the 2.2.2, 2.3.1, 2.4.1 and 2.5.1 wheels (the probe "
                 "alone) and the 2.6.0, 2.11.0 (Colab's), 2.12.1, 2.13.0, 2.14.1 and 2.15.0 wheels do not",
        probe=_compile_traces_torch_nn_root_hooks,
    ),
    Claim(
        id="error-names-forward-op",
        kind="wording",
        lessons=("03_changing_outputs", "04_backward_hooks", "05_inplace_relu_pitfall", "07_capstone"),
        where="the in-place errors: 03 section 5, 04 section 9, 05 section 3 and 'Try it live', 07 Grad-CAM "
              "next to in-place ReLUs",
        before="autograd's in-place errors name the backward node: 'Output 0 of BackwardHookFunctionBackward "
               "is a view ...', '... which is output 0 of SigmoidBackward0, is at version 1 ...'",
        after="they name the forward operation: 'Output 0 of BackwardHookFunction is a view ...', "
              "'... which is output 0 of Sigmoid, is at version 1 ...'",
        since="2.13.0",
        evidence="`Node::forward_op_name` (pytorch/pytorch#180383, April 2026) is absent from libtorch_cpu.so "
                 "up to the 2.12.1 wheel and present from the 2.13.0 wheel on; the probe agrees on 2.12.1 (the "
                 "backward node's name) and 2.13.0 (the forward operation's)",
        probe=_error_names_forward_op,
    ),
    Claim(
        id="addmm-error-prefix",
        kind="wording",
        lessons=("02_forward_hooks",),
        where="section 4 (`always_call`): the shape error of `fc1`",
        before="'mat1 and mat2 shapes cannot be multiplied (2x5 and 8x16)'",
        after="the same text after the operator's name: 'addmm: mat1 and mat2 shapes cannot be multiplied ...'",
        since="2.15.0",
        evidence="the message's format string in libtorch_cpu.so is 'mat1 and mat2 shapes cannot be multiplied (' "
                 "up to the 2.14.1 wheel and ': mat1 and mat2 ...', after the operator's name, in the 2.15.0 wheel",
        probe=_addmm_prefix,
    ),
    Claim(
        id="module-state-dict-hooks-public",
        kind="behaviour",
        lessons=("08_training_hooks",),
        where="section 3 (state-dict hooks) and exercise 2 (a load pre-hook that renames keys)",
        before="a module's state-dict post-hook and load-state-dict pre-hook exist only as the private "
               "`_register_state_dict_hook` (a dict it returns from the root becomes the state dict) and "
               "`_register_load_state_dict_pre_hook(hook, with_module=True)`",
        after="the public `register_state_dict_post_hook` (its hook must return None: a returned dict raises "
              "'state_dict post-hook must return None') and `register_load_state_dict_pre_hook` exist too",
        since="2.5.0",
        evidence="pytorch/pytorch#131690 (merged July 2024, a reland of #126704), first released in 2.5.0; "
                 "the two methods are absent from the 2.1.2 wheel and present in the 2.13.0 and 2.15.0 wheels",
        probe=_module_state_dict_hooks_public,
    ),
    Claim(
        id="gradient-edge",
        kind="behaviour",
        lessons=("09_autograd_graph_hooks",),
        where="section 4 (`get_gradient_edge`: the gradient of a tensor that was modified in place afterwards)",
        before="there is no public `torch.autograd.graph.get_gradient_edge`; `torch.autograd.grad` takes tensors only",
        after="`get_gradient_edge(tensor)` returns the (node, output number) pair behind a tensor, and "
              "`torch.autograd.grad` accepts it in place of the tensor",
        since="2.2.0",
        evidence="pytorch/pytorch#110867 ('Allow specifying inputs as GradientEdge in autograd APIs', October 2023, "
                 "before the 2.2 branch cut); `get_gradient_edge` is absent from the 2.1.2 wheel's "
                 "torch/autograd/graph.py and present in the 2.13.0 and 2.15.0 wheels",
        probe=_gradient_edge,
    ),
    Claim(
        id="multi-grad-hook-any",
        kind="behaviour",
        lessons=("09_autograd_graph_hooks",),
        where="section 4 (`register_multi_grad_hook(..., mode=\"any\")`)",
        before="`register_multi_grad_hook(tensors, fn)` has no `mode`: it calls `fn` once all gradients are "
               "computed, with a list (None for a tensor the backward did not reach)",
        after="`mode=\"any\"` calls `fn` once, with the first gradient computed (a tensor, not a list); "
              "`mode=\"all\"` is the default and the old behaviour",
        since="2.3.0",
        evidence="pytorch/pytorch#117984 ('Added \"any\" mode to register_multi_grad_hook', January 2024, after the "
                 "2.2 branch cut); the 2.1.2 wheel's signature has no `mode`, the 2.13.0 and 2.15.0 wheels' have it",
        probe=_multi_grad_hook_any,
    ),
    Claim(
        id="module-tracker",
        kind="behaviour",
        lessons=("09_autograd_graph_hooks",),
        where="section 2 (telling a checkpoint's recomputation apart with `ModuleTracker.is_bw`)",
        before="there is no `torch.utils.module_tracker`",
        after="`torch.utils.module_tracker.ModuleTracker` is a context manager whose `is_bw` says whether a "
              "module runs during backward (a checkpoint's recomputation does)",
        since="2.4.0",
        evidence="the module was added in May 2024 (its documentation page says 'Created On: May 04, 2024') and "
                 "is documented from the 2.4 docs on; absent from the 2.1.2 wheel, present in the 2.13.0 and "
                 "2.15.0 wheels",
        probe=_module_tracker,
    ),
    Claim(
        id="encoder-fastpath-off-with-hooks",
        kind="behaviour",
        lessons=("02_forward_hooks", "10_transformer_hooks"),
        where="02: the claim 'a hook sees every step of the forward pass' (what a global hook sees in "
              "`TransformerEncoderLayer`, with and without a hook on a submodule); 10: section 5 (the fast "
              "path: what a hook on a submodule, on the layer and a global hook see) and the prediction "
              "'which hooks fire on the fast path'",
        before="a `TransformerEncoderLayer` in eval mode under `no_grad`/`inference_mode` takes the fused fast path "
               "(`torch._transformer_encoder_layer_fwd`) whatever hooks its submodules carry: a forward hook on "
               "`self_attn` or `linear1` never fires",
        after="a forward hook or pre-hook on the layer or any of its submodules turns the fast path off for that "
              "layer ('forward pre-/hooks are attached to the module'), so the submodule runs and its hook fires; "
              "a global hook is not counted and still sees no submodule",
        since="2.5.0",
        evidence="pytorch/pytorch#128415 (fixes #128413), merged 2024-06-14, after the release/2.4 branch cut, so "
                 "first released in 2.5.0; the check is absent from torch/nn/modules/transformer.py in the 2.1.2 "
                 "wheel and present in the 2.13.0 and 2.15.0 wheels; the probe was run on those three",
        probe=_encoder_fastpath_off_with_hooks,
    ),
    Claim(
        id="mha-fastpath-switch",
        kind="behaviour",
        lessons=("10_transformer_hooks",),
        where="the claim '`model.eval()` and `torch.no_grad()` do not change what hooks see' (turning the fast "
              "path off for every layer)",
        before="there is no switch for the fast path: a hook on a submodule, or gradients, keep a layer off it",
        after="`torch.backends.mha.set_fastpath_enabled(False)` turns the fast path of `MultiheadAttention` and "
              "the transformer layers off everywhere, so every submodule runs and its hooks fire",
        since="2.3.0",
        evidence="pytorch/pytorch#112212 ('Add config to disable TransformerEncoder/MHA fastpath', fixes #111070), "
                 "merged 2024-01-02, after the release/2.2 branch cut; absent from the 2.1.2 wheel, present in the "
                 "2.13.0 and 2.15.0 wheels",
        probe=_mha_fastpath_switch,
    ),
    Claim(
        id="fsdp2-cpu-averages-gradients",
        kind="behaviour",
        lessons=("13_hooks_at_work",),
        where="section 2 (the gradient each rank keeps: its shard of the average over the ranks)",
        before="on a CPU (the gloo backend) FSDP2 keeps each rank's shard of the *sum* of the ranks' gradients: "
               "the average times the number of processes (pytorch/pytorch#162338)",
        after="each rank keeps its shard of the average of the ranks' gradients",
        since="2.9.0",
        evidence="observed with the probe and lesson 13's sharded MLP: the 2.7.1 and 2.8.0 wheels keep the sum "
                 "(lesson 13 failed its assert on 2.7.1, its oldest admitted torch, while it said 'average' "
                 "unconditionally), the 2.9.1, 2.10.0 and 2.13.0 wheels the average; pytorch/pytorch#162338 "
                 "('Incorrect AVG reduction for GLOO', September 2025) reports the sum on 2.8",
        probe=_fsdp2_cpu_averages_gradients,
    ),
    Claim(
        id="ao-quantization-deprecated",
        kind="wording",
        lessons=("13_hooks_at_work",),
        where="section 4 (eager-mode `torch.ao.quantization.prepare` and its observers)",
        before="`torch.ao.quantization.prepare` attaches its observers without a warning",
        after="it warns that torch.ao.quantization is deprecated (new code uses the torchao package)",
        since="2.8.0",
        evidence="observed with the probe: the 2.6.0 and 2.7.1 wheels give no warning, the 2.8.0, 2.9.1, 2.10.0 "
                 "and 2.13.0 wheels give 'torch.ao.quantization is deprecated and will be removed in 2.10'",
        probe=_ao_quantization_deprecated,
    ),
    *_transformers_claims(Claim),
]}


def claim(claim_id: str) -> Claim:
    try:
        return CLAIMS[claim_id]
    except KeyError:
        raise KeyError(f"{claim_id!r} is not a registered claim; known: {', '.join(CLAIMS)}") from None


def expected(claim_id: str, version: str | None = None) -> bool:
    """True when release ``version`` of the claim's library (default: the installed one; torch, or
    transformers for a claim about it) should show the claim's new behaviour."""
    c = claim(claim_id)
    v = version_tuple(version or installed(c.library))
    return v >= version_tuple(c.since) or any(version_tuple(lo) <= v < version_tuple(hi) for lo, hi in c.also)


def releases_with_it(claim_id: str) -> str:
    """In words, the releases that show the claim's new behaviour: "torch 2.7 and newer", or, for a
    claim with earlier windows, "torch 2.3 to 2.4 and 2.7 and newer"."""
    c = claim(claim_id)

    def minor(v: str) -> str:
        return ".".join(v.split(".")[:2])

    def last_before(v: str) -> str:
        major, mnr, _ = version_tuple(v)
        return f"{major}.{mnr - 1}"

    parts = [minor(lo) if minor(lo) == last_before(hi) else f"{minor(lo)} to {last_before(hi)}"
             for lo, hi in c.also]
    return f"{c.library} {' and '.join([*parts, f'{minor(c.since)} and newer'])}"


def observed(claim_id: str) -> bool:
    """Run the claim's probe on the installed torch: True when it shows the new behaviour."""
    return bool(claim(claim_id).probe())


def check(claim_id: str) -> bool:
    """The probe's answer, after asserting that it agrees with the registry for this torch."""
    seen, want, c = observed(claim_id), expected(claim_id), claim(claim_id)
    assert seen == want, (
        f"{c.library} {installed(c.library)}: {claim_id} shows the {'new' if seen else 'old'} behaviour, but the "
        f"registry says it shows in {releases_with_it(claim_id)}; fix hooktutor/course/claims.py")
    return seen


def probe_all() -> list[dict]:
    """Every claim's probe on the installed libraries, as rows for ``course.py compat``. A claim about a
    library that cannot be used here is not probed: its row says why (``skipped``) and agrees."""
    rows = []
    for c in CLAIMS.values():
        why = unusable(c.library)
        if why:
            rows.append({"id": c.id, "observed": None, "expected": None, "error": "", "skipped": why,
                         "agrees": True})
            continue
        try:
            seen: bool | None = observed(c.id)
            error = ""
        except Exception as exc:  # a probe that breaks is reported, not hidden
            seen, error = None, f"{type(exc).__name__}: {exc}"
        rows.append({"id": c.id, "observed": seen, "expected": expected(c.id), "error": error,
                     "agrees": seen is not None and seen == expected(c.id)})
    return rows


def _version_or_none(library: str) -> str | None:
    try:
        return installed(library)
    except Exception:  # not installed
        return None


def main(argv: list[str]) -> int:
    rows = probe_all()
    if "--json" in argv:
        print(json.dumps({"torch": installed(), "transformers": _version_or_none("transformers"), "claims": rows}))
    else:
        for r in rows:
            if r.get("skipped"):
                print(f"skip {r['id']}: {r['skipped']}")
                continue
            print(f"{'ok  ' if r['agrees'] else 'FAIL'} {r['id']}: new behaviour expected {r['expected']}, "
                  f"observed {r['observed']} {r['error']}")
    return 0 if all(r["agrees"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
