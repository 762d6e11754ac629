"""What hooks cost per training step, as ratios to the same step without hooks.

One *step* is ``model(x)`` (mode ``fwd``, grad enabled) or ``model(x).sum().backward()``
(mode ``fwd+bwd``). Every hooked configuration attaches its hooks, runs the step and
removes them again, the way ``with capture(...)`` is used; the torch.fx extractor is
traced once beforehand (its one-off cost is reported separately), because that is how it
is used. Configurations:

========================  ===================================================================
``none``                  no hooks: the baseline
``noop_fwd``              a forward hook that does nothing, on every leaf module
``noop_tensor``           a forward hook on every leaf that registers a no-op tensor hook on
                          the output (how gradients are observed without full backward hooks)
``noop_full_bwd``         a no-op ``register_full_backward_hook`` on every leaf
``recorder``              hand-written: ``detach().clone()`` every output into a list per
                          module and register a tensor hook cloning its gradient; exactly the
                          work ``capture(..., grads=True)`` does
``recorder_full_bwd``     the same recorder taking gradients from full backward hooks
``capture``               ``hooktutor.capture(model, grads=True)``
``returns``               no hooks: a forward that returns every intermediate (references;
                          gradients via ``retain_grad()``)
``returns_clone``         the same, returning ``detach().clone()`` copies
``fx``                    no hooks: a ``torch.fx`` graph rewritten to also return every leaf
                          module's output, like torchvision's create_feature_extractor
                          (references; gradients via ``retain_grad()``)
========================  ===================================================================

In mode ``fwd`` the tensor hooks and gradient copies never run (there is no backward), but
registering them and, for full backward hooks, wrapping the forward, is part of the cost.
"""

from __future__ import annotations

import gc
import time
import warnings
from collections import defaultdict
from collections.abc import Callable

import torch
from torch import fx, nn

import hooktutor as ht
from hooktutor.models import MLP, SmallCNN, deep_mlp

try:
    from ._common import calibrate, interleaved, median, paired_ratio
except ImportError:  # run as a script from benchmarks/
    from _common import calibrate, interleaved, median, paired_ratio

MODES = ("fwd", "fwd+bwd")
CONFIGS = ("none", "noop_fwd", "noop_tensor", "noop_full_bwd", "recorder", "recorder_full_bwd",
           "capture", "returns", "returns_clone", "fx")
LABELS = {
    "none": "no hooks",
    "noop_fwd": "no-op forward hook on every leaf",
    "noop_tensor": "no-op tensor hook on every leaf output",
    "noop_full_bwd": "no-op full backward hook on every leaf",
    "recorder": "hand-written recorder (clone outputs, tensor hooks clone grads)",
    "recorder_full_bwd": "hand-written recorder, grads from full backward hooks",
    "capture": "hooktutor.capture(model, grads=True)",
    "returns": "forward returns its intermediates (references)",
    "returns_clone": "forward returns its intermediates (clones)",
    "fx": "torch.fx feature extractor (references)",
}


# -- the models ------------------------------------------------------------------------
def benchmark_models(small: bool = False) -> dict[str, tuple[nn.Module, torch.Tensor]]:
    """``name -> (model, input batch)``: the course's MLP and CNN, and a 24-layer MLP."""
    n = 8 if small else 64
    x_blobs, _ = ht.data.blobs(n, seed=0)
    x_shapes, _ = ht.data.shapes(4 if small else 16, seed=0)
    return {
        "MLP": (MLP(seed=0), x_blobs),
        "CNN": (SmallCNN(seed=0), x_shapes),
        "deep MLP (24 Linear)": (deep_mlp(depth=4 if small else 24, seed=0), x_blobs),
    }


def leaves(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """Every leaf module (one without children) with its qualified name."""
    return [(n, m) for n, m in model.named_modules() if next(m.children(), None) is None]


# -- hand-written hooks ------------------------------------------------------------------
def attach(model: nn.Module, make_hooks: Callable[[str, nn.Module], list]) -> list:
    handles = []
    for name, module in leaves(model):
        handles += make_hooks(name, module)
    return handles


def detach_all(handles: list) -> None:
    for h in handles:
        h.remove()


def record_by_hand(model: nn.Module, step: Callable[[], object], *, full_backward: bool = False):
    """Run ``step`` with a hand-written recorder attached; return ``(outputs, grads)``.

    ``outputs[name]`` and ``grads[name]`` are lists with one clone per call, the same
    records :func:`hooktutor.capture` keeps with ``grads=True``.
    """
    outputs: dict[str, list] = defaultdict(list)
    grads: dict[str, list] = defaultdict(list)
    handles: list = []

    def make(name, module):
        def keep_output(m, args, out):
            outputs[name].append(out.detach().clone())
            if not full_backward and out.requires_grad:
                handles.append(out.register_hook(lambda g: grads[name].append(g.detach().clone())))

        hooks = [module.register_forward_hook(keep_output)]
        if full_backward:
            hooks.append(module.register_full_backward_hook(
                lambda m, gin, gout: grads[name].append(gout[0].detach().clone())))
        return hooks

    try:
        handles += attach(model, make)
        step()
    finally:
        detach_all(handles)
    return outputs, grads


def with_noop_hooks(model: nn.Module, step: Callable[[], object], kind: str) -> None:
    handles: list = []

    def noop_tensor_hook(grad):
        return None

    def make(name, module):
        if kind == "fwd":
            return [module.register_forward_hook(lambda m, a, o: None)]
        if kind == "full_bwd":
            return [module.register_full_backward_hook(lambda m, gin, gout: None)]

        def add_tensor_hook(m, a, out):
            if out.requires_grad:
                handles.append(out.register_hook(noop_tensor_hook))
        return [module.register_forward_hook(add_tensor_hook)]

    try:
        handles += attach(model, make)
        step()
    finally:
        detach_all(handles)


# -- the no-hook alternatives ------------------------------------------------------------
def forward_returning(model: nn.Module, x: torch.Tensor, *, clone: bool = False
                      ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The model's forward, written to also return every leaf's output (no hooks)."""
    keep = (lambda t: t.detach().clone()) if clone else (lambda t: t)
    inter: dict[str, torch.Tensor] = {}
    if isinstance(model, SmallCNN):
        for i, layer in enumerate(model.features):
            x = layer(x)
            inter[f"features.{i}"] = keep(x)
        x = model.pool(x)
        inter["pool"] = keep(x)
        x = model.classifier(x.flatten(1))
        inter["classifier"] = keep(x)
        return x, inter
    if isinstance(model, nn.Sequential):
        for name, layer in model.named_children():
            x = layer(x)
            inter[name] = keep(x)
        return x, inter
    raise TypeError(f"no hand-written forward for {type(model).__name__}")


def fx_extractor(model: nn.Module, names: list[str] | None = None) -> fx.GraphModule:
    """A traced copy of ``model`` returning ``(output, {name: output of that module})``.

    torch.fx only (the idea of torchvision's ``create_feature_extractor``): trace the
    forward into a graph, then make the graph's output also return the chosen module calls.
    """
    gm = fx.symbolic_trace(model)
    wanted = set(names) if names is not None else {n for n, _ in leaves(model)}
    picked = {node.target: node for node in gm.graph.nodes
              if node.op == "call_module" and node.target in wanted}
    output = next(node for node in gm.graph.nodes if node.op == "output")
    output.args = ((output.args[0], picked),)
    gm.recompile()
    return gm


# -- the steps -----------------------------------------------------------------------------
def make_steps(model: nn.Module, x: torch.Tensor, mode: str) -> tuple[dict[str, Callable], float]:
    """``config -> step function`` for one model and mode, and the fx tracing time (s)."""
    backward = mode == "fwd+bwd"

    def plain():
        out = model(x)
        if backward:
            out.sum().backward()

    def retaining(out, inter):
        if backward:
            for t in inter.values():
                if t.requires_grad:
                    t.retain_grad()
            out.sum().backward()

    t0 = time.perf_counter()
    gm = fx_extractor(model)
    fx_seconds = time.perf_counter() - t0

    def capture_step():
        with ht.capture(model, grads=True):
            plain()

    def returns_step():
        out, inter = forward_returning(model, x)
        retaining(out, inter)

    def returns_clone_step():
        out, inter = forward_returning(model, x, clone=True)
        if backward:
            out.sum().backward()

    def fx_step():
        out, inter = gm(x)
        retaining(out, inter)

    steps = {
        "none": plain,
        "noop_fwd": lambda: with_noop_hooks(model, plain, "fwd"),
        "noop_tensor": lambda: with_noop_hooks(model, plain, "tensor"),
        "noop_full_bwd": lambda: with_noop_hooks(model, plain, "full_bwd"),
        "recorder": lambda: record_by_hand(model, plain),
        "recorder_full_bwd": lambda: record_by_hand(model, plain, full_backward=True),
        "capture": capture_step,
        "returns": returns_step,
        "returns_clone": returns_clone_step,
        "fx": fx_step,
    }
    return steps, fx_seconds


def measure(*, rounds: int = 61, target_s: float = 0.004, small: bool = False, clock: str = "cpu",
            progress: Callable[[str], None] = lambda s: None) -> dict:
    """Time every configuration on every model and mode; ratios are paired, per round.

    Returns ``{"rounds", "models": {model: {"fx_trace_ms", mode: {"us": {config: µs},
    "ratio": {config: x no hooks}, "capture_vs_recorder": x}}}}``.
    """
    torch.set_num_threads(1)
    gc.collect()
    gc.freeze()  # what exists now is never scanned again: steadier garbage collections
    try:
        return _measure_all(rounds, target_s, small, clock, progress)
    finally:
        gc.unfreeze()


def _measure_all(rounds: int, target_s: float, small: bool, clock: str, progress) -> dict:
    result: dict = {"rounds": rounds, "clock": clock, "models": {}}
    with warnings.catch_warnings():
        # The first Linear's input needs no gradient, so its full backward hook warns.
        warnings.filterwarnings("ignore", message="Full backward hook is firing")
        for model_name, (model, x) in benchmark_models(small).items():
            entry: dict = {"leaves": len(leaves(model))}
            for mode in MODES:
                progress(f"hooks: {model_name}, {mode}")
                steps, fx_seconds = make_steps(model, x, mode)
                inner = calibrate(steps["capture"], target_s)
                samples = interleaved(steps, rounds=rounds, inner=inner, clock=clock)
                base = samples["none"]
                entry[mode] = {
                    "inner": inner,
                    "us": {c: median(s) * 1e6 for c, s in samples.items()},
                    "ratio": {c: paired_ratio(s, base) for c, s in samples.items()},
                    "capture_vs_recorder": paired_ratio(samples["capture"], samples["recorder"]),
                    "full_bwd_vs_tensor_noop": paired_ratio(samples["noop_full_bwd"], samples["noop_tensor"]),
                    "full_bwd_vs_tensor_recorder": paired_ratio(samples["recorder_full_bwd"],
                                                                samples["recorder"]),
                }
                entry["fx_trace_ms"] = fx_seconds * 1e3
            result["models"][model_name] = entry
    return result
