"""store_integer_weights: the weights of a dynamically quantized ONNX model (onnxruntime's
quantize_dynamic) written back as the int8 integers they were, read by TFLite's hybrid kernels.

The loader computes such a model in float (qconvert/ops/dynamic_quant.py): each integer weight
becomes float levels (q - z) and the float steps fold the scale that multiplies the sum into them,
so that the weight of the FULLY_CONNECTED, CONV_2D or UNIDIRECTIONAL_SEQUENCE_LSTM the node
became is (q - z) * s in float, laid out as the op wants. The loader also records, by source node,
the scale s each weight was stored with and its largest |q - z|, m (Model.integer_weights). This
step, run once after the float steps whatever the weight mode, finds each such op's weights back
on their grid: q = round(w / s), per tensor (one scale) or per output channel along the hybrid
kernel's axis, checked to give back w (to float rounding) and to fit int8. When the float steps
folded a constant factor k into the weight as well (GELU's 0.5 before a MatMul), the grid is
s * k = max|w| / m; and when the scale stayed apart (a MUL the steps could not fold), the levels
are the weight itself, at scale 1. Those integers are written as they
are, never requantized (zero point 0; a uint8 weight re-centred by the loader); the op reads them
directly and quantizes its float input at run time (`asymmetric_quantize_inputs`, per row, where
the op has it), which is what onnxruntime's DynamicQuantizeLinear does per tensor.

A weight not on a recorded grid (onnxruntime's per-row LSTM scales, which TFLite's hybrid LSTM
cannot hold in one scale per tensor; a uint8 weight whose zero point leaves int8; a constant the
float steps folded into it) is quantized like --weight-only does, saying so in a warning. An LSTM's
peepholes and projection (float in ONNX) become int8 with its weights, as its kernel wants. Another
op still reading the float weight reads the int8 one through a DEQUANTIZE when the integers are
exact. Biases stay float, as the hybrid kernels want them. --weight-only then quantizes what else
is big; --quantize and --float16 start from the float weights (restore_float_weights).

An integer embedding table (a GATHER whose source recorded the table's scale and zero point:
quantize_dynamic's Gather, a QDQ model's gathered constant) is written back the same way, as the
int8 or uint8 integers whose (q - z) * s are its float values bit for bit, the recorded zero
point kept: GATHER reads them and a DEQUANTIZE after it gives the rows DequantizeLinear gives.
"""

from __future__ import annotations

import logging

import numpy as np

from ..ir import Model, Operator, QuantParams, typed_name
from ..ops.registry import TFLITE_OPS
from ..quantize.params import quantize_weights_per_channel, quantize_weights_per_tensor
from .helpers import dequantize_for

log = logging.getLogger("qconvert")
FLOAT32 = np.dtype(np.float32)
TABLE_DTYPES = (np.dtype(np.int8), np.dtype(np.uint8))  # what TFLite's GATHER and DEQUANTIZE read
# How far w / s may be from an integer: its float rounding is below 128 * 2**-23 (the levels reach
# 255 at most); a value off the grid is a fraction of a step away.
_GRID_TOLERANCE = 1e-3
# Hybrid kernels that read one scale per channel whatever the tensor holds (depthwise_conv.cc
# indexes the scales by channel): a per-tensor scale is written once per channel for them.
_PER_CHANNEL_ONLY = {"DEPTHWISE_CONV_2D"}


def _candidates(w: np.ndarray, grids: list[tuple[np.ndarray, np.ndarray]], axis: int | None):
    """The scales w may be on: each recorded scale, then max|w| / (its largest integer), per
    tensor or per entry of `axis` like the record (a zero channel keeps the recorded scale); 1."""
    for scale, top in grids:
        yield scale
        top = np.asarray(top, np.float64).ravel()
        if top.size == 1:
            yield np.float64(np.abs(w).max(initial=0)) / top[0] if top[0] else scale
        elif axis is not None and w.ndim and top.size == w.shape[axis]:
            other = tuple(a for a in range(w.ndim) if a != axis % w.ndim)
            found = np.abs(w).max(axis=other).astype(np.float64)
            yield np.where(top > 0, found / np.maximum(top, 1), np.ravel(scale) * np.ones(top.size))
    yield np.float32(1)  # levels whose scale stayed apart (a MUL)


def on_grid(w: np.ndarray, grids: list[tuple[np.ndarray, np.ndarray]],
            axis: int | None) -> tuple[np.ndarray, QuantParams] | None:
    """(int8 q, params) with q * scale == w to float rounding, from the first candidate scale (one
    value, or one per entry of w's `axis`) that puts w on an int8 grid; None when none does.
    `grids`: the recorded (scale, largest |integer|) pairs."""
    for scale in _candidates(w, grids, axis):
        scale = np.asarray(scale, np.float32).ravel()
        if scale.size == 1:
            shaped, params_axis = scale.reshape(()), None
        elif axis is not None and w.ndim and scale.size == w.shape[axis]:
            params_axis = axis % w.ndim
            shaped = scale.reshape([-1 if a == params_axis else 1 for a in range(w.ndim)])
        else:
            continue
        if not (np.isfinite(scale).all() and (scale > 0).all()):
            continue
        levels = w.astype(np.float64) / shaped.astype(np.float64)
        q = np.round(levels)
        if ((np.abs(levels - q) <= _GRID_TOLERANCE).all() and q.min(initial=0) >= -128
                and q.max(initial=0) <= 127):
            zero_points = np.zeros(scale.size, np.int64)
            return q.astype(np.int8), QuantParams(scale.copy(), zero_points, params_axis)
    return None


def _requantized(w: np.ndarray, axis: int | None) -> tuple[np.ndarray, QuantParams]:
    """--weight-only's symmetric int8 quantization (per channel along `axis` when there is one)."""
    if axis is None:
        q, scale = quantize_weights_per_tensor(w)
        return q, QuantParams(np.array([scale], np.float32), np.zeros(1, np.int64))
    q, scales = quantize_weights_per_channel(w, axis)
    return q, QuantParams(scales, np.zeros(scales.size, np.int64), axis % w.ndim)


def _float_constant(model: Model, name: str) -> bool:
    array = model.arrays.get(name) if name else None
    return (array is not None and array.is_constant and array.dtype == FLOAT32
            and name not in model.outputs and bool(np.isfinite(array.data).all()))


def _drop_zero_bias(model: Model, op: Operator) -> None:
    """A FULLY_CONNECTED's all-zero bias goes (its hybrid kernel runs without one; CONV_2D's
    refuses to, conv.cc): folding the sum's scale into the weights adds one
    (fuse_binary_into_affine), as big as a weight's row, which the ONNX file does not store."""
    index = TFLITE_OPS[op.type].quant.bias if op.type == "FULLY_CONNECTED" else None
    if index is None or index != len(op.inputs) - 1:
        return
    bias = model.constant(op.inputs[index])
    if bias is not None and not bias.any():
        model.set_inputs(op, op.inputs[:index])


def store_integer_weights(model: Model) -> bool:
    records = model.integer_weights
    if not records:
        return False  # not a dynamically quantized model
    stored: dict[tuple[str, int | None], tuple[str, bool]] = {}  # (float weight, axis) -> int8, exact
    changed = False
    for op in model.operators:
        rule = TFLITE_OPS[op.type].hybrid
        if op.source not in records or rule is None or model.arrays[op.inputs[0]].dtype != FLOAT32:
            continue
        if not all(i < len(op.inputs) and _float_constant(model, op.inputs[i]) for i in rule.weights):
            continue
        companions = [i for i in rule.companions
                      if i < len(op.inputs) and _float_constant(model, op.inputs[i])]
        requantized = []
        for index in list(rule.weights) + companions:
            name = op.inputs[index]
            key = (name, rule.axis)
            if key not in stored:
                w = model.arrays[name].data
                found = on_grid(w, records[op.source], rule.axis) if index in rule.weights else None
                if found is None and index in rule.weights:
                    requantized.append(name)
                q, params = found if found is not None else _requantized(w, rule.axis)
                if op.type in _PER_CHANNEL_ONLY and params.axis is None:
                    channels = w.shape[rule.axis]
                    params = QuantParams(np.repeat(params.scale, channels), np.zeros(channels, np.int64),
                                         rule.axis % w.ndim)
                new = model.add_array(typed_name(name, np.int8), w.shape, np.int8, q)
                array = model.arrays[new]
                array.quant, array.narrow_range = params, bool(q.min(initial=0) >= -127)
                stored[key] = (new, found is not None)
            model.set_input(op, index, stored[key][0])
        if requantized:
            model.requantized_weights.append(op.source)
        if requantized and records[op.source]:  # (else the loader said why)
            log.warning("warning: node %r: weight %s is not on the int8 grid of the scale onnxruntime "
                        "stored it with (TFLite's %s takes %s); requantized to int8", op.source,
                        ", ".join(repr(n) for n in requantized), op.type,
                        "one scale per tensor" if rule.axis is None else "one scale per output channel")
        if rule.asymmetric:
            op.options["asymmetric_quantize_inputs"] = True
        _drop_zero_bias(model, op)
        changed = True
    changed |= _store_tables(model, records, stored)
    order: dict[Operator, int] | None = None
    for (name, _), (new, exact) in stored.items():
        uses = [(op, i) for op in dict.fromkeys(model.consumers(name))
                for i, n in enumerate(op.inputs) if n == name]
        if exact and uses:  # the integers are the weight: no float copy stays
            order = order or {op: k for k, op in enumerate(model.operators)}
            dequantize_for(model, new, sorted(uses, key=lambda use: order[use[0]]))
    return changed


def table_integers(w: np.ndarray, pairs: list) -> tuple[np.ndarray, QuantParams] | None:
    """An embedding table `w` as the integers it was stored as: (q, params), q int8 or uint8 with
    float32((q - zero point) * scale) == w bit for bit, from the first recorded (scale, zero
    point) pair that gives w back; None when none does. The recorded zero point is kept where the
    integers fit int8 or uint8 with it (a uint8 table stays uint8), else they are re-centred."""
    for scale, zero in pairs:
        scale, zero = np.float32(np.asarray(scale).reshape(())), int(np.asarray(zero).reshape(()))
        if not (np.isfinite(scale) and scale > 0):
            continue
        levels = np.round(w.astype(np.float64) / np.float64(scale))
        if np.abs(levels).max(initial=0) > 255 or not np.array_equal(
                (levels * np.float64(scale)).astype(np.float32), w):
            continue
        low, high = levels.min(initial=0), levels.max(initial=0)
        for dtype, z in ((np.int8, zero), (np.uint8, zero), (np.int8, 0), (np.uint8, 128)):
            info = np.iinfo(dtype)
            if info.min <= z <= info.max and info.min <= low + z and high + z <= info.max:
                q = (levels + z).astype(dtype)
                return q, QuantParams(np.array([scale], np.float32), np.array([z], np.int64))
    return None


def _store_tables(model: Model, records: dict, stored: dict) -> bool:
    """Each GATHER whose source's table was integers (a recorded (scale, zero point)) reads the
    table as those integers, int8 or uint8 (both TFLite's GATHER reads) and a DEQUANTIZE makes
    the gathered rows float32, (q - zero point) * scale, the very floats onnxruntime's
    DequantizeLinear gives. Another op still reading the float table reads the integers through
    a DEQUANTIZE (a table that is also a weight). A table that is no longer on the recorded grid
    stays float, with a warning."""
    changed, off_grid = False, set()
    for op in list(model.operators):
        if (op.type != "GATHER" or op.source not in records
                or not _float_constant(model, op.inputs[0])):
            continue
        name, out = op.inputs[0], op.outputs[0]
        if (name, "table") not in stored and name not in off_grid:
            found = table_integers(model.arrays[name].data, records[op.source])
            if found is None:
                log.warning("warning: node %r: its embedding table %r is not on the integer grid "
                            "it was stored with; written float", op.source, name)
                off_grid.add(name)
                continue
            q, params = found
            table = model.add_array(typed_name(name, q.dtype), q.shape, q.dtype, q)
            model.arrays[table].quant = params
            stored[(name, "table")] = (table, True)
        if name in off_grid:
            continue
        table = stored[(name, "table")][0]
        array = model.arrays[table]
        rows = model.add_array(typed_name(out, array.dtype), model.arrays[out].shape, array.dtype)
        model.arrays[rows].quant = QuantParams(array.quant.scale.copy(),
                                               array.quant.zero_point.copy())
        model.set_input(op, 0, table)
        model.set_output(op, 0, rows)
        model.insert_after(op, Operator("DEQUANTIZE", [rows], [out], source=op.source))
        changed = True
    return changed


def restore_float_weights(model: Model) -> bool:
    """Undoes store_integer_weights before --quantize or --float16, which start from float
    weights: each int8 weight (or int8 or uint8 table) it wrote becomes float32 (q - z) * s
    again (the very float32 values the float steps had made, when the integers were exact), its
    DEQUANTIZEs go (a table's, after its GATHERs, too) and the ops read it as float kernels do."""
    if not model.integer_weights:
        return False
    restored = set()
    for name, array in model.arrays.items():
        if array.is_constant and array.dtype in TABLE_DTYPES and array.quant is not None:
            params, shape = array.quant, ()
            if params.axis is not None:
                shape = [-1 if a == params.axis else 1 for a in range(array.data.ndim)]
            scale = params.scale.astype(np.float32).reshape(shape)
            zero = params.zero_point.astype(np.float32).reshape(shape)
            array.data = ((array.data.astype(np.float32) - zero) * scale).astype(np.float32)
            array.dtype, array.quant, array.narrow_range = FLOAT32, None, False
            restored.add(name)
    for op in model.operators:
        if op.type == "GATHER" and op.inputs[0] in restored:  # its rows float again
            for dequantize in model.consumers(op.outputs[0]):
                if dequantize.type == "DEQUANTIZE":
                    model.remove_operator(dequantize)
                    model.set_output(op, 0, dequantize.outputs[0])
        elif op.type == "DEQUANTIZE" and op.inputs[0] in restored:
            model.remove_operator(op)
            model.rename_uses(op.outputs[0], op.inputs[0])
        elif restored.intersection(op.inputs):
            op.options.pop("asymmetric_quantize_inputs", None)
    return bool(restored)
