"""clamp_by_quantized_range: a MINIMUM or MAXIMUM by a constant that clamps the output of an op
about to run in int8 is dropped; the op's output range is cut at the constant instead, and its int8
output saturates there, which is the clamp (TOCO's RemoveTrivialQuantizedMinMax).

These clamps come from HardSigmoid (its upper bound 1: MUL, ADD with a fused RELU, MINIMUM) and
from Clip bounds other than the RELUs'. XNNPACK has no int8 MINIMUM or MAXIMUM, so each clamp split
the delegated graph: PP-OCR's text-direction classifier ran in 10 partitions, 9 of them cut by the
squeeze-excitation blocks' HardSigmoid.

Only where saturation is the clamp: the value lies on the side of 0 that int8 ranges always reach
(MINIMUM by c >= 0, MAXIMUM by c <= 0; a range is widened to contain 0, so a clamp at 0.5 from
below could not be one), the clamped tensor has no other reader, and its producer chooses its
output params freely from its range (CONV_2D, ADD, MUL, ...), with a calibrated range.
The clamp then holds up to the nudging of the params' zero point: within a step of the constant.
Not for a producer that is to run int16: symmetric int16 params reach both sides of 0.
"""

from __future__ import annotations

from ..ir import MinMax, Model, Operator
from .quantization import Int16Choice, about_to_run_int8, rule_of


def _clamped(model: Model, op: Operator) -> tuple[str, float] | None:
    """(the clamped activation, the constant) when `op` is a clamp this step can drop."""
    if op.type not in ("MINIMUM", "MAXIMUM") or len(op.inputs) != 2:
        return None
    constants = [model.constant(n) for n in op.inputs]
    if (constants[0] is None) == (constants[1] is None):
        return None
    k = 0 if constants[0] is not None else 1
    if constants[k].size != 1 or model.arrays[op.outputs[0]].shape != model.arrays[op.inputs[1 - k]].shape:
        return None
    value = float(constants[k].reshape(()))
    if (op.type == "MINIMUM" and value < 0) or (op.type == "MAXIMUM" and value > 0):
        return None
    return op.inputs[1 - k], value


def clamp_by_quantized_range(model: Model, int16: Int16Choice = Int16Choice()) -> bool:
    changed = False
    for op in model.operators:
        found = _clamped(model, op)
        if found is None or op.float_reason:
            continue
        name, value = found
        array, producer = model.arrays[name], model.producer(name)
        rule = rule_of(producer) if producer is not None else None
        if (array.minmax is None or name in model.outputs or len(model.consumers(name)) != 1
                or rule is None or rule.output != "free" or not about_to_run_int8(producer, model, int16)):
            continue
        lo, hi = array.minmax.min, array.minmax.max
        if op.type == "MINIMUM":
            lo, hi = min(lo, value), min(hi, value)
        else:
            lo, hi = max(lo, value), max(hi, value)
        array.minmax = MinMax(lo, hi, f"calibrated, cut at {value:g} by the {op.type} it replaces")
        model.set_inputs(op, [name, next(n for n in op.inputs if n != name)])
        if model.bypass(op):
            changed = True
    return changed
