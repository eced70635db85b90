"""Compress with a constant condition: GATHER of the positions the condition selects (along
`axis`, or of the flattened input without one). A condition computed at run time stays refused:
the output's length would be data-dependent, which a static TFLite graph cannot hold.

onnx's shape inference leaves the output's length unknown even for a constant condition: the
output types below count the condition's selected positions (the loader's per-node types)."""

from __future__ import annotations

import numpy as np

from .layout import reshape
from .registry import onnx_op, onnx_types


@onnx_types("Compress", values=True)
def _compress_types(shapes, dtypes, attrs, values):
    x, condition = shapes[0], values[1] if len(values) > 1 else None
    if x is None or condition is None:
        return [None]
    count = int(np.count_nonzero(np.asarray(condition).reshape(-1)))
    axis = attrs.get("axis")
    if axis is None:
        return [((count,), dtypes[0])]
    axis = int(axis) % len(x)
    return [(tuple(x[:axis]) + (count,) + tuple(x[axis + 1:]), dtypes[0])]


@onnx_op("Compress")
def import_compress(node, ctx):
    x, condition = node.inputs[:2]
    y = node.outputs[0]
    keep = np.asarray(ctx.require_const(condition, "condition", "the output's length follows from "
                                        "its values, which a static TFLite graph must know"))
    axis = node.attr("axis")
    if axis is None:
        x = reshape(ctx, x, (int(np.prod(ctx.shape(x))),))
        axis = 0
    rank, shape = ctx.rank(x), ctx.shape(x)
    if not -rank <= int(axis) < rank:
        raise ctx.error(f"axis {axis} is out of range for the rank {rank} input {x!r}")
    axis = int(axis) % rank
    if keep.ndim != 1 or keep.size > shape[axis]:
        raise ctx.error(f"condition {condition!r} of shape {list(keep.shape)} is not 1-D of at most "
                        f"{shape[axis]} values (the input's axis {axis})")
    positions = np.flatnonzero(keep).astype(np.int32)
    if positions.size == 0:
        raise ctx.error("the condition selects nothing: an empty output has no TFLite tensor")
    expected = shape[:axis] + (positions.size,) + shape[axis + 1:]
    if ctx.shape(y) != expected:
        raise ctx.error(f"the output's shape {list(ctx.shape(y))} is not {list(expected)}")
    ctx.add_op("GATHER", [x, ctx.constant("positions", positions)], [y], {"axis": axis, "batch_dims": 0})
