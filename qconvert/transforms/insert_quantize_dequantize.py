"""insert_quantize_dequantize: puts a QUANTIZE or DEQUANTIZE wherever int8, int16 and float meet,
and quantizes the constants quantized ops read as activations.

- A quantized op reading a float activation (a graph input, a float op's output) reads it through
  a QUANTIZE to the params that activation's range gives in the op's activation type; one
  QUANTIZE per tensor and params, shared by every reader. Likewise a 16x8 op reading an int8
  tensor, or an int8 op reading an int16 one (the QUANTIZE requantizes between the types).
- A same-scale op (CONCATENATION, MAXIMUM, ...) reading an int8 input whose params differ from
  its output's (a producer with fixed params) reads it through a requantizing QUANTIZE.
- A constant an int8 op reads as an activation (ADD's addend, PADV2's pad value, a concat piece)
  is quantized asymmetrically: with its own range, or with the output's params for a same-scale op.
- A float op reading an int8 (int16) tensor reads it through a DEQUANTIZE, one per tensor.
- Graph inputs and outputs follow `io_type`: "float" keeps them float32 (QUANTIZE after each
  input, DEQUANTIZE before each int8 output, the graph tensor keeping its name and the int8 one
  getting an `_int8` suffix); "int8" makes them the int8 tensors (an int16 output is requantized
  to int8 by a QUANTIZE); "uint8" adds a requantizing QUANTIZE between uint8 (same scale, zero
  point + 128) and int8.
"""

from __future__ import annotations

import numpy as np

from ..ir import Array, MinMax, Model, Operator, QuantParams, dequantized_name, typed_name
from .quantization import (
    BOUNDARY_OPS,
    FLOAT32,
    INT8,
    INT16,
    activation_params,
    op_activation_type,
    params_for_range,
    rule_of,
    same_params,
    value_range,
)
from ..quantize.params import MAX_MULTIPLIER, quantize
from .helpers import own_constant, single_use_constants

UINT8 = np.dtype(np.uint8)
QUANTIZED = (INT8, UINT8, INT16)


def _uint8_params(params: QuantParams) -> QuantParams:
    return QuantParams(params.scale, params.zero_point + 128, params.axis)


class _Boundary:
    """Inserts conversion ops before their first reader and reuses them for later readers."""

    def __init__(self, model: Model):
        self.model = model
        self.made: dict[tuple, str] = {}

    def convert(self, op_type: str, name: str, dtype, params: QuantParams | None, before: Operator) -> str:
        key = (op_type, name, np.dtype(dtype).name, None if params is None else
               (params.scale.tobytes(), params.zero_point.tobytes()))
        if key not in self.made:
            source = self.model.arrays[name]
            hint = dequantized_name(name) if op_type == "DEQUANTIZE" else typed_name(name, dtype)
            result = self.model.add_array(hint, source.shape, dtype)
            self.model.arrays[result].quant = params
            self.model.insert_before(before, Operator(op_type, [name], [result], source=before.source))
            self.made[key] = result
        return self.made[key]


def _requantizable(params: QuantParams, source: Array) -> QuantParams:
    """The params of an int16 tensor requantized from the int8 `source`, its scale widened where
    the QUANTIZE's multiplier (int8 scale / int16 scale) would reach MAX_MULTIPLIER: a signed
    range's symmetric int16 scale is 2 * 32767 / 255 = 257 times finer than its int8 one, and
    TFLite's QUANTIZE takes multipliers below 256 (the int16 step then grows by 0.4 %)."""
    if source.dtype != INT8 or source.quant is None or params.scale.size != 1:
        return params
    floor = float(source.quant.scale[0]) / (MAX_MULTIPLIER * (1 - 2 ** -12))
    if params.scale[0] >= floor:
        return params
    return QuantParams(np.array([floor], np.float32), params.zero_point, params.axis)


def _quantize_constant(model: Model, op: Operator, index: int, params: QuantParams,
                       single_use: set[str], dtype: np.dtype) -> None:
    name = own_constant(model, op, index, single_use)
    array = model.arrays[name]
    array.data = quantize(array.data, params.scale[0], params.zero_point[0], dtype)
    array.dtype, array.quant = dtype, params


def _constant_params(model: Model, op: Operator, index: int, dtype: np.dtype) -> QuantParams:
    """Params for a constant a free-output int8 op reads as an activation: from its own values,
    except an all-zero constant (Greater(x, 0), x + 0), which takes the params of the op's other
    activation input: any scale holds 0 exactly, and the comparison kernels abort on a scale far
    from the other input's (a constant 0 alone would get scale 1)."""
    own = value_range(model.arrays[op.inputs[index]])
    if own is None or own.min == own.max == 0.0:
        for other in rule_of(op).activation_inputs(op):
            params = activation_params(model.arrays[op.inputs[other]], dtype) if other != index else None
            if params is not None and not model.arrays[op.inputs[other]].is_constant:
                return params
    return params_for_range(own or MinMax(0.0, 0.0), dtype)


def _int8_graph_inputs(model: Model, io_type: str) -> None:
    """With int8/uint8 I/O, a float graph input read by int8 ops becomes int8 itself."""
    for position, name in enumerate(list(model.inputs)):
        array = model.arrays[name]
        if array.dtype != FLOAT32 or not any(op.quantized for op in model.consumers(name)):
            continue
        params = activation_params(array)
        if params is None:
            continue
        if io_type == "int8":
            array.dtype, array.quant = INT8, params
            continue
        # uint8: the graph input keeps its name, the int8 tensor after the QUANTIZE gets a new one.
        inner = model.unique_name(typed_name(name, INT8))
        model.rename_tensor(name, inner)
        model.arrays[inner].dtype, model.arrays[inner].quant = INT8, params
        model.arrays[name] = Array(name, UINT8, array.shape, quant=_uint8_params(params))
        model.insert_after(None, Operator("QUANTIZE", [name], [inner]))
        model.inputs[position] = name


def _graph_outputs(model: Model, io_type: str) -> None:
    for position, name in enumerate(list(model.outputs)):
        array = model.arrays[name]
        if array.is_constant or array.dtype not in (INT8, INT16) or (io_type, array.dtype) == ("int8", INT8):
            continue
        inner = model.unique_name(typed_name(name, array.dtype))
        model.rename_tensor(name, inner)
        if io_type != "float":
            params = activation_params(array, INT8)
            dtype = UINT8 if io_type == "uint8" else INT8
            model.arrays[name] = Array(name, dtype, array.shape, minmax=array.minmax,
                                       quant=_uint8_params(params) if dtype == UINT8 else params)
            model.add_operator(Operator("QUANTIZE", [inner], [name]))
        else:
            model.arrays[name] = Array(name, FLOAT32, array.shape, minmax=array.minmax)
            model.add_operator(Operator("DEQUANTIZE", [inner], [name]))
        model.outputs[position] = name


def insert_quantize_dequantize(model: Model, io_type: str = "float") -> bool:
    before = len(model.operators)
    single_use = single_use_constants(model)
    if io_type != "float":
        _int8_graph_inputs(model, io_type)
    boundary = _Boundary(model)
    changed = False
    for op in model.operators:
        if op.type in BOUNDARY_OPS:
            continue
        if not op.quantized:
            for i, name in enumerate(op.inputs):
                array = model.arrays[name] if name else None
                if array is not None and not array.is_constant and array.dtype in QUANTIZED \
                        and array.quant is not None:  # not a plain integer input (a uint8 image)
                    model.set_input(op, i, boundary.convert("DEQUANTIZE", name, FLOAT32, None, op))
            continue
        dtype = op_activation_type(op)
        rule = rule_of(op)
        shared = model.arrays[op.outputs[0]].quant if rule.output == "same" else None
        for i in rule.activation_inputs(op):
            array = model.arrays[op.inputs[i]]
            if array.is_constant:
                if array.dtype == FLOAT32:
                    params = shared or _constant_params(model, op, i, dtype)
                    _quantize_constant(model, op, i, params, single_use, dtype)
                    changed = True
                elif shared is not None and not same_params(array.quant, shared):
                    raise AssertionError(f"constant {array.name!r} quantized twice")
                continue
            if array.dtype == FLOAT32 or array.dtype != dtype:
                params = shared or _requantizable(activation_params(array, dtype), array)
                model.set_input(op, i, boundary.convert("QUANTIZE", array.name, dtype, params, op))
            elif shared is not None and not same_params(array.quant, shared):
                model.set_input(op, i, boundary.convert("QUANTIZE", array.name, dtype, shared, op))
    _graph_outputs(model, io_type)
    return changed or len(model.operators) != before
