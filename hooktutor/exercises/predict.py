"""Predict, then run: the learner writes down what torch will do, the check runs it and compares.

A prediction is what the learner expects: how many times a hook fires, the order in which hooks
fire, or which gradients a hook changes. The answer cell is a function that returns it (so the
student edition and nbgrader stub it like every other answer)::

    def predict_order():
        return ["block pre-hook", "conv1", ...]      # one label per hook call, in firing order

and the check cell runs the experiment in torch, now, on the installed version, and compares::

    ex.block_order.check(predict_order)

(``check`` also takes the value itself: ``ex.block_order.check(["block pre-hook", ...])``.)

Nothing about the truth is stored: ``observe()`` computes it every time, so a torch release that
changes the behaviour changes the verdict. Every difference is reported with the reason torch
behaves that way (``explain``), which is the point of predicting first.

Three forms, fixed by what ``observe()`` returns:

- a **count** or another single value (``int``, ``str``, ``bool``);
- an **order**: a list of labels, each from ``choices``; a label may occur several times (a
  module called twice fires its hook twice);
- a **table**: a dict from fixed keys to values, each from ``choices`` (one tuple for every
  key, or a dict of tuples per key).

Strings are compared without regard to case and surrounding spaces. Each lesson has at least
one; docs/authoring.md ("Predict, then run") says how to add one. Taught in every lesson.
"""

from __future__ import annotations

import inspect
import textwrap
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..i18n import N_, fmt, tr
from .core import CaseResult, CheckReport, Exercise, SolutionsOff, _Text, solutions_available

PREDICTIONS: dict[str, Exercise] = {}


def _norm(value: Any) -> Any:
    """Strings without case or surrounding spaces; None as "none"; a list of numbers as a tuple
    (a shape written either way)."""
    if value is None:
        return "none"
    if isinstance(value, str):
        return value.strip().lower()
    if isinstance(value, list) and all(isinstance(v, int) for v in value):
        return tuple(value)
    return value


def _same(a: Any, b: Any) -> bool:
    """Equal values of the same kind: a bool is not an int (``False == 0`` in Python, not here)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return bool(a == b)


def _a(noun: str) -> str:
    return ("an " if noun[0] in "aeiou" else "a ") + noun


def _times(n: int) -> str:
    return "not at all" if n == 0 else "once" if n == 1 else "twice" if n == 2 else f"{n} times"


def _show(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_show(v)}" for k, v in value.items()) + "}"
    return repr(value)


class PredictionReport(CheckReport):
    """Every difference between the prediction and torch, each with its reason."""

    def __init__(self, exercise: "Prediction", results: list[CaseResult], actual: Any = None, note: str = ""):
        super().__init__(exercise, results, note)
        self.actual = actual

    def _lines(self) -> list[tuple[str, str]]:
        ex = self.exercise
        title = tr(ex.title)
        if self.passed:
            return [("title", fmt("✔ {title}: your prediction is what torch did.", title=title)),
                    ("torch", _show(self.actual)), ("why", tr(ex.summary))]
        bad = self.failure
        if bad is None:
            return super()._lines()
        name = f"ex.{ex.key.rsplit('.', 1)[-1]}"
        if bad.status != "mismatch":
            headline = N_("is not written yet") if bad.status == "unfinished" else N_("cannot be read by the check")
            lines = [("title", fmt("✘ {title}: your prediction {headline}.", title=title, headline=tr(headline)))]
            lines += [(k, bad.detail[k] if k == "error" else tr(bad.detail[k]))
                      for k in ("error", "why") if k in bad.detail]
            lines.append(("next", fmt("write it as the task says, then run the check again ({name}.hint() helps)",
                                      name=name)))
            return lines
        wrong = [r for r in self.results if r.status == "mismatch"]
        n = len(wrong)
        lines: list[tuple[str, str]] = [(
            "title", fmt("✘ {title}: torch did something else ({n} difference).", title=title, n=n) if n == 1
            else fmt("✘ {title}: torch did something else ({n} differences).", title=title, n=n))]
        for r in wrong:
            lines.append(("you said", tr(r.detail["got"])))
            lines.append(("torch", tr(r.detail["expected"])))
            lines.append(("why", tr(r.detail["why"])))
        lines.append(("next", fmt("read why, then change your prediction and run the check again "
                                  "({name}.hint() if the reason is unclear)", name=name)))
        return lines


class Prediction(Exercise):
    """A predict-then-run exercise (see the module's docstring).

    ``observe()`` runs the experiment and returns the truth; ``choices`` lists the values a
    prediction may use; ``explain`` maps a key or a label (or ``"order"``, ``"count"``) to the
    sentence that says why torch does what it does; ``summary`` is shown when the prediction
    is right. ``wrong(label, value, mentions)`` registers a plausible wrong prediction that the
    tests prove rejected with a report that contains ``mentions``.
    """

    registry = PREDICTIONS

    def __init__(self, key: str, title: str, *, task: str, hints: list[str], observe: Callable[[], Any],
                 explain: Mapping[str, str], summary: str, answer_name: str,
                 choices: Sequence[Any] | Mapping[str, Sequence[Any]] | None = None,
                 answer: Callable[[], Any] | None = None, guide: str = ""):
        super().__init__(key, title, task=task, hints=hints, solution=observe, answer_name=answer_name,
                         guide=guide)
        self.observe = observe
        # the instructor's answer cell (the right prediction, between solution markers); a test
        # holds it equal to what observe() finds on the installed torch
        self.answer = answer
        self.explain = dict(explain)
        self.summary = summary
        self.choices = choices
        self.wrong_predictions: list[tuple[str, Any, str]] = []

    # -- authoring ------------------------------------------------------------------------
    def wrong(self, label: str, value: Any, mentions: str,  # type: ignore[override]
              since: str | None = None) -> None:
        """A plausible wrong prediction; its report must fail and contain ``mentions``.
        ``since``: a claim id; the prediction is wrong only where that claim's new behaviour shows."""
        self.wrong_predictions.append((label, value, mentions))
        if since:
            self.wrong_since[label] = since

    @property
    def reference(self) -> Any:
        """The truth, as torch computes it now (refused while solutions are off)."""
        if not solutions_available():
            raise SolutionsOff("solutions are switched off for this course (HOOKTUTOR_SOLUTIONS=off)")
        return self.observe()

    def solution(self) -> _Text:
        if not solutions_available():
            return super().solution()
        name = f"ex.{self.key.rsplit('.', 1)[-1]}"
        return _Text(fmt("# What torch does ({title}), computed just now", title=tr(self.title)) + "\n"
                     f"def {self.answer_name}():\n    return {_show(self.observe())}\n# {tr(self.summary)}\n"
                     + fmt("# {name}.check({answer}) explains any difference from your prediction", name=name,
                           answer=self.answer_name),
                     "hooktutor-solution")

    def answer_source(self) -> str:
        """The instructor's answer cell: the source of ``answer`` in the prediction's file."""
        if self.answer is None:
            raise ValueError(f"{self.key} has no answer function to write into the notebook")
        source = textwrap.dedent(inspect.getsource(self.answer)).strip()
        return source.replace(f"def {self.answer.__name__}(", f"def {self.answer_name}(", 1)

    # -- the check --------------------------------------------------------------------------
    def _allowed(self, key: str | None) -> list[Any] | None:
        if self.choices is None:
            return None
        if isinstance(self.choices, Mapping):
            return list(self.choices.get(key, ())) if key is not None else None
        return list(self.choices)

    def _unusable(self, why: str, got: Any) -> PredictionReport:
        return PredictionReport(self, [CaseResult("reading your prediction", "unusable",
                                                  {"error": f"your prediction is {_show(got)}", "why": why})])

    def _read_value(self, got: Any, key: str | None, actual: Any) -> str | None:
        """Why ``got`` cannot be compared (None when it can)."""
        allowed = self._allowed(key)
        where = f" for {key!r}" if key is not None else ""
        if allowed is not None:
            if not any(_same(_norm(got), _norm(a)) for a in allowed):
                return f"{_show(got)}{where} is not one of the choices: {', '.join(map(_show, allowed))}."
            return None
        kind = bool if isinstance(actual, bool) else type(actual)
        if not isinstance(_norm(got), kind) or (kind is int and isinstance(got, bool)):
            return f"the prediction{where} should be {_a(kind.__name__)}, not {_a(type(got).__name__)}."
        return None

    def check(self, answer: Any, *, hidden: bool = False) -> PredictionReport:  # noqa: ARG002 - same call as Exercise
        """Compare ``answer`` with what torch does now; every difference comes with its reason."""
        name = self.answer_name
        unfinished = PredictionReport(self, [CaseResult("your prediction", "unfinished", {"why": (
            f"{name}() still raises NotImplementedError. Replace that line with `return` and your "
            f"prediction: {self.task}.")})])
        if callable(answer):
            try:
                answer = answer()
            except NotImplementedError:
                return unfinished
            except Exception as e:  # reported, never a traceback
                return PredictionReport(self, [CaseResult("your prediction", "error", {
                    "error": f"{type(e).__name__}: {e}".splitlines()[0][:300],
                    "why": f"{name}() should only return your prediction: {self.task}."})])
        if answer is Ellipsis:
            return unfinished
        actual = self.observe()
        if isinstance(actual, dict):
            return self._check_table(answer, actual)
        if isinstance(actual, list):
            return self._check_order(answer, actual)
        why = self._read_value(answer, None, actual)
        if why:
            return self._unusable(why, answer)
        ok = _same(_norm(answer), _norm(actual))
        result = CaseResult("the prediction", "pass" if ok else "mismatch", {
            "got": _show(answer), "expected": _show(actual),
            "why": self.explain.get(str(_norm(answer)), self.explain.get("count", self.summary))})
        return PredictionReport(self, [result], actual)

    def _check_table(self, answer: Any, actual: dict) -> PredictionReport:
        if not isinstance(answer, Mapping):
            return self._unusable(f"write a dict with one entry per key: {', '.join(map(repr, actual))}.", answer)
        missing = [k for k in actual if k not in answer]
        extra = [k for k in answer if k not in actual]
        if missing or extra:
            why = (f"it has no entry for {', '.join(map(repr, missing))}" if missing else
                   f"{', '.join(map(repr, extra))} is not one of the keys")
            return self._unusable(f"{why}; the keys are {', '.join(map(repr, actual))}.", answer)
        for k in actual:
            why = self._read_value(answer[k], k, actual[k])
            if why:
                return self._unusable(why, answer)
        results = []
        for k, truth in actual.items():
            ok = _same(_norm(answer[k]), _norm(truth))
            results.append(CaseResult(k, "pass" if ok else "mismatch", {
                "got": f"{k!r}: {_show(answer[k])}", "expected": f"{k!r}: {_show(truth)}",
                "why": self.explain.get(k, self.summary)}))
        return PredictionReport(self, results, actual)

    def _check_order(self, answer: Any, actual: list) -> PredictionReport:
        if not isinstance(answer, (list, tuple)) or isinstance(answer, str):
            return self._unusable("write a list of labels, in the order you expect, e.g. "
                                  f"[{_show(actual[0]) if actual else ''}, ...].", answer)
        for item in answer:
            why = self._read_value(item, None, actual[0] if actual else "")
            if why:
                return self._unusable(why, answer)
        got, truth = [_norm(a) for a in answer], [_norm(a) for a in actual]
        if _same(got, truth):
            return PredictionReport(self, [CaseResult("the order", "pass")], actual)
        have, want = Counter(got), Counter(truth)
        diffs = []
        for label in dict.fromkeys(truth + got):
            if have[label] != want[label]:
                diffs.append(CaseResult(label, "mismatch", {
                    "got": f"{label!r} {_times(have[label])}", "expected": f"{label!r} {_times(want[label])}",
                    "why": self.explain.get(label, self.explain.get("order", self.summary))}))
        if not diffs:   # the same events, another order: name the first place they part
            i = next((i for i, (a, b) in enumerate(zip(got, truth)) if not _same(a, b)), min(len(got), len(truth)) - 1)
            diffs.append(CaseResult("the order", "mismatch", {
                "got": f"{_show(answer)} (place {i + 1}: {got[i]!r})",
                "expected": f"{_show(actual)} (place {i + 1}: {truth[i]!r})",
                "why": self.explain.get(got[i]) or self.explain.get(truth[i])
                or self.explain.get("order", self.summary)}))
        return PredictionReport(self, diffs, actual)

    def __repr__(self) -> str:
        return fmt("Prediction {title}: {task}\n  write {answer} = <your prediction>, then check({answer}); "
                   "{n} hints", title=repr(tr(self.title)), task=tr(self.task), answer=self.answer_name,
                   n=len(self.hints))

