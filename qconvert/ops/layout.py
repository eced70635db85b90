"""Helpers for importers of layout-sensitive ops: ONNX tensors are NCHW, TFLite kernels NHWC.

An importer reads `to_channels_last(ctx, x)` and writes through `from_channels_last(ctx, ...)`;
the resulting transposes cancel between neighbouring ops in transforms/sink_transposes.py.
"""

from __future__ import annotations

import numpy as np

from ..ir import channels_last_name


def channels_last_perm(rank: int) -> tuple[int, ...]:
    """NCHW... -> NHWC... : (0, 2, 3, ..., 1)."""
    return (0,) + tuple(range(2, rank)) + (1,)


def channels_first_perm(rank: int) -> tuple[int, ...]:
    """NHWC... -> NCHW... : (0, rank-1, 1, ..., rank-2)."""
    return (0, rank - 1) + tuple(range(1, rank - 1))


def transpose(ctx, x: str, perm, y: str | None = None) -> str:
    shape = ctx.shape(x)
    if y is None:
        y = ctx.tensor(x + "_t", [shape[p] for p in perm], ctx.dtype(x))
    ctx.add_op("TRANSPOSE", [x, ctx.constant("perm", np.array(perm, dtype=np.int32))], [y])
    return y


def reshape(ctx, x: str, shape, y: str | None = None) -> str:
    shape = [int(d) for d in shape]
    if y is None:
        y = ctx.tensor(x + "_r", shape, ctx.dtype(x))
    ctx.add_op("RESHAPE", [x, ctx.constant("shape", np.array(shape, dtype=np.int32))], [y])
    return y


def to_channels_last(ctx, x: str) -> str:
    return transpose(ctx, x, channels_last_perm(ctx.rank(x)))


def nhwc_shape(shape) -> tuple[int, ...]:
    return tuple(shape[p] for p in channels_last_perm(len(shape)))


def channels_last_tensor(ctx, y: str) -> str:
    """A new NHWC tensor for a layout-sensitive op to write; pass it to to_channels_first after."""
    return ctx.tensor(channels_last_name(y), nhwc_shape(ctx.shape(y)), ctx.dtype(y))


def to_channels_first(ctx, inner: str, y: str) -> None:
    """Transposes the op's NHWC result `inner` into the ONNX (NCHW) output `y`."""
    transpose(ctx, inner, channels_first_perm(len(ctx.shape(y))), y)


def from_channels_last(ctx, inner: str, y: str) -> None:
    """Writes a spatial op's NHWC result into the ONNX output `y`; a 1-D op ran as 2-D on
    [N, 1, W, C], so its result goes through [N, C, 1, W] to y's [N, C, W]."""
    y_shape = ctx.shape(y)
    if len(y_shape) == 3 and ctx.rank(inner) == 4:
        n, c, width = y_shape
        inner4 = ctx.tensor(y + "_nchw", (n, c, 1, width), ctx.dtype(y))
        to_channels_first(ctx, inner, inner4)
        reshape(ctx, inner4, y_shape, y)
    else:
        to_channels_first(ctx, inner, y)
