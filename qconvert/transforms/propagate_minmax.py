"""propagate_minmax: gives every float activation a range and makes the ranges obey the int8
kernels' same-scale and fixed-output rules (TOCO's HardcodeMinMax, plus concat unification).

1. An array without a calibrated range (one the float steps created, or a CONV_2D's NHWC output
   that only its TRANSPOSE back to NCHW had in ONNX) takes the range of the array on the other
   side of a single-input same-scale op (RESHAPE, TRANSPOSE, PAD, ...): those ops move values
   without changing them. A piece of a concatenation (a grouped conv's group) takes the
   concatenation's output range, which contains it.
2. With --default-range (TOCO's dummy quantization), arrays still without one get that range.
3. A same-scale op's output range becomes the union of its quantized inputs' ranges: its int8
   kernel copies or compares raw int8 values, so inputs and output must share one set of params.
   For a multi-input op (CONCATENATION, MAXIMUM) the union is pushed back to every input whose
   producer chooses its output range freely, so those inputs need no requantize; an input whose
   producer's params are tied (a fixed-output LOGISTIC, another same-scale op) is requantized
   later by insert_quantize_dequantize. A multi-input op whose output range is the model's own
   (a QDQ pair's, QDQ_SOURCE) keeps it, and so do its inputs with their own: TFLite's kernel
   takes the model's params, and inputs at other params are requantized to them.
4. A fixed-output op's output (SOFTMAX, LOGISTIC, TANH, ...) gets the range its int8 params
   represent; not one to run its 16x8 kernel, whose output keeps its calibrated range for int8
   readers to requantize to.
Step 1, and steps 3 and 4, each repeat until nothing changes; each repeat visits only the ops next
to a range that changed (quantize.arrays.sweep_until_stable).
"""

from __future__ import annotations

import logging

from ..ir import MinMax, Model, Operator
from .quantization import (
    BOUNDARY_OPS,
    FLOAT32,
    QDQ_SOURCE,
    Int16Choice,
    fill_across_same_scale_ops,
    fixed_range,
    is_float_activation,
    rule_of,
    sweep_until_stable,
    value_outputs,
    value_range,
)

log = logging.getLogger("qconvert")


def _set(array, minmax: MinMax) -> bool:
    if array.minmax == minmax:
        return False
    array.minmax = minmax
    return True


def _apply_default_range(model: Model, default_range: tuple[float, float]) -> bool:
    missing = [a for a in model.arrays.values() if is_float_activation(a) and a.minmax is None]
    for array in missing:
        array.minmax = MinMax(*default_range, "--default-range")
    if missing:
        log.warning("--default-range: %d tensor%s without a calibrated range use [%g, %g]; the "
                    "int8 model's accuracy is meaningless", len(missing),
                    "" if len(missing) == 1 else "s", *default_range)
    return bool(missing)


def _unify(model: Model, op: Operator, int16: Int16Choice) -> list[str]:
    """Steps 3 and 4 for one op; the names of the arrays whose range it changed."""
    rule = rule_of(op)
    if op.type in BOUNDARY_OPS or rule is None or op.float_reason:  # float: no shared scale
        return []
    outputs = [model.arrays[n] for n in value_outputs(op, model)]
    if rule.output == "fixed":
        if int16.runs_int16(op):
            return []
        return [a.name for a in outputs if a.dtype == FLOAT32 and _set(a, fixed_range(rule))]
    if rule.output != "same":
        return []
    inputs = [model.arrays[op.inputs[i]] for i in rule.activation_inputs(op)]
    ranges = [value_range(a) for a in inputs]
    if not inputs or any(a.dtype != FLOAT32 for a in inputs):
        return []
    # A constant without a range of its own (PADV2's lowest-float pad value) joins whatever
    # range the others give; an activation without one leaves the op to stay float.
    if any(r is None and not a.is_constant for a, r in zip(inputs, ranges)):
        return []
    ranges = [r for r in ranges if r is not None]
    if not ranges:
        return []
    declared = outputs[0].minmax if len(inputs) > 1 else None
    if declared is not None and declared.source == QDQ_SOURCE:
        union = declared  # the model's own params for the output: inputs requantize to them
    else:
        union = MinMax(min(r.min for r in ranges), max(r.max for r in ranges),
                       "union of a same-scale op's inputs")
    changed = [a.name for a in outputs if _set(a, union)]
    if len(inputs) == 1:
        return changed
    for array in inputs:
        producer = model.producer(array.name)
        producer_rule = rule_of(producer) if producer is not None else None
        own = array.minmax is not None and array.minmax.source == QDQ_SOURCE
        if producer_rule is not None and producer_rule.output == "free" and not own and _set(array, union):
            changed.append(array.name)
    return changed


def propagate_minmax(model: Model, default_range: tuple[float, float] | None = None,
                     int16: Int16Choice = Int16Choice()) -> bool:
    changed = fill_across_same_scale_ops(model)
    if default_range is not None:
        changed |= _apply_default_range(model, default_range)
    changed |= sweep_until_stable(model, lambda op: _unify(model, op, int16))
    return changed
