"""What the quantize steps ask of IR arrays and ops: ranges, activation params, int8 eligibility,
and whether an op's params are representable by its kernel (require_representable).

The params of a quantized activation follow from its range and its type alone (int8: TOCO's
asymmetric chooser; int16: symmetric, zero point 0, as the 16x8 kernels want), so every step that
needs an array's params -- the producer choosing them, a consumer's bias scale, a QUANTIZE inserted
in front of a consumer -- computes the same numbers from the same range.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from ..errors import ConversionError
from ..ir import Array, MinMax, Model, Operator, QuantParams
from ..ops.registry import TFLITE_OPS, QuantRule
from ..ops.unary import ERF_MARK
from ..quantize.params import (
    MAX_MULTIPLIER,
    MAX_SCALE,
    MIN_SCALE,
    activation_scale_floor,
    choose_quantization_params,
    choose_symmetric_params,
    nudged_range,
)


FLOAT32 = np.dtype(np.float32)
INT8 = np.dtype(np.int8)
INT16 = np.dtype(np.int16)
# The activation type of each kind of quantized kernel (Operator.quantized).
ACTIVATION_TYPES = {"int8": INT8, "int16": INT16}
FLOAT32_MAX = float(np.finfo(np.float32).max)
# MinMax.source of a range the model's own QuantizeLinear/DequantizeLinear pair gave
# (qdq/importer.py): the model's params, which the steps keep where TFLite allows.
QDQ_SOURCE = "qdq"
# Ops the quantize steps insert; they are the boundary, not ops to quantize.
BOUNDARY_OPS = ("QUANTIZE", "DEQUANTIZE")


def rule_of(op: Operator) -> QuantRule | None:
    return TFLITE_OPS[op.type].quant


def value_range(array: Array) -> MinMax | None:
    """The calibrated range of an activation, or the data range of a constant.

    A constant holding NaN is a ConversionError (no int8 value stands for it). A constant's float
    sentinels (the lowest float that max-pool padding pads with, or Inf) do not count:
    in int8 they saturate to the end of the range, which is what they mean. A constant of nothing
    but sentinels has no range of its own."""
    if array.minmax is not None:
        return array.minmax
    if not array.is_constant or not array.data.size:
        return None
    data = array.data
    lo, hi = float(data.min()), float(data.max())
    if np.isnan(lo) or np.isnan(hi):
        raise ConversionError(f"constant {array.name!r} holds NaN; only finite values can be quantized")
    if data.dtype.kind == "f" and max(abs(lo), abs(hi)) >= FLOAT32_MAX:
        real = data[np.abs(data) < FLOAT32_MAX]
        if not real.size:
            return None
        lo, hi = float(real.min()), float(real.max())
    return MinMax(lo, hi, "the constant's values")


def params_for_range(minmax: MinMax, dtype: np.dtype = INT8) -> QuantParams:
    """Per-tensor params for a range: asymmetric int8 (TOCO's chooser) or symmetric int16, the
    scale at least MIN_SCALE (params.activation_scale_floor)."""
    if dtype == INT16:
        scale, zero_point = choose_symmetric_params(minmax.min, minmax.max)
    else:
        scale, zero_point = choose_quantization_params(minmax.min, minmax.max)
    scale = activation_scale_floor(scale)
    return QuantParams(np.array([scale], np.float32), np.array([zero_point], np.int64))


def fixed_params(rule: QuantRule, dtype: np.dtype = INT8) -> QuantParams:
    scale, zero_point = rule.fixed_params_int16 if dtype == INT16 else rule.fixed_params
    return QuantParams(np.array([scale], np.float32), np.array([zero_point], np.int64))


FIXED_BY_OP = "fixed by the op"  # the source of a fixed-output op's output range


def fixed_range(rule: QuantRule) -> MinMax:
    """The real range a fixed-output op's int8 params represent (SOFTMAX: [0, 255/256])."""
    lo, hi = nudged_range(*rule.fixed_params)
    return MinMax(lo, hi, FIXED_BY_OP)


def activation_params(array: Array, dtype: np.dtype = INT8) -> QuantParams | None:
    """The params of type `dtype` the array has, or will get when it is quantized to that type
    (from its range). An array quantized to the other type (a 16x8 op's int16 output read by an
    int8 op) gets the params a QUANTIZE to `dtype` converts it to."""
    if array.quant is not None and (array.dtype == INT16) == (dtype == INT16):
        return array.quant
    minmax = value_range(array)
    return None if minmax is None else params_for_range(minmax, dtype)


@dataclass(frozen=True)
class Int16Choice:
    """Which ops are to run their 16x8 kernel: every op that has one (--activations int16), and
    the ops of the source nodes listed (the precision planner's promotions), each with why."""

    whole_model: bool = False
    nodes: Mapping[str, str] = field(default_factory=dict)

    def wants(self, op: Operator) -> bool:
        return self.whole_model or op.source.removesuffix(ERF_MARK) in self.nodes

    def runs_int16(self, op: Operator) -> bool:
        """Whether the op will run int16, if it is quantized at all: it is wanted and has a kernel."""
        rule = rule_of(op)
        return rule is not None and rule.has_int16(op) and self.wants(op)


def op_activation_type(op: Operator) -> np.dtype:
    """The activation type of the op's quantized kernel (int8 for a float op)."""
    return ACTIVATION_TYPES.get(op.quantized, INT8)


def same_params(a: QuantParams | None, b: QuantParams | None) -> bool:
    """Exactly equal params (kernels compare scales with ==)."""
    return (a is not None and b is not None and a.axis == b.axis
            and np.array_equal(np.asarray(a.scale, np.float32), np.asarray(b.scale, np.float32))
            and np.array_equal(np.asarray(a.zero_point), np.asarray(b.zero_point)))


def value_outputs(op: Operator, model: Model) -> list[str]:
    """The op's outputs that carry its values (float32, or quantized already): an integer output
    beside them (TOPK_V2's int32 indices) is never quantized."""
    return [n for n in op.outputs if model.arrays[n].dtype == FLOAT32 or model.arrays[n].quant is not None]


def is_float_activation(array: Array) -> bool:
    return array.dtype == FLOAT32 and not array.is_constant


def handles_float(op: Operator, model: Model) -> bool:
    """Whether the op reads or writes a float32 activation (integer-only ops are not reported)."""
    return any(n and is_float_activation(model.arrays[n]) for n in op.inputs + op.outputs)


def int8_blocker(op: Operator, model: Model) -> str | None:
    """Why the op cannot run its int8 kernel here (None: it can)."""
    rule = rule_of(op)
    if rule is None:
        return f"TFLite has no int8 {op.type} kernel"
    arrays = model.arrays
    if any(arrays[n].is_variable for n in op.outputs):
        return "it writes the state tensor of an op that stays float (LSTM)"
    inputs = [op.inputs[i] for i in rule.activation_inputs(op)]
    # An input already int8 was float32 until its producer was quantized (earlier in op order).
    if not inputs or any(arrays[n].dtype != FLOAT32 and arrays[n].quant is None for n in inputs):
        return "its inputs are not float32"
    for name in inputs:
        array, span = arrays[name], value_range(arrays[name])
        if span is None and not array.is_constant:
            return f"tensor {name!r} has no calibrated range"
        zero_constant = array.is_constant and span in (None, MinMax(0.0, 0.0))
        if rule.input_scale_below is not None and not zero_constant:  # a 0 takes its sibling's params
            params = array.quant or params_for_range(span)
            if params is not None and params.scale[0] >= rule.input_scale_below:
                return (f"its int8 kernel needs input scales below {rule.input_scale_below:g}; "
                        f"{name!r} would have {float(params.scale[0]):g}")
    if rule.output == "free":
        for name in op.outputs:
            if arrays[name].minmax is None:
                return f"tensor {name!r} has no calibrated range"
    for index, what in ((rule.weight, "weights"), (rule.bias, "bias")):
        if index is None or index >= len(op.inputs) or not op.inputs[index]:
            continue
        array = arrays[op.inputs[index]]
        if not array.is_constant or array.dtype != FLOAT32:
            return f"its {what} {array.name!r} are not a float32 constant"
    return None


def about_to_run_int8(op: Operator, model: Model, int16: Int16Choice) -> bool:
    """Whether the op will run its int8 kernel, as far as the steps before quantize_activations
    can tell: nothing keeps it float, the int16 choice does not want it, and int8_blocker has no
    objection. The rewrites that rely on int8 saturation or on XNNPACK's int8 kernels ask this."""
    return not op.float_reason and not int16.wants(op) and int8_blocker(op, model) is None


def input_scale(op: Operator, model: Model) -> float:
    """The scale of the op's first activation input, in the op's activation type: S_in in a bias
    scale S_in * S_weight."""
    first = op.inputs[rule_of(op).activation_inputs(op)[0]]
    return float(activation_params(model.arrays[first], op_activation_type(op)).scale[0])


def follow_values(model: Model, name: str, follows: Callable[[Operator, str], bool]
                  ) -> tuple[list[Operator], str, Operator | None]:
    """Follows the values of `name` forward through ops that only move them: while the tensor
    has exactly one reader and follows(reader, tensor) accepts it, the walk goes on to the
    reader's output. Returns the ops passed, the last tensor reached, and the reader that was
    refused (None when the walk ended at a model output or at zero or several readers)."""
    chain: list[Operator] = []
    while name not in model.outputs:
        readers = model.consumers(name)
        if len(readers) != 1:
            return chain, name, None
        if len(readers[0].outputs) != 1 or not follows(readers[0], name):
            return chain, name, readers[0]
        chain.append(readers[0])
        name = readers[0].outputs[0]
    return chain, name, None


def float_tails(model: Model, int16: Int16Choice) -> dict[int, str]:
    """{id(op): reason} for each fixed-output op whose output reaches a model output, or an op
    a rule already keeps float, directly or through ops that only move values (a RESHAPE that
    flattens the probabilities), and for those ops: with float model outputs they stay float
    (transforms/quantize_activations.py says why)."""
    def moves_only(op: Operator, name: str) -> bool:
        rule = rule_of(op)
        return (rule is not None and rule.output == "same" and not op.float_reason
                and [op.inputs[i] for i in rule.activation_inputs(op)] == [name])

    tails: dict[int, str] = {}
    for op in model.operators:
        rule = rule_of(op)
        if (rule is None or rule.output != "fixed" or len(op.outputs) != 1 or op.float_reason
                or int16.runs_int16(op)):  # the 16x8 kernel's fixed step is 1/32768
            continue
        chain, end, refused = follow_values(model, op.outputs[0], moves_only)
        if end in model.outputs:
            where = "a model output"
        elif refused is not None and refused.float_reason:
            where = f"read by a float {refused.type}"
        else:
            continue
        reason = (f"its output is {where}: in float it keeps the precision that int8's fixed "
                  f"step of {rule.fixed_params[0]:g} would lose")
        tails[id(op)] = reason
        tails.update((id(o), f"it carries the float output of {op.type} to {where}") for o in chain)
    return tails


def sweep_until_stable(model: Model, visit: Callable[[Operator], list[str]]) -> bool:
    """Runs visit(op) over the operators in order, pass after pass, until a pass changes nothing;
    returns whether any visit changed something. visit returns the names of the arrays whose
    range it set and depends on nothing but the ranges of its op's arrays, so a later pass only
    revisits the ops next to an array that changed (in order, as a whole pass would meet them):
    the result of whole passes, at the cost of one pass plus the changes."""
    ops = model.operators
    position = {op: i for i, op in enumerate(ops)}
    due, later = list(range(len(ops))), set()
    changed = False
    while due:
        heapq.heapify(due)
        queued = set(due)
        while due:
            i = heapq.heappop(due)
            for name in visit(ops[i]):
                changed = True
                producer = model.producer(name)
                for neighbour in ([producer] if producer else []) + model.consumers(name):
                    j = position[neighbour]
                    if j > i and j not in queued:
                        heapq.heappush(due, j)  # still ahead in this pass
                        queued.add(j)
                    elif j <= i:
                        later.add(j)  # the next pass
        due, later = list(later), set()
    return changed


def set_loaded_ranges(model: Model, ranges: Mapping[str, tuple[float, float]], source: str) -> int:
    """Sets `ranges` ({array name: (min, max)}, from calibration or a model's QDQ pairs) on the
    float arrays of `model`, fresh from the loader, then spreads them across same-scale ops now,
    while every CONV_2D's NHWC output still sits next to its TRANSPOSE back to the ONNX tensor;
    returns how many arrays got one of `ranges`."""
    count = 0
    for name, (low, high) in ranges.items():
        array = model.arrays.get(name)
        if array is not None and array.dtype.kind == "f":
            array.minmax = MinMax(low, high, source)
            count += 1
    fill_across_same_scale_ops(model, concat_pieces=False)
    return count


def fill_across_same_scale_ops(model: Model, concat_pieces: bool = True) -> bool:
    """Gives arrays without a calibrated range the range across a same-scale op (step 1 of
    transforms/propagate_minmax.py), until none is left to fill; returns whether it filled any.
    Also run right after calibration, there without `concat_pieces`: a grouped conv's groups must
    wait until fuse_activation has moved a following RELU into them and the concatenation's
    output has become the RELU's."""
    return sweep_until_stable(model, lambda op: _fill_across(model, op, concat_pieces))


def _fill_across(model: Model, op: Operator, concat_pieces: bool) -> list[str]:
    rule = rule_of(op)
    if rule is None or rule.output != "same":
        return []
    inputs = [model.arrays[op.inputs[i]] for i in rule.activation_inputs(op)]
    outputs = [model.arrays[n] for n in value_outputs(op, model)]
    if not inputs or not outputs or any(a.dtype != FLOAT32 for a in inputs):
        return []
    if len(inputs) > 1:
        # A concat's piece (a grouped conv's group) lies within the output's range.
        if not concat_pieces or outputs[0].minmax is None:
            return []
        filled = [a for a in inputs if a.minmax is None and not a.is_constant]
        source = outputs[0].minmax
    else:
        # A model's own (QDQ) range first: it wins over a calibrated one across the op.
        known = sorted((a.minmax for a in [inputs[0], *outputs] if a.minmax is not None),
                       key=lambda m: m.source != QDQ_SOURCE)
        if not known:
            return []
        source = known[0]
        filled = [a for a in [inputs[0], *outputs] if not a.is_constant and (
            a.minmax is None or (source.source == QDQ_SOURCE and a.minmax.source != QDQ_SOURCE))]
    # A model's own (QDQ) range stays the model's: the steps keep those where TFLite allows.
    how = source.source if source.source == QDQ_SOURCE else "shared with a same-scale neighbour"
    for array in filled:
        array.minmax = MinMax(source.min, source.max, how)
    return [a.name for a in filled]


_FLOAT32_TINY = float(np.finfo(np.float32).tiny)  # the smallest normal float32


# ADD and SUB rescale their inputs to twice the larger input scale over 2^20 (TFLite's left
# shift; 2^15 for int16 activations); the output multiplier 2 * max(s1, s2) / (2^shift * s_out)
# must stay below 1: LiteRT's ADD aborts the process in its prepare from 2 on (measured,
# ai-edge-litert 2.3.0: an int8 input 2^20 times the output's scale; a 16x8 GRU's ADD whose
# inputs' scales were 2^14 times its output's).
_ADD_LEFT_SHIFT = {INT8: 20, INT16: 15}
_ADD_MAX_MULTIPLIER = 1.0


def _described(array: Array, scale: float, model: Model) -> str:
    """'x' scale 0.0039 (range [-0.5, 0.5] from calibration): a tensor as a message names it. A
    QUANTIZE's output has the range of the float tensor it quantizes."""
    minmax = array.minmax
    producer = model.producer(array.name)
    if minmax is None and producer is not None and producer.type == "QUANTIZE":
        minmax = model.arrays[producer.inputs[0]].minmax
    where = "" if minmax is None else f" (range [{minmax.min:.3g}, {minmax.max:.3g}] from {minmax.source})"
    return f"{array.name!r} scale {scale:.3g}{where}"


def nonfinite(values: np.ndarray) -> str | None:
    """"NaN" or "Inf" when the values hold one (no int8 or int32 value stands for it), else None.
    min and max propagate NaN and reach Inf, without a temporary the size of the weights."""
    if not values.size:
        return None
    lo, hi = values.min(), values.max()
    if np.isfinite(lo) and np.isfinite(hi):
        return None
    return "NaN" if np.isnan(lo) or np.isnan(hi) else "Inf"


def weight_scales(weights: Array) -> np.ndarray | None:
    """The weights' int8 scales, or before quantize_weights the largest they will get (symmetric,
    narrow range: the largest magnitude over 127); None for weights that are not a float constant."""
    if weights.quant is not None:
        return np.asarray(weights.quant.scale, np.float64)
    if not weights.is_constant or weights.data.dtype.kind != "f" or not weights.data.size:
        return None
    largest = max(-float(weights.data.min()), float(weights.data.max()))
    return np.array([largest / 127 if largest > 0 else 1.0])


def _multipliers(op: Operator, model: Model, scales: dict[str, float],
                 w: np.ndarray | None, dtype: np.dtype) -> list[tuple[str, np.ndarray]]:
    """The requantization multipliers the op's int8 kernel computes, in float32 like XNNPACK,
    each with how it is made (for the message); `w` the weights' scales (weight_scales)."""
    rule, arrays = rule_of(op), model.arrays
    names = op.inputs[:1] if op.type in BOUNDARY_OPS else [op.inputs[i] for i in rule.activation_inputs(op)]
    out = op.outputs[0]
    s_out = np.float32(scales[out])
    found = []
    if rule is not None and rule.weight is not None:
        weights = arrays[op.inputs[rule.weight]]
        if w is not None:
            product = np.float32(scales[names[0]]) * w.astype(np.float32)
            found.append((f"input {_described(arrays[names[0]], scales[names[0]], model)} x weights "
                          f"{weights.name!r} scale {float(w.max()):.3g} / output "
                          f"{_described(arrays[out], scales[out], model)}", product / s_out))
    elif op.type == "MUL" and len(names) == 2:
        a, b = names
        found.append((f"input {_described(arrays[a], scales[a], model)} x input "
                      f"{_described(arrays[b], scales[b], model)} / output "
                      f"{_described(arrays[out], scales[out], model)}",
                      np.float32(scales[a]) * np.float32(scales[b]) / s_out))
    elif op.type in ("ADD", "SUB") and len(names) == 2:
        big = max(names, key=lambda n: scales[n])
        shift = _ADD_LEFT_SHIFT[dtype]
        found.append((f"2 x input {_described(arrays[big], scales[big], model)} / (2^{shift} x "
                      f"output {_described(arrays[out], scales[out], model)})",
                      np.float32(2 * scales[big]) / (np.float32(2**shift) * s_out)))
    elif op.type == "QUANTIZE" and names and arrays[names[0]].quant is not None:
        found.append((f"input {_described(arrays[names[0]], scales[names[0]], model)} / output "
                      f"{_described(arrays[out], scales[out], model)}", np.float32(scales[names[0]]) / s_out))
    return found


def representable_problem(op: Operator, model: Model, dtype: np.dtype | None = None) -> str | None:
    """Why the quantized op's params are beyond what its kernel represents (None: they are not).
    Inputs not yet quantized count with the params they will get (activation_params), so
    quantize_biases can ask before it divides by a bias scale; `dtype` the activation type the op
    is about to get (default: the one it has, int8 for an op not yet quantized)."""
    rule, arrays = rule_of(op), model.arrays
    dtype = op_activation_type(op) if dtype is None else dtype
    if op.type in BOUNDARY_OPS:
        names = [n for n in op.inputs + op.outputs if arrays[n].quant is not None]
    else:
        names = [op.inputs[i] for i in rule.activation_inputs(op)]
        names += value_outputs(op, model) if rule.output != "none" else []
    scales = {}
    for name in names:
        params = arrays[name].quant if op.type in BOUNDARY_OPS else activation_params(arrays[name], dtype)
        if params is None:
            if arrays[name].is_constant and rule is not None and rule.output == "free":
                # (An op that selects values takes such a constant at its output's params, where
                # it saturates: PADV2's pad value, a masked Where's -inf.)
                return (f"constant {name!r} holds nothing but infinities or float32's extremes, which "
                        f"an int8 {op.type} cannot compute with")
            continue
        scale = scales[name] = float(params.scale[0])
        if not MIN_SCALE <= scale <= MAX_SCALE:  # NaN fails too
            return (f"tensor {_described(arrays[name], scale, model)} is outside [2^-60, 2^60], the scales "
                    "every int8 kernel represents; its values are too large to quantize")
    w = None  # the weights' scales, once: before quantize_weights each is a pass over the weights
    if rule is not None and rule.weight is not None:
        weights = arrays[op.inputs[rule.weight]]
        w = weight_scales(weights)
        if w is not None and not np.all((w >= _FLOAT32_TINY) & (w <= MAX_SCALE)):
            bad = float(w[~((w >= _FLOAT32_TINY) & (w <= MAX_SCALE))][0])
            return (f"weights {weights.name!r} need scale {bad:.3g}, beyond what an int8 kernel "
                    "represents (their values are too large or too small)")
    if not op.outputs or op.outputs[0] not in scales:
        return None
    limit = _ADD_MAX_MULTIPLIER if op.type in ("ADD", "SUB") else MAX_MULTIPLIER
    for how, value in _multipliers(op, model, scales, w, dtype):
        value = np.asarray(value, np.float64)
        if not np.all(np.isfinite(value) & (value < limit)):
            worst = float(np.nanmax(np.where(np.isfinite(value), value, np.inf)))
            return (f"its requantization multiplier {how} = {worst:.3g} is not below "
                    f"{limit:g}, the most its {'int16' if dtype == INT16 else 'int8'} kernel takes")
        if rule is not None and rule.weight is not None:
            product = value * scales[op.outputs[0]]
            if not np.all(product >= _FLOAT32_TINY):
                return (f"input scale x weight scale {float(product.min()):.3g} ({how}) is below the "
                        "smallest normal float32, which int8 kernels cannot compute with")
    return None


def require_representable(op: Operator, model: Model) -> None:
    """Raises a ConversionError naming the op, the tensor and its range when representable_problem
    finds one."""
    problem = representable_problem(op, model)
    if problem:
        raise ConversionError(
            f"cannot quantize {op.type} from ONNX node {op.source!r}: {problem}; check the "
            f"calibration data or --default-range, or keep the node float (--keep-float)")
