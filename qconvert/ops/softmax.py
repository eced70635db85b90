"""Softmax and LogSoftmax. TFLite reduces over the last axis only; another axis is moved last by
a TRANSPOSE pair (which the layout pass usually cancels). Before opset 13 ONNX's softmax flattens
the input to 2D at `axis`, which a RESHAPE pair expresses."""

from __future__ import annotations

import numpy as np

from .layout import reshape, transpose
from .registry import FIXED_INT16, QuantRule, onnx_op, tflite_op
from .versions import by_input_dtype


def _softmax(x, beta=1.0):
    z = (x - x.max(axis=-1, keepdims=True)) * beta
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


tflite_op("SOFTMAX", options="SoftmaxOptions",
          quant=QuantRule(output="fixed", fixed_params=(1 / 256, -128), int16=True,
                         fixed_params_int16=FIXED_INT16),
          version=by_input_dtype({np.int16: 3, np.int8: 2}),
          evaluate=lambda inputs, op: [_softmax(inputs[0], op.options.get("beta", 1.0)).astype(inputs[0].dtype)])
tflite_op("LOG_SOFTMAX", options="LogSoftmaxOptions",
          quant=QuantRule(output="fixed", fixed_params=(16 / 256, 127)), version=by_input_dtype({np.int8: 2}),
          evaluate=lambda inputs, op: [np.log(_softmax(inputs[0])).astype(inputs[0].dtype)])


@onnx_op("Softmax", "LogSoftmax")
def import_softmax(node, ctx):
    x, y = node.inputs[0], node.outputs[0]
    shape = ctx.shape(x)
    rank = len(shape)
    op_type = "SOFTMAX" if node.op_type == "Softmax" else "LOG_SOFTMAX"
    options = {"beta": 1.0} if op_type == "SOFTMAX" else {}
    if ctx.opset < 13:
        axis = node.attr("axis", 1) % max(rank, 1)
        flat = (int(np.prod(shape[:axis])), int(np.prod(shape[axis:])))
        if len(shape) == 2 and axis == 1:
            ctx.add_op(op_type, [x], [y], options)
            return
        inner = ctx.tensor(y + "_2d", flat, ctx.dtype(y))
        ctx.add_op(op_type, [reshape(ctx, x, flat)], [inner], options)
        reshape(ctx, inner, shape, y)
        return
    axis = node.attr("axis", -1) % rank
    if axis == rank - 1:
        ctx.add_op(op_type, [x], [y], options)
        return
    perm = list(range(rank))
    perm[axis], perm[-1] = perm[-1], perm[axis]
    inner = ctx.tensor(y + "_last", [shape[p] for p in perm], ctx.dtype(y))
    ctx.add_op(op_type, [transpose(ctx, x, perm)], [inner], options)
    transpose(ctx, inner, perm, y)
