"""MaxUnpool: X [N, C, H, W] written at the positions its indices I name (MaxPool's Indices:
flat offsets into the whole output tensor, batch and channel included), zeros elsewhere. The
output's shape is static: the output_shape input (a constant) or what kernel_shape, strides and
pads give ((in - 1) * stride + kernel - pads). One SCATTER_ND of the flattened values into the
flattened output, RESHAPEd. When the pool windows overlap (a stride below the kernel), one input
element may be picked by several windows: its index appears more than once, with the same value,
and SCATTER_ND sums; a SCATTER_ND of ones counts the writes and the sum is divided by the count.
"""

from __future__ import annotations

import numpy as np

from .layout import reshape
from .registry import onnx_op, onnx_types


@onnx_types("MaxUnpool", values=True)
def _max_unpool_types(shapes, dtypes, attrs, values):
    """onnx infers no shape when output_shape is given: it is that constant's value."""
    wanted = values[2] if len(values) > 2 else None
    if wanted is None or dtypes[0] is None:
        return [None]
    return [(tuple(int(d) for d in np.ravel(wanted)), dtypes[0])]


@onnx_op("MaxUnpool")
def import_max_unpool(node, ctx):
    x, indices = node.inputs[:2]
    shape_name = node.inputs[2] if len(node.inputs) > 2 else ""
    y = node.outputs[0]
    if ctx.dtype(x) != np.float32:
        raise ctx.error(f"input {x!r} has dtype {ctx.dtype(x)}; float32 is supported")
    if ctx.shape(indices) != ctx.shape(x):
        raise ctx.error(f"indices {indices!r} of shape {list(ctx.shape(indices))} do not match the input "
                        f"{list(ctx.shape(x))}")
    kernel = [int(k) for k in node.attr("kernel_shape")]
    strides = [int(s) for s in node.attr("strides", [1] * len(kernel))]
    out_shape = tuple(ctx.shape(y))
    if shape_name:
        wanted = tuple(int(v) for v in np.ravel(ctx.require_const(
            shape_name, "output_shape", "it sets the output's shape, so it must be a constant")))
        if wanted != out_shape:
            raise ctx.error(f"output_shape {list(wanted)} is not the output's shape {list(out_shape)}")
    total, count = int(np.prod(out_shape)), int(np.prod(ctx.shape(x)))
    flat_x = reshape(ctx, x, (count,))
    positions = reshape(ctx, indices, (count, 1))
    size = ctx.constant("scatter_shape", np.array([total], np.int32))
    overlapping = any(s < k for s, k in zip(strides, kernel))
    summed = ctx.tensor(y + "_flat", (total,), np.float32)
    ctx.add_op("SCATTER_ND", [positions, flat_x, size], [summed])
    if overlapping:
        writes = ctx.tensor(y + "_writes", (total,), np.float32)
        ctx.add_op("SCATTER_ND", [positions, ctx.constant("ones", np.ones(count, np.float32)), size], [writes])
        at_least_one = ctx.tensor(y + "_writes_1", (total,), np.float32)
        ctx.add_op("MAXIMUM", [writes, ctx.constant("one", np.ones((), np.float32))], [at_least_one])
        averaged = ctx.tensor(y + "_flat_unique", (total,), np.float32)
        ctx.add_op("DIV", [summed, at_least_one], [averaged])
        summed = averaged
    reshape(ctx, summed, out_shape, y)
