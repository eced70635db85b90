"""crnn-text: a CRNN text-line recognizer with CTC, trained here on rendered lines.

The classic CRNN: a VGG-like conv stack (ReLU, batch norm, max pools that halve the height but,
after the first two, not the width) that turns a 32x160 grayscale line into 40 columns of 128
features, a bidirectional LSTM of 64 units per direction, a dense layer and a softmax over the
blank and 63 characters: output [1, 40, 64], decoded greedily (best path) as PaddleOCR does.

Data: lines of 1-4 words (text.random_words: common English words, some capitalised, some
numbers, at most 12 characters) rendered by text.render_line at height 32, resized to 32 px high
keeping the aspect, at most 160 wide, zero-padded on the right, pixels in [0, 1] with the ink
high. Training: CTC loss. Metric: exact line match.
"""

from __future__ import annotations

import string
from pathlib import Path

import numpy as np

from . import common, text, train

HEIGHT, WIDTH, MAX_CHARS = 32, 160, 12
ALPHABET = list(string.digits + string.ascii_lowercase + string.ascii_uppercase + " ")
STEPS, BATCH, LR, SEED = 3000, 32, 2e-3, 80
EVAL = 200


def sample(rng: np.random.Generator):
    """(grayscale [1, HEIGHT, WIDTH] float32, the line's text)."""
    from PIL import Image

    words = text.random_words(rng, MAX_CHARS)
    line = text.render_line(words, HEIGHT, rng).mean(2)
    width = min(WIDTH, int(np.ceil(HEIGHT * line.shape[1] / line.shape[0])))
    resized = np.asarray(Image.fromarray(line.astype(np.uint8)).resize((width, HEIGHT), Image.BILINEAR))
    image = np.zeros((1, HEIGHT, WIDTH), np.float32)
    image[0, :, :width] = 1 - resized / 255.0
    return image, words


def build():
    import torch
    from torch import nn

    def conv(c_in, c_out, norm=False):
        return [nn.Conv2d(c_in, c_out, 3, 1, 1, bias=not norm)] + \
            ([nn.BatchNorm2d(c_out)] if norm else []) + [nn.ReLU()]

    class CRNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.cnn = nn.Sequential(
                *conv(1, 32), nn.MaxPool2d(2), *conv(32, 64), nn.MaxPool2d(2),
                *conv(64, 96, True), *conv(96, 96), nn.MaxPool2d((2, 1)),
                *conv(96, 128, True), nn.MaxPool2d((2, 1)),
                nn.Conv2d(128, 128, (2, 1)), nn.ReLU())  # height 32 -> 1, width 160 -> 40
            self.rnn = nn.LSTM(128, 64, bidirectional=True, batch_first=True)
            self.fc = nn.Linear(128, len(ALPHABET) + 1)

        def logits(self, x):
            columns = self.cnn(x).squeeze(2).transpose(1, 2)  # [B, 40, 128]
            return self.fc(self.rnn(columns)[0])

        def forward(self, x):
            return torch.softmax(self.logits(x), -1)

    return CRNN()


def ctc_loss(model, images, labels):
    import torch

    log_probs = torch.log_softmax(model.logits(images), -1).transpose(0, 1)  # [T, B, C]
    targets = torch.tensor([ALPHABET.index(c) + 1 for words in labels for c in words])
    lengths = torch.tensor([len(words) for words in labels])
    steps = torch.full((len(labels),), log_probs.shape[0], dtype=torch.long)
    return torch.nn.functional.ctc_loss(log_probs, targets, steps, lengths, zero_infinity=True)


def decode(outputs: dict) -> list:
    return [common.ctc_greedy(p[0], ALPHABET) for p in common.first_output(outputs)]


RECIPE = train.Recipe("crnn-text", (Path(__file__), Path(text.__file__)), sample, build, ctc_loss,
                      STEPS, BATCH, LR, SEED, "probabilities")
SPECS = [train.spec(
    RECIPE, EVAL, kind="text", metric="exact lines",
    structure="CRNN recognizer (VGG-like convs, bidirectional LSTM, CTC softmax)",
    data_text=f"{EVAL} rendered 32x{WIDTH} lines of 1-4 words", decode=decode)]
