"""Weight rounding for the layer's output, and the bias that cancels what rounding shifts.

Round-to-nearest makes each weight's own error small; what the model sees is the layer's output
error, (W_q - W) x over the layer's inputs x. A 3x3 depthwise edge filter whose taps sum to 0.003
can sum to 0.047 once each tap is rounded to nearest: on a flat region (a text line's background,
an image's padding) its output moves 15x its float value, and every layer after it amplifies that
(PP-OCRv4's recognizer: that one weight tensor alone takes its backbone output to 6 dB).

- `round_for_output`: each weight row (an output channel) rounded so that E[((W_q - W) x)^2]
  over the calibration inputs is small, not |W_q - W|: the columns are rounded one at a time and
  each one's error is pushed onto the columns not yet rounded, weighted by the inputs' second
  moments (the optimal-brain-quantization update of GPTQ, Frantar et al. 2022, in blocks). The
  per-channel scales stay those of round-to-nearest: only which integer each weight gets changes,
  within the narrow range [-127, 127], and each row's largest weight keeps its +-127 (so the
  scale read back from the integers, as a QDQ import does, is the same).
- `bias_shift`: the mean output shift (W - W_q) E[x] that remains, for the bias to take back
  (bias correction, Nagel et al. 2019): exact on inputs equal to their mean, such as padding.

The moments come from the float model run on the calibration samples (plan/layer_inputs.py);
this module is numerics only.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

from .params import round_half_away

DAMPING = 0.01  # of the mean input energy, added to the second moments' diagonal (GPTQ's)
# Patches per element of a row below which the second moments are too few to round for (a
# squeeze-excitation conv sees one patch per sample: its moments have the rank of the sample
# count, and rounding into their null space loses on other inputs): such rows round to nearest.
MIN_PATCHES_PER_INPUT = 8
BLOCK = 128  # columns rounded before the update reaches the rest (one matrix product per block)


@dataclass
class InputMoments:
    """What one weighted op multiplies each weight row with, over the calibration samples: the
    patch x of its input under the kernel (or the input row of a dense layer), in the order of a
    weight row's elements. Per channel for a depthwise layer (each channel its own patches)."""

    tensor: str  # the op's input the moments are of
    mean: np.ndarray  # E[x]: (d,), or (channels, d)
    second: np.ndarray | None  # E[x x^T]: (d, d), or (channels, d, d); None: not measured
    count: int  # patches measured
    channel_min: np.ndarray | None = None  # the input tensor's least value per channel (last axis)
    channel_max: np.ndarray | None = None  # ... and its largest
    positions: int = 0  # values per channel those ranges are over (samples x positions)
    energy: np.ndarray | None = None  # E[x^2] per element, the second moments' diagonal: always measured
    # The integers round_for_output chose with these moments, by the weights and scales they
    # were rounded from (rounded_rows): the precision planner quantizes many copies of a model.
    rounded: dict = field(default_factory=dict, repr=False, compare=False)

    def scaled(self, factor: np.ndarray) -> InputMoments:
        """The moments of the input divided by `factor` per channel (the input's last axis; each
        patch element's channel is its index modulo the channel count): after equalization."""
        channels = factor.size
        if self.mean.ndim == 2:  # depthwise: (channels, d)
            per_element = 1.0 / factor[:, None]
            outer = per_element[:, :, None] * per_element[:, None, :]
        else:
            per_element = 1.0 / np.tile(factor, self.mean.size // channels)
            outer = np.outer(per_element, per_element)
        second = None if self.second is None else self.second * outer
        energy = None if self.energy is None else self.energy * per_element ** 2
        low = None if self.channel_min is None else self.channel_min / factor
        high = None if self.channel_max is None else self.channel_max / factor
        return InputMoments(self.tensor, self.mean * per_element, second, self.count, low, high,
                            self.positions, energy)


def enough_patches(moments: InputMoments) -> bool:
    """Whether the second moments were measured on enough patches to round for the output."""
    return moments.second is not None and moments.count >= MIN_PATCHES_PER_INPUT * moments.mean.shape[-1]


def round_for_output(w: np.ndarray, scales: np.ndarray, second: np.ndarray, nearest: np.ndarray,
                     qmax: int = 127) -> np.ndarray:
    """Integers for the weight rows `w` (rows, d) at per-row `scales`, each in [-qmax, qmax], chosen
    for the output error on inputs of second moments `second` ((d, d) shared, or (rows, d, d)).
    `nearest`: round-to-nearest's integers, of which each row's largest weight keeps its own.
    Columns whose input never moves (zero energy) keep round-to-nearest."""
    w = np.array(w, np.float64)
    scales = np.asarray(scales, np.float64).reshape(-1)
    rows, d = w.shape
    inverse = np.where(scales > 0, 1.0 / np.where(scales > 0, scales, 1.0), 0.0)
    root = _inverse_root(np.asarray(second, np.float64))
    q = np.zeros((rows, d), np.int64)
    # Each row's largest weight keeps its nearest integer (+-127 at the round-to-nearest scale):
    # the integers then span the same grid, so the scale read back from them is the same.
    largest = np.argmax(np.abs(w), axis=1)
    pinned = np.asarray(nearest, np.int64).reshape(rows, d)[np.arange(rows), largest]
    shared = root.ndim == 2
    for start in range(0, d, BLOCK):
        stop = min(start + BLOCK, d)
        block_errors = np.zeros((rows, stop - start))
        for i in range(start, stop):
            column = np.clip(round_half_away(w[:, i] * inverse), -qmax, qmax).astype(np.int64)
            column = np.where(largest == i, pinned, column)
            q[:, i] = column
            diagonal = root[i, i] if shared else root[:, i, i]
            error = (w[:, i] - column * scales) / diagonal
            block_errors[:, i - start] = error
            if shared:
                w[:, i + 1:stop] -= np.outer(error, root[i, i + 1:stop])
            else:
                w[:, i + 1:stop] -= error[:, None] * root[:, i, i + 1:stop]
        if stop < d:
            if shared:
                w[:, stop:] -= block_errors @ root[start:stop, stop:]
            else:
                w[:, stop:] -= np.einsum("rb,rbc->rc", block_errors, root[:, start:stop, stop:])
    return q


def rounded_rows(w: np.ndarray, scales: np.ndarray, moments: InputMoments, nearest: np.ndarray) -> np.ndarray:
    """round_for_output of the rows `w` with `moments`' second moments, computed once per weights
    and scales (moments.rounded keeps them)."""
    key = (hashlib.blake2b(np.ascontiguousarray(w).tobytes(), digest_size=16).digest(),
           np.ascontiguousarray(scales, np.float64).tobytes())
    if key not in moments.rounded:
        moments.rounded[key] = round_for_output(w, scales, moments.second, nearest)
    return moments.rounded[key]


def _inverse_root(second: np.ndarray) -> np.ndarray:
    """The upper Cholesky factor U of the damped second moments' inverse (U^T U = H^-1), per row
    when `second` is (rows, d, d). A dead input (zero energy) gets a unit diagonal: its column's
    error then stays its own."""
    h = np.array(second, np.float64)
    d = h.shape[-1]
    diagonal = np.diagonal(h, axis1=-2, axis2=-1)
    dead = diagonal <= 0
    eye = np.eye(d, dtype=bool)
    h[..., eye] = np.where(dead, 1.0, diagonal + DAMPING * np.mean(diagonal, axis=-1, keepdims=True))
    inverse = np.linalg.inv(h)
    inverse = (inverse + np.swapaxes(inverse, -1, -2)) / 2
    return np.swapaxes(np.linalg.cholesky(inverse), -1, -2)


def bias_shift(w: np.ndarray, dequantized: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """(W - W_q) E[x] per row: what the bias adds so that the mean output keeps its float value.
    `mean` is (d,) shared by the rows, or (rows, d)."""
    difference = np.asarray(w, np.float64) - np.asarray(dequantized, np.float64)
    mean = np.asarray(mean, np.float64)
    return difference @ mean if mean.ndim == 1 else np.einsum("rd,rd->r", difference, mean)
