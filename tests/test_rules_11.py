"""The general rules of lesson 11 (hooks under torch.compile and torch.export), checked on set-ups other
than the lesson's own (a module of one's own inside an nn.Sequential, another torch.nn root, a hook on
the root, a hook on a parameter, a non-strict export, a Dynamo setting), so that a rule the lesson states
holds where a learner will use it, or the lesson's words say where it stops (review adv11). Each test
names the cell's sentence it backs. Every test compiles, so none runs in the suite's own process (on
torch 2.1 the first compile of a process changes the optimizers' step hooks for good): their snippets
(``SNIPPETS``, at the end) run one after another in one new Python, each in a namespace of its own,
and each test reports its own snippet's result (one torch import, not seven)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hooktutor.course import claims

_OWN = """
import torch
import torch._dynamo
from torch import nn
from hooktutor.course import claims


class Own(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc1, self.fc2 = nn.Linear(4, 4), nn.Linear(4, 2)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


x = torch.ones(2, 4)
"""

_RUNNER = """
import json, sys, traceback
results = {}
for name, code in json.loads(sys.stdin.read()).items():
    try:
        exec(compile(code, name, "exec"), {"__name__": "__main__"})
        results[name] = None
    except BaseException:   # noqa: BLE001 - reported by the snippet's own test
        results[name] = traceback.format_exc()[-3000:]
print("RESULTS " + json.dumps(results))
"""


@pytest.fixture(scope="module")
def _every_snippet() -> dict:
    done = subprocess.run([sys.executable, "-c", _RUNNER], input=json.dumps(SNIPPETS), capture_output=True,
                          text=True, timeout=600, cwd=Path(__file__).resolve().parent.parent)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULTS ")]
    assert lines, f"the snippets' process ended early ({done.returncode}):\n{done.stderr[-3000:]}"
    return json.loads(lines[-1][len("RESULTS "):])


@pytest.fixture
def one_process(_every_snippet, request):
    """Call it in a test: fails with the traceback if the test's snippet failed in the shared process."""
    def check() -> None:
        error = _every_snippet[request.node.originalname]
        assert error is None, error
    return check


@pytest.mark.skipif(not hasattr(torch.nn.Module, "compile"), reason="no nn.Module.compile on this torch")
def test_model_compile_on_a_sequential_compiles_the_modules_of_ones_own_class_inside_it(one_process):
    """Section 1 (`model.compile()`), the verdict and the recap: before torch 2.14 `model.compile()`
    runs the layers of an nn.Sequential of built-in ones eagerly, a late hook included (since 2.14 it
    is one graph, a late hook in it skipped: module-compile-traces-torch-nn-forward), but a module of
    one's own class inside an nn.Sequential is compiled (only the torch.nn frames are skipped): a late
    hook on a layer inside it is skipped, one on the module itself runs before 2.14; a late hook on the
    root (an nn.Sequential, an nn.Linear) runs on every release (since 2.14 it compiles again); a hook
    registered before compiling that appends to a list compiles again on every call (section 4)."""
    one_process()


def test_a_hook_that_breaks_the_graph_leaves_its_module_a_graph_of_its_own(one_process):
    """Section 2's note across releases and compile-hook-break-compiles-module-forward, beyond the
    lesson's tensor hook on an nn.Linear: in a written-out forward (`Around`), a forward hook (on an
    nn.LayerNorm) or a pre-hook (on an nn.Linear) that calls `torch._dynamo.graph_break()` gives the
    built-in layer's forward a graph of its own since torch 2.12 (three graphs; two before); a module of
    one's own class gets one on every release the course ran. (In an nn.Sequential it need not: see
    test_model_compile_compiles_a_hooked_built_in_layer_with_what_it_calls.)"""
    one_process()


def test_a_torch_nn_root_that_dynamo_does_not_trace_runs_a_late_hook(one_process):
    """Sections 1 and 2 (the root "whose forward is torch.nn's ... is traced with its hooks"), the
    verdict: that holds for a torch.nn root Dynamo traces (an nn.Sequential, an nn.Linear); an nn.LSTM
    root, which Dynamo leaves uncompiled by default, hands the backend no graph, and a late hook on it
    runs, as on any module outside a graph."""
    one_process()


def test_a_list_appending_hook_on_a_root_of_ones_own_class_does_not_recompile_the_forward(
        one_process):
    """Section 4 and the recap ("a hook that appends to a list is guarded on its length"): that is a
    hook traced into the forward's graph (on a layer). On a root of one's own class the hook is called
    by Python around the compiled forward, which compiles once: a bare append compiles nothing again,
    and a hook that also computes (appends `o.clone()`) compiles only its own graph again on each call."""
    one_process()


def test_an_exported_program_shares_the_models_parameters_and_their_tensor_hooks(one_process):
    """Section 5 and the recap: `program.module()` holds none of the model's module hooks, but its
    parameters are the model's own Parameter objects, so a tensor hook (and a post-accumulate-grad hook)
    on a parameter runs in the program's backward and changes its gradient, with strict=False, and with
    strict=True where its program's backward reaches the parameters' hooks (export-strict-tensor-hook-grad)."""
    if not claims.expected("export-non-strict"):
        pytest.skip(f"torch {torch.__version__}: no non-strict torch.export (since torch 2.2)")
    one_process()


def test_is_compiling_is_true_in_a_non_strict_export_too(one_process):
    """Section 3 (`torch.compiler.is_compiling()`): it is True while torch.compile traces, and in a
    non-strict torch.export too, which runs the Python forward without Dynamo: a debugging branch kept
    for eager runs is left out of both traces; False in eager code."""
    if not (claims.expected("export-non-strict") and claims.expected("compiler-is-compiling")):
        pytest.skip(f"torch {torch.__version__}: needs non-strict export (2.2) and torch.compiler.is_compiling (2.3)")
    one_process()


def test_item_in_a_hook_breaks_the_graph_only_by_default(one_process):
    """Section 3 and the recap (".item() in a hook breaks the graph"): with Dynamo's default
    `capture_scalar_outputs=False`; with it set, an `.item()` the hook only computes with is traced
    and the model is one graph, and one that a Python `if` tests for truth (the lesson's hook)
    raises GuardOnDataDependentSymNode, where an `if` on a comparison (`> 0`) breaks the graph as by
    default (the second fresh review's O1)."""
    one_process()


def test_eval_forces_a_recompile_only_where_the_forward_reads_training(one_process):
    """Exercise hook_compiled (its examiner's list, and the wrong answer that switches the model to
    eval()): `eval()` after the first compiled call makes the next one compile again, and so trace a
    late hook in, only where a layer reads `self.training` (a Dropout); on Linear/ReLU layers no guard
    reads it, while `requires_grad_(False)` on a weight compiles again on both (where the guards check
    requires_grad: the 2.12.1 and 2.13.0 wheels, not 2.11.0's)."""
    one_process()


# -- the snippets, run one after another in one process (each in a namespace of its own) --

@pytest.mark.skipif(not hasattr(torch.nn.Module, "compile"), reason="no nn.Module.compile on this torch")
def test_model_compile_compiles_a_hooked_built_in_layer_with_what_it_calls(one_process):
    """Section 1 (`model.compile()`), the verdict and the recap: on 2.12 and 2.13 a built-in layer
    hooked before compiling has its own `forward` compiled, with its submodules: a late hook on the
    `linear1` of a hooked nn.TransformerEncoderLayer is skipped, where without that hook the layer runs
    eagerly and the late hook runs; a hooked `nn.Linear` is a graph when it is the first Linear called,
    not when an unhooked one ran before it (Dynamo decides by the code of `Linear.forward`); a hook that
    computes a tensor and appends it compiles again on every call, one that appends `o` itself or its
    shape is traced once and makes no graph."""
    one_process()


def test_a_break_in_an_nn_sequential_leaves_the_layers_before_it_uncompiled(one_process):
    """Sections 1 and 3, the verdict and the recap ("a module that runs outside any graph ... runs it";
    `torch.compiler.disable` "runs its other layers uncompiled, those before the hook too"): a hook on a
    middle layer of an nn.Sequential, or of a forward that loops over an nn.ModuleList, that breaks the
    graph (`graph_break()`, `.item()`, a disabled hook) leaves the layers before it uncompiled as well as
    those after, so late hooks on the first and the last layer both run, where a hook that does not break
    leaves them skipped (since 2.5); in a forward that calls the layers one by one, Dynamo resumes
    in a new graph after the break, and late hooks stay skipped."""
    one_process()


def test_a_tensor_hook_that_keeps_the_gradient_breaks_the_graph(one_process):
    """Section 2 ("a tensor hook ... that only returns a new gradient: Dynamo traces register_hook into
    the graph"): one that also keeps the gradient in a list breaks the graph (more than one graph on
    every release), and the gradients are eager's either way; the one that only returns is one graph
    since 2.13 (compile-traces-tensor-hook)."""
    one_process()


def test_a_late_global_hook_sees_a_root_of_ones_own_class(one_process):
    """Lesson 02 section 10 and lesson 11's claim on `skip_nnmodule_hook_guards`: a global forward hook
    registered after compiling sees only the compiled wrapper of an nn.Sequential compiled with no
    hook on it (since 2.7, compile-skips-late-global-hook), but a root of one's own class too, whose
    hooks Python calls around its compiled forward; where a layer had a hook of its own when the model
    compiled, it runs in every module (since 2.5; 2.2.2 to 2.4.1 in the hooked layer only)."""
    one_process()


def test_export_bakes_in_a_global_hook_without_strict_and_refuses_it_with_strict(one_process):
    """Section 5's verdict ("export runs the forward hooks that are attached"), for a global module hook
    (lesson 02): a non-strict export runs it at export, on every module and on export's own wrapper,
    and bakes what it returns into the program; a strict export refuses it (Dynamo raises
    `Unsupported`), on torch 2.13 and later, the releases the lesson names."""
    if not claims.expected("export-non-strict"):
        pytest.skip(f"torch {torch.__version__}: no non-strict torch.export (since torch 2.2)")
    one_process()


SNIPPETS = {
    "test_model_compile_on_a_sequential_compiles_the_modules_of_ones_own_class_inside_it": _OWN + """
def module_compile(model, layer):
    torch._dynamo.reset()
    graphs, fired = [], []
    model.compile(backend=lambda gm, example_inputs: graphs.append(gm) or gm.forward)
    model(x)
    with layer.register_forward_hook(lambda m, a, o: fired.append(1)):
        model(x)
    torch._dynamo.reset()
    return len(graphs), bool(fired)


builtin = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
held = nn.Sequential(Own(), nn.Tanh())
skipped = claims.expected("compile-skips-late-hook")
traces = claims.expected("module-compile-traces-torch-nn-forward")
assert module_compile(builtin, builtin[0]) == ((1, not skipped) if traces else (0, True))
assert module_compile(held, held[0].fc1) == (1, not skipped)
assert module_compile(held, held[0]) == (1, not traces)     # its call is the nn.Sequential's
linear = nn.Linear(4, 4)
for root in (builtin, linear):   # since 2.14 the root's empty hook dicts are guarded
    assert module_compile(root, root) == ((2, True) if traces else (0, True)), root
torch._dynamo.reset()
kept, per_call, graphs = [], [], []
tanh = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
with tanh[1].register_forward_hook(lambda m, a, o: kept.append(o.mean()) and None):
    tanh.compile(backend=lambda gm, example_inputs: graphs.append(gm) or gm.forward)
    for _ in range(3):
        before = len(graphs)
        tanh(x)
        per_call.append(len(graphs) - before)
torch._dynamo.reset()
assert len(kept) == 3 and per_call[0] >= 1 and per_call[1:] == [1, 1], per_call
""",
    "test_a_hook_that_breaks_the_graph_leaves_its_module_a_graph_of_its_own": """
import torch
import torch._dynamo
from torch import nn
from hooktutor.course import claims


class Mine(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.eye(4))

    def forward(self, x):
        return x @ self.w


class Around(nn.Module):
    def __init__(self, middle):
        super().__init__()
        torch.manual_seed(0)
        self.fc1, self.middle, self.fc2 = nn.Linear(4, 4), middle, nn.Linear(4, 2)

    def forward(self, x):
        return self.fc2(torch.relu(self.middle(torch.relu(self.fc1(x)))))


def graphs_with_a_break(middle, pre=False):
    torch._dynamo.reset()
    graphs, model = [], Around(middle)
    breaking = lambda *args: torch._dynamo.graph_break()   # noqa: E731 - returns None
    register = middle.register_forward_pre_hook if pre else middle.register_forward_hook
    with register(breaking):
        torch.compile(model, backend=lambda gm, example_inputs: graphs.append(gm) or gm.forward)(
            torch.ones(2, 4))
    torch._dynamo.reset()
    return len(graphs)


split = claims.expected("compile-hook-break-compiles-module-forward")
assert graphs_with_a_break(Mine()) == 3, graphs_with_a_break(Mine())
assert graphs_with_a_break(nn.LayerNorm(4)) == (3 if split else 2)
assert graphs_with_a_break(nn.Linear(4, 4), pre=True) == (3 if split else 2)
""",
    "test_a_torch_nn_root_that_dynamo_does_not_trace_runs_a_late_hook": """
import torch
import torch._dynamo
from torch import nn
from hooktutor.course import claims


def late_root_hook(model, x):
    torch._dynamo.reset()
    graphs, fired = [], []
    compiled = torch.compile(model, backend=lambda gm, example_inputs: graphs.append(gm) or gm.forward)
    compiled(x)
    with model.register_forward_hook(lambda m, a, o: fired.append(1)):
        compiled(x)
    torch._dynamo.reset()
    return len(graphs), bool(fired)


torch.manual_seed(0)
skipped = claims.expected("compile-skips-late-hook") and claims.expected("compile-traces-torch-nn-root-hooks")
assert late_root_hook(nn.Linear(4, 4), torch.ones(2, 4)) == (1, not skipped)
assert late_root_hook(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), torch.ones(2, 4)) == (1, not skipped)
assert late_root_hook(nn.LSTM(4, 4, batch_first=True), torch.ones(2, 3, 4)) == (0, True)
""",
    "test_a_list_appending_hook_on_a_root_of_ones_own_class_does_not_recompile_the_forward": _OWN + """
def new_graphs_per_call(target_of, hook_of):
    torch._dynamo.reset()
    model, kept, graphs, per_call = Own(), [], [], []
    with target_of(model).register_forward_hook(hook_of(kept)):
        compiled = torch.compile(model, backend=lambda gm, example_inputs: graphs.append(gm) or gm.forward)
        for _ in range(3):
            before = len(graphs)
            compiled(x)
            per_call.append(len(graphs) - before)
    torch._dynamo.reset()
    assert len(kept) == 3   # the hook ran in every call
    return per_call


append_one = lambda kept: lambda m, a, o: kept.append(1)             # noqa: E731
append_copy = lambda kept: lambda m, a, o: kept.append(o.clone())    # noqa: E731
assert new_graphs_per_call(lambda model: model.fc1, append_one) == [1, 1, 1]   # in the graph: guarded
assert new_graphs_per_call(lambda model: model, append_one) == [1, 0, 0]       # on the root: free
assert new_graphs_per_call(lambda model: model, append_copy) == [2, 1, 1]      # only the hook's graph
""",
    "test_an_exported_program_shares_the_models_parameters_and_their_tensor_hooks": """
import torch
from torch import nn
from hooktutor.course import claims

torch.manual_seed(0)
x = torch.ones(2, 4)
modes = (False, True) if claims.expected("export-strict-tensor-hook-grad") else (False,)
for strict in modes:
    model, calls = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2)), []
    with model[0].weight.register_hook(lambda g: calls.append("tensor") or g * 0), \\
            model[0].weight.register_post_accumulate_grad_hook(lambda p: calls.append("accumulated")):
        program = torch.export.export(model, (x,), strict=strict)
        exported = program.module()
        assert exported.get_parameter("0.weight") is model[0].weight, strict
        exported(x).sum().backward()
    assert calls == ["tensor", "accumulated"], (strict, calls)
    assert bool((model[0].weight.grad == 0).all()), strict   # the hook's g * 0
    assert not bool((model[2].weight.grad == 0).all()), strict
""",
    "test_is_compiling_is_true_in_a_non_strict_export_too": """
import torch
from torch import nn

torch.manual_seed(0)
model, seen = nn.Linear(4, 2), []
with model.register_forward_hook(lambda m, a, o: seen.append(torch.compiler.is_compiling())):
    model(torch.ones(1, 4))
    torch.export.export(model, (torch.ones(1, 4),), strict=False)
assert seen == [False, True], seen
""",
    "test_item_in_a_hook_breaks_the_graph_only_by_default": _OWN + """
def graphs(capture, hook=lambda m, a, o: o / o.abs().sum().item()):
    torch._dynamo.reset()
    seen = []
    model = Own()
    try:
        with torch._dynamo.config.patch(capture_scalar_outputs=capture), model.fc1.register_forward_hook(hook):
            torch.compile(model, backend=lambda gm, example_inputs: seen.append(gm) or gm.forward)(x)
    except Exception as error:   # what torch raises, by its class's name (its module moved across releases)
        return type(error).__name__
    finally:
        torch._dynamo.reset()
    return len(seen)


assert not torch._dynamo.config.capture_scalar_outputs   # the default
assert graphs(False) >= 2 and graphs(True) == 1
branch = lambda m, a, o: None if o.sum().item() else None   # lesson 11's hook: an `if` on the value
assert isinstance(graphs(False, branch), int) and graphs(False, branch) >= 2
said = graphs(True, branch)
assert isinstance(said, str), said   # it raises (the lesson names the pinned torch's error)
assert said == "GuardOnDataDependentSymNode" or torch.__version__.split("+")[0] != "2.13.0", said
# a comparison of the value (the usual form) raises nothing on 2.13: the graph breaks as by default
compare = lambda m, a, o: o * 2 if o.sum().item() > 0 else o
if torch.__version__.split("+")[0] == "2.13.0":
    assert graphs(True, compare) >= 2, graphs(True, compare)
""",
    "test_eval_forces_a_recompile_only_where_the_forward_reads_training": """
import torch
import torch._dynamo
from torch import nn
from hooktutor.course import claims


def late_hook_after(change, middle):
    torch._dynamo.reset()
    torch.manual_seed(0)
    model, graphs, fired = nn.Sequential(nn.Linear(4, 8), middle, nn.Linear(8, 3)), [], []
    compiled = torch.compile(model, backend=lambda gm, example_inputs: graphs.append(gm) or gm.forward)
    with torch.no_grad():
        compiled(torch.ones(2, 4))
        with model[0].register_forward_hook(lambda m, a, o: fired.append(1)):
            change(model)
            compiled(torch.ones(2, 4))
    torch._dynamo.reset()
    return len(graphs), bool(fired)


skipped = claims.expected("compile-skips-late-hook")
assert late_hook_after(lambda m: m.eval(), nn.ReLU()) == (1, not skipped)
assert late_hook_after(lambda m: m.eval(), nn.Dropout(0.5)) == (2, True)
frozen = late_hook_after(lambda m: m[0].weight.requires_grad_(False), nn.ReLU())
guards_requires_grad = claims.version_tuple(torch.__version__) >= (2, 12, 0)   # not the 2.11.0 wheel
assert frozen == ((2, True) if guards_requires_grad else (1, not skipped))
""",
    "test_model_compile_compiles_a_hooked_built_in_layer_with_what_it_calls": """
import torch
import torch._dynamo
from torch import nn
from hooktutor.course import claims

traces = claims.expected("module-compile-traces-torch-nn-forward")   # since 2.14
skipped = claims.expected("compile-skips-late-hook")
since_2_12 = claims.version_tuple(torch.__version__) >= (2, 12, 0)   # hooked layer's forward: 2.12 on


def counted():
    graphs = []
    return graphs, (lambda gm, example_inputs: graphs.append(gm) or gm.forward)


def encoder_layer_compile(early):
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = nn.Sequential(nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True))
    xt, (graphs, backend), fired = torch.randn(2, 5, 8), counted(), []
    handles = [model[0].register_forward_hook(lambda m, a, o: None)] if early else []
    model.compile(backend=backend)
    model(xt)
    with model[0].linear1.register_forward_hook(lambda m, a, o: fired.append(1)):
        model(xt)
    for handle in handles:
        handle.remove()
    torch._dynamo.reset()
    return len(graphs), bool(fired)


def hooked_graphs(hooked):   # graphs model.compile() makes of Linear, ReLU, Linear, `hooked` hooked
    torch._dynamo.reset()
    torch.manual_seed(0)
    model, (graphs, backend) = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2)), counted()
    with model[hooked].register_forward_hook(lambda m, a, o: None):
        model.compile(backend=backend)
        model(torch.ones(2, 4))
    torch._dynamo.reset()
    return len(graphs)


if since_2_12 and not traces:   # a hooked layer's forward: a graph if no unhooked one of its class ran first
    assert encoder_layer_compile(early=True) == (1, False)
    assert (hooked_graphs(0), hooked_graphs(2)) == (1, 0)
assert encoder_layer_compile(early=False) == ((1, not skipped) if traces else (0, True))


def new_graphs_per_call(hook_of):
    torch._dynamo.reset()
    torch.manual_seed(0)
    model, kept, per_call = nn.Sequential(nn.Linear(4, 4), nn.Tanh()), [], []
    graphs, backend = counted()
    with model[0].register_forward_hook(hook_of(kept)):
        model.compile(backend=backend)
        for _ in range(4):
            before = len(graphs)
            model(torch.ones(2, 4))
            per_call.append(len(graphs) - before)
    torch._dynamo.reset()
    assert len(kept) == 4   # the hook ran in every call
    return per_call


computes = new_graphs_per_call(lambda kept: lambda m, a, o: kept.append(o.mean()) and None)
shape = new_graphs_per_call(lambda kept: lambda m, a, o: kept.append(tuple(o.shape)) and None)
itself = new_graphs_per_call(lambda kept: lambda m, a, o: kept.append(o) and None)
assert computes[1:] == [1, 1, 1], computes
if since_2_12 and not traces:   # the first call: the hooked Linear's graph, none of the hook's own
    assert shape == itself == [1, 0, 0, 0], (shape, itself)

""",
    "test_a_break_in_an_nn_sequential_leaves_the_layers_before_it_uncompiled": """
import torch
import torch._dynamo
from torch import nn
from hooktutor.course import claims


class Looped(nn.Module):   # a module of one's own whose forward loops over an nn.ModuleList
    def __init__(self, layers):
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x

    def __getitem__(self, i):
        return self.layers[i]


def late_hooks_with(middle_hook, container=nn.Sequential):
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = container([nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2)])
    fired = []
    with model[2].register_forward_hook(middle_hook):
        compiled = torch.compile(model, backend="eager")
        compiled(torch.ones(2, 4))
        with model[0].register_forward_hook(lambda m, a, o: fired.append("first")), \
                model[4].register_forward_hook(lambda m, a, o: fired.append("last")):
            compiled(torch.ones(2, 4))
    torch._dynamo.reset()
    return fired


skipped = claims.expected("compile-skips-late-hook")
for container in (lambda layers: nn.Sequential(*layers), Looped):
    assert late_hooks_with(lambda m, a, o: None, container) == ([] if skipped else ["first", "last"])
    for breaking in (lambda m, a, o: torch._dynamo.graph_break(),
                     lambda m, a, o: None if o.sum().item() else None,
                     torch.compiler.disable(lambda m, a, o: None)):
        assert late_hooks_with(breaking, container) == ["first", "last"], container


class Written(Looped):   # the same layers called one by one, no loop: Dynamo resumes after a break
    def forward(self, x):
        a, b, c, d, e = self.layers
        return e(d(c(b(a(x)))))


# the second fresh review's O2 (lesson 11 cell 3): a break does not put the layers of a forward written
# out outside every graph: Dynamo starts a new graph after it, and a late hook there is skipped too
for breaking in (lambda m, a, o: torch._dynamo.graph_break(), torch.compiler.disable(lambda m, a, o: None)):
    assert late_hooks_with(breaking, Written) == ([] if skipped else ["first", "last"])
""",
    "test_a_tensor_hook_that_keeps_the_gradient_breaks_the_graph": """
import torch
import torch._dynamo
from torch import nn
from hooktutor.course import claims


class Written(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc1, self.fc2, self.head = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 2)

    def forward(self, x):
        return self.head(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


def graphs_and_grads(tensor_hook):
    torch._dynamo.reset()
    model, graphs, inp = Written(), [], torch.ones(2, 4, requires_grad=True)
    backend = lambda gm, example_inputs: graphs.append(gm) or gm.forward   # noqa: E731
    with model.fc2.register_forward_hook(lambda m, a, o: o.register_hook(tensor_hook) and None):
        torch.compile(model, backend=backend)(inp).sum().backward()
        compiled, inp.grad = inp.grad, None
        model(inp).sum().backward()
    torch._dynamo.reset()
    assert torch.equal(compiled, inp.grad)   # eager's gradient
    return len(graphs)


kept = []
keeping = graphs_and_grads(lambda g: kept.append(g) and None)
split = claims.expected("compile-hook-break-compiles-module-forward")   # fc2's linear a graph: 2.12 on
assert len(kept) == 2 and (keeping == 3 if split else keeping > 1), keeping
halves = graphs_and_grads(lambda g: g * 0.5)
assert (halves == 1) == claims.expected("compile-traces-tensor-hook"), halves
""",
    "test_a_late_global_hook_sees_a_root_of_ones_own_class": _OWN + """
import warnings

from torch.nn.modules.module import register_module_forward_hook


def late_global(model, hooked=None):
    # the modules a global forward hook added after the first compiled call sees; `hooked`: a
    # module that carries a (do-nothing) forward hook of its own from before compiling
    torch._dynamo.reset()
    before = [] if hooked is None else [hooked.register_forward_hook(lambda m, a, o: None)]
    compiled, seen = torch.compile(model, backend="eager"), []
    try:
        compiled(x)
        with warnings.catch_warnings():   # newer torch warns that a global hook also sees the wrapper
            warnings.simplefilter("ignore")
            with register_module_forward_hook(lambda m, a, o: seen.append(type(m).__name__)):
                compiled(x)
    finally:
        for handle in before:
            handle.remove()
    torch._dynamo.reset()
    return seen


own, sequential = late_global(Own()), late_global(nn.Sequential(nn.Linear(4, 4), nn.ReLU()))
if claims.expected("compile-skips-late-global-hook"):   # since 2.7
    assert own == ["Own", "OptimizedModule"] and sequential == ["OptimizedModule"], (own, sequential)
else:
    assert "Own" in own, own   # torch 2.6 ran it in each module (lesson 02)
# A layer that had a hook of its own when the model compiled: then the late global hook runs in
# every module since 2.5 (the rule above is for a model compiled with no hook on it); 2.4 and
# before, which traced no hook of a built-in module, ran it in the hooked layer only
held = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
hooked = late_global(held, hooked=held[0])
if claims.expected("compile-skips-late-hook"):   # since 2.5
    assert hooked == ["Linear", "ReLU", "Sequential", "OptimizedModule"], hooked
else:
    assert hooked == ["Linear", "OptimizedModule"], hooked
""",
    "test_export_bakes_in_a_global_hook_without_strict_and_refuses_it_with_strict": """
import torch
from torch import nn
from torch.nn.modules.module import register_module_forward_hook
from hooktutor.course import claims

torch.manual_seed(0)
model, x = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2)), torch.ones(2, 4)
plain, calls = model(x), []


def hook(m, a, o):   # notes every module; adds 1 to the last layer's output
    calls.append(type(m).__name__)
    return o + 1 if m is model[2] else None


with register_module_forward_hook(hook):
    program = torch.export.export(model, (x,), strict=False)
assert calls[:4] == ["Linear", "ReLU", "Linear", "Sequential"], calls
assert torch.allclose(program.module()(x), plain + 1)   # baked in: the hook is gone, its +1 stays
if claims.version_tuple(torch.__version__) >= (2, 13, 0):
    try:
        with register_module_forward_hook(hook):
            torch.export.export(model, (x,), strict=True)
    except Exception as error:   # noqa: BLE001 - Dynamo's Unsupported, whatever module it lives in
        assert type(error).__name__ == "Unsupported", repr(error)
    else:
        raise AssertionError("strict export accepted a global forward hook")
""",
}
