"""The surroundings of an answer, varied: what the cases of an exercise do not vary by themselves.

Mutation testing kills the mutants of a solution, yet learners' mistakes that change what an
answer does to its *surroundings* pass every case: a ``.float()`` copy of a float64 model's
result (the tolerance admits it), a model switched to eval and left there, a buffer or an
attribute added to the caller's module, the caller's hooks cleared or skipped (``model.forward(x)``
runs no hook of the model itself), a ``detach()`` or a ``no_grad`` that leaves no gradient to the
earlier layers, ``.grad`` left on the parameters, a process-wide setting flipped.

After every case of an exercise passed, :func:`run_variants` runs the answer once more per
variant of the *first visible case's* call (its arguments recorded from a run of the reference,
copied afresh for each run) and compares it with the reference run the same way:

==============  ==============================================================================
variant         the recorded arguments ...
==============  ==============================================================================
``as given``    unchanged
``float64``     with every floating module and tensor in float64
``bfloat16``    in bfloat16 (looser values, the dtype still exact)
``eval``        with every module in eval mode
``mixed``       with the modules in train and eval mode alternately (the model itself in train)
``generation``  a transformers model's ``generation_config`` sampling by default
                (``do_sample=True``): settings the case model's defaults made unnecessary
==============  ==============================================================================

In each variant every module of every module argument carries a forward pre-hook and a forward
hook of the caller's, which record that they fired (a flag, not a count: a count would make a
compiled answer recompile on every call); what is compared, answer against reference (each an
*aspect*):

``result``
    the returned value: a tensor's dtype exactly, its shape, its values (the tolerance of its
    dtype), whether it was made under ``inference_mode``; a Python number where the reference
    gives a tensor, a ``bool`` where it gives another value;
``backward``
    where the reference's result is differentiable: a backward through it (a seeded weighted sum)
    must reach the same parameters with the same gradients;
``callers_hooks``
    the caller's hooks are still there and fired wherever they fired with the reference (the
    model's own hooks skipped while its layers ran is said as such);
``state``
    every module's training flag, instance attributes (``__dict__`` keys), buffers, parameters
    (names, values, ``requires_grad``, ``.grad``), ``state_dict`` keys and hook dicts, the hooks
    of every parameter and optimizer;
``globals``
    grad mode, inference mode, anomaly mode, default dtype, deterministic algorithms, autocast,
    float32 matmul precision and a few ``torch._dynamo.config`` keys (restored after each run).

A variant whose reference run raises or returns nothing comparable is not applicable and is
skipped; so is one that changes nothing (no floating tensors, a single module). An exercise opts
out of a variant or an aspect with one line and its reason::

    exercise.not_varied["bfloat16"] = "the task's thresholds are float32 constants"

(``Exercise(..., not_varied={...})`` does the same.) The reference's runs are kept per
exercise, so a check of a passing answer costs one run of the answer per variant.
"""

from __future__ import annotations

import contextlib
import copy
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ..i18n import N_, fmt
from ..inventory import global_hook_ids

VARIANTS: dict[str, str] = {
    "as given": "the first case again, with a hook of the caller's on every module and a "
                "backward through the result",
    "float64": "the first case again, with the model and its inputs in float64",
    "bfloat16": "the first case again, with the model and its inputs in bfloat16",
    "eval": "the first case again, with every module in eval mode",
    "mixed": "the first case again, with some modules in train mode and some in eval mode",
    "generation": "the first case again, with a model whose generation_config samples by default",
}
# the part of each variant's text after "the first case again, ": what a report says the answer
# got wrong in it, a message of its own (marked, so that the catalogue translates it inside a sentence)
CLAUSES: dict[str, str] = {
    "as given": N_("with a hook of the caller's on every module and a backward through the result"),
    "float64": N_("with the model and its inputs in float64"),
    "bfloat16": N_("with the model and its inputs in bfloat16"),
    "eval": N_("with every module in eval mode"),
    "mixed": N_("with some modules in train mode and some in eval mode"),
    "generation": N_("with a model whose generation_config samples by default"),
}
RESULT = N_("the result")   # what a report calls the answer's value
# words a report fills into its sentences, each a message of its own
_WORDS = (N_("a bool"), N_("an int"), N_("a float"), N_("buffers"), N_("parameters"), N_("state_dict keys"),
          N_("changed"))
ASPECTS = ("result", "backward", "callers_hooks", "state", "globals")
STRICT = False   # tests set it: an error of the variants' own machinery raises instead of skipping

HOOK_DICTS = ("_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks", "_backward_hooks",
              "_state_dict_hooks", "_state_dict_pre_hooks", "_load_state_dict_pre_hooks",
              "_load_state_dict_post_hooks")
_FLAG_DICTS = ("_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_forward_pre_hooks_with_kwargs")


class Recorded(BaseException):
    """Stops the recording run of the first case at the reference's first call (a BaseException,
    so that a case's own ``except Exception`` does not swallow it)."""


# -- global settings --------------------------------------------------------------------------

_DYNAMO_KEYS = ("cache_size_limit", "recompile_limit", "capture_scalar_outputs", "suppress_errors",
                "skip_nnmodule_hook_guards", "error_on_recompile", "force_parameter_static_shapes")


def global_settings() -> dict[str, Any]:
    """The process-wide settings an answer must leave as it found them."""
    s: dict[str, Any] = {
        "the grad mode (torch.is_grad_enabled())": torch.is_grad_enabled(),
        "inference mode (torch.is_inference_mode_enabled())": torch.is_inference_mode_enabled(),
        "anomaly mode (torch.is_anomaly_enabled())": torch.is_anomaly_enabled(),
        "anomaly mode's NaN check": torch.is_anomaly_check_nan_enabled(),
        "the default dtype (torch.get_default_dtype())": torch.get_default_dtype(),
        "deterministic algorithms (torch.are_deterministic_algorithms_enabled())":
            torch.are_deterministic_algorithms_enabled(),
        "deterministic algorithms' warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
        "autocast on the CPU (torch.is_autocast_enabled('cpu'))": torch.is_autocast_enabled("cpu"),
        "autocast's CPU dtype": torch.get_autocast_dtype("cpu"),
        "the float32 matmul precision": torch.get_float32_matmul_precision(),
    }
    dynamo = sys.modules.get("torch._dynamo.config")
    if dynamo is not None:   # (never imported just to read it: importing Dynamo takes a second)
        for key in _DYNAMO_KEYS:
            if hasattr(dynamo, key):
                s[f"torch._dynamo.config.{key}"] = getattr(dynamo, key)
    frame = sys.modules.get("torch._dynamo.eval_frame")
    if getattr(frame, "_stance", None) is not None:   # torch.compiler.set_stance (2.6 and newer)
        s[_STANCE] = frame._stance
    return s


_STANCE = "Dynamo's stance (torch.compiler.set_stance)"


def restore_globals(before: dict[str, Any]) -> None:
    """Put back the settings :func:`global_settings` read that differ now (inference mode cannot
    be left from outside its ``with`` block: it is only reported)."""
    now = global_settings()
    changed = {key for key, value in before.items() if key in now and now[key] != value}
    if not changed:
        return
    get = before.get
    setters: list[tuple[tuple[str, ...], Callable[[], Any]]] = [
        (("the grad mode (torch.is_grad_enabled())",),
         lambda: torch.set_grad_enabled(get("the grad mode (torch.is_grad_enabled())"))),
        (("anomaly mode (torch.is_anomaly_enabled())", "anomaly mode's NaN check"),
         lambda: torch.set_anomaly_enabled(get("anomaly mode (torch.is_anomaly_enabled())"),
                                           get("anomaly mode's NaN check"))),
        (("the default dtype (torch.get_default_dtype())",),
         lambda: torch.set_default_dtype(get("the default dtype (torch.get_default_dtype())"))),
        (("deterministic algorithms (torch.are_deterministic_algorithms_enabled())",
          "deterministic algorithms' warn_only"),
         lambda: torch.use_deterministic_algorithms(
             get("deterministic algorithms (torch.are_deterministic_algorithms_enabled())"),
             warn_only=get("deterministic algorithms' warn_only"))),
        (("autocast on the CPU (torch.is_autocast_enabled('cpu'))",),
         lambda: torch.set_autocast_enabled("cpu", get("autocast on the CPU (torch.is_autocast_enabled('cpu'))"))),
        (("autocast's CPU dtype",), lambda: torch.set_autocast_dtype("cpu", get("autocast's CPU dtype"))),
        (("the float32 matmul precision",),
         lambda: torch.set_float32_matmul_precision(get("the float32 matmul precision"))),
    ]
    for keys, setter in setters:
        if changed & set(keys):
            with contextlib.suppress(Exception):
                setter()
    if _STANCE in changed:   # the module's own setter checks nothing we need: no compiled region here
        with contextlib.suppress(Exception):
            sys.modules["torch._dynamo.eval_frame"]._set_stance(before[_STANCE])
    dynamo = sys.modules.get("torch._dynamo.config")
    for key in changed:
        if key.startswith("torch._dynamo.config.") and dynamo is not None:
            with contextlib.suppress(Exception):
                setattr(dynamo, key.rsplit(".", 1)[-1], before[key])


def globals_changed(before: dict[str, Any], after: dict[str, Any]) -> tuple[str, Any, Any] | None:
    """The first setting that differs: ``(name, before, after)``."""
    for key, value in before.items():
        if key in after and after[key] != value:
            return key, value, after[key]
    return None   # (a key only in after: Dynamo imported by the answer, nothing changed)


def globals_nudge(name: str, before: Any, after: Any) -> str:
    return (f"your answer left {name} at {after!r} (it was {before!r}); it is a setting of the whole "
            "process, and every later cell would run with it. Change it only inside a `with` block "
            "(torch.no_grad(), torch.autocast(...)) or restore it in a `finally:`")


# -- walking the arguments ----------------------------------------------------------------------

def _walk(obj: Any, depth: int = 0):
    """The modules, optimizers and tensors reachable from the arguments through lists, tuples and
    dicts (not through other objects)."""
    if depth > 6:
        return
    if isinstance(obj, (nn.Module, torch.optim.Optimizer, torch.Tensor)):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            yield from _walk(item, depth + 1)
    elif isinstance(obj, dict):
        for item in obj.values():
            yield from _walk(item, depth + 1)


def _roots(args: Any) -> list[nn.Module]:
    """The module arguments that are no submodule of another module argument."""
    modules = []
    for m in _walk(args):
        if isinstance(m, nn.Module) and all(m is not n for n in modules):
            modules.append(m)
    inside = {id(sub) for m in modules for sub in m.modules() if sub is not m}
    return [m for m in modules if id(m) not in inside]


def _is_check_hook(fn: Any) -> bool:
    return str(getattr(fn, "__module__", "") or "").startswith("hooktutor.exercises")


def strip_check_hooks(args: Any, callers: set[int]) -> None:
    """Take the check's own hooks (a Tester's stand-ins, the kit's witnesses, a case's hooks)
    off the copied modules: each variant puts its own caller's hooks on."""
    for root in _roots(args):
        for m in root.modules():
            for attr in HOOK_DICTS:
                hooks = getattr(m, attr, None)
                if not hooks:
                    continue
                for key in [k for k, fn in hooks.items() if k in callers or _is_check_hook(fn)]:
                    del hooks[key]
                    for flags in _FLAG_DICTS:
                        getattr(m, flags, {}).pop(key, None)


def _convert(obj: Any, dtype: torch.dtype, seen: dict[int, Any]) -> Any:
    if id(obj) in seen:
        return seen[id(obj)]
    if isinstance(obj, nn.Module):
        out = obj.to(dtype)
    elif isinstance(obj, torch.optim.Optimizer):
        for group in obj.param_groups:
            for p in group["params"]:
                if p.is_floating_point() and p.dtype != dtype:
                    p.data = p.data.to(dtype)
        out = obj
    elif isinstance(obj, torch.Tensor):
        if obj.is_floating_point() and obj.dtype != dtype:
            out = obj.detach().to(dtype)
            if obj.requires_grad and obj.is_leaf:
                out.requires_grad_(True)
            elif obj.requires_grad:
                out = obj.to(dtype)
        else:
            out = obj
    elif isinstance(obj, list):
        out = [_convert(v, dtype, seen) for v in obj]
    elif isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        out = tuple(_convert(v, dtype, seen) for v in obj)
    elif isinstance(obj, dict):
        out = type(obj)((k, _convert(v, dtype, seen)) for k, v in obj.items()) if type(obj) in (dict,) or \
            isinstance(obj, dict) and _rebuildable(obj) else obj
    else:
        out = obj
    seen[id(obj)] = out
    return out


def _rebuildable(obj: dict) -> bool:
    try:
        type(obj)()
        return True
    except Exception:
        return False


def _floating(args: Any) -> bool:
    for item in _walk(args):
        if isinstance(item, torch.Tensor) and item.is_floating_point():
            return True
        if isinstance(item, nn.Module) and any(p.is_floating_point() for p in item.parameters()):
            return True
    return False


def prepare(name: str, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
    """The variant ``name`` of the recorded call (already a fresh copy), or None where it
    changes nothing."""
    if name in ("float64", "bfloat16"):
        if not _floating((args, kwargs)):
            return None
        dtype = torch.float64 if name == "float64" else torch.bfloat16
        seen: dict[int, Any] = {}
        args = tuple(_convert(a, dtype, seen) for a in args)
        kwargs = {k: _convert(v, dtype, seen) for k, v in kwargs.items()}
    elif name == "generation":
        configs = [r.generation_config for r in _roots((args, kwargs)) if getattr(r, "generation_config", None)]
        if not configs:
            return None
        for config in configs:
            config.do_sample, config.top_k = True, None
    elif name in ("eval", "mixed"):
        roots = _roots((args, kwargs))
        if not roots:
            return None
        if name == "eval":
            if not any(m.training for r in roots for m in r.modules()):
                return None
            for r in roots:
                r.eval()
        else:
            modules = [m for r in roots for m in r.modules()]
            if len(modules) < 2:
                return None
            for i, m in enumerate(dict.fromkeys(modules)):
                m.training = i % 2 == 0
    return args, kwargs


# -- one run ------------------------------------------------------------------------------------

@dataclass
class Run:
    """What one run of an answer (or the reference) did in a variant."""

    result: Any = None
    error: BaseException | None = None
    state: dict[tuple, Any] = field(default_factory=dict)
    present: dict[str, bool] = field(default_factory=dict)    # module -> the caller's hooks still there
    fired: dict[str, tuple[int, int]] = field(default_factory=dict)   # module -> (pre, forward) fired: 1/0
    grads: dict[str, torch.Tensor | None] | None = None       # the backward through the result
    backward_error: str | None = None
    settings: tuple[str, Any, Any] | None = None


def _names(roots: list[nn.Module]) -> list[tuple[str, nn.Module]]:
    out, seen = [], set()
    for i, root in enumerate(roots):
        label, whole = ("model", "the model") if len(roots) == 1 else (f"module{i + 1}", f"module argument {i + 1}")
        for name, m in root.named_modules():
            if id(m) not in seen:
                seen.add(id(m))
                out.append((f"{label}.{name}" if name else whole, m))
    return out


def _tensors(value: Any, path: str = "the result", depth: int = 0):
    if depth > 6:
        return
    if isinstance(value, torch.Tensor):
        yield path, value
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _tensors(v, f"{path}[{i}]", depth + 1)
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _tensors(v, f"{path}[{k!r}]", depth + 1)


def _optimizers(args: Any) -> list[torch.optim.Optimizer]:
    return [o for o in _walk(args) if isinstance(o, torch.optim.Optimizer)]


def _state(named: list[tuple[str, nn.Module]], optimizers: list, callers: set[int]) -> dict[tuple, Any]:
    state: dict[tuple, Any] = {}
    for qual, m in named:
        state[(qual, "training")] = m.training
        state[(qual, "attributes")] = tuple(sorted(vars(m)))
        for attr in HOOK_DICTS:
            hooks = getattr(m, attr, None) or {}
            state[(qual, "hooks", attr)] = len([k for k in hooks if k not in callers])
        state[(qual, "buffers")] = tuple(n for n, _ in m.named_buffers(recurse=False))
        for n, b in m.named_buffers(recurse=False):
            state[(qual, "buffer", n)] = b.detach().clone() if isinstance(b, torch.Tensor) else b
        state[(qual, "parameters")] = tuple(n for n, _ in m.named_parameters(recurse=False))
        for n, p in m.named_parameters(recurse=False):
            state[(qual, "parameter", n)] = p.detach().clone()
            state[(qual, "requires_grad", n)] = p.requires_grad
            state[(qual, "grad", n)] = None if p.grad is None else p.grad.detach().clone()
            state[(qual, "tensor hooks", n)] = len(p._backward_hooks or {}) + len(
                getattr(p, "_post_accumulate_grad_hooks", None) or {})
    if named:
        with contextlib.suppress(Exception):
            state[(named[0][0], "state_dict keys")] = tuple(named[0][1].state_dict().keys())
    for i, opt in enumerate(optimizers):
        hooks = sum(len(getattr(opt, a, None) or {}) for a in vars(opt) if a.endswith("_hooks"))
        state[(f"optimizer {i + 1}", "hooks", "optimizer")] = hooks
    return state


def _flag_hooks(flags: list[int]) -> tuple[Callable, Callable]:
    """A forward pre-hook and a forward hook of the caller's that note that they fired.

    They set a flag rather than count: under torch.compile Dynamo traces them, and an int that
    changes from call to call fails its guards, so every call of a compiled answer would compile
    again (slow, and a graph count that is the kit's, not the answer's); a flag set to 1 keeps
    the guards true after the first call. ``flags`` reaches them as a closure, not as a default
    argument: the Dynamo of torch 2.9.1 and 2.10.0 drops what a function it inlines (a hook, a
    helper the compiled code calls) does to an object bound as that function's default argument
    (2.8.0 and 2.13.0 keep it), and the hooks would seem never to fire."""
    def pre(module, args):
        flags[0] = 1

    def post(module, args, output):
        flags[1] = 1
    return pre, post


def _instrument(named: list[tuple[str, nn.Module]], callers: set[int]) -> tuple[list, dict[str, list[int]]]:
    flags: dict[str, list[int]] = {}   # module -> [pre fired, forward fired]
    handles = []
    for qual, m in named:
        pre, post = _flag_hooks(flags.setdefault(qual, [0, 0]))
        pair = (m.register_forward_pre_hook(pre), m.register_forward_hook(post))
        callers.update(h.id for h in pair)
        handles.append((qual, m, pair))
    return handles, flags


def run_once(fn: Callable, args: tuple, kwargs: dict, callers: set[int], deadline: Callable,
             backward: bool) -> Run:
    """Run ``fn(*args, **kwargs)`` with the caller's hooks on every module (each notes that it
    fired); read what it left; then a backward through its differentiable result."""
    roots = _roots((args, kwargs))
    named = _names(roots)
    optimizers = _optimizers((args, kwargs))
    handles, flags = _instrument(named, callers)
    out = Run()
    settings = global_settings()
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            with deadline():
                out.result = fn(*args, **kwargs)
    except Recorded:
        raise
    except BaseException as e:   # noqa: BLE001 - the answer's error, said by the caller
        if isinstance(e, (KeyboardInterrupt, SystemExit)) and not isinstance(e, SystemExit):
            raise
        out.error = e
    finally:
        changed = globals_changed(settings, global_settings())
        restore_globals(settings)
        out.settings = changed
        for qual, m, pair in handles:
            out.present[qual] = all(h.id in getattr(m, d) for h, d in zip(pair, ("_forward_pre_hooks",
                                                                                 "_forward_hooks")))
            out.fired[qual] = tuple(flags[qual])
            for h in pair:
                h.remove()
                callers.discard(h.id)
    if out.error is not None:
        return out
    out.state = _state(named, optimizers, callers)
    if backward:
        out.grads, out.backward_error = _backward(out.result, named)
    return out


def _weights(t: torch.Tensor, i: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 + i)
    return torch.randn(t.shape, generator=g, dtype=torch.float64).to(t.dtype)


def _backward(result: Any, named: list[tuple[str, nn.Module]]) -> tuple[dict | None, str | None]:
    """The gradients a seeded weighted sum of the result's differentiable tensors sends to every
    parameter (None where none reaches it), or None where the result is not differentiable."""
    tensors = [(p, t) for p, t in _tensors(result) if t.is_floating_point() and t.requires_grad]
    params = [(f"{qual}.{n}", p) for qual, m in named for n, p in m.named_parameters(recurse=False)
              if p.requires_grad]
    if not tensors or not params:
        return None, None
    try:
        with torch.enable_grad():
            loss = sum((t * _weights(t, i)).sum() for i, (_, t) in enumerate(tensors))
            grads = torch.autograd.grad(loss, [p for _, p in params], allow_unused=True, retain_graph=True)
    except Exception as e:   # noqa: BLE001
        return None, f"{type(e).__name__}: {e}".splitlines()[0][:200]
    return {name: None if g is None else g.detach().clone() for (name, _), g in zip(params, grads)}, None


# -- comparing ---------------------------------------------------------------------------------

class Difference(Exception):
    def __init__(self, aspect: str, what: str, expected: Any, got: Any, nudge: str):
        super().__init__(what)
        self.aspect, self.what, self.expected, self.got, self.nudge = aspect, what, expected, got, nudge


def _tolerance(dtype: torch.dtype) -> tuple[float, float]:
    if dtype == torch.float64:
        return 1e-10, 1e-9
    if dtype in (torch.bfloat16, torch.float16):
        return 5e-2, 5e-2
    return 1e-5, 1e-4


def _close(a: torch.Tensor, b: torch.Tensor, scale: float = 1.0) -> bool:
    atol, rtol = _tolerance(b.dtype)
    common = torch.promote_types(a.dtype, b.dtype)
    if not common.is_floating_point:
        return torch.equal(a, b)
    a, b = a.detach().to(torch.float64), b.detach().to(torch.float64)
    size = float(b.abs().max()) if b.numel() and bool(torch.isfinite(b).all()) else 1.0
    return torch.allclose(a, b, atol=atol * scale * max(1.0, size), rtol=rtol * scale, equal_nan=True)


def compare_results(got: Any, ref: Any, variant: str, path: str = RESULT, depth: int = 0) -> None:
    if depth > 6:
        return
    low = variant in ("float64", "bfloat16")
    if isinstance(ref, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            if isinstance(got, (int, float)) and not isinstance(got, bool):
                raise Difference("result", path, f"a tensor ({ref.dtype})", f"a Python {type(got).__name__}",
                                 f"{path} is a Python {type(got).__name__}, where a tensor is asked: "
                                 "keep it a tensor (no .item() or float()); a tensor keeps its dtype "
                                 "and device")
            return   # another kind of value: the cases said what they needed of it
        if got.dtype != ref.dtype:
            fix = ("a .float(), a torch.tensor(...) of your own or a tensor of another dtype in your "
                   "computation changes it. Compute in the dtype of what you were given (torch.zeros_like, "
                   "x.new_tensor(...), .to(x.dtype))")
            raise Difference("result", f"the dtype of {path}", ref.dtype, got.dtype, (
                f"{path} is {got.dtype}, but should be {ref.dtype} (here the model and its inputs are in "
                f"{variant}): {fix}" if low else f"{path} is {got.dtype}, but should be {ref.dtype}: {fix}"))
        if tuple(got.shape) != tuple(ref.shape):
            raise Difference("result", f"the shape of {path}", tuple(ref.shape), tuple(got.shape),
                             f"{path} has shape {tuple(got.shape)}, but should have {tuple(ref.shape)}")
        if got.is_inference() and not ref.is_inference():
            raise Difference("result", path, "an ordinary tensor", "an inference tensor", (
                f"{path} was made under torch.inference_mode(): it can never take part in autograd, nor "
                "be changed in place outside that mode. Use torch.no_grad() where the task asks for it"))
        if not _close(got, ref) and variant == "generation":
            raise Difference("result", f"the values of {path}", ref, got, (
                f"{path} differs when the model's generation_config samples by default: pass every "
                "setting the task asks for to generate() yourself (do_sample=False, min_new_tokens=...); "
                "a model's defaults differ from one model to the next"))
        if not _close(got, ref):
            if low:
                nudge = (f"{path} differs from the right values with the model and its inputs in {variant}: "
                         "compute in their dtype (a float32 step in between loses precision); the task says "
                         "what to compute")
            elif variant != "as given":
                nudge = f"{path} differs from the right values {CLAUSES[variant]}; the task says what to compute"
            else:
                nudge = f"{path} differs from the right values; the task says what to compute"
            raise Difference("result", f"the values of {path}", ref, got, nudge)
        return
    if isinstance(ref, bool) or isinstance(got, bool):
        if type(got) is not type(ref) and isinstance(ref, (bool, int, float)):
            raise Difference("result", path, _a(type(ref).__name__), _a(type(got).__name__),
                             f"{path} is {_a(type(got).__name__)}, but should be {_a(type(ref).__name__)} "
                             "(a bool is not a number, nor a number a bool)")
        return
    if isinstance(ref, (int, float)) and isinstance(got, (int, float)):
        atol, rtol = _tolerance(torch.float64 if variant == "float64" else
                                torch.bfloat16 if variant == "bfloat16" else torch.float32)
        if not (math.isclose(got, ref, rel_tol=rtol, abs_tol=atol) or (math.isnan(got) and math.isnan(ref))):
            raise Difference("result", path, ref, got, f"{path} differs from the right value {CLAUSES[variant]}")
        return
    if isinstance(ref, (list, tuple)) and isinstance(got, (list, tuple)):
        if len(got) != len(ref):
            raise Difference("result", f"the length of {path}", len(ref), len(got),
                             f"{path} has {len(got)} entries, but should have {len(ref)}")
        for i, (g, r) in enumerate(zip(got, ref)):
            compare_results(g, r, variant, f"{path}[{i}]", depth + 1)
        return
    if isinstance(ref, dict) and isinstance(got, dict):
        if set(map(repr, got)) != set(map(repr, ref)):
            raise Difference("result", f"the keys of {path}", sorted(map(repr, ref)), sorted(map(repr, got)),
                             f"{path} has other keys than it should")
        by_repr = {repr(k): v for k, v in got.items()}
        for k, r in ref.items():
            compare_results(by_repr[repr(k)], r, variant, f"{path}[{k!r}]", depth + 1)


def article(noun: str) -> str:
    """A noun with its article: "an int", "a float"."""
    return ("an " if noun[:1].lower() in "aeiou" else "a ") + noun


_a = article


def _mode(flag: bool) -> str:
    return "train" if flag else "eval"


def compare_runs(got: Run, ref: Run, variant: str, off: dict[str, str]) -> None:
    """Raise :class:`Difference` for the first way the answer's run differs from the reference's."""
    if "globals" not in off and got.settings is not None and ref.settings is None:
        name, before, after = got.settings
        raise Difference("globals", name, before, after, globals_nudge(name, before, after))
    if "result" not in off:
        compare_results(got.result, ref.result, variant)
    if "callers_hooks" not in off:
        for qual, there in got.present.items():
            if not there and ref.present.get(qual, False):
                raise Difference("callers_hooks", f"the caller's hooks on {qual}", "still attached", "gone", (
                    f"your answer removed a hook it did not attach, from {qual}: remove only your own hooks, "
                    "with their handles (module._forward_hooks.clear() or remove_hooks(model) take "
                    "everybody's)"))
        skipped = [q for q, (pre, post) in got.fired.items()
                   if (pre == 0 or post == 0) and min(ref.fired.get(q, (0, 0))) > 0]
        if skipped:
            root = next(iter(got.fired))
            children_ran = any(max(c) > 0 for q, c in got.fired.items() if q != root)
            if skipped[0] == root and children_ran:
                raise Difference("callers_hooks", f"the caller's hooks on {root} itself", "they fire",
                                 "its layers ran, but the hooks of the model itself did not", (
                                     "run the model as model(x): model.forward(x) (or a compiled copy that "
                                     "skips them) runs no hook registered on the model itself, and the "
                                     "caller's hooks there must still fire"))
            if not any(max(c) > 0 for c in got.fired.values()):
                raise Difference("callers_hooks", "the caller's hooks on the model", "they fire",
                                 "no module of the model ran", (
                                     "your answer never ran the model, so nothing it reports was seen: the "
                                     "task asks you to run model(x) with your hook attached"))
            raise Difference("callers_hooks", f"the caller's hooks on {skipped[0]}", "they fire",
                             "they did not fire", (
                                 f"{skipped[0]} ran with the right answer and its hooks fired; with yours "
                                 "they never did: call the modules as module(x), not module.forward(x)"))
    if "state" not in off:
        _compare_state(got.state, ref.state, variant)
    if "backward" not in off and ref.grads is not None:
        if got.backward_error is not None and ref.backward_error is None:
            raise Difference("backward", "a backward through your result", "it runs", got.backward_error, (
                "the check's backward through what you returned failed: return it as computed, with its "
                "autograd graph (do not call backward() on it yourself)"))
        if got.grads is None:
            raise Difference("backward", "the gradient through your result", "it reaches the model's layers",
                             "your result has no autograd graph", (
                                 "a backward through your result reaches no layer: a detach(), a "
                                 "torch.no_grad() or inference_mode() cut the graph; the result must stay "
                                 "differentiable, as the model's own output is"))
        for name, r in ref.grads.items():
            g = got.grads.get(name)
            if r is not None and g is None:
                raise Difference("backward", f"the gradient of {name}", "a gradient", "none reaches it", (
                    f"a backward through your result does not reach {name}: the graph was cut between "
                    "them (a detach(), a .data, a torch.no_grad() in a hook)"))
            if r is not None and g is not None and (g.shape != r.shape or not _close(g, r, 10.0)):
                raise Difference("backward", f"the gradient of {name}", r, g, (
                    f"a backward through your result sends another gradient to {name} than it should: "
                    "your change to the output must be differentiable as the task states it (no "
                    "detach() or .data in it)"))


def _compare_state(got: dict, ref: dict, variant: str) -> None:
    for key in list(ref) + [k for k in got if k not in ref]:
        r, g = ref.get(key), got.get(key)
        if isinstance(r, torch.Tensor) and isinstance(g, torch.Tensor):
            if r.shape == g.shape and r.dtype == g.dtype and _close(g, r, 10.0):
                continue
        elif type(r) is type(g) and r == g:
            continue
        qual, kind = key[0], key[1]
        name = key[2] if len(key) > 2 else ""
        if kind == "training":
            raise Difference("state", f"the mode of {qual}", _mode(r), _mode(g), (
                f"your answer left {qual} in {_mode(g)} mode; it was to be left in {_mode(r)} mode. "
                "Leave what you were given as you found it: note module.training and restore it in a "
                "`finally:`"))
        if kind == "attributes":
            added = sorted(set(g or ()) - set(r or ()))
            removed = sorted(set(r or ()) - set(g or ()))
            said = (fmt("added {names}", names=", ".join(added)) if added
                    else fmt("removed {names}", names=", ".join(removed)))
            raise Difference("state", f"the attributes of {qual}", "as they were", said, (
                f"your answer {said} on {qual}: keep your own state in your own variables (a closure, "
                "a dict you return), not on the caller's modules"))
        if kind in ("buffers", "parameters", "state_dict keys"):
            added = sorted(set(g or ()) - set(r or ()))
            removed = sorted(set(r or ()) - set(g or ()))
            said = (fmt("added {names}", names=", ".join(added)) if added
                    else fmt("removed {names}", names=", ".join(removed)) if removed else "changed")
            raise Difference("state", f"the {kind} of {qual}", "as they should be", said, (
                f"your answer {said} ({kind}) on {qual}: its state_dict changes with it, and a checkpoint "
                "saved from it no longer loads into a fresh model. Keep your own state outside the module"))
        if kind in ("hooks", "tensor hooks"):
            fix = "remove exactly the hooks you added, with their handles, and no others"
            raise Difference("state", f"the hooks on {qual}{' ' + name if name else ''}", r, g, (
                f"more hooks are on {qual} after your answer than should be: {fix}" if (g or 0) > (r or 0)
                else f"fewer hooks are on {qual} after your answer than should be: {fix}"))
        if kind == "grad":
            raise Difference("state", f"{qual}.{name}.grad", "None" if r is None else "the gradient it had",
                             "a gradient" if g is not None else "None", (
                                 f"your answer left a .grad on {qual}.{name} that should not be there (or "
                                 "removed one): clear the gradients your own backward() put on the caller's "
                                 "parameters (p.grad = None), and leave theirs") if g is not None else
                             f"{qual}.{name}.grad is None after your answer, where the solution leaves a "
                             "gradient: your answer removed it (leave the caller's gradients), or computed "
                             "gradients without .backward() (torch.autograd.grad fills no .grad)")
        if kind == "requires_grad":
            raise Difference("state", f"{qual}.{name}.requires_grad", r, g, (
                "your answer changed requires_grad of a parameter it was given: restore it"))
        raise Difference("state", f"{qual}.{name} ({kind})", "as it should be", "changed", (
            f"your answer changed {kind} {name} of {qual}: leave the caller's tensors as they were"))


# -- the variants of one exercise ----------------------------------------------------------------

@dataclass
class Recording:
    args: tuple
    kwargs: dict
    reference: dict[tuple[str, str, str], Run | None] = field(default_factory=dict)   # (variant, settings)


def record(exercise: Any, callers: set[int], run_case: Callable) -> Recording | None:
    """The reference's first call in the first visible case, its arguments copied before it ran
    (and its result left out); None where that is not possible."""
    cached = getattr(exercise, "_variants_recording", False)
    if cached is not False:
        return cached
    got: list[tuple[tuple, dict]] = []
    reference = exercise._solution

    def recorder(*args: Any, **kwargs: Any) -> Any:
        try:
            copied = copy.deepcopy((args, kwargs))
        except Exception:   # noqa: BLE001 - an argument that cannot be copied: no variants
            raise Recorded() from None
        strip_check_hooks(copied, callers)
        got.append(copied)
        raise Recorded()
    recording = None
    if not isinstance(reference, type) and exercise.cases:
        with contextlib.suppress(Exception):
            run_case(exercise.cases[0][1], recorder)
        if got:
            recording = Recording(*got[0])
    exercise._variants_recording = recording
    return recording


def run_variants(exercise: Any, answer: Callable, callers: set[int], run_case: Callable,
                 deadline: Callable) -> tuple[str, Difference | BaseException] | None:
    """Run ``answer`` in every variant that applies; the first failure as ``(variant, what)``:
    a :class:`Difference`, or the exception the answer raised. The variants are the check's own
    runs, compared with the reference's: a warning torch gives in one of them (a full backward
    hook whose module's inputs need no grad, in the backward through the result) is not the
    learner's cell's, and is not shown."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _run_variants(exercise, answer, callers, run_case, deadline)


def _run_variants(exercise: Any, answer: Callable, callers: set[int], run_case: Callable,
                  deadline: Callable) -> tuple[str, Difference | BaseException] | None:
    off = dict(getattr(exercise, "not_varied", {}) or {})
    if "all" in off or isinstance(answer, type):
        return None
    recording = record(exercise, callers, run_case)
    if recording is None:
        return None
    for variant in VARIANTS:
        if variant in off:
            continue
        try:
            ref = _reference_run(exercise, recording, variant, callers, deadline, off)
            if ref is None:
                continue
            prepared = prepare(variant, *copy.deepcopy((recording.args, recording.kwargs)))
        except Exception:
            if STRICT:
                raise
            continue
        assert prepared is not None
        got = run_once(answer, *prepared, callers, deadline, backward="backward" not in off)
        if got.error is not None:
            return variant, got.error
        try:
            compare_runs(got, ref, variant, off)
        except Difference as d:
            return variant, d
        except Exception:
            if STRICT:
                raise
            continue
    return None


def compile_settings() -> str:
    """``torch.compile`` (a cell may have put a wrapper in its place), and all of Dynamo's settings
    and its stance (``torch.compiler.set_stance``, no config setting) where Dynamo is imported: more
    than :func:`global_settings` reads, and each can change what a reference that compiles gives
    (``disable=True``, ``set_stance("force_eager")``: no graph)."""
    config, frame = sys.modules.get("torch._dynamo.config"), sys.modules.get("torch._dynamo.eval_frame")
    if config is None:
        return repr(torch.compile)
    return repr((torch.compile, sorted(config.get_config_copy().items()), getattr(frame, "_stance", None)))


def _reference_run(exercise: Any, recording: Recording, variant: str, callers: set[int],
                   deadline: Callable, off: dict) -> Run | None:
    # kept per variant and per process-wide settings: a setting changed since (a learner's cell
    # that sets Dynamo's recompile limit, or disables it, or sets its stance) can change what the
    # reference gives, and so can a global module hook registered since (by its handle's id, not
    # the number of hooks: one that appends to a list, in place of one that does nothing, makes a
    # compiled reference compile again on every call)
    key = (variant, repr(sorted(global_settings().items())), compile_settings(),
           tuple(sorted(global_hook_ids())))
    if key in recording.reference:
        return recording.reference[key]
    ref = None
    prepared = prepare(variant, *copy.deepcopy((recording.args, recording.kwargs)))
    if prepared is not None:
        run = run_once(exercise._solution, *prepared, callers, deadline, backward="backward" not in off)
        if run.error is None and run.settings is None:
            ref = run
    recording.reference[key] = ref
    return ref

