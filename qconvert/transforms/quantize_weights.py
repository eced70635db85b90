"""quantize_weights: the constant weights of int8 CONV_2D, DEPTHWISE_CONV_2D, TRANSPOSE_CONV and
FULLY_CONNECTED ops become symmetric int8 (zero point 0, narrow range [-127, 127]), per output
channel (the OpDef's weight_axis), or per tensor for FULLY_CONNECTED with --per-tensor-fc.
A 16x8 op (int16 activations) takes the same int8 weights.

Before quantizing, a channel's scale is widened where its bias would not fit in half the int32
range at scale input_scale * weight_scale (TFLite's AdjustWeightsForBiasScale); an all-zero
channel gets a positive scale so its bias survives (see quantize/params.py). A weight tensor read
by another op as well is copied, so each op owns the params it was quantized with.

With the moments of an op's inputs on the calibration samples (`layer_inputs`, measured by
plan/layer_inputs.py), the integers are chosen for the op's output error rather than each
weight's own (`round_for_output`), and the mean output shift left is added to the float bias
(`correct_bias`) that quantize_biases then quantizes: quantize/rounding.py. The scales stay
those of round-to-nearest.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..errors import ConversionError
from ..ir import Model, Operator, QuantParams
from .quantization import FLOAT32, INT8, input_scale, nonfinite, rule_of
from ..quantize.rounding import InputMoments, bias_shift, enough_patches, rounded_rows
from ..quantize.params import (
    adjust_weight_scales_for_bias,
    quantize_weights_per_channel,
    quantize_weights_per_tensor,
)
from .helpers import own_constant, single_use_constants


def require_finite(op: Operator, what: str, name: str, values: np.ndarray) -> None:
    """A ConversionError naming the constant unless every value is finite (quantization.nonfinite):
    an op that reaches here with such weights runs its 16x8 kernel (keep_unrepresentable_float
    keeps the int8 ones float)."""
    bad = nonfinite(values)
    if bad:
        raise ConversionError(f"{what} {name!r} of {op.type} from ONNX node {op.source!r} hold {bad}; "
                              "only finite values can be quantized")


def quantize_weights(model: Model, per_tensor_fc: bool = False,
                     layer_inputs: Mapping[str, InputMoments] | None = None,
                     round_for_output: bool = True, correct_bias: bool = True) -> bool:
    changed = False
    single_use = single_use_constants(model)
    for op in model.operators:
        rule = rule_of(op)
        if not op.quantized or rule.weight is None:
            continue
        weights = model.arrays[op.inputs[rule.weight]]
        if weights.dtype != FLOAT32:
            continue
        bias_name = op.inputs[rule.bias] if rule.bias is not None and rule.bias < len(op.inputs) else ""
        bias = model.constant(bias_name)
        per_tensor = per_tensor_fc and op.type == "FULLY_CONNECTED"
        w = weights.data
        require_finite(op, "weights", weights.name, w)
        if bias is not None:
            require_finite(op, "bias", bias_name, bias)
        if per_tensor:
            q, scale = quantize_weights_per_tensor(w)
            scales = np.array([scale], np.float32)
        else:
            q, scales = quantize_weights_per_channel(w, rule.weight_axis)
        if bias is not None and op.quantized == "int8":  # a 16x8 op's int64 bias needs no room
            widened = adjust_weight_scales_for_bias(bias, input_scale(op, model), scales)
            if not np.array_equal(widened, scales):
                scales = widened
                if per_tensor:
                    q, _ = quantize_weights_per_tensor(w, scale=float(scales[0]))
                else:
                    q, _ = quantize_weights_per_channel(w, rule.weight_axis, scales=scales)
        moments = (layer_inputs or {}).get(op.outputs[0])
        if moments is not None and moments.tensor == op.inputs[0]:
            # A weight several ops share keeps one set of integers (one buffer in the file).
            shared = op.inputs[rule.weight] not in single_use
            # A 16x8 op's int64 bias keeps its float value: the fake-quant graph carries a bias
            # only as int32 (else float), and float32 cannot hold an int64 bias's integers.
            correcting = correct_bias and bias is not None and op.quantized == "int8"
            q = _for_output(model, op, rule, w, q, scales, moments, round_for_output and not shared,
                            correcting, single_use)
        name = own_constant(model, op, rule.weight, single_use)
        array = model.arrays[name]
        array.data, array.dtype = q, INT8
        array.quant = QuantParams(scales, np.zeros(scales.size, np.int64),
                                  None if per_tensor else rule.weight_axis % w.ndim)
        array.narrow_range = True
        changed = True
    return changed


def _for_output(model: Model, op: Operator, rule, w: np.ndarray, q: np.ndarray, scales: np.ndarray,
                moments: InputMoments, rounding: bool, correcting: bool, single_use) -> np.ndarray:
    """The op's integers rounded for its output (`rounding`), and its float bias corrected for the
    mean shift the integers leave (`correcting`): weights as rows, one per output channel, in the
    order of the moments' patches."""
    axis = rule.weight_axis % w.ndim
    rows = np.moveaxis(w, axis, 0).reshape(w.shape[axis], -1)
    row_scales = np.broadcast_to(scales.astype(np.float64), (rows.shape[0],))
    if rounding and enough_patches(moments) and moments.second.shape[-1] == rows.shape[1]:
        nearest = np.moveaxis(q, axis, 0).reshape(rows.shape)
        try:
            q_rows = rounded_rows(rows, row_scales, moments, nearest).astype(np.int8)
            q = np.moveaxis(q_rows.reshape(np.moveaxis(w, axis, 0).shape), 0, axis)
        except np.linalg.LinAlgError:  # moments a float library got wrong: round to nearest
            pass
    if correcting and moments.mean.shape[-1] == rows.shape[1]:
        q_rows = np.moveaxis(q, axis, 0).reshape(rows.shape)
        shift = bias_shift(rows, q_rows * row_scales[:, None], moments.mean)
        with np.errstate(over="ignore", invalid="ignore"):
            corrected = (model.constant(op.inputs[rule.bias]).astype(np.float64)
                         + shift.reshape(-1)).astype(np.float32)
        if np.all(np.isfinite(corrected)):  # inputs near float32's limits: the bias as it was
            name = own_constant(model, op, rule.bias, single_use)
            model.arrays[name].data = corrected.reshape(model.arrays[name].shape)
    return q
