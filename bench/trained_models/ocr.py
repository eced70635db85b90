"""PaddleOCR's PP-OCRv4 models as the rapidocr-onnxruntime wheel ships them, on rendered text.

- ppocr-det: PP-OCRv4 mobile text detector (DB: a PP-LCNet backbone with HardSwish and
  squeeze-excitation, an FPN, a ConvTranspose head ending in a sigmoid probability map), on
  320x320 pages of 1-6 rendered lines. Metric: mask IoU of the map above 0.3 (rapidocr's `thresh`)
  against DB's own training target, each line's ink box shrunk by DB's rule (offset
  area * (1 - 0.4^2) / perimeter): the ground truth made with the page, not the float model's map.
- ppocr-rec: PP-OCRv4 mobile recognizer (SVTR_LCNet: PP-LCNetV3 blocks with HardSwish, an SVTR
  neck with multi-head attention and LayerNorm written in primitive ops, CTC head with softmax
  over 6625 classes), on 48x320 crops of rendered lines of 1-4 words. Metric: exact line match
  after greedy CTC decoding (the dictionary is the model's own `character` metadata).
- ppocr-cls: PP-OCR mobile v2.0 text-direction classifier (MobileNetV3-small-like: HardSwish,
  squeeze-excitation with HardSigmoid, softmax over 0/180 degrees), on 48x192 line crops, half of
  them turned upside down. Metric: accuracy.

Preprocessing follows rapidocr: BGR, (pixel / 255 - 0.5) / 0.5, crops resized to the input
height and zero-padded on the right.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
import onnx

from . import common, text

# rapidocr-onnxruntime 1.4.4, https://pypi.org/project/rapidocr-onnxruntime/1.4.4/: the wheel's
# metadata says "License: Apache-2.0"; the models are PaddleOCR's (Apache-2.0), converted by
# RapidOCR (see the MODEL_LICENSES.md of the rapidocr wheel).
PACKAGE, VERSION, LICENSE = "rapidocr-onnxruntime", "1.4.4", "Apache-2.0"
FILES = {
    "det": common.WheelFile(PACKAGE, VERSION, "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
                            "d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9",
                            LICENSE),
    "rec": common.WheelFile(PACKAGE, VERSION, "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
                            "48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b",
                            LICENSE),
    "cls": common.WheelFile(PACKAGE, VERSION,
                            "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
                            "e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c",
                            LICENSE),
}
PAGE = 320  # the detector's input: PAGE x PAGE
REC_SHAPE, CLS_SHAPE = (48, 320), (48, 192)
DB_THRESHOLD, DB_SHRINK = 0.3, 0.4
EVAL = {"det": 60, "rec": 200, "cls": 200}
SEEDS = {"det": 21, "rec": 22, "cls": 23}


def _bgr_normalized(image: np.ndarray) -> np.ndarray:
    """RGB uint8 [H, W, 3] -> [3, H, W] float32 BGR in [-1, 1]."""
    return ((image[:, :, ::-1] / 255.0 - 0.5) / 0.5).transpose(2, 0, 1).astype(np.float32)


def shrunk_mask(boxes: list, size: int) -> np.ndarray:
    """DB's probability-map target: each box shrunk by area * (1 - r^2) / perimeter."""
    mask = np.zeros((size, size), bool)
    for x1, y1, x2, y2 in boxes:
        w, h = x2 - x1, y2 - y1
        d = w * h * (1 - DB_SHRINK ** 2) / (2 * (w + h))
        mask[int(round(y1 + d)):int(round(y2 - d)), int(round(x1 + d)):int(round(x2 - d))] = True
    return mask


def _page(rng):
    image, boxes = text.render_page(PAGE, rng, int(rng.integers(1, 7)))
    return _bgr_normalized(image), shrunk_mask(boxes, PAGE)


def _line(rng):
    words = text.random_words(rng, 16)
    return text.resize_pad(text.render_line(words, REC_SHAPE[0], rng), *REC_SHAPE)[::-1], words


def _turned_line(rng):
    image = text.render_line(text.random_words(rng, 16), CLS_SHAPE[0], rng)
    label = int(rng.random() < 0.5)
    if label:
        image = np.ascontiguousarray(image[::-1, ::-1])
    return text.resize_pad(image, *CLS_SHAPE)[::-1], label


MAKERS = {"det": _page, "rec": _line, "cls": _turned_line}


@lru_cache(maxsize=None)
def dataset(task: str) -> common.Dataset:
    return common.sample_dataset(f"ppocr-{task}-data", [Path(__file__), Path(text.__file__)],
                                 MAKERS[task], EVAL[task], SEEDS[task], "x")


@lru_cache(maxsize=None)
def alphabet() -> list[str]:
    """The recognizer's classes after the blank: its `character` metadata, then a space."""
    proto = onnx.load(str(common.wheel_member(FILES["rec"])), load_external_data=False)
    characters = {p.key: p.value for p in proto.metadata_props}["character"]
    return characters.splitlines() + [" "]


def _decode_det(outputs: dict) -> list:
    return list(common.first_output(outputs)[:, 0, 0] > DB_THRESHOLD)


def _decode_rec(outputs: dict) -> list:
    return [common.ctc_greedy(p[0], alphabet()) for p in common.first_output(outputs)]


def _spec(task: str, kind: str, metric: str, structure: str, data_text: str,
          shape: tuple) -> common.Spec:
    return common.Spec(
        name=f"ppocr-{task}", kind=kind, metric=metric, structure=structure, data_text=data_text,
        source=FILES[task].describe(), onnx=lambda: common.wheel_member(FILES[task]),
        data=lambda: dataset(task), decode={"det": _decode_det, "rec": _decode_rec,
                                            "cls": common.argmax_labels}[task],
        input_shape="x:1,3," + ",".join(map(str, shape)))


SPECS = [
    _spec("det", "mask", "mask IoU", "PP-OCRv4 DB text detector (PP-LCNet, HardSwish, SE, FPN, ConvTranspose)",
          f"{EVAL['det']} rendered {PAGE}x{PAGE} pages of 1-6 lines; truth: DB's shrunk line boxes",
          (PAGE, PAGE)),
    _spec("rec", "text", "exact lines", "PP-OCRv4 SVTR_LCNet CTC recognizer (attention, LayerNorm, HardSwish)",
          f"{EVAL['rec']} rendered 48x320 lines of 1-4 words", REC_SHAPE),
    _spec("cls", "labels", "accuracy", "PP-OCR v2.0 text-direction classifier (MobileNetV3, HardSwish, SE)",
          f"{EVAL['cls']} rendered 48x192 lines, half upside down", CLS_SHAPE),
]
