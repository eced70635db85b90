"""Resize (opsets 10-19) and Upsample (opsets 7, 9) of H and W of a 4-D NCHW tensor, as
RESIZE_NEAREST_NEIGHBOR or RESIZE_BILINEAR in NHWC.

TFLite's kernels know two flags (align_corners, half_pixel_centers) where ONNX has a coordinate
transformation mode, a nearest rounding mode and float scales. Which flags agree with which modes
depends on the sizes (pytorch_half_pixel differs when an output side is 1; a float scale need not
equal out/in), so instead of a table the importer builds each axis' sampling matrix as the ONNX
spec defines it, as onnxruntime computes it (the two differ for some non-integer scales) and as
the TFLite kernel computes it (float32, see kernels/internal/reference/resize_nearest_neighbor.h
and resize_bilinear.h), and emits the first flag combination that samples exactly like both ONNX
readings on both axes.

Where no TFLite resize samples like ONNX (cubic interpolation, antialiased downscaling, a
coordinate mode no flag pair matches, a resize of other axes or ranks than H and W of a 4-D
tensor), the resize is what it always is, a linear map per axis: each resized axis becomes a
FULLY_CONNECTED by its constant [out, in] sampling matrix (the axis moved last and back by
TRANSPOSEs). The matrices are ONNX's own: nearest and linear from both readings above (refused
where they disagree), cubic and antialiased ones from onnx's reference implementation applied to
the identity (refused where the spec's sample positions and onnxruntime's differ: align_corners by
a scale whose product with the size is not whole). tf_crop_and_resize samples the box its
constant roi gives the same way, a sample outside the input a zero row and extrapolation_value
ADDed there. Scales whose output size the spec (exact floor(size x scale)) and onnxruntime (the
product rounded to float32 first: 10 x 0.7f is 7) read apart are refused before any of this.
"""

from __future__ import annotations

import numpy as np

from .gemm import fully_connected
from .layout import channels_last_tensor, to_channels_first, to_channels_last, transpose
from .registry import SAME16, QuantRule, onnx_op, tflite_op

# Flag pairs (align_corners, half_pixel_centers) tried in order of the op version they need.
_NEAREST_FLAGS = [(False, False), (False, True), (True, False)]
_BILINEAR_FLAGS = [(False, False), (True, False), (False, True)]
_COORD_MODES = ("half_pixel", "pytorch_half_pixel", "half_pixel_symmetric", "align_corners",
                "asymmetric", "tf_half_pixel_for_nn")
# tf_crop_and_resize samples the box the constant roi input gives (always by matrices): a sample
# outside the input is extrapolation_value, a zero row of the matrix plus that constant.
_CROP = "tf_crop_and_resize"


def _version(flags: tuple[str, ...]):
    """op_version.cc: int16 4; any of `flags` set 3; int8 2; else 1."""
    def version(op, model):
        dtype = model.arrays[op.inputs[0]].dtype
        if dtype == np.int16:
            return 4
        if any(op.options.get(f) for f in flags):
            return 3
        return 2 if dtype == np.int8 else 1
    return version


def _exact_int16_bilinear(op) -> bool:
    """The 16x8 bilinear kernel interpolates with coarse fixed-point weights: exact for the
    half-pixel grid of an integer upscale, many int16 steps off with align_corners."""
    return not op.options.get("align_corners")


tflite_op("RESIZE_BILINEAR", options="ResizeBilinearOptions", version=_version(("half_pixel_centers",)),
          quant=QuantRule(output="same", int16=_exact_int16_bilinear))
tflite_op("RESIZE_NEAREST_NEIGHBOR", options="ResizeNearestNeighborOptions", quant=SAME16,
          version=_version(("half_pixel_centers", "align_corners")))


# --- ONNX semantics ---------------------------------------------------------------------------
def _onnx_coords(mode: str, in_size: int, out_size: int, scale: float) -> np.ndarray:
    """x_original of every output index, as the ONNX spec (and its reference) computes it.

    When the scale is out/in (sizes given, or an exact float scale) it is applied as that ratio,
    so exact ties (x.5 for round_prefer_*, integers for floor/ceil) stay exact."""
    x = np.arange(out_size, dtype=np.float64)
    exact = abs(scale * in_size - out_size) < 1e-6

    def unscale(v):
        return v * in_size / out_size if exact else v / scale
    if mode in ("half_pixel", "pytorch_half_pixel"):
        if mode == "pytorch_half_pixel" and out_size == 1:
            return np.zeros(1)
        return unscale(x + 0.5) - 0.5
    if mode == "half_pixel_symmetric":
        offset = 0.0 if exact else in_size / 2 * (1 - out_size / (scale * in_size))
        return offset + unscale(x + 0.5) - 0.5
    if mode == "align_corners":
        length = out_size if exact else scale * in_size
        return x * (in_size - 1) / (length - 1) if length != 1 else np.zeros(out_size)
    if mode == "asymmetric":
        return unscale(x)
    if mode == "tf_half_pixel_for_nn":
        return unscale(x + 0.5)
    raise ValueError(mode)


def _runtime_coords(mode: str, in_size: int, out_size: int, scale: float) -> np.ndarray:
    """x_original as onnxruntime computes it: float32, align_corners over the integer output size.

    It differs from the spec's reading when scale * in is not an integer, and at exact rounding
    ties that float32 misses; the importer then accepts only what both readings agree on."""
    x = np.arange(out_size, dtype=np.float32)
    s, half, n_in = np.float32(scale), np.float32(0.5), np.float32(in_size)
    if mode == "pytorch_half_pixel" and out_size == 1 or mode == "align_corners" and out_size == 1:
        return np.zeros(1)
    if mode in ("half_pixel", "pytorch_half_pixel"):
        return (x + half) / s - half
    if mode == "half_pixel_symmetric":
        offset = n_in / 2 * (1 - np.float32(out_size) / (s * n_in))
        return offset + (x + half) / s - half
    if mode == "align_corners":
        return x * np.float32(in_size - 1) / np.float32(out_size - 1)
    return x / s if mode == "asymmetric" else (x + half) / s


def _sampling_matrix(interp: str, nearest_mode: str, src: np.ndarray, in_size: int, scale: float):
    """The [out, in] matrix M with output = M @ input along one axis, from x_original."""
    src = src.astype(np.float64)
    low = np.floor(src)
    frac = src - low
    out_size = len(src)
    m = np.zeros((out_size, in_size))
    rows = np.arange(out_size)
    if interp == "nearest":
        up = {"round_prefer_floor": frac > 0.5, "round_prefer_ceil": frac >= 0.5,
              "floor": np.zeros_like(frac, bool), "ceil": frac > 0,
              "simple": frac > 0 if scale < 1 else np.zeros_like(frac, bool)}[nearest_mode]
        m[rows, np.clip(low + up, 0, in_size - 1).astype(int)] = 1
        return m
    np.add.at(m, (rows, np.clip(low, 0, in_size - 1).astype(int)), 1 - frac)
    np.add.at(m, (rows, np.clip(low + 1, 0, in_size - 1).astype(int)), frac)
    return m


def _onnx_matrices(interp, coord_mode, nearest_mode, in_size, out_size, scale):
    """The sampling matrices of the spec's and onnxruntime's readings along one axis."""
    return [_sampling_matrix(interp, nearest_mode, coords(coord_mode, in_size, out_size, scale),
                             in_size, scale) for coords in (_onnx_coords, _runtime_coords)]


# --- TFLite semantics -------------------------------------------------------------------------
def _tflite_matrix(interp: str, align: bool, half: bool, in_size: int, out_size: int):
    """The kernel's sampling along one axis, with its float32 arithmetic."""
    if align and out_size > 1:
        scale = np.float32(in_size - 1) / np.float32(out_size - 1)
    else:
        scale = np.float32(in_size) / np.float32(out_size)
    x = np.arange(out_size, dtype=np.float32)
    m = np.zeros((out_size, in_size))
    rows = np.arange(out_size)
    if interp == "nearest":
        v = (x + np.float32(0.5 if half else 0.0)) * scale
        index = np.sign(v) * np.floor(np.abs(v) + 0.5) if align else np.floor(v)  # TfLiteRound
        index = np.minimum(index, in_size - 1)
        if half:
            index = np.maximum(index, 0)
        m[rows, index.astype(int)] = 1
        return m
    v = (x + np.float32(0.5)) * scale - np.float32(0.5) if half else x * scale
    low = np.maximum(np.floor(v), 0)
    high = np.minimum(np.ceil(v), in_size - 1)
    weight = (v - low).astype(np.float64)
    np.add.at(m, (rows, low.astype(int)), 1 - weight)
    np.add.at(m, (rows, high.astype(int)), weight)
    return m


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return np.allclose(a, b, rtol=0, atol=1e-5)


def _choose_flags(interp, coord_mode, nearest_mode, sizes_in, sizes_out, scales):
    """The first (align_corners, half_pixel_centers) that samples both axes exactly like ONNX
    (as the spec and onnxruntime both read it); None if there is none."""
    wanted = [_onnx_matrices(interp, coord_mode, nearest_mode, i, o, s)
              for i, o, s in zip(sizes_in, sizes_out, scales)]
    for align, half in (_NEAREST_FLAGS if interp == "nearest" else _BILINEAR_FLAGS):
        got = [_tflite_matrix(interp, align, half, i, o) for i, o in zip(sizes_in, sizes_out)]
        if all(_same(g, w) for g, ws in zip(got, wanted) for w in ws):
            return align, half
    return None


# --- importers --------------------------------------------------------------------------------
def _scales_from_sizes(node, in_shape, sizes, axes):
    """Per-axis scales ONNX derives from `sizes` (keep_aspect_ratio_policy included)."""
    full = list(in_shape)
    for k, a in enumerate(axes):
        full[a] = int(sizes[k])
    scales = [o / i for o, i in zip(full, in_shape)]
    policy = node.attr("keep_aspect_ratio_policy", "stretch")
    if policy != "stretch":
        pick = min if policy == "not_larger" else max
        common = pick(scales[a] for a in axes)
        scales = [common if a in axes else 1.0 for a in range(len(in_shape))]
    return scales


# Why computed scales or sizes are refused: TFLite's RESIZE_* take the output size, which follows
# from them, and ONNX's sampling positions follow from the scales themselves.
_PARAMETER_NEEDED = ("the output's shape and the sampling positions follow from it, so qconvert "
                     "needs it constant: make it an initializer, or compute it from constants and "
                     "input shapes only (the loader folds those)")


def _resize_scales(node, ctx, in_shape):
    """The float scale ONNX applies on every axis, for every Resize/Upsample version."""
    rank = len(in_shape)
    if node.op_type == "Upsample" and ctx.opset < 9:
        return [float(s) for s in node.attr("scales")]
    if node.op_type == "Upsample" or ctx.opset < 11:
        return [float(s) for s in ctx.require_const(node.inputs[1], f"{node.op_type} scales",
                                                    _PARAMETER_NEEDED)]
    axes = [int(a) % rank for a in node.attr("axes", range(rank))]
    scales_name = node.inputs[2] if len(node.inputs) > 2 else ""
    sizes_name = node.inputs[3] if len(node.inputs) > 3 else ""
    scales = ctx.require_const(scales_name, "Resize scales", _PARAMETER_NEEDED) if scales_name else None
    if scales is not None and scales.size:
        full = [1.0] * rank
        for k, a in enumerate(axes):
            full[a] = float(scales[k])
        return full
    if not sizes_name:
        raise ctx.error("Resize needs scales or sizes")
    sizes = ctx.require_const(sizes_name, "Resize sizes", _PARAMETER_NEEDED)
    return _scales_from_sizes(node, in_shape, sizes, axes)


def _modes(node, ctx):
    """(interpolation, coordinate transformation, nearest rounding) as ONNX defines them."""
    interp = node.attr("mode", "nearest")
    interp = "linear" if interp == "bilinear" else interp
    if interp not in ("nearest", "linear", "cubic"):
        raise ctx.error(f"{interp} interpolation is not an ONNX Resize mode")
    if node.op_type == "Upsample" or ctx.opset < 11:
        return interp, "asymmetric", "simple"  # ORT's Upsample/Resize-10: floor, ceil if shrinking
    coord = node.attr("coordinate_transformation_mode", "half_pixel")
    if coord not in _COORD_MODES + (_CROP,):
        raise ctx.error(f"coordinate_transformation_mode {coord} is not supported")
    nearest = node.attr("nearest_mode", "round_prefer_floor")
    if nearest not in ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"):
        raise ctx.error(f"nearest_mode {nearest} is not supported")
    return interp, coord, nearest


@onnx_op("Resize", "Upsample")
def import_resize(node, ctx):
    x, y = node.inputs[0], node.outputs[0]
    in_shape, out_shape = ctx.shape(x), ctx.shape(y)
    if ctx.dtype(x) != np.float32:
        raise ctx.error(f"resizing {ctx.dtype(x)} tensors is not supported (float32 is)")
    if min(out_shape, default=1) < 1:
        raise ctx.error(f"the output {list(out_shape)} is empty; TFLite's resize kernels need sizes > 0")
    interp, coord, nearest = _modes(node, ctx)
    scales = _resize_scales(node, ctx, in_shape)
    antialias = bool(node.attr("antialias", 0)) and interp != "nearest" and min(scales) < 1
    flags = None
    _check_output_size(node, ctx, in_shape, out_shape, scales)
    if len(in_shape) == 4 and tuple(out_shape[:2]) == tuple(in_shape[:2]) and scales[:2] == [1, 1] \
            and interp != "cubic" and not antialias and coord != _CROP:
        flags = _choose_flags(interp, coord, nearest, in_shape[2:], out_shape[2:], scales[2:])
    if flags is None:
        _resize_by_matrices(node, ctx, interp, coord, nearest, scales, antialias)
        return
    align, half = flags
    op_type = "RESIZE_NEAREST_NEIGHBOR" if interp == "nearest" else "RESIZE_BILINEAR"
    x_nhwc = to_channels_last(ctx, x)
    inner = channels_last_tensor(ctx, y)
    size = ctx.constant("size", np.array(out_shape[2:], dtype=np.int32))
    ctx.add_op(op_type, [x_nhwc, size], [inner], {"align_corners": align, "half_pixel_centers": half})
    to_channels_first(ctx, inner, y)


def _check_output_size(node, ctx, in_shape, out_shape, scales) -> None:
    """Refuses, up front, scales whose output size the ONNX spec and onnxruntime read apart: the
    spec (and onnx's shape inference and reference, whose shapes the graph gets) floors
    input x scale exactly, onnxruntime floors the product rounded to float32 (10 x 0.7f is
    6.99999988 exactly, 7.0 in float32), so no .tflite has both sizes."""
    sizes = node.inputs[3] if node.op_type == "Resize" and len(node.inputs) > 3 else ""
    if sizes and ctx.const(sizes) is not None and ctx.const(sizes).size:
        return
    runtime = [int(np.floor(np.float32(n) * np.float32(s))) for n, s in zip(in_shape, scales)]
    for axis, (n, s, spec, ort) in enumerate(zip(in_shape, scales, out_shape, runtime)):
        if spec != ort:
            raise ctx.error(f"scale {float(np.float32(s)):.7g} on axis {axis} (size {n}): the ONNX "
                            f"spec's output size is floor({n} x {float(np.float32(s))!r}) = {spec}, "
                            f"onnxruntime's {ort} (its float32 product rounds up), so no conversion matches "
                            "both; give the Resize sizes instead of scales")


def _axis_matrix(node, ctx, modes, a, scale, antialias, roi):
    """The [out, in] sampling matrix of axis `a`, refused where the spec's and onnxruntime's
    readings differ (which one is right is not for qconvert to guess)."""
    interp, coord, nearest = modes
    in_size, out_size = ctx.shape(node.inputs[0])[a], ctx.shape(node.outputs[0])[a]
    if coord == _CROP:
        return _crop_matrix(node, ctx, interp, nearest, in_size, out_size, scale, roi[a])
    if interp == "cubic" or antialias:
        spec = _onnx_coords(coord, in_size, out_size, scale)
        if not np.allclose(spec, _runtime_coords(coord, in_size, out_size, scale), rtol=0, atol=1e-3):
            raise _readings_differ(ctx, coord, scale, in_size, out_size)
        return _reference_matrix(node, ctx, in_size, out_size, scale)
    spec, runtime = _onnx_matrices(interp, coord, nearest, in_size, out_size, scale)
    if not _same(spec, runtime):
        raise _readings_differ(ctx, coord, scale, in_size, out_size)
    return spec


def _readings_differ(ctx, coord, scale, in_size, out_size):
    return ctx.error(f"coordinate_transformation_mode {coord} and scale {scale} (size {in_size} -> "
                     f"{out_size}): the ONNX spec and onnxruntime sample differently (the spec "
                     f"by the scale, onnxruntime by the sizes), so no conversion can match both; "
                     "give the Resize sizes instead of scales")


def _resize_by_matrices(node, ctx, interp, coord, nearest, scales, antialias) -> None:
    """y = x with each resized axis multiplied by its [out, in] sampling matrix (FULLY_CONNECTED
    over the axis moved last); tf_crop_and_resize's samples outside the input then get
    extrapolation_value (an ADD of a constant that is the value there, 0 elsewhere)."""
    x, y = node.inputs[0], node.outputs[0]
    in_shape, out_shape = ctx.shape(x), ctx.shape(y)
    roi = _crop_roi(node, ctx, len(in_shape)) if coord == _CROP else None
    axes = [a for a in range(len(in_shape)) if in_shape[a] != out_shape[a] or scales[a] != 1]
    for a in range(len(in_shape)) if roi is not None else ():
        if a not in axes and tuple(roi[a]) != (0, 1):
            raise ctx.error(f"{_CROP} box {roi[a].tolist()} on axis {a} of scale 1: the ONNX spec "
                            "samples the box, onnxruntime leaves an axis of scale 1 as it is, so "
                            "no conversion can match both")
    matrices = [_axis_matrix(node, ctx, (interp, coord, nearest), a, scales[a], antialias, roi)
                for a in axes]
    if not axes:
        ctx.add_op("IDENTITY", [x], [y])
        return
    fill = float(node.attr("extrapolation_value", 0.0)) if roi is not None else 0.0
    outside = _outside(matrices, axes, len(in_shape)) if fill else None
    target = y if outside is None or not outside.any() else ctx.tensor(y + "_inside", out_shape, ctx.dtype(x))
    rank, current = len(in_shape), x
    for k, (a, matrix) in enumerate(zip(axes, matrices)):
        last = k == len(axes) - 1
        perm = list(range(rank))
        perm[a], perm[-1] = perm[-1], perm[a]
        moved = current if a == rank - 1 else transpose(ctx, current, perm)
        shape = list(ctx.shape(moved))
        shape[-1] = out_shape[a]
        product = target if last and a == rank - 1 else ctx.tensor(y + f"_axis{a}", shape, ctx.dtype(x))
        fully_connected(ctx, moved, matrix.astype(np.float32), None, product)
        current = product if a == rank - 1 else transpose(ctx, product, perm, target if last else None)
    if target != y:
        ctx.add_op("ADD", [target, ctx.constant("extrapolated", (outside * np.float32(fill)).astype(
            np.float32))], [y])


def _outside(matrices, axes, rank) -> np.ndarray:
    """1.0 where an output sample lies outside the input on some resized axis (its matrix row is
    zero), shaped to broadcast over the output."""
    inside = np.ones([1] * rank, bool)
    for a, matrix in zip(axes, matrices):
        shape = [1] * rank
        shape[a] = matrix.shape[0]
        inside = inside & np.any(matrix != 0, axis=1).reshape(shape)
    return (~inside).astype(np.float32)


def _crop_roi(node, ctx, rank) -> np.ndarray:
    """tf_crop_and_resize's box, [start, end] per axis (normalized: 0 and 1 are the input's ends)."""
    name = node.inputs[1] if len(node.inputs) > 1 else ""
    if not name:
        raise ctx.error(f"{_CROP} needs the roi input (the box to sample)")
    value = np.ravel(ctx.require_const(name, "Resize roi", "the sampling positions follow from it, "
                                       "so qconvert needs it constant: make it an initializer"))
    axes = [int(a) % rank for a in node.attr("axes", range(rank))]
    if value.size != 2 * len(axes):
        raise ctx.error(f"roi (input {name!r}) has {value.size} values; {_CROP} wants 2 per axis "
                        f"({2 * len(axes)})")
    roi = np.tile(np.array([0.0, 1.0]), (rank, 1))
    roi[axes, 0], roi[axes, 1] = value[:len(axes)], value[len(axes):]
    return roi


def _crop_coords(in_size: int, out_size: int, start: float, end: float, dtype) -> np.ndarray:
    """x_original of tf_crop_and_resize, in `dtype` (the spec: exact; onnxruntime: float32)."""
    t = np.dtype(dtype).type
    first, last, span = t(start), t(end), t(in_size - 1)
    if out_size == 1:
        return np.full(1, t(0.5) * (first + last) * span)
    x = np.arange(out_size, dtype=dtype)
    return first * span + x * (last - first) * span / t(out_size - 1)


def _crop_matrix(node, ctx, interp, nearest, in_size, out_size, scale, box) -> np.ndarray:
    """tf_crop_and_resize's [out, in] matrix along one axis: rows of samples outside [0, in - 1]
    are zero (extrapolation_value is added after); cubic from onnx's reference."""
    if interp == "cubic":
        return _reference_matrix(node, ctx, in_size, out_size, scale, box)
    found = []
    for dtype in (np.float64, np.float32):
        src = _crop_coords(in_size, out_size, box[0], box[1], dtype)
        m = _sampling_matrix(interp, nearest, src, in_size, scale)
        m[(src < 0) | (src > in_size - 1)] = 0
        found.append(m)
    if not _same(*found):
        raise ctx.error(f"{_CROP} box {list(map(float, box))} (size {in_size} -> {out_size}): the "
                        "ONNX spec and onnxruntime (float32) place the samples on different inputs")
    return found[0]


def _reference_matrix(node, ctx, in_size: int, out_size: int, scale: float, box=None) -> np.ndarray:
    """The [out, in] matrix of a cubic or antialiased resize along one axis: onnx's reference
    Resize of the identity [in, in] along its second axis, with the node's modes and its scale
    (or its size, when the node gives sizes: the two place the samples differently)."""
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    attrs = {k: v for k, v in node.attrs.items() if k in (
        "mode", "coordinate_transformation_mode", "cubic_coeff_a", "exclude_outside",
        "nearest_mode", "antialias")}
    attrs["extrapolation_value"] = 0.0  # a sample outside: a zero row, the value added after
    by_size = len(node.inputs) > 3 and bool(node.inputs[3])
    inputs = {"x": np.eye(in_size, dtype=np.float32)}
    if box is not None:
        inputs["roi"] = np.array([0, box[0], 1, box[1]], np.float32)
    if by_size:
        inputs["sizes"] = np.array([in_size, out_size], np.int64)
    else:
        inputs["scales"] = np.array([1.0, scale], np.float32)
    resize = helper.make_node("Resize", ["x", "roi" if box is not None else "",
                                         "scales" if not by_size else "", "sizes" if by_size else ""],
                              ["y"], **attrs)
    graph = helper.make_graph([resize], "axis", [helper.make_tensor_value_info(
        name, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for name, v in inputs.items()],
        [helper.make_tensor_value_info("y", 0, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", max(ctx.opset, 13))])
    (result,) = ReferenceEvaluator(model).run(None, inputs)
    if result.shape != (in_size, out_size):
        raise ctx.error(f"resizing {in_size} by {scale} gives {result.shape[1]} samples in onnx's "
                        f"reference, not the output's {out_size}")
    return np.ascontiguousarray(result.T, dtype=np.float64)
