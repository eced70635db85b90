"""mnv3-shapes: a MobileNetV3-small-style classifier trained here on synthetic shapes.

A HardSwish stem, inverted-residual blocks (1x1 expansion, depthwise 3x3 or 5x5, optional
squeeze-excitation: global average pool, 1x1 conv, ReLU, 1x1 conv, HardSigmoid, multiply; 1x1
projection, residual when the shape allows), ReLU in the early blocks and HardSwish in the late
ones, a 1x1 conv, global pooling and two dense layers: logits [1, 6]. PP-LCNet is built from the
same parts.

Data: 64x64 crops (shapes.crop) of one circle, square, triangle, star, cross or hexagon, any
colour, size and rotation, on gradients with clutter lines. Training: cross-entropy. Metric:
accuracy.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from . import common, shapes, train

SIZE = 64
STEPS, BATCH, LR, SEED = 2000, 64, 3e-3, 60
EVAL = 300
# (input channels, expansion, output channels, kernel, stride, squeeze-excitation, HardSwish)
BLOCKS = [(16, 16, 16, 3, 2, True, False), (16, 64, 24, 3, 2, False, False),
          (24, 72, 24, 3, 1, False, False), (24, 96, 40, 5, 2, True, True),
          (40, 120, 40, 5, 1, True, True), (40, 144, 48, 5, 1, True, True)]


def sample(rng: np.random.Generator):
    image, label = shapes.crop(SIZE, rng)
    return image.transpose(2, 0, 1).astype(np.float32) / 255, label


def build():
    import torch
    from torch import nn

    class SqueezeExcite(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.reduce, self.expand = nn.Conv2d(c, c // 4, 1), nn.Conv2d(c // 4, c, 1)

        def forward(self, x):
            scale = torch.relu(self.reduce(x.mean((2, 3), keepdim=True)))
            return x * nn.functional.hardsigmoid(self.expand(scale))

    class InvertedResidual(nn.Module):
        def __init__(self, c_in, expand, c_out, k, stride, se, hswish):
            super().__init__()
            act = nn.Hardswish if hswish else nn.ReLU
            layers = [nn.Conv2d(c_in, expand, 1, bias=False), nn.BatchNorm2d(expand), act(),
                      nn.Conv2d(expand, expand, k, stride, k // 2, groups=expand, bias=False),
                      nn.BatchNorm2d(expand), act()]
            layers += [SqueezeExcite(expand)] if se else []
            layers += [nn.Conv2d(expand, c_out, 1, bias=False), nn.BatchNorm2d(c_out)]
            self.body = nn.Sequential(*layers)
            self.residual = stride == 1 and c_in == c_out

        def forward(self, x):
            return x + self.body(x) if self.residual else self.body(x)

    return nn.Sequential(
        nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.Hardswish(),
        *[InvertedResidual(*block) for block in BLOCKS],
        nn.Conv2d(48, 144, 1, bias=False), nn.BatchNorm2d(144), nn.Hardswish(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(144, 128), nn.Hardswish(),
        nn.Linear(128, len(shapes.CLASSES)))


def cross_entropy(model, images, labels):
    import torch

    return torch.nn.functional.cross_entropy(model(images), torch.tensor(labels))


RECIPE = train.Recipe("mnv3-shapes", (Path(__file__), Path(shapes.__file__)), sample, build,
                      cross_entropy, STEPS, BATCH, LR, SEED, "logits")
SPECS = [train.spec(
    RECIPE, EVAL, kind="labels", metric="accuracy",
    structure="MobileNetV3-small-style classifier (HardSwish, depthwise, squeeze-excitation)",
    data_text=f"{EVAL} synthetic {SIZE}x{SIZE} crops of 6 shape classes",
    decode=common.argmax_labels)]
