"""Unary math: Sqrt, Exp, Log, Abs, Neg, Reciprocal, Floor, Ceil, Round, Sin, Cos, Erf, Softsign.

Most map to one TFLite builtin. Reciprocal is DIV(1, x) and Softsign x / (1 + |x|). TFLite has no
ERF builtin, so Erf is a rational approximation built from MUL/ADD/MINIMUM/DIV/RELU_N1_TO_1; its
ops carry ERF_MARK in `source` so that transforms/identify_gelu.py can find the group and replace the
whole x * 0.5 * (1 + erf(x / sqrt 2)) pattern by one GELU.
"""

from __future__ import annotations

import math

import numpy as np

from .registry import FREE, FREE16, evaluate_unary, onnx_op, onnx_ops_as, tflite_op
from .versions import by_input_dtype, has_quantization, input_dtype

# Suffix of Operator.source on every op of an Erf composition (see erf_group in identify_gelu).
ERF_MARK = " [erf]"

# erf(x) = x * P(x^2) / Q(x^2) on [-4, 4] (erf(4) rounds to 1 in float32; beyond, x^2 is clamped
# to 16 and the result, then >= erf(4), to 1).
# Coefficients (ascending powers) fitted here for relative error: 2.5e-8 in exact arithmetic,
# under 4e-7 absolute when evaluated in float32.
ERF_CLAMP = 4.0
ERF_P = (1.128379140, 1.935206582e-01, 5.309780081e-02, 3.882088885e-03, 2.845032997e-04,
         1.986532963e-06)
ERF_Q = (1.0, 5.048357831e-01, 1.153392591e-01, 1.520478056e-02, 1.185201507e-03,
         3.741427917e-05)



def _int8_int16_version(int8: int, int16: int):
    """op_version.cc rule shared by EXP, LOG (2 for int8 and int16) and RSQRT (2 int8, 3 int16)."""
    return by_input_dtype({np.int8: int8, np.int16: int16})


def _abs_version(op, model) -> int:
    """op_version.cc: int32 5, int16 3 (quantized) or 4, int8/uint8 2, float 1."""
    dtype = input_dtype(op, model)
    if dtype == np.int32:
        return 5
    if dtype == np.int16:
        return 3 if has_quantization(model.arrays[op.inputs[0]]) else 4
    return 2 if dtype in (np.int8, np.uint8) else 1


tflite_op("SQRT", evaluate=evaluate_unary(np.sqrt), layout="elementwise")
tflite_op("RSQRT", quant=FREE, evaluate=evaluate_unary(lambda x: 1 / np.sqrt(x)), layout="elementwise",
          version=_int8_int16_version(2, 3))
tflite_op("EXP", options="ExpOptions", quant=FREE, evaluate=evaluate_unary(np.exp), layout="elementwise",
          version=_int8_int16_version(2, 2))
tflite_op("LOG", quant=FREE, evaluate=evaluate_unary(np.log), layout="elementwise", version=_int8_int16_version(2, 2))
tflite_op("ABS", options="AbsOptions", quant=FREE16, evaluate=evaluate_unary(np.abs), layout="elementwise",
          version=_abs_version)
tflite_op("NEG", options="NegOptions", evaluate=evaluate_unary(np.negative), layout="elementwise")
tflite_op("FLOOR", evaluate=evaluate_unary(np.floor), layout="elementwise")
tflite_op("CEIL", evaluate=evaluate_unary(np.ceil), layout="elementwise")
# TFLite's ROUND rounds half to even (banker's rounding), like ONNX Round and np.round.
tflite_op("ROUND", evaluate=evaluate_unary(np.round), layout="elementwise")
tflite_op("SIN", evaluate=evaluate_unary(np.sin), layout="elementwise")
tflite_op("COS", options="CosOptions", evaluate=evaluate_unary(np.cos), layout="elementwise")

_DIRECT = {"Sqrt": "SQRT", "Exp": "EXP", "Log": "LOG", "Abs": "ABS", "Neg": "NEG",
           "Floor": "FLOOR", "Ceil": "CEIL", "Round": "ROUND", "Sin": "SIN", "Cos": "COS"}

onnx_ops_as(_DIRECT, inputs=1)


@onnx_op("Reciprocal")
def import_reciprocal(node, ctx):
    x = node.inputs[0]
    ctx.add_op("DIV", [ctx.constant("one", np.array(1, ctx.dtype(x))), x], node.outputs)


@onnx_op("Softsign")
def import_softsign(node, ctx):
    """x / (1 + |x|)."""
    x, y = node.inputs[0], node.outputs[0]
    dtype, shape = ctx.dtype(x), ctx.shape(x)
    magnitude = ctx.tensor(y + "_abs", shape, dtype)
    ctx.add_op("ABS", [x], [magnitude])
    denominator = ctx.tensor(y + "_den", shape, dtype)
    ctx.add_op("ADD", [magnitude, ctx.constant("one", np.array(1, dtype))], [denominator])
    ctx.add_op("DIV", [x, denominator], [y])


def _polynomial(ctx, t: str, coefficients, hint: str) -> str:
    """Horner evaluation of sum(c[k] t^k) with MUL and ADD ops; returns the result's name."""
    dtype, shape = ctx.dtype(t), ctx.shape(t)
    value = ctx.constant("erf_c", np.array(coefficients[-1], dtype))
    for k, c in enumerate(reversed(coefficients[:-1])):
        product = ctx.tensor(f"{hint}_m{k}", shape, dtype)
        ctx.add_op("MUL", [value, t], [product])
        value = ctx.tensor(f"{hint}_a{k}", shape, dtype)
        ctx.add_op("ADD", [product, ctx.constant("erf_c", np.array(c, dtype))], [value])
    return value


def add_erf(ctx, x: str, y: str) -> None:
    """y = erf(x) = clamp(x * P(t) / Q(t), -1, 1) with t = min(x^2, 16); the clamp also makes
    erf(+-inf) = +-1. Every op is tagged with ERF_MARK."""
    with ctx.marked(ERF_MARK):
        _add_erf_ops(ctx, x, y)


def _add_erf_ops(ctx, x: str, y: str) -> None:
    dtype, shape = ctx.dtype(x), ctx.shape(x)
    square = ctx.tensor(y + "_sq", shape, dtype)
    ctx.add_op("MUL", [x, x], [square])
    t = ctx.tensor(y + "_t", shape, dtype)
    ctx.add_op("MINIMUM", [square, ctx.constant("erf_max", np.array(ERF_CLAMP ** 2, dtype))], [t])
    numerator = _polynomial(ctx, t, ERF_P, y + "_p")
    denominator = _polynomial(ctx, t, ERF_Q, y + "_q")
    scaled = ctx.tensor(y + "_xp", shape, dtype)
    ctx.add_op("MUL", [x, numerator], [scaled])
    ratio = ctx.tensor(y + "_ratio", shape, dtype)
    ctx.add_op("DIV", [scaled, denominator], [ratio])
    ctx.add_op("RELU_N1_TO_1", [ratio], [y])


@onnx_op("Erf")
def import_erf(node, ctx):
    x = node.inputs[0]
    if ctx.dtype(x) != np.float32:
        raise ctx.error(f"Erf of {ctx.dtype(x)} is not supported (float32 only)")
    add_erf(ctx, x, node.outputs[0])


def erf_reference(x: np.ndarray) -> np.ndarray:
    """erf in float64 (numpy has none), for checks and constant evaluation."""
    return np.vectorize(math.erf, otypes=[np.float64])(np.asarray(x, np.float64))
