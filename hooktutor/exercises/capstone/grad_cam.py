"""07_capstone, exercise: Grad-CAM for any layer, from a forward hook that puts a tensor hook on its output.

Half-right answers an examiner expects, by kit dimension (``kit.DIMENSIONS``):

- technique: forgets the final ReLU; sums the activation maps without weighting each channel
  by its mean gradient; differentiates the sum of all logits instead of each image's target class;
- inplace_after: keeps ``output.detach()`` without ``clone()``, which the in-place ReLU after the
  layer overwrites (hidden);
- detached: keeps (and so returns) the activation with its autograd graph (``output.clone()``
  without ``detach()``);
- left_as_found: leaves its own gradients in the model's ``.grad``, or wipes the caller's (the
  model may be halfway through a training step); lets backward accumulate into the caller's
  ``.grad`` tensors in place (alias) when it keeps references to them;
- dtype: a float64 model: the map must come back in the model's dtype;
- left_as_found (grad mode): called under ``torch.no_grad()``, the answer must switch gradients on
  for its own forward and backward (``torch.enable_grad()``) and leave the caller's mode alone;
- raises: removes the forward hook after ``model(x)``, not in ``finally:`` (hidden), or never;
- nested, nd: a layer two levels down in a model that is no Sequential; a wrong shape
  (keeps the channel dimension, ``(N, 1, h, w)``).
"""

from __future__ import annotations

import contextlib
import copy
from collections import OrderedDict

import torch
import torch.nn.functional as F
from torch import nn

from ...models import seeded, set_inplace
from .. import kit
from ..core import Exercise, Tester


def grad_cam(model, layer, x, target):
    """Grad-CAM of `layer` for class target[i] of image x[i]: a tensor (N, h, w)."""
    ### BEGIN SOLUTION
    saved = {}

    def keep(module, args, output):
        # any layer: a later in-place op may follow it
        saved["activation"] = output.detach().clone()
        output.register_hook(lambda grad: saved.__setitem__("gradient", grad.detach()))

    found = [p.grad for p in model.parameters()]   # the caller's gradients, put back below
    model.zero_grad(set_to_none=True)   # so that backward fills new tensors, not the caller's
    with torch.enable_grad():   # the caller may run us under torch.no_grad()
        handle = layer.register_forward_hook(keep)
        try:
            logits = model(x)
        finally:
            handle.remove()
        logits[torch.arange(len(x)), target].sum().backward()
    for p, grad in zip(model.parameters(), found):
        p.grad = grad
    weights = saved["gradient"].mean(dim=(2, 3))
    return F.relu((weights[:, :, None, None] * saved["activation"]).sum(dim=1))
    ### END SOLUTION


exercise = Exercise(
    "capstone.grad_cam", "Grad-CAM for any layer",
    task=("write grad_cam(model, layer, x, target) that returns the Grad-CAM of `layer` (a layer that "
          "runs once in the forward) for class target[i] of each image x[i]: a tensor (N, h, w) at the "
          "layer's resolution, in the model's dtype and without autograd history, "
          "relu(sum over channels k of mean_hw(grad_k) * activation_k), using a forward hook "
          "that registers a tensor hook on the layer's output; leave no hook attached, also when the "
          "model raises. The layer may be followed by an in-place op (a ReLU(inplace=True)): keep a copy "
          "of its output that the op cannot change. The model may be halfway through a training step: "
          "leave the .grad of its parameters as you found them. The layer's output requires grad (a "
          "parameter at or before it trains), but grad_cam may be called under torch.no_grad()"),
    hints=[
        "In a forward hook on `layer`, keep output.detach().clone() and call output.register_hook(fn) "
        "so that fn receives the gradient of that same output during backward.",
        "The score to differentiate is model(x)[torch.arange(len(x)), target].sum(): each image "
        "contributes the logit of its own target class.",
        "weights = grad.mean(dim=(2, 3)) has shape (N, C); the CAM is "
        "F.relu((weights[:, :, None, None] * act).sum(dim=1)). Remove the forward hook in a "
        "finally: right after the forward pass.",
        "Your backward must not touch the caller's gradients: keep found = [p.grad for p in "
        "model.parameters()], call model.zero_grad(set_to_none=True) so that backward fills new "
        "tensors, and after it put each p.grad back from found.",
    ],
    solution=grad_cam,
    errors={
        "does not require grad and does not have a grad_fn": (
        "no autograd graph was recorded: the caller ran grad_cam under torch.no_grad(), which switches "
        "gradients off for everything inside it. Run your forward and backward inside "
        "`with torch.enable_grad():`"),
        "cannot register a hook on a tensor that doesn't require gradient": (
        "no autograd graph was recorded: the caller ran grad_cam under torch.no_grad(), which switches "
        "gradients off for everything inside it. Run your forward and backward inside "
        "`with torch.enable_grad():`"),
    },
    equivalent_mutants={
        "copy@9: .detach() -> <dropped>": (
            "the gradient a tensor hook receives in a backward without create_graph never requires "
            "grad: detach() changes nothing"),
        "inplace@23: .relu( -> .relu_(": "the ReLU runs on a sum the function has just made: nobody else holds it",
        "keep-state@4: saved = {} (a fresh one per call) -> saved kept across calls": (
            "both hooks overwrite their key on every call (the layer runs once per forward) before "
            "anything reads it"),
    },
    guide="""forgetting the final ReLU; summing the activation maps without weighting each channel by
    its mean gradient; differentiating the sum of all logits instead of each image's target class
    (`logits[torch.arange(N), target].sum()`); leaving the forward hook attached, or removing it
    outside a `finally:`; keeping `output.detach()` without `clone()` when an in-place ReLU follows
    the layer; returning a map that still carries the autograd graph; leaving its own gradients in
    the model's `.grad`, or wiping the caller's with `model.zero_grad()` (the model may be halfway
    through a training step: keep them, zero, backward, put them back); failing under the caller's
    `torch.no_grad()` (wrap the forward and backward in `torch.enable_grad()`).""",
)


def _tiny_cnn(seed: int, *, maxpool: bool) -> nn.Sequential:
    with seeded(seed):
        if maxpool:  # the gradient differs from position to position
            return nn.Sequential(
                nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 6, 3, padding=1), nn.ReLU(),
                nn.MaxPool2d(2), nn.Flatten(), nn.Linear(6 * 4 * 4, 3))
        return nn.Sequential(
            nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 6, 3, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(6, 3))


def _cam_parts(model: nn.Module, layer: nn.Module, x: torch.Tensor, score_of):
    """Activation of `layer` and the gradient of score_of(logits) w.r.t. it, computed on a copy
    of the model with every in-place flag off (nothing overwrites the activation there)."""
    path = next(n for n, m in model.named_modules() if m is layer)
    ref = copy.deepcopy(model)
    set_inplace(ref, False)
    acts: list[torch.Tensor] = []
    handle = ref.get_submodule(path).register_forward_hook(lambda m, a, o: acts.append(o))
    try:
        logits = ref(x)
    finally:
        handle.remove()
    (grad,) = torch.autograd.grad(score_of(logits), acts[0])
    return acts[0].detach(), grad


def _check_grad_cam(answer, t: Tester, model: nn.Sequential, layer: nn.Module, x: torch.Tensor,
                    target: torch.Tensor, what: str, *, under_no_grad: bool = False) -> None:
    t.track(model, "the small CNN")
    rows = torch.arange(len(x))
    act, grad = _cam_parts(model, layer, x, lambda z: z[rows, target].sum())
    weights = grad.mean(dim=(2, 3))[:, :, None, None]
    expected = F.relu((weights * act).sum(dim=1))
    _, grad_all = _cam_parts(model, layer, x, lambda z: z.sum())
    wrong = {
        "no relu": ((weights * act).sum(dim=1),
                    "the values match before the ReLU: Grad-CAM keeps only the positive evidence, "
                    "so finish with F.relu(...)"),
        "no weights": (F.relu(act.sum(dim=1)),
                       "this is the plain sum of the activation maps: weight each channel by the "
                       "mean of its gradient over height and width first"),
        "all classes": (F.relu((grad_all.mean(dim=(2, 3))[:, :, None, None] * act).sum(dim=1)),
                        "this explains the sum of all logits: differentiate only the target class "
                        "of each image, logits[torch.arange(N), target].sum()"),
    }
    wrong["scaled"] = (expected / expected.amax(dim=(1, 2), keepdim=True).clamp_min(1e-12),
                       "the map is right but scaled to [0, 1]: return it unscaled (scaling is only "
                       "for display)")
    wrong["overwritten"] = (F.relu((weights * act.clamp(min=0)).sum(dim=1)),
                            "the activation you kept was overwritten by the in-place ReLU that follows the "
                            "layer: output.detach() shares its memory; keep output.detach().clone()")
    before = _grads(model)
    with torch.no_grad() if under_no_grad else contextlib.nullcontext(), kit.LeftAsFound(t, model), \
            kit.TensorHookWatch(layer) as hooks:
        got = answer(model, layer, x, target)
    if isinstance(got, torch.Tensor) and got.shape != expected.shape and got.dim() == 4 and got.shape[1] == 1:
        t.expect(False, what=what, expected=expected, got=got,
                 nudge=f"the shape is {tuple(got.shape)} but should be {tuple(expected.shape)}: sum over the "
                       "channels without keepdim, so the map is (N, h, w)")
    t.expect_close(got, expected, what=what, atol=1e-5, wrong=wrong,
                   nudge="compare with the three steps: mean gradient per channel, weighted sum "
                         "of the activation maps, ReLU")
    t.expect(got.dtype == expected.dtype, what=f"the dtype of {what}", expected=expected.dtype, got=got.dtype,
             nudge="the map must be in the model's dtype: compute it from the activation and the gradient "
                   "you kept, without tensors of your own in another dtype")
    kit.expect_detached(t, got, what=what)
    _expect_grads_as_found(t, model, before)
    hooks.expect_tensor_hook(t, "the layer", (
        "the map is right, but no tensor hook of yours was on the layer's output: the task is to get the "
        "gradient with output.register_hook(...) inside the layer's forward hook (not with "
        "torch.autograd.grad on a kept output, nor a full backward hook)"))


def _grads(model: nn.Module) -> dict[str, torch.Tensor | None]:
    return {n: None if p.grad is None else p.grad.detach().clone() for n, p in model.named_parameters()}


def _expect_grads_as_found(t: Tester, model: nn.Module, before: dict[str, torch.Tensor | None]) -> None:
    for name, p in model.named_parameters():
        was = before[name]
        if was is None:
            t.expect(p.grad is None, what=f"{name}.grad after grad_cam", expected=None, got=p.grad, nudge=(
                "your backward left its gradients in the model's .grad, where the next optimizer.step() "
                "would use them: put back what you found (None here)"))
        else:
            t.expect(p.grad is not None and torch.equal(p.grad, was), what=f"{name}.grad after grad_cam",
                     expected=was, got=p.grad, nudge=(
                         "the model was halfway through a training step and its .grad held the caller's "
                         "gradients; your answer changed them. Keep found = [p.grad for p in "
                         "model.parameters()], call model.zero_grad(set_to_none=True) (so that backward "
                         "fills new tensors instead of adding into the caller's), and put them back after "
                         "your backward"))


def _halfway_through_a_step(model: nn.Module, x: torch.Tensor) -> None:
    """Fill every .grad of ``model`` as a training step would (one backward of some loss)."""
    model(x).pow(2).mean().backward()


@exercise.case("a small CNN with global average pooling, the last ReLU, one class per image")
def _(answer, t: Tester) -> None:
    model = _tiny_cnn(11, maxpool=False)
    x = torch.randn(3, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    _check_grad_cam(answer, t, model, model[3], x, torch.tensor([0, 1, 2]),
                    "grad_cam(model, model[3], x, target=[0, 1, 2])")


@exercise.case("a float64 CNN with max pooling, explained at its last conv, mixed target classes")
def _(answer, t: Tester) -> None:
    model, x = kit.in_dtype(_tiny_cnn(12, maxpool=True), kit.randn(4, 1, 8, 8, seed=2))
    _check_grad_cam(answer, t, model, model[2], x, torch.tensor([2, 2, 0, 1]),
                    "grad_cam(model, model[2], x, target=[2, 2, 0, 1])")


class _NestedCNN(nn.Module):
    """``head(body(x))`` with ``body = Sequential(stem, block)``, each a Conv2d + ReLU: the layer
    to explain (``body.block.0``) sits two levels down in a model that is no Sequential."""

    def __init__(self, seed: int, *, inplace: bool = False) -> None:
        super().__init__()
        with seeded(seed):
            self.body = nn.Sequential(OrderedDict([
                ("stem", nn.Sequential(nn.Conv2d(1, 3, 3, padding=1), nn.ReLU())),
                ("block", nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(inplace=inplace))),
            ]))
            self.head = nn.Sequential(nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 3 * 3, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


@exercise.case("a nested model (not a Sequential), halfway through a training step, at a conv two levels down")
def _(answer, t: Tester) -> None:
    model = _NestedCNN(13)
    x = kit.randn(2, 1, 6, 6, seed=13)
    _halfway_through_a_step(model, kit.randn(3, 1, 6, 6, seed=31))
    _check_grad_cam(answer, t, model, model.body.block[0], x, torch.tensor([1, 0]),
                    "grad_cam(model, model.body.block[0], x, target=[1, 0])")


@exercise.case("a conv followed by ReLU(inplace=True), which overwrites the conv's output", hidden=True)
def _(answer, t: Tester) -> None:
    model = _NestedCNN(14, inplace=True)
    x = kit.randn(3, 1, 6, 6, seed=14)
    _check_grad_cam(answer, t, model, model.body.block[0], x, torch.tensor([2, 0, 1]),
                    "grad_cam(model, model.body.block[0], x, target=[2, 0, 1])")


@exercise.case("called under torch.no_grad(), as inference code often is")
def _(answer, t: Tester) -> None:
    model = _tiny_cnn(17, maxpool=False)
    x = kit.randn(2, 1, 8, 8, seed=17)
    _check_grad_cam(answer, t, model, model[3], x, torch.tensor([1, 2]),
                    "grad_cam(model, model[3], x, target=[1, 2]) under torch.no_grad()", under_no_grad=True)


@exercise.case("a model that raises halfway through its forward: the forward hook must still go", hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(kit.Raising(seed=15), "a model that raises halfway (after fc1)")
    kit.call_expecting_kit_error(answer, model, model.fc1, kit.randn(2, 4, seed=15), torch.tensor([0, 1]))
    # the leak check after this case reports a forward hook that was not removed in a finally:


# -- the wrong answers peculiar to this exercise -------------------------------------------------

def _cam(*, relu=True, weighted=True, score="target", keep="clone", remove="finally", grads="restore",
         keepdim=False, enable_grad=True):
    """One factory for the near-copy wrong answers: the final ReLU or not, the channels weighted by
    their mean gradient or not, the score differentiated ("target": each image's class, "all":
    the sum of all logits), what the forward hook keeps ("clone": output.detach().clone(),
    "detach": output.detach(), "graph": output.clone()), how it is removed ("finally", "after",
    "never"), what happens to the model's .grad ("restore": kept, zeroed, put back; "leave": ours
    left in; "wipe": model.zero_grad() afterwards; "alias": put back without zeroing first, so
    backward adds into the caller's tensors), whether the channel dimension is kept and whether the
    forward and backward run under torch.enable_grad()."""
    def answer(model, layer, x, target):
        saved = {}

        def hook(module, args, output):
            saved["act"] = {"clone": lambda: output.detach().clone(), "detach": output.detach,
                            "graph": output.clone}[keep]()
            output.register_hook(lambda g: saved.__setitem__("grad", g))

        found = [p.grad for p in model.parameters()]
        if grads == "restore":
            model.zero_grad(set_to_none=True)
        with torch.enable_grad() if enable_grad else contextlib.nullcontext():
            handle = layer.register_forward_hook(hook)
            if remove == "finally":
                try:
                    logits = model(x)
                finally:
                    handle.remove()
            else:
                logits = model(x)
                if remove == "after":
                    handle.remove()
            (logits[torch.arange(len(x)), target] if score == "target" else logits).sum().backward()
        if grads in ("restore", "alias"):
            for p, grad in zip(model.parameters(), found):
                p.grad = grad
        elif grads == "wipe":
            model.zero_grad(set_to_none=True)
        weights = saved["grad"].mean(dim=(2, 3))[:, :, None, None] if weighted else 1.0
        cam = (weights * saved["act"]).sum(dim=1, keepdim=keepdim)
        return F.relu(cam) if relu else cam
    return answer


exercise.wrong("forgets the ReLU", mentions="F.relu")(_cam(relu=False))
exercise.wrong("sums the activation maps without gradient weights", mentions="weight each channel")(
    _cam(weighted=False))
exercise.wrong("explains the sum of all classes", mentions="target class")(_cam(score="all"))
exercise.wrong("leaves the forward hook attached", mentions="still attached")(_cam(remove="never"))
exercise.wrong("keeps the channel dimension: (N, 1, h, w)", mentions="without keepdim")(_cam(keepdim=True))
exercise.wrong("keeps output.clone() with its graph", mentions="autograd history")(_cam(keep="graph"))
exercise.wrong("leaves its gradients in the model's .grad", mentions="None here")(_cam(grads="leave"))
exercise.wrong("wipes the caller's gradients with model.zero_grad()", mentions="halfway through a training step")(
    _cam(grads="wipe"))
exercise.wrong("puts the caller's .grad back without zeroing first: backward added into them",
               mentions="adding into the caller's")(_cam(grads="alias"))
exercise.wrong("fails under the caller's torch.no_grad()", mentions="torch.enable_grad()")(_cam(enable_grad=False))
exercise.wrong("keeps output.detach() without clone", mentions="overwritten by the in-place ReLU", hidden=True)(
    _cam(keep="detach"))
exercise.wrong("removes the forward hook after model(x), not in a finally:", mentions="still attached",
               hidden=True)(_cam(remove="after"))


@exercise.wrong("gets the gradient with torch.autograd.grad on a kept output, no tensor hook",
                mentions="no tensor hook of yours")
def _autograd_grad_instead(model, layer, x, target):
    saved = {}

    def keep(module, args, output):
        saved["out"] = output
        return output.clone()   # later in-place ops write into the clone

    was_training = model.training
    with torch.enable_grad(), layer.register_forward_hook(keep):
        logits = model(x)
    score = logits[torch.arange(len(x)), target].sum()
    (grad,) = torch.autograd.grad(score, saved["out"])
    model.train(was_training)
    act = saved["out"].detach()
    return F.relu((grad.mean(dim=(2, 3))[:, :, None, None] * act).sum(dim=1))


exercise.equivalent_mutants["context: no-grad"] = "its forward and backward run under torch.enable_grad() anyway"
