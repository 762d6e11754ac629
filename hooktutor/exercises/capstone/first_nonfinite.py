"""07_capstone, exercise: the first module whose output is not finite, stopping the forward pass there.

Half-right answers an examiner expects, by kit dimension (``kit.DIMENSIONS``):

- technique: tests with ``torch.isnan`` only (misses the infinities); finds the right module but
  lets the forward pass run on (the modules after it still run); reports the last bad module;
- order: a model that defines its layers in another order than it runs them (the first bad
  module is the first whose hook fires, not the first of ``named_modules()``);
- nested: hooks ``model.named_children()`` only, so a container is named instead of its child;
- raises: catches every exception, the model's own errors too (hidden); removes the hooks only
  when nothing was found;
- nd: an ``nn.LSTM`` returns a tuple, which ``torch.isfinite`` refuses (hidden);
- dtype: a float64 model whose finite values float32 cannot hold: an answer that tests
  ``output.float()`` sees infinities that are not there (hidden); ``torch.isfinite(output.sum())``,
  whose sum of large finite float32 values overflows (hidden);
- nested: a block whose own forward makes the NaN (hooking only the leaves misses it);
- a model of two inputs (an answer written for ``first_nonfinite(model, x)``);
- raises: the model's own ``ValueError`` caught by an answer that stops with a ``ValueError``;
- left_as_found: switches the model to ``eval()`` and leaves it there.
"""

from __future__ import annotations

from collections import OrderedDict

import torch
from torch import nn

from ...models import seeded
from .. import kit
from ..core import Exercise, Tester


def first_nonfinite(model, *inputs):
    """The name of the first module whose output is not finite, or None; stops the forward
    pass there."""
    ### BEGIN SOLUTION
    class Found(Exception):
        pass

    def make_check(name):
        def check(module, args, output):
            if isinstance(output, torch.Tensor) and not torch.isfinite(output).all():
                raise Found(name)
        return check

    handles = []
    try:
        for name, module in model.named_modules():
            handles.append(module.register_forward_hook(make_check(name)))
        with torch.no_grad():
            model(*inputs)
    except Found as found:
        return found.args[0]
    finally:
        for handle in handles:
            handle.remove()
    return None
    ### END SOLUTION


exercise = Exercise(
    "capstone.first_nonfinite", "Stop at the first NaN",
    task=("write first_nonfinite(model, *inputs) that runs model(*inputs) with a forward hook on "
          "every module (model.named_modules()) and returns the name of the first module whose "
          "output holds a NaN or an inf, stopping the forward pass there (the modules after it "
          "never run); None when every output is finite; no hook may stay attached. Outputs that are "
          "not tensors (an nn.LSTM returns a tuple) may be skipped; an error the model raises itself is "
          "not yours to catch: let it through"),
    hints=[
        "torch.isfinite(t).all() is False as soon as t holds a NaN, +inf or -inf "
        "(torch.isnan misses the infinities).",
        "To stop a forward pass from inside a hook, raise an exception of your own (class "
        "Found(Exception): ...) carrying the module's name, and catch it around model(*inputs).",
        "Register the hooks in a loop over model.named_modules(), keep every handle in a list, "
        "and remove them all in the finally: of the try that runs the model.",
    ],
    solution=first_nonfinite,
    equivalent_mutants={
        "grad-mode@18: with no_grad(...): -> <the body alone>": (
            "no_grad only keeps the forward from recording a graph (memory): the same modules run on the "
            "same values, so the same name is found"),
        "number@21: 0 -> -1": "Found is raised with one argument: args[-1] is args[0]",
    },
    errors={"positional argument": (
        "first_nonfinite(model, *inputs) takes the model's inputs, however many: pass them all on, "
        "model(*inputs)"), "not tuple": (
        "a module (here an nn.LSTM) returned a tuple, not a tensor: test isinstance(output, torch.Tensor) "
        "before torch.isfinite(output), and skip the other outputs")},
    guide="""testing with `torch.isnan` only, which misses `inf` (`torch.isfinite(t).all()` catches
    both); reporting the last bad module instead of the first; letting the forward pass run
    on after finding it (raise an exception of your own from the hook, catch it around the
    call); removing the hooks only when nothing was found; catching every exception, which
    swallows the model's own errors (`except Found:` only, and a class nobody else raises); testing
    `output.float()`, which turns a large but finite float64 value into `inf`, or
    `torch.isfinite(output.sum())`, whose sum can overflow; hooking only the leaves (a block whose own
    forward takes a log is missed); taking one input instead of `*inputs`; leaving the model in
    `eval()` mode.""",
)


class _Log(nn.Module):
    """log(x): -inf where x is 0 (after a ReLU), NaN where x < 0."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(x)


class _Tripwire(nn.Module):
    """Counts its calls: a forward that was stopped never reaches it."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return x


class _BackToFront(nn.Module):
    """Defines ``head`` before ``body`` but runs ``body`` first."""

    def __init__(self) -> None:
        super().__init__()
        with seeded(7):
            self.head = nn.Linear(4, 2)
            self.body = nn.Linear(3, 4)
        with torch.no_grad():
            self.body.weight[0, 0] = float("inf")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.body(x)))


@exercise.case("a healthy model: every output is finite")
def _(answer, t: Tester) -> None:
    with seeded(8):
        model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    t.track(model, "the MLP")
    with kit.LeftAsFound(t, model, name="the MLP (in train mode)"):
        got = answer(model, torch.randn(2, 3, generator=torch.Generator().manual_seed(8)))
    t.expect(got is None, what="first_nonfinite(healthy model, x)", expected=None, got=repr(got),
             nudge="return None when no output holds a NaN or an inf")


@exercise.case("float32 values near 2e38: finite, though their sum is not", hidden=True)
def _(answer, t: Tester) -> None:
    model = nn.Sequential(nn.Linear(2, 2, bias=False), nn.Linear(2, 2, bias=False), _Log())
    with torch.no_grad():
        model[0].weight.fill_(1e38)                                   # outputs 2e38: finite in float32
        model[1].weight.copy_(torch.tensor([[1e-38, 0.0], [0.0, -1e-38]]))   # back to 2 and -2
    t.track(model, "the model with large finite values")
    got = answer(model, torch.ones(2, 2))
    t.expect(got == "2", what="first_nonfinite(model, x)", expected="'2'", got=repr(got), nudge=(
        "every value of module 0 (2e38) is finite, but their sum is not: test each value, "
        "torch.isfinite(output).all(), not torch.isfinite(output.sum())" if got == "0" else
        "the log (module 2) is the first to produce a NaN"))


@exercise.case("log of a ReLU output (-inf where the ReLU gave 0), followed by more layers")
def _(answer, t: Tester) -> None:
    with seeded(9):
        model = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), _Log(), nn.Linear(8, 2), _Tripwire())
    t.track(model, "the MLP with a log layer")
    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(9))
    got = answer(model, x)
    if got == "3":
        nudge = ("module 2 already produced -inf, which is not a NaN: test with "
                 "torch.isfinite(output).all(), which catches NaN, +inf and -inf")
    elif got in ("4", ""):
        nudge = ("that module is affected, but it is not the first: report the first module whose "
                 "output goes bad, in the order the modules run")
    else:
        nudge = "the log layer (module 2) is the first to produce a non-finite value (-inf)"
    t.expect(got == "2", what="first_nonfinite(model, x)", expected="'2'", got=repr(got), nudge=nudge)
    tripwire = model[4]
    t.expect(tripwire.calls == 0, what="calls of the last module after the NaN was found",
             expected=0, got=tripwire.calls,
             nudge="stop the forward pass at the first bad module: raise an exception from the "
                   "hook and catch it around model(*inputs)")


@exercise.case("a model that defines its layers in another order than it runs them")
def _(answer, t: Tester) -> None:
    model = t.track(_BackToFront(), "the back-to-front model")
    got = answer(model, torch.ones(2, 3))
    t.expect(got == "body", what="first_nonfinite(model, x)", expected="'body'", got=repr(got),
             nudge="`body` runs first and already holds inf: record the first module whose hook "
                   "fires with a bad output, which follows the order of execution, not the order "
                   "of model.named_modules()")


@exercise.case("a nested model where a Linear two levels down produces inf")
def _(answer, t: Tester) -> None:
    model = kit.Nested(seed=10)
    with torch.no_grad():
        model.encoder.body[2].weight[0, 0] = float("inf")
    t.track(model, "the nested model")
    got = answer(model, kit.randn(2, 4, seed=10).abs() + 0.1)
    container = isinstance(got, str) and got in ("encoder", "")
    t.expect(got == "encoder.body.2", what="first_nonfinite(nested model, x)", expected="'encoder.body.2'",
             got=repr(got), nudge=(
                 "that is a container whose child went bad first: hook every module of "
                 "model.named_modules(), nested ones included (model.named_children() stops at the first level)"
                 if container else "the Linear encoder.body.2 (inside encoder.body) is the first to produce inf"))


class _LogBlock(nn.Module):
    """``log(fc(x))``: the block's own forward, not one of its children, makes the NaN."""

    def __init__(self) -> None:
        super().__init__()
        with seeded(18):
            self.fc = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(self.fc(x))


@exercise.case("a block whose own forward takes a log (its children's outputs are finite)")
def _(answer, t: Tester) -> None:
    with seeded(18):
        model = nn.Sequential(OrderedDict([("block", _LogBlock()), ("head", nn.Linear(3, 2))]))
    t.track(model, "the model with a log block")
    got = answer(model, kit.randn(4, 3, seed=18))
    t.expect(got == "block", what="first_nonfinite(model, x)", expected="'block'", got=repr(got), nudge=(
        "`block` computes the log itself, so its output is the first that is not finite, while its child "
        "`block.fc` is fine: hook every module of model.named_modules(), containers too, not only the leaves"))


@exercise.case("the model itself takes the log (its children's outputs are finite): the answer is ''",
               hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(_LogBlock(), "a model whose own forward takes a log")
    got = answer(model, kit.randn(4, 3, seed=18))
    t.expect(got == "", what="first_nonfinite(model, x)", expected="''", got=repr(got), nudge=(
        "the model's own forward takes the log, so its output is the first that is not finite: hook the "
        "model itself too (model.named_modules() lists it first, under the name '')"))


class _TwoInputs(nn.Module):
    """``log(fc(a) * b)``: a model of two inputs."""

    def __init__(self) -> None:
        super().__init__()
        with seeded(19):
            self.fc = nn.Linear(3, 3)
        self.log = _Log()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return self.log(self.fc(a).abs() * b)


@exercise.case("a model of two inputs, called first_nonfinite(model, a, b)")
def _(answer, t: Tester) -> None:
    model = t.track(_TwoInputs(), "the model of two inputs")
    b = torch.tensor([1.0, -1.0, 1.0])   # a negative factor: the log gives NaN
    got = answer(model, kit.randn(2, 3, seed=19), b)
    t.expect(got == "log", what="first_nonfinite(model, a, b)", expected="'log'", got=repr(got),
             nudge="the log (module `log`) is the first whose output holds a NaN")


class _LSTMThenLog(nn.Module):
    """``log(relu(fc(lstm(x)[0])))``: the LSTM returns a tuple; the log gives -inf."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        with seeded(seed):
            self.lstm = nn.LSTM(3, 4, batch_first=True)
            self.fc = nn.Linear(4, 4)
        self.log = _Log()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(x)
        return self.log(torch.relu(self.fc(out)))


@exercise.case("an nn.LSTM (it returns a tuple), then a log that gives -inf", hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(_LSTMThenLog(seed=11), "the LSTM model")
    got = answer(model, kit.randn(2, 3, 3, seed=11))
    t.expect(got == "log", what="first_nonfinite(lstm model, x)", expected="'log'", got=repr(got),
             nudge="the log module is the first whose output holds -inf; the LSTM's tuple is finite")


@exercise.case("a float64 model whose finite values float32 cannot hold, then a log of negatives",
               hidden=True)
def _(answer, t: Tester) -> None:
    with seeded(16):
        model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2), _Log())
    model, x = kit.in_dtype(model, kit.randn(5, 3, seed=16))
    with torch.no_grad():
        model[0].weight.mul_(1e200)   # outputs near 1e200: finite in float64, inf in float32
    t.track(model, "the float64 model")
    got = answer(model, x)
    t.expect(got == "3", what="first_nonfinite(float64 model, x)", expected="'3'", got=repr(got), nudge=(
        "modules 0 to 2 give values near 1e200, which are finite in float64 (the model's dtype) but would "
        "be inf in float32: test the output as it is, torch.isfinite(output), without converting it"
        if got in ("0", "1", "2") else "the log (module 3) is the first to produce a NaN"))


class _ShapeCheck(nn.Module):
    """Raises a ValueError of its own, as a model that checks its input's shape does."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.fc(x)
        raise ValueError("expected an input of 5 features (the check's model raised this on purpose)")


@exercise.case("a model that raises an error of its own halfway through", hidden=True)
def _(answer, t: Tester) -> None:
    nudge = ("the model raised an error of its own, which is not a NaN: catch only your own exception "
             "class (except Found:, a class nobody else raises), and let the model's errors through")
    model = t.track(kit.Raising(seed=12), "the model that raises")
    raised, got = kit.call_expecting_kit_error(answer, model, kit.randn(2, 4, seed=12))
    t.expect(raised or got is None, what="first_nonfinite(model that raises, x)",
             expected="the model's KitError, let through", got=repr(got), nudge=nudge)
    shape_check = t.track(_ShapeCheck(), "the model that raises a ValueError")
    try:
        got = answer(shape_check, torch.ones(2, 3))
    except ValueError:
        got = None
    t.expect(got is None, what="first_nonfinite(model that raises ValueError, x)",
             expected="the model's ValueError, let through", got=repr(got), nudge=nudge)


def _hunter(is_bad, pick):
    """A NaN hunter that flags modules with ``is_bad(output)``, lets the forward pass run on,
    and reports ``pick(flagged names)``: each typical mistake below is one choice here."""
    def hunt(model, *inputs):
        bad = []
        handles = [m.register_forward_hook(lambda mod, a, o, name=name: bad.append(name)
                                           if is_bad(o) else None)
                   for name, m in model.named_modules()]
        try:
            with torch.no_grad():
                model(*inputs)
        finally:
            for h in handles:
                h.remove()
        return pick(bad) if bad else None
    return hunt


exercise.wrong("tests with torch.isnan only", mentions="inf")(
    _hunter(lambda o: torch.isnan(o).any(), lambda bad: bad[0]))


exercise.wrong("reports the last bad module", mentions="not the first")(
    _hunter(lambda o: not torch.isfinite(o).all(), lambda bad: bad[-1]))


exercise.wrong("finds the right module but lets the forward pass run on", mentions="stop")(
    _hunter(lambda o: not torch.isfinite(o).all(), lambda bad: bad[0]))


def _stopper(*, catch="own", tensors_only=True, walk="modules", remove="finally", test="each", stop_with="own",
             mode="as found"):
    """A hunter that stops at the first bad module: one factory for the near-copy wrong answers.
    Which exceptions it catches ("own": its Found; "all": every one), whether it skips outputs that
    are not tensors, which modules it hooks ("modules", "children", "leaves"), how the hooks are
    removed ("finally"; "found": only when nothing was found), what it tests ("each": every value;
    "float": output.float(); "sum": output.sum()), which exception stops the forward ("own", "ValueError")
    and whether it switches the model to eval() first ("as found", "eval")."""
    def hunt(model, *inputs):
        class Found(ValueError if stop_with == "ValueError" else Exception):
            pass

        if mode == "eval":
            model.eval()

        def check(name):
            def hook(module, args, output):
                if tensors_only and not isinstance(output, torch.Tensor):
                    return
                value = output.float() if test == "float" else output.sum() if test == "sum" else output
                if not torch.isfinite(value).all():
                    raise Found(name)
            return hook

        items = {"modules": model.named_modules, "children": model.named_children,
                 "leaves": lambda: [(n, m) for n, m in model.named_modules() if not list(m.children())]}[walk]()
        handles = [m.register_forward_hook(check(name)) for name, m in items]
        try:
            with torch.no_grad():
                model(*inputs)
        except Exception as found:
            if catch == "own" and not isinstance(found, Found if stop_with == "own" else ValueError):
                raise
            return str(found.args[0])
        finally:
            if remove == "finally":
                for h in handles:
                    h.remove()
        for h in handles:
            h.remove()
        return None
    return hunt


exercise.wrong("removes the hooks only when nothing was found", mentions="still attached")(
    _stopper(remove="found"))
exercise.wrong("hooks model.named_children() only", mentions="named_modules()")(_stopper(walk="children"))
exercise.wrong("catches every exception, the model's own errors too", mentions="own exception class",
               hidden=True)(_stopper(catch="all"))
exercise.wrong("calls torch.isfinite on a tuple output", mentions="returned a tuple",
               hidden=True)(_stopper(tensors_only=False))
exercise.wrong("tests output.float(): a float64 value beyond float32's range looks infinite",
               mentions="without converting it", hidden=True)(_stopper(test="float"))
exercise.wrong("tests torch.isfinite(output.sum()): a sum of large finite values overflows",
               mentions="not torch.isfinite(output.sum())", hidden=True)(_stopper(test="sum"))
exercise.wrong("hooks only the modules without children", mentions="containers too")(_stopper(walk="leaves"))
exercise.wrong("stops with a ValueError and catches ValueError: the model's own too",
               mentions="a class nobody else raises", hidden=True)(_stopper(stop_with="ValueError"))
exercise.wrong("switches the model to eval() and leaves it there", mentions="leave what you were given")(
    _stopper(mode="eval"))


@exercise.wrong("takes one input: first_nonfinite(model, x)", mentions="model(*inputs)")
def _one_input(model, x):
    return _stopper()(model, x)


@exercise.wrong("hooks every module but the model itself", mentions="hook the model itself too", hidden=True)
def _skips_root(model, *inputs):
    class Found(Exception):
        pass

    def make(name):
        def hook(module, args, output):
            if isinstance(output, torch.Tensor) and not torch.isfinite(output).all():
                raise Found(name)
        return hook

    handles = [m.register_forward_hook(make(n)) for n, m in list(model.named_modules())[1:]]
    try:
        model(*inputs)
    except Found as found:
        return found.args[0]
    finally:
        for h in handles:
            h.remove()
    return None
