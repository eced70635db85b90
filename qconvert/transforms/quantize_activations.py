"""quantize_activations: decides which ops run their int8 (or 16x8) kernel and gives their outputs
quantized params (TOCO's ChooseQuantizationParams step, per operator output).

An op runs in int8 when TFLite has an int8 kernel for it (OpDef.quant), its activation inputs
are float32 with a range, and its weights and bias are constants (int8_blocker). It runs its 16x8
kernel instead (int16 activations, symmetric with zero point 0) when `int16` wants it and TFLite
has one (QuantRule.int16); under --activations int16 an op without one stays float. Its outputs
then become int8 (int16) with params that follow the op's rule:
- free:  from the output's calibrated range, TOCO's chooser (range widened to contain 0, zero
         point from the side with the smaller error, nudged to an integer);
- same:  the input's params when it is the only quantized input (a RESHAPE, a MAX_POOL_2D),
         else from the union range propagate_minmax gave the output (a CONCATENATION);
- fixed: the params the kernel requires (SOFTMAX 1/256 and -128, TANH 1/128 and 0, ...).
Every other op that reads or writes float activations stays float, with the reason recorded on
the op for the report; insert_quantize_dequantize later puts DEQUANTIZE/QUANTIZE around it.

One deliberate exception: with float model outputs, a fixed-output op (SOFTMAX, LOGISTIC, ...) that
produces a model output (directly, or through a RESHAPE and the like) stays float. Its int8 kernel
would write steps of 1/256 whatever the values, so a classifier's small probabilities or a
detector's low scores would be rounded away just before the DEQUANTIZE that turns them back to
float; computed in float from the dequantized int8 input they keep their precision, at the cost of
one small float op.
"""

from __future__ import annotations

from ..ir import Model, Operator
from .quantization import (
    BOUNDARY_OPS,
    INT16,
    INT8,
    Int16Choice,
    activation_params,
    fixed_params,
    float_tails,
    handles_float,
    int8_blocker,
    params_for_range,
    rule_of,
    value_outputs,
)


def quantize_activations(model: Model, float_outputs: bool = True,
                         int16: Int16Choice = Int16Choice()) -> bool:
    """`int16`: the ops to run their 16x8 kernel. (The ops --keep-float and the planner keep
    float already have their float_reason: keep_requested_float.)"""
    changed = False
    tails = float_tails(model, int16) if float_outputs else {}
    for op in model.operators:
        if op.quantized or op.float_reason or op.type in BOUNDARY_OPS:
            continue
        reason = int8_blocker(op, model) or tails.get(id(op))
        rule = rule_of(op)
        if reason is None and int16.whole_model and not rule.has_int16(op):
            reason = f"TFLite has no 16x8 {op.type} kernel (int16 activations)"
        dtype = INT16 if int16.runs_int16(op) else INT8
        if reason is not None:
            if handles_float(op, model):
                op.float_reason = reason
                changed = True
            continue
        inputs = [model.arrays[op.inputs[i]] for i in rule.activation_inputs(op)]
        for name in value_outputs(op, model):
            array = model.arrays[name]
            if rule.output == "none":
                continue
            if rule.output == "fixed":
                array.quant = fixed_params(rule, dtype)
            elif rule.output == "same" and len(inputs) == 1:
                array.quant = activation_params(inputs[0], dtype)
            else:
                array.quant = params_for_range(array.minmax, dtype)
            array.dtype = dtype
        op.quantized = dtype.name
        if dtype == INT16:
            op.options.update(rule.int16_options)
        changed = True
    return changed
