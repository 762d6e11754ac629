"""Mutation testing of the exercise checks: an adversary that nobody hand-picks.

A check is worth what it rejects. Every exercise's reference solution is parsed with Python's
own :mod:`ast`, changed in one place at a time by the operators below, and each changed
solution (a *mutant*) is run through the exercise's check, the cases kept for grading
included. A mutant the check rejects is *killed*; one it accepts *survives*. A survivor is
either a hole in the check (add a case that rejects it) or *equivalent*: it behaves like the
solution on every input the task admits. Equivalent mutants are listed in the exercise's own
file, ``equivalent_mutants={mutant id: one-line reason}``, and ``tests/test_mutation.py`` fails
when a survivor is not listed there, or when a listed mutant is killed (or no longer exists).

The operators: the generic ones a mutation tool applies, plus the mistakes that matter for hooks.

=================  ==================================================================================
operator           what it changes
=================  ==================================================================================
``hook-kind``      ``register_forward_hook`` <-> ``register_forward_pre_hook``, forward <-> full
                   backward, full backward <-> its pre-hook and the legacy ``register_backward_hook``,
                   ``register_hook`` <-> ``register_post_accumulate_grad_hook``
``no-hook``        a ``register_*hook*`` call attaches nothing (it returns a handle that removes nothing)
``no-remove``      a ``.remove()`` call is dropped
``no-finally``     ``try: A finally: B`` becomes ``A; B`` (the clean-up no longer runs on an error)
``copy``           ``.clone()`` dropped, ``.detach()`` dropped, ``.clone()`` -> ``.detach()``
``inplace``        ``x.mul_(y)`` <-> ``x.mul(y)`` (every in-place method), ``a += b`` -> ``a = a + b``
``grad-mode``      a ``with torch.no_grad():`` / ``inference_mode()`` / ``enable_grad()`` block loses
                   its ``with``
``number``         an integer constant n -> n + 1 and n - 1 (an index or a dim off by one); a float
                   constant c -> 2c
``compare``        ``<`` <-> ``<=``, ``>`` <-> ``>=``, ``==`` <-> ``!=``, ``is`` <-> ``is not``,
                   ``in`` <-> ``not in``
``logic``          ``and`` <-> ``or``, ``not x`` -> ``x``, ``True`` <-> ``False``
``arith``          ``+`` <-> ``-``, ``*`` <-> ``/``
``early-return``   ``return None`` inserted before a statement of the solution's body
``drop``           a statement that is a bare call (``model(x)``, ``calls.append(..)``) is dropped
``keep-state``     a local initialised to an empty container or a number is made once, outside
                   the function, so it is kept across calls
``first-result``   the whole answer returns what the solution returned on its first call, whatever
                   it is called with (a constant of a visible case hard-coded)
=================  ==================================================================================

Mutants of the *context* (``context`` below): the mistakes that pass every case change what the
solution does to its surroundings, not what it computes. Each wraps the reference, unchanged, so
that it does the wrong thing around it:

=========================  ===========================================================================
context mutant             what the wrapped reference does
=========================  ===========================================================================
``detach-result``          returns its result detached (no gradient to the layers before)
``float32-result``         casts every floating tensor of its result to float32
``eval-after``             leaves every module it was given in eval mode
``clear-callers-hooks``    clears the forward hooks that were on the modules before it ran
``no-grad``                runs under ``torch.no_grad()``
``inference-mode``         runs under ``torch.inference_mode()``
``add-buffer``             registers a buffer on the model it was given
``add-attribute``          sets an attribute on the model it was given
``grad-mode-off``          leaves the grad mode off (``torch.set_grad_enabled(False)``)
``default-dtype``          leaves the default dtype float64
``forward-not-call``       calls the model's ``.forward`` instead of the model (its own hooks skipped)
=========================  ===========================================================================

A context mutant that changed nothing in any call of the check (no tensor of the result had a
graph to detach, no module argument, no model called) is not applicable, and is counted neither
way; one that changed something and survives is a hole in the check, or listed as equivalent
(``equivalent_mutants["context: no-grad"] = "reason"``, one line in the exercise's file).

``python -m hooktutor mutants [KEY...]`` prints the kill rate per exercise (the context column: the
context mutants killed of those that applied) and lists the survivors; ``--code-only`` /
``--context-only`` run one kind, ``-v`` names the context mutants that did not apply.
Predictions have no solution to mutate (their truth is computed live) and are not mutated.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import functools
import inspect
import sys
import textwrap
import time
import warnings
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

# Each pair is swapped both ways; a name may appear in several pairs.
HOOK_KINDS = [
    ("register_forward_hook", "register_forward_pre_hook"),
    ("register_forward_hook", "register_full_backward_hook"),
    ("register_full_backward_hook", "register_full_backward_pre_hook"),
    ("register_full_backward_hook", "register_backward_hook"),
    ("register_hook", "register_post_accumulate_grad_hook"),
    ("register_step_post_hook", "register_step_pre_hook"),
    ("register_state_dict_pre_hook", "register_load_state_dict_post_hook"),
    ("register_load_state_dict_pre_hook", "register_load_state_dict_post_hook"),
]
GRAD_MODES = {"no_grad", "inference_mode", "enable_grad", "set_grad_enabled"}
COMPARE = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
           ast.NotEq: ast.Eq, ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In}
ARITH = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult}
MUTANT_TIME_LIMIT_S = 1.0


@dataclass
class Mutant:
    """One change to a solution. ``id`` is stable while the changed line stays the same:
    ``operator@line: before -> after`` (the line counted from the solution's first line)."""

    operator: str
    line: int
    before: str
    after: str
    build: Callable[[], Any]   # returns the mutated solution (function or class)

    applied: Callable[[], bool] | None = None   # a context mutant: whether it changed anything
    called: Callable[[], bool] | None = None    # a context mutant: whether the check called it here

    @property
    def id(self) -> str:
        if self.operator == "context":
            return f"context: {self.before}"
        return f"{self.operator}@{self.line}: {self.before} -> {self.after}"


class _NoHandle:
    """What a ``register_*hook*`` call returns in a ``no-hook`` mutant: a handle with nothing behind it."""

    id = -1

    def remove(self) -> None:
        pass

    def __enter__(self) -> _NoHandle:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass


def _snippet(node: ast.AST) -> str:
    text = ast.unparse(node).splitlines()
    one = text[0] + (" ..." if len(text) > 1 else "")
    return one if len(one) <= 70 else one[:67] + "..."


def _method_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr
    return None


# in-place methods whose swap is no arithmetic mistake (detach_ cuts the graph of the caller's tensor)
_NOT_ARITHMETIC = {"detach_", "requires_grad_", "share_memory_", "set_", "resize_", "resize_as_", "retain_grad_",
                   "type_", "storage_", "data_ptr_", "apply_", "map_", "record_stream_", "pin_memory_"}


def _inplace_pairs() -> set[str]:
    import torch
    return {name for name in dir(torch.Tensor)
            if name.endswith("_") and not name.startswith("_") and hasattr(torch.Tensor, name[:-1])
            and name not in _NOT_ARITHMETIC}


class _Site:
    """A change to apply to the node found at ``path`` (a list of (field, index) steps)."""

    def __init__(self, operator: str, path: list, before: str, after: str, apply: Callable[[ast.AST], Any],
                 line: int | None = None):
        self.operator, self.path, self.before, self.after, self.apply = operator, path, before, after, apply
        self.line = line


def _walk(node: ast.AST, path: list | None = None) -> Iterator[tuple[ast.AST, list]]:
    path = path or []
    yield node, path
    for field, value in ast.iter_fields(node):
        if isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, ast.AST):
                    yield from _walk(item, [*path, (field, i)])
        elif isinstance(value, ast.AST):
            yield from _walk(value, [*path, (field, None)])


def _resolve(root: ast.AST, path: list) -> tuple[ast.AST, Any, Any]:
    """The node at ``path``, its parent, and the (field, index) step that leads to it."""
    parent, node, step = None, root, None
    for field, index in path:
        parent, step = node, (field, index)
        value = getattr(node, field)
        node = value[index] if index is not None else value
    return node, parent, step


def _replace(parent: ast.AST, step: tuple, new: Any) -> None:
    field, index = step
    if index is None:
        setattr(parent, field, new)
    else:
        items = getattr(parent, field)
        if isinstance(new, list):
            items[index:index + 1] = new
        else:
            items[index] = new


def _sites(tree: ast.Module, inplace: set[str]) -> Iterator[_Site]:
    fn_defs = [n for n, _ in _walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    docstrings = {id(f.body[0]) for f in fn_defs + [n for n, _ in _walk(tree) if isinstance(n, ast.ClassDef)]
                  if f.body and isinstance(f.body[0], ast.Expr) and isinstance(f.body[0].value, ast.Constant)
                  and isinstance(f.body[0].value.value, str)}
    for node, path in _walk(tree):
        name = _method_name(node)
        # -- hooks ---------------------------------------------------------------------------
        if name is not None:
            for a, b in HOOK_KINDS:
                for old, new in ((a, b), (b, a)):
                    if name == old:
                        def swap(n, new=new):
                            n.func.attr = new
                        yield _Site("hook-kind", path, old, new, swap)
            if name.startswith("register_") and "hook" in name:
                def nohook(n, parent_step=None):
                    return ast.Call(func=ast.Name("__mutant_no_handle__", ast.Load()), args=[], keywords=[])
                yield _Site("no-hook", path, _snippet(node), "<a handle that removes nothing>", nohook)
            if name in {"clone", "detach"} and not node.args and not node.keywords:
                def drop_method(n):
                    return n.func.value
                yield _Site("copy", path, f".{name}()", "<dropped>", drop_method)
                if name == "clone":
                    def to_detach(n):
                        n.func.attr = "detach"
                    yield _Site("copy", path, ".clone()", ".detach()", to_detach)
            if name in inplace:
                def out_of_place(n, name=name):
                    n.func.attr = name[:-1]
                yield _Site("inplace", path, f".{name}(", f".{name[:-1]}(", out_of_place)
            elif f"{name}_" in inplace:
                def in_place(n, name=name):
                    n.func.attr = f"{name}_"
                yield _Site("inplace", path, f".{name}(", f".{name}_(", in_place)
        # -- statements ----------------------------------------------------------------------
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and id(node) not in docstrings:
            if _method_name(node.value) == "remove":
                yield _Site("no-remove", path, _snippet(node), "<dropped>", lambda n: ast.Pass())
            else:
                yield _Site("drop", path, _snippet(node), "<dropped>", lambda n: ast.Pass())
        if isinstance(node, ast.Try) and node.finalbody and not node.handlers:
            def no_finally(n):
                return [*n.body, *n.finalbody]
            yield _Site("no-finally", path, "try: ... finally: ...", "<the body, then the clean-up>", no_finally)
        if isinstance(node, ast.With) and len(node.items) == 1:
            call = node.items[0].context_expr
            func = call.func if isinstance(call, ast.Call) else None
            mode = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
            if mode in GRAD_MODES:
                yield _Site("grad-mode", path, f"with {mode}(...):", "<the body alone>", lambda n: list(n.body))
        if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            def spelled_out(n):
                return ast.Assign(targets=[ast.Name(n.target.id, ast.Store())],
                                  value=ast.BinOp(ast.Name(n.target.id, ast.Load()), n.op, n.value), lineno=n.lineno)
            yield _Site("inplace", path, _snippet(node), f"{node.target.id} = {node.target.id} "
                        f"{_snippet(ast.BinOp(ast.Name('a'), node.op, ast.Name('b')))[2:-2]} ...", spelled_out)
        # -- values --------------------------------------------------------------------------
        if isinstance(node, ast.Constant) and type(node.value) is int and id(node) not in docstrings:
            for delta in (1, -1):
                def shift(n, delta=delta):
                    n.value = n.value + delta
                yield _Site("number", path, repr(node.value), repr(node.value + delta), shift)
        if isinstance(node, ast.Constant) and type(node.value) is float:
            def double(n):
                n.value = n.value * 2 if n.value else 1.0
            yield _Site("number", path, repr(node.value), repr(node.value * 2 if node.value else 1.0), double)
        if isinstance(node, ast.Constant) and type(node.value) is bool:
            def flip(n):
                n.value = not n.value
            yield _Site("logic", path, repr(node.value), repr(not node.value), flip)
        if isinstance(node, ast.Compare):
            for i, op in enumerate(node.ops):
                if type(op) in COMPARE:
                    def compare(n, i=i):
                        n.ops[i] = COMPARE[type(n.ops[i])]()
                    after = copy.deepcopy(node)
                    after.ops[i] = COMPARE[type(op)]()
                    yield _Site("compare", path, _snippet(node), _snippet(after), compare)
        if isinstance(node, ast.BoolOp):
            def boolop(n):
                n.op = ast.Or() if isinstance(n.op, ast.And) else ast.And()
            yield _Site("logic", path, _snippet(node), "and <-> or", boolop)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            yield _Site("logic", path, _snippet(node), _snippet(node.operand), lambda n: n.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in ARITH:
            def arith(n):
                n.op = ARITH[type(n.op)]()
            after = copy.deepcopy(node)
            after.op = ARITH[type(node.op)]()
            yield _Site("arith", path, _snippet(node), _snippet(after), arith)
    # -- whole functions -------------------------------------------------------------------------
    for fn in fn_defs:
        fn_path = next(p for n, p in _walk(tree) if n is fn)
        for i, stmt in enumerate(fn.body):
            if id(stmt) in docstrings or isinstance(stmt, ast.Return):
                continue
            def early(n, i=i):
                n.body.insert(i, ast.Return(value=ast.Constant(None)))
            yield _Site("early-return", fn_path, f"{fn.name}: before `{_snippet(stmt)}`", "return None", early,
                        line=stmt.lineno)
        for i, stmt in enumerate(fn.body):
            # (not a list of handles: keeping removed handles across calls changes nothing)
            if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
                    and _is_fresh_state(stmt.value) and "handle" not in stmt.targets[0].id):
                var = stmt.targets[0].id

                def keep(n, i=i, var=var):
                    value = n.body[i].value
                    n.body[i] = ast.Assign(
                        targets=[ast.Name(var, ast.Store())],
                        value=ast.Call(ast.Attribute(ast.Name("__mutant_state__", ast.Load()), "setdefault",
                                                     ast.Load()), [ast.Constant(f"{n.name}.{var}"), value], []))
                yield _Site("keep-state", fn_path, f"{var} = {_snippet(stmt.value)} (a fresh one per call)",
                            f"{var} kept across calls", keep, line=stmt.lineno)


def _is_fresh_state(value: ast.AST) -> bool:
    if isinstance(value, (ast.List, ast.Dict, ast.Set)):
        return True
    if isinstance(value, ast.Constant) and type(value.value) in (int, float):
        return True
    if isinstance(value, (ast.ListComp, ast.DictComp)):
        return True
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in {
        "list", "dict", "set", "defaultdict", "OrderedDict"}


def solution_source(solution: Any) -> tuple[str, int]:
    """The solution's source, dedented, and the line of the file it starts on."""
    lines, start = inspect.getsourcelines(solution)
    return textwrap.dedent("".join(lines)), start


def mutants(solution: Any) -> list[Mutant]:
    """Every mutant of ``solution`` (a function or a class defined at the top of a module)."""
    source, _ = solution_source(solution)
    tree = ast.parse(source)
    name = tree.body[0].name
    module_globals = sys.modules[solution.__module__].__dict__
    found = []
    seen: set[str] = set()
    for site in _sites(tree, _inplace_pairs()):
        node, _, _ = _resolve(tree, site.path)
        line = site.line or getattr(node, "lineno", 1)

        def build(site=site) -> Any:
            mutated = copy.deepcopy(tree)
            target, parent, step = _resolve(mutated, site.path)
            new = site.apply(target)
            if new is not None:
                _replace(parent, step, new)
            ast.fix_missing_locations(mutated)
            namespace = dict(module_globals)
            namespace["__mutant_no_handle__"] = _NoHandle
            namespace["__mutant_state__"] = {}
            exec(compile(mutated, f"<mutant of {name}>", "exec"), namespace)   # noqa: S102 - our own code, mutated
            built = namespace[name]
            with contextlib.suppress(AttributeError, TypeError):   # for a check that runs an answer's source
                built.__hooktutor_source__ = ast.unparse(mutated)   # in other processes (08's comm hook)
            return built

        mutant = Mutant(site.operator, line, site.before, site.after, build)
        if mutant.id in seen:   # the same change reached twice (a node two operators share)
            continue
        seen.add(mutant.id)
        found.append(mutant)
    found.append(_first_result(solution))
    return found


def _first_result(solution: Any) -> Mutant:
    def build() -> Any:
        if isinstance(solution, type):
            return solution   # a class: no single result to hard-code
        first: list[Any] = []

        def answer(*args: Any, **kwargs: Any) -> Any:
            if not first:
                first.append(solution(*args, **kwargs))
            return first[0]
        answer.__name__ = solution.__name__
        return answer
    return Mutant("first-result", 1, "the solution", "what it returned on its first call, every time", build)


# -- mutants of the context -----------------------------------------------------------------------

def _map_tensors(value: Any, fn: Callable, depth: int = 0) -> Any:
    import torch
    if depth > 6:
        return value
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, list):
        return [_map_tensors(v, fn, depth + 1) for v in value]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_map_tensors(v, fn, depth + 1) for v in value)
    if type(value) is dict:
        return {k: _map_tensors(v, fn, depth + 1) for k, v in value.items()}
    return value


def _sees_grad():
    """A torch function mode that marks the tensors an operation made from a tensor that requires
    grad (or from a marked one): what would have had a graph outside ``no_grad``."""
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._pytree import tree_leaves

    class SeesGrad(TorchFunctionMode):
        def __init__(self) -> None:
            super().__init__()
            self.marked: dict[int, Any] = {}   # id -> a weak reference (an id is reused once freed)

        def has(self, t: Any) -> bool:
            ref = self.marked.get(id(t))
            return ref is not None and ref() is t

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            if getattr(func, "__name__", "") in ("detach", "detach_", "numel", "size", "dim"):
                return out   # (a detached copy has no graph with grad mode on either)
            if any(isinstance(a, torch.Tensor) and (a.requires_grad or self.has(a))
                   for a in tree_leaves((args, kwargs))):
                self.marked.update((id(t), weakref.ref(t)) for t in _leaves(out) if isinstance(t, torch.Tensor))
            return out
    return SeesGrad()


@contextlib.contextmanager
def _backward_calls():
    """Count the calls of torch.autograd.backward and torch.autograd.grad (Tensor.backward goes
    through the first) made while the block runs."""
    import torch
    calls: list[int] = []
    backward, grad = torch.autograd.backward, torch.autograd.grad

    def counted(fn):
        @functools.wraps(fn)
        def run(*a, **k):
            calls.append(1)
            return fn(*a, **k)
        return run
    torch.autograd.backward, torch.autograd.grad = counted(backward), counted(grad)
    try:
        yield calls
    finally:
        torch.autograd.backward, torch.autograd.grad = backward, grad


def _context(name: str, solution: Any, after: str, wrap: Callable[[Callable, tuple, dict, list], Any]) -> Mutant:
    applied: list[bool] = []
    calls: list[int] = []

    def build() -> Any:
        applied.clear()
        calls.clear()

        @functools.wraps(solution)
        def answer(*args: Any, **kwargs: Any) -> Any:
            calls.append(1)
            return wrap(solution, args, kwargs, applied)
        return answer
    return Mutant("context", 0, name, after, build, applied=lambda: bool(applied), called=lambda: bool(calls))


def context_mutants(solution: Any) -> list[Mutant]:
    """The mutants of the context of ``solution`` (a function): see the module's docstring."""
    import torch

    from hooktutor.exercises.variants import _roots

    def detach(fn, args, kwargs, applied):
        def cut(t):
            if t.requires_grad:
                applied.append(True)
                return t.detach()
            return t
        return _map_tensors(fn(*args, **kwargs), cut)

    def cast(fn, args, kwargs, applied):
        def to32(t):
            if t.is_floating_point() and t.dtype != torch.float32:
                applied.append(True)
                return t.float()
            return t
        return _map_tensors(fn(*args, **kwargs), to32)

    def eval_after(fn, args, kwargs, applied):
        try:
            return fn(*args, **kwargs)
        finally:
            for root in _roots((args, kwargs)):
                if any(m.training for m in root.modules()):
                    applied.append(True)
                root.eval()

    def clear_hooks(fn, args, kwargs, applied):
        before = [(m, d, list(getattr(m, d))) for root in _roots((args, kwargs)) for m in root.modules()
                  for d in ("_forward_hooks", "_forward_pre_hooks")]
        try:
            return fn(*args, **kwargs)
        finally:
            for m, d, keys in before:
                for key in keys:
                    if key in getattr(m, d):
                        applied.append(True)
                        del getattr(m, d)[key]

    def grad_mode(manager):
        # it applies where the grad mode matters to the solution: a backward runs in the call, or
        # a tensor of its result would have had a graph (or, for inference_mode, is a tensor made
        # in the call); registering hooks or returning detached copies under no_grad changes nothing
        def run(fn, args, kwargs, applied):
            sees = _sees_grad()
            with _backward_calls() as calls, manager(), sees:
                result = fn(*args, **kwargs)
            tensors = [t for t in _leaves(result) if isinstance(t, torch.Tensor)]
            if calls or any(sees.has(t) for t in tensors) or (
                    manager is torch.inference_mode and any(t.is_inference() for t in tensors)):
                applied.append(True)
            return result
        return run

    def add_buffer(fn, args, kwargs, applied):
        result = fn(*args, **kwargs)
        roots = _roots((args, kwargs))
        if roots and "mutant_buffer" not in dict(roots[0].named_buffers(recurse=False)):
            applied.append(True)
            roots[0].register_buffer("mutant_buffer", torch.zeros(1))
        return result

    def add_attribute(fn, args, kwargs, applied):
        result = fn(*args, **kwargs)
        roots = _roots((args, kwargs))
        if roots:
            applied.append(True)
            roots[0].mutant_note = "left by the answer"
        return result

    def left_global(flip, differs):
        def run(fn, args, kwargs, applied):
            result = fn(*args, **kwargs)
            if differs():
                applied.append(True)
                flip()
            return result
        return run

    from hooktutor.exercises.core import _codes
    own = _codes(solution)   # the solution's own calls of the model are the ones made .forward

    def forward_not_call(fn, args, kwargs, applied):
        roots = _roots((args, kwargs))
        swapped = []
        for root in roots:
            cls = root.__class__

            def call(self, *a, __cls=cls, **k):
                if sys._getframe(1).f_code not in own:   # the caller's run(), a case: as it was
                    return super(self.__class__, self).__call__(*a, **k)
                applied.append(True)
                return self.forward(*a, **k)
            try:
                root.__class__ = type(cls.__name__, (cls,), {"__call__": call, "__module__": cls.__module__})
                swapped.append((root, cls))
            except TypeError:
                pass
        try:
            return fn(*args, **kwargs)
        finally:
            for root, cls in swapped:
                root.__class__ = cls

    if isinstance(solution, type):
        return []
    return [
        _context("detach-result", solution, "its result detached", detach),
        _context("float32-result", solution, "its result cast to float32", cast),
        _context("eval-after", solution, "the modules left in eval mode", eval_after),
        _context("clear-callers-hooks", solution, "the caller's forward hooks cleared", clear_hooks),
        _context("no-grad", solution, "run under torch.no_grad()", grad_mode(torch.no_grad)),
        _context("inference-mode", solution, "run under torch.inference_mode()", grad_mode(torch.inference_mode)),
        _context("add-buffer", solution, "a buffer registered on the model", add_buffer),
        _context("add-attribute", solution, "an attribute set on the model", add_attribute),
        _context("grad-mode-off", solution, "the grad mode left off", left_global(
            lambda: torch.set_grad_enabled(False), torch.is_grad_enabled)),
        _context("default-dtype", solution, "the default dtype left float64", left_global(
            lambda: torch.set_default_dtype(torch.float64), lambda: torch.get_default_dtype() != torch.float64)),
        _context("forward-not-call", solution, "model.forward(x) called instead of model(x)", forward_not_call),
    ]


def _leaves(value: Any) -> list:
    from torch.utils._pytree import tree_leaves
    try:
        return tree_leaves(value)
    except Exception:   # noqa: BLE001
        return [value]


def _runs_elsewhere(exercise: Any, answer: Any, mutant: Mutant) -> bool:
    """True when the check's first case never calls ``answer`` in this process (a DDP or FSDP
    check sends the answer's source to new processes): a wrapper around the solution, which is
    what a context mutant is, then never runs, and the whole check would only run the solution."""
    if not exercise.cases:
        return False
    description, case = exercise.cases[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exercise._run_case(description, case, answer)
    return not mutant.called()


@dataclass
class Outcome:
    mutant: Mutant
    killed: bool
    verdict: str   # the report's title, or why the mutant could not be built
    applicable: bool = True   # a context mutant that changed nothing is not


def run(exercise: Any, only: set[str] | None = None, *, context: bool = True, code: bool = True) -> list[Outcome]:
    """Every mutant of ``exercise``'s solution through its check (all cases, kept ones included),
    then (``context=True``) every mutant of its context."""
    outcomes = []
    # a mutant that loops forever must not stall the run; an exercise whose cases start processes
    # (the DDP ones) sets a longer mutant_time_limit_s, so a loaded machine does not "kill" its mutants
    mutant_limit = getattr(exercise, "mutant_time_limit_s", MUTANT_TIME_LIMIT_S)
    limit, exercise.time_limit = exercise.time_limit, min(exercise.time_limit, mutant_limit)
    try:
        elsewhere = None
        todo = ((mutants(exercise._solution) if code else [])
                + (context_mutants(exercise._solution) if context else []))
        for mutant in todo:
            if only is not None and mutant.id not in only:
                continue
            if mutant.operator == "first-result" and isinstance(exercise._solution, type):
                continue
            try:
                answer = mutant.build()
            except Exception:   # a mutant Python refuses to compile is no mutant
                continue
            if mutant.operator == "context" and elsewhere is None:
                elsewhere = _runs_elsewhere(exercise, answer, mutant)   # a property of the check: once
                answer = mutant.build()   # afresh: what the probe applied is not counted
            if mutant.operator == "context" and elsewhere:
                outcomes.append(Outcome(mutant, False, "the check never calls the answer in this process "
                                        "(it runs the answer's source elsewhere)", applicable=False))
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")   # a mutant may use a deprecated hook
                report = exercise.check(answer, hidden=True)
            applicable = mutant.applied() if mutant.applied is not None else True
            outcomes.append(Outcome(mutant, not report.passed, report.text.splitlines()[0], applicable))
    finally:
        exercise.time_limit = limit
    return outcomes


@dataclass
class Score:
    key: str
    total: int
    killed: int
    equivalent: list[str]      # listed and surviving
    survivors: list[Outcome]   # surviving and not listed: holes in the check
    stale: list[str]           # listed but killed or gone
    context_killed: int = 0    # of the context mutants that applied
    context_total: int = 0
    not_applicable: tuple[str, ...] = ()   # context mutants that changed nothing

    @property
    def rate(self) -> float:
        """Killed over the mutants that are not equivalent."""
        denominator = self.total - len(self.equivalent)
        return self.killed / denominator if denominator else 1.0


def score(exercise: Any, *, context: bool = True, code: bool = True) -> Score:
    ran = run(exercise, context=context, code=code)
    outcomes = [o for o in ran if o.applicable]
    listed = {k: v for k, v in exercise.equivalent_mutants.items()
              if (k.startswith("context: ") and context) or (not k.startswith("context: ") and code)}
    in_context = [o for o in outcomes if o.mutant.operator == "context"]
    alive = {o.mutant.id: o for o in outcomes if not o.killed}
    return Score(
        key=exercise.key, total=len(outcomes), killed=sum(o.killed for o in outcomes),
        equivalent=sorted(set(alive) & set(listed)),
        survivors=[o for i, o in alive.items() if i not in listed],
        stale=sorted(set(listed) - set(alive)),
        context_killed=sum(o.killed for o in in_context), context_total=len(in_context),
        not_applicable=tuple(o.mutant.id for o in ran if not o.applicable),
    )


def mutable_exercises() -> dict[str, Any]:
    """Every exercise with a solution to mutate (predictions have none)."""
    from hooktutor.exercises import load_all
    return dict(sorted(load_all().items()))


def main(argv: list[str]) -> int:
    exercises = mutable_exercises()
    keys = [a for a in argv if not a.startswith("-")] or list(exercises)
    code, context = "--context-only" not in argv, "--code-only" not in argv
    unknown = [k for k in keys if k not in exercises]
    if unknown:
        print(f"no exercise called {', '.join(unknown)}; the exercises are: {', '.join(exercises)}", file=sys.stderr)
        return 2
    bad = 0
    start = time.perf_counter()
    print(f"{'exercise':<46}{'mutants':>8}{'killed':>8}{'equiv.':>8}{'rate':>8}{'context':>9}")
    for key in keys:
        s = score(exercises[key], context=context, code=code)
        print(f"{key:<46}{s.total:>8}{s.killed:>8}{len(s.equivalent):>8}{s.rate:>8.0%}"
              f"{f'{s.context_killed}/{s.context_total}':>9}")
        for o in s.survivors:
            print(f"    SURVIVES  {o.mutant.id}")
        for mutant_id in s.stale:
            print(f"    LISTED AS EQUIVALENT BUT KILLED OR GONE  {mutant_id}")
        if s.not_applicable and "-v" in argv:
            print(f"    not applicable (changed nothing): {', '.join(m[9:] for m in s.not_applicable)}")
        bad += bool(s.survivors or s.stale)
    print(f"{len(keys)} exercises in {time.perf_counter() - start:.1f} s; "
          f"{bad} with survivors or stale equivalents")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
