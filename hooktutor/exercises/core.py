"""The machinery of self-checking exercises.

A lesson's exercise cell holds the learner's function; the next cell calls
``ex.check(my_function)``. The check runs it on cases the learner does not see and
reports precisely: which case, what was expected, what came back, and a nudge toward the
idea. It never lets a learner's mistake escape as a traceback: an exception, an unfinished
``raise NotImplementedError`` stub, an endless loop (stopped by a time limit) and a hook
left attached are each reported kindly, and every hook the case attached is removed.

Authors write one :class:`Exercise` per task and register cases with :meth:`Exercise.case`;
each case gets a :class:`Tester` for comparisons and for tracking the models whose hooks
must be clean afterwards. ``wrong_answers`` list typical mistakes; the test suite proves
every check rejects them with a message that names the mistake.

Used by every lesson; see ``hooktutor/exercises/__init__.py`` for the list.
"""

from __future__ import annotations

import html
import inspect
import os
import signal
import sys
import sysconfig
import textwrap
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..i18n import N_, display_width, fmt, language, tr, wrap
from ..inventory import USER, global_hook_ids, list_hooks, remove_global_hooks, remove_row
from . import variants

TIME_LIMIT_S = 2.0
BEGIN_SOLUTION, END_SOLUTION = "### BEGIN SOLUTION", "### END SOLUTION"
REGISTRY: dict[str, "Exercise"] = {}

# The instructor's switch for a graded class: with HOOKTUTOR_SOLUTIONS=off in the kernel's
# environment (a JupyterHub spawner's environment, or the shell that runs nbgrader autograde),
# ex.<name>.solution() shows no solution; hints and checks work as before. docs/instructors.md.
SOLUTIONS_ENV = "HOOKTUTOR_SOLUTIONS"
_OFF = {"off", "0", "no", "false", "hidden"}


def solutions_available() -> bool:
    """False when the instructor switched solutions off (``HOOKTUTOR_SOLUTIONS=off``)."""
    return os.environ.get(SOLUTIONS_ENV, "on").strip().lower() not in _OFF


# The instructor's other switch: with HOOKTUTOR_HOLD_BACK=on, check() runs only the visible cases
# and keeps the others for nbgrader's autograde (grade(answer, hidden=True)), so a graded answer
# meets cases the learner's check never ran. Off by default: a learner studying alone gets every
# case, and is never told "correct" for an answer the package can prove wrong.
HOLD_BACK_ENV = "HOOKTUTOR_HOLD_BACK"
_ON = {"on", "1", "yes", "true"}


def cases_held_back() -> bool:
    """True when the instructor keeps the grading cases from ``check()`` (``HOOKTUTOR_HOLD_BACK=on``)."""
    return os.environ.get(HOLD_BACK_ENV, "off").strip().lower() in _ON


class SolutionsOff(PermissionError):
    """Raised by :attr:`Exercise.reference` when solutions are switched off for a graded class."""


class Mismatch(Exception):
    """Raised by a :class:`Tester` when the learner's answer gives the wrong result."""

    def __init__(self, what: str, expected: Any, got: Any, nudge: str):
        super().__init__(what)
        self.what, self.expected, self.got, self.nudge = what, expected, got, nudge


class TimeLimitExceeded(BaseException):
    """The learner's code ran longer than the exercise's time limit. A ``BaseException``, as
    ``KeyboardInterrupt`` is, so that an answer's own ``except Exception:`` (or a case's, around
    the answer's call) does not swallow it and go on."""


def _fmt(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        t = value.detach()
        if t.numel() > 12:
            return f"tensor of shape {tuple(t.shape)} (mean {float(t.float().mean()):.4g})"
        return repr(t).replace("\n", " ")
    if isinstance(value, str):
        return value
    if isinstance(value, torch.nn.Module):   # its repr lists every layer: the type says enough
        return f"a {type(value).__name__} (an nn.Module)"
    text = " ".join(repr(value).split())
    return text if len(text) <= 300 else text[:297] + "..."


# The hooks a Tester puts on every tracked model, standing for the caller's own hooks: an answer
# must leave them in place (it removes its own handles, never clears a model's hook dicts). The
# witnesses of the kit do not count them as the learner's.
CALLERS_HOOK_IDS: set[int] = set()


def learners_hooks(model: nn.Module, *, include_global: bool = False) -> list[Any]:
    """The rows of ``list_hooks(model)`` that an answer may have added: not PyTorch's own or a
    library's (transformers, accelerate, ...), not the caller's stand-ins that a Tester puts on a
    tracked model."""
    return [r for r in list_hooks(model, include_global=include_global)
            if r.owner == USER and r.handle_id not in CALLERS_HOOK_IDS]


def _callers_hook(module: nn.Module, args: tuple, output: Any) -> None:
    """A hook of the caller's on a tracked model (it does nothing)."""


class Tester:
    """Given to each case: compare results and track models whose hooks must end clean."""

    def __init__(self) -> None:
        self._tracked: list[tuple[str, nn.Module, set[int], list[Any]]] = []
        self._fired: dict[int, list[int]] = {}   # id(module) -> its calls made from the answer's code
        self.answer_codes: set = set()   # the answer's code, and the code defined in it
        self.root_check = True   # off where the exercise opts out of "callers_hooks"

    def track(self, model: nn.Module, name: str = "the model") -> nn.Module:
        """Remember ``model``'s hooks now; any hook added later and left on counts as a leak.

        Hooks PyTorch installs and the model needs (an answer that prunes the model, makes it
        lazy, ...: ``row.is_pytorch`` in ``list_hooks``) are not leaks and are left in place.
        Every module of the model also gets two hooks of the caller's (they do nothing), which the
        answer must leave alone (a case checks the model's state itself with ``kit.LeftAsFound``:
        a case may still set the model up after tracking it).
        """
        handles = [h for m in model.modules() for h in (m.register_forward_pre_hook(self._counting(m)),
                                                        m.register_forward_hook(_callers_hook))]
        CALLERS_HOOK_IDS.update(h.id for h in handles)
        before = {r.handle_id for r in list_hooks(model, include_global=False)}
        self._tracked.append((name, model, before, handles))
        return model

    def _counting(self, module: nn.Module) -> Callable:
        count = self._fired.setdefault(id(module), [0])

        def _callers_pre_hook(module: nn.Module, args: tuple) -> None:
            """A hook of the caller's on a tracked model (it counts the calls: a pre-hook fires also
            when the forward raises) that the answer's code made, directly or through the model."""
            frame = sys._getframe(1)
            while frame is not None and frame.f_code not in self.answer_codes:
                frame = frame.f_back
            if frame is not None:
                count[0] += 1
        return _callers_pre_hook

    def leaks(self) -> list[str]:
        """Describe and remove the hooks the learner added to tracked models since they were
        tracked (not those PyTorch or a library installed: they stay, as ``remove_hooks`` leaves
        them); take the caller's stand-in hooks off again."""
        found = []
        for name, model, before, handles in self._tracked:
            extra = [r for r in learners_hooks(model)   # (a model tracked twice has two sets)
                     if r.handle_id not in before]
            for r in extra:
                found.append(f"a {r.kind} hook ({r.function}) on {r.path} of {name}")
                remove_row(model, r)
            for h in handles:
                h.remove()
                CALLERS_HOOK_IDS.discard(h.id)
        return found

    def not_as_found(self) -> str | None:
        """A hook of the caller's that the answer removed from a tracked model, said."""
        for name, model, _, handles in self._tracked:
            present = {r.handle_id for r in list_hooks(model, include_global=False)}
            if any(h.id not in present for h in handles):
                return (f"your answer removed a hook it did not attach: one of the caller's, already on {name}. "
                        "Remove only the hooks you added, with their handles: not by clearing a module's "
                        "hook dicts (module._forward_hooks.clear() takes everybody's), nor with "
                        "remove_hooks(model)")
            inner = [m for m in model.modules() if m is not model]
            calls = self._fired.get
            if self.root_check and inner and calls(id(model), [0])[0] == 0 and any(calls(id(m), [0])[0] for m in inner):
                return (f"the layers of {name} ran, but the hooks of the model itself never fired: run it as "
                        "model(x); model.forward(x) (or a copy of the model) skips the hooks registered on "
                        "the model itself, and the caller's must still fire")
        return None

    def expect(self, ok: bool, *, what: str, expected: Any, got: Any, nudge: str) -> None:
        if not ok:
            raise Mismatch(what, expected, got, nudge)

    def expect_type(self, got: Any, types: type | tuple[type, ...], *, what: str, nudge: str = "") -> None:
        """``got`` must be an instance of ``types``: call this before a check uses ``got``, so
        that an answer returning the wrong kind of thing (None, a list for a dict, a float for a
        tensor) gets a message that says so instead of a crash inside the check."""
        if isinstance(got, types):
            return
        names = " or ".join(variants.article(t.__name__) for t in (types if isinstance(types, tuple) else (types,)))
        said = "None (nothing was returned)" if got is None else variants.article(type(got).__name__)
        nudge = nudge[:1].upper() + nudge[1:]
        raise Mismatch(what, names, got, f"{what} is {said}, but should be {names}. {nudge}".strip())

    def expect_close(self, got: Any, expected: torch.Tensor, *, what: str, nudge: str,
                     atol: float = 1e-5, rtol: float = 1e-4, wrong: dict[str, tuple[Any, str]] | None = None
                     ) -> None:
        """``got`` must be a tensor equal to ``expected`` (shape and values).

        ``wrong`` maps a label to ``(tensor, nudge)`` for results a typical mistake gives:
        when ``got`` equals one of them, that mistake's nudge is reported instead.
        """
        if not isinstance(got, torch.Tensor):
            raise Mismatch(what, expected, got, nudge if got is not None else
                           f"{what} is None: nothing was stored or returned. {nudge}")
        if got.shape != expected.shape:
            raise Mismatch(what, expected, got, f"the shape is {tuple(got.shape)} but should be "
                                                f"{tuple(expected.shape)}. {nudge}")
        if _close(got, expected, atol, rtol):
            return
        for value, special in (wrong or {}).values():
            if isinstance(value, torch.Tensor) and value.shape == got.shape and _close(got, value, atol, rtol):
                raise Mismatch(what, expected, got, special)
        raise Mismatch(what, expected, got, nudge)


def _close(got: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float) -> bool:
    """allclose in the wider of the two dtypes (float32 at least): a float64 case's tight
    tolerance must not be lost to a comparison in float32."""
    common = torch.promote_types(got.dtype, expected.dtype)
    if not common.is_floating_point or torch.finfo(common).bits < 32:
        common = torch.float32
    return torch.allclose(got.detach().to(common), expected.detach().to(common), atol=atol, rtol=rtol)


@dataclass
class CaseResult:
    description: str
    status: str  # "pass", "mismatch", "error", "unusable", "unfinished", "timeout", "leak"
    detail: dict[str, str] = field(default_factory=dict)
    kept_for_grading: bool = False   # a case the nbgrader course keeps hidden: never shown


# the labels of a report's lines, translated where they are shown (CheckReport.text keeps them English)
LABELS = (N_("case"), N_("checked"), N_("expected"), N_("got"), N_("error"), N_("why"), N_("also"), N_("next"),
          N_("you said"), N_("torch"))


class CheckReport:
    """The outcome of ``Exercise.check``: ``bool(report)`` / ``report.passed`` says whether
    every case passed; it prints (and renders in HTML) what went wrong and why."""

    def __init__(self, exercise: "Exercise", results: list[CaseResult], note: str = "", total: int | None = None):
        self.exercise = exercise
        self.results = results
        self.note = note
        self.total = len(results) if total is None else total   # the cases there were to run

    @property
    def passed(self) -> bool:
        return bool(self.results) and all(r.status == "pass" for r in self.results) and not self.note

    def __bool__(self) -> bool:
        return self.passed

    @property
    def failure(self) -> CaseResult | None:
        return next((r for r in self.results if r.status != "pass"), None)

    @property
    def text(self) -> str:
        """The whole report on unwrapped lines (what tests search for a phrase)."""
        return "\n".join(text if key == "title" else f"{key}: {text}" for key, text in self._lines())

    def _lines(self) -> list[tuple[str, str]]:
        ex = self.exercise
        n = self.total
        title = tr(ex.title)
        if self.passed:
            return [("title", fmt("✔ {title}: correct, all {n} checks pass.", title=title, n=n))]
        if self.note and not self.results:
            return [("title", fmt("✘ {title}: not checked.", title=title)), ("why", tr(self.note))]
        bad = self.failure
        lines: list[tuple[str, str]] = []
        if bad is None:  # all cases passed but something else (a global hook) was wrong
            lines.append(("title", fmt("✘ {title}: the results are right, but {note}", title=title,
                                       note=tr(self.note))))
            return lines
        index = self.results.index(bad) + 1
        headline = {
            "mismatch": N_("gives a wrong result"),
            "error": N_("raised an error"),
            "unusable": N_("gave the check something it cannot use"),
            "unfinished": N_("is not written yet"),
            "timeout": N_("did not finish in time"),
            "leak": N_("left a hook attached"),
        }[bad.status]
        lines.append(("title", fmt("✘ {title}: your answer {headline} (check {index} of {n}).", title=title,
                                   headline=tr(headline), index=index, n=n)))
        if bad.kept_for_grading:
            # what kind of mistake, never the case itself: the graded course keeps it hidden
            lines.append(("case", tr("one of the cases kept for grading (its details are not shown)")))
            shown_keys: tuple[str, ...] = ("error", "why")
        else:
            lines.append(("case", tr(bad.description)))
            shown_keys = ("checked", "expected", "got", "error", "why")
        for key in shown_keys:
            if key in bad.detail:
                lines.append((key, bad.detail[key] if key == "error" else tr(bad.detail[key])))
        if self.note:
            lines.append(("also", tr(self.note)))
        lines.append(("next", fmt("fix your answer and run the check again; {steps}", steps=next_steps(ex))))
        # each line of advice reads as a sentence
        # (in English: a Chinese sentence has no capitals, and one that starts with code keeps it as written)
        if language() != "en":
            return lines
        return [(k, t[:1].upper() + t[1:] if k in ("why", "next", "also") else t) for k, t in lines]

    def __repr__(self) -> str:
        out = []
        for key, text in self._lines():
            if key == "title":
                out.append(text)
            else:
                label = tr(key) + ":"
                label += " " * max(10 - display_width(label), 1)
                wrapped = textwrap.fill(text, width=88, initial_indent="", subsequent_indent=" " * 12) \
                    if label == f"{key + ':':<10}" else wrap(text, 88, subsequent_indent=" " * 12)
                out.append(f"  {label}{wrapped}")
        return "\n".join(out)

    def _repr_html_(self) -> str:
        color = "#1b7f3b" if self.passed else "#b3261e"
        rows = []
        for key, text in self._lines():
            if key == "title":
                rows.append(f"<div style='font-weight:bold;color:{color}'>{html.escape(text)}</div>")
            else:
                # a row per line: the label in its own column, so a wrapped line stays right of it
                rows.append(f"<div style='display:flex'><span style='flex:0 0 6em;color:#555'>{tr(key)}</span>"
                            f"<span style='flex:1 1 auto'>{html.escape(text)}</span></div>")
        return (f"<div class='hooktutor-check' style='border-left:4px solid {color};padding:4px 8px'>"
                + "".join(rows) + "</div>")


def command_name(exercise: "Exercise") -> str:
    """How a lesson names the exercise: ``ex.count_calls`` (the one source for the commands that
    hints and reports tell the learner to type)."""
    return f"ex.{exercise.key.rsplit('.', 1)[-1]}"


def next_steps(exercise: "Exercise") -> str:
    name = command_name(exercise)
    if solutions_available():
        return fmt("{name}.hint() gives a hint, {name}.solution() shows a solution", name=name)
    return fmt("{name}.hint() gives a hint", name=name)


class _Text:
    """A block of text that shows the same in a terminal, in Lab and under nbval.

    Prose (``prose=True``: a hint, a message) is wrapped between words, at 88 characters in a
    terminal and at the page's width in Lab; code (a solution) keeps its lines."""

    def __init__(self, text: str, css: str = "hooktutor-text", *, prose: bool = False):
        self.text, self.css, self.prose = text, css, prose

    def __repr__(self) -> str:
        if not self.prose:
            return self.text
        return "\n".join(wrap(p, 88) for p in self.text.split("\n"))

    def _repr_html_(self) -> str:
        if self.prose:   # wrapped by the browser between words, never inside one
            return (f"<div class='{self.css}' style='white-space:pre-wrap;word-break:normal;"
                    f"overflow-wrap:normal;font-family:var(--jp-code-font-family,monospace)'>"
                    f"{html.escape(self.text)}</div>")
        return f"<pre class='{self.css}'>{html.escape(self.text)}</pre>"


class _Deadline:
    """Stop the learner's code after ``seconds`` of CPU time of this process (``ITIMER_PROF``: a
    busy machine slows the wall clock, not the CPU time the answer uses), with a wall-clock
    backstop (``ITIMER_REAL``, ``wall`` seconds) that only a hang trips: code that waits without
    computing. Where signals cannot be used (not the main thread), a trace that reads the
    process's CPU time.

    A limit is never lost: the signal's exception can land where Python swallows it (a weakref
    callback or ``__del__`` during garbage collection, or the learner's own bare ``except:``),
    so once expired the limit raises again every ``REPEAT`` seconds until the block is left (the
    check's own clean-up after the exception takes milliseconds), and a block that completes
    after swallowing it raises at its end. Swallowed copies are not printed as 'Exception ignored'.
    """

    REPEAT = 0.5

    def __init__(self, seconds: float, wall: float | None = None):
        self.seconds = seconds
        self.wall = wall if wall is not None else wall_backstop(seconds)
        self._use_signal = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
        self.expired: str | None = None

    def _raise(self, signum: int, *_: Any) -> None:
        self.expired = self.expired or ("wall" if signum == signal.SIGALRM else "cpu")
        signal.setitimer(signal.ITIMER_REAL, self.REPEAT)   # again, should this one be swallowed
        raise TimeLimitExceeded(self.expired)

    def _unraisable(self, info: Any) -> None:
        if not isinstance(info.exc_value, TimeLimitExceeded):
            self._old_unraisable(info)

    def __enter__(self) -> "_Deadline":
        if self._use_signal:
            self._old = signal.signal(signal.SIGALRM, self._raise)
            self._old_prof = signal.signal(signal.SIGPROF, self._raise)
            self._old_unraisable, sys.unraisablehook = sys.unraisablehook, self._unraisable
            signal.setitimer(signal.ITIMER_PROF, self.seconds)
            signal.setitimer(signal.ITIMER_REAL, self.wall)
        else:
            end, wall_end = time.process_time() + self.seconds, time.monotonic() + self.wall
            self._old_trace = sys.gettrace()

            def tracer(frame: Any, event: str, arg: Any) -> Any:
                if time.process_time() > end:
                    self.expired = self.expired or "cpu"
                if time.monotonic() > wall_end:
                    self.expired = self.expired or "wall"
                if self.expired:
                    raise TimeLimitExceeded(self.expired)
                return tracer
            sys.settrace(tracer)
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if self._use_signal:
            signal.setitimer(signal.ITIMER_PROF, 0)
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._old)
            signal.signal(signal.SIGPROF, self._old_prof)
            sys.unraisablehook = self._old_unraisable
        else:
            sys.settrace(self._old_trace)
        if self.expired and exc_type is None:   # the code caught the limit and went on to the end
            raise TimeLimitExceeded(self.expired)


def wall_backstop(seconds: float) -> float:
    """The wall-clock limit beside a CPU-time limit: far beyond what a loaded machine adds."""
    return max(30.0, 5 * seconds)


Case = Callable[[Callable, Tester], None]


def _no_case(answer: Callable, t: Tester) -> None:
    """Stands for the case in a variant's report (the variants run the call themselves)."""


def _timeout(description: str, limit: float, kind: str) -> CaseResult:
    if kind == "wall":
        why = (f"it waited {wall_backstop(limit):g} s without finishing (and without computing): look for "
               "something that waits forever, a lock, a queue, a process that never answers (the kernel is fine)")
    else:
        why = (f"it was stopped after {limit:.2g} s of computing, twice (once more after a warm-up, in case a "
               "first call was loading something); look for a loop that never ends (the kernel is fine)")
    return CaseResult(description, "timeout", {"why": why, "kind": kind})


_INFRASTRUCTURE = tuple(str(Path(p).resolve()) for p in (
    Path(__file__).resolve().parent.parent,              # hooktutor itself: the checks
    Path(torch.__file__).resolve().parent,               # torch
    sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"],
))


def _codes(fn: Any) -> set:
    """The code objects of ``fn`` and of everything defined inside it (its hooks, its lambdas)."""
    if isinstance(fn, type):   # an answer that is a class: the code of each of its methods
        todo = [getattr(getattr(m, "__func__", m), "__code__", None) for m in vars(fn).values()]
        return set().union(*(_codes_of(c) for c in todo if c is not None))
    return _codes_of(getattr(getattr(fn, "__func__", fn), "__code__", None))


def _codes_of(first: Any) -> set:
    codes, todo = set(), [first]
    while todo:
        code = todo.pop()
        if code is None or code in codes:
            continue
        codes.add(code)
        todo.extend(c for c in code.co_consts if inspect.iscode(c))
    return codes


def _raised_in_learner_code(error: BaseException, answer: Any, case: Any) -> bool:
    """Whether the traceback passes through the learner's code: the answer, a function it
    defined (a hook that fired later), or any code outside the case, hooktutor, torch and the
    standard library (a helper from another notebook cell). Otherwise the check itself failed
    on what the answer gave back."""
    mine, checks = _codes(answer), _codes(case)
    tb = error.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code in mine:
            return True
        if code in checks:
            tb = tb.tb_next
            continue
        filename = str(Path(code.co_filename).resolve()) if not code.co_filename.startswith("<") else ""
        if filename and not filename.startswith(_INFRASTRUCTURE) and filename != str(Path(__file__).resolve()):
            return True
        if code.co_filename.startswith("<") and code.co_filename not in ("<string>", "<frozen importlib._bootstrap>"):
            return True   # an interactive cell (<ipython-input-...>, <stdin>)
        tb = tb.tb_next
    return False


def _crash_nudge(error: BaseException) -> str:
    message = str(error)
    if "NoneType" in message:
        return ("something your answer should have produced is None: a function that returns nothing, "
                "a hook that stored nothing, or a .grad that backward() never filled (a detach() or a "
                "no_grad() on the way cuts the graph).")
    if isinstance(error, NotImplementedError):   # torch has no kernel for that kind of tensor
        return ("torch cannot run an operation the check needs on what your answer gave back (the error names "
                "the operation and the kind of tensor, e.g. a sparse or a quantized one): return ordinary dense "
                "tensors, as the task asks.")
    if isinstance(error, (TypeError, AttributeError, KeyError, IndexError, ValueError)):
        return ("the check could not use what your answer gave back or left behind: compare its type "
                "and shape with what the task asks for.")
    return "the check could not use what your answer gave back or left behind; the task says what it expects."


class Exercise:
    """One task: its cases, hints, solution and the typical wrong answers it must reject.

    In a lesson::

        from hooktutor.exercises import tensor_hooks as ex
        ex.double_grad.check(my_hook)     # runs the hidden cases, reports
        ex.double_grad.hint()             # the next hint; hint(2) for hint 2
        ex.double_grad.solution()         # a solution, only when asked
    """

    registry: dict[str, "Exercise"] = REGISTRY   # where instances are listed (predictions: their own)

    def __init__(self, key: str, title: str, *, task: str, hints: list[str], solution: Callable,
                 time_limit: float = TIME_LIMIT_S, errors: dict[str, str] | None = None,
                 answer_name: str | None = None, guide: str = "",
                 equivalent_mutants: dict[str, str] | None = None, not_varied: dict[str, str] | None = None):
        if key in self.registry:
            raise ValueError(f"an exercise called {key!r} exists already")
        self.key, self.title, self.task = key, title, task
        # the instructors' guide entry: the mistakes learners make here (docs/instructors.md is
        # generated from it) and the mutants of the solution that are equivalent to it, each with
        # the reason (hooktutor.course.mutation; a test keeps the list exact)
        self.guide = " ".join(guide.split())
        self.equivalent_mutants = dict(equivalent_mutants or {})
        # the variants of the first visible case (hooktutor.exercises.variants) this exercise is not
        # run in, or the aspects not compared, each with its reason: exercise.not_varied["eval"] = "..."
        self.not_varied = dict(not_varied or {})
        self.hints = list(hints)
        self._solution = solution
        self.time_limit = time_limit
        self.answer_name = answer_name or key.rsplit(".", 1)[-1]
        self.errors = dict(errors or {})
        self.cases: list[tuple[str, Case]] = []
        self.hidden_cases: list[tuple[str, Case]] = []
        self.wrong_answers: list[tuple[str, Callable, str]] = []
        self.hidden_wrong_answers: list[tuple[str, Callable, str]] = []
        self.wrong_since: dict[str, str] = {}   # label -> claim id: wrong only where that claim holds
        self.right_answers: list[tuple[str, Callable]] = []   # right alternatives: each must pass
        self._reference_cpu: dict[int, float] = {}   # case -> CPU seconds of the reference, warmed up
        self._next_hint = 0
        self.registry[key] = self

    # -- authoring --------------------------------------------------------------------
    def case(self, description: str, *, hidden: bool = False) -> Callable[[Case], Case]:
        """Decorator: register ``fn(answer, tester)`` as a case the learner does not see.

        ``hidden=True``: a case kept for grading. :meth:`check` runs it like the others, but a
        failure there says what kind of mistake was found without showing the case; with the
        instructor's switch ``HOOKTUTOR_HOLD_BACK=on`` only ``grade(answer, hidden=True)`` (the
        hidden tests of the nbgrader course, at autograde) runs it."""
        def register(fn: Case) -> Case:
            (self.hidden_cases if hidden else self.cases).append((description, fn))
            return fn
        return register

    def wrong(self, label: str, mentions: str, *, hidden: bool = False,
              since: str | None = None) -> Callable[[Callable], Callable]:
        """Decorator: a typical wrong answer; its report must fail and contain ``mentions``.

        ``hidden=True``: a wrong answer that passes the visible cases and that only the cases kept
        for grading reject (``check(answer)`` runs those too, unless they are held back).
        ``since``: the id of a claim in ``hooktutor/course/claims.py``; the answer is wrong only on
        the torch releases that show that claim's new behaviour (the tests skip it elsewhere)."""
        def register(fn: Callable) -> Callable:
            (self.hidden_wrong_answers if hidden else self.wrong_answers).append((label, fn, mentions))
            if since:
                self.wrong_since[label] = since
            return fn
        return register

    def right(self, label: str) -> Callable[[Callable], Callable]:
        """Decorator: a right answer other than the solution (another technique, another library
        call); the tests prove it passes every case and every variant, on a loaded machine too."""
        def register(fn: Callable) -> Callable:
            self.right_answers.append((label, fn))
            return fn
        return register

    @property
    def reference(self) -> Callable:
        """The solution function itself (for tests and tooling); refused while solutions are
        switched off for a graded class (``HOOKTUTOR_SOLUTIONS=off``)."""
        if not solutions_available():
            raise SolutionsOff(f"solutions are switched off for this course ({SOLUTIONS_ENV}=off)")
        return self._solution

    # -- for the learner -----------------------------------------------------------------
    def check(self, answer: Any, *, hidden: bool | None = None) -> CheckReport:
        """Run ``answer`` against every case and report what went right or wrong.

        The cases kept for grading run too, unless the instructor holds them back
        (``HOOKTUTOR_HOLD_BACK=on``); ``hidden=True`` / ``False`` forces them in or out."""
        if hidden is None:
            hidden = not cases_held_back()
        if answer is None or not callable(answer):
            got = "None" if answer is None else f"a {type(answer).__name__}"
            return CheckReport(self, [], note=(
                f"check() needs your function itself, got {got}. Write check(my_function), "
                "without parentheses after my_function."))
        globals_before = global_hook_ids()
        results: list[CaseResult] = []
        threads, dtype = torch.get_num_threads(), torch.get_default_dtype()
        torch.set_num_threads(1)  # the cases are tiny: one thread is fastest and steadiest
        # the cases build their models and inputs in float32 (the float64 variant varies it): a
        # default dtype the learner's notebook set is the notebook's, and is put back after
        torch.set_default_dtype(torch.float32)
        try:
            todo = [(d, c, False) for d, c in self.cases]
            todo += [(d, c, True) for d, c in self.hidden_cases] if hidden else []
            for description, case, kept in todo:
                result = self._run_case(description, case, answer)
                result.kept_for_grading = kept
                results.append(result)
                if result.status != "pass":
                    break
            else:
                varied = self._run_variants(answer)
                if varied is not None:
                    results.append(varied)
                    todo.append(("", None, False))
        finally:
            torch.set_num_threads(threads)
            torch.set_default_dtype(dtype)
        note = ""
        leaked = global_hook_ids() - globals_before
        if leaked:
            remove_global_hooks(only=leaked)
            note = (f"{len(leaked)} global module hook(s) stayed registered; they fire for every "
                    "model in the notebook. Remove them with handle.remove() (it has been done for you).")
        return CheckReport(self, results, note, total=len(todo))

    def grade(self, answer: Any, *, hidden: bool | None = None) -> None:
        """Show the same report as :meth:`check`, and fail the cell unless the answer passes.

        The student edition's check cells call this, so nbgrader can score them: an unfinished
        answer raises ``NotImplementedError``, a wrong one ``AssertionError``, after the report.
        The nbgrader course's hidden tests call ``grade(answer, hidden=True)``: the hidden cases too.
        """
        report = self.check(answer, hidden=hidden)
        try:
            from IPython.display import display
            display(report)
        except ImportError:  # outside Jupyter
            print(repr(report))
        if report.passed:
            return
        bad = report.failure
        if bad is not None and bad.status == "unfinished":
            raise NotImplementedError(f"{self.title}: not written yet (see the report above)")
        raise AssertionError(f"{self.title}: not solved yet (see the report above)")

    def _run_case(self, description: str, case: Case, answer: Callable) -> CaseResult:
        settings = variants.global_settings()
        try:
            result = self._run_case_once(description, case, answer, self.time_limit)
            if result.status == "timeout" and result.detail.get("kind") != "wall":
                # a first call that loads a kernel or imports a module is no endless loop: warm up
                # with the reference, then give the answer one more run, with a limit relative to
                # the reference's CPU time (the floor: the exercise's own limit)
                limit = max(self.time_limit, 10 * self._reference_seconds(case) + 0.5)
                result = self._run_case_once(description, case, answer, limit)
        finally:
            after = variants.global_settings()
            variants.restore_globals(settings)
        changed = variants.globals_changed(settings, after)
        if changed is not None and result.status == "pass" and "globals" not in self.not_varied:
            name, before, now = changed
            return CaseResult(description, "mismatch", {
                "checked": name, "expected": repr(before), "got": repr(now),
                "why": variants.globals_nudge(name, before, now)})
        result.detail.pop("kind", None)
        return result

    def _reference_seconds(self, case: Case) -> float:
        """The CPU time of the reference on ``case``, run twice (the first run warms up)."""
        key = id(case)
        if key not in self._reference_cpu:
            spent = 60.0
            for _ in range(2):
                start = time.process_time()
                outcome = self._run_case_once("", case, self._solution, 60.0)
                spent = time.process_time() - start if outcome.status == "pass" else 60.0
            self._reference_cpu[key] = spent
        return self._reference_cpu[key]

    def _run_case_once(self, description: str, case: Case, answer: Callable, limit: float) -> CaseResult:
        tester = Tester()
        tester.answer_codes = _codes(answer)
        tester.root_check = not {"callers_hooks", "all"} & set(self.not_varied)
        try:
            with _Deadline(limit):
                case(answer, tester)
        except Mismatch as m:
            tester.leaks()
            return CaseResult(description, "mismatch", {
                "checked": m.what, "expected": _fmt(m.expected), "got": _fmt(m.got), "why": m.nudge})
        except TimeLimitExceeded as e:
            tester.leaks()
            return _timeout(description, limit, str(e))
        except NotImplementedError as e:
            tester.leaks()
            if not _raised_in_learner_code(e, answer, case):
                # not the stub: torch, in the check, on what the answer returned (a sparse tensor)
                return self._crashed(description, e, answer, case)
            return CaseResult(description, "unfinished", {"why": (
                "your function still raises NotImplementedError. Replace the `raise "
                "NotImplementedError(...)` line with your code"
                + (f" ({e})" if str(e) and "write your answer here" not in str(e) else "") + ".")})
        except Exception as e:  # reported instead of a traceback
            tester.leaks()
            return self._crashed(description, e, answer, case)
        changed = tester.not_as_found()
        leaks = tester.leaks()
        if changed is not None:
            return CaseResult(description, "mismatch", {"checked": "what your answer left on the model",
                                                        "expected": "the model as it was given",
                                                        "got": "something changed", "why": changed})
        if leaks:
            return CaseResult(description, "leak", {"why": (
                f"after your code ran, {leaks[0]} was still attached"
                + (f" (and {len(leaks) - 1} more)" if len(leaks) > 1 else "")
                + ". Hooks stay until removed: keep the handle and call handle.remove() in a "
                  "`finally:` (it has been removed for you).")})
        return CaseResult(description, "pass")

    def _run_variants(self, answer: Callable) -> CaseResult | None:
        """The first visible case's call again, in the variants of its surroundings
        (:mod:`hooktutor.exercises.variants`): None when the answer behaves as the reference does."""
        def run_case(case: Case, fn: Callable) -> None:
            tester = Tester()
            try:
                with _Deadline(max(self.time_limit, 10.0)):
                    case(fn, tester)
            except variants.Recorded:
                pass
            finally:
                tester.leaks()

        def deadline() -> _Deadline:
            return _Deadline(self.time_limit)
        try:
            found = variants.run_variants(self, answer, CALLERS_HOOK_IDS, run_case, deadline)
        except (Exception, TimeLimitExceeded):   # the recording run over time too: no verdict from variants
            if variants.STRICT:
                raise
            return None
        if found is None:
            return None
        variant, what = found
        description = variants.VARIANTS[variant]
        if isinstance(what, variants.Difference):
            return CaseResult(description, "mismatch", {
                "checked": what.what, "expected": _fmt(what.expected), "got": _fmt(what.got), "why": what.nudge})
        if isinstance(what, TimeLimitExceeded):
            return _timeout(description, self.time_limit, str(what))
        if isinstance(what, Exception):
            result = self._crashed(description, what, answer, _no_case)
            if variant in ("float64", "bfloat16") and result.status == "error":
                result.detail["why"] = (f"your answer fails when the model and its inputs are in {variant}: "
                                        "make every tensor of your own in their dtype (torch.zeros_like, "
                                        "x.new_zeros, .to(x.dtype))")
            return result
        return CaseResult(description, "error", {"error": type(what).__name__, "why": "read the error"})

    def _crashed(self, description: str, e: Exception, answer: Callable, case: Case) -> CaseResult:
        """An error, said: the answer's own ("raised an error"), or the check's on what the answer gave it."""
        text = f"{type(e).__name__}: {e}".strip().splitlines()[0][:300]
        why = next((nudge for pattern, nudge in self.errors.items() if pattern in str(e)), None)
        if self._called_wrongly(e, answer):   # the call never reached the answer's first line
            return CaseResult(description, "error", {"error": text, "why": (
                f"your function's parameters do not match how the check calls it. The task's answer "
                f"starts `{self.signature_line()}`: give yours the same parameters, in that order"
                + (f" ({why})." if why else "."))})
        if _raised_in_learner_code(e, answer, case):
            return CaseResult(description, "error", {"error": text, "why": why or (
                "read the error: it names what went wrong; the hints help if you are stuck.")})
        # the answer ran, but the check tripped over what it returned or left behind
        return CaseResult(description, "unusable", {"error": text, "why": why or _crash_nudge(e)})

    def signature_line(self) -> str:
        """The first line of the answer the task asks for: ``def count_calls(model, x, layer):``."""
        try:
            params = str(inspect.signature(self._solution))
        except (TypeError, ValueError):
            params = "(...)"
        keyword = "class" if isinstance(self._solution, type) else "def"
        return f"{keyword} {self.answer_name}{'' if keyword == 'class' else params}:"

    @staticmethod
    def _called_wrongly(error: Exception, answer: Any) -> bool:
        """A TypeError of Python's own binding of the call's arguments to the answer's parameters
        (``f() takes 2 positional arguments but 3 were given``, ``got an unexpected keyword
        argument``, ``missing 1 required positional argument``): raised before its code ran."""
        if not isinstance(error, TypeError) or isinstance(answer, type):
            return False
        name = getattr(answer, "__name__", None)
        message = str(error)
        binding = ("positional argument", "keyword argument", "required positional", "required keyword")
        if not name or not any(b in message for b in binding):
            return False
        qualname = getattr(answer, "__qualname__", name)
        if not message.startswith((f"{name}()", f"{qualname}()")):
            return False
        tb = error.__traceback__   # the answer's own frame is not on the traceback: it never started
        while tb is not None:
            if tb.tb_frame.f_code is getattr(answer, "__code__", None):
                return False
            tb = tb.tb_next
        return True

    def hint(self, number: int | None = None) -> _Text:
        """The next hint (``hint()``), or hint ``number`` (1-based) again."""
        title = tr(self.title)
        if not self.hints:
            return _Text(fmt("{title}: no hints for this one.", title=title))
        if number is None:
            number = min(self._next_hint, len(self.hints) - 1) + 1
            self._next_hint = min(self._next_hint + 1, len(self.hints))
        if not 1 <= number <= len(self.hints):
            return _Text(fmt("{title} has hints 1 to {n}; there is no hint {number}.", title=title,
                             n=len(self.hints), number=number))
        last = fmt("that was the last hint; {name}.solution() shows a solution", name=command_name(self)) \
            if solutions_available() else fmt("that was the last hint")
        more = f" ({last})" if number == len(self.hints) else ""
        return _Text(fmt("Hint {number} of {n} for {title}: {hint}{more}", number=number, n=len(self.hints),
                         title=title, hint=tr(self.hints[number - 1]), more=more), "hooktutor-hint", prose=True)

    def solution(self) -> _Text:
        """A solution, shown only when asked for (and not at all while the instructor has
        switched solutions off: ``HOOKTUTOR_SOLUTIONS=off``; the hints stay)."""
        if not solutions_available():
            name = command_name(self)
            return _Text(fmt("{title}: solutions are switched off for this course by your instructor. "
                             "{name}.hint() gives the hints, and {name}.check(your_function) says what is "
                             "still wrong.", title=tr(self.title), name=name), "hooktutor-hint", prose=True)
        source = "\n".join(line for line in self.answer_source().splitlines()
                            if line.strip() not in (BEGIN_SOLUTION, END_SOLUTION))
        return _Text(fmt("# A solution to {title}", title=tr(self.title)) + f"\n{source}", "hooktutor-solution")

    def answer_source(self) -> str:
        """The instructor's answer cell, exactly: the solution's source in its exercise file,
        with its ``### BEGIN SOLUTION`` / ``### END SOLUTION`` markers (hooktutor.course.answers
        writes it into the notebook; the student edition stubs what lies between them)."""
        source = textwrap.dedent(inspect.getsource(self._solution)).strip()
        source = source.replace(f"def {self._solution.__name__}(", f"def {self.answer_name}(", 1)
        return source.replace(f"class {self._solution.__name__}:", f"class {self.answer_name}:", 1)

    def __repr__(self) -> str:
        return fmt("Exercise {title}: {task}\n  {cases} hidden checks, {hints} hints; "
                   "check(your_function) to test your answer", title=repr(tr(self.title)), task=tr(self.task),
                   cases=len(self.cases), hints=len(self.hints))
