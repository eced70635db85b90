"""decompose_hard_swish: a HARD_SWISH about to run int8, x * relu6(x + 3) / 6, becomes its gate
g = clamp(x / 6 + 0.5, 0, 1) followed by MUL(x, g); the gate's range is [0, 1] cut to what x's
calibrated range reaches, so the int8 saturation of g is the clamp.

XNNPACK has no int8 HARD_SWISH (float only): each one left the delegate and split the graph
(a MobileNetV3 ran in 10 partitions, one cut per HardSwish). The replacement is delegated whole.

The gate is one 1x1 DEPTHWISE_CONV_2D (weight 1/6, bias 0.5) on a 4-D NHWC tensor: one int8
rounding, as affine_to_depthwise makes of a per-channel MUL + ADD. On other ranks it is MUL by
1/6 then ADD of 0.5 (the research's MUL/ADD/MUL form), with x / 6 cut near [-0.5, 0.5] (where the
gate saturates anyway) for a finer step. Ranges of the new tensors come from x's calibrated range
analytically; the output keeps the HARD_SWISH's. The constants are exact in int8: 1/6 is 127 at
scale 1/762 (weight per channel, or a MUL constant over [0, 1/6]), 0.5 the ADD's 127 at scale
0.5/255, or the conv's int32 bias at scale s_x/762. Measured on one op against onnxruntime: within
0.8 output steps (conv gate) and 0.93 (MUL + ADD), where the HARD_SWISH kernel is within 0.5-0.93.

Only where the HARD_SWISH runs int8: calibrated ranges, no float_reason, int8_blocker None, and
not an op that the int16 choice wants (int16 activations are never delegated, and the saturation
trick needs the asymmetric int8 range).
"""

from __future__ import annotations

import numpy as np

from ..ir import MinMax, Model, Operator
from .quantization import FLOAT32, Int16Choice, about_to_run_int8

# Where x / 6 is cut: [-64/127, 0.5] gets scale 0.5/127 and zero point 0, so that 0.5 (the gate's 1)
# is exactly q = 127; a cut at -0.5 would nudge the top to 127/255 and every large x would lose a
# step to a gate of 0.998.
CUT_BELOW = 64 / 127


def _clip(value: float, lo: float, hi: float) -> float:
    return min(max(value, lo), hi)


def decompose_hard_swish(model: Model, int16: Int16Choice = Int16Choice()) -> bool:
    changed = False
    for op in model.operators:
        if op.type != "HARD_SWISH" or not about_to_run_int8(op, model, int16):
            continue
        x, y = op.inputs[0], op.outputs[0]
        source = model.arrays[x]
        if source.minmax is None or source.is_constant or source.dtype != FLOAT32:
            continue
        lo, hi = source.minmax.min, source.minmax.max
        shape = source.shape
        gate = model.add_array(y + "_gate", shape, FLOAT32)
        model.arrays[gate].minmax = MinMax(_clip(lo / 6 + 0.5, 0.0, 1.0), _clip(hi / 6 + 0.5, 0.0, 1.0),
                                           "x / 6 + 0.5 of x's range, clamped to [0, 1] by saturation")
        if len(shape) == 4:
            channels = shape[3]
            weights = model.add_constant(y + "_sixth", np.full((1, 1, 1, channels), 1 / 6, np.float32))
            bias = model.add_constant(y + "_half", np.full(channels, 0.5, np.float32))
            options = {"padding": "VALID", "stride_h": 1, "stride_w": 1, "depth_multiplier": 1,
                       "dilation_h_factor": 1, "dilation_w_factor": 1}
            model.insert_before(op, Operator("DEPTHWISE_CONV_2D", [x, weights, bias], [gate], options,
                                             source=op.source))
        else:
            scaled = model.add_array(y + "_sixth", shape, FLOAT32)
            model.arrays[scaled].minmax = MinMax(_clip(lo / 6, -CUT_BELOW, 0.5),
                                                 _clip(hi / 6, -CUT_BELOW, 0.5),
                                                 "x / 6 of x's range, cut where the gate saturates")
            sixth = model.add_constant(y + "_sixth", np.array([1 / 6], np.float32))
            half = model.add_constant(y + "_half", np.array([0.5], np.float32))
            model.insert_before(op, Operator("MUL", [x, sixth], [scaled], source=op.source))
            model.insert_before(op, Operator("ADD", [scaled, half], [gate], source=op.source))
        model.replace_operator(op, Operator("MUL", [x, gate], [y], fused_activation=op.fused_activation,
                                                  source=op.source))
        changed = True
    return changed
