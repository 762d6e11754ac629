"""Right answers to the exercises of lessons 00-03 that are not the reference solution: each must
pass (review r00-03 X1, X2). The wrong answers are registered in the exercise files and proved
rejected by tests/test_exercises.py."""

from __future__ import annotations

import torch

from hooktutor.exercises import forward_hooks, tensor_hooks


def clip_hook_like_clip_grad_norm(max_norm):
    """torch.nn.utils.clip_grad_norm_'s own formula: grad * min(max_norm / (norm + 1e-6), 1)."""
    def hook(grad):
        if grad is None:
            return None
        clip_coef = max_norm / (grad.norm() + 1e-6)
        return grad * torch.clamp(clip_coef, max=1.0)
    return hook


def clip_hook_returning_grad_when_small(max_norm):
    """Returns grad itself (not None) to keep a small gradient: the same gradient."""
    def hook(grad):
        if grad is None:
            return None
        norm = torch.linalg.vector_norm(grad)
        return grad * (max_norm / norm) if norm > max_norm else grad
    return hook


def test_clip_hook_accepts_torchs_documented_formula_and_returning_grad():
    for answer in (clip_hook_like_clip_grad_norm, clip_hook_returning_grad_when_small):
        report = tensor_hooks.clip_hook.check(answer, hidden=True)
        assert report.passed, repr(report)


def test_clip_hook_like_torch_matches_clip_grad_norm_itself():
    """The formula the check accepts is the one clip_grad_norm_ applies (one tensor, float64)."""
    g = torch.tensor([0.0, 6.0, 8.0], dtype=torch.float64)
    p = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    p.grad = g.clone()
    torch.nn.utils.clip_grad_norm_([p], max_norm=1.0)
    assert torch.equal(clip_hook_like_clip_grad_norm(1.0)(g), p.grad)


ATTACH_SGD_WITH_OPTIMIZERS = '''
import torch
from hooktutor.exercises import tensor_hooks as ex

def attach_sgd(model, lr):          # one plain torch.optim.SGD per trainable parameter
    handles = []
    for p in model.parameters():
        if not p.requires_grad:
            continue
        opt = torch.optim.SGD([p], lr=lr)
        def step(param, opt=opt):
            opt.step()
            opt.zero_grad(set_to_none=True)
        handles.append(p.register_post_accumulate_grad_hook(step))
    return handles

report = ex.attach_sgd.check(attach_sgd, hidden=True)
assert report.passed, repr(report)
print("passed")
'''


def test_attach_sgd_accepts_torch_optim_sgd_in_a_fresh_process(in_a_process_of_its_own):
    """In a fresh process the first optimizer step imports torch._dynamo (seconds on a busy
    machine): the check must not call that an endless loop."""
    assert in_a_process_of_its_own(ATTACH_SGD_WITH_OPTIMIZERS).strip().endswith("passed")


def extract_features_with_handle_contexts(model, x, names):
    """The handles as context managers (lesson 00) and a dict comprehension: right too."""
    from contextlib import ExitStack
    features = {name: [] for name in names}
    with ExitStack() as stack:
        for name in names:
            stack.enter_context(model.get_submodule(name).register_forward_hook(
                lambda m, a, o, name=name: features[name].append(o.detach().clone())))
        model(x)
    return features


def test_extract_features_accepts_handles_as_context_managers():
    report = forward_hooks.extract_features.check(extract_features_with_handle_contexts, hidden=True)
    assert report.passed, repr(report)
