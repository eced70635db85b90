"""fold_constants: computes ops whose inputs are all constant and replaces them by their value.

Transformations leave constant-only ops behind (a TRANSPOSE of a weight, a RESHAPE of a bias,
a CAST of an index); TFLite would recompute them on every inference. Each op's numpy `evaluate`
(in its op module) defines the value. Ops that write a graph output stay, so that the output
tensor is produced by an op. Each output's size is checked against errors.FOLDED_BYTES before it
is computed (its shape is known).
"""

import math

import numpy as np

from ..errors import FOLDED_BYTES
from ..ir import Model
from ..ops.activations import apply_fused_activation
from ..ops.registry import TFLITE_OPS


def fold_constants(model: Model) -> bool:
    changed = False
    for op in model.operators:
        evaluate = TFLITE_OPS[op.type].evaluate
        if evaluate is None or any(o in model.outputs for o in op.outputs):
            continue
        inputs = [model.constant(n) for n in op.inputs]
        if any(v is None for n, v in zip(op.inputs, inputs) if n):
            continue
        if any(model.arrays[n].is_variable for n in list(op.inputs) + op.outputs if n):
            continue  # stateful tensors are written at run time, every run
        for name in op.outputs:
            array = model.arrays[name]
            FOLDED_BYTES.check(math.prod(array.shape) * array.dtype.itemsize,
                                      f"{op.type} of node {op.source!r}")
        results = evaluate(inputs, op)
        for name, value in zip(op.outputs, results):
            array = model.arrays[name]
            value = apply_fused_activation(np.asarray(value), op.fused_activation)
            array.data = np.ascontiguousarray(value, dtype=array.dtype).reshape(array.shape)
        model.remove_operator(op)
        changed = True
    return changed
