"""Activation functions: Relu, Clip, Sigmoid, Tanh, LeakyRelu, Elu, Selu, PRelu, HardSigmoid,
HardSwish, Softplus, Gelu/Erf; and the fused-activation arithmetic every op shares."""

from __future__ import annotations

import numpy as np

from .registry import onnx_op, tflite_op

_CLAMP = {"NONE": (None, None), "RELU": (0.0, None), "RELU6": (0.0, 6.0),
          "RELU_N1_TO_1": (-1.0, 1.0)}


def apply_fused_activation(value: np.ndarray, activation: str) -> np.ndarray:
    if activation == "TANH":
        return np.tanh(value)
    low, high = _CLAMP[activation]
    if low is None:
        return value
    return np.clip(value, low, high if high is not None else np.inf).astype(value.dtype)


def _unary(fn):
    return lambda inputs, op: [fn(inputs[0]).astype(inputs[0].dtype)]


tflite_op("RELU", evaluate=_unary(lambda x: np.maximum(x, 0)), layout="elementwise")
tflite_op("RELU6", evaluate=_unary(lambda x: np.clip(x, 0, 6)), layout="elementwise")
tflite_op("RELU_N1_TO_1", evaluate=_unary(lambda x: np.clip(x, -1, 1)), layout="elementwise")
tflite_op("LOGISTIC", evaluate=_unary(lambda x: 1 / (1 + np.exp(-x))), layout="elementwise")
tflite_op("TANH", evaluate=_unary(np.tanh), layout="elementwise")


@onnx_op("Relu")
def import_relu(node, ctx):
    ctx.add_op("RELU", node.inputs[:1], node.outputs)


@onnx_op("Sigmoid")
def import_sigmoid(node, ctx):
    ctx.add_op("LOGISTIC", node.inputs[:1], node.outputs)


@onnx_op("Tanh")
def import_tanh(node, ctx):
    ctx.add_op("TANH", node.inputs[:1], node.outputs)


@onnx_op("Clip")
def import_clip(node, ctx):
    """Clip(0,6) is RELU6, Clip(-1,1) RELU_N1_TO_1, Clip(0,inf) RELU; others MAXIMUM/MINIMUM."""
    x, y = node.inputs[0], node.outputs[0]
    if ctx.opset < 11:
        low, high = node.attr("min", -np.inf), node.attr("max", np.inf)
    else:
        def bound(i, default):
            if len(node.inputs) <= i or not node.inputs[i]:
                return default
            return float(ctx.require_const(node.inputs[i], "Clip bound"))
        low, high = bound(1, -np.inf), bound(2, np.inf)
    named = {(0.0, 6.0): "RELU6", (-1.0, 1.0): "RELU_N1_TO_1", (0.0, np.inf): "RELU"}
    dtype = ctx.dtype(x)
    if (low, high) in named and dtype == np.float32:
        ctx.add_op(named[(low, high)], [x], [y])
        return
    info = np.finfo(dtype) if dtype.kind == "f" else np.iinfo(dtype)
    current = x
    if low > info.min:
        out = y if high >= info.max else ctx.tensor(y + "_low", ctx.shape(x), dtype)
        ctx.add_op("MAXIMUM", [current, ctx.constant("clip_min", np.array(low, dtype))], [out])
        current = out
    if high < info.max:
        ctx.add_op("MINIMUM", [current, ctx.constant("clip_max", np.array(high, dtype))], [y])
        current = y
    if current != y:
        ctx.add_op("IDENTITY", [x], [y])
