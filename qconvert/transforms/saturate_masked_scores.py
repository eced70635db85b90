"""saturate_masked_scores: the scores an attention mask pushed down (an int8 SOFTMAX's inputs that
its rows held far below their maximum) saturate at the bottom of their int8 range, set where the
SOFTMAX can no longer tell them from -inf; the ops between the mask and the SOFTMAX get ranges
that carry the saturation, so that every one of them runs int8.

Why: the masked values decide the SOFTMAX's input range, and no int8 range holds them and the
scores at once. A mask at float32's minimum or -1e9 (dynamo's exports, Hugging Face's finfo.min)
needs a scale beyond what int8 kernels take: the mask's ADD and the SOFTMAX stayed float
(keep_unrepresentable_float). One at -1e4 gets a scale of 40: the scores round away. A mask at
-inf (TorchScript's Where(mask, 0, -inf)) is left out of the calibrated range, so the masked
values saturate at the lowest unmasked score: in a causal attention's first row the one key it
may attend to can score that low, and the masked keys then weigh as much as it.

What: calibration measures the floor of each SOFTMAX input whose rows held masked values
(quantize/calibration_methods.py, softmax_floor): its lowest unmasked value less ln(512 n), n
the row's length. The input's range becomes [floor, max], the unmasked values' range widened
down by that margin: a masked value saturates at the floor, ln(512 n) below every row's maximum
(an unmasked value), at a probability below 1/(512 n), and all of a row's together move its
output less than half of the int8 SOFTMAX's 1/256 step. (A floor under each row's own maximum,
tighter, fails where a row's maximum lies lower than calibration saw: a causal attention's first
row holds one score.) Then the floor goes back to the tensors the input is made of: a tensor's
floor f says that no reader tells its values below f apart.
- An op that selects values (RESHAPE, TRANSPOSE, SELECT_V2, CONCATENATION, MAXIMUM, ...) gives
  its activation inputs its output's floor.
- ADD gives each operand f - max(other): an operand below that makes a sum below f whatever the
  other one is. The mask operand {0, -big} gets the range [f - max(scores), 0]: -big saturates,
  0 stays exact, and ADD's rescaling of both inputs to twice the larger input scale keeps the
  scores' steps.
- MUL by a positive constant c gives f / c.
A tensor has a floor when every reader gives it one (the least); its range becomes [f, max]
where its calibrated minimum lies below f, or where it holds values its calibrated range left
out (a constant's -inf or float32 minimum, or such a constant selected into it; a SOFTMAX input
whose calibrated floor lies below its calibrated minimum held -inf).

Not for SOFTMAX ops that stay float, run their 16x8 kernel, or write a float model output
(float_tails), nor for softmax inputs whose rows never held a masked value: calibration gives
those no floor, and their ranges stay as calibrated. Runs before propagate_minmax, which makes
the same-scale ops' ranges agree from the ranges set here.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ..ir import MinMax, Model, Operator
from .quantization import FLOAT32_MAX, Int16Choice, about_to_run_int8, float_tails, rule_of, value_range

SATURATED = "saturating below a masked softmax's floor"  # the source of the ranges set here
# Ops whose every output value is one of their inputs' values (or the larger or smaller of two):
# a value below the floor gives an output below it, or none.
_SELECTING = frozenset({"RESHAPE", "TRANSPOSE", "BROADCAST_TO", "CONCATENATION", "DEPTH_TO_SPACE",
                        "SPACE_TO_DEPTH", "GATHER", "GATHER_ND", "MAXIMUM", "MINIMUM", "MAX_POOL_2D",
                        "MIRROR_PAD", "PAD", "PADV2", "REDUCE_MAX", "REDUCE_MIN",
                        "RESIZE_NEAREST_NEIGHBOR", "REVERSE_V2", "SELECT_V2", "SLICE",
                        "STRIDED_SLICE", "TILE"})


def _starts(model: Model, float_outputs: bool, int16: Int16Choice) -> dict[int, float]:
    """{id(op): floor} of the SOFTMAX ops about to run int8 whose input has a softmax_floor."""
    tails = float_tails(model, int16) if float_outputs else {}
    starts = {}
    for op in model.operators:
        if op.type != "SOFTMAX" or id(op) in tails or not about_to_run_int8(op, model, int16):
            continue
        minmax = model.arrays[op.inputs[0]].minmax
        if minmax is not None and minmax.softmax_floor is not None:
            starts[id(op)] = minmax.softmax_floor
    return starts


def _holds_sentinels(model: Model, name: str) -> bool:
    """Whether the tensor holds values its range leaves out: a constant's -inf or float32 extremes
    (value_range skips them), or such a constant selected into it."""
    data = model.constant(name)
    if data is not None:
        return data.dtype.kind == "f" and bool(np.any(~(np.abs(data) < FLOAT32_MAX)))
    producer = model.producer(name)
    rule = rule_of(producer) if producer is not None else None
    return (producer is not None and producer.type in _SELECTING and rule is not None
            and any(_holds_sentinels(model, producer.inputs[i]) for i in rule.activation_inputs(producer)))


def _given(model: Model, op: Operator, floor: float, below: bool) -> Iterator[tuple[str, float, bool]]:
    """(input, floor, whether it holds values below its range) for each input of `op` that
    `op`'s output floor gives a floor to."""
    rule = rule_of(op)
    if rule is None or op.float_reason or len(op.outputs) != 1:
        return
    inputs = [op.inputs[i] for i in rule.activation_inputs(op)]
    if op.type in _SELECTING:
        yield from ((name, floor, below) for name in inputs)
    elif op.type == "ADD" and len(inputs) == 2:
        ranges = [value_range(model.arrays[n]) for n in inputs]
        if None in ranges:
            return
        held = [_holds_sentinels(model, n) for n in inputs]
        for k, name in enumerate(inputs):
            # The output held values below its range: they came from the operand holding
            # sentinels, or from either when neither is known to.
            yield name, floor - ranges[1 - k].max, held[k] or (below and not any(held))
    elif op.type == "MUL" and len(inputs) == 2:
        constants = [model.constant(n) for n in inputs]
        for k in (0, 1):
            c = constants[1 - k]
            if constants[k] is None and c is not None and c.size and np.all(c > 0) and np.all(c < FLOAT32_MAX):
                yield inputs[k], floor / float(c.min() if floor < 0 else c.max()), below


def _floors(model: Model, starts: dict[int, float]) -> dict[str, tuple[float, bool]]:
    """{tensor: (floor, below)} for every tensor whose every reader gives it a floor, walking the
    ops backwards (each tensor's readers come after its producer)."""
    given: dict[str, list[tuple[float, bool]]] = {}
    floors: dict[str, tuple[float, bool]] = {}

    def floor_of(name: str) -> tuple[float, bool] | None:
        demands = given.get(name, [])
        if not demands or name in model.outputs or len(demands) != len(model.consumers(name)):
            return None
        return min(f for f, _ in demands), any(b for _, b in demands)

    for op in reversed(model.operators):
        if id(op) in starts:
            x = op.inputs[0]
            minmax = model.arrays[x].minmax
            given.setdefault(x, []).append((starts[id(op)], starts[id(op)] < minmax.min))
            continue
        found = floor_of(op.outputs[0]) if len(op.outputs) == 1 else None
        if found is None:
            continue
        floors[op.outputs[0]] = found
        for name, floor, below in _given(model, op, *found):
            given.setdefault(name, []).append((floor, below))
    for name in given:  # tensors no op produces: constants and graph inputs
        if model.producer(name) is None and floor_of(name) is not None:
            floors[name] = floor_of(name)
    return floors


def _saturate(model: Model, name: str, floor: float, below: bool) -> bool:
    """Gives the tensor the range [floor, max] where values below the floor are in it."""
    array = model.arrays[name]
    span = value_range(array)
    if array.is_constant:
        data = array.data
        if data.dtype.kind != "f" or not np.any(~(data >= floor)):
            return False
        top = floor if span is None else max(span.max, floor)
    else:
        if span is None or array.dtype.kind != "f" or not (span.min < floor or below):
            return False
        top = max(span.max, floor)
    new = MinMax(floor, top, SATURATED)
    if array.minmax == new:
        return False
    array.minmax = new
    return True


def saturate_masked_scores(model: Model, float_outputs: bool = True,
                           int16: Int16Choice = Int16Choice()) -> bool:
    starts = _starts(model, float_outputs, int16)
    if not starts:
        return False
    changed = False
    for name, (floor, below) in _floors(model, starts).items():
        changed |= _saturate(model, name, floor, below)
    return changed
