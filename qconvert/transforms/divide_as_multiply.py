"""divide_as_multiply (quantize phase): a DIV of an activation by a constant becomes a MUL by the
constant's reciprocal.

TFLite has no int8 DIV, so each one stayed float between a DEQUANTIZE and a QUANTIZE. Exported
models are full of them: HardSwish written as x * relu6(x + 3) / 6 (PP-OCR's recognizer has 33,
its detector 24), normalizations by a constant. MUL has an int8 kernel, which XNNPACK delegates,
and the reciprocal is an ordinary constant operand (quantized over its own range like any other).
Only under --quantize: in float, x / c and x * (1 / c) can differ in the last bit, and the float
path stays exact. Not for a DIV that is to stay float (--keep-float, the planner), nor a constant
holding 0 or a value whose reciprocal is not a finite float32.
"""

from __future__ import annotations

import numpy as np

from ..ir import Model, Operator
from .quantization import FLOAT32


def divide_as_multiply(model: Model) -> bool:
    changed = False
    for op in model.operators:
        if op.type != "DIV" or op.float_reason or len(op.inputs) != 2:
            continue
        divisor = model.constant(op.inputs[1])
        x = model.arrays[op.inputs[0]]
        if divisor is None or divisor.dtype != FLOAT32 or x.is_constant or x.dtype != FLOAT32:
            continue
        with np.errstate(divide="ignore", over="ignore"):
            reciprocal = (np.float32(1) / divisor).astype(np.float32)
        if not np.isfinite(reciprocal).all() or not (reciprocal != 0).all():
            continue
        scale = model.add_constant(op.inputs[1] + "_reciprocal", reciprocal)
        model.replace_operator(op, Operator("MUL", [op.inputs[0], scale], list(op.outputs),
                                            dict(op.options), op.fused_activation, op.source))
        changed = True
    return changed
