"""unet-shapes: a small U-Net segmenter trained here on synthetic shapes.

Encoder of Conv-BN-ReLU pairs, each starting with a stride-2 conv (128 -> 8), a decoder that
upsamples twice with ConvTranspose and once with a bilinear Resize (as DB's FPN does),
concatenating the encoder's features at each scale, and a head as DB's: a ConvTranspose back to
full size, then a 1x1 conv and a sigmoid: output [1, 1, 128, 128], the probability that a pixel
belongs to a shape.

Data: 128x128 scenes (shapes.scene) of 1-5 shapes of all six classes, radius 8-28 px, on gradients
with clutter lines (lines are background). Training: binary cross-entropy plus soft Dice. Metric:
mask IoU of the map above 0.5 against the drawn shapes' mask.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from . import common, shapes, train

SIZE, THRESHOLD = 128, 0.5
STEPS, BATCH, LR, SEED = 1000, 16, 3e-3, 50
EVAL = 60


def sample(rng: np.random.Generator):
    image, _, mask = shapes.scene(SIZE, rng, len(shapes.CLASSES), int(rng.integers(1, 6)), (8, 28))
    return image.transpose(2, 0, 1).astype(np.float32) / 255, mask


def build():
    import torch
    from torch import nn

    def pair(c_in, c_out, stride=1):
        return nn.Sequential(nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False), nn.BatchNorm2d(c_out),
                             nn.ReLU(), nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False),
                             nn.BatchNorm2d(c_out), nn.ReLU())

    class UNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.e1, self.e2 = pair(3, 16, 2), pair(16, 32, 2)
            self.e3, self.e4 = pair(32, 48, 2), pair(48, 64, 2)
            self.u3, self.d3 = nn.ConvTranspose2d(64, 48, 2, 2), pair(96, 48)
            self.u2, self.d2 = nn.ConvTranspose2d(48, 32, 2, 2), pair(64, 32)
            self.u1 = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
            self.d1 = pair(48, 16)
            self.head = nn.Sequential(nn.ConvTranspose2d(16, 8, 2, 2), nn.ReLU(), nn.Conv2d(8, 1, 1))

        def forward(self, x):
            e1 = self.e1(x)
            e2 = self.e2(e1)
            e3 = self.e3(e2)
            d3 = self.d3(torch.cat([self.u3(self.e4(e3)), e3], 1))
            d2 = self.d2(torch.cat([self.u2(d3), e2], 1))
            d1 = self.d1(torch.cat([self.u1(d2), e1], 1))
            return torch.sigmoid(self.head(d1))

    return UNet()


def segmentation_loss(model, images, masks):
    """Binary cross-entropy plus soft Dice."""
    import torch

    target = torch.from_numpy(np.stack(masks)[:, None].astype(np.float32))
    p = model(images).clamp(1e-6, 1 - 1e-6)
    bce = torch.nn.functional.binary_cross_entropy(p, target)
    return bce + 1 - 2 * (p * target).sum() / (p.sum() + target.sum() + 1)


def decode(outputs: dict) -> list:
    return list(common.first_output(outputs)[:, 0, 0] > THRESHOLD)


RECIPE = train.Recipe("unet-shapes", (Path(__file__), Path(shapes.__file__)), sample, build,
                      segmentation_loss, STEPS, BATCH, LR, SEED, "mask")
SPECS = [train.spec(
    RECIPE, EVAL, kind="mask", metric="mask IoU",
    structure="U-Net segmenter (skip concats, ConvTranspose and bilinear upsampling, sigmoid)",
    data_text=f"{EVAL} synthetic {SIZE}x{SIZE} scenes of 1-5 shapes; truth: the drawn mask",
    decode=decode)]
