"""Elementwise binary ops with numpy broadcasting: Add, Sub, Mul, Div, Max, Min, Sum, Pow, Mean.

TFLite's binary kernels broadcast like numpy, so the ONNX node maps one to one; n-ary Sum/Max/Min
become a chain.
"""

from __future__ import annotations

import numpy as np

from .registry import FREE_BINARY, FREE_BINARY16, QuantRule, onnx_op, tflite_op
from .versions import (
    INT8,
    INT16,
    INT64,
    UINT32,
    broadcast_beyond_4d,
    by_input_dtype,
    has_quantization,
    input_dtype,
    is_type,
)


def _binary(fn):
    def evaluate(inputs, op):
        a, b = inputs
        return [fn(a, b).astype(np.result_type(a, b), copy=False)]
    return evaluate


def _int_div(a, b):
    if a.dtype.kind in "iu":
        return np.trunc(a / b).astype(a.dtype)  # TFLite DIV truncates like C
    return a / b


def _add_version(op, model):
    """op_version.cc's ADD (no rank rule: ADD broadcasts to rank 6 from version 1)."""
    dtype = input_dtype(op, model)
    if dtype == INT16 and not has_quantization(model.arrays[op.inputs[0]]):
        return 5
    if dtype == INT64:
        return 4
    if is_type(op, model, (INT16,), (INT16,)) and not op.options.get("pot_scale_int16", True):
        return 3
    return 2 if dtype == INT8 else 1


def _sub_version(op, model):
    if is_type(op, model, (INT16,), (INT16,)) and not op.options.get("pot_scale_int16", True):
        return 5
    if input_dtype(op, model) == INT64:
        return 4
    if broadcast_beyond_4d(op, model):
        return 3
    return 2 if input_dtype(op, model) == INT8 else 1


def _mul_version(op, model):
    dtype = input_dtype(op, model)
    a, b = (model.arrays[n] for n in op.inputs[:2])
    out = model.arrays[op.outputs[0]]
    if (dtype == INT16 and not (has_quantization(a) or has_quantization(b))) or dtype == UINT32:
        return 7
    if dtype == np.complex64:
        return 6
    if dtype == INT64:
        return 5
    if dtype == INT16:
        return 4
    scales = [float(np.ravel(x.quant.scale)[0]) if x.quant is not None and np.size(x.quant.scale)
              else 0.0 for x in (a, b, out)]
    if all(scales) and scales[0] * scales[1] / scales[2] >= 1.0:
        return 3
    return 2 if dtype == INT8 else 1


def _div_version(op, model):
    return 2 if broadcast_beyond_4d(op, model) else 1


def _max_min_version(op, model):
    if is_type(op, model, (INT16,), (INT16,)):
        return 4
    if broadcast_beyond_4d(op, model):
        return 3
    return 2 if input_dtype(op, model) == INT8 else 1


# ADD and SUB's 16x8 kernels rescale any input and output scales when written with
# pot_scale_int16 false (the schema's default, true, is a power-of-two-scales-only variant).
GENERAL_SCALES16 = QuantRule(activations=(0, 1), int16=True, int16_options=(("pot_scale_int16", False),))

tflite_op("ADD", options="AddOptions", quant=GENERAL_SCALES16, evaluate=_binary(np.add), layout="elementwise",
          version=_add_version)
tflite_op("SUB", options="SubOptions", quant=GENERAL_SCALES16, evaluate=_binary(np.subtract), layout="elementwise",
          version=_sub_version)
tflite_op("MUL", options="MulOptions", quant=FREE_BINARY16, evaluate=_binary(np.multiply), layout="elementwise",
          version=_mul_version)
tflite_op("DIV", options="DivOptions", evaluate=_binary(_int_div), layout="elementwise",
          version=_div_version)
tflite_op("MAXIMUM", evaluate=_binary(np.maximum), layout="elementwise", version=_max_min_version,
          quant=QuantRule(activations=(0, 1), output="same", int16=True))
tflite_op("MINIMUM", evaluate=_binary(np.minimum), layout="elementwise", version=_max_min_version,
          quant=QuantRule(activations=(0, 1), output="same", int16=True))
tflite_op("POW", evaluate=_binary(np.power), layout="elementwise")
tflite_op("SQUARED_DIFFERENCE", quant=FREE_BINARY, evaluate=_binary(lambda a, b: (a - b) ** 2), layout="elementwise",
          version=by_input_dtype({np.int8: 2}))

_BINARY = {"Add": "ADD", "Sub": "SUB", "Mul": "MUL", "Div": "DIV", "Pow": "POW"}
_NARY = {"Sum": "ADD", "Max": "MAXIMUM", "Min": "MINIMUM"}


def _pow_exponent(ctx, base: str, b: str, exponent) -> str:
    """The exponent in the base's dtype (ONNX allows them to differ, TFLite POW does not): a
    constant is converted with numpy, an activation goes through a CAST."""
    dtype = ctx.dtype(base)
    if ctx.dtype(b) == dtype:
        return b
    if exponent is not None:
        return ctx.constant("exponent", exponent.astype(dtype))
    cast = ctx.tensor(b + "_cast", ctx.shape(b), dtype)
    ctx.add_op("CAST", [b], [cast], {"in_data_type": ctx.dtype(b), "out_data_type": dtype})
    return cast


@onnx_op(*_BINARY)
def import_binary(node, ctx):
    a, b = node.inputs[:2]
    ctx.check_broadcast([a, b], node.outputs[0])
    if node.op_type == "Pow":
        exponent = ctx.const(b)
        if exponent is not None and exponent.size == 1 and float(exponent.reshape(())) == 2.0:
            ctx.add_op("MUL", [a, a], node.outputs)  # x*x: exact, and MUL has an int8 kernel
            return
        b = _pow_exponent(ctx, a, b, exponent)
    ctx.add_op(_BINARY[node.op_type], [a, b], node.outputs)


@onnx_op(*_NARY, "Mean")
def import_nary(node, ctx):
    """Sum/Max/Min/Mean of n inputs: a left-to-right chain of binary ops (Mean divides after)."""
    y = node.outputs[0]
    inputs = [n for n in node.inputs if n]
    ctx.check_broadcast(inputs, y)
    op_type = _NARY.get(node.op_type, "ADD")
    if len(inputs) == 1:
        ctx.add_op("IDENTITY", inputs, [y])
        return
    final = y if node.op_type != "Mean" else ctx.tensor(y + "_sum", ctx.shape(y), ctx.dtype(y))
    current = inputs[0]
    for k, other in enumerate(inputs[1:]):
        last = k == len(inputs) - 2
        out = final if last else ctx.tensor(y + f"_{k}", np.broadcast_shapes(ctx.shape(current), ctx.shape(other)), ctx.dtype(y))
        ctx.add_op(op_type, [current, other], [out])
        current = out
    if node.op_type == "Mean":
        ctx.add_op("MUL", [final, ctx.constant("inv_count", np.array(1.0 / len(inputs), ctx.dtype(y)))], [y])
