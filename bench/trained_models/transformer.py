"""vit-digits and vit-digits-var: a small transformer encoder trained here on handwritten digits.

A ViT at toy scale, every part written in primitive ops so that the export keeps them: a 2x2
stride-2 conv as patch embedding (8x8 image -> 16 tokens of width 48) plus a learned position
embedding, two pre-norm encoder blocks (multi-head self-attention with 4 heads as MatMul, scale,
Softmax, MatMul; an MLP with exact GELU, which the export writes as Erf arithmetic), a final
LayerNorm, mean over the tokens and a dense layer: logits [1, 10].

LayerNorm is written out (mean, subtract, square, mean, add epsilon, sqrt, divide, scale, shift).
vit-digits computes the variance as mean((x - mean(x))^2); vit-digits-var as
mean(x^2) - mean(x)^2, a form some exporters and hand-written models use: the two are equal in
float, but the second subtracts two large, nearly equal quantities.

Data: scikit-learn's copy of the UCI handwritten digits (1797 8x8 images, 0..16), read from the
scikit-learn wheel without installing it: 360 seeded test images are the evaluation set, the
calibration images come from the other 1437, which are the training set. Pixels / 16. Training:
cross-entropy, the images shifted by up to a pixel. Metric: accuracy.
"""

from __future__ import annotations

import gzip
from functools import lru_cache
from pathlib import Path

import numpy as np

from . import common, train

# scikit-learn 1.9.1, https://pypi.org/project/scikit-learn/1.9.1/: the wheel's metadata says
# "License-Expression: BSD-3-Clause"; the data are the UCI "Optical Recognition of Handwritten
# Digits" test set (Alpaydin and Kaynak, CC BY 4.0), as sklearn/datasets/descr/digits.rst says.
# The wheel is platform-specific; the member's bytes are the same in every one.
DIGITS = common.WheelFile("scikit-learn", "1.9.1", "sklearn/datasets/data/digits.csv.gz",
                          "09f66e6debdee2cd2b5ae59e0d6abbb73fc2b0e0185d2e1957e9ebb51e23aa22",
                          "BSD-3-Clause; data CC BY 4.0")
TEST, WIDTH, HEADS, BLOCKS = 360, 48, 4, 2
STEPS, BATCH, LR, SEED = 3000, 64, 2e-3, 70


@lru_cache(maxsize=None)
def digits() -> tuple[np.ndarray, np.ndarray]:
    """(images [1797, 1, 8, 8] float32 in [0, 1], labels [1797])."""
    with gzip.open(common.wheel_member(DIGITS), "rt") as f:
        table = np.loadtxt(f, delimiter=",", dtype=np.float32)
    return (table[:, :64] / 16).reshape(-1, 1, 8, 8), table[:, 64].astype(np.int64)


def split() -> tuple[np.ndarray, np.ndarray]:
    """(training indices, test indices), seeded."""
    order = np.random.default_rng(SEED).permutation(len(digits()[1]))
    return order[TEST:], order[:TEST]


def build(variance_of_squares: bool):
    import torch
    from torch import nn

    class LayerNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight, self.bias = nn.Parameter(torch.ones(WIDTH)), nn.Parameter(torch.zeros(WIDTH))

        def forward(self, x):
            mean = x.mean(-1, keepdim=True)
            if variance_of_squares:
                variance = x.pow(2).mean(-1, keepdim=True) - mean.pow(2)
            else:
                variance = (x - mean).pow(2).mean(-1, keepdim=True)
            return (x - mean) / torch.sqrt(variance + 1e-5) * self.weight + self.bias

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1, self.norm2 = LayerNorm(), LayerNorm()
            self.qkv, self.proj = nn.Linear(WIDTH, 3 * WIDTH), nn.Linear(WIDTH, WIDTH)
            self.mlp = nn.Sequential(nn.Linear(WIDTH, 2 * WIDTH), nn.GELU(), nn.Linear(2 * WIDTH, WIDTH))

        def forward(self, x):
            b, n, _ = x.shape
            q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, HEADS, -1).permute(2, 0, 3, 1, 4)
            weights = torch.softmax(q @ k.transpose(-2, -1) * (WIDTH // HEADS) ** -0.5, -1)
            x = x + self.proj((weights @ v).transpose(1, 2).reshape(b, n, WIDTH))
            return x + self.mlp(self.norm2(x))

    class ViT(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Conv2d(1, WIDTH, 2, 2)
            self.position = nn.Parameter(torch.randn(1, 16, WIDTH) * 0.02)
            self.blocks = nn.Sequential(*[Block() for _ in range(BLOCKS)])
            self.norm, self.head = LayerNorm(), nn.Linear(WIDTH, 10)

        def forward(self, x):
            tokens = self.embed(x).flatten(2).transpose(1, 2) + self.position
            return self.head(self.norm(self.blocks(tokens)).mean(1))

    return ViT()


@lru_cache(maxsize=None)
def _padded_training() -> tuple[np.ndarray, np.ndarray]:
    """The training images zero-padded by a pixel each side, and their labels."""
    images, labels = digits()
    training = split()[0]
    return np.pad(images[training], ((0, 0), (0, 0), (1, 1), (1, 1))), labels[training]


def sample(rng: np.random.Generator):
    """A random training image shifted by up to a pixel each way (the data are few), its label."""
    padded, labels = _padded_training()
    k = int(rng.integers(len(labels)))
    y, x = rng.integers(0, 3, 2)
    return padded[k, :, y:y + 8, x:x + 8], int(labels[k])


def cross_entropy(model, images, labels):
    import torch

    return torch.nn.functional.cross_entropy(model(images), torch.tensor(labels))


@lru_cache(maxsize=None)
def dataset() -> common.Dataset:
    """The test split and calibration images from the training split (the digits are cached as
    files; the split takes no time)."""
    images, labels = digits()
    training, test = split()
    calibration = images[training[:common.CALIBRATION_SAMPLES]]
    return common.Dataset({"image": calibration[:, None]}, {"image": images[test][:, None]},
                          [int(k) for k in labels[test]])


def _spec(name: str, variance_of_squares: bool) -> common.Spec:
    recipe = train.Recipe(name, (Path(__file__),), sample, lambda: build(variance_of_squares),
                          cross_entropy, STEPS, BATCH, LR, SEED, "logits")
    variance = "mean(x^2) - mean^2" if variance_of_squares else "mean((x - mean)^2)"
    return train.spec(
        recipe, TEST, data=dataset, kind="labels", metric="accuracy",
        structure=f"transformer encoder, LayerNorm variance as {variance}, GELU, softmax attention",
        data_text=f"{TEST} held-out 8x8 handwritten digits (UCI via scikit-learn)",
        source=f"trained here (torch {train.TORCH_VERSION}; digits from the {DIGITS.describe()})",
        decode=common.argmax_labels)


SPECS = [_spec("vit-digits", False), _spec("vit-digits-var", True)]
