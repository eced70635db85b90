"""OneHot (ONE_HOT).

ONE_HOT takes the indices, an int32 scalar depth, the on and off values as scalars and the axis
of the new dimension. ONNX's `values` input is [off, on] (a constant is split here, a run-time one
is read with two scalar GATHERs). ONNX wraps an index in [-depth, -1] to index + depth while
TFLite writes all-off for every negative index, so indices that can be negative get depth added
where negative (constants in numpy, else SELECT_V2); indices outside [-depth, depth-1] stay out
of range and give all-off in both. Float indices are truncated to int32 (CAST), as ONNX casts
them. The depth must be a constant: it is the output's new dimension.
"""

from __future__ import annotations

import numpy as np

from .gather import non_negative
from .registry import onnx_op, tflite_op

tflite_op("ONE_HOT", options="OneHotOptions")


def _depth(node, ctx) -> int:
    name = node.inputs[1]
    value = ctx.const(name)
    if value is None:
        raise ctx.error(f"depth (input {name!r}) must be a constant: it is the size of the new "
                        "axis, and a TFLite graph's shapes are static")
    if value.size != 1 or value.ndim > 1:
        raise ctx.error(f"depth (input {name!r}) has shape {list(value.shape)}; ONNX wants a "
                        "scalar or a 1-D tensor of one element")
    depth = float(value.reshape(()))
    if not np.isfinite(depth) or depth < 1 or depth > np.iinfo(np.int32).max:
        raise ctx.error(f"depth (input {name!r}) is {value.reshape(())}; it must be a positive "
                        "int32 count")
    return int(depth)


def _on_off(ctx, values: str) -> tuple[str, str]:
    """The on and off scalars from ONNX's [off, on]."""
    constant = ctx.const(values)
    if constant is not None:
        return (ctx.constant("on_value", constant.reshape(-1)[1]),
                ctx.constant("off_value", constant.reshape(-1)[0]))
    scalars = []
    for position, hint in ((1, "_on"), (0, "_off")):
        scalar = ctx.tensor(values + hint, (), ctx.dtype(values))
        ctx.add_op("GATHER", [values, ctx.constant("position", np.array(position, np.int32))],
                   [scalar], {"axis": 0, "batch_dims": 0})
        scalars.append(scalar)
    return scalars[0], scalars[1]


def _integer_indices(ctx, indices: str) -> str:
    """The indices as int32: a float constant truncated in numpy, a float tensor by CAST."""
    dtype = np.dtype(ctx.dtype(indices))
    if dtype.kind in "iu":
        return indices
    value = ctx.const(indices)
    if value is not None:
        return ctx.constant("indices", np.trunc(value).astype(np.int32))
    cast = ctx.tensor(indices + "_int", ctx.shape(indices), np.int32)
    ctx.add_op("CAST", [indices], [cast], {"in_data_type": dtype, "out_data_type": np.dtype(np.int32)})
    return cast


@onnx_op("OneHot")
def import_one_hot(node, ctx):
    indices, _, values = node.inputs[:3]
    y = node.outputs[0]
    shape = tuple(ctx.shape(indices))
    rank = len(shape)
    axis = node.attr("axis", -1)
    if not -rank - 1 <= axis <= rank:
        raise ctx.error(f"axis {axis} is outside [{-rank - 1}, {rank}] for indices of rank {rank}")
    axis %= rank + 1
    if np.dtype(ctx.dtype(indices)).kind not in "fiu":
        raise ctx.error(f"indices have dtype {np.dtype(ctx.dtype(indices))}; they must be numbers")
    depth = _depth(node, ctx)
    if tuple(ctx.shape(values)) != (2,):
        raise ctx.error(f"values (input {values!r}) has shape {list(ctx.shape(values))}; ONNX "
                        "wants [off_value, on_value], shape [2]")
    expected = shape[:axis] + (depth,) + shape[axis:]
    if tuple(ctx.shape(y)) != expected:
        raise ctx.error(f"output {y!r} has shape {list(ctx.shape(y))}, not {list(expected)} "
                        f"(depth {depth} at axis {axis})")
    indices = non_negative(ctx, _integer_indices(ctx, indices), depth)
    on, off = _on_off(ctx, values)
    ctx.add_op("ONE_HOT", [indices, ctx.constant("depth", np.array(depth, np.int32)), on, off],
               [y], {"axis": axis})
