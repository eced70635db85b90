"""Tiny IR models built by hand for transformation tests (TOCO's test style), and a numpy
evaluator of the IR (each op's own `evaluate`) to check that a rewrite kept the model's meaning."""

from __future__ import annotations

import numpy as np

import qconvert.ops  # noqa: F401  (registers the op definitions)
from qconvert.ir import Array, Model, Operator
from qconvert.ops.activations import apply_fused_activation
from qconvert.ops.registry import TFLITE_OPS


class Builder:
    """model = Builder().input("x", (1, 4)).op("RELU", ["x"], "y", (1, 4)).output("y").model"""

    def __init__(self) -> None:
        self.model = Model()

    def input(self, name, shape, dtype=np.float32):
        self.model.add_array(name, shape, dtype)
        self.model.inputs.append(name)
        return self

    def const(self, name, value):
        value = np.asarray(value)
        self.model.arrays[name] = Array(name, value.dtype, value.shape, value)
        return self

    def op(self, op_type, inputs, output, shape, dtype=np.float32, activation="NONE", **options):
        outputs = output if isinstance(output, list) else [output]
        for name in outputs:
            self.model.add_array(name, shape, dtype)
        self.model.add_operator(Operator(op_type, list(inputs), outputs, options, activation))
        return self

    def output(self, *names):
        self.model.outputs.extend(names)
        return self


def evaluate_model(model: Model, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Runs the IR with numpy, op by op; returns the graph outputs."""
    values = {name: a.data for name, a in model.arrays.items() if a.is_constant}
    values.update(feeds)
    for op in model.operators:
        results = TFLITE_OPS[op.type].evaluate([values.get(n) if n else None for n in op.inputs], op)
        for name, value in zip(op.outputs, results):
            values[name] = apply_fused_activation(np.asarray(value), op.fused_activation)
    return {name: values[name] for name in model.outputs}


def op_types(model: Model) -> list[str]:
    return [op.type for op in model.operators]
