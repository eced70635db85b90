"""identify_relu6: MINIMUM(MAXIMUM(x, 0), 6) and MINIMUM(RELU(x), 6) become RELU6(x),
MINIMUM(MAXIMUM(x, -1), 1) becomes RELU_N1_TO_1(x), and MAXIMUM(x, 0) becomes RELU(x), so that
fuse_activation can fold them (clip patterns written with Max/Min or Relu then Clip)."""

import numpy as np

from ..ir import Model

# (lower bound, upper bound) -> activation op
CLAMPS = {(0.0, 6.0): "RELU6", (-1.0, 1.0): "RELU_N1_TO_1"}


def _scalar(model: Model, name: str):
    value = model.constant(name)
    if value is None or value.size != 1 or value.dtype != np.float32:
        return None
    return float(value.reshape(()))


def _other(op, model):
    """(activation input, scalar constant) of a binary op with one scalar constant input."""
    for side in (0, 1):
        c = _scalar(model, op.inputs[1 - side])
        if c is not None:
            return op.inputs[side], c
    return None, None


def identify_relu6(model: Model) -> bool:
    changed = False
    for op in model.operators:
        if op.type == "MAXIMUM" and op.fused_activation == "NONE":
            x, c = _other(op, model)
            if c == 0.0 and model.arrays[x].shape == model.arrays[op.outputs[0]].shape:
                op.type, op.options = "RELU", {}
                model.set_inputs(op, [x])
                changed = True
        elif op.type == "MINIMUM":
            x, high = _other(op, model)
            inner = model.producer(x) if x else None
            if inner is None or not model.is_discardable(x):
                continue
            if inner.type == "RELU":
                source, low = inner.inputs[0], 0.0
            elif inner.type == "MAXIMUM":
                source, low = _other(inner, model)
            else:
                continue
            kind = CLAMPS.get((low, high))
            if kind and model.arrays[source].shape == model.arrays[op.outputs[0]].shape:
                op.type, op.options = kind, {}
                model.set_inputs(op, [source])
                model.remove_operator(inner)
                changed = True
    return changed
