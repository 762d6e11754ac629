"""Synthetic data made on the fly: no downloads, the same tensors on every machine.

* :func:`shapes` — 1x16x16 images of squares, circles and crosses with labels, for
  :class:`hooktutor.models.SmallCNN`.
* :func:`blobs` — Gaussian clusters in a few dimensions, for :class:`hooktutor.models.MLP`.
* :func:`batches` — shuffled mini-batches, for the capstone's short training run.
* :func:`first_token` — token sequences whose answer is their first token, to be read at the
  last position (information has to move), and :func:`corrupt_first` — the same sequences
  with another first token; for :class:`hooktutor.models.TinyTransformer` (lesson 10).

Taught in ``00_start_here.ipynb``; used throughout.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import torch

SHAPE_NAMES: tuple[str, ...] = ("square", "circle", "cross")


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(int(seed))


def shapes(n: int = 64, *, size: int = 16, noise: float = 0.1, seed: int = 0
           ) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` images ``(n, 1, size, size)`` of one white shape on black, and their labels.

    Labels index :data:`SHAPE_NAMES`: 0 square (filled), 1 circle (ring), 2 cross. Each
    shape has a random position and size; Gaussian noise of std ``noise`` is added. Classes
    are balanced and interleaved (label ``i % 3``).
    """
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    if size < 8:
        raise ValueError(f"size must be at least 8 pixels, got {size}")
    g = _generator(seed)
    labels = torch.arange(n) % len(SHAPE_NAMES)
    images = torch.zeros(n, 1, size, size)
    yy, xx = torch.meshgrid(torch.arange(size, dtype=torch.float32),
                            torch.arange(size, dtype=torch.float32), indexing="ij")
    for i in range(n):
        r = float(torch.randint(size // 5, size // 3 + 1, (1,), generator=g))
        cy, cx = (float(v) for v in torch.randint(int(r) + 1, size - int(r) - 1, (2,), generator=g))
        label = int(labels[i])
        if label == 0:
            mask = ((yy - cy).abs() <= r) & ((xx - cx).abs() <= r)
        elif label == 1:
            d = ((yy - cy) ** 2 + (xx - cx) ** 2).sqrt()
            mask = (d <= r + 0.5) & (d >= r - 1.5)
        else:
            mask = (((yy - cy).abs() <= 1) & ((xx - cx).abs() <= r)) | \
                   (((xx - cx).abs() <= 1) & ((yy - cy).abs() <= r))
        images[i, 0] = mask.float()
    images += noise * torch.randn(images.shape, generator=g)
    return images, labels


def blobs(n: int = 96, *, features: int = 8, classes: int = 3, spread: float = 1.0,
          seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` points ``(n, features)`` around ``classes`` random centres, and their labels."""
    if n < 1 or features < 1 or classes < 1:
        raise ValueError("n, features and classes must all be at least 1")
    g = _generator(seed)
    centres = 3.0 * torch.randn(classes, features, generator=g)
    labels = torch.arange(n) % classes
    points = centres[labels] + spread * torch.randn(n, features, generator=g)
    return points, labels


def batches(x: torch.Tensor, y: torch.Tensor, batch_size: int = 32, *, seed: int = 0,
            shuffle: bool = True) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Mini-batches of ``(x, y)``, shuffled by ``seed`` (one pass over the data)."""
    if len(x) != len(y):
        raise ValueError(f"x and y differ in length: {len(x)} vs {len(y)}")
    order = torch.randperm(len(x), generator=_generator(seed)) if shuffle else torch.arange(len(x))
    for start in range(0, len(x), batch_size):
        idx = order[start:start + batch_size]
        yield x[idx], y[idx]


def first_token(n: int | None = None, *, vocab: int = 4, length: int = 6, seed: int = 0
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Token sequences ``(n, length)`` (ids below ``vocab``) and their answer, the first token.

    ``n=None`` gives every sequence, ``vocab ** length`` of them (4096 by default), in
    lexicographic order; an ``n`` gives that many distinct ones, drawn by ``seed``. A model
    that answers at the last position must move the first token there: the task of
    ``10_transformer_hooks.ipynb``.
    """
    if vocab < 2 or length < 2:
        raise ValueError(f"vocab and length must be at least 2, got {vocab} and {length}")
    every = torch.tensor(list(itertools.product(range(vocab), repeat=length)), dtype=torch.long)
    if n is not None:
        if not 1 <= n <= len(every):
            raise ValueError(f"n must be between 1 and {len(every)}, got {n}")
        every = every[torch.randperm(len(every), generator=_generator(seed))[:n]]
    return every, every[:, 0].clone()


def corrupt_first(tokens: torch.Tensor, *, vocab: int = 4, seed: int = 0) -> torch.Tensor:
    """A copy of ``tokens`` whose first token is replaced by another one (never the same),
    drawn by ``seed``: the corrupted run of activation patching (``10_transformer_hooks.ipynb``)."""
    shift = 1 + torch.randint(0, vocab - 1, (len(tokens),), generator=_generator(seed))
    out = tokens.clone()
    out[:, 0] = (tokens[:, 0] + shift) % vocab
    return out
