"""11_compile_and_export, exercise: record without hooks, by rewriting the forward with torch.fx so
that it returns the intermediates (what a compiled or exported model keeps, unlike a late hook).

Half-right answers an examiner expects, by kit dimension (``kit.DIMENSIONS``):

- technique: registers forward hooks (what this exercise replaces); returns the module's node
  itself in the output, so an in-place operation after it (``ReLU(inplace=True)``) overwrites
  the value that is returned (``inplace_after``); edits ``model`` itself (turns its in-place
  ReLU off, which the traced copy shares), or the graph without ``recompile()`` (the generated
  code still returns the old output); returns a module of its own around a
  ``torch.fx.Interpreter`` instead of a ``GraphModule``, or a ``GraphModule`` whose graph is
  unchanged and that records another way: a forward hook on the ``GraphModule`` itself that runs
  the graph again with an ``Interpreter``, or its ``forward`` replaced by an ``Interpreter`` run;
- nested: a layer inside a nested ``Sequential`` is a node whose target is its dotted path
  (``encoder.body.0``), not the child's name;
- order: the names asked for in another order than the layers run;
- dtype: a float64 model, whose intermediates must stay float64: a copy made with ``.float()``
  (``node.float()`` then ``clone``) is close in value, so the check compares the dtypes too;
- repeat: the returned module, called twice, gives fresh values each time (no state kept).

Right alternatives the check must accept (``tests/test_exercises_compile_hooks.py``): tracing a
``copy.deepcopy(model)`` (the caller's model is then certainly left as it was), and inserting the
copies with ``node.clone`` through ``graph.call_function(torch.clone, ...)``.
"""

from __future__ import annotations

import torch
from torch import nn

from ...models import MLP
from .. import kit
from ..core import Exercise, Tester, learners_hooks
from ._shared import mlp


def with_intermediates(model, names):
    """A torch.fx.GraphModule gm: gm(x) returns (model(x), {name: a copy of that output})."""
    ### BEGIN SOLUTION
    gm = torch.fx.symbolic_trace(model)
    graph = gm.graph
    kept = {}
    for node in list(graph.nodes):
        if node.op == "call_module" and node.target in names:
            with graph.inserting_after(node):
                kept[node.target] = graph.call_method("clone", (node,))  # before any in-place op
    output = next(node for node in graph.nodes if node.op == "output")
    output.args = ((output.args[0], kept),)
    gm.recompile()
    return gm
    ### END SOLUTION


exercise = Exercise(
    "compile_hooks.with_intermediates", "Return the intermediates instead of hooking them",
    task=("write with_intermediates(model, names) that returns a torch.fx.GraphModule `gm`, made with torch.fx "
          "alone (no hooks): gm(x) returns (model(x), {name: output}) where each name in `names` is the dotted "
          "path of a leaf module that the forward calls once, and output is a copy of what it returned in that "
          "call (an in-place operation after it must not change it). Leave `model` as it was"),
    hints=[
        "torch.fx.symbolic_trace(model) gives a GraphModule; each call of a leaf module is a node with "
        "node.op == \"call_module\" and node.target == its dotted path.",
        "The graph's \"output\" node returns output.args[0]; set output.args = ((output.args[0], kept),) with "
        "kept a dict {name: node}, then gm.recompile() so that the generated forward returns it.",
        "A ReLU(inplace=True) after a layer overwrites the layer's output: keep a copy, a node made with "
        "graph.call_method(\"clone\", (node,)) inserted right after the layer (with graph.inserting_after(node):).",
    ],
    solution=with_intermediates,
    equivalent_mutants={"number@12: 0 -> -1": "an output node's args hold exactly one value, what the forward "
                                              "returns: output.args[-1] is output.args[0]"},
    guide="""registering forward hooks (the point is a model that returns what it computed,
    which a compiled or exported program keeps); returning the layer's node itself, which
    a following `ReLU(inplace=True)` overwrites; forgetting `gm.recompile()` (the
    generated code returns the old output); matching `node.name` (`encoder_body_0`) instead
    of `node.target` (`encoder.body.0`); editing the model's own graph in place.""",
)


def _expected(model: nn.Module, x: torch.Tensor, names: list[str]) -> tuple[torch.Tensor, dict]:
    seen = {}
    handles = [model.get_submodule(n).register_forward_hook(
        lambda m, a, o, n=n: seen.__setitem__(n, o.detach().clone())) for n in names]
    try:
        with torch.no_grad():
            return model(x), seen
    finally:
        for h in handles:
            h.remove()


def _settings(model: nn.Module) -> dict[str, object]:
    """Every module's plain settings (``inplace``, ``training``, ...) and each parameter's values."""
    found = {f"{name or 'model'}.{key}": value for name, module in model.named_modules()
             for key, value in vars(module).items()
             if not key.startswith("_") and isinstance(value, (bool, int, float, str, tuple))}
    found.update({f"{name} (values)": p.detach().clone() for name, p in model.named_parameters()})
    return found


def _expect_graph_alone(t: Tester, gm: torch.fx.GraphModule) -> None:
    """Made with torch.fx alone: no hook on any module of ``gm`` (its root included), its forward the
    one ``gm.recompile()`` generated from its graph (no forward of the instance's own), and that graph
    returning ``(output, {name: node})`` (its names are checked on what gm(x) returns)."""
    hooked = learners_hooks(gm, include_global=True)
    t.expect(not hooked, what="hooks on the GraphModule you returned", expected="none",
             got=", ".join(f"{r.kind} on {r.path or 'the GraphModule'}" for r in hooked[:3]), nudge=(
                 "return the intermediates from the rewritten graph, with torch.fx alone: no hooks, not even on "
                 "the GraphModule itself"))
    generated = type(gm).forward.__code__.co_filename.startswith("<eval_with_key>")
    t.expect("forward" not in vars(gm) and generated, what="gm.forward", expected="the code gm.recompile() "
             "generated from the graph", got="a forward of your own", nudge=(
                 "change the graph and call gm.recompile(): its generated forward is what a compiler or "
                 "torch.export reads, not a forward you put on the module (an Interpreter run, a wrapper)"))
    output = next((node for node in gm.graph.nodes if node.op == "output"), None)
    result = output.args[0] if output is not None and output.args else None
    ok = isinstance(result, (tuple, list)) and len(result) == 2 and isinstance(result[1], dict)
    t.expect(ok, what="what gm.graph's output node returns", expected="(output, {name: node})",
             got="something else" if output is not None else "no output node", nudge=(
                 "the graph itself must return the intermediates: its output node returns them, next to "
                 "the model's output"))


def _expect_dtype(t: Tester, got: object, want: torch.Tensor, *, what: str) -> None:
    """A tensor ``got`` in ``want``'s dtype (what is not a tensor is said by the comparison after)."""
    if isinstance(got, torch.Tensor):
        t.expect(got.dtype == want.dtype, what=f"the dtype of {what}", expected=want.dtype, got=got.dtype, nudge=(
            "keep the model's dtype: a copy is a clone of the layer's output (clone, or detach then clone), "
            "with no .float() or .to(...) in between"))


def _run(answer, t: Tester, model: nn.Module, x: torch.Tensor, names: list[str], *, inplace: str = "") -> None:
    want_out, want = _expected(model, x, names)
    t.track(model)
    settings = _settings(model)
    gm = answer(model, list(names))
    t.expect_type(gm, nn.Module, what="with_intermediates(model, names)", nudge="return the GraphModule")
    # the witness goes on only around gm's calls: an answer that traces copy.deepcopy(model) would
    # copy witness hooks attached earlier onto its GraphModule, and be blamed for the check's own hooks
    with kit.HookWitness([(n, model.get_submodule(n)) for n in names]) as witness, torch.no_grad():
        got = gm(x)
        again = gm(x)
    hooked = [n for n in names if witness.fired(n, "forward")]
    t.expect(not hooked, what="forward hooks on the layers while gm ran", expected="none", got=", ".join(hooked),
             nudge="return the intermediates from the rewritten graph, with torch.fx alone: no hooks")
    t.expect_type(gm, torch.fx.GraphModule, what="with_intermediates(model, names)", nudge=(
        "return a torch.fx.GraphModule, the one torch.fx.symbolic_trace(model) gave you with its graph "
        "rewritten: a module of your own around it (an Interpreter, a wrapper) is not one"))
    _expect_graph_alone(t, gm)
    after = _settings(model)
    changed = [k for k in settings if k not in after or not (
        torch.equal(after[k], settings[k]) if isinstance(settings[k], torch.Tensor) else after[k] == settings[k])]
    t.expect(not changed, what=f"{changed[0] if changed else 'model'} after your answer",
             expected=settings[changed[0]] if changed else "as it was",
             got=after.get(changed[0]) if changed else "as it was", nudge=(
                 "leave the model as it was: the GraphModule shares its layers, so change the graph, "
                 "not a layer's settings (a clone node keeps a copy safe from an in-place ReLU)"))
    t.expect_type(got, tuple, what="gm(x)", nudge=("gm(x) returns a tuple (output, {name: intermediate}): change "
                                                   "the output node, then gm.recompile() to regenerate the code"))
    t.expect(len(got) == 2 and isinstance(got[1], dict), what="gm(x)", expected="(output, dict)",
             got=f"a tuple of {len(got)}", nudge=("make the graph's output node return the pair (the model's "
                                                  "output, the dict of copies), then regenerate the code"))
    # the same operations as the model itself: equal up to float rounding (1e-6), in the model's dtype
    # (a float32 copy of a float64 value is as close as that: the dtype is compared on its own)
    _expect_dtype(t, got[0], want_out, what="gm(x)[0]")
    t.expect_close(got[0], want_out, what="gm(x)[0]", atol=1e-6, rtol=1e-5, nudge="the model's output comes first")
    t.expect(sorted(got[1]) == sorted(names), what="the names in gm(x)[1]", expected=sorted(names),
             got=sorted(got[1]), nudge="match node.target, the module's dotted path (not node.name)")
    for n in names:
        mistake = {"in place": (torch.relu(want[n]), (
            f"{inplace} runs in place right after it and overwrote the value you returned: return a copy, a "
            "clone node inserted right after the layer"))} if n == inplace.split(" ")[0] else {}
        _expect_dtype(t, got[1][n], want[n], what=f"gm(x)[1][{n!r}]")
        t.expect_close(got[1][n], want[n], what=f"gm(x)[1][{n!r}]", atol=1e-6, rtol=1e-5, wrong=mistake,
                       nudge="the output of that layer's call")
        t.expect_close(again[1][n], want[n], what=f"gm(x)[1][{n!r}] on a second call", atol=1e-6, rtol=1e-5,
                       nudge="each call returns its own intermediates")
    with torch.no_grad():
        t.expect(isinstance(model(x), torch.Tensor), what="model(x) after your answer", expected="a tensor",
                 got=type(model(x)).__name__, nudge="leave the model as it was: rewrite the traced copy")


@exercise.case("the course's MLP: fc1 and fc2")
def _(answer, t: Tester) -> None:
    _run(answer, t, MLP(seed=40), kit.randn(2, 8, seed=40), ["fc1", "fc2"])


@exercise.case("a Sequential: layers named 0 and 2", hidden=True)
def _(answer, t: Tester) -> None:
    _run(answer, t, mlp(43), kit.randn(2, 4, seed=43), ["0", "2"])


@exercise.case("a Linear followed by ReLU(inplace=True)")
def _(answer, t: Tester) -> None:
    _run(answer, t, kit.InplaceAfter(seed=41), kit.randn(4, 3, seed=41), ["lin"],
         inplace="lin (act = ReLU(inplace=True))")


@exercise.case("layers inside a nested Sequential, asked for in reverse order, in float64", hidden=True)
def _(answer, t: Tester) -> None:
    model, x = kit.in_dtype(kit.Nested(seed=42), kit.randn(3, 4, seed=42))
    _run(answer, t, model, x, ["head", "encoder.body.2", "encoder.body.0"])


def _rewrite(model, names, *, copy: bool = True, match=lambda node: node.target, recompile: bool = True,
             cast: str = ""):
    """One factory for the near-copy wrong answers (``cast``: a method, ``"float"``, called on the
    layer's output before the clone)."""
    gm = torch.fx.symbolic_trace(model)
    graph = gm.graph
    kept = {}
    for node in list(graph.nodes):
        if node.op == "call_module" and match(node) in names:
            if copy:
                source = node
                if cast:
                    with graph.inserting_after(node):
                        source = graph.call_method(cast, (node,))
                with graph.inserting_after(source):
                    kept[match(node)] = graph.call_method("clone", (source,))
            else:
                kept[match(node)] = node
    output = next(node for node in graph.nodes if node.op == "output")
    output.args = ((output.args[0], kept),)
    if recompile:
        gm.recompile()
    return gm


@exercise.wrong("returns the layer's node itself, no copy", mentions="overwrote the value you returned")
def _no_copy(model, names):
    return _rewrite(model, names, copy=False)


@exercise.wrong("copies each output with .float() then clone (float32 copies of a float64 model's values)",
                mentions="keep the model's dtype", hidden=True)
def _float_copy(model, names):
    return _rewrite(model, names, cast="float")


@exercise.wrong("forgets gm.recompile()", mentions="gm.recompile()")
def _no_recompile(model, names):
    return _rewrite(model, names, recompile=False)


@exercise.wrong("matches node.name instead of node.target", mentions="node.target", hidden=True)
def _by_name(model, names):
    return _rewrite(model, names, match=lambda node: node.name)


@exercise.wrong("turns the model's in-place ops off and returns the nodes, no copy",
                mentions="leave the model as it was")
def _inplace_off(model, names):
    for module in model.modules():
        if getattr(module, "inplace", False):
            module.inplace = False   # changes the learner's model
    return _rewrite(model, names, copy=False)


class _Recorder(torch.fx.Interpreter):
    def __init__(self, gm, names):
        super().__init__(gm)
        self.names, self.kept = names, {}

    def call_module(self, target, args, kwargs):
        out = super().call_module(target, args, kwargs)
        if target in self.names:
            self.kept[target] = out.clone()
        return out


@exercise.wrong("returns a module of its own around a torch.fx.Interpreter", mentions="torch.fx.GraphModule")
def _interpreter(model, names):
    class Interpreted(nn.Module):
        def __init__(self):
            super().__init__()
            self.gm = torch.fx.symbolic_trace(model)

        def forward(self, x):
            recorder = _Recorder(self.gm, names)
            return recorder.run(x), recorder.kept
    return Interpreted()


@exercise.wrong("a hook on the GraphModule that re-runs its graph and returns the intermediates",
                mentions="not even on the GraphModule")
def _hook_on_gm(model, names):
    gm = torch.fx.symbolic_trace(model)

    def record(module, args, output):
        recorder = _Recorder(gm, names)
        recorder.run(*args)
        return output, recorder.kept

    gm.register_forward_hook(record)
    return gm


@exercise.wrong("replaces the GraphModule's forward by an Interpreter run", mentions="gm.recompile()")
def _forward_replaced(model, names):
    gm = torch.fx.symbolic_trace(model)

    def forward(x):
        recorder = _Recorder(gm, names)
        return recorder.run(x), recorder.kept

    gm.forward = forward
    return gm


@exercise.wrong("records with forward hooks", mentions="no hooks")
def _hooks(model, names):
    class Recorder(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, x):
            seen = {}
            handles = [model.get_submodule(n).register_forward_hook(
                lambda m, a, o, n=n: seen.__setitem__(n, o.clone())) for n in names]
            try:
                return self.model(x), seen
            finally:
                for h in handles:
                    h.remove()
    return Recorder()


exercise.not_varied["callers_hooks"] = "symbolic_trace runs the forward without the model's hooks, as the task asks"
