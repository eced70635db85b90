"""ONNX padding (explicit pads or auto_pad) expressed as TFLite's SAME/VALID, or an explicit PAD."""

from __future__ import annotations

import numpy as np


def onnx_pads(node, in_spatial, kernel, strides, dilations) -> list[int]:
    """[begin_0, begin_1, ..., end_0, end_1, ...] as ONNX defines them, auto_pad resolved."""
    rank = len(in_spatial)
    auto_pad = node.attr("auto_pad", "NOTSET")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        pads = [0] * (2 * rank)
        for i in range(rank):
            out = -(-in_spatial[i] // strides[i])
            total = max((out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - in_spatial[i], 0)
            small, big = total // 2, total - total // 2
            pads[i], pads[i + rank] = (small, big) if auto_pad == "SAME_UPPER" else (big, small)
        return pads
    if auto_pad == "VALID":
        return [0] * (2 * rank)
    return list(node.attr("pads", [0] * (2 * rank)))


def tflite_same_pads(in_spatial, kernel, strides, dilations) -> list[int]:
    """The pads TFLite's SAME uses: the odd one extra at the end."""
    rank = len(in_spatial)
    pads = [0] * (2 * rank)
    for i in range(rank):
        out = -(-in_spatial[i] // strides[i])
        total = max((out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - in_spatial[i], 0)
        pads[i], pads[i + rank] = total // 2, total - total // 2
    return pads


def choose_padding(pads, in_spatial, kernel, strides, dilations, out_spatial) -> str | None:
    """'VALID' or 'SAME' if one of them equals the ONNX pads (and output size), else None."""
    rank = len(in_spatial)
    if not any(pads):
        return "VALID"
    if list(pads) == tflite_same_pads(in_spatial, kernel, strides, dilations):
        if all(out_spatial[i] == -(-in_spatial[i] // strides[i]) for i in range(rank)):
            return "SAME"
    return None


def explicit_pad(ctx, x_nhwc: str, pads, value: float | None = None) -> str:
    """PAD (or PADV2 with `value`) of the spatial axes of an NHWC tensor; returns the padded name."""
    shape = ctx.shape(x_nhwc)
    rank = len(shape) - 2
    paddings = np.zeros((len(shape), 2), dtype=np.int32)
    for i in range(rank):
        paddings[1 + i] = (pads[i], pads[i + rank])
    out_shape = [d + int(paddings[k].sum()) for k, d in enumerate(shape)]
    y = ctx.tensor(x_nhwc + "_padded", out_shape, ctx.dtype(x_nhwc))
    inputs = [x_nhwc, ctx.constant("paddings", paddings)]
    if value is None:
        ctx.add_op("PAD", inputs, [y])
    else:
        ctx.add_op("PADV2", inputs + [ctx.constant("pad_value", np.array(value, ctx.dtype(x_nhwc)))], [y])
    return y
