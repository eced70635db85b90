"""CenterCropPad (opset 18) with a constant target shape: each listed axis is cropped (SLICE)
or zero-padded (PAD) to its target size around its centre, the odd extra element on the far
side as ONNX places it. A shape computed at run time would make the output's shape data-dependent.
"""

from __future__ import annotations

import numpy as np

from .registry import onnx_op


@onnx_op("CenterCropPad")
def import_center_crop_pad(node, ctx):
    x, shape_name = node.inputs[:2]
    y = node.outputs[0]
    shape, rank = ctx.shape(x), ctx.rank(x)
    target = [int(s) for s in np.ravel(ctx.require_const(
        shape_name, "shape", "the output's shape follows from it, so it must be a constant (make it an "
        "initializer)"))]
    axes = node.attr("axes")
    axes = list(range(rank)) if axes is None else [int(a) for a in axes]
    if len(axes) != len(target) or any(not -rank <= a < rank for a in axes) or min(target, default=1) < 1:
        raise ctx.error(f"shape {target} does not fit the axes {axes} of the rank {rank} input {x!r}")
    axes = [a % rank for a in axes]
    if len(set(axes)) != len(axes):
        raise ctx.error(f"axes {axes} repeat an axis")
    begin, size, widths = np.zeros(rank, np.int32), np.array(shape, np.int32), np.zeros((rank, 2), np.int32)
    for axis, want in zip(axes, target):
        if want < shape[axis]:
            begin[axis], size[axis] = (shape[axis] - want) // 2, want
        elif want > shape[axis]:
            widths[axis] = ((want - shape[axis]) // 2, want - shape[axis] - (want - shape[axis]) // 2)
    current = x
    if (begin != 0).any() or (size != np.array(shape)).any():
        cropped = y if not widths.any() else ctx.tensor(y + "_cropped", tuple(int(s) for s in size), ctx.dtype(x))
        ctx.add_op("SLICE", [current, ctx.constant("begin", begin), ctx.constant("size", size)], [cropped])
        current = cropped
    if widths.any():
        ctx.add_op("PAD", [current, ctx.constant("paddings", widths)], [y])
    elif current == x:
        ctx.add_op("IDENTITY", [x], [y])
