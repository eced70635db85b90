"""Synthetic shapes drawn with Pillow: scenes for the detector and the segmenter, single-shape
crops for the classifier.

A shape is a filled circle or polygon of a random colour, size and rotation. Backgrounds are a
random light-to-dark gradient with pixel noise and thin random lines (clutter that is not an
object), so that neither the colour nor the brightness alone gives an object away.
"""

from __future__ import annotations

import math

import numpy as np

CLASSES = ("circle", "square", "triangle", "star", "cross", "hexagon")


def outline(kind: str, cx: float, cy: float, r: float, angle: float) -> list[tuple]:
    """The shape's vertices (a circle: its bounding box corners, for ImageDraw.ellipse)."""
    if kind == "circle":
        return [(cx - r, cy - r), (cx + r, cy + r)]
    if kind == "star":  # five points, inner radius 0.45 r
        radii = [r if i % 2 == 0 else 0.45 * r for i in range(10)]
    elif kind == "cross":  # a plus sign: twelve vertices at two radii
        radii = [r, r, 0.42 * r] * 4
        angles = [a + b for a in range(0, 360, 90) for b in (-22.8, 22.8, 45)]
        return [(cx + rad * math.cos(math.radians(t + angle)),
                 cy + rad * math.sin(math.radians(t + angle))) for rad, t in zip(radii, angles)]
    else:
        radii = [r] * {"square": 4, "triangle": 3, "hexagon": 6}[kind]
    step = 360 / len(radii)
    return [(cx + rad * math.cos(math.radians(angle + i * step)),
             cy + rad * math.sin(math.radians(angle + i * step))) for i, rad in enumerate(radii)]


def draw_shape(draws: list, kind: str, cx: float, cy: float, r: float, angle: float,
               fills: list) -> tuple[float, float, float, float]:
    """Draws the shape on each ImageDraw with its fill; returns its bounding box."""
    points = outline(kind, cx, cy, r, angle)
    for draw, fill in zip(draws, fills):
        if kind == "circle":
            draw.ellipse(points, fill=fill)
        else:
            draw.polygon(points, fill=fill)
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    return min(xs), min(ys), max(xs), max(ys)


def _colour(rng: np.random.Generator) -> tuple:
    return tuple(int(v) for v in rng.integers(0, 256, 3))


def background(size: int, rng: np.random.Generator):
    """A Pillow RGB image: a gradient between two random colours plus clutter lines."""
    from PIL import Image, ImageDraw

    a, b = rng.integers(0, 256, (2, 3)).astype(np.float32)
    ramp = a + (b - a) * np.linspace(0, 1, size, dtype=np.float32)[:, None]  # [size, 3]
    ramp = ramp.astype(np.uint8)[:, None, :] if rng.random() < 0.5 else ramp.astype(np.uint8)[None]
    image = Image.fromarray(np.ascontiguousarray(np.broadcast_to(ramp, (size, size, 3))))
    draw = ImageDraw.Draw(image)
    for _ in range(int(rng.integers(2, 8))):
        x1, y1, x2, y2 = (int(v) for v in rng.integers(0, size, 4))
        draw.line([(x1, y1), (x2, y2)], fill=_colour(rng), width=int(rng.integers(1, 4)))
    return image


def noisy(image, rng: np.random.Generator) -> np.ndarray:
    """The Pillow image as uint8 [H, W, 3] with Gaussian pixel noise (sigma 8)."""
    pixels = np.asarray(image, np.float32)
    pixels += 8 * rng.standard_normal(pixels.shape, dtype=np.float32)
    return np.clip(pixels, 0, 255, out=pixels).astype(np.uint8)


def scene(size: int, rng: np.random.Generator, classes: int, count: int,
          radius: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(RGB uint8 [size, size, 3], boxes [n, 5] (class, x1, y1, x2, y2), mask [size, size] bool
    of every shape's pixels) with up to `count` shapes of the first `classes` CLASSES, radii in
    `radius`, whose boxes do not touch."""
    from PIL import Image, ImageDraw

    image = background(size, rng)
    mask = Image.new("L", (size, size), 0)
    draws = [ImageDraw.Draw(image), ImageDraw.Draw(mask)]
    boxes = []
    for _ in range(count):
        for _attempt in range(20):
            r = float(rng.uniform(*radius))
            cx, cy = (float(v) for v in rng.uniform(r, size - r, 2))
            if any(cx + r + 3 > b[1] and b[3] + 3 > cx - r and cy + r + 3 > b[2] and b[4] + 3 > cy - r
                   for b in boxes):  # the circle around the shape would touch a box
                continue
            label = int(rng.integers(classes))
            box = draw_shape(draws, CLASSES[label], cx, cy, r, float(rng.uniform(0, 360)),
                             [_colour(rng), 255])
            boxes.append((label, *box))
            break
    boxes = np.array(boxes, np.float32).reshape(-1, 5)
    boxes[:, 1:] = np.clip(boxes[:, 1:], 0, size)
    return noisy(image, rng), boxes, np.asarray(mask) > 127


def crop(size: int, rng: np.random.Generator) -> tuple[np.ndarray, int]:
    """(RGB uint8 [size, size, 3] with one shape of any class near the centre, its class)."""
    from PIL import ImageDraw

    image = background(size, rng)
    label = int(rng.integers(len(CLASSES)))
    r = size * rng.uniform(0.22, 0.42)
    cx, cy = size / 2 + rng.uniform(-0.1, 0.1, 2) * size
    draw_shape([ImageDraw.Draw(image)], CLASSES[label], cx, cy, r, float(rng.uniform(0, 360)),
               [_colour(rng)])
    return noisy(image, rng), label
