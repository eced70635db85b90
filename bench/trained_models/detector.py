"""yolov8-shapes: a YOLOv8-style detector trained here on synthetic shapes.

The structure of an ultralytics YOLOv8 export at a small width: Conv-BN-SiLU, C2f blocks (a 1x1
conv split in two, bottlenecks, concatenation), SPPF (three chained max pools), a PAN neck,
decoupled heads at strides 8/16/32, DFL (a softmax over 8 distance bins per box side, summed by a
fixed 1x1 conv), anchor-relative decoding to (cx, cy, w, h) in input pixels, and one final
concatenation of the boxes (0..320) with the sigmoid class scores: output [1, 4 + 3, 2100].

Data: 320x320 scenes (shapes.scene) of 1-6 circles, squares and triangles, radius 10-56 px, on
gradients with clutter lines. Training: FCOS-style assignment (anchors inside a box and within
2.5 strides of its centre, at the level its size belongs to), binary cross-entropy on the class
scores, GIoU on the decoded boxes. Metric: box recall at IoU 0.5, score 0.25 (ultralytics'
default confidence), class-aware NMS at IoU 0.5.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from . import common, shapes, train

SIZE, CLASSES, STRIDES, BINS = 320, 3, (8, 16, 32), 8
LEVEL_LIMITS = (48, 96, float("inf"))  # largest box-side distance (px) each stride handles
SCORE_THRESHOLD = 0.25
STEPS, BATCH, LR, SEED = 600, 16, 3e-3, 40
EVAL = 100


def sample(rng: np.random.Generator):
    image, boxes, _ = shapes.scene(SIZE, rng, CLASSES, int(rng.integers(1, 7)), (10, 56))
    return image.transpose(2, 0, 1).astype(np.float32) / 255, boxes


def build():
    """The network (torch imported here: only training needs it)."""
    import torch
    from torch import nn

    def conv(c_in, c_out, k=3, s=1):
        return nn.Sequential(nn.Conv2d(c_in, c_out, k, s, k // 2, bias=False),
                             nn.BatchNorm2d(c_out), nn.SiLU())

    class C2f(nn.Module):
        def __init__(self, c_in, c_out, shortcut=True):
            super().__init__()
            self.half = c_out // 2
            self.cv1 = conv(c_in, c_out, 1)
            self.m = nn.Sequential(conv(self.half, self.half), conv(self.half, self.half))
            self.shortcut = shortcut
            self.cv2 = conv(c_out + self.half, c_out, 1)

        def forward(self, x):
            a, b = self.cv1(x).split(self.half, 1)
            c = self.m(b) + b if self.shortcut else self.m(b)
            return self.cv2(torch.cat([a, b, c], 1))

    class SPPF(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.cv1, self.cv2 = conv(c, c // 2, 1), conv(c * 2, c, 1)
            self.pool = nn.MaxPool2d(5, 1, 2)

        def forward(self, x):
            x = self.cv1(x)
            y1 = self.pool(x)
            y2 = self.pool(y1)
            return self.cv2(torch.cat([x, y1, y2, self.pool(y2)], 1))

    class Detector(nn.Module):
        def __init__(self):
            super().__init__()
            w = (16, 32, 48, 64)
            self.stem = nn.Sequential(conv(3, 8, 3, 2), conv(8, w[0], 3, 2), C2f(w[0], w[0]))
            self.p3 = nn.Sequential(conv(w[0], w[1], 3, 2), C2f(w[1], w[1]))
            self.p4 = nn.Sequential(conv(w[1], w[2], 3, 2), C2f(w[2], w[2]))
            self.p5 = nn.Sequential(conv(w[2], w[3], 3, 2), C2f(w[3], w[3]), SPPF(w[3]))
            self.up = nn.Upsample(scale_factor=2, mode="nearest")
            self.n4 = C2f(w[3] + w[2], w[2], False)
            self.n3 = C2f(w[2] + w[1], w[1], False)
            self.d3, self.o4 = conv(w[1], w[1], 3, 2), C2f(w[1] + w[2], w[2], False)
            self.d4, self.o5 = conv(w[2], w[2], 3, 2), C2f(w[2] + w[3], w[3], False)
            self.box = nn.ModuleList(nn.Sequential(conv(c, 32), conv(32, 32), nn.Conv2d(32, 4 * BINS, 1))
                                     for c in (w[1], w[2], w[3]))
            self.cls = nn.ModuleList(nn.Sequential(conv(c, 32), conv(32, 32), nn.Conv2d(32, CLASSES, 1))
                                     for c in (w[1], w[2], w[3]))
            for head in self.cls:  # start at score ~0.01 (the usual prior for rare positives)
                nn.init.constant_(head[-1].bias, -4.6)
            self.dfl = nn.Conv2d(BINS, 1, 1, bias=False).requires_grad_(False)
            self.dfl.weight.data[:] = torch.arange(BINS, dtype=torch.float32).view(1, BINS, 1, 1)
            anchors, strides = [], []
            for s in STRIDES:
                n = SIZE // s
                y, x = torch.meshgrid(torch.arange(n) + 0.5, torch.arange(n) + 0.5, indexing="ij")
                anchors.append(torch.stack([x.flatten(), y.flatten()]))
                strides.append(torch.full((1, n * n), float(s)))
            self.register_buffer("anchors", torch.cat(anchors, 1))  # [2, N], grid units
            self.register_buffer("strides", torch.cat(strides, 1))  # [1, N]

        def raw(self, x):
            """(box-side distances [B, 4, N] in grid units, class logits [B, classes, N])."""
            p3 = self.p3(self.stem(x))
            p4 = self.p4(p3)
            p5 = self.p5(p4)
            n4 = self.n4(torch.cat([self.up(p5), p4], 1))
            n3 = self.n3(torch.cat([self.up(n4), p3], 1))
            o4 = self.o4(torch.cat([self.d3(n3), n4], 1))
            o5 = self.o5(torch.cat([self.d4(o4), p5], 1))
            b = x.shape[0]
            levels = [torch.cat([box(f), cls(f)], 1).view(b, 4 * BINS + CLASSES, -1)
                      for f, box, cls in zip((n3, o4, o5), self.box, self.cls)]
            box, logits = torch.cat(levels, 2).split([4 * BINS, CLASSES], 1)
            bins = box.view(b, 4, BINS, -1).transpose(2, 1).softmax(1)
            return self.dfl(bins).view(b, 4, -1), logits

        def boxes(self, distances):
            """Grid-unit side distances -> (cx, cy, w, h) in pixels, as YOLOv8's dist2bbox."""
            lt, rb = distances.chunk(2, 1)
            x1y1, x2y2 = self.anchors - lt, self.anchors + rb
            return torch.cat([(x1y1 + x2y2) / 2, x2y2 - x1y1], 1) * self.strides

        def forward(self, x):
            distances, logits = self.raw(x)
            return torch.cat([self.boxes(distances), logits.sigmoid()], 1)

    return Detector()


def targets(model, truth: list):
    """Per image: (class target [classes, N], box target [4, N] as x1y1x2y2 pixels, positives
    [N] bool), by the assignment of the module docstring."""
    import torch

    centres = (model.anchors * model.strides).T  # [N, 2] pixels
    limits = torch.tensor([LEVEL_LIMITS[STRIDES.index(int(s))] for s in model.strides[0]])
    lower = torch.tensor([([0.0] + list(LEVEL_LIMITS))[STRIDES.index(int(s))]
                          for s in model.strides[0]])
    out = []
    for boxes in truth:
        n = centres.shape[0]
        cls_t, box_t, positive = torch.zeros(CLASSES, n), torch.zeros(4, n), torch.zeros(n, dtype=torch.bool)
        if len(boxes):
            g = torch.from_numpy(boxes)
            sides = torch.cat([centres[None] - g[:, None, 1:3], g[:, None, 3:5] - centres[None]], 2)
            middle = (g[:, None, 1:3] + g[:, None, 3:5]) / 2
            near = ((centres[None] - middle).abs() <= 2.5 * model.strides[0][None, :, None]).all(2)
            largest = sides.max(2).values
            fits = (sides.min(2).values > 0) & near & (largest > lower) & (largest <= limits)
            area = ((g[:, 3] - g[:, 1]) * (g[:, 4] - g[:, 2]))[:, None].expand_as(fits)
            area = torch.where(fits, area, torch.full_like(area, float("inf")))
            best = area.argmin(0)
            positive = fits.any(0)
            cls_t[g[best, 0].long(), torch.arange(n)] = positive.float()
            box_t = g[best, 1:].T
        out.append((cls_t, box_t, positive))
    return out


def giou(a, b):
    """Generalized IoU of boxes a, b [4, n] (x1, y1, x2, y2)."""
    import torch

    inter = ((torch.min(a[2], b[2]) - torch.max(a[0], b[0])).clamp(min=0)
             * (torch.min(a[3], b[3]) - torch.max(a[1], b[1])).clamp(min=0))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    hull = ((torch.max(a[2], b[2]) - torch.min(a[0], b[0]))
            * (torch.max(a[3], b[3]) - torch.min(a[1], b[1])))
    return inter / union.clamp(min=1e-6) - (hull - union) / hull.clamp(min=1e-6)


def detection_loss(model, images, truth):
    """Class BCE over every anchor plus 2 x (1 - GIoU) over the positives, per positive."""
    import torch

    distances, logits = model.raw(images)
    centre, size = model.boxes(distances).split(2, 1)
    predicted = torch.cat([centre - size / 2, centre + size / 2], 1)
    total, positives = 0, 0
    for k, (cls_t, box_t, positive) in enumerate(targets(model, truth)):
        total = total + torch.nn.functional.binary_cross_entropy_with_logits(
            logits[k], cls_t, reduction="sum")
        if positive.any():
            total = total + 2 * (1 - giou(predicted[k][:, positive], box_t[:, positive])).sum()
            positives += int(positive.sum())
    return total / max(positives, 1)


def decode(outputs: dict) -> list:
    """[K, 1, 4 + classes, N] -> per image the boxes after class-aware NMS."""
    found = []
    for rows in common.first_output(outputs)[:, 0]:
        centre, size, scores = rows[:2].T, rows[2:4].T, rows[4:].T
        boxes = np.concatenate([centre - size / 2, centre + size / 2], 1)
        found.append(common.nms(boxes, scores.max(1), scores.argmax(1), SCORE_THRESHOLD))
    return found


RECIPE = train.Recipe("yolov8-shapes", (Path(__file__), Path(shapes.__file__)), sample, build,
                      detection_loss, STEPS, BATCH, LR, SEED, "output0")
SPECS = [train.spec(
    RECIPE, EVAL, kind="boxes", metric=f"box recall (score {SCORE_THRESHOLD})",
    structure="YOLOv8-style detector (C2f, SPPF, PAN, DFL), head concat of 0..320 boxes and scores",
    data_text=f"{EVAL} synthetic {SIZE}x{SIZE} scenes of 1-6 circles/squares/triangles",
    decode=decode)]
