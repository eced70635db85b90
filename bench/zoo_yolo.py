"""The zoo's YOLO exports with NMS in the graph (bench/zoo.py's kind "yolonms"): a YOLOv8-style
head (convolutions to [1, 4 + classes, anchors]: centre boxes in pixels, sigmoid class scores)
with the postprocess ultralytics writes into an export with nms=True, in torch: the best class's
score and label, scores above 0.25 kept (a NonZero), the centre boxes turned into corners, and
torchvision's batched_nms (per class, by its coordinate offsets: ONNX's NonMaxSuppression, with
`if boxes.numel() == 0` an If), at most 100 kept. The exporter writes the NMS, not a script.

Random weights: the scores are continuous (no ties), the boxes spread over the image (centres a
steep sigmoid of the image side, sizes up to an eighth of it) so that NMS suppresses some and
keeps others. Runs in the zoo venvs (torch and torchvision), imported by zoo_build.build only there.
"""

from __future__ import annotations

CLASSES, SCORE, IOU, KEEP = 3, 0.25, 0.45, 100


def build(size: int):
    """(module in eval mode, example input): the head and its postprocess (module docstring)."""
    import torch
    import torchvision
    from torch import nn

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            layers, width = [], 3
            for out in (8, 16, 32):
                layers += [nn.Conv2d(width, out, 3, 2, 1), nn.BatchNorm2d(out), nn.SiLU()]
                width = out
            self.body = nn.Sequential(*layers)
            self.out = nn.Conv2d(width, 4 + CLASSES, 1)

        def forward(self, x):
            raw = self.body(x)
            raw = self.out(raw).flatten(2)  # [1, 4 + classes, anchors]
            # spread: batch-normalized features put every sigmoid near 0.5 otherwise
            centres = (4 * raw[:, :2]).sigmoid() * x.shape[-1]
            sizes = raw[:, 2:4].sigmoid() * (x.shape[-1] / 8)
            return torch.cat([centres, sizes, (3 * raw[:, 4:]).sigmoid()], 1)

    class WithNms(nn.Module):
        def __init__(self):
            super().__init__()
            self.head = Head()

        def forward(self, x):
            pred = self.head(x)[0].transpose(0, 1)  # [anchors, 4 + classes]
            scores, labels = pred[:, 4:].max(1)
            keep = scores > SCORE
            boxes, scores, labels = pred[keep, :4], scores[keep], labels[keep]
            corners = torch.cat([boxes[:, :2] - boxes[:, 2:] / 2, boxes[:, :2] + boxes[:, 2:] / 2], 1)
            kept = torchvision.ops.batched_nms(corners, scores, labels, IOU)[:KEEP]
            return corners[kept], scores[kept], labels[kept]

    model = WithNms().eval()
    with torch.no_grad():  # batch-norm statistics of seeded images: activations that vary
        model.train()
        model.head.body(torch.rand(4, 3, size, size))
        model.eval()
    return model, (torch.rand(1, 3, size, size),)
