"""Expand (BROADCAST_TO, or RESHAPE when it only adds leading 1s, IDENTITY when it changes nothing)
and Tile (TILE with int32 multiples: constants, or a tensor computed at run time when the
output's shape is declared). Also the `tile` / `broadcast_to` helpers.

Both TFLite ops take their target (shape / multiples) as a constant vector with one entry per axis,
so the layout pass moves transposes through them by permuting that vector.
"""

from __future__ import annotations

import numpy as np

from .layout import reshape
from .registry import SAME16, onnx_op, tflite_op
from .versions import by_input_dtype


def _remap_vector_input(hint):
    """remap_axes for an op whose input 1 has one entry per axis of its data input (TILE's
    multiples, BROADCAST_TO's shape): entry i moves to position perm[i]."""

    def remap(op, model, perm):
        value = model.constant(op.inputs[1])
        if value is None or value.shape != (len(perm),):
            return None
        permuted = np.empty_like(value)
        permuted[list(perm)] = value
        model.set_input(op, 1, model.add_constant(hint, permuted))
        return perm

    return remap


_tile_version = by_input_dtype({np.int8: 3, np.object_: 2})  # object: strings
# Version 1 of BROADCAST_TO was withdrawn with its old op code: float (and int32, bool) is 2.
_broadcast_to_version = by_input_dtype({np.int8: 3, np.int16: 3}, default=2)


tflite_op("TILE", options="TileOptions", quant=SAME16, version=_tile_version,
          evaluate=lambda inputs, op: [np.tile(inputs[0], [int(m) for m in inputs[1]])],
          layout="axis", layout_inputs=(0,), remap_axes=_remap_vector_input("multiples"))
tflite_op("BROADCAST_TO", options="BroadcastToOptions", quant=SAME16, version=_broadcast_to_version,
          evaluate=lambda inputs, op: [np.broadcast_to(inputs[0], [int(d) for d in inputs[1]]).copy()],
          layout="axis", layout_inputs=(0,), remap_axes=_remap_vector_input("shape"))


def tile(ctx, x: str, multiples, y: str | None = None) -> str:
    """TILE of x by `multiples` (one per axis); returns the output name."""
    multiples = np.asarray(multiples, np.int32)
    if y is None:
        y = ctx.tensor(x + "_tiled", np.multiply(ctx.shape(x), multiples), ctx.dtype(x))
    ctx.add_op("TILE", [x, ctx.constant("multiples", multiples)], [y])
    return y


def broadcast_to(ctx, x: str, shape, y: str | None = None) -> str:
    """BROADCAST_TO of x (same rank) to `shape`; returns the output name."""
    shape = np.asarray(shape, np.int32)
    if y is None:
        y = ctx.tensor(x + "_broadcast", shape, ctx.dtype(x))
    ctx.add_op("BROADCAST_TO", [x, ctx.constant("shape", shape)], [y])
    return y


@onnx_op("Expand")
def import_expand(node, ctx):
    """The output shape (ONNX broadcasting of input and target shape) comes from shape inference.
    A lower-rank input is first reshaped to the output rank (leading 1s), which keeps
    BROADCAST_TO's input and output ranks equal so that transposes can move through it."""
    x, y = node.inputs[0], node.outputs[0]
    in_shape, out_shape = tuple(ctx.shape(x)), tuple(ctx.shape(y))
    if in_shape == out_shape:
        ctx.add_op("IDENTITY", [x], [y])
        return
    if len(in_shape) < len(out_shape):
        full = (1,) * (len(out_shape) - len(in_shape)) + in_shape
        if full == out_shape:
            reshape(ctx, x, out_shape, y)
            return
        x = reshape(ctx, x, full)
    broadcast_to(ctx, x, out_shape, y)


@onnx_op("Tile")
def import_tile(node, ctx):
    x, y = node.inputs[0], node.outputs[0]
    if ctx.const(node.inputs[1]) is None:
        _computed_tile(node, ctx)
        return
    repeats = ctx.require_const(node.inputs[1], "Tile repeats", (
        "the output's shape follows from them, so TFLite's TILE needs them constant: make them an "
        "initializer, or compute them from constants and input shapes only (the loader folds "
        "those)"))
    repeats = [int(r) for r in np.atleast_1d(repeats)]
    if len(repeats) != ctx.rank(x):
        raise ctx.error(f"{len(repeats)} repeats for a rank-{ctx.rank(x)} input")
    if any(r < 0 for r in repeats):
        raise ctx.error(f"negative repeats {repeats}")
    if all(r == 1 for r in repeats):
        ctx.add_op("IDENTITY", [x], [y])
        return
    tile(ctx, x, repeats, y)


def _computed_tile(node, ctx) -> None:
    """Repeats computed at run time are the tensor TILE reads; it sizes its output when it runs.
    The importer only sees them when the output's shape is known (the model declares it: shape
    inference cannot know it from computed values)."""
    x, repeats, y = node.inputs[0], node.inputs[1], node.outputs[0]
    rank = ctx.rank(x)
    if ctx.shape(repeats) != (rank,) or ctx.dtype(repeats) != np.int32:
        raise ctx.error(f"repeats {repeats!r} of shape {list(ctx.shape(repeats))} and dtype "
                        f"{ctx.dtype(repeats)}: {rank} integers expected, one per axis")
    ctx.add_op("TILE", [x, repeats], [y])
