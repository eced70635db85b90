"""remove_trivial_activation: drops a quantized op's fused RELU/RELU6/RELU_N1_TO_1 when its output
params already make the clamp a no-op (TOCO's RemoveTrivialQuantizedActivationFunc).

The kernel clamps to [Z + round(lo / S), Z + round(hi / S)] intersected with [-128, 127]; when
that is all of [-128, 127] -- a RELU whose output zero point is -128, a RELU6 whose range is
[0, 6] -- the clamp changes no value, and without it the op is plain (and delegates that cannot
fuse an activation take it whole).
"""

from __future__ import annotations

import numpy as np

from ..ir import Model
from ..quantize.params import round_half_away

CLAMPS = {"RELU": (0.0, np.inf), "RELU6": (0.0, 6.0), "RELU_N1_TO_1": (-1.0, 1.0)}


def _clamp_is_trivial(activation: str, scale: float, zero_point: int, dtype: np.dtype) -> bool:
    lo, hi = CLAMPS[activation]
    info = np.iinfo(dtype)
    q_lo = zero_point + float(round_half_away(lo / scale))
    q_hi = np.inf if np.isinf(hi) else zero_point + float(round_half_away(hi / scale))
    return q_lo <= info.min and q_hi >= info.max


def remove_trivial_activation(model: Model) -> bool:
    changed = False
    for op in model.operators:
        if not op.quantized or op.fused_activation not in CLAMPS:
            continue
        output = model.arrays[op.outputs[0]]
        quant = output.quant
        if quant is not None and _clamp_is_trivial(op.fused_activation, float(quant.scale[0]),
                                                   int(quant.zero_point[0]), output.dtype):
            op.fused_activation = "NONE"
            changed = True
    return changed
