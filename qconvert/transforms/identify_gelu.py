"""identify_gelu: the Gelu patterns exporters write become one GELU op.

Exact (PyTorch's F.gelu, BERT, HF transformers), in any operand order and with the 0.5 applied to
x, to the (1 + erf) factor or to the product:
    x * 0.5 * (1 + erf(x / 1.4142...))   or   ... erf(x * 0.7071...) ...
gives GELU(x, approximate=False). The tanh form
    x * 0.5 * (1 + tanh(0.7978... * (x + 0.044715 * x^3)))      (x^3 as x*(x*x), (x*x)*x or x**3)
gives GELU(x, approximate=True). Erf has no TFLite builtin: the Erf importer emits a group of ops
tagged with unary.ERF_MARK, recognised here and checked numerically. The last op of the pattern
becomes the GELU; the rest is left for remove_unused (kept if something else still reads it).
"""

from __future__ import annotations

import math

import numpy as np

from ..ir import Model, Operator
from ..ops.activations import apply_fused_activation
from ..ops.registry import TFLITE_OPS
from ..ops.unary import ERF_MARK, erf_reference

_SQRT2 = math.sqrt(2.0)
_TANH_SCALE = math.sqrt(2.0 / math.pi)
_CUBIC = 0.044715
_SAMPLES = np.linspace(-5.0, 5.0, 41, dtype=np.float32)


def _scalar(model: Model, name: str) -> float | None:
    value = model.constant(name)
    if value is None or value.size != 1 or value.dtype != np.float32:
        return None
    return float(value.reshape(()))


def _close(value: float | None, target: float, tol: float = 1e-4) -> bool:
    return value is not None and abs(value - target) <= tol * abs(target)


def _binary(op: Operator | None, types: tuple[str, ...], model: Model):
    """(activation input, scalar constant) of a binary op of one of `types` without a fused
    activation; (None, None) otherwise."""
    if op is None or op.type not in types or op.fused_activation != "NONE" or len(op.inputs) != 2:
        return None, None
    for side in (0, 1) if op.type in ("MUL", "ADD") else (0,):
        c = _scalar(model, op.inputs[1 - side])
        if c is not None and model.constant(op.inputs[side]) is None:
            return op.inputs[side], c
    return None, None


def erf_group(model: Model, output: str) -> str | None:
    """The input z when `output` is erf(z) computed by an Erf importer's tagged ops, else None."""
    last = model.producer(output)
    if last is None or not last.source.endswith(ERF_MARK):
        return None
    group, pending, external = set(), [last], set()
    while pending:
        op = pending.pop()
        if op in group:
            continue
        if op.source != last.source or TFLITE_OPS[op.type].layout != "elementwise":
            return None
        group.add(op)
        for name in op.inputs:
            producer = model.producer(name)
            if producer is not None and producer.source == last.source:
                pending.append(producer)
            elif name and model.constant(name) is None:
                external.add(name)
    if len(external) != 1:
        return None
    z = external.pop()
    if model.arrays[z].shape != model.arrays[output].shape:
        return None
    return z if _computes_erf(model, group, z, output) else None


def _computes_erf(model: Model, group: set[Operator], z: str, output: str) -> bool:
    """Evaluates the group's ops on sample points, each after the ops it reads from; True if
    they give erf."""
    values = {z: _SAMPLES}

    def value(name: str) -> np.ndarray:
        op = model.producer(name)
        if name not in values and op in group:
            inputs = [value(n) for n in op.inputs]
            results = TFLITE_OPS[op.type].evaluate(inputs, op)
            for out, result in zip(op.outputs, results):
                values[out] = apply_fused_activation(np.asarray(result), op.fused_activation)
        return values[name] if name in values else model.constant(name)

    got = value(output).reshape(-1)
    return got.shape == _SAMPLES.shape and np.allclose(got, erf_reference(_SAMPLES), atol=1e-5)


def _erf_source(model: Model, e: str) -> str | None:
    """x when e = erf(x / sqrt 2) (or erf(x * 0.7071))."""
    z = erf_group(model, e)
    scaled = model.producer(z) if z else None
    x, c = _binary(scaled, ("DIV", "MUL"), model)
    if x is None or not _close(c, _SQRT2 if scaled.type == "DIV" else 1 / _SQRT2):
        return None
    return x


def _is_cube(model: Model, name: str, x: str) -> bool:
    """name = x*(x*x), (x*x)*x or POW(x, 3)."""
    op = model.producer(name)
    if op is None or op.fused_activation != "NONE":
        return False
    if op.type == "POW":
        return op.inputs[0] == x and _close(_scalar(model, op.inputs[1]), 3.0, 1e-6)
    if op.type != "MUL" or x not in op.inputs:
        return False
    other = op.inputs[1] if op.inputs[0] == x else op.inputs[0]
    square = model.producer(other)
    return (square is not None and square.type == "MUL" and square.fused_activation == "NONE"
            and square.inputs == [x, x])


def _tanh_source(model: Model, e: str) -> str | None:
    """x when e = tanh(0.7978 * (x + 0.044715 * x^3))."""
    tanh = model.producer(e)
    if tanh is None or tanh.type != "TANH":
        return None
    inner, c = _binary(model.producer(tanh.inputs[0]), ("MUL",), model)
    add = model.producer(inner) if inner and _close(c, _TANH_SCALE) else None
    if add is None or add.type != "ADD" or add.fused_activation != "NONE":
        return None
    for x, cubic in (add.inputs, add.inputs[::-1]):
        cube, k = _binary(model.producer(cubic), ("MUL",), model)
        if cube and _close(k, _CUBIC) and _is_cube(model, cube, x):
            return x
    return None


def _half_x_product(model: Model, name: str, x: str) -> bool:
    """name = x * 0.5."""
    source, c = _binary(model.producer(name), ("MUL",), model)
    return source == x and c == 0.5


def _final_mul(model: Model, a: str, x: str) -> Operator | None:
    """The MUL writing x * 0.5 * a for a = 1 + f(x), through at most two MULs; None if absent."""
    def only_mul(name):
        readers = model.consumers(name)
        if len(readers) != 1 or name in model.outputs:
            return None
        op = readers[0]
        ok = op.type == "MUL" and op.fused_activation == "NONE" and len(op.inputs) == 2
        return op if ok else None

    first = only_mul(a)
    if first is None:
        return None
    other = first.inputs[1] if first.inputs[0] == a else first.inputs[0]
    if _half_x_product(model, other, x):
        return first  # (x * 0.5) * a
    c = _scalar(model, other)
    if other != x and c != 0.5:
        return None
    second = only_mul(first.outputs[0])
    if second is None:
        return None
    rest = second.inputs[1] if second.inputs[0] == first.outputs[0] else second.inputs[0]
    wanted_constant = other == x  # (x * a) * 0.5, else (a * 0.5) * x
    if wanted_constant and _scalar(model, rest) == 0.5 or not wanted_constant and rest == x:
        return second
    return None


def identify_gelu(model: Model) -> bool:
    changed = False
    for add in model.operators:
        if not model.has_operator(add) or add.type != "ADD":
            continue
        e, one = _binary(add, ("ADD",), model)
        if e is None or one != 1.0:
            continue
        approximate = False
        x = _erf_source(model, e)
        if x is None:
            x, approximate = _tanh_source(model, e), True
        if x is None or model.arrays[x].dtype != np.float32:
            continue
        final = _final_mul(model, add.outputs[0], x)
        if final is None or model.arrays[final.outputs[0]].shape != model.arrays[x].shape:
            continue
        final.type, final.options = "GELU", {"approximate": approximate}
        model.set_inputs(final, [x])
        changed = True
    return changed
