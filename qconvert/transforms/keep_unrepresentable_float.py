"""keep_unrepresentable_float: an op about to run int8 whose values int8 cannot carry stays float,
with the reason (CANNOT_CARRY), so that --quantize converts every model a float conversion
converts.

What int8 cannot carry: an activation whose range needs a scale beyond [2^-60, 2^60] (an additive
attention mask at float32's minimum, -3.4e38, as every Hugging Face encoder computes it; a
calibration range of 1e30), params whose requantization multiplier the kernel cannot take (a QDQ
model's ADD whose output scale is far finer than its inputs'), weights or a bias holding NaN or
Inf, weights whose scale no kernel represents. Every op that touches such a tensor (its producer
and its readers, each checks its own activations) stays float between a DEQUANTIZE and a QUANTIZE:
float computes them as the float model does, and the int8 ops around them keep their params.
Where an int8 SOFTMAX reads the masked scores, saturate_masked_scores (before this step) has
given the mask and the masked scores ranges int8 holds, with the masked values saturating at the
bottom; what stays here is what it cannot carry (a MUL by float32's minimum, on the mask alone).

Runs after propagate_minmax (same-scale ops have their ranges), before quantize_activations.
check_quantization still holds every quantized op to its kernel; after this step a failure
there is a qconvert bug.
"""

from __future__ import annotations

from ..errors import ConversionError
from ..ir import Model, Operator
from .quantization import (
    QDQ_SOURCE,
    INT16,
    Int16Choice,
    int8_blocker,
    nonfinite,
    representable_problem,
    rule_of,
)

CANNOT_CARRY = "int8 cannot carry its values"  # the start of every reason this step gives


def _constant_problem(op: Operator, model: Model) -> str | None:
    """Weights or a bias that no int8 (int32) value stands for (a constant activation input's
    NaN is value_range's ConversionError, caught by _problem)."""
    rule = rule_of(op)
    for index, what in ((rule.weight, "weights"), (rule.bias, "bias")):
        if index is None or index >= len(op.inputs) or not op.inputs[index]:
            continue
        data = model.arrays[op.inputs[index]].data
        bad = None if data is None else nonfinite(data)
        if bad:
            return f"its {what} {op.inputs[index]!r} hold {bad}"
    return None


def _problem(op: Operator, model: Model, int16: Int16Choice) -> str | None:
    """Why int8 (int16, for an op about to run 16x8) cannot carry the op's values (None: it
    can, or the op stays float anyway)."""
    try:
        if int16.runs_int16(op):
            return _constant_problem(op, model) or representable_problem(op, model, INT16)
        if int8_blocker(op, model) is not None:
            return None
        return _constant_problem(op, model) or representable_problem(op, model)
    except ConversionError as e:  # a range that cannot even be computed (value_range: NaN)
        return str(e)


def keep_unrepresentable_float(model: Model, int16: Int16Choice = Int16Choice()) -> bool:
    changed = False
    arrays = model.arrays
    for op in model.operators:
        rule = rule_of(op)
        if rule is None or op.float_reason:
            continue
        problem = _problem(op, model, int16)
        if problem:
            names = [op.inputs[i] for i in rule.activation_inputs(op)] + list(op.outputs)
            qdq = any(arrays[n].minmax is not None and arrays[n].minmax.source == QDQ_SOURCE for n in names)
            where = " with the params of the model's QDQ pairs" if qdq else ""
            op.float_reason = f"{CANNOT_CARRY}{where}: {problem}"
            changed = True
    return changed
