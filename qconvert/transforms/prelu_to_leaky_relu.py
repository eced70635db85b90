"""prelu_to_leaky_relu (quantize step): a PRELU whose constant slope holds one value (a scalar,
or one per channel all equal) becomes LEAKY_RELU with that alpha. XNNPACK delegates int8
LEAKY_RELU but no int8 PRELU (its PRELU takes float tensors only): an int8 PRELU runs in the
interpreter, measured at 45x float's time on AVX2 (targets/x86.json), and splits the delegated
partition twice. The arithmetic is the same: x where x >= 0, alpha * x below."""

import numpy as np

from ..ir import Model


def prelu_to_leaky_relu(model: Model) -> bool:
    changed = False
    for op in model.operators:
        if op.type != "PRELU" or len(op.inputs) != 2:
            continue
        x, slope = op.inputs
        value = model.constant(slope)
        if value is None or value.size == 0 or model.arrays[x].shape != model.arrays[op.outputs[0]].shape:
            continue
        alpha = float(value.flat[0])
        # alpha 0 is a RELU (XNNPACK takes no int8 RELU either); alpha must be a normal float
        if not np.all(value == value.flat[0]) or not np.isfinite(alpha) or abs(alpha) < np.finfo(np.float32).tiny:
            continue
        op.type, op.options = "LEAKY_RELU", {"alpha": alpha}
        model.set_inputs(op, [x])
        changed = True
    return changed
