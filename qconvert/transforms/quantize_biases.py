"""quantize_biases: the float bias of an int8 op with int8 weights becomes int32, zero point 0,
scale input_scale * weight_scale per channel, quantized dimension 0 (also for depthwise, whose
weights are per channel along axis 3), as the int8 kernels require. It runs after
quantize_weights because it needs the final, possibly bias-widened, weight scales.
"""

from __future__ import annotations

import numpy as np

from ..ir import Model, QuantParams
from ..quantize.arrays import FLOAT32, INT8, input_scale, rule_of
from ..quantize.params import quantize_bias
from .quantize_weights import own_constant, single_use_constants


def quantize_biases(model: Model) -> bool:
    changed = False
    single_use = single_use_constants(model)
    for op in model.operators:
        rule = rule_of(op)
        if not op.int8 or rule.bias is None or rule.bias >= len(op.inputs) or not op.inputs[rule.bias]:
            continue
        bias = model.arrays[op.inputs[rule.bias]]
        weights = model.arrays[op.inputs[rule.weight]]
        if bias.dtype != FLOAT32 or weights.dtype != INT8:
            continue
        q, scales = quantize_bias(bias.data, input_scale(op, model), weights.quant.scale)
        name = own_constant(model, op, rule.bias, single_use)
        array = model.arrays[name]
        array.data, array.dtype = q, np.dtype(np.int32)
        array.quant = QuantParams(scales, np.zeros(scales.size, np.int64), 0)
        changed = True
    return changed
