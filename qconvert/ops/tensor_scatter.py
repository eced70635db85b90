"""TensorScatter (opset 24): a KV cache past_cache [B, ..., M, ...] with update [B, ..., S, ...]
written along `axis` from each batch's write index (wrapping around M in circular mode).

As a read rather than a write: cache position p of batch b takes update[b, ..., p - w[b], ...]
where 0 <= p - w[b] < S (p - w[b] taken mod M when circular), else keeps past_cache. The offsets
[B, M] are constants for constant (or absent: 0) write indices, else SUB/FLOOR_MOD of them; one
GATHER with batch_dims 1 reads the update at them (clamped into range) and SELECT_V2 keeps the past
where no update lands.
"""

from __future__ import annotations

import numpy as np

from .layout import reshape
from .registry import onnx_op


@onnx_op("TensorScatter")
def import_tensor_scatter(node, ctx):
    past, update = node.inputs[:2]
    indices = node.inputs[2] if len(node.inputs) > 2 else ""
    y = node.outputs[0]
    shape, rank = ctx.shape(past), ctx.rank(past)
    mode = node.attr("mode", "linear")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in ("linear", "circular"):
        raise ctx.error(f"mode {mode!r} is not linear or circular")
    axis = int(node.attr("axis", -2))
    if not -rank <= axis < rank or axis % rank == 0:
        raise ctx.error(f"axis {axis} is not a sequence axis of the rank {rank} past_cache {past!r}")
    axis %= rank
    upd = ctx.shape(update)
    if len(upd) != rank or any(a != b for k, (a, b) in enumerate(zip(shape, upd)) if k != axis) or \
            upd[axis] > shape[axis] or ctx.dtype(update) != ctx.dtype(past):
        raise ctx.error(f"update {list(upd)} does not fit past_cache {list(shape)} along axis {axis}")
    batch, cache, length = shape[0], shape[axis], upd[axis]
    positions = np.arange(cache, dtype=np.int32)[None]
    written = ctx.const(indices) if indices else np.zeros(batch, np.int32)
    if written is not None:
        offsets = positions - np.asarray(written, np.int64).reshape(batch, 1)
        offsets = offsets % cache if mode == "circular" else offsets
        valid = ctx.constant("written", ((offsets >= 0) & (offsets < length)).astype(np.bool_))
        source = ctx.constant("offsets", np.clip(offsets, 0, length - 1).astype(np.int32))
    else:
        if ctx.shape(indices) != (batch,):
            raise ctx.error(f"write_indices {indices!r} of shape {list(ctx.shape(indices))} is not [{batch}]")

        def op(type, inputs, hint, dtype=np.int32):
            out = ctx.tensor(f"{y}_{hint}", (batch, cache), dtype)
            ctx.add_op(type, inputs, [out])
            return out

        def scalar(value):
            return ctx.constant("c", np.array(value, np.int32))

        offsets = op("SUB", [ctx.constant("positions", positions), reshape(ctx, indices, (batch, 1))], "offsets")
        if mode == "circular":
            offsets = op("FLOOR_MOD", [offsets, scalar(cache)], "wrapped")
        valid = op("LESS", [offsets, scalar(length)], "below", np.bool_)
        if mode == "linear":
            valid = op("LOGICAL_AND", [valid, op("GREATER_EQUAL", [offsets, scalar(0)], "above", np.bool_)],
                       "written", np.bool_)
        source = op("MINIMUM", [op("MAXIMUM", [offsets, scalar(0)], "low"), scalar(length - 1)], "clamped")
    gathered = ctx.tensor(y + "_updates", shape, ctx.dtype(past))
    ctx.add_op("GATHER", [update, source], [gathered], {"axis": axis, "batch_dims": 1})
    mask_shape = [1] * rank
    mask_shape[0], mask_shape[axis] = batch, cache
    ctx.add_op("SELECT_V2", [reshape(ctx, valid, mask_shape), gathered, past], [y])
