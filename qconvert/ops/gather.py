"""Gather (GATHER), GatherND (GATHER_ND) and GatherElements (GATHER_ND with built coordinates).

ONNX allows negative indices (counting from the end); TFLite's kernels reject them. Constant
indices are normalised with numpy; dynamic ones go through SELECT_V2(indices < 0, indices + dim,
indices) (three cheap elementwise ops). Gather with a constant table and dynamic indices is an
embedding lookup and needs nothing special.
"""

from __future__ import annotations

import numpy as np

from .argmax import remap_dropped_axis
from .folded import shape_of
from .layout import reshape
from .registry import SAME16, onnx_op, tflite_op


def _gather_version(op, model):
    """op_version.cc's GATHER rule, first match wins."""
    data = model.arrays[op.inputs[0]].dtype
    if model.arrays[op.inputs[1]].dtype == np.int16:
        return 6
    if op.options.get("batch_dims", 0):
        return 5
    by_dtype = {np.dtype(np.int16): 4, np.dtype(np.bool_): 3, np.dtype(np.int8): 2}
    return by_dtype.get(np.dtype(data), 1)


def _gather_nd_version(op, model):
    data = np.dtype(model.arrays[op.inputs[0]].dtype)
    if data == np.bool_:
        return 5
    if model.arrays[op.inputs[1]].dtype == np.int16:
        return 4
    return 3 if data == np.int16 else 1


def _remap_gather_axis(op, model, perm):
    """Indices of rank 0 drop the axis, rank 1 keep the rank; larger ranks are not remapped."""
    rank = len(perm)
    axis = op.options.get("axis", 0) % rank
    indices_rank = len(model.arrays[op.inputs[1]].shape)
    if indices_rank == 1:
        op.options["axis"] = perm[axis]
        return perm
    if indices_rank == 0:
        op.options["axis"], out_perm = remap_dropped_axis(axis, perm)
        return out_perm
    return None


def _evaluate_gather_nd(inputs, op):
    x, indices = inputs
    return [x[tuple(np.moveaxis(indices, -1, 0))]]


def _evaluate_gather(inputs, op):
    return [np.take(inputs[0], inputs[1], axis=op.options.get("axis", 0))]


tflite_op("GATHER", options="GatherOptions", quant=SAME16, version=_gather_version, layout="axis",
          layout_inputs=(0,), remap_axes=_remap_gather_axis, evaluate=_evaluate_gather)
tflite_op("GATHER_ND", options="GatherNdOptions", quant=SAME16, version=_gather_nd_version,
          evaluate=_evaluate_gather_nd)


def non_negative(ctx, indices: str, dims, of: tuple[str, int] | None = None) -> str:
    """`indices` with negative entries counted from the end of `dims` (broadcast against them):
    the dimensions of tensor of[0] from axis of[1] on, when given, which the values may decide
    (then read by SHAPE when the model runs: folded.shape_of)."""
    dims = np.asarray(dims, dtype=np.int32)
    value = ctx.const(indices)
    if value is not None:
        return ctx.constant("indices", np.where(value < 0, value + dims, value).astype(np.int32))
    shape, dtype = ctx.shape(indices), ctx.dtype(indices)
    negative = ctx.tensor(indices + "_negative", shape, np.bool_)
    ctx.add_op("LESS", [indices, ctx.constant("zero", np.zeros((), dtype))], [negative])
    shifted = ctx.tensor(indices + "_shifted", shape, dtype)
    ctx.add_op("ADD", [indices, _dims_tensor(ctx, dims, of, dtype)], [shifted])
    fixed = ctx.tensor(indices + "_fixed", shape, dtype)
    ctx.add_op("SELECT_V2", [negative, shifted, indices], [fixed])
    return fixed


def _dims_tensor(ctx, dims: np.ndarray, of: tuple[str, int] | None, dtype) -> str:
    """`dims` as a constant of `dtype`, or, when the values decide the shape of tensor of[0],
    its dimensions from axis of[1] on as many as dims has, by SHAPE (shaped like dims)."""
    if of is None or of[0] not in ctx.run_time_shaped:
        return ctx.constant("dims", dims.astype(dtype))
    start = of[1]
    found = shape_of(ctx, of[0], start, start + dims.size)
    if dims.ndim == 0:
        found = reshape(ctx, found, ())
    if np.dtype(dtype) != np.int32:
        cast = ctx.tensor("dims", dims.shape, dtype)
        ctx.add_op("CAST", [found], [cast], {"in_data_type": np.dtype(np.int32),
                                             "out_data_type": np.dtype(dtype)})
        found = cast
    return found


@onnx_op("Gather")
def import_gather(node, ctx):
    x, indices = node.inputs[:2]
    axis = node.attr("axis", 0) % ctx.rank(x)
    indices = non_negative(ctx, indices, ctx.shape(x)[axis], (x, axis))
    ctx.add_op("GATHER", [x, indices], node.outputs[:1], {"axis": axis, "batch_dims": 0})


def _coordinates(ctx, parts: list, lead_shape, hint: str) -> str:
    """Concatenates coordinate columns along a new last axis. Each part is a constant numpy array
    or an int32 tensor name, of shape lead_shape + (m,)."""
    if all(isinstance(p, np.ndarray) for p in parts):
        return ctx.constant("coords", np.concatenate(parts, axis=-1).astype(np.int32))
    names = [ctx.constant("grid", p) if isinstance(p, np.ndarray) else p for p in parts]
    width = sum(ctx.shape(n)[-1] for n in names)
    coords = ctx.tensor(hint + "_coords", tuple(lead_shape) + (width,), np.int32)
    ctx.add_op("CONCATENATION", names, [coords], {"axis": len(lead_shape)})
    return coords


def _column(ctx, indices: str, shape):
    """The (normalised) indices as a constant array or tensor of shape `shape`."""
    value = ctx.const(indices)
    if value is not None:
        return value.reshape(shape)
    return indices if ctx.shape(indices) == tuple(shape) else reshape(ctx, indices, shape)


@onnx_op("GatherND")
def import_gather_nd(node, ctx):
    """batch_dims b: GATHER_ND over coordinates whose first b columns are the batch positions."""
    x, indices = node.inputs[:2]
    batch = node.attr("batch_dims", 0)
    shape = ctx.shape(indices)
    depth = shape[-1]
    indices = non_negative(ctx, indices, ctx.shape(x)[batch:batch + depth], (x, batch))
    if batch:
        lead = shape[:-1]
        grid = np.indices(lead, dtype=np.int32)[:batch]          # (batch, *lead)
        parts = [np.moveaxis(grid, 0, -1), _column(ctx, indices, shape)]
        indices = _coordinates(ctx, parts, lead, node.outputs[0])
    ctx.add_op("GATHER_ND", [x, indices], node.outputs[:1])


@onnx_op("GatherElements")
def import_gather_elements(node, ctx):
    """out[i0..,ik,..] = x[i0.., indices[i], ..]: GATHER_ND over full coordinates, whose axis
    column is the (normalised) indices and the others constant grids."""
    x, indices = node.inputs[:2]
    rank = ctx.rank(x)
    axis = node.attr("axis", 0) % rank
    shape = ctx.shape(indices)
    indices = non_negative(ctx, indices, ctx.shape(x)[axis], (x, axis))
    column = _column(ctx, indices, tuple(shape) + (1,))
    if ctx.sizes_computed and node.inputs[1] in ctx.run_time_shaped:
        # a shape computed when the model runs (RoBERTa's positions, [batch, S]): so are the grids
        parts = [_run_time_grid(ctx, node.inputs[1], a) if a != axis else column for a in range(rank)]
    else:
        grid = np.indices(shape, dtype=np.int32)[..., None]  # (rank, *shape, 1)
        parts = [grid[a] if a != axis else column for a in range(rank)]
    coords = _coordinates(ctx, parts, shape, node.outputs[0])
    ctx.add_op("GATHER_ND", [x, coords], node.outputs[:1])


def _run_time_grid(ctx, indices: str, axis: int) -> str:
    """The coordinate column of `axis` over the indices' shape read when the model runs: RANGE
    of that dimension, reshaped along it, BROADCAST_TO the shape and a last axis of 1."""
    shape, rank = ctx.shape(indices), ctx.rank(indices)
    whole = shape_of(ctx, indices)
    size = ctx.tensor(f"{indices}_size{axis}", (), np.int32)
    ctx.add_op("GATHER", [whole, ctx.constant("axis", np.int32(axis))], [size], {"axis": 0, "batch_dims": 0})
    positions = ctx.tensor(f"{indices}_positions{axis}", (shape[axis],), np.int32)
    ctx.add_op("RANGE", [ctx.constant("start", np.int32(0)), size, ctx.constant("step", np.int32(1))],
               [positions])
    along = [1] * (rank + 1)
    along[axis] = shape[axis]
    placed = reshape(ctx, positions, [-1 if k == axis else 1 for k in range(rank + 1)],
                     ctx.tensor(f"{indices}_along{axis}", tuple(along), np.int32))
    target = ctx.tensor(f"{indices}_grid_shape", (rank + 1,), np.int32)
    ctx.add_op("CONCATENATION", [whole, ctx.constant("one", np.ones(1, np.int32))], [target], {"axis": 0})
    grid = ctx.tensor(f"{indices}_grid{axis}", tuple(shape) + (1,), np.int32)
    ctx.add_op("BROADCAST_TO", [placed, target], [grid])
    return grid
