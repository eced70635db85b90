"""merge_constant_binary_chains: a chain of MUL and ADD by constants becomes one MUL and one ADD.

A batch norm that cannot fold into a conv imports as MUL + ADD; DenseNet's (and Caffe2's)
scale layer after it is another Mul + Add. Four elementwise passes become two:
- ADD(x, b) -> MUL(., c)   becomes  MUL(x, c) -> ADD(., b * c)   (moves the MUL first, when a
                                                                 merge follows), then
- MUL(x, a) -> MUL(., c)   becomes  MUL(x, a * c), and
- ADD(x, b) -> ADD(., d)   becomes  ADD(x, b + d),
where a DIV by a nonzero constant next to a MUL by a constant counts as a MUL by its reciprocal
(HardSwish written out is `x * relu6(x + 3) / 6`, and PP-LCNet scales it by a learned MUL next).
Fewer ops run faster in float, and in int8 each op is one rounding less. The float result differs
from the ONNX order only in float rounding. Only pairs whose constants broadcast into the
activation's shape (so no op changes the shape) and whose middle tensor has no other reader and no
fused activation are merged; the second op's fused activation is kept.
"""

from __future__ import annotations

import numpy as np

from ..ir import MinMax, Model, Operator
from .helpers import split_constant_binary


def _merge(model: Model, first: Operator, second: Operator, constant: np.ndarray) -> None:
    """`second` reads first's activation input and `constant`; `first` goes."""
    index, _ = split_constant_binary(first, model)
    second_index, _ = split_constant_binary(second, model)
    merged = model.add_constant(second.inputs[1 - second_index], constant)
    model.set_inputs(second, [first.inputs[index], merged])
    model.remove_operator(first)


def merge_constant_binary_chains(model: Model) -> bool:
    changed = False
    for first in model.operators:
        if not model.has_operator(first):
            continue
        if first.type == "DIV" and _division_next_to_scale(model, first):
            _divide_as_multiply(model, first)
            changed = True
        head = split_constant_binary(first, model)
        middle = first.outputs[0]
        if head is None or first.fused_activation != "NONE" or not model.is_discardable(middle):
            continue
        second = model.consumers(middle)[0]
        tail = split_constant_binary(second, model)
        if tail is None or second.inputs[tail[0]] != middle:
            continue
        shape = model.arrays[middle].shape
        (_, a), (_, c) = head, tail
        if np.broadcast_shapes(a.shape, c.shape, shape) != shape:
            continue
        if first.type == second.type:
            merged = a * c if first.type == "MUL" else a + c
            _merge(model, first, second, merged.astype(np.float32))
        elif first.type == "ADD" and _swap_helps(model, first, second):
            _swap_add_before_mul(model, first, second, a, c)  # MUL(x, c) -> ADD(., a * c)
        else:
            continue
        changed = True
    return changed


def _is_scale(model: Model, op: Operator | None) -> bool:
    """A MUL by a float constant that keeps the shape, without a fused activation."""
    return (op is not None and op.type == "MUL" and op.fused_activation == "NONE"
            and split_constant_binary(op, model) is not None)


def _division_next_to_scale(model: Model, div: Operator) -> bool:
    """A DIV of an activation by a nonzero float constant (keeping the shape) that reads, or is
    the only reader of, a MUL by a constant."""
    divisor = model.constant(div.inputs[1]) if len(div.inputs) == 2 else None
    if divisor is None or divisor.dtype != np.float32 or not np.all(divisor):
        return False
    x, y = model.arrays[div.inputs[0]], model.arrays[div.outputs[0]]
    if x.data is not None or x.dtype != np.float32 or x.shape != y.shape:
        return False
    producer = model.producer(div.inputs[0])
    before = _is_scale(model, producer) and model.is_discardable(producer.outputs[0])
    after = (div.fused_activation == "NONE" and model.is_discardable(div.outputs[0])
             and _is_scale(model, model.consumers(div.outputs[0])[0]))
    return before or after


def _divide_as_multiply(model: Model, div: Operator) -> None:
    reciprocal = (np.float32(1) / model.constant(div.inputs[1])).astype(np.float32)
    div.type = "MUL"
    model.set_input(div, 1, model.add_constant(div.inputs[1], reciprocal))


def _swap_helps(model: Model, add: Operator, mul: Operator) -> bool:
    """Moving the MUL first only pays when a merge follows: a MUL by a constant before the ADD, or
    an ADD by a constant after the MUL (otherwise patterns such as GELU's are left as written)."""
    producer = model.producer(add.inputs[split_constant_binary(add, model)[0]])
    before = (producer is not None and producer.type == "MUL" and producer.fused_activation == "NONE"
              and split_constant_binary(producer, model) is not None
              and model.is_discardable(producer.outputs[0]))
    readers = model.consumers(mul.outputs[0])
    after = (mul.fused_activation == "NONE" and model.is_discardable(mul.outputs[0])
             and readers[0].type == "ADD" and split_constant_binary(readers[0], model) is not None)
    return before or after


def _swap_add_before_mul(model: Model, add: Operator, mul: Operator, a: np.ndarray, c: np.ndarray) -> None:
    add_index, _ = split_constant_binary(add, model)
    x, middle, out = add.inputs[add_index], add.outputs[0], mul.outputs[0]
    shifted = (a * c).astype(np.float32)
    # The MUL now writes the middle tensor: x * c. Its range, where the final one is known, is the
    # final range less the shift (a bound, per channel the shift is exact).
    final = model.arrays[out].minmax
    model.arrays[middle].minmax = (None if final is None else
                                   MinMax(final.min - float(shifted.max()), final.max - float(shifted.min()),
                                          "derived from the range after the shift"))
    c_name = mul.inputs[0 if mul.inputs[1] == middle else 1]
    model.remove_operator(mul)
    mul.inputs, mul.outputs = [x, model.add_constant(c_name, c)], [middle]
    model.set_inputs(add, [middle, model.add_constant(add.inputs[1 - add_index], shifted)])
    model.set_outputs(add, [out])
    add.fused_activation, mul.fused_activation = mul.fused_activation, "NONE"
    model.insert_before(add, mul)
