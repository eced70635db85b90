"""affine_to_depthwise (quantize phase): a per-channel MUL followed by a per-channel ADD on an NHWC
feature map -- a batch norm that could not fold into a conv -- becomes one 1x1 DEPTHWISE_CONV_2D
whose weights are the scale and whose bias is the shift.

In int8 that is one rounding instead of two, and the scale is quantized per channel (a MUL's
constant gets one scale for all channels); a fused RELU on the ADD stays fused. In float the two
elementwise ops are as good, so this runs only under --quantize, before the ranges are propagated.
Not when either op is to stay float (--keep-float, the planner): the new op would not be. Nor,
with ranges_needed (no --default-range), where neither the MUL's input nor the ADD's output has a
range, even across same-scale ops: the DEPTHWISE_CONV_2D would stay float (int8_blocker), and
a float one only spreads a scalar constant over the channels as float32 weights and shows in the
report as a weighted op left float. That is the exact Erf's polynomial (ops/unary.py) in a QDQ
model: onnxruntime computes Erf in float, so its intermediates have no pair (the zoo's QDQ
ConvNeXt, Swin and MaxViT kept 2 float depthwise convs per GELU).
"""

from __future__ import annotations


from ..ir import Model, Operator
from .helpers import per_channel_vector, split_constant_binary
from .quantization import fill_across_same_scale_ops, value_range


def _unranged(model: Model, x: str, y: str) -> bool:
    """Whether neither end of the affine has a range: an int8 DEPTHWISE_CONV_2D needs both. One
    end without is left to the later steps (propagate_minmax may still give it one)."""
    return value_range(model.arrays[x]) is None and model.arrays[y].minmax is None


def affine_to_depthwise(model: Model, ranges_needed: bool = False) -> bool:
    """The rewrite; ranges_needed: only where the new op could be int8 (the module says why)."""
    if ranges_needed:
        fill_across_same_scale_ops(model)  # propagate_minmax's step 1, now: the ranges it will have
    changed = False
    for mul in model.operators:
        head = split_constant_binary(mul, model) if mul.type == "MUL" else None
        if head is None or mul.fused_activation != "NONE" or mul.float_reason:
            continue
        x = mul.inputs[head[0]]
        shape = model.arrays[x].shape
        middle = mul.outputs[0]
        if len(shape) != 4 or not model.is_discardable(middle):
            continue
        add = model.consumers(middle)[0]
        tail = split_constant_binary(add, model) if add.type == "ADD" else None
        if tail is None or add.inputs[tail[0]] != middle or add.float_reason:
            continue
        if ranges_needed and _unranged(model, x, add.outputs[0]):
            continue
        scale, shift = (per_channel_vector(c, shape[3], 4) for c in (head[1], tail[1]))
        if scale is None or shift is None:
            continue
        weights = model.add_constant(mul.inputs[1 - head[0]] + "_depthwise", scale.reshape(1, 1, 1, -1))
        bias = model.add_constant(add.inputs[1 - tail[0]] + "_bias", shift)
        options = {"padding": "VALID", "stride_h": 1, "stride_w": 1, "depth_multiplier": 1,
                   "dilation_h_factor": 1, "dilation_w_factor": 1}
        model.replace_operator(mul, Operator("DEPTHWISE_CONV_2D", [x, weights, bias], list(add.outputs),
                                             options, add.fused_activation, mul.source))
        model.remove_operator(add)
        changed = True
    return changed
