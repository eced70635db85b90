"""ddddocr's character detector (YOLOX) as its wheel ships it, on rendered characters.

yolox-chars: YOLOX-s-like detector for the characters of click captchas (CSP backbone with SiLU,
PAN neck, decoupled heads whose box regression, objectness and class score are concatenated into
one [1, 3549, 6] output, raw: grid offsets and log sizes at strides 8/16/32, decoded here as
ddddocr does). Input 416x416 BGR in 0..255. Data: scenes of light ellipses with 2-5 dark capital
letters or digits, 36-60 px, that do not overlap. Metric: box recall against each character's ink
box (class-agnostic: the model has one class), score = objectness x class score.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np

from . import common, text

# ddddocr 1.6.1, https://pypi.org/project/ddddocr/1.6.1/: the wheel's metadata says "License: The
# MIT License (MIT)" (classifier "License :: OSI Approved :: MIT License").
FILE = common.WheelFile("ddddocr", "1.6.1", "ddddocr/common_det.onnx",
                        "6faa8ea85a8c1a634e5050c4a138fca10f30194e0d7abbe9ade1fcd423af6ed6", "MIT")
SIZE = 416
STRIDES = (8, 16, 32)
CHARACTERS = "ABCDEFGHJKLMNPQRSTUVWXYZ2345679"
EVAL, SEED = 60, 30
SCORE_THRESHOLD = 0.1  # ddddocr's own (get_bbox: score_thr=0.1)


def scene(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(BGR float32 [3, SIZE, SIZE] in 0..255, true boxes [n, 5] (class 0, x1, y1, x2, y2))."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (SIZE, SIZE), tuple(int(v) for v in rng.integers(150, 256, 3)))
    draw = ImageDraw.Draw(image)
    for _ in range(int(rng.integers(5, 25))):
        x, y = rng.integers(-20, SIZE, 2)
        w, h = rng.integers(10, 90, 2)
        draw.ellipse([int(x), int(y), int(x + w), int(y + h)],
                     fill=tuple(int(v) for v in rng.integers(140, 256, 3)))
    boxes = []
    for _ in range(int(rng.integers(2, 6))):
        for _attempt in range(20):
            face = text.font(int(rng.integers(36, 61)))
            x, y = (int(v) for v in rng.integers(8, SIZE - 70, 2))
            character = str(rng.choice(list(CHARACTERS)))
            box = draw.textbbox((x, y), character, font=face)
            if not boxes or common.box_iou(np.array(box, float), np.array(boxes, float)).max() == 0:
                draw.text((x, y), character, font=face,
                          fill=tuple(int(v) for v in rng.integers(0, 90, 3)))
                boxes.append(box)
                break
    pixels = text.with_noise(np.asarray(image), rng, 4.0)
    truth = np.array([(0, *b) for b in boxes], np.float32).reshape(-1, 5)
    return pixels[:, :, ::-1].transpose(2, 0, 1).astype(np.float32), truth


def dataset() -> common.Dataset:
    return common.sample_dataset("yolox-chars-data", [Path(__file__), Path(text.__file__)], scene,
                                 EVAL, SEED, "images")


@lru_cache(maxsize=None)
def _grid() -> tuple[np.ndarray, np.ndarray]:
    """Each of the 3549 rows' (cell x, cell y) and stride, in YOLOX's order (stride 8 first)."""
    cells, strides = [], []
    for stride in STRIDES:
        n = SIZE // stride
        y, x = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
        cells.append(np.stack([x.ravel(), y.ravel()], 1))
        strides.append(np.full(n * n, stride))
    return np.concatenate(cells).astype(np.float32), np.concatenate(strides)[:, None]


def decode(outputs: dict) -> list:
    """YOLOX's raw rows (dx, dy, log w, log h, objectness, class score) -> boxes after nms."""
    cells, strides = _grid()
    found = []
    for rows in common.first_output(outputs)[:, 0]:
        centre = (rows[:, :2] + cells) * strides
        half = np.exp(np.minimum(rows[:, 2:4], 10)) * strides / 2
        boxes = np.concatenate([centre - half, centre + half], 1)
        found.append(common.nms(boxes, rows[:, 4] * rows[:, 5], np.zeros(len(rows), int),
                                SCORE_THRESHOLD))
    return found


SPECS = [common.Spec(
    name="yolox-chars", kind="boxes", metric=f"box recall (score {SCORE_THRESHOLD})",
    structure="YOLOX detector, head concatenates box, objectness, class score ([1, 3549, 6])",
    data_text=f"{EVAL} rendered {SIZE}x{SIZE} scenes of 2-5 characters on ellipses",
    source=FILE.describe(), onnx=lambda: common.wheel_member(FILE), data=lru_cache()(dataset),
    decode=decode)]
