"""center_batch_matmul_operand (quantize step, before propagate_minmax): the second operand of an
int8 BATCH_MATMUL gets a range whose int8 zero point is 0, [-m, m * 127/128] around its
calibrated one. XNNPACK delegates an int8 BATCH_MATMUL only when that operand's zero point is 0;
at any other (an attention's K or V at its own range) it runs in the interpreter, measured at 14x
float's time on AVX2 (targets/x86.json), and splits the partition twice. The cost: at most one
bit of that operand's precision, where its range was one-sided.

The range is set where the operand's values are made: back through the ops that only move them
(RESHAPE, TRANSPOSE and the other single-input same-scale ops, whose output range propagate_minmax
makes their input's), to a producer that chooses its range freely; an operand whose range a
kernel fixes (a SOFTMAX's probabilities) or the model's own Q/DQ pair gives stays as it is."""

from __future__ import annotations

from ..ir import MinMax, Model
from .quantization import QDQ_SOURCE, Int16Choice, rule_of, value_range

CENTERED = "centered for XNNPACK's BATCH_MATMUL"


def center_batch_matmul_operand(model: Model, int16: Int16Choice = Int16Choice()) -> bool:
    changed = False
    for op in model.operators:
        if op.type != "BATCH_MATMUL" or op.float_reason or int16.runs_int16(op) or len(op.inputs) < 2:
            continue
        source = _source(model, op.inputs[1])
        array = model.arrays[source] if source else None
        span = value_range(array) if array is not None else None
        if span is None or span.source == QDQ_SOURCE:
            continue
        m = max(-span.min, span.max * 128 / 127, 0.0)
        centered = MinMax(-m, m * 127 / 128, CENTERED)
        if m > 0 and array.minmax != centered:
            array.minmax = centered
            changed = True
    return changed


def _source(model: Model, name: str) -> str | None:
    """The tensor whose range the operand `name` takes: back through single-input ops that only
    move values; None when a kernel fixes it."""
    while True:
        producer = model.producer(name)
        rule = rule_of(producer) if producer is not None else None
        if producer is None or producer.float_reason or rule is None or rule.output not in ("same", "fixed"):
            return name  # a free producer, or a float one (a QUANTIZE will take this range)
        if rule.output == "fixed" or len(rule.activation_inputs(producer)) != 1:
            return None
        name = producer.inputs[rule.activation_inputs(producer)[0]]
