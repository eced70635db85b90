"""What each weighted op of the float model multiplies its weights with, on the calibration samples.

The float IR model is written and run in LiteRT with every tensor kept; for each CONV_2D,
DEPTHWISE_CONV_2D and FULLY_CONNECTED with constant float weights, the patches of its input under
its kernel (stride, dilation and SAME/VALID padding as TFLite pads: zeros), or its input rows,
give the first and second moments the int8 weight rounding and bias correction need
(quantize/rounding.py). LiteRT runs the IR itself, so the patches are in the IR's layout and
every tensor a transformation made exists.

The cost is bounded: at most MAX_SAMPLES samples, and per op a number of patches that grows with
the patch length within bounds (drawn from a seeded generator, the same on every run); long
patches get their mean only (bias correction, no rounding for the output).
"""

from __future__ import annotations

import math
import os
import tempfile

import numpy as np

from ..check.runtimes import OnnxValue, TFLiteModel
from ..ir import Model, Operator
from ..quantize.rounding import MIN_PATCHES_PER_INPUT, InputMoments
from ..tflite.writer import serialize

# Calibration samples run (each in LiteRT with every tensor kept, no delegate, the slowest way):
# as many as keep the weighted ops' multiply-adds over all of them near SAMPLE_MACS, within
# [MIN_SAMPLES, MAX_SAMPLES] (PP-OCRv4's recognizer: 11; a 416x416 YOLOX: 4).
MAX_SAMPLES = 16
MIN_SAMPLES = 2
SAMPLE_MACS = 8e9
# Patches per op: PATCHES_PER_INPUT per element of a patch, at least MIN_PATCHES, at most what
# keeps the second moments near WORK multiply-adds (patches x length^2 [x channels]); an op whose
# budget is below MIN_PATCHES_PER_INPUT per element gets its mean alone (MIN_PATCHES patches).
# So the second moments cover patches up to about 790 long (3x3 x 64 channels, 1x1 x 768).
PATCHES_PER_INPUT = 16
MIN_PATCHES = 2048
WORK = 4e9
MAX_LENGTH = 1 << 14  # longest patch measured at all (its mean: 2048 x 16384 values)
SEED = 0

WEIGHTED = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED")


def measure_layer_inputs(model: Model, samples, description: str = "",
                         written: bytes | None = None) -> dict[str, InputMoments]:
    """{op's first output: the moments of its input} for the weighted ops of the float `model`,
    from the calibration `samples` (dicts of ONNX-layout arrays by input name). `written`: the
    model as a .tflite already (else it is written here)."""
    ops = [op for op in model.operators if _measurable(op, model)]
    if not ops:
        return {}
    macs = sum(math.prod(model.arrays[op.outputs[0]].shape) * _length(op, model.arrays[op.inputs[1]].shape)
               for op in ops)
    count = int(min(MAX_SAMPLES, max(MIN_SAMPLES, SAMPLE_MACS // max(macs, 1))))
    samples = [s for s, _ in zip(samples, range(count))]
    if not samples:
        return {}
    content = written if written is not None else bytes(serialize(model, description, release_data=False))
    with tempfile.TemporaryDirectory(prefix="qconvert-moments-") as folder:
        path = os.path.join(folder, "float.tflite")
        with open(path, "wb") as f:
            f.write(content)
        del content
        runner = TFLiteModel(path, preserve_all=True)
        runner.pair(inputs=[OnnxValue(name, np.shape(value), np.asarray(value).dtype)
                            for name, value in samples[0].items()])
        index = {d["name"]: d["index"] for d in runner.interpreter.get_tensor_details()}
        ops = [op for op in ops if op.inputs[0] in index]
        sums = {id(op): _Sums(op, model, len(samples)) for op in ops}
        with np.errstate(all="ignore"):
            for sample in samples:
                runner.run(sample)
                for op in ops:
                    sums[id(op)].add(runner.interpreter.get_tensor(index[op.inputs[0]]))
    measured = {op.outputs[0]: sums[id(op)].moments() for op in ops if sums[id(op)].count}
    # Values beyond float64's squares (or not finite) give no moments: those ops round to nearest.
    return {name: m for name, m in measured.items()
            if (m.second is None or np.all(np.isfinite(m.second))) and np.all(np.isfinite(m.mean))
            and np.all(np.isfinite(m.energy))}


def _measurable(op: Operator, model: Model) -> bool:
    if op.type not in WEIGHTED or len(op.inputs) < 2:
        return False
    x, w = model.arrays.get(op.inputs[0]), model.arrays.get(op.inputs[1])
    if x is None or w is None or x.is_constant or not w.is_constant or w.dtype != np.float32:
        return False
    if op.type == "DEPTHWISE_CONV_2D" and op.options.get("depth_multiplier", 1) != 1:
        return False
    if op.type != "FULLY_CONNECTED" and len(x.shape) != 4:
        return False
    return _length(op, w.shape) <= MAX_LENGTH


def _length(op: Operator, weight_shape: tuple[int, ...]) -> int:
    """The number of inputs each output of the op sums over."""
    if op.type == "DEPTHWISE_CONV_2D":
        return weight_shape[1] * weight_shape[2]
    return int(np.prod(weight_shape[1:]))


class _Sums:
    """The running sums of one op's input patches."""

    def __init__(self, op: Operator, model: Model, samples: int):
        self.op = op
        shape = model.arrays[op.inputs[1]].shape
        self.length = _length(op, shape)
        self.kernel = (shape[1], shape[2]) if op.type != "FULLY_CONNECTED" else (1, 1)
        # multiply-adds per patch: a depthwise op's per-channel products, else length^2. The
        # second moments only where WORK buys the patches rounding for the output needs
        # (rounding.MIN_PATCHES_PER_INPUT per element); else the mean alone, for bias correction.
        per_patch = self.length ** 2 * (shape[3] if op.type == "DEPTHWISE_CONV_2D" else 1)
        # A depthwise op's channels are a small product apiece (numpy's batched products run them
        # at a tenth of one large product's rate): PATCHES_PER_INPUT per element, no MIN_PATCHES.
        least = PATCHES_PER_INPUT * self.length if op.type == "DEPTHWISE_CONV_2D" else MIN_PATCHES
        budget = min(max(PATCHES_PER_INPUT * self.length, least), int(WORK / max(per_patch, 1)))
        # Never more patches than the samples hold (an output position each): a dense layer over
        # a short sequence has too few for the second moments, whose products would go unused.
        available = samples * math.prod(model.arrays[op.outputs[0]].shape[:-1])
        self.full = min(budget, available) >= MIN_PATCHES_PER_INPUT * self.length
        self.per_sample = max(1, math.ceil((budget if self.full else MIN_PATCHES) / samples))
        self.rng = np.random.default_rng(SEED)
        self.first = self.second = self.squares = self.low = self.high = None
        self.count = self.positions = 0
        # The per-channel range, for equalize_channel_ranges: only where a weighted op writes it.
        producer = model.producer(op.inputs[0])
        self.ranged = producer is not None and producer.type in WEIGHTED

    def add(self, x: np.ndarray) -> None:
        if self.ranged:
            axes = tuple(range(x.ndim - 1))
            low, high = x.min(axis=axes), x.max(axis=axes)
            self.low = low if self.low is None else np.minimum(self.low, low)
            self.high = high if self.high is None else np.maximum(self.high, high)
            self.positions += x.size // max(x.shape[-1], 1)
        # Products in float64: BLAS sums a float32 product in an order its kernel for this CPU's
        # instruction set picks, and those last bits would reach the rounding for the output (a
        # weight near a tie rounds the other way); float64's are far below any tie that matters.
        patches = _patches(self.op, x, self.kernel, self.per_sample, self.rng).astype(np.float64)
        # (patches, length), or (channels, patches, length) for a depthwise op: per channel
        first = patches.sum(-2, dtype=np.float64)
        self.first = first + (0 if self.first is None else self.first)
        squares = np.einsum("...pl,...pl->...l", patches, patches)
        self.squares = squares + (0 if self.squares is None else self.squares)
        if self.full:
            second = np.matmul(patches.swapaxes(-1, -2), patches)
            self.second = second if self.second is None else self.second + second
        self.count += patches.shape[-2]

    def moments(self) -> InputMoments:
        low, high = ((None, None) if self.low is None else
                     (self.low.astype(np.float64), self.high.astype(np.float64)))
        second = None if self.second is None else self.second / self.count
        return InputMoments(self.op.inputs[0], self.first / self.count, second, self.count, low, high,
                            self.positions, self.squares / self.count)


def _patches(op: Operator, x: np.ndarray, kernel: tuple[int, int], limit: int,
             rng: np.random.Generator) -> np.ndarray:
    """At most `limit` of the op's input patches, drawn at random: (patches, length) in a weight
    row's element order ((kh, kw, channels) for CONV_2D, the input row for FULLY_CONNECTED), or
    (patches, kh * kw, channels) for DEPTHWISE_CONV_2D."""
    if op.type == "FULLY_CONNECTED":
        rows = x.reshape(-1, x.shape[-1]) if x.ndim > 1 else x.reshape(1, -1)
        return rows[_chosen(rows.shape[0], limit, rng)]
    o = op.options
    n, height, width, channels = x.shape
    kh, kw = kernel
    sh, sw = o.get("stride_h", 1), o.get("stride_w", 1)
    dh, dw = o.get("dilation_h_factor", 1), o.get("dilation_w_factor", 1)
    span_h, span_w = (kh - 1) * dh + 1, (kw - 1) * dw + 1
    if o.get("padding", "SAME") == "SAME":
        out_h, out_w = -(-height // sh), -(-width // sw)
        pad_h = max((out_h - 1) * sh + span_h - height, 0)
        pad_w = max((out_w - 1) * sw + span_w - width, 0)
        x = np.pad(x, ((0, 0), (pad_h // 2, pad_h - pad_h // 2), (pad_w // 2, pad_w - pad_w // 2), (0, 0)))
    else:
        out_h, out_w = (height - span_h) // sh + 1, (width - span_w) // sw + 1
    if out_h < 1 or out_w < 1:
        return np.zeros((channels, 0, kh * kw) if op.type == "DEPTHWISE_CONV_2D" else (0, kh * kw * channels))
    picked = _chosen(n * out_h * out_w, limit, rng)
    b, rest = np.divmod(picked, out_h * out_w)
    r, c = np.divmod(rest, out_w)
    taps_h = (np.arange(kh) * dh)[:, None] + 0 * np.arange(kw)[None, :]
    taps_w = 0 * np.arange(kh)[:, None] + (np.arange(kw) * dw)[None, :]
    rows = (r * sh)[:, None] + taps_h.reshape(-1)[None, :]
    cols = (c * sw)[:, None] + taps_w.reshape(-1)[None, :]
    if op.type == "DEPTHWISE_CONV_2D":
        return np.moveaxis(x, 3, 0)[:, b[:, None], rows, cols]  # (channels, patches, kh * kw)
    patches = x[b[:, None], rows, cols]  # (patches, kh * kw, channels)
    return patches.reshape(patches.shape[0], -1)


def _chosen(total: int, limit: int, rng: np.random.Generator) -> np.ndarray:
    if total <= limit:
        return np.arange(total)
    return np.sort(rng.choice(total, size=limit, replace=False))
