"""Rendered text: lines of words and pages of lines, drawn with Pillow's own font.

The font is the one Pillow embeds (ImageFont.load_default(size), Aileron Regular, SIL OFL), so the
images do not depend on the fonts a machine has installed. Colours, sizes and positions come from
the caller's numpy Generator: the same seed draws the same images.
"""

from __future__ import annotations

import numpy as np

WORDS = """the of and to in is was for that with as on by at from his her they this which
are be had not have one all were but their there been has when who will more no if out so
said what up its about into than them can only other new some could time these two may then
first any like now my such make over our even most made after also did many before must
through back years where much your way well down should because each just those people how
too little state good very world still own see men work long get here between both life
being under never day same another know while last might great old year off come since
against go came right used take three water house light paper river stone garden market
winter summer music number letter window table morning evening station bridge""".split()
WORD_CHARACTERS = "".join(sorted(set("".join(WORDS))))


def font(size: int):
    """Pillow's embedded TrueType font at `size` pixels (needs Pillow >= 10.1 with FreeType)."""
    from PIL import ImageFont

    chosen = ImageFont.load_default(size=size)
    if not isinstance(chosen, ImageFont.FreeTypeFont):
        raise RuntimeError("Pillow has no FreeType: its default font cannot be scaled")
    return chosen


def random_words(rng: np.random.Generator, max_chars: int) -> str:
    """Up to four words (sometimes capitalised, sometimes a number), at most max_chars long."""
    words = []
    for _ in range(int(rng.integers(1, 5))):
        if rng.random() < 0.15:
            word = str(int(rng.integers(0, 10000)))
        else:
            word = str(rng.choice(WORDS))
            word = word.capitalize() if rng.random() < 0.3 else word
        if len(" ".join(words + [word])) > max_chars:
            break
        words.append(word)
    return " ".join(words) or str(rng.choice(WORDS))


def colours(rng: np.random.Generator) -> tuple[tuple, tuple]:
    """(light background, dark ink), RGB."""
    paper = tuple(int(v) for v in rng.integers(170, 256, 3))
    ink = tuple(int(v) for v in rng.integers(0, 80, 3))
    return paper, ink


def with_noise(image: np.ndarray, rng: np.random.Generator, sigma: float = 6.0) -> np.ndarray:
    """uint8 image plus Gaussian pixel noise."""
    noisy = image.astype(np.float32) + rng.normal(0, sigma, image.shape)
    return np.clip(noisy, 0, 255).astype(np.uint8)


def render_line(text: str, height: int, rng: np.random.Generator) -> np.ndarray:
    """An RGB uint8 [height, width] crop of one text line, as a detector would cut it: the ink
    fills 60-80% of the height, a small margin around it."""
    from PIL import Image, ImageDraw

    size = int(height * rng.uniform(0.6, 0.8))
    face = font(size)
    left, top, right, bottom = face.getbbox(text)
    margin = int(rng.integers(2, 8))
    width = right - left + 2 * margin
    paper, ink = colours(rng)
    image = Image.new("RGB", (width, height), paper)
    y = (height - (bottom - top)) // 2 - top + int(rng.integers(-2, 3))
    ImageDraw.Draw(image).text((margin - left, y), text, font=face, fill=ink)
    return with_noise(np.asarray(image), rng)


def render_page(size: int, rng: np.random.Generator, lines: int) -> tuple[np.ndarray, list]:
    """An RGB uint8 [size, size] page with up to `lines` text lines that do not overlap, and
    the lines' ink boxes [(x1, y1, x2, y2)]."""
    from PIL import Image, ImageDraw

    paper, ink = colours(rng)
    image = Image.new("RGB", (size, size), paper)
    draw = ImageDraw.Draw(image)
    boxes = []
    for _ in range(lines):
        for _attempt in range(20):
            face = font(int(rng.integers(14, 30)))
            text = random_words(rng, 24)
            left, top, right, bottom = face.getbbox(text)
            if right - left >= size - 8:
                continue
            x = int(rng.integers(4, size - 4 - (right - left)))
            y = int(rng.integers(4, size - 4 - (bottom - top)))
            box = (x, y, x + right - left, y + bottom - top)
            if all(box[2] + 4 < b[0] or b[2] + 4 < box[0] or box[3] + 4 < b[1] or b[3] + 4 < box[1]
                   for b in boxes):
                draw.text((x - left, y - top), text, font=face, fill=ink)
                boxes.append(box)
                break
    return with_noise(np.asarray(image), rng), boxes


def resize_pad(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """PaddleOCR's recognizer/classifier input: the crop resized to `height` keeping its aspect
    (at most `width` wide), scaled to [-1, 1], zero-padded on the right; [3, height, width]."""
    from PIL import Image

    h, w = image.shape[:2]
    new_width = min(width, int(np.ceil(height * w / h)))
    resized = np.asarray(Image.fromarray(image).resize((new_width, height), Image.BILINEAR))
    out = np.zeros((3, height, width), np.float32)
    out[:, :, :new_width] = (resized.transpose(2, 0, 1) / 255.0 - 0.5) / 0.5
    return out
