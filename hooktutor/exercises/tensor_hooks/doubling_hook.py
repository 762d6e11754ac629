"""01_tensor_hooks, predict, then run: what a hook that doubles the gradient of v changes (a, b, c, v)."""

from __future__ import annotations

import warnings

import torch

from ..predict import Prediction


def _leaves() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return (torch.tensor([1.0, 2.0], requires_grad=True), torch.tensor([3.0, 4.0], requires_grad=True),
            torch.tensor([5.0, 6.0], requires_grad=True))


def _observe_doubling_hook() -> dict[str, str]:
    """v = a * b; a hook on v returns 2 * grad; loss = (3 * v).sum() + c.sum(). What changed?"""
    def backward(hooked: bool) -> tuple[tuple[torch.Tensor, ...], torch.Tensor | None]:
        a, b, c = _leaves()
        v = a * b
        if hooked:
            v.register_hook(lambda grad: grad * 2)
        ((3 * v).sum() + c.sum()).backward()
        with warnings.catch_warnings():   # reading a non-leaf's .grad warns: that is the point here
            warnings.simplefilter("ignore", UserWarning)
            return (a.grad, b.grad, c.grad), v.grad

    plain, _ = backward(False)
    hooked, v_grad = backward(True)

    def verdict(new: torch.Tensor, old: torch.Tensor) -> str:
        return "doubled" if torch.equal(new, 2 * old) else "unchanged" if torch.equal(new, old) else "other"
    seen = {name: verdict(new, old) for name, new, old in zip(("a.grad", "b.grad", "c.grad"), hooked, plain)}
    seen["v.grad"] = "None" if v_grad is None else "filled"
    return seen


def predict_grads():
    """Return a dict: for a.grad, b.grad, c.grad and v.grad, 'doubled', 'unchanged' or 'None'."""
    ### BEGIN SOLUTION
    return {"a.grad": "doubled", "b.grad": "doubled", "c.grad": "unchanged", "v.grad": "None"}
    ### END SOLUTION


exercise = Prediction(
    "tensor_hooks.doubling_hook", "Predict: what a doubling hook on v changes",
    task=("a dict with the keys 'a.grad', 'b.grad', 'c.grad', 'v.grad', each 'doubled', "
          "'unchanged' or 'None' (compared with the same backward without the hook)"),
    answer_name="predict_grads",
    answer=predict_grads,
    observe=_observe_doubling_hook,
    choices=("doubled", "unchanged", "None", "filled", "other"),
    hints=["The hook's return value replaces the gradient that flows on from v, towards a and b.",
           "c does not take part in v; and v is not a leaf."],
    explain={
        "a.grad": "the tensor the hook returns replaces v's gradient on its way back, so everything "
                  "computed from it downstream in backward (a.grad = 3 * b * 2) doubles.",
        "b.grad": "b feeds v like a does: its gradient is computed from v's (replaced) gradient, so it doubles.",
        "c.grad": "c never passes through v: the hook sees only the gradient flowing into v, so c's "
                  "gradient is untouched.",
        "v.grad": "v is an intermediate result, not a leaf: backward fills .grad only for leaves "
                  "(and for tensors that called retain_grad()), so v.grad stays None; the hook "
                  "doubled what flowed through v, not a .grad attribute.",
    },
    summary="a tensor hook's return value replaces the gradient flowing back through that tensor: "
            "here every leaf upstream of v reaches the loss only through v and doubles, the other "
            "leaf keeps its gradient, and v itself has no .grad.",
    guide="""`v.grad` "doubled" (the popular claim: `v` is not a leaf, its `.grad` stays `None`);
    `c.grad` doubled too (`c` never passes through `v`); nothing changes ("a hook only
    observes": its return value replaces the gradient).""",
)


exercise.wrong("v.grad doubles (the popular claim)",
                    {"a.grad": "doubled", "b.grad": "doubled", "c.grad": "unchanged", "v.grad": "doubled"},
                    "v is an intermediate result, not a leaf")


exercise.wrong("a hook only observes", {"a.grad": "unchanged", "b.grad": "unchanged",
                                             "c.grad": "unchanged", "v.grad": "None"}, "replaces v's gradient")


exercise.wrong("everything doubles", {"a.grad": "doubled", "b.grad": "doubled",
                                           "c.grad": "doubled", "v.grad": "None"}, "c never passes through v")
