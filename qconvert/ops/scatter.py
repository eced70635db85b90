"""ScatterND, ScatterElements and Scatter (SCATTER_ND, UNSORTED_SEGMENT_PROD/MAX/MIN, SELECT_V2).

TFLite's SCATTER_ND writes the updates into zeros of a given shape, summing updates that share a
position. ONNX replaces (or combines) positions of `data`, so the result is built around it:
- reduction none: SELECT_V2(mask, SCATTER_ND(indices, updates), data), the mask saying which
  positions are written (a constant for constant indices, else a SCATTER_ND of ones compared with
  0). A select is exact for every value (data * (1 - mask) + ... would turn an inf into a NaN).
  ONNX leaves a position named twice undefined: refused for constant indices (SCATTER_ND would
  write their sum);
- add: data + SCATTER_ND(indices, updates), duplicates summed as ONNX sums them;
- mul, max, min: the updates of each position combined first by UNSORTED_SEGMENT_PROD/MAX/MIN
  over the flattened position (segment id), then with data: data * product (an untouched position's
  product is 1), SELECT_V2(mask, MAXIMUM/MINIMUM(data, combined), data). Duplicates are combined
  as ONNX combines them (a float product in another order: equal up to rounding).
ONNX's indices count from the end when negative (normalised, as for Gather); constant ones are
checked against the data's shape first. ScatterElements' indices become full coordinates (the
axis column is the indices, the others constant grids), the form SCATTER_ND takes.
"""

from __future__ import annotations

import numpy as np

from .folded import shape_of
from .gather import non_negative
from .layout import reshape
from .registry import onnx_op, tflite_op

tflite_op("SCATTER_ND", options="ScatterNdOptions")
for _name, _options in (("UNSORTED_SEGMENT_PROD", "UnsortedSegmentProdOptions"),
                        ("UNSORTED_SEGMENT_MAX", "UnsortedSegmentMaxOptions"),
                        ("UNSORTED_SEGMENT_MIN", "UnsortedSegmentMinOptions")):
    tflite_op(_name, options=_options)

_COMBINE = {"add": "ADD", "mul": "MUL", "max": "MAXIMUM", "min": "MINIMUM"}
_SEGMENT = {"mul": "UNSORTED_SEGMENT_PROD", "max": "UNSORTED_SEGMENT_MAX", "min": "UNSORTED_SEGMENT_MIN"}
# The IR's dtypes SCATTER_ND's kernel writes (int64 is int32 inside the graph; no bool).
_SCATTERED = {np.dtype(np.float32), np.dtype(np.int32)}


def _reduction(node, ctx) -> str:
    reduction = node.attr("reduction", "none")
    if reduction != "none" and reduction not in _COMBINE:
        raise ctx.error(f"reduction {reduction!r} is not one of none, add, mul, max, min")
    return reduction


def _check_constant_coordinates(ctx, value: np.ndarray, dims, what: str) -> None:
    """Every coordinate row of `value` (..., k) within [-dim, dim - 1] of `dims` (k,)."""
    dims = np.asarray(dims, np.int64)
    rows = value.reshape(-1, len(dims)).astype(np.int64)
    bad = np.nonzero(np.any((rows < -dims) | (rows >= dims), axis=1))[0]
    if bad.size:
        raise ctx.error(f"{what} {rows[bad[0]].tolist()} is out of range for dimensions "
                        f"{dims.tolist()}")


def _has_duplicates(coords: np.ndarray) -> bool:
    rows = coords.reshape(-1, coords.shape[-1])
    return len(np.unique(rows, axis=0)) != len(rows)


def _scatter(ctx, node, data: str, coords, updates: str, reduction: str) -> None:
    """Writes `updates` at `coords` (int32, normalised: a constant array or a tensor name of shape
    lead + (k,)) into `data`, combined by `reduction`, as node.outputs[0]."""
    y = node.outputs[0]
    shape, dtype = tuple(ctx.shape(data)), np.dtype(ctx.dtype(data))
    if dtype not in _SCATTERED:
        raise ctx.error(f"data has dtype {dtype}; TFLite's SCATTER_ND writes float32 and int32 only")
    constant = isinstance(coords, np.ndarray)
    if constant and reduction == "none" and _has_duplicates(coords):
        raise ctx.error("indices name a position twice, which ONNX leaves undefined for reduction "
                        "none (SCATTER_ND would write the sum)")
    k = coords.shape[-1] if constant else ctx.shape(coords)[-1]
    if reduction in _SEGMENT:
        _combine_by_segments(ctx, node, data, coords, updates, reduction, k)
        return
    coords_name = ctx.constant("indices", coords) if constant else coords
    scattered = ctx.tensor(y + "_scattered", shape, dtype)
    ctx.add_op("SCATTER_ND", [coords_name, updates, shape_of(ctx, data)], [scattered])
    if reduction == "add":
        ctx.add_op("ADD", [data, scattered], [y])
    else:
        ctx.add_op("SELECT_V2", [_mask(ctx, coords, data, k, y), scattered, data], [y])


def _reshaped(ctx, x: str, shape) -> str:
    """x as `shape`: itself when it has it, else a RESHAPE."""
    return x if tuple(ctx.shape(x)) == tuple(shape) else reshape(ctx, x, shape)


def _segment_ids(ctx, coords, prefix, y: str):
    """The flat position (row-major over `prefix`) of each coordinate row, as a 1-D int32
    constant or tensor."""
    strides = np.array([int(np.prod(prefix[j + 1:])) for j in range(len(prefix))], np.int32)
    if isinstance(coords, np.ndarray):
        return ctx.constant("segment_ids", (coords.reshape(-1, len(prefix)) @ strides).astype(np.int32))
    lead = ctx.shape(coords)[:-1]
    count = int(np.prod(lead))
    rows = _reshaped(ctx, coords, (count, len(prefix)))
    if len(prefix) == 1:
        return _reshaped(ctx, rows, (count,))
    scaled = ctx.tensor(y + "_scaled_coords", (count, len(prefix)), np.int32)
    ctx.add_op("MUL", [rows, ctx.constant("strides", strides)], [scaled])
    ids = ctx.tensor(y + "_segment_ids", (count,), np.int32)
    ctx.add_op("SUM", [scaled, ctx.constant("axis", np.array([1], np.int32))], [ids], {"keep_dims": False})
    return ids


def _combine_by_segments(ctx, node, data: str, coords, updates: str, reduction: str, k: int) -> None:
    """reduction mul, max, min: the updates of each position combined by UNSORTED_SEGMENT_*, then
    with data (see the module docstring)."""
    y = node.outputs[0]
    shape, dtype = tuple(ctx.shape(data)), ctx.dtype(data)
    prefix, trailing = shape[:k], shape[k:]
    ids = _segment_ids(ctx, coords, prefix, y)
    count = int(np.prod(ctx.shape(updates)[:len(ctx.shape(updates)) - len(trailing)]))
    rows = _reshaped(ctx, updates, (count,) + trailing)
    positions = int(np.prod(prefix))
    combined = ctx.tensor(y + "_segments", (positions,) + trailing, dtype)
    num_segments = ctx.constant("num_segments", np.array([positions], np.int32))
    ctx.add_op(_SEGMENT[reduction], [rows, ids, num_segments], [combined])
    combined = _reshaped(ctx, combined, shape)
    if reduction == "mul":
        ctx.add_op("MUL", [data, combined], [y])
        return
    merged = ctx.tensor(y + "_combined", shape, dtype)
    ctx.add_op(_COMBINE[reduction], [data, combined], [merged])
    ctx.add_op("SELECT_V2", [_mask(ctx, coords, data, k, y), merged, data], [y])


def _mask(ctx, coords, data: str, k: int, y: str) -> str:
    """A boolean tensor of shape prefix + (1,) * (rank - k), prefix data's first k dimensions:
    whether `coords` name the position (broadcast over the trailing axes in SELECT_V2)."""
    rank = ctx.rank(data)
    prefix = tuple(ctx.shape(data))[:k]
    full = tuple(prefix) + (1,) * (rank - len(prefix))
    if isinstance(coords, np.ndarray):
        mask = np.zeros(prefix, np.bool_)
        mask[tuple(coords.reshape(-1, len(prefix)).T)] = True
        return ctx.constant("mask", mask.reshape(full))
    lead = ctx.shape(coords)[:-1]
    counts = ctx.tensor(y + "_counts", prefix, np.int32)
    ctx.add_op("SCATTER_ND", [coords, ctx.constant("ones", np.ones(lead, np.int32)),
                              shape_of(ctx, data, 0, k)], [counts])
    if full != tuple(prefix):
        counts = reshape(ctx, counts, full)
    mask = ctx.tensor(y + "_mask", full, np.bool_)
    ctx.add_op("GREATER", [counts, ctx.constant("zero", np.zeros((), np.int32))], [mask])
    return mask


@onnx_op("ScatterND")
def import_scatter_nd(node, ctx):
    data, indices, updates = node.inputs[:3]
    reduction = _reduction(node, ctx)
    shape, index_shape = tuple(ctx.shape(data)), tuple(ctx.shape(indices))
    if not index_shape or not 1 <= index_shape[-1] <= len(shape):
        raise ctx.error(f"indices of shape {list(index_shape)} must end in a dimension between 1 "
                        f"and the data's rank {len(shape)}")
    k = index_shape[-1]
    expected = index_shape[:-1] + shape[k:]
    if tuple(ctx.shape(updates)) != expected:
        raise ctx.error(f"updates have shape {list(ctx.shape(updates))}, not {list(expected)} "
                        f"(indices {list(index_shape)}, data {list(shape)})")
    _check_output(node, ctx, shape)
    value = ctx.const(indices)
    if value is not None:
        _check_constant_coordinates(ctx, value, shape[:k], "index")
        coords = np.where(value < 0, value + np.array(shape[:k]), value).astype(np.int32)
    else:
        coords = non_negative(ctx, indices, shape[:k], (data, 0))
    _scatter(ctx, node, data, coords, updates, reduction)


@onnx_op("ScatterElements", "Scatter")
def import_scatter_elements(node, ctx):
    """out[.., indices[i], ..] (at `axis`) = updates[i]: SCATTER_ND over full coordinates."""
    data, indices, updates = node.inputs[:3]
    reduction = _reduction(node, ctx)
    shape, index_shape = tuple(ctx.shape(data)), tuple(ctx.shape(indices))
    rank = len(shape)
    axis = node.attr("axis", 0)
    if not -rank <= axis < rank:
        raise ctx.error(f"axis {axis} is outside [{-rank}, {rank - 1}] for data of rank {rank}")
    axis %= rank
    if len(index_shape) != rank or tuple(ctx.shape(updates)) != index_shape:
        raise ctx.error(f"indices {list(index_shape)} and updates {list(ctx.shape(updates))} must "
                        f"have one shape, of the data's rank {rank}")
    if any(i > d for a, (i, d) in enumerate(zip(index_shape, shape)) if a != axis):
        raise ctx.error(f"indices of shape {list(index_shape)} reach beyond data of shape "
                        f"{list(shape)} outside axis {axis}")
    _check_output(node, ctx, shape)
    grid = np.indices(index_shape, dtype=np.int32)[..., None]  # (rank, *index_shape, 1)
    value = ctx.const(indices)
    if value is not None:
        _check_constant_coordinates(ctx, value.reshape(-1, 1), shape[axis:axis + 1], "index")
        column = np.where(value < 0, value + shape[axis], value).astype(np.int32)[..., None]
        coords = np.concatenate([grid[a] if a != axis else column for a in range(rank)], axis=-1)
    else:
        column = reshape(ctx, non_negative(ctx, indices, shape[axis], (data, axis)), index_shape + (1,))
        parts = [ctx.constant("grid", grid[a]) if a != axis else column for a in range(rank)]
        coords = column
        if rank > 1:
            coords = ctx.tensor(node.outputs[0] + "_coords", index_shape + (rank,), np.int32)
            ctx.add_op("CONCATENATION", parts, [coords], {"axis": rank})
    _scatter(ctx, node, data, coords, updates, reduction)


def _check_output(node, ctx, shape) -> None:
    y = node.outputs[0]
    if tuple(ctx.shape(y)) != tuple(shape):
        raise ctx.error(f"output {y!r} has shape {list(ctx.shape(y))}, not the data's {list(shape)}")
