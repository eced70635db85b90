"""MaxPool, AveragePool (1D and 2D), GlobalAveragePool, GlobalMaxPool, LpPool, GlobalLpPool.

Pools run in NHWC; ONNX pads that are not TFLite's SAME/VALID become an explicit pad: PADV2 with
the lowest float for max pooling (ONNX pads max pools with -inf), PAD with zeros for average pooling
when count_include_pad=1. Global pools, and pools whose one window covers the whole map, are
MEAN / REDUCE_MAX over the spatial axes.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..ir import channels_last_name
from .cast import add_cast
from .layout import from_channels_last, to_channels_last
from .lift import lift_1d_input, lift_1d_pads, lift_1d_values
from .padding import choose_padding, explicit_pad, onnx_pads
from .registry import SAME16, onnx_op, tflite_op
from .versions import int16_io_or_int8

tflite_op("MAX_POOL_2D", options="Pool2DOptions", quant=SAME16, version=int16_io_or_int8(3, 2))
tflite_op("AVERAGE_POOL_2D", options="Pool2DOptions", quant=SAME16, version=int16_io_or_int8(3, 2))


@onnx_op("MaxPool", "AveragePool")
def import_pool(node, ctx):
    """A 1-D or 2-D pool as MAX_POOL_2D or AVERAGE_POOL_2D in NHWC (a 1-D one over a unit
    height); a global reduction when its one window covers the map, taps combined when dilated."""
    x, y = node.inputs[0], node.outputs[0]
    if ctx.dtype(x).kind == "i":
        _pool_in_float(node, ctx)
        return
    kernel, strides, dilations = _attributes(node, ctx)
    one_d = ctx.rank(x) == 3
    x, kernel, strides, dilations, pads, y4 = _as_2d(node, ctx, kernel, strides, dilations)
    spatial = ctx.shape(x)[2:]
    is_max = node.op_type == "MaxPool"
    if not one_d and _covers_whole_input(spatial, kernel, pads, y4[2:], dilations) and (
            is_max or not node.attr("count_include_pad", 0) or not any(pads)):
        # One window over the whole map (a final 7x7 pool whose pads only round the size up):
        # the padding adds nothing, so it is a global pool, one op instead of PAD, pool and a
        # rescale (and in int8 one rounding).
        _global_pool(ctx, "REDUCE_MAX" if is_max else "MEAN", x, y)
        return
    x_nhwc = to_channels_last(ctx, x)
    if any(d != 1 for d in dilations):
        inner = ctx.tensor(channels_last_name(y), (y4[0], y4[2], y4[3], y4[1]), ctx.dtype(y))
        _dilated_pool(ctx, node, x_nhwc, inner, spatial, kernel, strides, dilations, pads, y4[2:])
    else:
        inner = _plain_pool(ctx, node, x_nhwc, spatial, kernel, strides, pads, y4)
    from_channels_last(ctx, inner, y)


def _pool_in_float(node, ctx) -> None:
    """The pool of an integer input, pooled in float32 between two CASTs: an 8-bit MaxPool
    computes as int32 inside (loader._NARROWED), which MAX_POOL_2D does not take, and float32
    holds those values exactly."""
    x, y = node.inputs[0], node.outputs[0]
    x_float, y_float = (ctx.tensor(f"{n}_float", ctx.shape(n), np.float32) for n in (x, y))
    add_cast(ctx, x, x_float)
    import_pool(dataclasses.replace(node, inputs=[x_float], outputs=[y_float]), ctx)
    add_cast(ctx, y_float, y)


def _attributes(node, ctx):
    """(kernel, strides, dilations), one value per spatial axis, after refusing what the pool
    cannot convert: the Indices output, an empty input, neither 1-D nor 2-D, attributes with
    the wrong number of values."""
    x = node.inputs[0]
    if len(node.outputs) > 1 and node.outputs[1]:
        raise ctx.error("MaxPool's Indices output is not supported")
    shape = ctx.shape(x)
    ctx.check_not_empty(x)
    if len(shape) not in (3, 4):
        raise ctx.error(f"{len(shape) - 2}D pooling is not supported (1D and 2D are)")
    kernel = list(node.attr("kernel_shape"))
    strides = list(node.attr("strides", [1] * len(kernel)))
    dilations = list(node.attr("dilations", [1] * len(kernel)))
    for name, values in (("kernel_shape", kernel), ("strides", strides), ("dilations", dilations)):
        if len(values) != len(shape) - 2:
            raise ctx.error(f"attribute {name!r} has {len(values)} values for {len(shape) - 2} "
                            "spatial axes")
    if node.attr("auto_pad", "NOTSET") == "NOTSET" and len(node.attr("pads", [0] * 2 * len(kernel))) \
            != 2 * len(kernel):
        raise ctx.error(f"attribute 'pads' has {len(node.attr('pads'))} values, the pool takes "
                        f"{2 * len(kernel)}")
    return kernel, strides, dilations


def _as_2d(node, ctx, kernel, strides, dilations):
    """(x, kernel, strides, dilations, pads, y's shape) as 2-D: a 1-D pool's input RESHAPEd to
    [N, C, 1, L] and its attributes given a unit height (lift.py), since TFLite's pools are 2-D;
    the end pads extended for ceil_mode, so that the VALID output size equals ONNX's."""
    x, shape, y_shape = node.inputs[0], ctx.shape(node.inputs[0]), ctx.shape(node.outputs[0])
    one_d = len(shape) == 3
    if one_d:
        x = lift_1d_input(ctx, x)
        kernel, strides = lift_1d_values(kernel, 1), lift_1d_values(strides, 1)
        dilations = lift_1d_values(dilations, 1)
        y4 = (y_shape[0], y_shape[1], 1, y_shape[2])
    else:
        y4 = y_shape
    spatial = ctx.shape(x)[2:]
    if one_d:
        pads = lift_1d_pads(onnx_pads(node, shape[2:], kernel[1:], strides[1:], dilations[1:]))
    else:
        pads = onnx_pads(node, spatial, kernel, strides, dilations)
    for i in range(2):  # ceil_mode
        span = (kernel[i] - 1) * dilations[i] + 1
        needed = (y4[2 + i] - 1) * strides[i] + span - spatial[i] - pads[i]
        pads[2 + i] = max(pads[2 + i], needed)
    return x, kernel, strides, dilations, pads, y4


def _plain_pool(ctx, node, x_nhwc, spatial, kernel, strides, pads, y4) -> str:
    """One MAX_POOL_2D or AVERAGE_POOL_2D on SAME or VALID padding; other ONNX pads are an
    explicit pad first (the lowest float for max, zeros for average) and, for an average that
    excludes them, a MUL by each window's size / count of real inputs. Returns the NHWC result."""
    y = node.outputs[0]
    is_max = node.op_type == "MaxPool"
    padding = choose_padding(pads, spatial, kernel, strides, [1, 1], y4[2:])
    correction = None
    if padding is None or (padding == "SAME" and not is_max and node.attr("count_include_pad", 0)):
        if is_max:
            x_nhwc = explicit_pad(ctx, x_nhwc, pads, float(np.finfo(np.float32).min))
        else:
            x_nhwc = explicit_pad(ctx, x_nhwc, pads)
            if not node.attr("count_include_pad", 0):
                # Average over the padded input, then rescale each output position by
                # window size / number of real (unpadded) inputs under its window.
                correction = _exclude_pad_correction(spatial, kernel, strides, pads, y4[2:])
        padding = "VALID"
    inner = ctx.tensor(channels_last_name(y), (y4[0], y4[2], y4[3], y4[1]), ctx.dtype(y))
    pooled = inner if correction is None else ctx.tensor(y + "_incl_pad", ctx.shape(inner), ctx.dtype(y))
    ctx.add_op("MAX_POOL_2D" if is_max else "AVERAGE_POOL_2D", [x_nhwc], [pooled],
               {"padding": padding, "stride_h": strides[0], "stride_w": strides[1],
                "filter_height": kernel[0], "filter_width": kernel[1]})
    if correction is not None:
        ctx.add_op("MUL", [pooled, ctx.constant("pool_correction", correction)], [inner])
    return inner


def _dilated_pool(ctx, node, x_nhwc, inner, spatial, kernel, strides, dilations, pads, out_spatial):
    """TFLite's pools have no dilation: pad, take one strided slice per kernel tap, and combine
    them with MAXIMUM (max pool) or ADD and a scale (average pool)."""
    is_max = node.op_type == "MaxPool"
    padded = explicit_pad(ctx, x_nhwc, pads, float(np.finfo(np.float32).min) if is_max else None)
    n, _, _, c = ctx.shape(padded)
    out_shape = (n, out_spatial[0], out_spatial[1], c)
    combined = None
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            begin = [0, i * dilations[0], j * dilations[1], 0]
            end = [n, begin[1] + (out_spatial[0] - 1) * strides[0] + 1,
                   begin[2] + (out_spatial[1] - 1) * strides[1] + 1, c]
            tap = ctx.tensor(inner + f"_tap{i}_{j}", out_shape, ctx.dtype(inner))
            ctx.add_op("STRIDED_SLICE", [padded, ctx.constant("begin", np.array(begin, np.int32)),
                                         ctx.constant("end", np.array(end, np.int32)),
                                         ctx.constant("strides", np.array([1, strides[0], strides[1], 1], np.int32))],
                       [tap])
            if combined is None:
                combined = tap
                continue
            last = i == kernel[0] - 1 and j == kernel[1] - 1
            out = inner if last and is_max else ctx.tensor(inner + f"_acc{i}_{j}", out_shape, ctx.dtype(inner))
            ctx.add_op("MAXIMUM" if is_max else "ADD", [combined, tap], [out])
            combined = out
    if not is_max:
        if node.attr("count_include_pad", 0):
            scale = np.full((1, out_spatial[0], out_spatial[1], 1), 1.0 / (kernel[0] * kernel[1]), np.float32)
        else:
            scale = _exclude_pad_correction(spatial, kernel, strides, pads, out_spatial, dilations)
            scale = scale / (kernel[0] * kernel[1])
        ctx.add_op("MUL", [combined, ctx.constant("pool_scale", scale.astype(np.float32))], [inner])


def _exclude_pad_correction(spatial, kernel, strides, pads, out_spatial, dilations=(1, 1)) -> np.ndarray:
    """[1, OH, OW, 1]: window size / count of unpadded inputs in each output's window."""
    counts = []
    for i in range(2):
        taps = (np.arange(out_spatial[i]) * strides[i] - pads[i])[:, None] + np.arange(kernel[i]) * dilations[i]
        counts.append(((taps >= 0) & (taps < spatial[i])).sum(axis=1))
    count = np.outer(counts[0], counts[1]).astype(np.float32)
    return (kernel[0] * kernel[1] / count).reshape(1, out_spatial[0], out_spatial[1], 1)


def _covers_whole_input(spatial, kernel, pads, out_spatial, dilations) -> bool:
    """A single output position whose window (starting at -pad_begin) spans every input row and
    column."""
    return (tuple(out_spatial) == (1, 1) and all(d == 1 for d in dilations)
            and all(kernel[i] - pads[i] >= spatial[i] for i in range(2)))


def _global_pool(ctx, op_type: str, x: str, y: str) -> None:
    """A reduction over the spatial axes with keep_dims; in NHWC after the layout pass."""
    axes = np.arange(2, ctx.rank(x), dtype=np.int32)
    ctx.add_op(op_type, [x, ctx.constant("axes", axes)], [y], {"keep_dims": True})


@onnx_op("GlobalAveragePool", "GlobalMaxPool")
def import_global_pool(node, ctx):
    _global_pool(ctx, "MEAN" if node.op_type == "GlobalAveragePool" else "REDUCE_MAX",
                 node.inputs[0], node.outputs[0])


def _lp_power(ctx, x: str, p: float) -> str:
    """|x|^p: ABS for p 1, x*x for p 2, POW of ABS otherwise."""
    shape, dtype = ctx.shape(x), ctx.dtype(x)
    if p == 2:
        out = ctx.tensor(x + "_squared", shape, dtype)
        ctx.add_op("MUL", [x, x], [out])
        return out
    out = ctx.tensor(x + "_abs", shape, dtype)
    ctx.add_op("ABS", [x], [out])
    if p == 1:
        return out
    powered = ctx.tensor(x + "_pow", shape, dtype)
    ctx.add_op("POW", [out, ctx.constant("p", np.array(p, dtype))], [powered])
    return powered


@onnx_op("LpPool", "GlobalLpPool")
def import_lp_pool(node, ctx):
    """(sum of |x|^p over each window)^(1/p): the window sums are an AveragePool that counts the
    (zero) pads, times the window's size, so every padding, stride, dilation and ceil mode the
    average pool takes; GlobalLpPool sums over the spatial axes."""
    x, y = node.inputs[0], node.outputs[0]
    if ctx.dtype(x) != np.float32:
        raise ctx.error(f"pooling {ctx.dtype(x)} is not supported (float32 is)")
    p = float(node.attr("p", 2))
    if p <= 0:
        raise ctx.error(f"p = {p}: the Lp norm needs p > 0")
    powered = _lp_power(ctx, x, p)
    summed = ctx.tensor(y + "_sum", ctx.shape(y), ctx.dtype(y))
    if node.op_type == "GlobalLpPool":
        axes = np.arange(2, ctx.rank(x), dtype=np.int32)
        ctx.add_op("SUM", [powered, ctx.constant("axes", axes)], [summed], {"keep_dims": True})
    else:
        average = ctx.tensor(y + "_average", ctx.shape(y), ctx.dtype(y))
        attrs = {k: v for k, v in node.attrs.items() if k != "p"}
        attrs["count_include_pad"] = 1
        import_pool(dataclasses.replace(node, op_type="AveragePool", inputs=[powered],
                                        outputs=[average], attrs=attrs), ctx)
        area = float(np.prod(node.attr("kernel_shape")))
        ctx.add_op("MUL", [average, ctx.constant("window_size", np.array(area, np.float32))], [summed])
    if p == 1:
        ctx.add_op("IDENTITY", [summed], [y])
    elif p == 2:
        ctx.add_op("SQRT", [summed], [y])
    else:
        ctx.add_op("POW", [summed, ctx.constant("inverse_p", np.array(1 / p, np.float32))], [y])
