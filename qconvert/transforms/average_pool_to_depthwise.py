"""average_pool_to_depthwise: an AVERAGE_POOL_2D about to run int8 becomes a DEPTHWISE_CONV_2D with
the pool's window and strides, every weight 1 / (kh * kw) and a zero bias: VALID pools (DenseNet's
transitions, PP-OCRv4's recognizer, and the importer's PAD + VALID pool for ONNX pads that are not
SAME), and SAME pools whose windows all lie inside the input.

XNNPACK has no int8 AVERAGE_POOL_2D (float only): each one left the delegate and split the graph.
The depthwise conv is delegated.

Precision: the weights quantize per channel (quantize_weights) to int8 127 with scale
1 / (127 * kh * kw), i.e. exactly 1 / (kh * kw); the sum is exact in int32 and rounded once, as the
pool's kernel rounds it. The conv's output keeps the pool output's range (its own calibrated one
where the pool's was tied to the input's, a finer step).

Not rewritten: a SAME pool that some window reaches into the padding, where TFLite divides by the
taps inside the input but the conv by kh * kw. Correcting it with a MUL by kh * kw / taps after
the conv multiplies the conv's rounding at the borders and lost accuracy on Inception v2. A global
pool is a MEAN already (the importer writes one window over the whole map so).

Only where the pool runs int8 (calibrated ranges, no float_reason, int8_blocker None, not wanted
int16 by the options).
"""

from __future__ import annotations

import numpy as np

from ..ir import Model, Operator
from .quantization import FLOAT32, Int16Choice, about_to_run_int8


def _taps(in_size: int, out_size: int, kernel: int, stride: int, padding: str) -> np.ndarray:
    """How many of each output's window taps lie inside the input, along one axis (TFLite's
    padding: SAME pads (out - 1) * stride + kernel - in in total, the smaller half in front)."""
    before = max((out_size - 1) * stride + kernel - in_size, 0) // 2 if padding == "SAME" else 0
    taps = (np.arange(out_size) * stride - before)[:, None] + np.arange(kernel)
    return ((taps >= 0) & (taps < in_size)).sum(axis=1)


def average_pool_to_depthwise(model: Model, int16: Int16Choice = Int16Choice()) -> bool:
    changed = False
    for op in model.operators:
        if op.type != "AVERAGE_POOL_2D" or not about_to_run_int8(op, model, int16):
            continue
        x, y = op.inputs[0], op.outputs[0]
        source, target = model.arrays[x], model.arrays[y]
        if len(source.shape) != 4 or source.dtype != FLOAT32 or target.minmax is None:
            continue
        kh, kw = op.options["filter_height"], op.options["filter_width"]
        sh, sw = op.options["stride_h"], op.options["stride_w"]
        padding = op.options.get("padding", "VALID")
        channels = source.shape[3]
        taps = np.outer(_taps(source.shape[1], target.shape[1], kh, sh, padding),
                        _taps(source.shape[2], target.shape[2], kw, sw, padding))
        if not (taps == kh * kw).all():
            continue  # SAME padding that some window reaches into: see the docstring
        weights = model.add_constant(y + "_window", np.full((1, kh, kw, channels), 1 / (kh * kw), np.float32))
        bias = model.add_constant(y + "_bias", np.zeros(channels, np.float32))
        options = {"padding": padding, "stride_h": sh, "stride_w": sw, "depth_multiplier": 1,
                   "dilation_h_factor": 1, "dilation_w_factor": 1}
        model.replace_operator(op, Operator("DEPTHWISE_CONV_2D", [x, weights, bias], [y], options,
                                            op.fused_activation, op.source))
        changed = True
    return changed
