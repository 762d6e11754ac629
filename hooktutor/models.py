"""Small seeded models for the lessons: built in milliseconds, identical on every machine.

Every factory takes a ``seed`` and builds its weights from it without touching the global
random state, so creating a model in one cell never changes what another cell draws.

* :class:`MLP` — a few ``Linear``/``ReLU`` layers with readable names (lessons 01–04).
* :class:`SmallCNN` — ``Conv -> BatchNorm -> ReLU`` blocks with an ``inplace`` switch for
  its ReLUs (lesson 05, the hook lab, the capstone).
* :class:`TwoInputNet` — a module called with two tensors and a keyword argument
  (lessons 02 and 04: what ``args`` and ``grad_input`` contain).
* :class:`BasicBlock` — torchvision's ResNet basic block, tiny: one in-place ``self.relu``
  called twice and ``out += identity`` (lessons 02 and 05: what ResNet feature extractors
  meet). :class:`TinyResNet` — a stem, two such blocks, a pool and a classifier.
* :func:`deep_mlp` — a 20+ layer network for the benchmarks.
* :class:`TinyTransformer` — token and position embeddings, two ``nn.TransformerEncoderLayer``
  blocks and an unembedding, trained in about a second by :func:`train_first_token` to copy
  the first token to the last position (``10_transformer_hooks.ipynb``).

Taught in ``00_start_here.ipynb`` (the map of models) and used throughout.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Run the block with ``torch.manual_seed(seed)`` and restore the global RNG after."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


class MLP(nn.Sequential):
    """``fc1 -> act1 -> fc2 -> act2 -> head``: a two-hidden-layer perceptron.

    Works with :func:`hooktutor.data.blobs`. ``forward_with_intermediates`` returns every
    layer's output without any hook, the reference that recorded activations must match
    (``02_forward_hooks.ipynb``).
    """

    def __init__(self, in_features: int = 8, hidden: int = 16, out_features: int = 3,
                 *, seed: int = 0):
        with seeded(seed):
            super().__init__(OrderedDict([
                ("fc1", nn.Linear(in_features, hidden)),
                ("act1", nn.ReLU()),
                ("fc2", nn.Linear(hidden, hidden)),
                ("act2", nn.ReLU()),
                ("head", nn.Linear(hidden, out_features)),
            ]))

    def forward_with_intermediates(self, x: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The output and a dict ``name -> output`` of every layer, computed without hooks.

        The outputs themselves, not copies: they stay part of the autograd graph (the checks of
        ``01_tensor_hooks.ipynb`` differentiate with respect to them), which is safe because
        ``MLP``'s layers never write in place. Swap in ``nn.ReLU(inplace=True)`` and an entry is
        overwritten by the next layer; ``SmallCNN``'s version returns clones for that reason.
        """
        inter: dict[str, torch.Tensor] = {}
        for name, layer in self.named_children():
            x = layer.forward(x)  # .forward, so even hooks someone attached stay silent
            inter[name] = x
        return x, inter


class SmallCNN(nn.Module):
    """A VGG/ResNet-style CNN for 1x16x16 images with an ``inplace`` switch for its ReLUs.

    ``features`` is ``Conv2d(1,8) BatchNorm2d ReLU MaxPool2d Conv2d(8,16) ReLU``, so layer
    names read ``features.0`` ... ``features.5``; then ``pool`` (global average) and
    ``classifier`` (``Linear(16, num_classes)``). With ``inplace=True`` both ReLUs overwrite
    their input, the setting of many torchvision models and the subject of
    ``05_inplace_relu_pitfall.ipynb``. Flip it later with :func:`set_inplace`.
    """

    def __init__(self, num_classes: int = 3, *, inplace: bool = False, seed: int = 0):
        super().__init__()
        with seeded(seed):
            self.features = nn.Sequential(
                nn.Conv2d(1, 8, kernel_size=3, padding=1),
                nn.BatchNorm2d(8),
                nn.ReLU(inplace=inplace),
                nn.MaxPool2d(2),
                nn.Conv2d(8, 16, kernel_size=3, padding=1),
                nn.ReLU(inplace=inplace),
            )
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.classifier = nn.Linear(16, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        x = self.pool(x).flatten(1)
        return self.classifier(x)

    def forward_with_intermediates(self, x: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The logits and clones of every layer's output, computed without hooks.

        Clones, because with ``inplace=True`` a later ReLU would overwrite an output kept
        by reference: the very trap of lesson 05.
        """
        inter: dict[str, torch.Tensor] = {}
        for i, layer in enumerate(self.features):
            x = layer.forward(x)
            inter[f"features.{i}"] = x.detach().clone()
        x = self.pool.forward(x)
        inter["pool"] = x.detach().clone()
        x = self.classifier.forward(x.flatten(1))
        inter["classifier"] = x.detach().clone()
        return x, inter


class TwoInputNet(nn.Module):
    """``forward(a, b, *, scale=1.0)``: two tensor inputs and a keyword argument.

    Computes ``scale * (mix(a) + 10 * b)``; lessons 02 and 04 use it to show which
    arguments a hook sees (``args`` holds positional arguments only) and what
    ``grad_input`` holds.
    """

    def __init__(self, features: int = 2, *, seed: int = 0):
        super().__init__()
        with seeded(seed):
            self.mix = nn.Linear(features, features)

    def forward(self, a: torch.Tensor, b: torch.Tensor, *, scale: float = 1.0) -> torch.Tensor:
        return scale * (self.mix(a) + 10 * b)


def _conv3x3(in_channels: int, out_channels: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_channels, out_channels, kernel_size=3, stride=stride, padding=1, bias=False)


class BasicBlock(nn.Module):
    """torchvision's ResNet ``BasicBlock``, rebuilt without torchvision and small (4 channels).

    ``conv1 -> bn1 -> relu -> conv2 -> bn2``, then ``out += identity`` (the input, or
    ``downsample(x)``, a 1x1 conv and a BatchNorm, when the stride or the channel count changes)
    and ``relu`` again. As in torchvision, ``self.relu`` is **one** ``nn.ReLU(inplace=True)``
    module called twice, so a hook on it fires twice per forward; and ``+=`` and the second
    ReLU write into ``bn2``'s output, so an ``output.detach()`` stored by a hook on ``bn2``
    changes under it. Lessons ``02_forward_hooks.ipynb`` (a dict keyed by module name keeps
    only the second call) and ``05_inplace_relu_pitfall.ipynb`` (the overwritten ``detach()``)
    teach both. Input: ``(N, in_channels, H, W)``, e.g. ``(2, 4, 8, 8)``.
    """

    def __init__(self, in_channels: int = 4, channels: int = 4, stride: int = 1, *, seed: int = 0):
        super().__init__()
        with seeded(seed):
            self.conv1 = _conv3x3(in_channels, channels, stride)
            self.bn1 = nn.BatchNorm2d(channels)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = _conv3x3(channels, channels)
            self.bn2 = nn.BatchNorm2d(channels)
            self.downsample: nn.Sequential | None = None
            if stride != 1 or in_channels != channels:
                self.downsample = nn.Sequential(
                    nn.Conv2d(in_channels, channels, kernel_size=1, stride=stride, bias=False),
                    nn.BatchNorm2d(channels),
                )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x
        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)
        out = self.conv2(out)
        out = self.bn2(out)
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        out = self.relu(out)
        return out

    def forward_with_intermediates(self, x: torch.Tensor) -> tuple[torch.Tensor, dict]:
        """The output and clones of every step, computed without hooks (``.forward`` calls).

        Keys: ``"conv1"``, ``"bn1"``, ``("relu", 0)``, ``"conv2"``, ``"bn2"``,
        ``"downsample"`` (when there is one), ``"add"`` (``bn2 + identity``) and
        ``("relu", 1)``: the two calls of the one ReLU are told apart by their index, as
        ``capture``'s ``rec["relu", 0]`` does. Clones, because the block overwrites
        ``bn1``'s and ``bn2``'s outputs in place.
        """
        inter: dict = {}

        def keep(key, t: torch.Tensor) -> torch.Tensor:
            inter[key] = t.detach().clone()
            return t

        out = keep("conv1", self.conv1.forward(x))
        out = keep("bn1", self.bn1.forward(out))
        out = keep(("relu", 0), self.relu.forward(out))
        out = keep("conv2", self.conv2.forward(out))
        out = keep("bn2", self.bn2.forward(out))
        identity = x
        if self.downsample is not None:
            for layer in self.downsample:
                identity = layer.forward(identity)
            keep("downsample", identity)
        out += identity
        keep("add", out)
        out = keep(("relu", 1), self.relu.forward(out))
        return out, inter


class TinyResNet(nn.Module):
    """A ResNet in miniature for ``(N, 1, H, W)`` images (e.g. :func:`hooktutor.data.shapes`).

    torchvision's names: ``conv1 -> bn1 -> relu`` (the stem, its ReLU in place), ``layer1``
    (``BasicBlock(4, 4)`` and ``BasicBlock(4, 8, stride=2)`` with a downsample), ``avgpool``
    and ``fc``, so hooks read ``layer1.0.relu``, ``layer1.1.bn2``... Block ``i`` is built
    with ``seed + 1 + i``: ``TinyResNet(seed=0).layer1[0]`` has the weights of
    ``BasicBlock(seed=1)``.
    """

    def __init__(self, num_classes: int = 3, *, seed: int = 0):
        super().__init__()
        with seeded(seed):
            self.conv1 = _conv3x3(1, 4)
            self.bn1 = nn.BatchNorm2d(4)
            self.relu = nn.ReLU(inplace=True)
            self.layer1 = nn.Sequential(BasicBlock(4, 4, seed=seed + 1),       # their own seeds,
                                        BasicBlock(4, 8, stride=2, seed=seed + 2))  # stream unchanged
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(8, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer1(x)
        return self.fc(self.avgpool(x).flatten(1))


def deep_mlp(depth: int = 24, width: int = 64, in_features: int = 8, out_features: int = 3,
             *, seed: int = 0) -> nn.Sequential:
    """A ``depth``-layer ``Linear``/``ReLU`` stack (``2 * depth + 1`` leaf modules).

    Used by ``benchmarks/`` and by the capstone's vanishing-gradient hunt.
    """
    if depth < 1:
        raise ValueError(f"depth must be at least 1, got {depth}")
    with seeded(seed):
        layers: list[nn.Module] = [nn.Linear(in_features, width), nn.ReLU()]
        for _ in range(depth - 1):
            layers += [nn.Linear(width, width), nn.ReLU()]
        layers.append(nn.Linear(width, out_features))
        return nn.Sequential(*layers)


def inplace_modules(model: nn.Module) -> list[str]:
    """Qualified names of every module that has ``inplace=True`` (ReLU, ReLU6, Dropout...).

    Taught in ``05_inplace_relu_pitfall.ipynb``.
    """
    return [name for name, m in model.named_modules() if getattr(m, "inplace", False) is True]


def set_inplace(model: nn.Module, inplace: bool) -> list[str]:
    """Switch every module with an ``inplace`` attribute to ``inplace``; return their names.

    Taught in ``05_inplace_relu_pitfall.ipynb``.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"set_inplace() needs an nn.Module, got {type(model).__name__}")
    changed = []
    for name, m in model.named_modules():
        if isinstance(getattr(m, "inplace", None), bool):
            m.inplace = bool(inplace)
            changed.append(name)
    return changed


class TokenAndPosition(nn.Module):
    """``tok(tokens) + pos(0, 1, ..., L-1)``: the residual stream that enters a transformer's
    first block. Input ``(N, length)`` token ids, output ``(N, length, width)``."""

    def __init__(self, vocab: int, length: int, width: int):
        super().__init__()
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(length, width)
        # a buffer, not torch.arange(L, device=...) in forward: torch.fx before 2.2 cannot trace that
        self.register_buffer("positions", torch.arange(length), persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.tok(tokens) + self.pos(self.positions)  # sequences of exactly `length` tokens


class TinyTransformer(nn.Module):
    """A transformer small enough to train in about a second on one CPU core.

    ``embed`` (:class:`TokenAndPosition`) -> ``blocks.0`` -> ``blocks.1`` -> ``unembed``:
    each block is a plain ``nn.TransformerEncoderLayer`` (``width`` 32, 2 heads, no dropout,
    ``batch_first=True``, ReLU), so in eval mode under ``torch.no_grad()`` or
    ``torch.inference_mode()`` it may take PyTorch's fused fast path, and hooks on its
    submodules (``blocks.0.self_attn``, ``blocks.0.linear1``...) see what that allows.
    Input ``(N, L)`` token ids, output ``(N, L, vocab)`` logits, one prediction per position;
    :func:`hooktutor.data.first_token` reads the last one. Taught in
    ``10_transformer_hooks.ipynb`` (cache, patch, steer).
    """

    def __init__(self, vocab: int = 4, length: int = 6, width: int = 32, heads: int = 2, blocks: int = 2,
                 *, seed: int = 0):
        super().__init__()
        with seeded(seed):
            self.embed = TokenAndPosition(vocab, length, width)
            self.blocks = nn.ModuleList([
                nn.TransformerEncoderLayer(width, heads, dim_feedforward=2 * width, dropout=0.0, batch_first=True)
                for _ in range(blocks)])
            self.unembed = nn.Linear(width, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens)
        for block in self.blocks:
            h = block(h)
        return self.unembed(h)


def train_first_token(model: nn.Module, tokens: torch.Tensor, targets: torch.Tensor, *, steps: int = 40,
                      lr: float = 0.01) -> list[float]:
    """Train ``model`` in place to predict ``targets`` at the last position; return the losses.

    ``steps`` full-batch Adam steps, no randomness: the same start gives the same model. Adam
    is written out (the textbook update, ``betas=(0.9, 0.999)``) because the first
    ``torch.optim`` optimizer of a process imports ``torch._dynamo``, about a second, longer
    than this whole training. The model is left in eval mode. ``10_transformer_hooks.ipynb``.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    first = [torch.zeros_like(p) for p in params]
    second = [torch.zeros_like(p) for p in params]
    beta1, beta2, eps = 0.9, 0.999, 1e-8
    model.train()
    losses = []
    for step in range(1, steps + 1):
        model.zero_grad()
        loss = nn.functional.cross_entropy(model(tokens)[:, -1], targets)
        loss.backward()
        with torch.no_grad():
            for p, m, v in zip(params, first, second):
                m.mul_(beta1).add_(p.grad, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                denom = (v / (1 - beta2 ** step)).sqrt_().add_(eps)
                p.addcdiv_(m, denom, value=-lr / (1 - beta1 ** step))
        losses.append(loss.item())
    model.eval()
    return losses
