"""Conv (1D and 2D, groups, dilations, auto_pad) as CONV_2D or DEPTHWISE_CONV_2D.

Weights are transposed once at import (OIHW -> OHWI, or [1,H,W,C*M] for depthwise); activations go
through the layout helpers. A 1D conv is a 2D conv over [N, C, 1, L]. Grouped conv (1 < group < C)
is split into one CONV_2D per group and concatenated, since delegates and micro runtimes lack
CONV_2D's grouped variant. Weights or a bias computed at run time are tensors the conv reads
(TFLite's kernels take them; TRANSPOSE/SPLIT ops lay them out); such a conv stays float under
--quantize, whose int8 kernels need constant weights.
"""

from __future__ import annotations

import numpy as np

from ..ir import channels_last_name
from .layout import from_channels_last, to_channels_last, transpose
from .lift import lift_1d, lift_1d_pads, lift_1d_values
from .padding import choose_padding, explicit_pad, onnx_pads
from .registry import HybridRule, QuantRule, onnx_op, tflite_op
from .versions import FLOAT32, INT8, INT16, is_type, scale_count


def _conv_version(op, model):
    """op_version.cc's CONV_2D, in its order (int4 filters, v7, have no numpy dtype)."""
    data, weights = model.arrays[op.inputs[0]], model.arrays[op.inputs[1]]
    if is_type(op, model, (INT16, INT8), (INT16,)):
        return 8  # 16x8: quantized_bias_type, absent, reads as FLOAT32, which op_version.cc counts as set
    if data.shape and data.shape[-1] != weights.shape[-1]:
        return 6  # grouped (input channels != filter input channels)
    if is_type(op, model, (INT16, INT16)):
        return 4  # op_version.cc also reads outputs.at(1) here, which CONV_2D lacks
    if is_type(op, model, (INT8, INT8), (INT8,)):
        return 3
    if is_type(op, model, (FLOAT32, INT8), (FLOAT32,)):  # hybrid
        return 5 if scale_count(weights) == weights.shape[0] else 2
    return 1


def _depthwise_version(op, model):
    """op_version.cc's DEPTHWISE_CONV_2D, in its order (int4 filters, v7, have no numpy dtype)."""
    weights = model.arrays[op.inputs[1]]
    if is_type(op, model, (INT16, INT16)):
        return 5  # op_version.cc also reads outputs.at(1) here, which the op lacks
    if is_type(op, model, (FLOAT32, INT8), (FLOAT32,)):  # hybrid
        return 6 if scale_count(weights) == weights.shape[3] else 4
    if is_type(op, model, (INT8, INT8), (INT8,)):
        return 3
    if op.options.get("dilation_w_factor", 1) != 1 or op.options.get("dilation_h_factor", 1) != 1:
        return 2
    return 1


# Weights OHWI: per output channel along axis 0; depthwise 1HW(C*M): along axis 3.
tflite_op("CONV_2D", options="Conv2DOptions", version=_conv_version,
          quant=QuantRule(weight=1, weight_axis=0, bias=2, int16=True), hybrid=HybridRule(axis=0))
tflite_op("DEPTHWISE_CONV_2D", options="DepthwiseConv2DOptions", version=_depthwise_version,
          quant=QuantRule(weight=1, weight_axis=3, bias=2, int16=True), hybrid=HybridRule(axis=3))


@onnx_op("Conv")
def import_conv(node, ctx):
    """A 2-D conv (a 1-D one lifted to a unit height) as CONV_2D, DEPTHWISE_CONV_2D or one
    CONV_2D per group, in NHWC between the layout transposes."""
    x, w_name = node.inputs[:2]
    b_name = node.inputs[2] if len(node.inputs) > 2 else ""
    y = node.outputs[0]
    w = ctx.const(w_name)  # None: computed at run time, a tensor of ctx.shape(w_name)
    w_shape = ctx.shape(w_name) if w is None else w.shape
    _check_weights(ctx, x, w_name, w, w_shape, node.attr("group", 1), b_name)
    one_d = len(w_shape) == 3
    if one_d:
        x, w_name, w, w_shape = lift_1d(ctx, x, w_name, w, w_shape)
    spatial = ctx.shape(x)[2:]
    kernel = w_shape[2:]
    strides, dilations, pads = _attributes(node, ctx, one_d, spatial, w_shape)
    out_shape4 = _output_shape4(ctx, y, one_d, spatial, kernel, strides, dilations, pads)
    out_spatial = out_shape4[2:]

    x_nhwc = to_channels_last(ctx, x)
    padding = choose_padding(pads, spatial, kernel, strides, dilations, out_spatial)
    if padding is None:
        x_nhwc = explicit_pad(ctx, x_nhwc, pads)
        padding = "VALID"
    bias = ctx.const(b_name) if b_name else None
    if b_name and bias is None and ctx.dtype(b_name) != ctx.dtype(x):
        raise ctx.error(f"bias {b_name!r} computed at run time has dtype {ctx.dtype(b_name)}, "
                        f"the input {ctx.dtype(x)}")
    group = node.attr("group", 1)
    options = {"padding": padding, "stride_h": strides[0], "stride_w": strides[1],
               "dilation_h_factor": dilations[0], "dilation_w_factor": dilations[1]}
    inner_shape = (out_shape4[0],) + tuple(out_spatial) + (w_shape[0],)
    inner = ctx.tensor(channels_last_name(y), inner_shape, ctx.dtype(y))
    if w is None or (b_name and bias is None):
        _computed_conv(ctx, x_nhwc, w_name, w, b_name, bias, group, options, inner, y)
    else:
        _constant_conv(ctx, x_nhwc, w_name, np.asarray(w, dtype=np.float32), b_name, bias, group,
                       options, inner, y)
    from_channels_last(ctx, inner, y)


def _check_weights(ctx, x: str, w_name: str, w, w_shape, group: int, b_name: str) -> None:
    """Refuses weights the conv cannot take, before any op is written: computed at run time in
    another dtype than the input, neither 1-D nor 2-D, of another rank than the input, or whose
    channels do not match the input's and the bias's (_check_channels); and an empty input."""
    if w is None and ctx.dtype(w_name) != ctx.dtype(x):
        raise ctx.error(f"weights {w_name!r} computed at run time have dtype {ctx.dtype(w_name)}, "
                        f"the input {ctx.dtype(x)}")
    if len(w_shape) not in (3, 4):
        raise ctx.error(f"{len(w_shape) - 2}D convolution is not supported (1D and 2D are)")
    if ctx.rank(x) != len(w_shape):
        raise ctx.error(f"weights of shape {list(w_shape)} (rank {len(w_shape)}) for an input of rank "
                        f"{ctx.rank(x)}")
    ctx.check_not_empty(x)
    _check_channels(ctx, ctx.shape(x)[1], w_shape, group, b_name)


def _attributes(node, ctx, one_d: bool, spatial, w_shape):
    """(strides, dilations, pads) as 2-D (a 1-D conv's lifted, lift_1d_values/lift_1d_pads),
    refusing attributes with the wrong number of values or a kernel_shape other than the
    weights'. w_shape and spatial are the lifted 2-D ones."""
    axes = 1 if one_d else 2

    def pair(name, default):
        value = list(node.attr(name, [default] * axes))
        if len(value) != axes:
            raise ctx.error(f"attribute {name!r} has {len(value)} values for {axes} spatial axes")
        return lift_1d_values(value, default) if one_d else value
    strides, dilations = pair("strides", 1), pair("dilations", 1)
    declared = node.attr("kernel_shape")
    if declared is not None and list(declared) != list(w_shape[3:] if one_d else w_shape[2:]):
        raise ctx.error(f"kernel_shape {list(declared)} differs from the weights' spatial shape "
                        f"{list(w_shape[3:] if one_d else w_shape[2:])}")
    if one_d and node.attr("auto_pad", "NOTSET") == "NOTSET":
        p = list(node.attr("pads", [0, 0]))
        if len(p) != 2:
            raise ctx.error(f"attribute 'pads' has {len(p)} values, a 1D convolution takes 2")
        pads = lift_1d_pads(p)
    else:
        pads = onnx_pads(node, spatial, w_shape[2:], strides, dilations)
        if len(pads) != 4:
            raise ctx.error(f"attribute 'pads' has {len(pads)} values, a 2D convolution takes 4")
    return strides, dilations, pads


def _output_shape4(ctx, y: str, one_d: bool, spatial, kernel, strides, dilations, pads):
    """y's shape as 2-D ([N, C, 1, L] for a 1-D conv), refused unless its spatial size is the one
    the input, kernel, strides, dilations and pads give (a node shape inference got wrong)."""
    y_shape = ctx.shape(y)
    out_shape4 = (y_shape[0], y_shape[1], 1, y_shape[2]) if one_d else y_shape
    out_spatial = out_shape4[2:]
    expected = [(spatial[i] + pads[i] + pads[i + 2] - dilations[i] * (kernel[i] - 1) - 1) // strides[i] + 1
                for i in range(2)]
    if any(d < 1 for d in expected) or list(out_spatial) != expected:
        raise ctx.error(f"the output's spatial shape {list(out_spatial)} does not follow from the "
                        f"input's {list(spatial)}, kernel {list(kernel)}, strides, dilations and "
                        f"pads (which give {expected})")
    return out_shape4


def _constant_conv(ctx, x_nhwc, w_name, w, b_name, bias, group, options, inner, y):
    """The conv with constant float32 OIHW weights and bias: CONV_2D (OHWI weights),
    DEPTHWISE_CONV_2D ([1, H, W, C*M]) when every group is one input channel, else _grouped."""
    out_channels, in_per_group = w.shape[0], w.shape[1]
    in_channels = in_per_group * group
    if group == 1:
        inputs = [x_nhwc, ctx.constant(w_name, np.transpose(w, (0, 2, 3, 1))),
                  ctx.constant(b_name or y + "_bias", bias if bias is not None else np.zeros(out_channels, np.float32))]
        ctx.add_op("CONV_2D", inputs, [inner], options)
    elif group == in_channels and in_per_group == 1:
        multiplier = out_channels // in_channels
        inputs = [x_nhwc, ctx.constant(w_name, np.transpose(w, (1, 2, 3, 0))),
                  ctx.constant(b_name or y + "_bias", bias if bias is not None else np.zeros(out_channels, np.float32))]
        ctx.add_op("DEPTHWISE_CONV_2D", inputs, [inner], dict(options, depth_multiplier=multiplier))
    else:
        _grouped(ctx, x_nhwc, w, bias, group, options, inner, w_name, y)


def _check_channels(ctx, in_channels: int, w_shape, group: int, b_name: str) -> None:
    """Input channels = weight input channels x group, output channels a multiple of group,
    the bias one value per output channel: what TFLite's CONV_2D checks at prepare time."""
    if in_channels != w_shape[1] * group:
        raise ctx.error(f"the input has {in_channels} channels, the weights {list(w_shape)} with "
                        f"group {group} take {w_shape[1] * group}")
    if w_shape[0] % group:
        raise ctx.error(f"{w_shape[0]} output channels do not divide into {group} groups")
    if b_name and tuple(ctx.shape(b_name)) != (w_shape[0],):
        raise ctx.error(f"bias of shape {list(ctx.shape(b_name))} for {w_shape[0]} output channels")


def _computed_conv(ctx, x_nhwc, w_name, w, b_name, bias, group, options, inner, y):
    """The conv when its weights or bias are computed at run time: OIHW weights become OHWI (or
    [1, H, W, C*M] for depthwise) through a TRANSPOSE op rather than at import; a grouped conv
    SPLITs them, as it does the input, into one CONV_2D per group."""
    w_shape = ctx.shape(w_name) if w is None else w.shape
    out_channels, in_per_group = w_shape[0], w_shape[1]
    depthwise = group > 1 and in_per_group == 1
    perm = (1, 2, 3, 0) if depthwise else (0, 2, 3, 1)
    weights = (transpose(ctx, w_name, perm) if w is None
               else ctx.constant(w_name, np.transpose(np.asarray(w, np.float32), perm)))
    if not b_name:
        bias_name = ctx.constant(y + "_bias", np.zeros(out_channels, np.float32))
    else:
        bias_name = b_name if bias is None else ctx.constant(b_name, np.asarray(bias, np.float32))
    if group == 1:
        ctx.add_op("CONV_2D", [x_nhwc, weights, bias_name], [inner], options)
        return
    if depthwise:
        ctx.add_op("DEPTHWISE_CONV_2D", [x_nhwc, weights, bias_name], [inner],
                   dict(options, depth_multiplier=out_channels // group))
        return
    per_out = out_channels // group
    split = ctx.constant("axis", np.array(0, np.int32))
    weight_parts = [ctx.tensor(f"{weights}_g{g}", (per_out,) + ctx.shape(weights)[1:], ctx.dtype(weights))
                    for g in range(group)]
    ctx.add_op("SPLIT", [split, weights], weight_parts, {"num_splits": group})
    bias_parts = [ctx.tensor(f"{bias_name}_g{g}", (per_out,), ctx.dtype(bias_name)) for g in range(group)]
    ctx.add_op("SPLIT", [split, bias_name], bias_parts, {"num_splits": group})
    in_shape = ctx.shape(x_nhwc)
    parts_in = [ctx.tensor(f"{x_nhwc}_g{g}", in_shape[:3] + (in_shape[3] // group,), ctx.dtype(x_nhwc))
                for g in range(group)]
    ctx.add_op("SPLIT", [ctx.constant("axis", np.array(3, np.int32)), x_nhwc], parts_in,
               {"num_splits": group})
    parts_out = []
    for g in range(group):
        out = ctx.tensor(f"{y}_g{g}", ctx.shape(inner)[:3] + (per_out,), ctx.dtype(y))
        ctx.add_op("CONV_2D", [parts_in[g], weight_parts[g], bias_parts[g]], [out], options)
        parts_out.append(out)
    ctx.add_op("CONCATENATION", parts_out, [inner], {"axis": 3})


def _grouped(ctx, x_nhwc, w, bias, group, options, inner, w_name, y):
    """SPLIT the input channels into groups, one CONV_2D each, CONCATENATION of the results."""
    out_channels = w.shape[0]
    per_out = out_channels // group
    in_shape = ctx.shape(x_nhwc)
    parts_in = [ctx.tensor(f"{x_nhwc}_g{g}", in_shape[:3] + (in_shape[3] // group,), ctx.dtype(x_nhwc))
                for g in range(group)]
    ctx.add_op("SPLIT", [ctx.constant("axis", np.array(3, np.int32)), x_nhwc], parts_in,
               {"num_splits": group})
    out_shape = ctx.shape(inner)
    parts_out = []
    for g in range(group):
        wg = np.transpose(w[g * per_out:(g + 1) * per_out], (0, 2, 3, 1))
        bg = bias[g * per_out:(g + 1) * per_out] if bias is not None else np.zeros(per_out, np.float32)
        out = ctx.tensor(f"{y}_g{g}", out_shape[:3] + (per_out,), ctx.dtype(y))
        ctx.add_op("CONV_2D", [parts_in[g], ctx.constant(f"{w_name}_g{g}", wg),
                               ctx.constant(f"{y}_bias_g{g}", bg)], [out], options)
        parts_out.append(out)
    ctx.add_op("CONCATENATION", parts_out, [inner], {"axis": 3})
