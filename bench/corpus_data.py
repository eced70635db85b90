"""Calibration and verification data for the PyPI corpus (bench/corpus.py), made at bench time.

Every maker draws ONE sample from a numpy Generator (the caller seeds it: the same seed, the same
sample) and returns {ONNX input name: array with the model's batch axis of 1}. What they draw:

- images: rendered text lines (OCR recognizers, with rapidocr's resize-and-pad), pages with
  blocks of text lines, headings and tables (detectors, layout, orientation), natural-looking
  pictures (smooth colour fields, blobs, edges, texture) and face-like crops (a skin-coloured
  oval with eyes, brows and mouth); then each model's own normalisation and layout;
- audio: speech-like signals at 16 kHz (voiced syllables: a pitch contour with harmonics shaped
  by two or three formants, a syllable envelope, pauses, background noise), given to the model
  as a waveform, or as log-mel / log-spectrogram features computed here in numpy;
- recurrent models' state inputs: carried, i.e. the model is run in onnxruntime on the chunks
  before the sample (states start at zero), as a streaming caller would;
- text: token ids in the range of the model's embedding table (read from the ONNX file),
  masks all true but for a padded tail; byte sequences of made-up files for magika.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np

if __package__:
    from .trained_models import text
else:  # run as a script: bench/ is on sys.path
    from trained_models import text

SR = 16000
IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], np.float32)


# --- images ------------------------------------------------------------------------------------
def _smooth_field(rng, h: int, w: int, channels: int = 3, cells: int = 4) -> np.ndarray:
    """A smooth random field in [0, 1]: a few random values per axis, bicubically enlarged."""
    from PIL import Image

    planes = []
    for _ in range(channels):
        small = (rng.random((cells, cells)) * 255).astype(np.uint8)
        planes.append(np.asarray(Image.fromarray(small).resize((w, h), Image.BICUBIC)) / 255.0)
    return np.stack(planes, -1)


def photo(rng, h: int, w: int) -> np.ndarray:
    """A natural-looking RGB uint8 picture: a sky-to-ground gradient over a smooth colour
    field, a few shaded blobs and rectangles with edges, fine texture and sensor noise."""
    from PIL import Image, ImageDraw, ImageFilter

    top, bottom = rng.uniform(0, 255, 3), rng.uniform(0, 255, 3)
    ramp = np.linspace(0, 1, h)[:, None, None]
    base = top * (1 - ramp) + bottom * ramp
    base = 0.6 * base + 0.4 * 255 * _smooth_field(rng, h, w, 3, int(rng.integers(3, 7)))
    image = Image.fromarray(np.clip(base, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(image)
    for _ in range(int(rng.integers(3, 9))):
        x0, y0 = rng.integers(-w // 4, w), rng.integers(-h // 4, h)
        x1, y1 = x0 + rng.integers(w // 10, w // 2), y0 + rng.integers(h // 10, h // 2)
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        shape = draw.ellipse if rng.random() < 0.5 else draw.rectangle
        shape([int(x0), int(y0), int(x1), int(y1)], fill=colour)
    image = image.filter(ImageFilter.GaussianBlur(float(rng.uniform(0.5, 2.5))))
    pixels = np.asarray(image).astype(np.float32)
    pixels *= 0.75 + 0.5 * _smooth_field(rng, h, w, 1, 8)  # shading
    pixels += rng.normal(0, 4, pixels.shape)
    return np.clip(pixels, 0, 255).astype(np.uint8)


def face(rng, size: int) -> np.ndarray:
    """A face-like RGB uint8 crop: a skin-coloured oval filling most of it over a picture, two
    eyes with pupils, brows, a nose shadow and a mouth, softened."""
    from PIL import Image, ImageDraw, ImageFilter

    image = Image.fromarray(photo(rng, size, size))
    draw = ImageDraw.Draw(image)
    skin = tuple(int(c) for c in np.array([224, 172, 138]) * rng.uniform(0.45, 1.1))
    cx, cy = size * rng.uniform(0.42, 0.58), size * rng.uniform(0.45, 0.58)
    rx, ry = size * rng.uniform(0.3, 0.42), size * rng.uniform(0.4, 0.5)
    draw.ellipse([cx - rx, cy - ry, cx + rx, cy + ry], fill=skin)
    dark = tuple(int(c * 0.35) for c in skin)
    for side in (-1, 1):
        ex, ey = cx + side * rx * 0.42, cy - ry * 0.18
        draw.ellipse([ex - rx * 0.17, ey - ry * 0.07, ex + rx * 0.17, ey + ry * 0.07],
                     fill=(235, 235, 235))
        draw.ellipse([ex - rx * 0.07, ey - ry * 0.07, ex + rx * 0.07, ey + ry * 0.07], fill=(30, 20, 15))
        draw.line([ex - rx * 0.2, ey - ry * 0.17, ex + rx * 0.2, ey - ry * 0.2], fill=dark,
                  width=max(1, size // 30))
    draw.line([cx, cy - ry * 0.05, cx - rx * 0.08, cy + ry * 0.22], fill=dark, width=max(1, size // 40))
    draw.ellipse([cx - rx * 0.35, cy + ry * 0.38, cx + rx * 0.35, cy + ry * 0.52], fill=(150, 60, 60))
    image = image.filter(ImageFilter.GaussianBlur(size / 96))
    return text.with_noise(np.asarray(image), rng, 3.0)


def page(rng, h: int, w: int) -> np.ndarray:
    """A document-like RGB uint8 page: a heading, paragraphs of text lines in one or two
    columns, sometimes a ruled table with cell text and a grey figure."""
    from PIL import Image, ImageDraw

    paper = tuple(int(v) for v in rng.integers(215, 256, 3))
    ink = tuple(int(v) for v in rng.integers(0, 60, 3))
    image = Image.new("RGB", (w, h), paper)
    draw = ImageDraw.Draw(image)
    scale = min(h, w) / 640
    margin = int(w * rng.uniform(0.04, 0.1))
    y = int(h * rng.uniform(0.03, 0.08))
    title = text.font(max(10, int(rng.uniform(24, 36) * scale)))
    draw.text((margin, y), text.random_words(rng, 28).title(), font=title, fill=ink)
    y += int(title.size * 1.8)
    columns = 2 if rng.random() < 0.4 else 1
    gap = int(w * 0.04)
    column_w = (w - 2 * margin - (columns - 1) * gap) // columns
    body = text.font(max(8, int(rng.uniform(11, 17) * scale)))
    while y < h - 3 * body.size:
        kind = rng.random()
        if kind < 0.15 and h - y > h // 4:  # a table
            rows, cols = int(rng.integers(3, 6)), int(rng.integers(2, 5))
            cell_h, cell_w = int(body.size * 1.8), (w - 2 * margin) // cols
            for r in range(rows + 1):
                draw.line([margin, y + r * cell_h, margin + cols * cell_w, y + r * cell_h], fill=ink)
            for c in range(cols + 1):
                draw.line([margin + c * cell_w, y, margin + c * cell_w, y + rows * cell_h], fill=ink)
            for r in range(rows):
                for c in range(cols):
                    label = text.random_words(rng, max(3, cell_w // max(body.size // 2, 1) - 2))
                    draw.text((margin + c * cell_w + 4, y + r * cell_h + 3), label[:12], font=body,
                              fill=ink)
            y += rows * cell_h + body.size * 2
        elif kind < 0.25 and h - y > h // 5:  # a figure
            fh = int(rng.uniform(0.1, 0.25) * h)
            grey = int(rng.integers(120, 200))
            draw.rectangle([margin, y, margin + int(column_w * rng.uniform(0.5, 1)), y + fh],
                           fill=(grey, grey, grey))
            y += fh + body.size
        else:  # a paragraph, in each column
            lines = int(rng.integers(2, 7))
            for c in range(columns):
                x = margin + c * (column_w + gap)
                for k in range(lines):
                    line = text.random_words(rng, 60)
                    while line and body.getlength(line) > column_w:
                        line = line[:-1]
                    draw.text((x, y + k * int(body.size * 1.4)), line, font=body, fill=ink)
            y += lines * int(body.size * 1.4) + body.size
    return text.with_noise(np.asarray(image), rng, 5.0)


def text_line(rng, height: int, width: int) -> np.ndarray:
    """A rendered text line of 1-4 words, resized to `height` and padded to `width` as
    rapidocr's recognizer does: [3, height, width] in [-1, 1] (BGR order is irrelevant here)."""
    return text.resize_pad(text.render_line(text.random_words(rng, 28), height, rng), height, width)


def resized(image: np.ndarray, h: int, w: int) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.fromarray(image).resize((w, h), Image.BILINEAR))


def chw(image: np.ndarray, norm: str) -> np.ndarray:
    """uint8 [H, W, C] -> float32 [C, H, W] with the normalisation `norm`: unit (x/255),
    imagenet ((x/255 - mean) / std), signed ((x/255 - 0.5) / 0.5)."""
    x = image.astype(np.float32) / 255.0
    if norm == "imagenet":
        x = (x - IMAGENET_MEAN) / IMAGENET_STD
    elif norm == "signed":
        x = (x - 0.5) / 0.5
    return x.transpose(2, 0, 1).astype(np.float32)


def grey(image: np.ndarray) -> np.ndarray:
    return (image.astype(np.float32) @ np.array([0.299, 0.587, 0.114], np.float32))[..., None]


# --- audio -------------------------------------------------------------------------------------
def speech(rng, seconds: float) -> np.ndarray:
    """A speech-like float32 waveform in [-1, 1] at SR: voiced syllables (pitch 90-260 Hz with
    drift, harmonics weighted by two or three formants), pauses, breath noise and background
    noise at 5-35 dB SNR; sometimes (1 in 6) a steady tone with noise instead."""
    n = int(seconds * SR)
    t = np.arange(n) / SR
    if rng.random() < 1 / 6:
        signal = 0.3 * np.sin(2 * np.pi * rng.uniform(200, 3000) * t)
        return (signal + rng.normal(0, 0.02, n)).astype(np.float32)
    signal = np.zeros(n)
    pos = int(rng.integers(0, SR // 5))
    while pos < n:
        length = int(rng.uniform(0.08, 0.35) * SR)
        end = min(n, pos + length)
        k = np.arange(end - pos) / SR
        f0 = rng.uniform(90, 260) * (1 + 0.15 * np.sin(2 * np.pi * rng.uniform(1, 4) * k))
        phase = 2 * np.pi * np.cumsum(f0) / SR
        formants = rng.uniform([250, 900, 2200], [900, 2400, 3400])
        voiced = np.zeros(end - pos)
        for harmonic in range(1, 30):
            freq = harmonic * f0.mean()
            if freq > 4000:
                break
            gain = sum(np.exp(-((freq - f) / 120) ** 2) for f in formants) + 0.05
            voiced += gain / harmonic ** 0.5 * np.sin(harmonic * phase)
        envelope = np.sin(np.pi * np.arange(end - pos) / max(end - pos, 1)) ** 2
        signal[pos:end] += voiced * envelope * rng.uniform(0.3, 1.0)
        if rng.random() < 0.3:  # a fricative
            fric = min(n, end + int(0.06 * SR))
            signal[end:fric] += rng.normal(0, 0.2, fric - end) * np.hanning(fric - end)
        pos = end + int(rng.choice([0.02, 0.05, 0.1, 0.3]) * SR * rng.uniform(0.5, 1.5))
    peak = np.max(np.abs(signal)) or 1.0
    signal = signal / peak * rng.uniform(0.05, 0.7)
    noise = rng.normal(0, 1, n) * np.sqrt(np.mean(signal ** 2)) / 10 ** (rng.uniform(5, 35) / 20)
    return np.clip(signal + noise, -1, 1).astype(np.float32)


@lru_cache(maxsize=None)
def mel_filters(bands: int, n_fft: int, low: float = 20.0, high: float = SR / 2) -> np.ndarray:
    """HTK-style triangular mel filters [bands, n_fft // 2 + 1]."""
    mel = lambda f: 2595 * np.log10(1 + f / 700)  # noqa: E731
    hz = lambda m: 700 * (10 ** (m / 2595) - 1)  # noqa: E731
    edges = hz(np.linspace(mel(low), mel(high), bands + 2))
    freqs = np.linspace(0, SR / 2, n_fft // 2 + 1)
    filters = np.zeros((bands, len(freqs)))
    for b in range(bands):
        lo, mid, hi = edges[b:b + 3]
        filters[b] = np.clip(np.minimum((freqs - lo) / (mid - lo), (hi - freqs) / (hi - mid)), 0, None)
    return filters


def power_spectrogram(wave: np.ndarray, n_fft: int = 512, hop: int = 160,
                      win: int = 400) -> np.ndarray:
    """|STFT|^2 [frames, n_fft // 2 + 1], Hann window of `win` samples."""
    frames = 1 + max(0, (len(wave) - win) // hop)
    index = np.arange(win)[None, :] + hop * np.arange(frames)[:, None]
    windowed = wave[index] * np.hanning(win)
    return np.abs(np.fft.rfft(windowed, n_fft)) ** 2


def log_mel(wave: np.ndarray, bands: int, n_fft: int = 512, hop: int = 160,
            win: int = 400) -> np.ndarray:
    """Natural-log mel energies [frames, bands] (floor 1e-6)."""
    return np.log(power_spectrogram(wave, n_fft, hop, win) @ mel_filters(bands, n_fft).T + 1e-6)


def fit_frames(features: np.ndarray, frames: int) -> np.ndarray:
    """The first `frames` rows, edge-padded when there are fewer."""
    if len(features) >= frames:
        return features[:frames]
    return np.pad(features, ((0, frames - len(features)), (0, 0)), mode="edge")


# --- recurrent state ---------------------------------------------------------------------------
@lru_cache(maxsize=8)
def _session(path: str):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.intra_op_num_threads = 1
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def carried(path: Path, chunks: list[dict], states: dict[str, str]) -> dict:
    """The last of `chunks` (each {input: array}, the non-state inputs) with the state inputs
    (`states`: state input -> the output that feeds it next step) carried from running the
    earlier chunks in onnxruntime, starting from zeros."""
    session = _session(str(path))
    shapes = {i.name: i.shape for i in session.get_inputs()}
    state = {name: np.zeros([d if isinstance(d, int) else 1 for d in shapes[name]], np.float32)
             for name in states}
    for chunk in chunks[:-1]:
        outputs = dict(zip([o.name for o in session.get_outputs()],
                           session.run(None, {**chunk, **state})))
        state = {name: outputs[out].reshape(state[name].shape) for name, out in states.items()}
    return {**chunks[-1], **state}


def ort_run(path: Path, feed: dict) -> list[np.ndarray]:
    return _session(str(path)).run(None, feed)


# --- text --------------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def embedding_rows(path: str, input_name: str) -> int:
    """Rows of the embedding table the integer input `input_name` indexes (the first Gather
    reached from it through casts and reshapes), read without loading external data."""
    import onnx

    graph = onnx.load(path, load_external_data=False).graph
    initializers = {t.name: t for t in graph.initializer}
    consumers = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    frontier, seen = [input_name], set()
    while frontier:
        name = frontier.pop(0)
        for node in consumers.get(name, []):
            if node.op_type == "Gather" and node.input[1] == name and node.input[0] in initializers:
                return int(initializers[node.input[0]].dims[0])
            if node.op_type in ("Cast", "Unsqueeze", "Reshape", "Squeeze", "Flatten", "Identity",
                                "Slice", "Transpose") and node.output[0] not in seen:
                seen.add(node.output[0])
                frontier.append(node.output[0])
    raise ValueError(f"{path}: no embedding table behind input {input_name!r}")


def token_ids(rng, rows: int, length: int, low: int = 1) -> np.ndarray:
    """Zipf-like token ids in [low, rows): frequent tokens are the small ids, as in vocabularies
    sorted by frequency."""
    ids = np.minimum(rng.zipf(1.3, length) + low - 1, rows - 1)
    return ids.astype(np.int64)


_SNIPPETS = [
    b"import numpy as np\n\ndef main(argv):\n    return 0\n",
    b"<!DOCTYPE html>\n<html><head><title>Page</title></head><body><p>Hello</p></body></html>\n",
    b'{"name": "example", "version": "1.0.0", "items": [1, 2, 3], "ok": true}\n',
    b"#include <stdio.h>\nint main(void) { printf(\"hi\\n\"); return 0; }\n",
    b"id,name,value\n1,alpha,0.5\n2,beta,1.25\n3,gamma,2.0\n",
    b"# Title\n\nSome *markdown* text with a [link](http://example.com).\n",
]
_MAGIC = [b"\x89PNG\r\n\x1a\n", b"%PDF-1.7\n", b"PK\x03\x04", b"\x7fELF\x02\x01\x01", b"GIF89a",
          b"\xff\xd8\xff\xe0"]


def made_up_file(rng) -> bytes:
    """A few KB of a text file (repeated code, markup, JSON, CSV snippets) or of a binary one
    (a magic number then random or structured bytes)."""
    if rng.random() < 0.5:
        parts = [_SNIPPETS[int(rng.integers(len(_SNIPPETS)))]]
        return b"".join(parts * int(rng.integers(5, 80)))
    body = rng.integers(0, 256, int(rng.integers(1000, 6000)), dtype=np.uint8).tobytes()
    if rng.random() < 0.5:
        body = bytes(b if b % 3 else 0 for b in body)
    return _MAGIC[int(rng.integers(len(_MAGIC)))] + body


def magika_features(content: bytes, size: int = 2048, padding: int = 256) -> np.ndarray:
    """magika's v3 input: the first and the last size/2 bytes after stripping whitespace,
    padded with `padding`."""
    half = size // 2
    stripped = content.strip()
    begin = list(stripped[:half]) + [padding] * max(0, half - len(stripped))
    end = [padding] * max(0, half - len(stripped)) + list(stripped[-half:])
    return np.array(begin[:half] + end[-half:], np.int32)
