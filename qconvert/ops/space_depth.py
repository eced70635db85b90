"""DepthToSpace (DCR and CRD modes) and SpaceToDepth (DCR, and CRD since opset 28) as TFLite's
DEPTH_TO_SPACE / SPACE_TO_DEPTH, which run in NHWC and order channels depth-column-row (DCR):
channel (i * b + j) * C + c holds pixel offset (i, j) of channel c.

CRD orders them c * b * b + i * b + j instead. The two orders are the transposes of one [C, b*b]
channel matrix, so CRD is DCR plus a channel shuffle: before DEPTH_TO_SPACE, after SPACE_TO_DEPTH.
The shuffle is a CONCATENATION of channel-strided STRIDED_SLICEs (no TRANSPOSE, so the layout pass
still removes every transpose around the op) when few slices suffice, else RESHAPE + rank-3
TRANSPOSE + RESHAPE.
"""

from __future__ import annotations

import numpy as np

from .layout import channels_last_tensor, reshape, to_channels_first, to_channels_last, transpose
from .registry import SAME, onnx_op, tflite_op
from .slice import strided_slice
from .versions import by_input_dtype

MAX_SHUFFLE_SLICES = 16  # beyond this many slices, one TRANSPOSE is cheaper


def _evaluate_depth_to_space(inputs, op):
    x, b = inputs[0], op.options["block_size"]
    n, h, w, c = x.shape
    x = x.reshape(n, h, w, b, b, c // (b * b)).transpose(0, 1, 3, 2, 4, 5)
    return [x.reshape(n, h * b, w * b, c // (b * b))]


def _evaluate_space_to_depth(inputs, op):
    x, b = inputs[0], op.options["block_size"]
    n, h, w, c = x.shape
    x = x.reshape(n, h // b, b, w // b, b, c).transpose(0, 1, 3, 2, 4, 5)
    return [x.reshape(n, h // b, w // b, b * b * c)]


_version = by_input_dtype({np.int8: 2})


tflite_op("DEPTH_TO_SPACE", options="DepthToSpaceOptions", quant=SAME, version=_version,
          evaluate=_evaluate_depth_to_space)
tflite_op("SPACE_TO_DEPTH", options="SpaceToDepthOptions", quant=SAME, version=_version,
          evaluate=_evaluate_space_to_depth)


def shuffle_channels(ctx, x: str, p: int, q: int, y: str | None = None) -> str:
    """Reorders the last axis of NHWC x from index i * q + j to j * p + i (i < p, j < q)."""
    shape = list(ctx.shape(x))
    if y is None:
        y = ctx.tensor(x + "_shuffled", shape, ctx.dtype(x))
    if q <= MAX_SHUFFLE_SLICES:
        # Slice j takes channels j, j + q, j + 2q, ...: i.e. (i, j) for every i, in order of i.
        parts = [strided_slice(ctx, x, [0, 0, 0, j], shape, [1, 1, 1, q]) for j in range(q)]
        ctx.add_op("CONCATENATION", parts, [y], {"axis": 3})
        return y
    n, h, w, _ = shape
    matrix = reshape(ctx, x, (n * h * w, p, q))
    shuffled = transpose(ctx, matrix, (0, 2, 1))
    return reshape(ctx, shuffled, shape, y)


def _block_size(node, ctx, x) -> int:
    if ctx.rank(x) != 4:
        raise ctx.error(f"rank {ctx.rank(x)} input: only 4-D (NCHW) tensors are supported")
    b = int(node.attr("blocksize", 0))
    if b < 1:
        raise ctx.error(f"invalid blocksize {b}")
    mode = node.attr("mode", "DCR")
    if mode not in ("DCR", "CRD"):
        raise ctx.error(f"unknown mode {mode!r}")
    return b


@onnx_op("DepthToSpace")
def import_depth_to_space(node, ctx):
    x, y = node.inputs[0], node.outputs[0]
    b = _block_size(node, ctx, x)
    channels = ctx.shape(x)[1]
    if channels % (b * b):
        raise ctx.error(f"{channels} channels are not divisible by blocksize² = {b * b}")
    x_nhwc = to_channels_last(ctx, x)
    if node.attr("mode", "DCR") == "CRD" and channels != b * b:
        x_nhwc = shuffle_channels(ctx, x_nhwc, channels // (b * b), b * b)
    inner = channels_last_tensor(ctx, y)
    ctx.add_op("DEPTH_TO_SPACE", [x_nhwc], [inner], {"block_size": b})
    to_channels_first(ctx, inner, y)


@onnx_op("SpaceToDepth")
def import_space_to_depth(node, ctx):
    x, y = node.inputs[0], node.outputs[0]
    b = _block_size(node, ctx, x)
    _, channels, height, width = ctx.shape(x)
    if height % b or width % b:
        raise ctx.error(f"spatial size {height}x{width} is not divisible by blocksize {b}")
    x_nhwc = to_channels_last(ctx, x)
    inner = channels_last_tensor(ctx, y)
    if node.attr("mode", "DCR") == "CRD" and channels > 1:
        dcr = ctx.tensor(y + "_dcr", ctx.shape(inner), ctx.dtype(y))
        ctx.add_op("SPACE_TO_DEPTH", [x_nhwc], [dcr], {"block_size": b})
        shuffle_channels(ctx, dcr, b * b, channels, inner)
    else:
        ctx.add_op("SPACE_TO_DEPTH", [x_nhwc], [inner], {"block_size": b})
    to_channels_first(ctx, inner, y)
