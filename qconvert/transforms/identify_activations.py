"""identify_activations: a chain of elementwise ops on one tensor that computes a known activation,
whatever ops and order an exporter wrote it with, becomes that activation's op(s):

    HARD_SWISH  x * relu6(x + 3) / 6     (Clip, Relu6, Min/Max, HardSigmoid * x, / 6 or * 1/6, ...)
    LOGISTIC    1 / (1 + exp(-x))        (Reciprocal, Div, exp(x * -1), ...)
    SiLU        x / (1 + exp(-x))        -> LOGISTIC then MUL (TFLite has no SiLU builtin)
    TANH        (exp(2x) - 1) / (exp(2x) + 1), 2 * sigmoid(2x) - 1, ...

The chain is found by evaluation, not by its ops' shape: from each op backwards, the ops that
write the region's pending inputs are added latest first (elementwise ops whose other inputs are
scalar constants, at most MAX_OPS); whenever everything the region reads is one tensor x, the
region is evaluated on sample points (each op's own numpy evaluation, fused activations included)
and compared with each activation (where the written-out form overflows, far out, the kernel
gives the limit instead). The first match (the smallest region ending at the op)
replaces the op; the region's other ops go when nothing else reads them.

Why: the identified op has a TFLite kernel with a fixed or saturating int8 range (LOGISTIC's
output [0, 1] at 1/256, HARD_SWISH's decomposition, quantize steps), where the written-out chain
quantizes each intermediate on its own calibrated range (an exp(-x) reaching e^20, a reciprocal
near 0); in float it is one op for several. Gelu's forms are identify_gelu's (they need the
Erf importer's group).
"""

from __future__ import annotations

import numpy as np

from ..ir import Model, Operator
from ..ops.activations import apply_fused_activation
from ..ops.registry import TFLITE_OPS
from ..ops.unary import ERF_MARK

MAX_OPS = 10
CENTRAL = 12.0  # the samples where the region must be finite
SAMPLES = np.concatenate([np.linspace(-12.0, 12.0, 481), [-300.0, -60.0, 60.0, 300.0]]).astype(np.float32)


def _sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # no overflow for large |x|


# name -> (reference on float64 samples, the op types the replacement is made of)
ACTIVATIONS = {
    "HARD_SWISH": (lambda x: x * np.clip(x + 3.0, 0.0, 6.0) / 6.0, ("HARD_SWISH",)),
    "LOGISTIC": (_sigmoid, ("LOGISTIC",)),
    "SILU": (lambda x: x * _sigmoid(x), ("LOGISTIC", "MUL")),
    "TANH": (np.tanh, ("TANH",)),
}


def identify_activations(model: Model) -> bool:
    changed = False
    position = {id(op): k for k, op in enumerate(model.operators)}
    for op in model.operators:
        if not model.has_operator(op) or not _elementwise(op, model):
            continue
        found = _region(model, op, position)
        if found is None:
            continue
        x, name = found
        for new in _replace(model, op, x, name):
            position[id(new)] = position[id(op)]
        changed = True
    return changed


def _elementwise(op: Operator, model: Model) -> bool:
    """An elementwise op of one float output whose constant inputs are scalars, not part of the
    Erf importer's composition (an erf is identify_gelu's, and none of these activations)."""
    if ERF_MARK in op.source:
        return False
    spec = TFLITE_OPS.get(op.type)
    if spec is None or spec.layout != "elementwise" or spec.evaluate is None or len(op.outputs) != 1:
        return False
    if model.arrays[op.outputs[0]].dtype != np.float32:
        return False
    return all(model.constant(n) is None or model.constant(n).size == 1 for n in op.inputs if n)


def _region(model: Model, end: Operator, position: dict[int, int]) -> tuple[str, str] | None:
    """(x, activation) for the smallest region ending at `end` that computes an activation of
    its one input x, else None."""
    region = [end]
    shape = model.arrays[end.outputs[0]].shape
    while len(region) <= MAX_OPS:
        pending = _pending(model, region)
        if len(pending) == 1 and len(region) >= 2 and not _polynomial(region):
            x = pending[0]
            if model.arrays[x].shape == shape and model.arrays[x].dtype == np.float32:
                name = _matching(model, region, x, end.outputs[0], position)
                if name is not None and sorted(op.type for op in region) != sorted(ACTIVATIONS[name][1]):
                    return x, name
        # Grow by the writer of the latest pending input: the others may be x itself.
        producers = [p for p in (model.producer(n) for n in pending) if p is not None]
        latest = max(producers, key=lambda p: position[id(p)], default=None)
        if latest is None or not _elementwise(latest, model):
            return None
        region.append(latest)
    return None


# Ops that keep a region a polynomial of x: no activation is one, so such a region is not evaluated
# (a transformer's scalings and norms are most of its elementwise ops).
_POLYNOMIAL = {"ADD", "SUB", "MUL", "NEG", "SQUARE"}


def _polynomial(region: list[Operator]) -> bool:
    return all(op.type in _POLYNOMIAL and op.fused_activation == "NONE" for op in region)


def _pending(model: Model, region: list[Operator]) -> list[str]:
    """The non-constant tensors the region reads and does not write, in a fixed order."""
    written = {o for op in region for o in op.outputs}
    pending: list[str] = []
    for op in region:
        for name in op.inputs:
            if name and name not in written and model.constant(name) is None and name not in pending:
                pending.append(name)
    return pending


def _matching(model: Model, region: list[Operator], x: str, output: str,
              position: dict[int, int]) -> str | None:
    """The activation the region computes from x (evaluated in execution order), else None."""
    values = {x: SAMPLES}
    with np.errstate(all="ignore"):
        for op in sorted(region, key=lambda op: position[id(op)]):
            inputs = [values[n] if n in values else model.constant(n) for n in op.inputs]
            result = TFLITE_OPS[op.type].evaluate(inputs, op)[0]
            values[op.outputs[0]] = apply_fused_activation(np.asarray(result, np.float32), op.fused_activation)
        got = np.asarray(values[output], np.float64).reshape(-1)
    if got.shape != SAMPLES.shape:
        return None
    # Where the written-out form overflows (exp(2x) / exp(2x) at x = 300 is NaN), the activation's
    # kernel gives its limit: only the finite points are compared, on the whole central range.
    finite = np.isfinite(got)
    if not finite[np.abs(SAMPLES) <= CENTRAL].all():
        return None
    wide = SAMPLES.astype(np.float64)[finite]
    for name, (reference, _) in ACTIVATIONS.items():
        want = reference(wide)
        if np.all(np.abs(got[finite] - want) <= 1e-5 + 1e-4 * np.abs(want)):
            return name
    return None


def _replace(model: Model, end: Operator, x: str, name: str) -> list[Operator]:
    """The activation's op(s) in place of `end`, writing its output; returns them."""
    y = end.outputs[0]
    if name == "SILU":
        gate = model.add_array_like(y + "_sigmoid", model.arrays[y].shape, y)
        sigmoid = model.insert_before(end, Operator("LOGISTIC", [x], [gate], source=end.source))
        return [sigmoid, model.replace_operator(end, Operator("MUL", [x, gate], [y], source=end.source))]
    return [model.replace_operator(end, Operator(name, [x], [y], source=end.source))]
