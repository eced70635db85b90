"""LRN as LOCAL_RESPONSE_NORMALIZATION (NHWC, across channels).

ONNX: y = x / (bias + alpha/size * sum of x^2 over channels [c - floor((size-1)/2),
c + ceil((size-1)/2)])^beta. TFLite sums over [c - radius, c + radius] and does not divide alpha by
the window, so radius = (size-1)/2 and alpha_tflite = alpha/size. An even size makes ONNX's window
lopsided, which TFLite cannot express. Rank-3 inputs run as [N, C, 1, L].
"""

from __future__ import annotations

import numpy as np

from .layout import channels_last_tensor, reshape, to_channels_first, to_channels_last
from .registry import onnx_op, tflite_op

tflite_op("LOCAL_RESPONSE_NORMALIZATION", options="LocalResponseNormalizationOptions")


@onnx_op("LRN")
def import_lrn(node, ctx):
    x, y = node.inputs[0], node.outputs[0]
    size = int(node.attr("size"))
    if size % 2 == 0:
        raise ctx.error(f"size {size} is even: ONNX's window is then lopsided (one more channel "
                        "after than before), TFLite's is symmetric")
    if ctx.rank(x) not in (3, 4):
        raise ctx.error(f"LRN over a rank-{ctx.rank(x)} tensor is not supported (3-D and 4-D are)")
    if ctx.dtype(x) != np.float32:
        raise ctx.error(f"LRN of {ctx.dtype(x)} is not supported (TFLite's kernel is float32 only)")
    options = {"radius": (size - 1) // 2, "bias": float(node.attr("bias", 1.0)),
               "alpha": float(node.attr("alpha", 1e-4)) / size, "beta": float(node.attr("beta", 0.75))}
    shape = ctx.shape(x)
    if len(shape) == 3:
        x = reshape(ctx, x, (shape[0], shape[1], 1, shape[2]))
        y4 = ctx.tensor(y + "_4d", ctx.shape(x), ctx.dtype(y))
    else:
        y4 = y
    inner = channels_last_tensor(ctx, y4)
    ctx.add_op("LOCAL_RESPONSE_NORMALIZATION", [to_channels_last(ctx, x)], [inner], options)
    to_channels_first(ctx, inner, y4)
    if y4 != y:
        reshape(ctx, y4, shape, y)
