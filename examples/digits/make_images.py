"""Writes examples/digits/images/: the 100 calibration digits of digits_calibration.npz as 8x8
grayscale PNGs, the folder of pictures a user would have (`make demo` calibrates from it).

Pixels are the model's input in [0, 1] times 255, rounded: calibration from the folder scales
them back to [0, 1], within 1/510 of the arrays. Run: .venv/bin/python examples/digits/make_images.py
"""

import os

import numpy as np
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> None:
    folder = os.path.join(HERE, "images")
    os.makedirs(folder, exist_ok=True)
    with np.load(os.path.join(HERE, "digits_calibration.npz")) as data:
        digits = data["image"][:, 0, 0]  # N x 8 x 8
    for k, digit in enumerate(digits):
        pixels = np.round(digit * 255).astype(np.uint8)
        Image.fromarray(pixels).save(os.path.join(folder, f"digit-{k:03d}.png"), optimize=True)


if __name__ == "__main__":
    main()
