"""07_capstone, exercise: capstone.grad_cam."""

from __future__ import annotations

import copy
from collections import OrderedDict

import torch
import torch.nn.functional as F
from torch import nn

from ...models import seeded, set_inplace
from .. import kit
from ..core import Exercise, Tester, learners_hooks


def grad_cam(model, layer, x, target):
    """Grad-CAM of `layer` for class target[i] of image x[i]: a tensor (N, h, w)."""
    ### BEGIN SOLUTION
    saved = {}

    def keep(module, args, output):
        saved["activation"] = output.detach().clone()   # any layer: a later in-place op may follow it
        output.register_hook(lambda grad: saved.__setitem__("gradient", grad.detach()))

    handle = layer.register_forward_hook(keep)
    try:
        logits = model(x)
    finally:
        handle.remove()
    logits[torch.arange(len(x)), target].sum().backward()
    model.zero_grad(set_to_none=True)
    weights = saved["gradient"].mean(dim=(2, 3))
    return F.relu((weights[:, :, None, None] * saved["activation"]).sum(dim=1))
    ### END SOLUTION


exercise = Exercise(
    "capstone.grad_cam", "Grad-CAM for any layer",
    task=("write grad_cam(model, layer, x, target) that returns the Grad-CAM of `layer` for "
          "class target[i] of each image x[i]: a tensor (N, h, w) at the layer's resolution, "
          "relu(sum over channels k of mean_hw(grad_k) * activation_k), using a forward hook "
          "that registers a tensor hook on the layer's output; leave no hook attached and no .grad on "
          "the model's parameters, and return a map that holds no autograd graph. The layer may "
          "be followed by an in-place op (a ReLU(inplace=True)): keep a copy of its output that the "
          "op cannot change"),
    hints=[
        "In a forward hook on `layer`, keep output.detach() and call output.register_hook(fn) "
        "so that fn receives the gradient of that same output during backward.",
        "The score to differentiate is model(x)[torch.arange(len(x)), target].sum(): each image "
        "contributes the logit of its own target class.",
        "weights = grad.mean(dim=(2, 3)) has shape (N, C); the CAM is "
        "F.relu((weights[:, :, None, None] * act).sum(dim=1)). Remove the forward hook in a "
        "finally: right after the forward pass.",
    ],
    solution=grad_cam,
    equivalent_mutants={
        "copy@8: .detach() -> <dropped>": (
            "a gradient that reaches a hook does not require grad (no create_graph here), and "
            "autograd never writes into it after the hook ran, so the copy changes no value"
        ),
        "inplace@18: .relu( -> .relu_(": (
            "F.relu_ works on the fresh tensor the weighted sum just made, which nothing else "
            "holds"
        ),
        "keep-state@4: saved = {} (a fresh one per call) -> saved kept across calls": (
            "every call writes both entries before it reads them"),
    },
    guide="""forgetting the final ReLU; summing the activation maps without weighting each channel by its
    mean gradient; differentiating the sum of all logits instead of each image's target
    class (`logits[torch.arange(N), target].sum()`); leaving the forward hook attached.""",
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
                    target: torch.Tensor, what: str) -> None:
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
    found = kit.LeftAsFound(t, model, grads=True).__enter__()
    got = answer(model, layer, x, target)
    if isinstance(got, torch.Tensor) and got.shape != expected.shape and got.dim() == 4 and got.shape[1] == 1:
        t.expect(False, what=what, expected=expected, got=got,
                 nudge=f"the shape is {tuple(got.shape)} but should be {tuple(expected.shape)}: sum over the "
                       "channels without keepdim, so the map is (N, h, w)")
    t.expect_close(got, expected, what=what, atol=1e-5, wrong=wrong,
                   nudge="compare with the three steps: mean gradient per channel, weighted sum "
                         "of the activation maps, ReLU")
    kit.expect_detached(t, got, what=what)
    found.expect_as_found()


@exercise.case("a small CNN with global average pooling, the last ReLU, one class per image")
def _(answer, t: Tester) -> None:
    model = _tiny_cnn(11, maxpool=False)
    x = torch.randn(3, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    _check_grad_cam(answer, t, model, model[3], x, torch.tensor([0, 1, 2]),
                    "grad_cam(model, model[3], x, target=[0, 1, 2])")


@exercise.case("a CNN with max pooling, explained at its last conv, mixed target classes")
def _(answer, t: Tester) -> None:
    model = _tiny_cnn(12, maxpool=True)
    x = torch.randn(4, 1, 8, 8, generator=torch.Generator().manual_seed(2))
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


@exercise.case("a nested model (not a Sequential), explained at a conv two levels down")
def _(answer, t: Tester) -> None:
    model = _NestedCNN(13)
    x = kit.randn(2, 1, 6, 6, seed=13)
    _check_grad_cam(answer, t, model, model.body.block[0], x, torch.tensor([1, 0]),
                    "grad_cam(model, model.body.block[0], x, target=[1, 0])")


@exercise.case("a conv followed by ReLU(inplace=True), which overwrites the conv's output", hidden=True)
def _(answer, t: Tester) -> None:
    model = _NestedCNN(14, inplace=True)
    x = kit.randn(3, 1, 6, 6, seed=14)
    _check_grad_cam(answer, t, model, model.body.block[0], x, torch.tensor([2, 0, 1]),
                    "grad_cam(model, model.body.block[0], x, target=[2, 0, 1])")


def _cam(*, relu=True, weighted=True, target_only=True, remove="finally", copy=True, keepdim=False):
    """One factory for the near-copy wrong answers: each keyword is one way to get Grad-CAM half
    right (no ReLU, no gradient weights, every class's score, a hook removed without finally or
    never, a bare detach() of the activation, the channel dimension kept)."""
    def answer(model, layer, x, target):
        saved = {}

        def keep(module, args, output):
            saved["act"] = output.detach().clone() if copy else output.detach()
            output.register_hook(lambda g: saved.__setitem__("grad", g.detach()))

        handle = layer.register_forward_hook(keep)
        if remove == "finally":
            try:
                logits = model(x)
            finally:
                handle.remove()
        else:
            logits = model(x)
            if remove == "after":
                handle.remove()
        score = logits[torch.arange(len(x)), target].sum() if target_only else logits.sum()
        score.backward()
        model.zero_grad(set_to_none=True)
        weights = saved["grad"].mean(dim=(2, 3)) if weighted else torch.ones(saved["act"].shape[:2])
        cam = (weights[:, :, None, None] * saved["act"]).sum(dim=1, keepdim=keepdim)
        return F.relu(cam) if relu else cam
    return answer


exercise.wrong("forgets the ReLU", mentions="ReLU")(_cam(relu=False))
exercise.wrong("sums the activation maps without gradient weights", mentions="weight each channel")(
    _cam(weighted=False))
exercise.wrong("explains the sum of all classes", mentions="target class")(_cam(target_only=False))
exercise.wrong("leaves the forward hook attached", mentions="still attached")(_cam(remove="never"))
exercise.wrong("keeps the channel dimension: (N, 1, h, w)", mentions="without keepdim")(_cam(keepdim=True))
exercise.wrong("keeps output.detach() without clone", mentions="overwritten by the in-place ReLU",
               hidden=True)(_cam(copy=False))


class _RaisesAfter(nn.Module):
    """A conv, then an error: what a model that fails halfway does to a hook on the conv."""

    def __init__(self) -> None:
        super().__init__()
        with seeded(12):
            self.conv = nn.Conv2d(1, 2, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.conv(x)
        raise kit.KitError("the model failed after its conv")


@exercise.case("a model that raises after the hooked conv: no hook may stay", hidden=True)
def _(answer, t: Tester) -> None:
    model = t.track(_RaisesAfter(), "a model that raises after its conv")
    kit.call_expecting_kit_error(answer, model, model.conv, torch.ones(1, 1, 4, 4), torch.tensor([0]))
    left = learners_hooks(model, include_global=True)
    t.expect(not left, what="hooks left on the model after it raised", expected="none", got=f"{len(left)} hook(s)",
             nudge="model(x) raised and your forward hook stayed: remove it in the finally: block of a try: "
                   "around model(x)")
