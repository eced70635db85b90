"""keep_unrepresentable_float: an op about to run int8 whose params, as the model's own
QuantizeLinear/DequantizeLinear pairs give them, are beyond what its int8 kernel represents stays
float, with the reason.

Such params are the model's, not an accident of calibration: a QDQ model may give an ADD an
output scale more than 128 times finer than its inputs' (a residual sum that cancels), whose
requantization multiplier TFLite's kernel cannot take (MAX_MULTIPLIER). Float keeps the op exact
between a DEQUANTIZE and a QUANTIZE. Ranges from calibration or --default-range that break a
kernel stay an error (check_quantization): they come from the user's data and say it is wrong.
Runs after propagate_minmax (same-scale ops have their ranges), before quantize_activations.
"""

from __future__ import annotations

from ..ir import Model
from .quantization import QDQ_SOURCE, Int16Choice, about_to_run_int8, representable_problem, rule_of


def keep_unrepresentable_float(model: Model, int16: Int16Choice = Int16Choice()) -> bool:
    changed = False
    arrays = model.arrays
    for op in model.operators:
        rule = rule_of(op)
        if rule is None or int16.wants(op) or not about_to_run_int8(op, model, int16):
            continue
        names = [op.inputs[i] for i in rule.activation_inputs(op)] + list(op.outputs)
        if not any(arrays[n].minmax is not None and arrays[n].minmax.source == QDQ_SOURCE
                   for n in names):
            continue
        problem = representable_problem(op, model)
        if problem:
            op.float_reason = f"the params of the model's QDQ pairs are beyond its int8 kernel: {problem}"
            changed = True
    return changed
