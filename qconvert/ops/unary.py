"""Unary math: Sqrt, Exp, Log, Abs, Neg, Reciprocal, Floor, Ceil, Round, Sin, Cos, Sign, Erf,
Softsign, the trigonometric and hyperbolic functions Tan, Atan, Asin, Acos, Sinh, Cosh, Asinh,
Acosh, Atanh, and the activations TFLite has no builtin for: Mish, Shrink, ThresholdedRelu.

Most map to one TFLite builtin. Reciprocal is DIV(1, x) and Softsign x / (1 + |x|). Atan is
ATAN2(x, 1); the other trigonometric and hyperbolic functions, which TFLite lacks, are
compositions accurate to a few float32 ulps over the whole range (see each importer). TFLite has no
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
# SIGN: float32 (v1) and int32 (v2) kernels; a NaN's sign is NaN (ONNX's too).
tflite_op("SIGN", options="SignOptions", evaluate=evaluate_unary(np.sign), layout="elementwise",
          version=by_input_dtype({np.int32: 2}))
# ATAN2(y, x): float32 kernel, inputs of one shape (no broadcasting).
tflite_op("ATAN2", options="ATan2Options", layout="elementwise",
          evaluate=lambda inputs, op: [np.arctan2(inputs[0], inputs[1]).astype(inputs[0].dtype)])

_DIRECT = {"Sqrt": "SQRT", "Exp": "EXP", "Log": "LOG", "Abs": "ABS", "Neg": "NEG",
           "Floor": "FLOOR", "Ceil": "CEIL", "Round": "ROUND", "Sin": "SIN", "Cos": "COS",
           "Sign": "SIGN"}

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


class _Composition:
    """Adds the ops of an elementwise composition over x's shape and dtype; every intermediate is
    a new tensor named after the output y, and a number given as an input is a scalar constant."""

    def __init__(self, ctx, x: str, y: str):
        self.ctx, self.y = ctx, y
        self.shape, self.dtype = ctx.shape(x), ctx.dtype(x)

    def __call__(self, op_type: str, *inputs, out: str | None = None, dtype=None,
                 options: dict | None = None) -> str:
        names = [self.ctx.constant("c", np.array(v, self.dtype)) if isinstance(v, (int, float)) else v
                 for v in inputs]
        if out is None:
            out = self.ctx.tensor(f"{self.y}_{op_type.lower()}", self.shape, dtype or self.dtype)
        self.ctx.add_op(op_type, names, [out], options)
        return out

    def select(self, condition: str, a: str, b: str, out: str | None = None) -> str:
        return self("SELECT_V2", condition, a, b, out=out)

    def less(self, a, b) -> str:
        return self("LESS", a, b, dtype=np.bool_)

    def ones(self, x: str) -> str:
        """A tensor of ones shaped like x (ATAN2 does not broadcast), without a constant of x's
        size: POW(x, 0) is 1 for every x, NaN and infinities included (C's pow)."""
        return self("POW", x, 0.0)

    def atanh_series(self, s: str) -> str:
        """atanh(s) = s (1 + s^2/3 + s^4/5 + ... + s^10/11) for |s| < _SERIES: the next term is
        below 1e-8 of the sum there."""
        t = self("MUL", s, s)
        series = 1 / 11
        for c in (1 / 9, 1 / 7, 1 / 5, 1 / 3, 1.0):
            series = self("ADD", self("MUL", t, series), c)
        return self("MUL", s, series)

    def log1p(self, u: str) -> str:
        """log(1 + u) without cancellation for small u: 2 atanh(s) with s = u / (2 + u) by the
        series where |s| < _SERIES (u in (-1/3, 1/2)), LOG(1 + u) beyond (a NaN for 1 + u < 0)."""
        s = self("DIV", u, self("ADD", u, 2.0))
        series = self("MUL", self.atanh_series(s), 2.0)
        near = self.less(self("ABS", s), _SERIES)
        return self.select(near, series, self("LOG", self("ADD", u, 1.0)))

    def odd(self, x: str, magnitude_fn, out: str) -> str:
        """f(x) = sign(x) f(|x|) for an odd f given on |x| (NaN stays NaN)."""
        positive = magnitude_fn(self("ABS", x))
        return self.select(self.less(x, 0.0), self("NEG", positive), positive, out=out)


def _float_input(node, ctx) -> str:
    x = node.inputs[0]
    if ctx.dtype(x) != np.float32:
        raise ctx.error(f"{node.op_type} of {np.dtype(ctx.dtype(x))} is not supported (float32 only)")
    return x


# Below this magnitude atanh is its series, and so is log1p(u) = 2 atanh(u / (2 + u)): LOG(1 + u)
# rounds 1 + u, and LOG's error near 1 is large relative to its result (TFLite's XNNPACK delegate
# computes LOG to about 1e-7 absolute).
_SERIES = 0.2
# Beyond this magnitude asinh(a) and acosh(a) are log(2a) to float32 precision (the next term
# is 1 / (4a^2) relative), and a^2 must not overflow.
_LOG_REGION = 4096.0
# Below this magnitude sinh(a) is its Taylor series (exp(a) - exp(-a) would cancel).
_SINH_TAYLOR = 0.5


def _sinh_cosh_parts(f: _Composition, a: str) -> tuple[str, str]:
    """(exp(a) / 2, exp(-a) / 2) for a >= 0, the first as (h / 2) * h with h = exp(a / 2) so that
    it stays finite up to sinh's and cosh's own overflow (exp(a) alone overflows first)."""
    h = f("EXP", f("MUL", a, 0.5))
    return f("MUL", f("MUL", h, 0.5), h), f("DIV", 0.5, f("EXP", a))


@onnx_op("Tan", "Atan", "Asin", "Acos", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh")
def import_trigonometric(node, ctx):
    """Atan: ATAN2(x, 1). Tan: sin / cos. Asin, Acos: ATAN2 of x and sqrt((1 - x)(1 + x)).
    Sinh, Cosh: from exp (sinh's Taylor series near 0). Asinh, Acosh, Atanh: their logarithms
    through an accurate log1p, log(2a) for large arguments. Out of the domain: NaN, as ONNX.
    With TFLite's builtin kernels each is within a few float32 ulps of the exact value; the
    XNNPACK delegate approximates EXP, LOG, SIN and COS itself (EXP to some 30 ulps near its
    overflow, NaN in to 0 out), and the compositions inherit that."""
    x, y = _float_input(node, ctx), node.outputs[0]
    f = _Composition(ctx, x, y)
    kind = node.op_type
    if kind == "Atan":
        f("ATAN2", x, f.ones(x), out=y)
    elif kind == "Tan":
        f("DIV", f("SIN", x), f("COS", x), out=y)
    elif kind in ("Asin", "Acos"):
        root = f("SQRT", f("MUL", f("SUB", 1.0, x), f("ADD", 1.0, x)))
        f("ATAN2", *((x, root) if kind == "Asin" else (root, x)), out=y)
    elif kind == "Cosh":
        big, small = _sinh_cosh_parts(f, f("ABS", x))
        f("ADD", big, small, out=y)
    elif kind == "Sinh":
        def sinh(a):
            big, small = _sinh_cosh_parts(f, a)
            t = f("MUL", a, a)  # a (1 + t/6 + t^2/120 + t^3/5040 + t^4/362880), t = a^2
            series = 1 / 362880
            for c in (1 / 5040, 1 / 120, 1 / 6, 1.0):
                series = f("ADD", f("MUL", t, series), c)
            return f.select(f.less(a, _SINH_TAYLOR), f("MUL", a, series), f("SUB", big, small))
        f.odd(x, sinh, y)
    elif kind == "Asinh":
        def asinh(a):  # log1p(a + a^2 / (1 + sqrt(1 + a^2)))
            square = f("MUL", a, a)
            near = f.log1p(f("ADD", a, f("DIV", square, f("ADD", f("SQRT", f("ADD", square, 1.0)), 1.0))))
            return f.select(f.less(a, _LOG_REGION), near, f("ADD", f("LOG", a), math.log(2)))
        f.odd(x, asinh, y)
    elif kind == "Acosh":  # log1p(t + sqrt(t (t + 2))), t = x - 1 (exact near 1)
        t = f("SUB", x, 1.0)
        near = f.log1p(f("ADD", t, f("SQRT", f("MUL", t, f("ADD", t, 2.0)))))
        f.select(f.less(x, _LOG_REGION), near, f("ADD", f("LOG", x), math.log(2)), out=y)
    else:  # Atanh: the series near 0, log((1 + a) / (1 - a)) / 2 beyond
        def atanh(a):
            ratio = f("DIV", f("ADD", a, 1.0), f("SUB", 1.0, a))
            return f.select(f.less(a, _SERIES), f.atanh_series(a), f("MUL", f("LOG", ratio), 0.5))
        f.odd(x, atanh, y)


# Beyond this, tanh(softplus(x)) rounds to 1 in float32 (1 - 2 exp(-2x) / ...) and Mish is x.
_MISH_LINEAR = 20.0


@onnx_op("Mish")
def import_mish(node, ctx):
    """x tanh(softplus(x)) = x n / (n + 2) with n = e (e + 2), e = exp(min(x, 20)): tanh(log(1 +
    e)) = ((1 + e)^2 - 1) / ((1 + e)^2 + 1), without cancellation for negative x and without
    overflow for large x (where the fraction is 1 in float32)."""
    x, y = _float_input(node, ctx), node.outputs[0]
    f = _Composition(ctx, x, y)
    e = f("EXP", f("MINIMUM", x, _MISH_LINEAR))
    n = f("MUL", e, f("ADD", e, 2.0))
    f("MUL", x, f("DIV", n, f("ADD", n, 2.0)), out=y)


@onnx_op("Shrink")
def import_shrink(node, ctx):
    """x + bias where x < -lambd, else x - bias where x > lambd, else 0 (two SELECT_V2). With a
    negative lambd both conditions hold between lambd and -lambd: the first wins, as in
    onnxruntime."""
    x, y = _float_input(node, ctx), node.outputs[0]
    bias, lambd = float(node.attr("bias", 0.0)), float(node.attr("lambd", 0.5))
    f = _Composition(ctx, x, y)
    above = f.select(f("GREATER", x, lambd, dtype=np.bool_), f("SUB", x, bias), 0.0)
    f.select(f.less(x, -lambd), f("ADD", x, bias), above, out=y)


@onnx_op("ThresholdedRelu")
def import_thresholded_relu(node, ctx):
    """x where x > alpha, else 0 (SELECT_V2)."""
    x, y = _float_input(node, ctx), node.outputs[0]
    f = _Composition(ctx, x, y)
    f.select(f("GREATER", x, float(node.attr("alpha", 1.0)), dtype=np.bool_), x, 0.0, out=y)
