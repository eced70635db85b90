"""Trilu: the upper or lower triangle of the last two dimensions, the rest zero.

A constant boolean mask over the last two dimensions (j - i >= k for upper, j - i <= k for lower)
selects between x and a zero scalar (SELECT_V2, which broadcasts both): exact for every dtype,
where multiplying by a 0/1 mask would turn inf and NaN outside the triangle into NaN. k must be a
constant: it decides the mask.
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
    k = 0
    if len(node.inputs) > 1 and node.inputs[1]:
        value = ctx.require_const(node.inputs[1], "k", "the triangle's diagonal decides a constant "
                                  "mask: make it an initializer")
        if value.size != 1:
            raise ctx.error(f"k (input {node.inputs[1]!r}) has {value.size} elements; ONNX wants a scalar")
        k = int(value.reshape(()))
    mask = triangle_mask(shape[-2], shape[-1], k, bool(node.attr("upper", 1)))
    if mask.all():
        ctx.add_op("IDENTITY", [x], [y])
        return
    ctx.add_op("SELECT_V2", [ctx.constant("triangle", mask), x,
                             ctx.constant("zero", np.zeros((), ctx.dtype(x)))], [y])
