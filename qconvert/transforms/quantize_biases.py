"""quantize_biases: the float bias of an int8 op with int8 weights becomes int32, zero point 0,
scale input_scale * weight_scale per channel, quantized dimension 0 (also for depthwise, whose
weights are per channel along axis 3), as the int8 kernels require (an op whose bias scale no
kernel can compute with is refused first, check_quantization.require_representable); a 16x8 op's bias becomes
int64 the same way (its int16 x int8 products accumulate in 64 bits). It runs after
quantize_weights because it needs the final, possibly bias-widened, weight scales.
"""

from __future__ import annotations

import numpy as np

from ..ir import Model, QuantParams
from .quantization import FLOAT32, INT8, INT16, input_scale, op_activation_type, rule_of
from ..quantize.params import quantize_bias
from .quantization import require_representable
from .helpers import own_constant, single_use_constants


def quantize_biases(model: Model) -> bool:
    changed = False
    single_use = single_use_constants(model)
    for op in model.operators:
        rule = rule_of(op)
        if not op.quantized or rule.bias is None or rule.bias >= len(op.inputs) or not op.inputs[rule.bias]:
            continue
        bias = model.arrays[op.inputs[rule.bias]]
        weights = model.arrays[op.inputs[rule.weight]]
        if bias.dtype != FLOAT32 or weights.dtype != INT8:
            continue
        require_representable(op, model)  # a bias scale that underflows is the user's range
        dtype = np.dtype(np.int64 if op_activation_type(op) == INT16 else np.int32)
        q, scales = quantize_bias(bias.data, input_scale(op, model), weights.quant.scale, dtype)
        name = own_constant(model, op, rule.bias, single_use)
        array = model.arrays[name]
        array.data, array.dtype = q, dtype
        array.quant = QuantParams(scales, np.zeros(scales.size, np.int64), 0)
        changed = True
    return changed
