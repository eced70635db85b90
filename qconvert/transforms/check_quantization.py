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
(quantize/params.py: activation scales within [MIN_SCALE, MAX_SCALE], input_scale * weight_scale a
normal float32, requantization multipliers below MAX_MULTIPLIER). Ranges that break these come
from the user's data (calibration of 1e30, --default-range, huge weights), not from a bug, so
they are a ConversionError naming the op, the tensor and its range: such a model crashed LiteRT
or was refused by XNNPACK.
"""

from __future__ import annotations

import numpy as np

from ..errors import ConversionError
from ..ir import Array, Model, Operator
from .quantization import (
    BOUNDARY_OPS,
    FLOAT32,
    INT8,
    INT16,
    activation_params,
    fixed_params,
    input_scale,
    op_activation_type,
    rule_of,
    same_params,
)
from ..quantize.params import MAX_MULTIPLIER, MAX_SCALE, MIN_SCALE

_FLOAT32_TINY = float(np.finfo(np.float32).tiny)  # the smallest normal float32
# ADD and SUB rescale their inputs to twice the larger input scale over 2^20 (TFLite's left
# shift); the output multiplier 2 * max(s1, s2) / (2^20 * s_out) must stay below MAX_MULTIPLIER.
_ADD_LEFT_SHIFT = 20


def _described(array: Array, scale: float, model: Model) -> str:
    """'x' scale 0.0039 (range [-0.5, 0.5] from calibration): a tensor as a message names it. A
    QUANTIZE's output has the range of the float tensor it quantizes."""
    minmax = array.minmax
    producer = model.producer(array.name)
    if minmax is None and producer is not None and producer.type == "QUANTIZE":
        minmax = model.arrays[producer.inputs[0]].minmax
    where = "" if minmax is None else f" (range [{minmax.min:.3g}, {minmax.max:.3g}] from {minmax.source})"
    return f"{array.name!r} scale {scale:.3g}{where}"


def _multipliers(op: Operator, model: Model, scales: dict[str, float]) -> list[tuple[str, np.ndarray]]:
    """The requantization multipliers the op's int8 kernel computes, in float32 like XNNPACK,
    each with how it is made (for the message)."""
    rule, arrays = rule_of(op), model.arrays
    names = op.inputs[:1] if op.type in BOUNDARY_OPS else [op.inputs[i] for i in rule.activation_inputs(op)]
    out = op.outputs[0]
    s_out = np.float32(scales[out])
    found = []
    if rule is not None and rule.weight is not None:
        weights = arrays[op.inputs[rule.weight]]
        if weights.quant is not None:
            product = np.float32(scales[names[0]]) * weights.quant.scale.astype(np.float32)
            found.append((f"input {_described(arrays[names[0]], scales[names[0]], model)} x weights "
                          f"{weights.name!r} scale {float(weights.quant.scale.max()):.3g} / output "
                          f"{_described(arrays[out], scales[out], model)}", product / s_out))
    elif op.type == "MUL" and len(names) == 2:
        a, b = names
        found.append((f"input {_described(arrays[a], scales[a], model)} x input "
                      f"{_described(arrays[b], scales[b], model)} / output "
                      f"{_described(arrays[out], scales[out], model)}",
                      np.float32(scales[a]) * np.float32(scales[b]) / s_out))
    elif op.type in ("ADD", "SUB") and len(names) == 2:
        big = max(names, key=lambda n: scales[n])
        found.append((f"2 x input {_described(arrays[big], scales[big], model)} / (2^{_ADD_LEFT_SHIFT} x "
                      f"output {_described(arrays[out], scales[out], model)})",
                      np.float32(2 * scales[big]) / (np.float32(2**_ADD_LEFT_SHIFT) * s_out)))
    elif op.type == "QUANTIZE" and names and arrays[names[0]].quant is not None:
        found.append((f"input {_described(arrays[names[0]], scales[names[0]], model)} / output "
                      f"{_described(arrays[out], scales[out], model)}", np.float32(scales[names[0]]) / s_out))
    return found


def representable_problem(op: Operator, model: Model) -> str | None:
    """Why the quantized op's params are beyond what its kernel represents (None: they are not).
    Inputs not yet quantized count with the params they will get (activation_params), so
    quantize_biases can ask before it divides by a bias scale."""
    rule, arrays = rule_of(op), model.arrays
    dtype = op_activation_type(op)
    if op.type in BOUNDARY_OPS:
        names = [n for n in op.inputs + op.outputs if arrays[n].quant is not None]
    else:
        names = [op.inputs[i] for i in rule.activation_inputs(op)]
        names += op.outputs if rule.output != "none" else []
    scales = {}
    for name in names:
        params = arrays[name].quant if op.type in BOUNDARY_OPS else activation_params(arrays[name], dtype)
        if params is None:
            continue
        scale = scales[name] = float(params.scale[0])
        if not MIN_SCALE <= scale <= MAX_SCALE:  # NaN fails too
            return (f"tensor {_described(arrays[name], scale, model)} is outside [2^-60, 2^60], the scales "
                    "every int8 kernel represents; its values are too large to quantize")
    if rule is not None and rule.weight is not None:
        weights = arrays[op.inputs[rule.weight]]
        w = None if weights.quant is None else np.asarray(weights.quant.scale, np.float64)
        if w is not None and not np.all((w >= _FLOAT32_TINY) & (w <= MAX_SCALE)):
            bad = float(w[~((w >= _FLOAT32_TINY) & (w <= MAX_SCALE))][0])
            return (f"weights {weights.name!r} need scale {bad:.3g}, beyond what an int8 kernel "
                    "represents (their values are too large or too small)")
    if not op.outputs or op.outputs[0] not in scales:
        return None
    for how, value in _multipliers(op, model, scales):
        value = np.asarray(value, np.float64)
        if not np.all(np.isfinite(value) & (value < MAX_MULTIPLIER)):
            worst = float(np.nanmax(np.where(np.isfinite(value), value, np.inf)))
            return (f"its requantization multiplier {how} = {worst:.3g} is not below "
                    f"{MAX_MULTIPLIER:g}, the most an int8 kernel takes")
        if rule is not None and rule.weight is not None:
            product = value * scales[op.outputs[0]]
            if not np.all(product >= _FLOAT32_TINY):
                return (f"input scale x weight scale {float(product.min()):.3g} ({how}) is below the "
                        "smallest normal float32, which int8 kernels cannot compute with")
    return None


def require_representable(op: Operator, model: Model) -> None:
    """Raises a ConversionError naming the op, the tensor and its range when representable_problem
    finds one."""
    problem = representable_problem(op, model)
    if problem:
        raise ConversionError(
            f"cannot quantize {op.type} from ONNX node {op.source!r}: {problem}; check the "
            f"calibration data or --default-range, or keep the node float (--keep-float)")


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
    outputs = [arrays[n] for n in op.outputs] if rule.output != "none" else []
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
