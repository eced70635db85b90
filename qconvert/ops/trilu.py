"""Trilu: the upper or lower triangle of the last two dimensions, the rest zero.

A constant boolean mask over the last two dimensions (j - i >= k for upper, j - i <= k for lower)
selects between x and a zero scalar (SELECT_V2, which broadcasts both): exact for every dtype,
where multiplying by a 0/1 mask would turn inf and NaN outside the triangle into NaN. A k computed
at run time (a graph input, say) compares a constant [rows, columns] matrix of offsets j - i with
it when the model runs (GREATER_EQUAL for upper, LESS_EQUAL for lower): the same mask, made by
the interpreter; and where the input's shape is itself computed when the model runs (the loader's
run_time_shaped: a causal mask of the length), so are the offsets, from RANGEs of its SHAPE.
"""

from __future__ import annotations

import numpy as np

from .registry import onnx_op


def triangle_mask(rows: int, columns: int, k: int, upper: bool) -> np.ndarray:
    """True where Trilu keeps the element (i, j) of a rows x columns matrix."""
    offset = np.arange(columns)[None, :] - np.arange(rows)[:, None]
    return offset >= k if upper else offset <= k


@onnx_op("Trilu")
def import_trilu(node, ctx):
    x, y = node.inputs[0], node.outputs[0]
    shape = tuple(ctx.shape(x))
    if len(shape) < 2:
        raise ctx.error(f"input {x!r} has rank {len(shape)}; Trilu needs rank 2 or more")
    upper = bool(node.attr("upper", 1))
    k_name = node.inputs[1] if len(node.inputs) > 1 and node.inputs[1] else ""
    if k_name and ctx.const(k_name) is None:
        _run_time_mask(ctx, x, y, k_name, upper)
        return
    if x in ctx.run_time_shaped:  # a shape computed when the model runs: so is its mask
        k = ctx.constant("k", np.asarray(ctx.const(k_name) if k_name else 0, np.int32).reshape(()))
        _run_time_mask(ctx, x, y, k, upper)
        return
    k = 0
    if k_name:
        value = ctx.const(k_name)
        if value.size != 1:
            raise ctx.error(f"k (input {k_name!r}) has {value.size} elements; ONNX wants a scalar")
        k = int(value.reshape(()))
    mask = triangle_mask(shape[-2], shape[-1], k, upper)
    if mask.all():
        ctx.add_op("IDENTITY", [x], [y])
        return
    _select(ctx, ctx.constant("triangle", mask), x, y)


def _select(ctx, mask: str, x: str, y: str) -> None:
    """y = x where `mask`, else zero (SELECT_V2 broadcasting the mask over the batch)."""
    ctx.add_op("SELECT_V2", [mask, x, ctx.constant("zero", np.zeros((), ctx.dtype(x)))], [y])


def _run_time_mask(ctx, x: str, y: str, k: str, upper: bool) -> None:
    """Trilu by a k known only when the model runs: the mask offset >= k (upper) or offset <= k
    (lower), offset = j - i a constant in k's dtype (int32 inside, as TFLite computes)."""
    rows, columns = ctx.shape(x)[-2:]
    if ctx.shape(k) not in ((), (1,)):
        raise ctx.error(f"k (input {k!r}) has shape {list(ctx.shape(k))}; ONNX wants a scalar")
    if x in ctx.run_time_shaped:
        offsets = _run_time_offsets(ctx, x, y)
        if ctx.dtype(k) != np.int32:
            raise ctx.error(f"k (input {k!r}) is {ctx.dtype(k)}; int32 or int64 expected")
    else:
        offset = np.arange(columns)[None, :] - np.arange(rows)[:, None]
        offsets = ctx.constant("offsets", offset.astype(ctx.dtype(k)))
    mask = ctx.tensor(y + "_triangle", (rows, columns), np.bool_)
    ctx.add_op("GREATER_EQUAL" if upper else "LESS_EQUAL", [offsets, k], [mask])
    _select(ctx, mask, x, y)


def _run_time_offsets(ctx, x: str, y: str) -> str:
    """j - i over the last two dimensions of `x` as it runs (a shape the loader's
    run_time_shaped computes): RANGE of each from its SHAPE, one reshaped to a column, SUB."""
    rank, (rows, columns) = ctx.rank(x), ctx.shape(x)[-2:]
    shape = ctx.tensor(y + "_shape", (rank,), np.int32)
    ctx.add_op("SHAPE", [x], [shape], {"out_type": np.int32})
    zero, one = ctx.constant("zero", np.int32(0)), ctx.constant("one", np.int32(1))
    ranges = []
    for axis, size, target in ((rank - 2, rows, [-1, 1]), (rank - 1, columns, [1, -1])):
        length = ctx.tensor(f"{y}_length{axis}", (), np.int32)
        ctx.add_op("GATHER", [shape, ctx.constant("axis", np.int32(axis))], [length], {"axis": 0})
        positions = ctx.tensor(f"{y}_positions{axis}", (size,), np.int32)
        ctx.add_op("RANGE", [zero, length, one], [positions])
        shaped = ctx.tensor(f"{y}_positions{axis}_2d", tuple(size if t == -1 else 1 for t in target), np.int32)
        ctx.add_op("RESHAPE", [positions, ctx.constant("shape", np.array(target, np.int32))], [shaped])
        ranges.append(shaped)
    offsets = ctx.tensor(y + "_offsets", (rows, columns), np.int32)
    ctx.add_op("SUB", [ranges[1], ranges[0]], [offsets])
    return offsets
