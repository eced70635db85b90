"""keep_normalization_statistics_float: the variance of a normalization written out in ops
(LayerNorm, GroupNorm, InstanceNorm, RMSNorm), and the epsilon and square root after it, stay float.

The pattern: a SQRT or RSQRT (or POW by +-0.5) whose input is, after ADD or MAXIMUM by constants
(the epsilon), a variance:
- mean(x^2) - mean(x)^2: SUB(MEAN(MUL(x, x)), MUL(m, m)) with m = MEAN(x), as JAX/TF exporters
  and hand-written models emit it. In int8 the two means are nearly equal values of a wide range;
  their difference is a few steps of that range or less, often exactly zero: the normalized output
  is garbage. All five ops stay float.
- mean(d^2) (d = x - mean, or x itself for RMSNorm): MEAN(MUL(d, d)), also SQUARED_DIFFERENCE.
  In int8 the squares take one scale for the whole tensor, set by its largest deviation: a row
  whose spread is small rounds to a variance of 0, the epsilon alone reaches the square root,
  and the row is multiplied by up to 1/sqrt(eps). The square and the mean stay float.
The SQRT/RSQRT and the ADDs between then read float too: a divisor that int8 rounds to zero never
reaches the kernel. The centred values (x - mean) and everything after the division stay int8;
the statistics are per row, a small part of the work, and XNNPACK runs them in float.
"""

from __future__ import annotations

from ..ir import Model, Operator
from .quantization import rule_of

ROOTS = ("SQRT", "RSQRT", "POW")
SHIFTS = ("ADD", "MAXIMUM")  # by a constant: the epsilon


def _is_square(op: Operator | None) -> str | None:
    """The tensor squared when `op` squares one (MUL(a, a), SQUARED_DIFFERENCE(a, m) counts as a
    square of its first input), else None."""
    if op is None:
        return None
    if op.type == "MUL" and len(op.inputs) == 2 and op.inputs[0] == op.inputs[1]:
        return op.inputs[0]
    if op.type == "SQUARED_DIFFERENCE":
        return op.inputs[0]
    return None


def _root(model: Model, op: Operator) -> bool:
    if op.type != "POW":
        return op.type in ROOTS
    exponent = model.constant(op.inputs[1])
    return exponent is not None and exponent.size == 1 and abs(float(exponent.reshape(()))) == 0.5


def _constant_shift(model: Model, op: Operator | None) -> bool:
    return (op is not None and op.type in SHIFTS and len(op.inputs) == 2
            and model.constant(op.inputs[1]) is not None)


def _mean_of(model: Model, name: str) -> tuple[Operator, str] | None:
    """(the MEAN, its input) when `name` is a MEAN's output."""
    op = model.producer(name)
    return (op, op.inputs[0]) if op is not None and op.type == "MEAN" else None


def _variance(model: Model, name: str) -> tuple[list[Operator], str] | None:
    """The ops computing the variance `name` and which form it has; None when it is not one."""
    producer = model.producer(name)
    mean = _mean_of(model, name)
    if mean is not None:
        square = model.producer(mean[1])
        if _is_square(square) is not None:
            return [square, mean[0]], "mean((x - mean)^2)"
        return None
    if producer is None or producer.type != "SUB":
        return None
    outer, square_of_mean = _mean_of(model, producer.inputs[0]), model.producer(producer.inputs[1])
    if outer is None or square_of_mean is None:
        return None
    x, m = _is_square(model.producer(outer[1])), _is_square(square_of_mean)
    inner = _mean_of(model, m) if m is not None else None
    if x is None or inner is None or inner[1] != x:
        return None
    ops = [model.producer(outer[1]), outer[0], inner[0], square_of_mean, producer]
    return ops, "mean(x^2) - mean(x)^2"


def keep_normalization_statistics_float(model: Model) -> bool:
    changed = False
    for op in model.operators:
        if not _root(model, op):
            continue
        shifts, name = [], op.inputs[0]
        while _constant_shift(model, model.producer(name)):
            shifts.append(model.producer(name))
            name = shifts[-1].inputs[0]
        found = _variance(model, name)
        if found is None:
            continue
        ops, form = found
        if form == "mean(x^2) - mean(x)^2":
            reason = ("variance as mean(x^2) - mean(x)^2: int8 would subtract two nearly equal "
                      "values of a wide range")
        else:
            reason = ("normalization variance: int8 squares round a row's small spread to 0 "
                      "before the square root")
        for member in ops + shifts + [op]:
            if not member.float_reason and rule_of(member) is not None:
                member.float_reason = reason
                changed = True
    return changed

