"""01_tensor_hooks, exercise: a tensor hook that clips the norm of one tensor's gradient.

Half-right answers an examiner expects, by kit dimension (``kit.DIMENSIONS``):

- inplace_after: edits ``grad`` in place (``grad.mul_``): fails on the expanded gradient that
  comes straight from ``.sum()``, and where torch allows it, changes a gradient tensor that
  backward hands to other branches too;
- alias: the gradient an addition passes back is one tensor for both of its inputs, so an in-place
  edit by the hook on one leaf changes the other leaf's gradient;
- nd: clips each row (or each sample) of a 2-D or 4-D gradient on its own instead of the norm of
  the whole tensor;
- dtype: computes in float32 (``grad.float()``): a float64 weight gets a float32 gradient back,
  and backward refuses it;
- repeat: computes the factor on the first call and reuses it, so a later, larger gradient is
  not clipped (one hook, two backwards);
- the arithmetic: forgets to return the new gradient; clamps each element; always rescales; compares
  the squared norm (or the RMS) with max_norm; copies ``clip_grad_norm_``'s
  ``max_norm / (norm + 1e-6)`` but not its clamp to 1, so every gradient is rescaled (the formula
  with the clamp is right: it is PyTorch's own); rescales when the norm equals max_norm too, which
  divides 0 by 0 for a zero gradient under ``max_norm=0`` (a ``nan`` gradient).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..core import Exercise, Tester


def clip_hook(max_norm):
    """A hook for tensor.register_hook that clips the gradient's norm to max_norm."""
    ### BEGIN SOLUTION
    def hook(grad):
        if grad is None:              # a tensor this backward does not need (section 2)
            return None
        norm = grad.norm()
        if norm > max_norm:
            return grad * (max_norm / norm)
        return None
    return hook
    ### END SOLUTION


exercise = Exercise(
    "tensor_hooks.clip_hook", "Clip one tensor's gradient",
    task=("write clip_hook(max_norm) that returns a hook for Tensor.register_hook: when the "
          "gradient's norm is larger than max_norm, the hook returns the gradient rescaled to norm "
          "max_norm (same direction); otherwise it keeps the gradient unchanged (clip_grad_norm_'s "
          "own formula, grad * min(max_norm / (norm + 1e-6), 1), is right too). max_norm may be 0 "
          "(every gradient becomes 0), the gradient may be float64, and it may be None (a tensor "
          "this backward does not need, such as the unused half of a chunk): then the hook "
          "returns None"),
    hints=[
        "clip_hook does not attach anything: inside it, define def hook(grad): ... and return hook.",
        "grad.norm() is the norm of the whole gradient. grad * (max_norm / norm) has the same "
        "direction and norm max_norm.",
        "A hook changes the gradient only through what it returns: return the new tensor, or None "
        "to keep the gradient. Never edit grad in place (grad.mul_): it can be an expanded "
        "tensor (one value behind every element) or shared with other branches.",
        "Start the hook with `if grad is None: return None`: a hook on a tensor that the backward "
        "does not need (the unused output of chunk or split) is called with None.",
    ],
    solution=clip_hook,
    errors={
        "more than one element of the written-to tensor": (
            "your hook edited the gradient in place, and this gradient is an expanded tensor "
            "(it came straight from .sum()). Return a new tensor, grad * factor, instead of grad.mul_()."),
        "expected Variable, but hook returned": (
            "a tensor hook must return a tensor (the new gradient) or None."),
        "has changed the type of value": (
            "your hook returned a gradient of another dtype than the one it received (a float32 "
            "gradient for a float64 tensor, say): compute with the gradient you were given, "
            "grad * (max_norm / norm), without .float() or new float32 tensors."),
        "'NoneType' object has no attribute": (
            "your hook was called with grad=None, as a hook on a tensor this backward does not "
            "need can be (the unused half of a chunk, section 2). Start it with "
            "`if grad is None: return None`."),
        "not NoneType": (
            "your hook was called with grad=None, as a hook on a tensor this backward does not "
            "need can be (the unused half of a chunk, section 2). Start it with "
            "`if grad is None: return None`."),
        "has changed the size of value": (
            "the returned gradient must have the same shape as the one the hook received: "
            "rescale the whole gradient, do not reduce it."),
    },
    guide="""the hook computes the clipped gradient and forgets to return it (a tensor hook changes the
    gradient only through its return value); it edits in place with `grad.mul_()`, which
    fails on the expanded gradient that comes straight from `.sum()`; it clamps each element
    instead of the norm of the whole gradient (the direction changes); it rescales every
    gradient, also the small ones (only when the norm is above `max_norm`). The check now also
    catches an in-place edit where torch allows it (an addition hands both of its inputs the same
    gradient tensor, so the other leaf's gradient changes too), a float32 computation for a float64
    weight (backward refuses a gradient of another dtype), a factor computed on the first call and
    reused, `norm >= max_norm` (0 / 0 for a zero gradient with `max_norm=0`), and a hook that
    crashes when it is called with `None` (a hook on the unused half of a chunk).""",
)


def _make_hook(answer: Callable, max_norm: float, t: Tester) -> Callable:
    hook = answer(max_norm)
    t.expect(callable(hook), what=f"clip_hook({max_norm})", expected="a function hook(grad)", got=hook,
             nudge="clip_hook(max_norm) must return the hook function itself (return hook, without "
                   "calling it), for tensor.register_hook(clip_hook(max_norm))")
    return hook


@exercise.case("a leaf whose gradient [5, 5, 5, 5] has norm 10, clipped to max_norm=1")
def _(answer, t: Tester) -> None:
    hook = _make_hook(answer, 1.0, t)
    w = torch.zeros(4, requires_grad=True)
    coeff = torch.full((4,), 5.0)
    with w.register_hook(hook):
        (w * coeff).sum().backward()
    t.expect_close(w.grad, torch.full((4,), 0.5), what="w.grad", nudge=(
        "a gradient with norm 10 and max_norm 1 becomes grad * (1 / 10): same direction, norm 1"),
        wrong={
            "unchanged": (coeff, "the gradient came back unchanged: a hook changes the gradient only "
                                 "through the tensor it returns; return the rescaled gradient"),
            "clamped": (torch.ones(4), "each element was capped at max_norm; clip the norm of the "
                                       "whole gradient instead (grad.norm()), so its direction stays"),
        })


@exercise.case("a small gradient (norm 0.5) with max_norm=1 stays as it is")
def _(answer, t: Tester) -> None:
    hook = _make_hook(answer, 1.0, t)
    w = torch.zeros(4, requires_grad=True)
    coeff = torch.full((4,), 0.25)
    with w.register_hook(hook):
        (w * coeff).sum().backward()
    t.expect_close(w.grad, coeff, what="w.grad", nudge=(
        "rescale only when the norm is larger than max_norm; otherwise keep the gradient "
        "(return None or grad)"))


@exercise.case("a gradient that comes straight from .sum() (an expanded tensor)")
def _(answer, t: Tester) -> None:
    hook = _make_hook(answer, 2.0, t)
    w = torch.zeros(16, requires_grad=True)  # the gradient of w.sum() is ones(16): norm 4
    with w.register_hook(hook):
        w.sum().backward()
    t.expect_close(w.grad, torch.full((16,), 0.5), what="w.grad", nudge=(
        "ones(16) has norm 4; clipped to norm 2 it is 0.5 everywhere"))


@exercise.case("a hook on an intermediate tensor clips what flows upstream")
def _(answer, t: Tester) -> None:
    hook = _make_hook(answer, 1.0, t)
    x = torch.ones(3, requires_grad=True)
    h = x * 3
    with h.register_hook(hook):
        (h * torch.tensor([0.0, 3.0, 4.0])).sum().backward()  # dloss/dh = [0, 3, 4], norm 5
    t.expect_close(x.grad, torch.tensor([0.0, 1.8, 2.4]), what="x.grad (x is upstream of h)", nudge=(
        "the gradient of h, [0, 3, 4], is clipped to [0, 0.6, 0.8]; x.grad is 3 times that"))


@exercise.case("a 2-D weight gradient with rows of different norms (the norm of the whole tensor)")
def _(answer, t: Tester) -> None:
    hook = _make_hook(answer, 1.0, t)
    w = torch.zeros(2, 3, requires_grad=True)
    coeff = torch.tensor([[3.0, 0.0, 0.0], [0.0, 4.0, 0.0]])   # norm 5, row norms 3 and 4
    with w.register_hook(hook):
        (w * coeff).sum().backward()
    t.expect_close(w.grad, coeff / 5, what="w.grad (a 2 x 3 weight)", nudge=(
        "the norm is that of the whole gradient, grad.norm() over every element: [[3, 0, 0], "
        "[0, 4, 0]] has norm 5 and becomes [[0.6, 0, 0], [0, 0.8, 0]]"),
        wrong={"rows": (torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]),
                        "each row was clipped on its own: take the norm of the whole gradient, "
                        "grad.norm(), not grad.norm(dim=...)")})


@exercise.case("a conv weight gradient (4-D) of norm 3 under max_norm 4, then of norm 12", hidden=True)
def _(answer, t: Tester) -> None:
    hook = _make_hook(answer, 4.0, t)
    w = torch.zeros(1, 1, 3, 3, requires_grad=True)
    coeff = torch.ones(1, 1, 3, 3)                              # norm 3 (nine ones)
    with w.register_hook(hook):
        (w * coeff).sum().backward()
        t.expect_close(w.grad, coeff, what="w.grad (norm 3, max_norm 4)", nudge=(
            "a gradient whose norm (3) is below max_norm (4) must stay as it is: compare "
            "grad.norm(), the square root of the sum of squares, with max_norm"))
        w.grad = None
        (w * 4 * coeff).sum().backward()                         # norm 12
    t.expect_close(w.grad, coeff * 4 / 3, what="w.grad (norm 12, max_norm 4)",
                   nudge="rescale the whole 4-D gradient to norm max_norm: grad * (max_norm / grad.norm())")


@exercise.case("a float64 weight: its clipped gradient stays float64")
def _(answer, t: Tester) -> None:
    hook = _make_hook(answer, 1.0, t)
    w = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    coeff = torch.tensor([0.0, 6.0, 8.0], dtype=torch.float64)    # norm 10
    with w.register_hook(hook):
        (w * coeff).sum().backward()
    t.expect(w.grad is not None and w.grad.dtype == torch.float64, what="w.grad's dtype", expected="torch.float64",
             got=None if w.grad is None else w.grad.dtype, nudge=(
                 "compute with the gradient you were given: grad * (max_norm / norm) keeps its dtype"))
    # float64 rounds at 1e-16; clip_grad_norm_'s eps (max_norm / (norm + 1e-6)) moves the result by
    # 1e-7 relative at norm 10, which is right. rtol 1e-6 accepts it and rejects an eps of 1e-4 or more.
    t.expect_close(w.grad, torch.tensor([0.0, 0.6, 0.8], dtype=torch.float64), what="w.grad (float64)",
                   atol=1e-12, rtol=1e-6,
                   nudge="[0, 6, 8] has norm 10; clipped to norm 1 it is [0, 0.6, 0.8]: divide by the norm "
                         "itself (torch's clip_grad_norm_ adds 1e-6 to it; nothing larger)")


@exercise.case("a sum of two leaves, the hook on one: the other's gradient must not change")
def _(answer, t: Tester) -> None:
    hook = _make_hook(answer, 1.0, t)
    w1 = torch.zeros(3, requires_grad=True)
    w2 = torch.zeros(3, requires_grad=True)
    coeff = torch.tensor([3.0, 4.0, 0.0])                        # both gradients: [3, 4, 0], norm 5
    with w1.register_hook(hook):
        ((w1 + w2) * coeff).sum().backward()
    t.expect_close(w2.grad, coeff, what="w2.grad (w2 has no hook)", nudge=(
        "the addition hands the same gradient tensor to both of its inputs: your hook edited it in "
        "place, and w2's gradient changed too. Return a new tensor, grad * factor, and never edit grad"))
    t.expect_close(w1.grad, coeff / 5, what="w1.grad", nudge="[3, 4, 0] has norm 5; clipped to norm 1 it "
                   "is [0.6, 0.8, 0]")


@exercise.case("a hook on the half of a chunk that the loss does not use: it gets None")
def _(answer, t: Tester) -> None:
    hook = _make_hook(answer, 1.0, t)
    x = torch.tensor([3.0, 4.0, 5.0, 6.0], requires_grad=True)
    used, unused = x.chunk(2)
    with unused.register_hook(hook):
        (used * 2).sum().backward()   # chunk's backward runs and calls the hook on `unused` with None
    t.expect_close(x.grad, torch.tensor([2.0, 2.0, 0.0, 0.0]), what="x.grad", nudge=(
        "the unused half gets no gradient: for grad=None, the hook returns None"))


@exercise.case("max_norm=0: a gradient becomes 0, and a zero gradient stays 0", hidden=True)
def _(answer, t: Tester) -> None:
    w1 = torch.zeros(3, requires_grad=True)
    w2 = torch.zeros(3, requires_grad=True)
    with w1.register_hook(_make_hook(answer, 0.0, t)), w2.register_hook(_make_hook(answer, 0.0, t)):
        ((w1 * torch.tensor([1.0, 2.0, 0.0])).sum() + (w2 * 0.0).sum()).backward()   # w2's gradient: 0
    t.expect_close(w1.grad, torch.zeros(3), what="w1.grad (norm 5 ** 0.5, max_norm 0)",
                   nudge="with max_norm 0 every gradient is rescaled to norm 0: grad * (0 / norm)")
    t.expect_close(w2.grad, torch.zeros(3), what="w2.grad (a zero gradient, max_norm 0)", nudge=(
        "a gradient that is 0 already is not larger than max_norm: keep it. Rescaling it divides 0 "
        "by 0, which gives nan: compare norm > max_norm, strictly"))


# -- the wrong answers peculiar to this exercise -------------------------------------------------

def _clipper(*, norm=torch.linalg.vector_norm, over=lambda n, m: n > m, result="new", cast=None,
             first_only=False, none_check=True):
    """One factory for the near-copy wrong answers: how the norm is measured (``norm``), when the
    hook rescales (``over``), what it does with the rescaled gradient ("new": returns it,
    "in_place": grad.mul_, "try_in_place": in place where torch allows it, "forgotten": computes
    it and returns nothing), a dtype it computes in (``cast``), whether the factor of the first
    call is kept for later calls, whether it returns None for a None gradient (``none_check``)."""
    def answer(max_norm):
        kept = {}

        def hook(grad):
            if none_check and grad is None:
                return None
            g = grad if cast is None else grad.to(cast)
            n = norm(g)
            if first_only:
                return g * kept.setdefault("factor", max_norm / n if over(n, max_norm) else 1.0)
            if not over(n, max_norm):
                return None
            factor = max_norm / n
            if result == "forgotten":
                g = g * factor   # noqa: F841 - the point: a new local tensor, never returned
                return None
            if result == "new":
                return g * factor
            try:
                g.mul_(factor)
            except RuntimeError:
                if result == "in_place":
                    raise
                return g * factor
            return g
        return hook
    return answer


@exercise.wrong("clips each row on its own (norm over the last dimension)", mentions="each row")
def _per_row(max_norm):
    def hook(grad):
        norm = grad.norm(dim=-1, keepdim=True)
        return grad * (max_norm / norm).clamp(max=1.0)
    return hook


exercise.wrong("compares the squared norm with max_norm", mentions="square root", hidden=True)(
    _clipper(over=lambda n, m: n ** 2 > m))
exercise.wrong("computes the clipped gradient but forgets to return it", mentions="unchanged")(
    _clipper(result="forgotten"))
exercise.wrong("edits the gradient in place with grad.mul_()", mentions="Return a new tensor")(
    _clipper(result="in_place"))
exercise.wrong("edits the gradient in place where torch allows it", mentions="same gradient tensor")(
    _clipper(result="try_in_place"))
exercise.wrong("always rescales to max_norm, even small gradients", mentions="only when")(
    _clipper(over=lambda n, m: True))
exercise.wrong("computes in float32 (grad.float())", mentions="another dtype")(_clipper(cast=torch.float32))
exercise.wrong("crashes on a None gradient", mentions="if grad is None")(_clipper(none_check=False))
exercise.wrong("computes the factor on the first call and keeps it", mentions="norm max_norm",
               hidden=True)(_clipper(first_only=True))
exercise.wrong("rescales when the norm equals max_norm too (0 / 0)", mentions="strictly", hidden=True)(
    _clipper(over=lambda n, m: n >= m))


@exercise.wrong("copies clip_grad_norm_'s max_norm / (norm + 1e-6) without its clamp to 1",
                mentions="only when")
def _torch_formula_unclamped(max_norm):
    def hook(grad):
        if grad is None:
            return None
        return grad * (max_norm / (grad.norm() + 1e-6))   # a small gradient is scaled up
    return hook


@exercise.wrong("clamps each element instead of the norm", mentions="whole gradient")
def _clamps(max_norm):
    return lambda grad: grad.clamp(-max_norm, max_norm)
