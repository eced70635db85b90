"""Selections. Compress with a constant condition: GATHER of the positions the condition selects
(along `axis`, or of the flattened input without one); a condition computed at run time stays
refused. NonZero: TFLite's WHERE (the coordinates of the true elements, [count, rank] int64, in
row-major order as ONNX's), of x != 0 unless x is bool, transposed to ONNX's [rank, count]; the
count is known only when the model runs: the loader sizes it as a dynamic dimension
(registry.RUN_TIME, onnx/dynamic_dims.py) and the interpreter resizes what follows.

onnx's shape inference leaves the output's length unknown even for a constant condition: the
output types below count the condition's selected positions (the loader's per-node types)."""

from __future__ import annotations

import numpy as np

from .layout import reshape
from .registry import RUN_TIME, onnx_op, onnx_types, tflite_op


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


tflite_op("WHERE", options="WhereOptions")


@onnx_types("NonZero", run_time=True)
def _non_zero_types(shapes, dtypes, attrs):
    return [((len(shapes[0]), RUN_TIME), np.int64)]


@onnx_op("NonZero")
def import_non_zero(node, ctx):
    x, y = node.inputs[0], node.outputs[0]
    rank = ctx.rank(x)
    if rank == 0:
        raise ctx.error("of a scalar: give it rank 1 (Reshape to [1])")
    count = ctx.shape(y)[1]
    condition = x
    if ctx.dtype(x) != np.bool_:
        condition = ctx.tensor(x + "_nonzero", ctx.shape(x), np.bool_)
        zero = ctx.constant("zero", np.zeros((), ctx.dtype(x)))
        ctx.add_op("NOT_EQUAL", [x, zero], [condition])
    coordinates = ctx.tensor(y + "_where", (count, rank), np.int64)
    ctx.add_op("WHERE", [condition], [coordinates])
    rows = ctx.tensor(y + "_rows", (rank, count), np.int64)
    ctx.add_op("TRANSPOSE", [coordinates, ctx.constant("perm", np.array([1, 0], np.int32))], [rows])
    if ctx.dtype(y) == np.int64:
        ctx.add_op("IDENTITY", [rows], [y])
    else:
        ctx.add_op("CAST", [rows], [y], {"in_data_type": np.int64, "out_data_type": ctx.dtype(y)})
