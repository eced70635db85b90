"""RoiAlign as GATHERs of the input's pixels at indices computed from the boxes, weighted, summed
and pooled: onnxruntime's CPU kernel step by step, in TFLite's elementwise ops.

TFLite has no ROI pooling kernel, but each output bin of onnxruntime's RoiAlign is the mean (or,
in max mode, the maximum) of sampling_ratio x sampling_ratio bilinear samples, and every step of
a sample is arithmetic on the box's coordinates: per axis, the box's start and end scaled by
spatial_scale (less 0.5 with half_pixel), its extent (at least 1 with output_half_pixel, ONNX's
only mode before opset 16), the bin's size extent / output size, sample k of bin p at
start + p * bin + (k + 0.5) * bin / sampling_ratio; a sample beyond [-1, size] weighs 0, one
inside is clamped to [0, size - 1] with its corners floor and floor + 1 (at most size - 1) and
their weights 1 - frac and frac. Those per-axis [R, samples] tensors are computed from the rois
tensor itself, with no constant as long as the box count, so that one file runs at every count
(a count NonZero or NonMaxSuppression decides); the image's height and width are read by SHAPE
when the model runs, so that a dynamic image size stays dynamic too. The four corners of every
sample are one GATHER each from the channels-last input flattened to [N * H * W, C] at
(batch * H + y) * W + x; their products with the weights are summed (avg) or their maximum taken
(max: onnxruntime's max mode takes the largest weighted corner) in onnxruntime's order, then the
samples of each bin are summed and divided by their count, or their maximum taken. An adaptive sampling ratio (0: a
count per box, which its size decides) is refused.
"""

from __future__ import annotations

import numpy as np

from .compose import FLOAT, check_float32, emit
from .layout import reshape, to_channels_first, to_channels_last
from .registry import onnx_op

INT32 = np.dtype(np.int32)
_MODES = ("avg", "max")
_TRANSFORMS = ("half_pixel", "output_half_pixel")


@onnx_op("RoiAlign")
def import_roi_align(node, ctx):
    """RoiAlign as onnxruntime computes it (module docstring): per-axis sample positions, four
    corner GATHERs weighted and combined, the samples of each bin pooled."""
    x, rois, batch = node.inputs[:3]
    y = node.outputs[0]
    mode, half_pixel, ratio, scale, (out_h, out_w) = _attributes(node, ctx)
    n, channels, height, width = ctx.shape(x)
    count = ctx.shape(rois)[0]
    channels_last = to_channels_last(ctx, x)
    sizes = _sizes(ctx, channels_last, y)
    rows = _axis_samples(ctx, rois, 1, sizes[0][1], out_h, ratio, scale, half_pixel)
    cols = _axis_samples(ctx, rois, 0, sizes[1][1], out_w, ratio, scale, half_pixel)
    s_h, s_w = out_h * ratio, out_w * ratio
    table = reshape(ctx, channels_last, [n * height * width, channels])
    base = emit(ctx, "MUL", [reshape(ctx, batch, [count, 1]), sizes[0][0]], y + "_roi_base",
                [count, 1], INT32)
    terms = []
    for row, row_weight in ((rows[0], rows[2]), (rows[1], rows[3])):
        start = emit(ctx, "MUL", [emit(ctx, "ADD", [base, row], y + "_roi_row", [count, s_h], INT32),
                                  sizes[1][0]], y + "_roi_row", [count, s_h], INT32)
        start = reshape(ctx, start, [count, s_h, 1])
        wy = reshape(ctx, row_weight, [count, s_h, 1, 1])
        for col, col_weight in ((cols[0], cols[2]), (cols[1], cols[3])):
            index = emit(ctx, "ADD", [start, reshape(ctx, col, [count, 1, s_w])], y + "_roi_index",
                         [count, s_h, s_w], INT32)
            values = emit(ctx, "GATHER", [table, index], y + "_roi_corner", [count, s_h, s_w, channels],
                          options={"axis": 0, "batch_dims": 0})
            weight = emit(ctx, "MUL", [wy, reshape(ctx, col_weight, [count, 1, s_w, 1])],
                          y + "_roi_weight", [count, s_h, s_w, 1])
            terms.append(emit(ctx, "MUL", [weight, values], y + "_roi_term", [count, s_h, s_w, channels]))
    combine = "ADD" if mode == "avg" else "MAXIMUM"
    sample = terms[0]
    for term in terms[1:]:  # onnxruntime's order: ((w1 v1 + w2 v2) + w3 v3) + w4 v4
        sample = emit(ctx, combine, [sample, term], y + "_roi_sample", [count, s_h, s_w, channels])
    pooled = _pool(ctx, sample, mode, ratio, (count, out_h, out_w, channels), y)
    to_channels_first(ctx, pooled, y)


def _attributes(node, ctx):
    """(mode, half_pixel, sampling ratio, spatial scale, (output height, width)) after refusing
    what does not convert: an unknown mode or transformation, an adaptive sampling ratio,
    non-float32 tensors, shapes RoiAlign does not take."""
    x, rois, batch = node.inputs[:3]
    mode = node.attr("mode", "avg")
    default = "half_pixel" if ctx.opset >= 16 else "output_half_pixel"
    transform = node.attr("coordinate_transformation_mode", default)
    ratio = int(node.attr("sampling_ratio", 0))
    out = (int(node.attr("output_height", 1)), int(node.attr("output_width", 1)))
    if mode not in _MODES or transform not in _TRANSFORMS:
        raise ctx.error(f"mode {mode!r} with coordinate_transformation_mode {transform!r} is not a "
                        "RoiAlign mode")
    if ratio <= 0:
        raise ctx.error(f"sampling_ratio {ratio} is adaptive (ceil(box size / output size) samples "
                        "a bin: a count each box's values decide, which a TFLite graph cannot "
                        "follow); set sampling_ratio > 0")
    if min(out) < 1:
        raise ctx.error(f"output size {list(out)} must be at least 1x1")
    check_float32(ctx, x, "input")
    check_float32(ctx, rois, "rois")
    x_shape, r_shape, b_shape = ctx.shape(x), ctx.shape(rois), ctx.shape(batch)
    if len(x_shape) != 4 or len(r_shape) != 2 or r_shape[1] != 4 or tuple(b_shape) != (r_shape[0],):
        raise ctx.error(f"input {x!r} {list(x_shape)}, rois {rois!r} {list(r_shape)} and batch_indices "
                        f"{batch!r} {list(b_shape)} must be [N, C, H, W], [R, 4] and [R]")
    return mode, transform == "half_pixel", ratio, float(node.attr("spatial_scale", 1.0)), out


def _sizes(ctx, channels_last: str, y: str) -> list[tuple[str, str]]:
    """The input's height and width, each as int32 and float32 tensors [1], read by SHAPE when
    the model runs: a dynamic image size stays dynamic (no constant moves with it)."""
    dims = emit(ctx, "SHAPE", [channels_last], y + "_roi_dims", [4], INT32, {"out_type": INT32})
    sizes = []
    for axis in (1, 2):
        size = emit(ctx, "GATHER", [dims, _const(ctx, [axis], INT32)], y + "_roi_size", [1], INT32,
                    {"axis": 0, "batch_dims": 0})
        sizes.append((size, emit(ctx, "CAST", [size], y + "_roi_size", [1], FLOAT,
                                 {"in_data_type": INT32, "out_data_type": FLOAT})))
    return sizes


def _axis_samples(ctx, rois: str, k: int, size: str, pooled: int, ratio: int, scale: float,
                  half_pixel: bool) -> tuple[str, str, str, str]:
    """Along one axis (k: the rois' column of its start, k + 2 its end; size: the axis's length,
    a float32 tensor [1]): the int32 indices [R, pooled * ratio] of every sample's low and high
    corner and their float weights, 0 for a sample beyond [-1, size], as onnxruntime computes
    them."""
    count = ctx.shape(rois)[0]
    hint = f"{rois}_roi_axis{k}"
    ends = []
    for column in (k, k + 2):
        end = emit(ctx, "GATHER", [rois, _const(ctx, [column], INT32)], hint, [count, 1],
                   options={"axis": 1, "batch_dims": 0})
        end = _binary(ctx, "MUL", end, np.float32(scale), hint)
        ends.append(_binary(ctx, "SUB", end, 0.5, hint) if half_pixel else end)
    extent = _binary(ctx, "SUB", ends[1], ends[0], hint)
    if not half_pixel:
        extent = _binary(ctx, "MAXIMUM", extent, 1.0, hint)
    bin_size = _binary(ctx, "DIV", extent, float(pooled), hint)
    bins = np.repeat(np.arange(pooled, dtype=np.float32), ratio)[None]
    offsets = np.tile(np.arange(ratio, dtype=np.float32) + 0.5, pooled)[None]
    within = _binary(ctx, "DIV", _binary(ctx, "MUL", bin_size, offsets, hint), float(ratio), hint)
    coords = _binary(ctx, "ADD", _binary(ctx, "ADD", ends[0], _binary(ctx, "MUL", bin_size, bins, hint),
                                         hint), within, hint)
    shape = ctx.shape(coords)
    outside = emit(ctx, "LOGICAL_OR", [_binary(ctx, "LESS", coords, -1.0, hint, np.bool_),
                                       _binary(ctx, "GREATER", coords, size, hint, np.bool_)],
                   hint, shape, np.bool_)
    top = _binary(ctx, "SUB", size, 1.0, hint)
    clamped = _binary(ctx, "MINIMUM", _binary(ctx, "MAXIMUM", coords, 0.0, hint), top, hint)
    low = emit(ctx, "FLOOR", [clamped], hint, shape)
    high = _binary(ctx, "MINIMUM", _binary(ctx, "ADD", low, 1.0, hint), top, hint)
    frac = _binary(ctx, "SUB", clamped, low, hint)
    weights = [_binary(ctx, "SUB", _const(ctx, 1.0), frac, hint), frac]
    zero = _const(ctx, 0.0)
    weights = [emit(ctx, "SELECT_V2", [outside, zero, w], hint, shape) for w in weights]
    indices = [emit(ctx, "CAST", [c], hint, shape, INT32,
                    {"in_data_type": FLOAT, "out_data_type": INT32}) for c in (low, high)]
    return indices[0], indices[1], weights[0], weights[1]


def _pool(ctx, sample: str, mode: str, ratio: int, shape, y: str) -> str:
    """The samples [R, H * ratio, W * ratio, C] pooled per bin into [R, H, W, C]: summed in
    onnxruntime's order (rows, then columns) and divided by their count, or their maximum."""
    count, out_h, out_w, channels = shape
    if ratio == 1:
        return sample
    grouped = reshape(ctx, sample, [count * out_h, ratio, out_w, ratio, channels])
    reduce = "SUM" if mode == "avg" else "REDUCE_MAX"
    pooled = emit(ctx, reduce, [grouped, _const(ctx, [1, 3], INT32)], y + "_roi_pool",
                  [count * out_h, out_w, channels], options={"keep_dims": False})
    if mode == "avg":
        pooled = _binary(ctx, "DIV", pooled, float(ratio * ratio), y + "_roi_pool")
    return reshape(ctx, pooled, [count, out_h, out_w, channels])


def _const(ctx, value, dtype=FLOAT) -> str:
    return ctx.constant("roi_align", np.asarray(value, dtype))


def _binary(ctx, type: str, a: str, b, hint: str, dtype=FLOAT) -> str:
    """a (op) b, b a tensor or a float32 constant, broadcast to their joint shape."""
    b = b if isinstance(b, str) else _const(ctx, b)
    shape = np.broadcast_shapes(tuple(ctx.shape(a)), tuple(ctx.shape(b)))
    return emit(ctx, type, [a, b], hint, shape, dtype)
