"""equalize_channel_ranges (float, with measured data; the driver runs it once before the
quantize steps, pipeline.run_equalization): where a weighted op (CONV_2D, DEPTHWISE_CONV_2D,
FULLY_CONNECTED) feeds only another, through no activation or a RELU, the channels between them
are rescaled so that one int8 scale serves them all (cross-layer equalization, Nagel et al.
2019): channel c of the tensor is divided by s_c -- the first op's output channel c (weights and
bias) divided by s_c, the second op's input channel c multiplied by s_c. Exact in float: RELU is
positively homogeneous, and nothing else reads the tensor.

Why: the tensor gets one int8 scale for all its channels, set by the widest. PP-OCRv4's
recognizer's first conv writes 16 channels whose ranges run from 1.1 to 21: quantized per
tensor, the narrow channels keep 2 to 3 bits, and quantizing that one tensor alone takes the
backbone output to 4 dB (per channel: 32 dB).

The scales come from the channels' calibrated ranges r_c (the measured moments of the second
op's input, plan/layer_inputs.py):
- into a DEPTHWISE_CONV_2D, whose weights are per channel already: s_c = r_c / max r (every
  channel gets the widest range; no weight loses);
- into a CONV_2D or FULLY_CONNECTED, whose weights share one scale per output channel across
  input channels: s_c = sqrt(r_c / w_c), w_c the largest weight magnitude of input channel c,
  which balances the activation's and the weights' ranges, and only where a first-order
  estimate of the output's quantization noise (activation step^2 x weight energy + weight
  steps^2 x input energy) goes down.
The tensor's calibrated range becomes the equalized channels' (minmax of the measured ones, widened
by as much as the calibrated range exceeds theirs: the measurement sees the first samples only),
its `channel_scale` records s so that what maps it back to the source model can. A tensor with
fewer than MIN_POSITIONS values per channel measured (a squeeze-excitation's 1x1 map) is left.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..ir import MinMax, Model, Operator
from ..quantize.params import snapped_factors, snapped_range
from ..quantize.rounding import InputMoments
from .quantization import FLOAT32, QDQ_SOURCE

WEIGHTED = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED")
HOMOGENEOUS = ("NONE", "RELU")
MIN_FACTOR = 1e-2  # a channel is magnified at most 100x (a dead channel stays as it is)
DEAD = 2.0 ** -40  # of the widest channel's range: a channel narrower holds nothing (_ranges)
# Values per channel below which its measured range says too little (a squeeze-excitation's
# 1x1 map has one value per sample): not equalized.
MIN_POSITIONS = 256


def equalize_channel_ranges(model: Model, layer_inputs: Mapping[str, InputMoments]) -> dict[str, InputMoments]:
    """Rescales the pairs in place; returns `layer_inputs` with each second op's moments those of
    its equalized input (the first op's input is unchanged)."""
    result = dict(layer_inputs)
    for second in model.operators:
        moments = layer_inputs.get(second.outputs[0])
        pair = _pair(model, second, moments)
        if pair is None:
            continue
        first, tensor = pair
        factor = _factors(model, second, moments)
        if factor is None:
            continue
        _rescale(model, first, second, tensor, factor, moments)
        result[second.outputs[0]] = moments.scaled(factor)
    return result


def _pair(model: Model, second: Operator, moments: InputMoments | None) -> tuple[Operator, str] | None:
    """The op whose output only `second` reads as its input, both weighted and to run int8."""
    if (moments is None or moments.channel_min is None or second.type not in WEIGHTED
            or moments.positions < MIN_POSITIONS):
        return None
    tensor = second.inputs[0]
    array = model.arrays[tensor]
    first = model.producer(tensor)
    if (first is None or first.type not in WEIGHTED or first.fused_activation not in HOMOGENEOUS
            or moments.tensor != tensor or array.channel_scale is not None or array.minmax is None
            or array.minmax.source == QDQ_SOURCE  # the model's own pair sets its params
            or not model.is_discardable(tensor) or first.float_reason or second.float_reason
            or len(model.consumers(tensor)) != 1 or tensor in model.outputs):
        return None
    if second.type == "DEPTHWISE_CONV_2D" and second.options.get("depth_multiplier", 1) != 1:
        return None
    for op in (first, second):
        w = model.arrays[op.inputs[1]]
        if (not w.is_constant or w.dtype != FLOAT32 or w.quant is not None or len(op.inputs) < 3
                or model.constant(op.inputs[2]) is None):  # quant: the model's pair quantized them
            return None
    if model.arrays[first.inputs[1]].shape[0 if first.type != "DEPTHWISE_CONV_2D" else 3] != moments.channel_min.size:
        return None
    return first, tensor


def _ranges(moments: InputMoments) -> np.ndarray:
    """Each channel's range, 0 for a channel whose range is below DEAD of the widest: a dead
    ReLU channel holds zeros, and the last bits of a float kernel (one ulp of 0 is 1.4e-45)
    must not bring it to life."""
    ranges = np.maximum(moments.channel_max, 0) - np.minimum(moments.channel_min, 0)
    return np.where(ranges > DEAD * np.max(ranges, initial=0.0), ranges, 0.0)


def _input_columns(model: Model, second: Operator, channels: int) -> np.ndarray:
    """The second op's weights as (input channel, everything else)."""
    w = model.arrays[second.inputs[1]].data
    if second.type == "DEPTHWISE_CONV_2D":  # [1, kh, kw, C]
        return w.reshape(-1, channels).T
    return np.moveaxis(w, -1, 0).reshape(channels, -1)  # OHWI or [O, I]: input channels last


def _factors(model: Model, second: Operator, moments: InputMoments) -> np.ndarray | None:
    ranges = _ranges(moments)
    if not np.any(ranges > 0):
        return None
    if second.type == "DEPTHWISE_CONV_2D":
        factor = ranges / ranges.max()
    else:
        columns = np.abs(_input_columns(model, second, ranges.size)).max(axis=1).astype(np.float64)
        live = (ranges > 0) & (columns > 0)
        factor = np.ones_like(ranges)
        factor[live] = np.sqrt(ranges[live] / columns[live])
        factor[live] /= np.exp(np.mean(np.log(factor[live])))  # geometric mean 1
    # On a grid (quantize/params.py): the moments are LiteRT's float results, whose last bits
    # differ by CPU; the weights the factors multiply must not.
    factor = snapped_factors(np.where(ranges > 0, np.maximum(factor, MIN_FACTOR), 1.0))
    if np.allclose(factor, 1.0, rtol=0.05):
        return None
    if second.type != "DEPTHWISE_CONV_2D" and (moments.energy is None or _noise(
            model, second, moments, factor) >= _noise(model, second, moments, np.ones_like(factor))):
        return None
    return factor


def _noise(model: Model, second: Operator, moments: InputMoments, factor: np.ndarray) -> float:
    """A first-order estimate of the second op's output noise from int8 rounding with the
    channels divided by `factor`: the activation's step^2 times the weights' energy, plus each
    output channel's weight step^2 times the input's energy."""
    span = np.max(np.maximum(moments.channel_max, 0) / factor) - np.min(np.minimum(moments.channel_min, 0) / factor)
    w = model.arrays[second.inputs[1]].data.astype(np.float64) * factor  # input channels last (OHWI, [O, I])
    activation = (span / 255) ** 2 * np.sum(w ** 2)
    row_steps = (np.abs(w.reshape(w.shape[0], -1)).max(axis=1) / 127) ** 2
    per_element = np.tile(1.0 / factor ** 2, moments.mean.size // factor.size)
    energy = float(np.sum(moments.energy * per_element))
    return activation + float(np.sum(row_steps)) * energy


def _rescale(model: Model, first: Operator, second: Operator, tensor: str, factor: np.ndarray,
             moments: InputMoments) -> None:
    f32 = factor.astype(np.float32)
    w1 = model.arrays[first.inputs[1]].data
    if first.type == "DEPTHWISE_CONV_2D":  # [1, kh, kw, C]: output channels last
        new_w1 = w1 / f32
    else:  # OHWI or [O, I]: output channels first
        new_w1 = w1 / f32.reshape((-1,) + (1,) * (w1.ndim - 1))
    _set_constant(model, first, 1, new_w1)
    _set_constant(model, first, 2, model.constant(first.inputs[2]) / f32)
    w2 = model.arrays[second.inputs[1]].data
    _set_constant(model, second, 1, w2 * f32)  # input channels are the last axis for all three
    # The measured samples are the calibration's first few: the calibrated range (all samples,
    # the calibration method's) widens the equalized one by as much as it exceeds theirs.
    array = model.arrays[tensor]
    measured_low, measured_high = float(np.min(moments.channel_min)), float(np.max(moments.channel_max))
    widen_low = array.minmax.min / measured_low if measured_low < 0 and array.minmax.min < 0 else 1.0
    widen_high = array.minmax.max / measured_high if measured_high > 0 and array.minmax.max > 0 else 1.0
    low = float(np.min(np.minimum(moments.channel_min, 0) / factor)) * widen_low
    high = float(np.max(np.maximum(moments.channel_max, 0) / factor)) * widen_high
    array.minmax = MinMax(*snapped_range(low, high), "calibration, channels equalized")
    array.channel_scale = factor


def _set_constant(model: Model, op: Operator, index: int, value: np.ndarray) -> None:
    """The op's constant input `index` holds `value`, in an array of its own."""
    name = op.inputs[index]
    if model.is_discardable(name):
        model.arrays[name].data = value.astype(np.float32)
    else:
        model.set_input(op, index, model.add_constant(name, value.astype(np.float32)))
