"""Lesson 10's transformer and its task: seeded, quick to train, and what the lesson asserts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hooktutor import data, models

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def trained():
    tokens, answers = data.first_token(256, seed=0)
    model = models.TinyTransformer(seed=0)
    losses = models.train_first_token(model, tokens, answers, steps=40)
    return model, losses


def test_first_token_enumerates_every_sequence_or_draws_distinct_ones():
    every, answers = data.first_token()
    assert every.shape == (4 ** 6, 6) and every.dtype == torch.long
    assert torch.equal(answers, every[:, 0]) and every[0].tolist() == [0] * 6 and every[-1].tolist() == [3] * 6
    some, _ = data.first_token(256, seed=0)
    assert len({tuple(r) for r in some.tolist()}) == 256
    assert torch.equal(some, data.first_token(256, seed=0)[0])
    assert not torch.equal(some, data.first_token(256, seed=1)[0])
    assert data.first_token(vocab=3, length=2)[0].shape == (9, 2)


@pytest.mark.parametrize("call, message", [
    (lambda: data.first_token(0), "n must be between"),
    (lambda: data.first_token(vocab=1), "at least 2"),
])
def test_bad_task_arguments(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_corrupt_first_changes_the_first_token_only_and_never_to_itself():
    tokens, _ = data.first_token()
    bad = data.corrupt_first(tokens, seed=3)
    assert bool((bad[:, 0] != tokens[:, 0]).all()) and torch.equal(bad[:, 1:], tokens[:, 1:])
    assert set(bad[:, 0].tolist()) == {0, 1, 2, 3}
    assert torch.equal(bad, data.corrupt_first(tokens, seed=3))


def test_the_model_is_seeded_named_like_the_lesson_and_leaves_the_global_rng_alone():
    torch.manual_seed(7)
    expected = torch.rand(1)
    torch.manual_seed(7)
    a, b = models.TinyTransformer(seed=1), models.TinyTransformer(seed=1)
    assert torch.rand(1) == expected
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert [n for n, _ in a.named_children()] == ["embed", "blocks", "unembed"]
    assert isinstance(a.get_submodule("blocks.0"), torch.nn.TransformerEncoderLayer)
    assert a(data.first_token(3)[0]).shape == (3, 6, 4)


def test_training_is_deterministic_and_perfect_with_a_wide_margin(trained):
    model, losses = trained  # how long it takes (the lesson wants about a second): benchmarks/check_times.py
    assert not model.training and losses[-1] < 0.01
    again = models.TinyTransformer(seed=0)
    assert models.train_first_token(again, *data.first_token(256, seed=0), steps=40) == losses
    every, truth = data.first_token()
    with torch.no_grad():
        last = model(every)[:, -1]
    right = last.gather(1, truth[:, None]).squeeze(1)
    margin = right - last.scatter(1, truth[:, None], float("-inf")).max(dim=1).values
    assert bool((margin > 1.0).all()), "every answer must win by a wide margin (the lesson prints a count)"


def test_train_first_token_does_not_import_dynamo():
    """The reason it writes Adam out: the first torch.optim optimizer imports torch._dynamo (a second).
    Run in a fresh process, where nothing else imported it before."""
    code = ("import sys; from hooktutor import data, models; "
            "models.train_first_token(models.TinyTransformer(seed=0), *data.first_token(8), steps=1); "
            "print('torch._dynamo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.stdout.strip() == "False", out.stderr


def test_patching_finds_the_first_token_where_the_lesson_says(trained):
    from hooktutor.widgets.patching import cache_outputs, patched_logits, recovery

    model = trained[0]
    clean = data.first_token(64, seed=1)[0]
    corrupt = data.corrupt_first(clean, seed=1)
    names = ["embed", "blocks.0", "blocks.1"]
    clean_logits, cache = cache_outputs(model, clean, names)
    with torch.no_grad():
        corrupt_logits = model(corrupt)
    grid = torch.tensor([[recovery(patched_logits(model, corrupt, model.get_submodule(n), p, cache[n]),
                                   clean_logits, corrupt_logits, clean[:, 0], corrupt[:, 0]) for p in range(6)]
                         for n in names])
    high = grid > 0.9
    assert high.nonzero().tolist() == [[0, 0], [1, 0], [2, 5]]
    assert bool((grid[~high].abs() < 0.1).all())
