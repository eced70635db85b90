"""ConvTranspose (1D and 2D, groups, dilations, pads/output_padding/output_shape/auto_pad) as
TRANSPOSE_CONV; one whose kernel is its stride, unpadded (a U-Net's 2x2 stride-2 upsampling), as a
1x1 CONV_2D then DEPTH_TO_SPACE (_blocks: sized from its input, which a dynamic size needs).

ONNX W [I, O/g, kh, kw] becomes TFLite's [O, kh, kw, I] at import. Dilation is folded into the
weights (zeros between the taps give the same scatter), since TRANSPOSE_CONV has none. Weights or a
bias computed at run time are tensors TRANSPOSE_CONV reads (a TRANSPOSE op lays the weights out,
SPLIT ops cut them per group, PAD ops dilate them); under --quantize such an op stays float (its
int8 kernel needs constant weights).

Padding: ONNX output[o] = full[o + pad_begin], where `full` is the un-cropped transposed conv
(zero beyond its end, which output_padding/output_shape can reach). TFLite's kernel computes the
same with its SAME/VALID pad at the top/left, and its optimized path (col2im) is only right when
the output size maps back onto the input size (ceil(out/s) == in for SAME, (out-k)/s+1 == in for
VALID). So the importer uses SAME when its pad equals ONNX's begin pad under that condition, and
otherwise VALID over a large enough output followed by a SLICE of the ONNX window.
"""

from __future__ import annotations

import numpy as np

from ..ir import channels_last_name
from .layout import from_channels_last, reshape, to_channels_last, transpose
from .lift import lift_1d, lift_1d_pads, lift_1d_values
from .registry import QuantRule, onnx_op, tflite_op
from .slice import slice_tensor
from .versions import INT8, INT16, input_dtype


def _transpose_conv_version(op, model):
    """op_version.cc's TRANSPOSE_CONV (inputs: output_shape, weights, input[, bias])."""
    if input_dtype(op, model, 2) == INT16 and input_dtype(op, model, 1) == INT8:
        return 5  # 16x8: quantized_bias_type, absent, reads as FLOAT32, which op_version.cc counts as set
    if op.fused_activation != "NONE":
        return 4
    if len(op.inputs) == 4 and op.inputs[3]:  # a 4th slot that is -1 does not count
        return 3
    return 2 if input_dtype(op, model, 1) == INT8 else 1


# Inputs: output shape, weights OHWI (per output channel along axis 0), input, bias.
tflite_op("TRANSPOSE_CONV", options="TransposeConvOptions", version=_transpose_conv_version,
          quant=QuantRule(activations=(2,), weight=1, weight_axis=0, bias=3, int16=True))


def _out_and_begins(node, in_spatial, kernel, strides, output_padding, pads, output_shape):
    """(output size, pad at the start) per spatial axis, as the ONNX spec defines them.

    Explicit pads give the size; output_shape (or SAME_*: in*stride) gives the size and the pads:
    total = s*(in-1) + output_padding + k - out split with the smaller half first for SAME_UPPER
    and the larger half first otherwise. A negative total (the output reaches past the full
    result, the extra being at the end) starts at 0.
    """
    rank = len(in_spatial)
    auto_pad = node.attr("auto_pad", "NOTSET")
    full = [s * (i - 1) + op + k for i, k, s, op in zip(in_spatial, kernel, strides, output_padding)]
    if output_shape is None and auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        if auto_pad == "VALID":
            pads = [0] * (2 * rank)
        return [f - pads[i] - pads[i + rank] for i, f in enumerate(full)], list(pads[:rank])
    if output_shape is None:  # SAME_*: in*stride, but never past the full result (ORT, inference)
        output_shape = [min(i * s, f) for i, s, f in zip(in_spatial, strides, full)]
    begins = []
    for f, o in zip(full, output_shape):
        total = f - o
        if total <= 0:
            begins.append(0)
        elif auto_pad == "SAME_UPPER":
            begins.append(total // 2)
        else:
            begins.append(total - total // 2)
    return list(output_shape), begins


def _same_pad(out_size: int, kernel: int, stride: int) -> int:
    """The top/left pad TRANSPOSE_CONV uses with SAME (kernels/padding.h)."""
    total = max((-(-out_size // stride) - 1) * stride + kernel - out_size, 0)
    return total // 2


def _plan(in_spatial, kernel, strides, begins, out_spatial):
    """(padding, TFLite output size per axis, crop begins or None), or None if none fits."""
    if all(-(-o // s) == i and _same_pad(o, k, s) == b
           for i, k, s, b, o in zip(in_spatial, kernel, strides, begins, out_spatial)):
        return "SAME", list(out_spatial), None
    sizes = []
    for i, k, s, b, o in zip(in_spatial, kernel, strides, begins, out_spatial):
        full = (i - 1) * s + k
        if o + b > full + s - 1:  # VALID's output would not map back onto the input
            return None
        sizes.append(max(full, o + b))
    crop = None if list(sizes) == list(out_spatial) and not any(begins) else list(begins)
    return "VALID", sizes, crop


def _dilate(w: np.ndarray, dilations) -> np.ndarray:
    """The kernel with dilation-1 zeros between its taps (same scatter, no dilation needed)."""
    if all(d == 1 for d in dilations):
        return w
    kh, kw = w.shape[2:]
    out = np.zeros(w.shape[:2] + ((kh - 1) * dilations[0] + 1, (kw - 1) * dilations[1] + 1), w.dtype)
    out[:, :, ::dilations[0], ::dilations[1]] = w
    return out


def _attributes(node, one_d: bool):
    """strides, dilations, output_padding, pads and output_shape, as 2-D (1-D gets H = 1)."""
    def pair(name, default):
        value = node.attr(name)
        value = [default] * (1 if one_d else 2) if value is None else list(value)
        return lift_1d_values(value, default) if one_d else value
    pads = list(node.attr("pads", [0] * (2 if one_d else 4)))
    output_shape = node.attr("output_shape")
    if one_d:
        pads = lift_1d_pads(pads)
        output_shape = None if output_shape is None else [1] + list(output_shape)[-1:]
    elif output_shape is not None:
        output_shape = list(output_shape)[-2:]
    return pair("strides", 1), pair("dilations", 1), pair("output_padding", 0), pads, output_shape


@onnx_op("ConvTranspose")
def import_conv_transpose(node, ctx):
    """A 2-D transposed conv (a 1-D one lifted to a unit height) as TRANSPOSE_CONV (one per
    group), dilation folded into the weights, then a SLICE when ONNX's window is not TFLite's."""
    x, w_name = node.inputs[:2]
    b_name = node.inputs[2] if len(node.inputs) > 2 else ""
    y = node.outputs[0]
    w = ctx.const(w_name)  # None: computed at run time, a tensor of ctx.shape(w_name)
    w_shape = _check_inputs(ctx, x, w_name, w, b_name)
    if w is not None:
        w = np.asarray(w, dtype=np.float32)
    one_d = len(w_shape) == 3
    bias = ctx.const(b_name) if b_name else None
    bias_shape = None if not b_name else ctx.shape(b_name) if bias is None else bias.shape
    strides, dilations, output_padding, pads, output_shape = _attributes(node, one_d)
    if one_d:
        x, w_name, w, w_shape = lift_1d(ctx, x, w_name, w, w_shape)
    group = node.attr("group", 1)
    _check_channels(ctx, ctx.shape(x)[1], w_shape, group, bias_shape)
    w_name, w, w_shape = _dilated_weights(ctx, w_name, w, dilations)
    kernel, in_spatial = w_shape[2:], ctx.shape(x)[2:]
    out_spatial, begins = _out_and_begins(node, in_spatial, kernel, strides, output_padding, pads,
                                          output_shape)
    batch, out_channels = ctx.shape(x)[0], w_shape[1] * group
    padding, sizes, crop = _checked_plan(ctx, y, one_d, (batch, out_channels), in_spatial, kernel,
                                         strides, begins, out_spatial)

    x_nhwc = to_channels_last(ctx, x)
    conv_out = ctx.tensor(y + "_conv", (batch, sizes[0], sizes[1], out_channels), ctx.dtype(y))
    options = {"padding": padding, "stride_h": strides[0], "stride_w": strides[1]}
    if w is None or (b_name and bias is None):
        _computed_transpose_conv(ctx, x_nhwc, w_name, w, b_name, bias, group, options, conv_out, y)
    elif group == 1 and _blocks(kernel, strides, dilations, begins, in_spatial, out_spatial):
        _as_blocks(ctx, x_nhwc, w, bias, w_name, b_name or y + "_bias", conv_out)
    elif group == 1:
        _transpose_conv(ctx, x_nhwc, w, bias, w_name, b_name or y + "_bias", conv_out, options)
    else:
        _grouped(ctx, x_nhwc, w, bias, group, options, conv_out, w_name, y)
    inner = conv_out if crop is None else _crop(ctx, conv_out, y, crop, out_spatial)
    from_channels_last(ctx, inner, y)


def _check_inputs(ctx, x: str, w_name: str, w, b_name: str):
    """The weights' shape, after refusing weights or a bias computed at run time in another
    dtype than the input, weights neither 1-D nor 2-D or of another rank than the input, and an
    empty input: what TRANSPOSE_CONV cannot take."""
    for name, value, what in ((w_name, w, "weights"), (b_name, ctx.const(b_name) if b_name else 0, "bias")):
        if value is None and ctx.dtype(name) != ctx.dtype(x):
            raise ctx.error(f"{what} {name!r} computed at run time have dtype {ctx.dtype(name)}, "
                            f"the input {ctx.dtype(x)}")
    w_shape = ctx.shape(w_name) if w is None else w.shape
    if len(w_shape) not in (3, 4):
        raise ctx.error(f"{len(w_shape) - 2}D transposed convolution is not supported (1D and 2D are)")
    if ctx.rank(x) != len(w_shape):
        raise ctx.error(f"weights of shape {list(w_shape)} (rank {len(w_shape)}) for an input of rank "
                        f"{ctx.rank(x)}")
    ctx.check_not_empty(x)
    return w_shape


def _check_channels(ctx, in_channels: int, w_shape, group: int, bias_shape) -> None:
    """Input channels = the weights' first axis, a multiple of group, and the bias one value per
    output channel (weights' second axis x group): ONNX's [I, O/g, kh, kw] layout."""
    if group < 1 or w_shape[0] != in_channels or in_channels % group:
        raise ctx.error(f"the input has {in_channels} channels, the weights {list(w_shape)} with "
                        f"group {group} take {w_shape[0]}")
    if bias_shape is not None and tuple(bias_shape) != (w_shape[1] * group,):
        raise ctx.error(f"bias of shape {list(bias_shape)} for {w_shape[1] * group} output channels")


def _dilated_weights(ctx, w_name: str, w, dilations):
    """(w_name, w, w_shape) with the dilation folded into the weights (_dilate at import, or
    _dilate_computed's ops when they are computed at run time): TRANSPOSE_CONV has no dilation."""
    if w is None:
        w_name = _dilate_computed(ctx, w_name, dilations)
        return w_name, w, ctx.shape(w_name)
    w = _dilate(w, dilations)
    return w_name, w, w.shape


def _checked_plan(ctx, y: str, one_d: bool, batch_channels, in_spatial, kernel, strides, begins,
                  out_spatial):
    """_plan's (padding, TFLite output size, crop), after refusing a node whose attributes give
    another output shape than shape inference, or an output TRANSPOSE_CONV cannot compute."""
    out4 = tuple(batch_channels) + tuple(out_spatial)
    expected = tuple(batch_channels) + (out_spatial[1],) if one_d else out4
    if tuple(ctx.shape(y)) != expected:
        raise ctx.error(f"the attributes give output shape {list(expected)}, shape inference "
                        f"{list(ctx.shape(y))}; the node is inconsistent")
    plan = _plan(in_spatial, kernel, strides, begins, out_spatial)
    if plan is None:
        raise ctx.error(f"output size {out_spatial} reaches more than stride-1 past the full "
                        "transposed convolution; TRANSPOSE_CONV cannot compute it")
    return plan


def _crop(ctx, conv_out: str, y: str, crop, out_spatial) -> str:
    """A SLICE of ONNX's output window (starting at `crop`) from TRANSPOSE_CONV's larger VALID
    output; returns the NHWC result."""
    batch, out_channels = ctx.shape(conv_out)[0], ctx.shape(conv_out)[3]
    inner = ctx.tensor(channels_last_name(y), (batch,) + tuple(out_spatial) + (out_channels,), ctx.dtype(y))
    begin = np.array([0, crop[0], crop[1], 0], np.int32)
    size = np.array(ctx.shape(inner), np.int32)
    ctx.add_op("SLICE", [conv_out, ctx.constant("begin", begin), ctx.constant("size", size)], [inner])
    return inner


def _dilate_computed(ctx, w_name: str, dilations) -> str:
    """_dilate for weights computed at run time: per dilated axis, a new axis after it PADded
    with dilation-1 zeros, merged into it by a RESHAPE, and the zeros after the last tap SLICEd
    off."""
    for axis, d in ((2, dilations[0]), (3, dilations[1])):
        if d == 1:
            continue
        shape = list(ctx.shape(w_name))
        spread = reshape(ctx, w_name, shape[:axis + 1] + [1] + shape[axis + 1:])
        widths = np.zeros((5, 2), np.int32)
        widths[axis + 1, 1] = d - 1
        padded = ctx.tensor(w_name + "_spread", shape[:axis + 1] + [d] + shape[axis + 1:], ctx.dtype(w_name))
        ctx.add_op("PAD", [spread, ctx.constant("paddings", widths)], [padded])
        merged = reshape(ctx, padded, shape[:axis] + [shape[axis] * d] + shape[axis + 1:])
        size = shape[:axis] + [(shape[axis] - 1) * d + 1] + shape[axis + 1:]
        w_name = slice_tensor(ctx, merged, [0] * 4, size)
    return w_name


def _computed_transpose_conv(ctx, x_nhwc, w_name, w, b_name, bias, group, options, out, y):
    """TRANSPOSE_CONV when its weights or bias are computed at run time: ONNX's [I, O/g, kh, kw]
    weights become [O/g, kh, kw, I] through a TRANSPOSE op; a grouped one SPLITs them along I
    (and the bias along O), as it does the input, into one TRANSPOSE_CONV per group."""
    perm = (1, 2, 3, 0)
    weights = (transpose(ctx, w_name, perm) if w is None
               else ctx.constant(w_name, np.ascontiguousarray(np.transpose(w, perm))))
    bias_name = b_name if not b_name or bias is None else ctx.constant(b_name, np.asarray(bias, np.float32))
    if group == 1:
        out_shape = ctx.constant("output_shape", np.array(ctx.shape(out), np.int32))
        ctx.add_op("TRANSPOSE_CONV", [out_shape, weights, x_nhwc] + ([bias_name] if bias_name else []),
                   [out], options)
        return
    w_shape, out_shape = ctx.shape(weights), ctx.shape(out)
    per_in, per_out = w_shape[3] // group, out_shape[3] // group

    def split(name, axis, shape):
        parts = [ctx.tensor(f"{name}_g{g}", shape, ctx.dtype(name)) for g in range(group)]
        ctx.add_op("SPLIT", [ctx.constant("axis", np.array(axis, np.int32)), name], parts,
                   {"num_splits": group})
        return parts

    weight_parts = split(weights, 3, w_shape[:3] + (per_in,))
    bias_parts = split(bias_name, 0, (per_out,)) if bias_name else [""] * group
    in_shape = ctx.shape(x_nhwc)
    parts_in = split(x_nhwc, 3, in_shape[:3] + (in_shape[3] // group,))
    parts_out = []
    for g in range(group):
        part = ctx.tensor(f"{y}_g{g}", out_shape[:3] + (per_out,), ctx.dtype(y))
        shape = ctx.constant("output_shape", np.array(ctx.shape(part), np.int32))
        ctx.add_op("TRANSPOSE_CONV", [shape, weight_parts[g], parts_in[g]]
                   + ([bias_parts[g]] if bias_parts[g] else []), [part], options)
        parts_out.append(part)
    ctx.add_op("CONCATENATION", parts_out, [out], {"axis": 3})


def _transpose_conv(ctx, x_nhwc, w, bias, w_hint, b_hint, out, options):
    """One TRANSPOSE_CONV; w is ONNX's [I, O, kh, kw]; the bias input only when there is one."""
    out_shape = ctx.constant("output_shape", np.array(ctx.shape(out), np.int32))
    inputs = [out_shape, ctx.constant(w_hint, np.ascontiguousarray(np.transpose(w, (1, 2, 3, 0)))),
              x_nhwc]
    if bias is not None:
        inputs.append(ctx.constant(b_hint, np.asarray(bias, np.float32)))
    ctx.add_op("TRANSPOSE_CONV", inputs, [out], options)


def _blocks(kernel, strides, dilations, begins, in_spatial, out_spatial) -> bool:
    """Whether each input pixel writes its own kernel-sized block of the output and nothing else
    (kernel = stride, no dilation, no padding, the whole result): then it is a 1x1 CONV_2D to
    kh*kw*O channels laid out as blocks (_as_blocks), which TFLite's and XNNPACK's kernels size
    from the input alone, where TRANSPOSE_CONV reads a constant output shape (a dynamic height
    then needs it computed, which XNNPACK does not take)."""
    return (list(kernel) == list(strides) and all(d == 1 for d in dilations)
            and not any(begins) and (kernel[0] == kernel[1] or kernel[0] == 1)
            and list(out_spatial) == [i * k for i, k in zip(in_spatial, kernel)])


def _as_blocks(ctx, x_nhwc, w, bias, w_hint, b_hint, out):
    """y[h*kh + a, w*kw + b, o] = sum_c x[h, w, c] W[c, o, a, b] (+ bias[o]): CONV_2D 1x1 with
    output channel (a*kw + b)*O + o, then DEPTH_TO_SPACE (TFLite's depth-column-row order), or
    for a unit kernel height (a lifted 1-D transposed conv) a RESHAPE of [W, kw*O] to [W*kw, O]."""
    channels, out_channels, kh, kw = w.shape
    weights = np.ascontiguousarray(np.transpose(w, (2, 3, 1, 0)).reshape(kh * kw * out_channels, 1, 1, channels))
    batch, height, width, _ = ctx.shape(x_nhwc)
    blocks = ctx.tensor(out + "_blocks", (batch, height, width, kh * kw * out_channels), ctx.dtype(out))
    bias = np.zeros(out_channels, np.float32) if bias is None else np.asarray(bias, np.float32)
    inputs = [x_nhwc, ctx.constant(w_hint, weights), ctx.constant(b_hint, np.tile(bias, kh * kw))]
    ctx.add_op("CONV_2D", inputs, [blocks], {"padding": "VALID", "stride_h": 1, "stride_w": 1})
    if kh == kw:
        ctx.add_op("DEPTH_TO_SPACE", [blocks], [out], {"block_size": kh})
    else:
        reshape(ctx, blocks, ctx.shape(out), out)


def _grouped(ctx, x_nhwc, w, bias, group, options, out, w_name, y):
    """SPLIT the input channels into groups, one TRANSPOSE_CONV each, CONCATENATION of results."""
    in_shape, out_shape = ctx.shape(x_nhwc), ctx.shape(out)
    per_in, per_out = in_shape[3] // group, out_shape[3] // group
    parts_in = [ctx.tensor(f"{x_nhwc}_g{g}", in_shape[:3] + (per_in,), ctx.dtype(x_nhwc))
                for g in range(group)]
    ctx.add_op("SPLIT", [ctx.constant("axis", np.array(3, np.int32)), x_nhwc], parts_in,
               {"num_splits": group})
    parts_out = []
    for g in range(group):
        part = ctx.tensor(f"{y}_g{g}", out_shape[:3] + (per_out,), ctx.dtype(y))
        bg = None if bias is None else bias[g * per_out:(g + 1) * per_out]
        _transpose_conv(ctx, parts_in[g], w[g * per_in:(g + 1) * per_in], bg, f"{w_name}_g{g}",
                        f"{y}_bias_g{g}", part, options)
        parts_out.append(part)
    ctx.add_op("CONCATENATION", parts_out, [out], {"axis": 3})
