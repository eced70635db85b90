"""onnxruntime's dynamic quantization (quantize_dynamic): DynamicQuantizeLinear, MatMulInteger,
ConvInteger, com.microsoft's DynamicQuantizeLSTM and its fused DynamicQuantizeMatMul and
MatMulIntegerToFloat, as TFLite's hybrid kernels: int8 weights, float activations quantized at
run time.

A dynamically quantized model stores its weights as integers q with a scale s and a zero point z
(the float weight is (q - z) * s) and quantizes activations at run time, per tensor:
DynamicQuantizeLinear gives x_q, x_s, x_z, then MatMulInteger / ConvInteger accumulate
(x_q - x_z)(q - z) in int32, and a Cast to float and a Mul by x_s * s scale the sum back. TFLite's
hybrid FULLY_CONNECTED, CONV_2D, DEPTHWISE_CONV_2D and UNIDIRECTIONAL_SEQUENCE_LSTM compute the
same: int8 weights with their scale (zero point 0), the float input quantized on every run (per
row and asymmetric, a step no coarser than onnxruntime's per-tensor one). Two stages get there:

- at load time (qconvert/onnx/dynamic_quant.py, before shape inference, which knows no
  com.microsoft op and would give integer activations) the nodes become the float nodes they
  stand for: the activation is used as it is (x_q := x, x_s := 1, x_z := 0) and the integer
  operands become float constants (q - z), or (q - z) * s for an LSTM, so that the MatMul, Conv
  and LSTM importers convert them and the float steps fold the scales into the weights. An
  INTEGER_WEIGHTS node per converted node tells the importers the scales its weights were stored
  with and their largest integers (Model.integer_weights);
- after the float steps, transforms/store_integer_weights.py finds each such op's weights on
  their grid again, q = w / s, and writes those very integers as int8 (never requantized),
  read directly by the op's hybrid kernel.

Weights are int8 when q - z is: int8 weights (zero point 0, onnxruntime's QInt8, symmetric per
tensor or per column), uint8 ones re-centred (zero point 128, or any other their values allow).
Other uint8 weights (onnxruntime's QUInt8 is asymmetric) and an LSTM's per-row scales (TFLite's
hybrid LSTM takes one scale per weight tensor) are dequantized and requantized as --weight-only
does, with a warning. What differs from onnxruntime is the rounding of the activations (per row
rather than per tensor), so verification judges such a model by SQNR (check/verify.py,
rounding_dropped). onnxruntime's own integer sums are not exact either on x86 without VNNI: its
u8 x s8 kernel (VPMADDUBSW) saturates pairs of products at 16 bits.

An integer embedding table (quantize_dynamic's Gather: a uint8 table gathered, then
DequantizeLinear, or read by MatMulInteger as it is) stays 8-bit the same way: the loader gathers
float values and notes the table's scale and zero point; TFLite's GATHER then reads the
integers and a DEQUANTIZE gives onnxruntime's rows exactly (see DEQUANTIZE_LINEAR).

The functions here turn one node into its float nodes and constants; the loader step checks how
the node's outputs are read.
"""
from __future__ import annotations

import numpy as np
from onnx import helper

from ..errors import ConversionError
from .registry import onnx_op, op_key

# The ops of the family, keyed like ONNX_IMPORTERS ("domain.op" outside the default domain).
DYNAMIC_QUANTIZE = "DynamicQuantizeLinear"
# Integer products: (operand, its zero point) input pairs, and the axis a per-entry zero point
# of that operand runs along (MatMulInteger: a per row, b per column; ConvInteger: w per output
# channel).
INTEGER_PRODUCTS = {"MatMulInteger": (((0, 2), -2), ((1, 3), -1)),
                    "ConvInteger": (((0, 2), 0), ((1, 3), 0))}
QUANTIZED_LSTM = "com.microsoft.DynamicQuantizeLSTM"
# com.microsoft's fused forms (onnxruntime's graph optimizer writes them):
# DynamicQuantizeMatMul(A float, B, b_scale, b_zero_point, bias) quantizes A itself;
# MatMulIntegerToFloat(A, B, a_scale, b_scale, a_zero_point, b_zero_point, bias) reads a
# DynamicQuantizeLinear's output and scale. Both give (A float) @ ((B - b_zp) * scales) + bias.
QUANTIZED_MATMUL = "com.microsoft.DynamicQuantizeMatMul"
INTEGER_TO_FLOAT = "com.microsoft.MatMulIntegerToFloat"
FAMILY = {DYNAMIC_QUANTIZE, QUANTIZED_LSTM, QUANTIZED_MATMUL, INTEGER_TO_FLOAT, *INTEGER_PRODUCTS}
# The loader's note to the importers: a node of this private domain, without outputs, naming (in
# its `source` attribute) a node whose weights were integers, its inputs pairs of the scale one
# was stored with and its largest |integer| (each one value, or one per output channel); for a
# Gather whose table was integers, pairs of the table's scale and zero point. Its importer
# records them in Model.integer_weights, where transforms/store_integer_weights.py finds them.
INTEGER_WEIGHTS = "qconvert.IntegerWeights"
# An integer embedding table (quantize_dynamic's Gather, or a QDQ model's constant): an int8 or
# uint8 initializer gathered, then dequantized with one scale and zero point (or dequantized,
# then gathered). TFLite's GATHER reads int8 and uint8 tables and DEQUANTIZE computes
# (q - zero point) * scale as DequantizeLinear does, so the table stays 8-bit: the loader
# gathers its float values and notes the scale and zero point (INTEGER_WEIGHTS), and
# transforms/store_integer_weights.py writes the table back as those integers.
DEQUANTIZE_LINEAR, GATHER = "DequantizeLinear", "Gather"
TABLE_DTYPES = (np.dtype(np.int8), np.dtype(np.uint8))
# DynamicQuantizeLSTM's inputs: X, W, R, B, sequence_lens, initial_h, initial_c, P (ONNX LSTM's,
# but W is [D, input, 4H] and R [D, H, 4H]: transposed), then W_scale, W_zero_point, R_scale,
# R_zero_point, one per direction [D] or per gate row [D, 4H].
_LSTM_ATTRIBUTES = ("activation_alpha", "activation_beta", "activations", "clip", "direction",
                    "hidden_size", "input_forget")
_FLOAT_TYPES = (1, 10, 11, 16)  # TensorProto FLOAT, FLOAT16, DOUBLE, BFLOAT16


def table_params(node, constant, table: str = "") -> tuple[np.ndarray, np.ndarray] | None:
    """(scale, zero point), float32 and the table's integer scalars, of DequantizeLinear `node`
    when it dequantizes an int8 or uint8 table (its input, or the constant `table` that input
    gathers) to float32 with one scale and zero point, all constants (`constant(name)`: a
    constant's value or None); None otherwise."""
    inputs = list(node.input) + [""] * (3 - len(node.input))
    table, scale = constant(table or inputs[0]), constant(inputs[1])
    zero = constant(inputs[2]) if inputs[2] else None
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if (table is None or scale is None or (inputs[2] and zero is None)
            or attrs.get("output_dtype", 1) != 1 or attrs.get("block_size", 0)):
        return None
    table, scale = np.asarray(table), np.asarray(scale)
    zero = np.zeros((), table.dtype) if zero is None else np.asarray(zero)
    if (table.dtype not in TABLE_DTYPES or zero.dtype != table.dtype or scale.dtype != np.float32
            or scale.size != 1 or zero.size != 1
            or not (np.isfinite(scale).all() and scale.item() > 0)):
        return None
    return scale.reshape(()), zero.reshape(())


def table_dequantization(node, constant, producer, readers, outputs) -> str:
    """How DequantizeLinear `node` dequantizes an integer embedding table that stays integer (see
    DEQUANTIZE_LINEAR): "gathered" when it reads Gather(table, indices), "gathers" when only
    Gathers read its output (as their data) and it reads the table; "" otherwise. `constant`,
    `producer(name)` (the node writing it or None) and `readers(name)` ((node, input index)
    pairs) describe the graph; `outputs` are its output names."""
    if op_key(node) != DEQUANTIZE_LINEAR or not node.input:
        return ""
    gather = producer(node.input[0])
    if gather is not None and op_key(gather) == GATHER:
        return "gathered" if table_params(node, constant, gather.input[0]) is not None else ""
    uses = readers(node.output[0])
    if (table_params(node, constant) is None or node.output[0] in outputs or not uses
            or any(op_key(reader) != GATHER or index != 0 for reader, index in uses)):
        return ""
    return "gathers"


def float_cast(node) -> bool:
    """Whether `node` is a Cast to a float type (what reads an integer product's sum)."""
    to = next((a.i for a in node.attribute if a.name == "to"), None)
    return op_key(node) == "Cast" and to in _FLOAT_TYPES


def levels(label: str, what: str, q: np.ndarray, zero_point: np.ndarray | None, axis: int) -> np.ndarray:
    """(q - zero_point) as float32, exact (integers within +-255). `zero_point` is a scalar or
    one per entry of q's `axis`."""
    q = np.asarray(q)
    if q.dtype.kind not in "iu" or q.dtype.itemsize != 1:
        raise ConversionError(f"node {label}: {what} has dtype {q.dtype}; the integer ops take "
                              "int8 or uint8")
    z = np.zeros((), np.float32) if zero_point is None else np.asarray(zero_point)
    if z.size > 1:
        if q.ndim < 2 or z.ndim != 1 or z.size != q.shape[axis]:
            raise ConversionError(f"node {label}: {what}'s zero point has shape {list(z.shape)}, "
                                  f"not a scalar or one per entry of axis {axis} of {list(q.shape)}")
        z = z.reshape([-1 if a == axis % q.ndim else 1 for a in range(q.ndim)])
    return (q.astype(np.float32) - z.astype(np.float32)).astype(np.float32)


def float_product(node, operands: list[str]):
    """MatMulInteger / ConvInteger as MatMul / Conv of the float `operands` (a run-time
    activation as it is, or a constant q - z), with the node's attributes: its output holds the
    sum the integer op accumulates, in float."""
    op_type = "MatMul" if node.op_type == "MatMulInteger" else "Conv"
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    return helper.make_node(op_type, operands, [node.output[0]], name=node.name, **attrs)


@onnx_op(INTEGER_WEIGHTS)
def import_integer_weights(node, ctx) -> None:
    """Records the scales node `source`'s integer weights were stored with and their largest
    integers (see INTEGER_WEIGHTS)."""
    values = [np.asarray(ctx.const(name), np.float32) for name in node.inputs]
    ctx.model.integer_weights.setdefault(node.attr("source"), []).extend(zip(values[::2], values[1::2]))


def largest(levels: np.ndarray, axis: int | None) -> np.ndarray:
    """The largest |level| of a weight, or of each entry of its `axis` (its output channels)."""
    magnitude = np.abs(np.asarray(levels, np.float32))
    if axis is None or magnitude.ndim == 0:
        return magnitude.max(initial=0)
    axis %= magnitude.ndim
    return magnitude.max(axis=tuple(a for a in range(magnitude.ndim) if a != axis), initial=0)


def beyond_int8(levels: np.ndarray) -> str:
    """Why integer levels (q - z) are not int8 values ("" when they are: always for int8 weights
    with zero point 0, for uint8 ones re-centred at zero point 128, or any other their values
    allow)."""
    if levels.size == 0 or (levels.min() >= -128 and levels.max() <= 127):
        return ""
    return (f"its uint8 weights minus their zero point run from {levels.min():g} to "
            f"{levels.max():g}, beyond int8")


def float_lstm(node, label: str, constants: dict, fresh) -> tuple[object, dict, list, str]:
    """DynamicQuantizeLSTM as ONNX LSTM: W and R dequantized, (q - z) * s per direction or per
    gate row, and transposed from [D, rows, 4H] to ONNX's [D, 4H, rows]; the other inputs and the
    attributes as they are. Returns the node, its new constants {name: array}, the (scale, largest
    |integer|) its weights are stored with (each direction's W and R, when one scale per
    direction: TFLite's hybrid LSTM takes one scale per weight tensor) and why the weights are
    not int8 on them ("" when they are); `fresh(hint)` gives an unused name."""
    inputs = list(node.input) + [""] * (12 - len(node.input))
    weights, scales, why = {}, [], ""
    for index, what, scale_index in ((1, "W", 8), (2, "R", 10)):
        names = (inputs[index], inputs[scale_index], inputs[scale_index + 1])
        needed = names[:2] + ((names[2],) if names[2] else ())  # an omitted zero point is 0
        missing = next((n for n in needed if n not in constants), None)
        if missing is not None:
            raise ConversionError(f"node {label}: {what}, its scale and its zero point must be "
                                  f"constants; {missing or '(omitted)'!r} is not")
        q, s = np.asarray(constants[names[0]]), np.asarray(constants[names[1]])
        z = np.asarray(constants[names[2]]) if names[2] else np.zeros(s.shape, np.int8)
        if q.ndim != 3 or s.size not in (q.shape[0], q.shape[0] * q.shape[2]) or z.size != s.size:
            raise ConversionError(
                f"node {label}: {what} {list(q.shape)} with scale {list(s.shape)} and zero point "
                f"{list(z.shape)}: expected [directions, rows, 4*hidden] and one scale and zero "
                "point per direction or per gate row")
        per = (q.shape[0], 1, -1 if s.size > q.shape[0] else 1)
        shifted = levels(label, what, q, None, 0) - z.reshape(per).astype(np.float32)
        value = shifted * s.reshape(per).astype(np.float32)
        if s.size != q.shape[0]:
            why = why or ("its weights have one scale per gate row; TFLite's hybrid LSTM takes one "
                          "per weight tensor")
        why = why or beyond_int8(shifted)
        if s.size == q.shape[0]:
            scales.extend((np.float32(v), largest(shifted[d], None)) for d, v in enumerate(s.ravel()))
        name = fresh(f"{names[0]}_dequantized")
        weights[name] = np.ascontiguousarray(value.astype(np.float32).transpose(0, 2, 1))
        inputs[index] = name
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    unknown = sorted(set(attrs) - set(_LSTM_ATTRIBUTES))
    if unknown:
        raise ConversionError(f"node {label}: attribute {unknown[0]!r} is not DynamicQuantizeLSTM's")
    lstm_inputs = inputs[:8]
    while lstm_inputs and not lstm_inputs[-1]:
        lstm_inputs.pop()
    lstm = helper.make_node("LSTM", lstm_inputs, list(node.output), name=node.name, **attrs)
    return lstm, weights, scales, why


def float_fused_matmul(node, label: str, constants: dict, fresh) -> tuple[list, dict, list, str]:
    """DynamicQuantizeMatMul / MatMulIntegerToFloat as MatMul(A, B - b_zero_point), Mul by the
    scales (a_scale, a rewritten DynamicQuantizeLinear's, is the constant 1 by then), Add of the
    bias: the nodes, their new constants {name: array}, the (scale, largest |integer|) B is
    stored with and why B is not int8 on them ("" when it is). B, its scale and its zero point
    must be constants."""
    fused = op_key(node) == QUANTIZED_MATMUL
    inputs = list(node.input) + [""] * (7 - len(node.input))
    if fused:
        a, b, scales, b_zero, bias = inputs[0], inputs[1], [inputs[2]], inputs[3], inputs[4]
    else:
        a, b, scales, b_zero, bias = inputs[0], inputs[1], [inputs[2], inputs[3]], inputs[5], inputs[6]
    needed = [b, scales[-1]] + ([b_zero] if b_zero else [])
    missing = next((n for n in needed if n not in constants), None)
    if missing is not None:
        raise ConversionError(f"node {label}: B, its scale and its zero point must be constants; "
                              f"{missing or '(omitted)'!r} is not")
    q = np.asarray(constants[b])
    shifted = levels(label, f"input {b!r}", q, constants.get(b_zero) if b_zero else None, -1)
    new = {fresh(f"{b}_levels"): shifted}
    out = node.output[0]
    product, scaled = fresh(f"{out}_product"), fresh(f"{out}_scaled") if bias else out
    nodes = [helper.make_node("MatMul", [a, next(iter(new))], [product], name=node.name)]
    for k, scale in enumerate(scales):
        result = scaled if k == len(scales) - 1 else fresh(f"{out}_scaled_{k}")
        nodes.append(helper.make_node("Mul", [product, scale], [result], name=node.name))
        product = result
    if bias:
        nodes.append(helper.make_node("Add", [scaled, bias], [out], name=node.name))
    stored = np.asarray(constants[scales[-1]], np.float32)
    grid = (stored, largest(shifted, -1 if stored.size > 1 else None))
    return nodes, new, [grid], beyond_int8(shifted)
