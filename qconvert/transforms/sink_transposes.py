"""sink_transposes: moves TRANSPOSE ops down through layout-agnostic ops until they cancel.

This is the NCHW to NHWC conversion. Importers wrap each layout-sensitive op (CONV_2D, pools,
resize, ...) in TRANSPOSE(NCHW->NHWC) before and TRANSPOSE(NHWC->NCHW) after. A transpose in front
of an elementwise op (RELU, ADD with another transposed input or a constant, ...) or an op with
axes (CONCATENATION, MEAN, PAD, ...) moves behind it: the op then works in NHWC, constants are
transposed and axes remapped. Two transposes in a row compose, and a transpose whose permutation is
the identity disappears, so in a CNN the NHWC->NCHW after one conv meets the NCHW->NHWC before the
next and both vanish (tflite2onnx's layout propagation, done as local rewrites).
"""

from __future__ import annotations

import numpy as np

from ..ir import Model, Operator, channels_last_name
from ..ops.registry import TFLITE_OPS
from .helpers import add_transpose, inverse, permuted, transpose_perm


def _compose_or_drop(model: Model, op: Operator) -> bool:
    perm = transpose_perm(model, op)
    if perm is None:
        return False
    if perm == tuple(range(len(perm))):
        return model.bypass(op)
    before = model.producer(op.inputs[0])
    if before is not None and before.type == "TRANSPOSE":
        first = transpose_perm(model, before)
        if first is not None:
            model.set_inputs(op, [before.inputs[0], model.add_constant(
                "perm", np.array([first[p] for p in perm], dtype=np.int32))])
            return True
    return False


def _single_value(model: Model, name: str, opdef) -> bool:
    """A computed operand of one value (a scalar bound, all dimensions 1) that an elementwise op
    broadcasts: it has no layout, so a transpose moves past it as past a constant."""
    array = model.arrays[name]
    return opdef.layout == "elementwise" and not array.is_constant and all(d == 1 for d in array.shape)


def _sink_through(model: Model, op: Operator) -> bool:
    """Rewrites `op` to read the transposes' sources; returns False if it does not apply."""
    opdef = TFLITE_OPS[op.type]
    data_inputs = opdef.layout_inputs if opdef.layout_inputs is not None else range(len(op.inputs))
    perm = None
    for i in data_inputs:
        name = op.inputs[i] if i < len(op.inputs) else ""
        if not name or model.arrays[name].is_constant or _single_value(model, name, opdef):
            continue
        producer = model.producer(name)
        if producer is None or producer.type != "TRANSPOSE":
            return False
        p = transpose_perm(model, producer)
        if p is None or perm is not None and p != perm:
            return False
        perm = p
    if perm is None:
        return False
    rank = len(perm)
    if any(len(model.arrays[o].shape) != rank for o in op.outputs) and opdef.layout == "elementwise":
        return False
    for i in data_inputs:
        name = op.inputs[i] if i < len(op.inputs) else ""
        if name and (model.arrays[name].is_constant or _single_value(model, name, opdef)) \
                and len(model.arrays[name].shape) > rank:
            return False
    out_perm = perm
    if opdef.layout == "axis":
        out_perm = opdef.remap_axes(op, model, perm)
        if out_perm is None:
            return False
    back = inverse(perm)
    for i in data_inputs:
        name = op.inputs[i] if i < len(op.inputs) else ""
        if not name or _single_value(model, name, opdef):
            continue
        if model.arrays[name].is_constant:
            value = model.arrays[name].data
            value = value.reshape((1,) * (rank - value.ndim) + value.shape)
            model.set_input(op, i, model.add_constant(name, np.ascontiguousarray(np.transpose(value, back))))
        else:
            model.set_input(op, i, model.producer(name).inputs[0])
    last = op
    for k, out in enumerate(list(op.outputs)):
        array = model.arrays[out]
        inner = model.add_array_like(channels_last_name(out) if rank >= 3 else out + "_t",
                                     permuted(array.shape, inverse(out_perm)), out)
        model.set_output(op, k, inner)
        last = model.insert_after(last, add_transpose(model, inner, out_perm, out, op.source))
    return True


def sink_transposes(model: Model) -> bool:
    changed = False
    for op in model.operators:
        if not model.has_operator(op):
            continue
        if op.type == "TRANSPOSE":
            changed |= _compose_or_drop(model, op)
        elif TFLITE_OPS[op.type].layout is not None:
            changed |= _sink_through(model, op)
    return changed
