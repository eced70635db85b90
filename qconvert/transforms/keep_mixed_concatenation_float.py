"""keep_mixed_concatenation_float: a CONCATENATION of parts whose ranges differ widely, on its
way to a float model output, stays float, with the ops that carry its values there.

int8 gives a concatenation one scale for all its parts (the kernel copies raw int8 values), so
the widest part sets the step: a detector head that concatenates box coordinates (0..320) with
class scores (0..1) rounds every score to a multiple of 1.25, that is to zero. The output SQNR
hides it (the boxes hold the energy); only the scores' slice shows it. Concatenated in float, each
part keeps the params of the op that made it (the scores the 1/256 step of their LOGISTIC, or
float, see quantize_activations' float tails) and reaches the float output through a DEQUANTIZE
of its own. XNNPACK runs float CONCATENATION and DEQUANTIZE, so the island stays delegated.

Which concatenations: the widest part's range spans more than MIXED_RATIO times the narrowest's,
and the output reaches a float model output through ops that only move values (RESHAPE,
TRANSPOSE, further concatenations of the same kind): then nothing after it needs one int8 scale.
A concatenation whose output goes on into int8 ops is left to the same-scale rule (its readers
would requantize the parts to one scale anyway); the precision planner measures it.
"""

from __future__ import annotations

from ..ir import Model, Operator
from .quantization import fill_across_same_scale_ops, follow_values, rule_of, value_range

MIXED_RATIO = 16.0


def _spans(model: Model, op: Operator) -> list[float] | None:
    spans = []
    for i in rule_of(op).activation_inputs(op):
        span = value_range(model.arrays[op.inputs[i]])
        if span is None:
            return None
        spans.append(span.max - span.min)
    return spans


def _moves_values(op: Operator, name: str) -> bool:
    rule = rule_of(op)
    return rule is not None and rule.output == "same" and name in [
        op.inputs[i] for i in rule.activation_inputs(op)]


def keep_mixed_concatenation_float(model: Model, float_outputs: bool = True) -> bool:
    if not float_outputs:
        return False
    fill_across_same_scale_ops(model)  # the parts' ranges, through the RESHAPEs before them
    changed = False
    for op in model.operators:
        if op.type != "CONCATENATION" or op.float_reason or rule_of(op) is None:
            continue
        spans = _spans(model, op)
        if not spans or min(spans) <= 0 or max(spans) / min(spans) <= MIXED_RATIO:
            continue
        chain, end, _ = follow_values(model, op.outputs[0], _moves_values)
        if end not in model.outputs:
            continue
        op.float_reason = (f"its parts' ranges differ {max(spans) / min(spans):.0f}x: one int8 "
                           f"scale would round the narrow parts away on the way to a float output")
        for follower in chain:
            follower.float_reason = f"it carries a float CONCATENATION ({op.source}) to a model output"
        changed = True
    return changed
