"""MaxPool, AveragePool (1D and 2D), GlobalAveragePool, GlobalMaxPool.

Pools run in NHWC; ONNX pads that are not TFLite's SAME/VALID become an explicit pad: PADV2 with
the lowest float for max pooling (ONNX pads max pools with -inf), PAD with zeros for average pooling
when count_include_pad=1. Global pools are MEAN / REDUCE_MAX over the spatial axes.
"""

from __future__ import annotations

import numpy as np

from .layout import reshape, to_channels_first, to_channels_last
from .padding import choose_padding, explicit_pad, onnx_pads
from .registry import onnx_op, tflite_op

tflite_op("MAX_POOL_2D", options="Pool2DOptions")
tflite_op("AVERAGE_POOL_2D", options="Pool2DOptions")


@onnx_op("MaxPool", "AveragePool")
def import_pool(node, ctx):
    x, y = node.inputs[0], node.outputs[0]
    if len(node.outputs) > 1 and node.outputs[1]:
        raise ctx.error("MaxPool's Indices output is not supported")
    shape = ctx.shape(x)
    if len(shape) not in (3, 4):
        raise ctx.error(f"{len(shape) - 2}D pooling is not supported (1D and 2D are)")
    one_d = len(shape) == 3
    if node.attr("ceil_mode", 0):
        pass  # the output shape (from shape inference) already accounts for it; pads below
    kernel = list(node.attr("kernel_shape"))
    strides = list(node.attr("strides", [1] * len(kernel)))
    dilations = list(node.attr("dilations", [1] * len(kernel)))
    if any(d != 1 for d in dilations):
        raise ctx.error("dilated pooling is not supported by TFLite's pooling kernels")
    y_shape = ctx.shape(y)
    if one_d:
        x = reshape(ctx, x, (shape[0], shape[1], 1, shape[2]))
        kernel, strides = [1] + kernel, [1] + strides
        y4 = (y_shape[0], y_shape[1], 1, y_shape[2])
    else:
        y4 = y_shape
    spatial = ctx.shape(x)[2:]
    if one_d:
        p = onnx_pads(node, shape[2:], kernel[1:], strides[1:], [1])
        pads = [0, p[0], 0, p[1]]
    else:
        pads = onnx_pads(node, spatial, kernel, strides, [1, 1])
    # ceil_mode: extend the end pads so that the VALID output size equals ONNX's.
    for i in range(2):
        needed = (y4[2 + i] - 1) * strides[i] + kernel[i] - spatial[i] - pads[i]
        pads[2 + i] = max(pads[2 + i], needed)
    x_nhwc = to_channels_last(ctx, x)
    padding = choose_padding(pads, spatial, kernel, strides, [1, 1], y4[2:])
    is_max = node.op_type == "MaxPool"
    correction = None
    if padding is None or (padding == "SAME" and not is_max and node.attr("count_include_pad", 0)):
        if is_max:
            x_nhwc = explicit_pad(ctx, x_nhwc, pads, float(np.finfo(np.float32).min))
        else:
            x_nhwc = explicit_pad(ctx, x_nhwc, pads)
            if not node.attr("count_include_pad", 0):
                # Average over the padded input, then rescale each output position by
                # window size / number of real (unpadded) inputs under its window.
                correction = _exclude_pad_correction(spatial, kernel, strides, pads, y4[2:])
        padding = "VALID"
    inner = ctx.tensor(y + "_nhwc", (y4[0], y4[2], y4[3], y4[1]), ctx.dtype(y))
    pooled = inner if correction is None else ctx.tensor(y + "_incl_pad", ctx.shape(inner), ctx.dtype(y))
    ctx.add_op("MAX_POOL_2D" if is_max else "AVERAGE_POOL_2D", [x_nhwc], [pooled],
               {"padding": padding, "stride_h": strides[0], "stride_w": strides[1],
                "filter_height": kernel[0], "filter_width": kernel[1]})
    if correction is not None:
        ctx.add_op("MUL", [pooled, ctx.constant("pool_correction", correction)], [inner])
    if one_d:
        inner4 = ctx.tensor(y + "_nchw", y4, ctx.dtype(y))
        to_channels_first(ctx, inner, inner4)
        reshape(ctx, inner4, y_shape, y)
    else:
        to_channels_first(ctx, inner, y)


def _exclude_pad_correction(spatial, kernel, strides, pads, out_spatial) -> np.ndarray:
    """[1, OH, OW, 1]: window size / count of unpadded inputs in each output's window."""
    counts = []
    for i in range(2):
        starts = np.arange(out_spatial[i]) * strides[i] - pads[i]
        ends = np.minimum(starts + kernel[i], spatial[i])
        counts.append(ends - np.maximum(starts, 0))
    count = np.outer(counts[0], counts[1]).astype(np.float32)
    return (kernel[0] * kernel[1] / count).reshape(1, out_spatial[0], out_spatial[1], 1)


@onnx_op("GlobalAveragePool", "GlobalMaxPool")
def import_global_pool(node, ctx):
    """A reduction over the spatial axes with keep_dims; in NHWC after the layout pass."""
    x, y = node.inputs[0], node.outputs[0]
    axes = np.arange(2, ctx.rank(x), dtype=np.int32)
    op_type = "MEAN" if node.op_type == "GlobalAveragePool" else "REDUCE_MAX"
    ctx.add_op(op_type, [x, ctx.constant("axes", axes)], [y], {"keep_dims": True})
