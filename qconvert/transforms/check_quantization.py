"""check_quantization: the self-check before writing an int8 model. It rewrites nothing.

Every int8 op is checked against the constraints of its kernel (quantization-spec.md (e)):
int8 activations with one positive scale and a zero point in [-128, 127] (a 16x8 op: int16
activations with zero point 0, and an int64 bias); same-scale ops with
identical params on every quantized input and the output; fixed-output ops with the kernel's
params; int8 weights with zero point 0, values in [-127, 127] and one scale per output channel
(or one); int32 bias with zero point 0, quantized dimension 0 and scale input_scale *
weight_scale. The interpreter computes wrong numbers without an error for several of these, so a
violation is a qconvert bug and stops the conversion (QuantizationCheckError, naming the op).

Before that, check_representable holds every quantized op to what its kernel can represent
(quantization.require_representable; quantize/params.py: activation scales within [MIN_SCALE,
MAX_SCALE], input_scale * weight_scale a normal float32, requantization multipliers below
MAX_MULTIPLIER): such a model crashed LiteRT or was refused by XNNPACK. Ranges that break these
(calibration of 1e30, --default-range, huge weights) keep their ops float earlier
(keep_unrepresentable_float), so a failure here is a ConversionError naming the op, the tensor
and its range that should not happen.
"""

from __future__ import annotations

import numpy as np

from ..ir import Array, Model, Operator
from .quantization import (
    BOUNDARY_OPS,
    FLOAT32,
    INT16,
    INT8,
    fixed_params,
    input_scale,
    op_activation_type,
    require_representable,
    rule_of,
    same_params,
    value_outputs,
)


def check_representable(model: Model) -> None:
    """Every quantized op (and QUANTIZE/DEQUANTIZE) against require_representable."""
    for op in model.operators:
        if op.quantized or op.type in BOUNDARY_OPS:
            require_representable(op, model)


class QuantizationCheckError(Exception):
    """An int8 op violates its kernel's constraints: a bug in the quantize steps."""


def _activation_problem(array: Array, dtype: np.dtype) -> str | None:
    q = array.quant
    if array.dtype != dtype or q is None:
        return f"{array.name!r} is {array.dtype}, not quantized {dtype}"
    if np.size(q.scale) != 1 or not (np.isfinite(q.scale).all() and (q.scale > 0).all()):
        return f"{array.name!r} needs one positive finite scale, has {q.scale}"
    if dtype == INT16 and int(q.zero_point[0]) != 0:
        return f"{array.name!r} is int16 with zero point {q.zero_point[0]}, not 0"
    if not -128 <= int(q.zero_point[0]) <= 127:
        return f"{array.name!r} zero point {q.zero_point[0]} is outside [-128, 127]"
    return None


def _weight_problem(op: Operator, rule, weights: Array) -> str | None:
    q = weights.quant
    if weights.dtype != INT8 or q is None or not weights.is_constant:
        return f"weights {weights.name!r} are not constant int8"
    if np.any(q.zero_point != 0) or np.any(~(q.scale > 0)):
        return f"weights {weights.name!r} need zero points 0 and positive scales"
    if weights.data.min(initial=0) < -127:
        return f"weights {weights.name!r} use -128 (narrow range is [-127, 127])"
    axis = rule.weight_axis % len(weights.shape)
    count = np.size(q.scale)
    if count not in (1, weights.shape[axis]) or (count > 1 and q.axis != axis):
        return f"weights {weights.name!r} have {count} scales along axis {q.axis}"
    return None


def _bias_problem(op: Operator, model: Model, bias: Array, weights: Array) -> str | None:
    q = bias.quant
    wanted = np.dtype(np.int64 if op_activation_type(op) == INT16 else np.int32)
    if bias.dtype != wanted or q is None or not bias.is_constant:
        return f"bias {bias.name!r} is not constant {wanted}"
    if np.any(q.zero_point != 0) or (q.axis or 0) != 0:
        return f"bias {bias.name!r} needs zero point 0 and quantized dimension 0"
    expected = (np.float32(input_scale(op, model)) * weights.quant.scale).astype(np.float32)
    if np.size(q.scale) != np.size(expected) or not np.allclose(q.scale, expected, rtol=1e-6, atol=0):
        return f"bias {bias.name!r} scale is not input scale x weight scale"
    return None


def _op_problem(op: Operator, model: Model) -> str | None:
    rule = rule_of(op)
    dtype = op_activation_type(op)
    arrays = model.arrays
    inputs = [arrays[op.inputs[i]] for i in rule.activation_inputs(op)]
    outputs = [arrays[n] for n in value_outputs(op, model)] if rule.output != "none" else []
    for array in inputs + outputs:
        problem = _activation_problem(array, dtype)
        if problem:
            return problem
    if rule.output == "same":
        for array in inputs + outputs[1:]:
            if not same_params(array.quant, outputs[0].quant):
                return f"{array.name!r} and output {outputs[0].name!r} must share scale and zero point"
    if rule.output == "fixed" and not same_params(outputs[0].quant, fixed_params(rule, dtype)):
        scale, zero_point = rule.fixed_params_int16 if dtype == INT16 else rule.fixed_params
        return f"output {outputs[0].name!r} must have scale {scale} and zero point {zero_point}"
    if rule.weight is not None:
        weights = arrays[op.inputs[rule.weight]]
        problem = _weight_problem(op, rule, weights)
        if problem:
            return problem
        if rule.bias is not None and rule.bias < len(op.inputs) and op.inputs[rule.bias]:
            return _bias_problem(op, model, arrays[op.inputs[rule.bias]], weights)
    return None


def check_quantization(model: Model) -> bool:
    check_representable(model)
    for op in model.operators:
        if op.quantized:
            problem = _op_problem(op, model)
        elif op.type in BOUNDARY_OPS:
            problem = None
        else:
            problem = next((f"float op reads {model.arrays[n].dtype} tensor {n!r}" for n in op.inputs
                            if n and not model.arrays[n].is_constant
                            and model.arrays[n].dtype in (INT8, INT16)
                            and FLOAT32 in (model.arrays[o].dtype for o in op.outputs)), None)
        if problem:
            raise QuantizationCheckError(
                f"quantization self-check failed (a qconvert bug): {op.type} from ONNX node "
                f"{op.source!r}: {problem}")
    return False
