"""Activation functions: Relu, Clip, Sigmoid, Tanh, LeakyRelu, PRelu, Elu, Selu, Celu, HardSigmoid,
HardSwish, Swish, Softplus, Gelu; and the fused-activation arithmetic every op shares.

TFLite's ELU has alpha 1, so Elu/Selu/Celu with other constants become
gamma * (RELU(x) + alpha * MINIMUM(ELU(x / alpha_in), 0)). Softplus is computed stably as
RELU(x) + LOG(1 + EXP(-|x|)). Erf (and the Gelu pattern built from it) is in unary.py and
transforms/identify_gelu.py."""

from __future__ import annotations

import numpy as np

from .registry import (
    FIXED_INT16,
    FREE,
    FREE16,
    FREE_BINARY,
    SAME16,
    QuantRule,
    evaluate_unary,
    onnx_op,
    onnx_ops_as,
    tflite_op,
)
from .unary import erf_reference
from .versions import by_input_dtype, int16_io_or_int8

_CLAMP = {"NONE": (None, None), "RELU": (0.0, None), "RELU6": (0.0, 6.0),
          "RELU_N1_TO_1": (-1.0, 1.0)}


def apply_fused_activation(value: np.ndarray, activation: str) -> np.ndarray:
    if activation == "TANH":
        return np.tanh(value)
    low, high = _CLAMP[activation]
    if low is None:
        return value
    return np.clip(value, low, high if high is not None else np.inf).astype(value.dtype)



tflite_op("RELU", quant=FREE16, evaluate=evaluate_unary(lambda x: np.maximum(x, 0)), layout="elementwise",
          version=by_input_dtype({np.int16: 3, np.int8: 2, np.uint8: 2}))
# RELU6 shares its input's params: TFLite Micro's int8 RELU6 clamps the raw int8 codes to those of 0
# and 6 under the input's params and never rescales, so a RELU6 with its own output params is silently
# wrong there (143 output steps off in tests/quantize/test_ops_int8.py); LiteRT's kernel handles both.
tflite_op("RELU6", quant=SAME16, evaluate=evaluate_unary(lambda x: np.clip(x, 0, 6)),
          layout="elementwise", version=by_input_dtype({np.int16: 3, np.int8: 2}))
tflite_op("RELU_N1_TO_1", quant=FREE, evaluate=evaluate_unary(lambda x: np.clip(x, -1, 1)), layout="elementwise")
tflite_op("LOGISTIC", quant=QuantRule(output="fixed", fixed_params=(1 / 256, -128), int16=True,
                                    fixed_params_int16=FIXED_INT16),
          evaluate=evaluate_unary(lambda x: 1 / (1 + np.exp(-x))), layout="elementwise",
          version=int16_io_or_int8(3, 2))
tflite_op("TANH", quant=QuantRule(output="fixed", fixed_params=(1 / 128, 0), int16=True,
                                fixed_params_int16=FIXED_INT16),
          evaluate=evaluate_unary(np.tanh), layout="elementwise", version=int16_io_or_int8(3, 2))

_leaky_relu_version = by_input_dtype({np.int16: 2})
_gelu_version = by_input_dtype({np.int8: 2, np.uint8: 2})


def _gelu(x: np.ndarray, approximate: bool) -> np.ndarray:
    x64 = x.astype(np.float64)
    if approximate:
        return 0.5 * x64 * (1 + np.tanh(np.sqrt(2 / np.pi) * (x64 + 0.044715 * x64 ** 3)))
    return 0.5 * x64 * (1 + erf_reference(x64 / np.sqrt(2)))


def _prelu(inputs, op):
    x, alpha = inputs
    return [np.where(x >= 0, x, x * alpha).astype(x.dtype)]


def _leaky_relu(inputs, op):
    return _prelu([inputs[0], np.float32(op.options["alpha"])], op)


tflite_op("LEAKY_RELU", quant=FREE16, options="LeakyReluOptions", layout="elementwise", version=_leaky_relu_version,
          evaluate=_leaky_relu)
# PRELU broadcasts alpha against the input: as an elementwise op, sink_transposes transposes a
# constant alpha (padded to the input's rank) together with the activation.
tflite_op("PRELU", quant=FREE_BINARY, evaluate=_prelu, layout="elementwise")
tflite_op("ELU", evaluate=evaluate_unary(lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0)))),
          layout="elementwise")
tflite_op("HARD_SWISH", quant=FREE, options="HardSwishOptions", layout="elementwise",
          evaluate=evaluate_unary(lambda x: x * np.clip(x + 3, 0, 6) / 6))
tflite_op("GELU", quant=FREE, options="GeluOptions", layout="elementwise", version=_gelu_version,
          evaluate=lambda inputs, op: [_gelu(inputs[0], op.options.get("approximate", False))
                                       .astype(inputs[0].dtype)])


onnx_ops_as({"Sigmoid": "LOGISTIC", "Tanh": "TANH", "HardSwish": "HARD_SWISH"}, inputs=1)


@onnx_op("Relu")
def import_relu(node, ctx):
    """RELU; on integers (opset 14) MAXIMUM with 0, which has an int32 kernel where RELU has not."""
    x, y = node.inputs[0], node.outputs[0]
    if ctx.dtype(x).kind == "f":
        ctx.add_op("RELU", [x], [y])
    else:
        ctx.add_op("MAXIMUM", [x, ctx.constant("zero", np.zeros((), ctx.dtype(x)))], [y])


@onnx_op("Clip")
def import_clip(node, ctx):
    """Clip(0,6) is RELU6, Clip(-1,1) RELU_N1_TO_1, Clip(0,inf) RELU; others MAXIMUM/MINIMUM.
    A bound computed at run time (a log-mel front end's ReduceMax(x) - 80) is the tensor that
    MAXIMUM/MINIMUM reads, broadcast as ONNX's scalar bound is: the output keeps x's shape."""
    x, y = node.inputs[0], node.outputs[0]
    if ctx.opset < 11:
        low, high = node.attr("min", -np.inf), node.attr("max", np.inf)
    else:
        def bound(i, default):
            """The constant bound as a float, a computed one by its tensor's name."""
            if len(node.inputs) <= i or not node.inputs[i]:
                return default
            value = ctx.const(node.inputs[i])
            return node.inputs[i] if value is None else float(value)
        low, high = bound(1, -np.inf), bound(2, np.inf)
    named = {(0.0, 6.0): "RELU6", (-1.0, 1.0): "RELU_N1_TO_1", (0.0, np.inf): "RELU"}
    dtype = ctx.dtype(x)
    if isinstance(low, float) and isinstance(high, float) and (low, high) in named and dtype == np.float32:
        ctx.add_op(named[(low, high)], [x], [y])
        return
    for computed in (b for b in (low, high) if isinstance(b, str)):
        if ctx.dtype(computed) != dtype:
            raise ctx.error(f"bound {computed!r} has dtype {ctx.dtype(computed)}, the input {dtype}")
        ctx.check_broadcast([x, computed], y)
    info = np.finfo(dtype) if dtype.kind == "f" else np.iinfo(dtype)
    clamps_low = isinstance(low, str) or low > info.min
    clamps_high = isinstance(high, str) or high < info.max
    current = x
    if clamps_low:
        out = ctx.tensor(y + "_low", ctx.shape(x), dtype) if clamps_high else y
        limit = low if isinstance(low, str) else ctx.constant("clip_min", np.array(low, dtype))
        ctx.add_op("MAXIMUM", [current, limit], [out])
        current = out
    if clamps_high:
        limit = high if isinstance(high, str) else ctx.constant("clip_max", np.array(high, dtype))
        ctx.add_op("MINIMUM", [current, limit], [y])
        current = y
    if current != y:
        ctx.add_op("IDENTITY", [x], [y])


def _scalar(ctx, value, like: str) -> str:
    return ctx.constant("c", np.array(value, ctx.dtype(like)))


def _op(ctx, type: str, inputs: list[str], like: str, hint: str, y: str | None = None) -> str:
    """Appends one op writing a new tensor shaped like `like` (or `y`); returns the output name."""
    out = y or ctx.tensor(hint, ctx.shape(like), ctx.dtype(like))
    ctx.add_op(type, inputs, [out])
    return out


@onnx_op("LeakyRelu")
def import_leaky_relu(node, ctx):
    ctx.add_op("LEAKY_RELU", node.inputs[:1], node.outputs, {"alpha": float(node.attr("alpha", 0.01))})


@onnx_op("PRelu")
def import_prelu(node, ctx):
    """PRELU(x, slope): a constant slope is padded to x's rank so it transposes with x."""
    x, slope = node.inputs[:2]
    value = ctx.const(slope)
    if value is not None:
        shape = ctx.shape(x)
        if value.ndim == 1 and len(shape) > 2 and value.size == shape[1] not in (1, shape[-1]):
            # Before opset 7 a [C] slope applied along the channel axis, not the last one.
            value = value.reshape((value.size,) + (1,) * (len(shape) - 2))
        value = value.astype(ctx.dtype(x)).reshape((1,) * (ctx.rank(x) - value.ndim) + value.shape)
        slope = ctx.constant("slope", value)
    elif ctx.dtype(slope) != ctx.dtype(x) or ctx.rank(slope) > ctx.rank(x):
        raise ctx.error("a non-constant slope must have the input's dtype and at most its rank")
    ctx.add_op("PRELU", [x, slope], node.outputs)


def _elu_family(ctx, x: str, y: str, alpha: float, gamma: float = 1.0, inner: float = 1.0) -> None:
    """y = gamma * (relu(x) + alpha * min(elu(x * inner), 0)); plain ELU when all are 1."""
    if alpha == gamma == inner == 1.0:
        ctx.add_op("ELU", [x], [y])
        return
    source = _op(ctx, "MUL", [x, _scalar(ctx, inner, x)], x, y + "_in") if inner != 1.0 else x
    negative = _op(ctx, "MINIMUM", [_op(ctx, "ELU", [source], x, y + "_elu"), _scalar(ctx, 0, x)],
                   x, y + "_neg")
    if alpha * gamma != 1.0:
        negative = _op(ctx, "MUL", [negative, _scalar(ctx, alpha * gamma, x)], x, y + "_negs")
    positive = _op(ctx, "RELU", [x], x, y + "_pos")
    if gamma != 1.0:
        positive = _op(ctx, "MUL", [positive, _scalar(ctx, gamma, x)], x, y + "_poss")
    ctx.add_op("ADD", [positive, negative], [y])


@onnx_op("Elu")
def import_elu(node, ctx):
    _elu_family(ctx, node.inputs[0], node.outputs[0], float(node.attr("alpha", 1.0)))


@onnx_op("Selu")
def import_selu(node, ctx):
    _elu_family(ctx, node.inputs[0], node.outputs[0],
                float(node.attr("alpha", 1.67326319217681884765625)),
                float(node.attr("gamma", 1.05070102214813232421875)))


@onnx_op("Celu")
def import_celu(node, ctx):
    """max(0, x) + min(0, alpha * (exp(x / alpha) - 1)): the ELU form for alpha > 0."""
    alpha = float(node.attr("alpha", 1.0))
    if alpha == 0:
        raise ctx.error("Celu with alpha 0 divides by zero (x / alpha): ONNX leaves it undefined")
    x, y = node.inputs[0], node.outputs[0]
    if alpha > 0:
        _elu_family(ctx, x, y, alpha, inner=1.0 / alpha)
        return
    _celu_negative_alpha(ctx, x, y, alpha)


def _celu_negative_alpha(ctx, x: str, y: str, alpha: float) -> None:
    """Celu for alpha < 0: the second term min(0, alpha * (exp(x / alpha) - 1)) is
    alpha * (exp(max(x / alpha, 0)) - 1), nonzero where x < 0 (there x / alpha > 0 and ELU is
    linear, so the ELU form of alpha > 0 does not apply); it runs to -inf as exp overflows,
    as onnxruntime's does."""
    scaled = _op(ctx, "RELU", [_op(ctx, "MUL", [x, _scalar(ctx, 1.0 / alpha, x)], x, y + "_in")],
                 x, y + "_inpos")
    growth = _op(ctx, "ADD", [_op(ctx, "EXP", [scaled], x, y + "_exp"), _scalar(ctx, -1.0, x)],
                 x, y + "_expm1")
    negative = _op(ctx, "MUL", [growth, _scalar(ctx, alpha, x)], x, y + "_neg")
    ctx.add_op("ADD", [_op(ctx, "RELU", [x], x, y + "_pos"), negative], [y])


@onnx_op("HardSigmoid")
def import_hard_sigmoid(node, ctx):
    """max(0, min(1, alpha * x + beta)) as MUL, ADD, RELU, MINIMUM (the RELU fuses into the ADD)."""
    x, y = node.inputs[0], node.outputs[0]
    alpha, beta = float(node.attr("alpha", 0.2)), float(node.attr("beta", 0.5))
    value = x
    if alpha != 1.0:
        value = _op(ctx, "MUL", [value, _scalar(ctx, alpha, x)], x, y + "_scaled")
    if beta != 0.0:
        value = _op(ctx, "ADD", [value, _scalar(ctx, beta, x)], x, y + "_shifted")
    value = _op(ctx, "RELU", [value], x, y + "_relu")
    ctx.add_op("MINIMUM", [value, _scalar(ctx, 1.0, x)], [y])


@onnx_op("Swish")
def import_swish(node, ctx):
    """x * sigmoid(alpha * x) (opset 24): LOGISTIC then MUL, the ops the SiLU pattern becomes
    (transforms/identify_activations.py), with a MUL by alpha in front when alpha is not 1."""
    x, y = node.inputs[0], node.outputs[0]
    if ctx.dtype(x) != np.float32:
        raise ctx.error(f"Swish of {ctx.dtype(x)} is not supported (float32 is)")
    alpha = float(node.attr("alpha", 1.0))
    scaled = x if alpha == 1.0 else _op(ctx, "MUL", [x, _scalar(ctx, alpha, x)], x, y + "_scaled")
    ctx.add_op("MUL", [x, _op(ctx, "LOGISTIC", [scaled], x, y + "_sigmoid")], [y])


@onnx_op("Softplus")
def import_softplus(node, ctx):
    """log(exp(x) + 1) = relu(x) + log(1 + exp(-|x|)): no overflow for large x."""
    x, y = node.inputs[0], node.outputs[0]
    negative = _op(ctx, "NEG", [_op(ctx, "ABS", [x], x, y + "_abs")], x, y + "_nabs")
    tail = _op(ctx, "ADD", [_op(ctx, "EXP", [negative], x, y + "_exp"), _scalar(ctx, 1.0, x)],
               x, y + "_1p")
    ctx.add_op("ADD", [_op(ctx, "RELU", [x], x, y + "_relu"), _op(ctx, "LOG", [tail], x, y + "_log")],
               [y])


@onnx_op("Gelu")
def import_gelu(node, ctx):
    approximate = node.attr("approximate", "none")
    if approximate not in ("none", "tanh"):
        raise ctx.error(f"unknown approximate={approximate!r}")
    ctx.add_op("GELU", node.inputs[:1], node.outputs, {"approximate": approximate == "tanh"})
