"""Resize (opsets 10-19) and Upsample (opsets 7, 9) of H and W of a 4-D NCHW tensor, as
RESIZE_NEAREST_NEIGHBOR or RESIZE_BILINEAR in NHWC.

TFLite's kernels know two flags (align_corners, half_pixel_centers) where ONNX has a coordinate
transformation mode, a nearest rounding mode and float scales. Which flags agree with which modes
depends on the sizes (pytorch_half_pixel differs when an output side is 1; a float scale need not
equal out/in), so instead of a table the importer builds each axis' sampling matrix as the ONNX
spec defines it, as onnxruntime computes it (the two differ for some non-integer scales) and as
the TFLite kernel computes it (float32, see kernels/internal/reference/resize_nearest_neighbor.h
and resize_bilinear.h), and emits the first flag combination that samples exactly like both ONNX
readings on both axes. None does: a conversion error naming the mode.
"""

from __future__ import annotations

import numpy as np

from .layout import channels_last_tensor, to_channels_first, to_channels_last
from .registry import SAME16, QuantRule, onnx_op, tflite_op

# Flag pairs (align_corners, half_pixel_centers) tried in order of the op version they need.
_NEAREST_FLAGS = [(False, False), (False, True), (True, False)]
_BILINEAR_FLAGS = [(False, False), (True, False), (False, True)]
_COORD_MODES = ("half_pixel", "pytorch_half_pixel", "half_pixel_symmetric", "align_corners",
                "asymmetric", "tf_half_pixel_for_nn")


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


def _disagreement(interp, coord_mode, nearest_mode, sizes_in, sizes_out, scales) -> str:
    for i, o, s in zip(sizes_in, sizes_out, scales):
        spec, runtime = _onnx_matrices(interp, coord_mode, nearest_mode, i, o, s)
        if not _same(spec, runtime):
            return " (the ONNX spec and onnxruntime also disagree on these sizes)"
    return ""


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
    if interp not in ("nearest", "linear"):
        raise ctx.error(f"{interp} interpolation is not supported (TFLite resizes nearest or bilinear)")
    if node.op_type == "Upsample" or ctx.opset < 11:
        return interp, "asymmetric", "simple"  # ORT's Upsample/Resize-10: floor, ceil if shrinking
    coord = node.attr("coordinate_transformation_mode", "half_pixel")
    if coord not in _COORD_MODES:
        raise ctx.error(f"coordinate_transformation_mode {coord} is not supported")
    nearest = node.attr("nearest_mode", "round_prefer_floor")
    if nearest not in ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"):
        raise ctx.error(f"nearest_mode {nearest} is not supported")
    return interp, coord, nearest


@onnx_op("Resize", "Upsample")
def import_resize(node, ctx):
    x, y = node.inputs[0], node.outputs[0]
    in_shape, out_shape = ctx.shape(x), ctx.shape(y)
    if len(in_shape) != 4:
        raise ctx.error(f"resizing a rank-{len(in_shape)} tensor is not supported (4-D NCHW is)")
    if ctx.dtype(x) != np.float32:
        raise ctx.error(f"resizing {ctx.dtype(x)} tensors is not supported (float32 is)")
    if min(out_shape) < 1:
        raise ctx.error(f"the output {list(out_shape)} is empty; TFLite's resize kernels need sizes > 0")
    interp, coord, nearest = _modes(node, ctx)
    scales = _resize_scales(node, ctx, in_shape)
    if tuple(out_shape[:2]) != tuple(in_shape[:2]) or scales[0] != 1 or scales[1] != 1:
        raise ctx.error(f"scales {scales} resize the batch or channel axis; TFLite resizes H and W only")
    if node.attr("antialias", 0) and interp == "linear" and min(scales[2:]) < 1:
        raise ctx.error("antialiased downscaling is not supported")
    flags = _choose_flags(interp, coord, nearest, in_shape[2:], out_shape[2:], scales[2:])
    if flags is None:
        what = f"coordinate_transformation_mode {coord}" + (
            f" with nearest_mode {nearest}" if interp == "nearest" else "")
        raise ctx.error(f"{what} and scales {scales[2:]} (sizes {list(in_shape[2:])} -> "
                        f"{list(out_shape[2:])}) sample differently from every TFLite resize mode"
                        + _disagreement(interp, coord, nearest, in_shape[2:], out_shape[2:], scales[2:]))
    align, half = flags
    op_type = "RESIZE_NEAREST_NEIGHBOR" if interp == "nearest" else "RESIZE_BILINEAR"
    x_nhwc = to_channels_last(ctx, x)
    inner = channels_last_tensor(ctx, y)
    size = ctx.constant("size", np.array(out_shape[2:], dtype=np.int32))
    ctx.add_op(op_type, [x_nhwc, size], [inner], {"align_corners": align, "half_pixel_centers": half})
    to_channels_first(ctx, inner, y)
