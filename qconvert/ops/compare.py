"""Comparisons and logic: Equal, Less, Greater, LessOrEqual, GreaterOrEqual (EQUAL, LESS, GREATER,
LESS_EQUAL, GREATER_EQUAL), Not (LOGICAL_NOT), And/Or (LOGICAL_AND, LOGICAL_OR), Xor (NOT_EQUAL on
bools) and Where (SELECT_V2); IsNaN (x != x) and IsInf (x == +-inf, |x| == inf for both signs).

All broadcast like numpy, as the TFLite kernels do (ai-edge-litert 2.3.0 broadcasts up to rank 6;
older TensorFlow Lite releases stopped at rank 4 for comparisons and logic, rank 5 for SELECT_V2).
"""

from __future__ import annotations

import numpy as np

from .registry import QuantRule, onnx_op, onnx_ops_as, tflite_op
from .versions import by_input_dtype


def _binary(fn):
    return lambda inputs, op: [np.asarray(fn(inputs[0], inputs[1]), dtype=np.bool_)]


_COMPARISONS = {
    # ONNX op: (TFLite op, options table, numpy function, {dtype: version} from op_version.cc)
    "Equal": ("EQUAL", "EqualOptions", np.equal, {np.int16: 4, np.int8: 2}),
    "Less": ("LESS", "LessOptions", np.less, {np.int16: 3, np.int8: 2}),
    "Greater": ("GREATER", "GreaterOptions", np.greater, {np.int8: 2}),
    "LessOrEqual": ("LESS_EQUAL", "LessEqualOptions", np.less_equal, {np.int8: 2}),
    "GreaterOrEqual": ("GREATER_EQUAL", "GreaterEqualOptions", np.greater_equal,
                       {np.int16: 3, np.int8: 2}),
    "Xor": ("NOT_EQUAL", "NotEqualOptions", np.not_equal, {np.int8: 2}),
    "And": ("LOGICAL_AND", "LogicalAndOptions", np.logical_and, {}),
    "Or": ("LOGICAL_OR", "LogicalOrOptions", np.logical_or, {}),
}

for _tfl, _options, _fn, _table in _COMPARISONS.values():
    # Comparisons of int8 inputs rescale both sides in the kernel; logical ops read booleans.
    tflite_op(_tfl, options=_options, evaluate=_binary(_fn), layout="elementwise",
              version=by_input_dtype(_table),
              quant=QuantRule(activations=(0, 1), output="none", input_scale_below=1.0) if _table else None)
tflite_op("LOGICAL_NOT", options="LogicalNotOptions", layout="elementwise",
          evaluate=lambda inputs, op: [np.logical_not(inputs[0])])
tflite_op("SELECT_V2", options="SelectV2Options", layout="elementwise",
          quant=QuantRule(activations=(1, 2), output="same", int16=True),
          evaluate=lambda inputs, op: [np.where(*inputs)],
          version=by_input_dtype({np.uint32: 2}))  # not rank: SELECT (v1) has the rank rule

onnx_ops_as({onnx_type: spec[0] for onnx_type, spec in _COMPARISONS.items()}, inputs=2)
onnx_ops_as({"Not": "LOGICAL_NOT"}, inputs=1)
onnx_ops_as({"Where": "SELECT_V2"}, inputs=3)


def _float_input(node, ctx) -> str:
    x = node.inputs[0]
    if np.dtype(ctx.dtype(x)).kind != "f":
        raise ctx.error(f"input {x!r} has dtype {np.dtype(ctx.dtype(x))}; {node.op_type} takes floats")
    return x


@onnx_op("IsNaN")
def import_isnan(node, ctx):
    """NaN is the one value unequal to itself."""
    x = _float_input(node, ctx)
    ctx.add_op("NOT_EQUAL", [x, x], node.outputs)


@onnx_op("IsInf")
def import_isinf(node, ctx):
    """detect_positive and detect_negative (both 1 by default) pick x == inf, x == -inf or
    |x| == inf; with neither, x < -inf (false for every x, NaN included)."""
    x, y = _float_input(node, ctx), node.outputs[0]
    dtype = ctx.dtype(x)
    positive, negative = bool(node.attr("detect_positive", 1)), bool(node.attr("detect_negative", 1))
    if positive and negative:
        magnitude = ctx.tensor(y + "_abs", ctx.shape(x), dtype)
        ctx.add_op("ABS", [x], [magnitude])
        ctx.add_op("EQUAL", [magnitude, ctx.constant("inf", np.array(np.inf, dtype))], [y])
    elif positive or negative:
        ctx.add_op("EQUAL", [x, ctx.constant("inf", np.array(np.inf if positive else -np.inf, dtype))], [y])
    else:
        ctx.add_op("LESS", [x, ctx.constant("minus_inf", np.array(-np.inf, dtype))], [y])
