"""The numbers that say how far one output of the .tflite is from onnxruntime's.

SQNR: 10 log10 of the reference's energy over the error's. The feature axis of an output (its
channels; see feature_axis) splits it into slices, each scored apart, the worst one named, so that
a collapsed score channel inside a tensor that box coordinates dominate shows. In a slice,
differences within SLICE_TOLERANCE of the output's largest magnitude do not count: two float
runtimes differ by that much from summation order alone, and a slice of small values would
otherwise look broken in a faithful float conversion. JSON has no infinity: json_number writes the
SQNR of an exact match (and any other infinite value) as a string.
"""

from __future__ import annotations

import math

import numpy as np

SLICE_TOLERANCE = 2.0 ** -16  # relative to the output's largest magnitude (128 float32 steps)


def sqnr_db(reference: np.ndarray, actual: np.ndarray, tolerance: float = 0.0) -> float:
    """10 log10(sum ref^2 / sum (actual - ref)^2), errors first reduced by `tolerance`: inf for
    a match, -inf for an error on a zero reference or a value that is not finite (a NaN or an
    infinity where the reference is finite)."""
    ref = reference.astype(np.float64)
    error = np.abs(actual.astype(np.float64) - ref)
    if tolerance:
        error = np.maximum(error - tolerance, 0.0)
    noise = float(np.sum(error ** 2))
    signal = float(np.sum(ref ** 2))
    if noise == 0:
        return math.inf
    if signal == 0 or not math.isfinite(noise):
        return -math.inf
    return 10 * math.log10(signal / noise)


def feature_axis(shape: tuple[int, ...]) -> int | None:
    """The output's channel/feature axis. A rank-4 output is an NCHW map (the ONNX layout): its
    channels, axis 1, or none for a single-channel map (a segmenter's probabilities: its rows or
    columns are no features). Otherwise the shortest axis longer than 1 after the first (the last
    of equals); None unless two axes after the first are longer than 1 (a classifier's
    [1, classes] has no slices: each would hold one value per sample, and top-1 agreement
    speaks for it)."""
    if len(shape) == 4:
        return 1 if shape[1] > 1 else None
    axes = [a for a in range(1, len(shape)) if shape[a] > 1]
    return min(reversed(axes), key=lambda a: shape[a]) if len(axes) >= 2 else None


def worst_slice(ref: np.ndarray, got: np.ndarray) -> tuple[float, str] | None:
    """The lowest SQNR of a slice along the output's feature axis and where it is ("axis 1,
    index 5"); `ref` and `got` are [samples, *shape]. None: no feature axis, or no slice with a
    signal."""
    axis = feature_axis(ref.shape[1:])
    if axis is None:
        return None
    moved_ref = np.moveaxis(ref, axis + 1, 0).reshape(ref.shape[axis + 1], -1)
    moved_got = np.moveaxis(got, axis + 1, 0).reshape(ref.shape[axis + 1], -1)
    tolerance = float(np.abs(ref).max(initial=0.0)) * SLICE_TOLERANCE  # an empty output: none
    slices = [(sqnr_db(r, g, tolerance), k) for k, (r, g) in enumerate(zip(moved_ref, moved_got))
              if np.any(r)]
    if not slices:
        return None
    worst, index = min(slices)
    return worst, f"axis {axis}, index {index}"


def json_number(value):
    """JSON has no infinity: an exact match's SQNR is written as the string "inf"."""
    if isinstance(value, float) and not math.isfinite(value):
        return "inf" if value > 0 else "-inf" if value < 0 else "nan"
    return value
