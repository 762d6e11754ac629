"""07_capstone, exercise: capstone.first_nonfinite."""

from __future__ import annotations

import torch
from torch import nn

from ...models import seeded
from .. import kit
from ..core import Exercise, Tester


def first_nonfinite(model, *inputs):
    """The name of the first module whose output is not finite, or None; stops the forward pass there."""
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
        "grad-mode@17: with no_grad(...): -> <the body alone>": (
            "grad mode changes no value that the forward hooks test; no_grad() only saves "
            "memory"
        ),
        "number@20: 0 -> -1": "the exception carries one argument: args[0] is args[-1]",
    },
    errors={"not tuple": (
        "a module (here an nn.LSTM) returned a tuple, not a tensor: test isinstance(output, torch.Tensor) "
        "before torch.isfinite(output), and skip the other outputs")},
    guide="""testing with `torch.isnan` only, which misses `inf` (`torch.isfinite(t).all()` catches
    both); reporting the last bad module instead of the first; letting the forward pass run
    on after finding it (raise an exception of your own from the hook, catch it around the
    call); removing the hooks only when nothing was found.""",
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
    got = answer(model, torch.randn(2, 3, generator=torch.Generator().manual_seed(8)))
    t.expect(got is None, what="first_nonfinite(healthy model, x)", expected=None, got=repr(got),
             nudge="return None when no output holds a NaN or an inf")


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


@exercise.case("a model that raises an error of its own halfway through", hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(kit.Raising(seed=12), "the model that raises")
    raised, got = kit.call_expecting_kit_error(answer, model, kit.randn(2, 4, seed=12))
    t.expect(raised or got is None, what="first_nonfinite(model that raises, x)",
             expected="the model's KitError, let through", got=repr(got),
             nudge="the model raised an error of its own, which is not a NaN: catch only your own exception "
                   "class (except Found:), not Exception, and let the model's errors through")


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


@exercise.wrong("removes the hooks only when nothing was found", mentions="still attached")
def _leaky_stop(model, *inputs):
    class Found(Exception):
        pass

    def check(name):
        def hook(module, args, output):
            if not torch.isfinite(output).all():
                raise Found(name)
        return hook

    handles = [m.register_forward_hook(check(name)) for name, m in model.named_modules()]
    try:
        with torch.no_grad():
            model(*inputs)
    except Found as found:
        return found.args[0]
    for h in handles:
        h.remove()
    return None


@exercise.wrong("hooks model.named_children() only", mentions="named_modules()")
def _nonfinite_children(model, *inputs):
    class Found(Exception):
        pass

    def check(name):
        def hook(module, args, output):
            if isinstance(output, torch.Tensor) and not torch.isfinite(output).all():
                raise Found(name)
        return hook

    handles = [m.register_forward_hook(check(name)) for name, m in model.named_children()]
    try:
        with torch.no_grad():
            model(*inputs)
    except Found as found:
        return found.args[0]
    finally:
        for h in handles:
            h.remove()
    return None


def _stopper(catch, tensors_only):
    """A hunter that stops at the first bad module, catches ``catch`` and checks outputs
    with or without an isinstance test: the two hidden mistakes below."""
    def hunt(model, *inputs):
        class Found(Exception):
            pass

        def check(name):
            def hook(module, args, output):
                if tensors_only and not isinstance(output, torch.Tensor):
                    return
                if not torch.isfinite(output).all():
                    raise Found(name)
            return hook

        handles = [m.register_forward_hook(check(name)) for name, m in model.named_modules()]
        try:
            with torch.no_grad():
                model(*inputs)
        except Exception as found:
            if catch == "own" and not isinstance(found, Found):
                raise
            return str(found.args[0])
        finally:
            for h in handles:
                h.remove()
        return None
    return hunt


exercise.wrong("catches every exception, the model's own errors too", mentions="own exception class",
                      hidden=True)(_stopper("all", tensors_only=True))


exercise.wrong("calls torch.isfinite on a tuple output", mentions="returned a tuple",
                      hidden=True)(_stopper("own", tensors_only=False))
