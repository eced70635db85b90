"""Op versions as TensorFlow Lite's tensorflow/lite/tools/versioning/op_version.cc computes them.

The rule: the version qconvert writes for an op equals GetBuiltinOperatorVersion(GetOpSignature(op))
for that op *as written to the file* -- never above it (runtimes refuse a model whose op version is
beyond what they registered; the converter would not produce it), never below it (the kernel
variant needs the runtime release that introduced it; a lower version claims an older runtime
can run it). Every op_version.cc case is an ordered list of checks where the first match wins, so
each version function here keeps that order, including checks qconvert cannot trigger today.

How the signature is built (op_signature.cc), which these helpers mirror:
- inputs/outputs: one entry per slot of the operator's input/output list, *including* an omitted
  optional input (-1 in the file, "" in the IR) as type kTfLiteNoType: it counts in
  inputs.size() (FULLY_CONNECTED with a -1 bias has 3 inputs, so it is not the "no bias" v6).
- type: the tensor type as written; dims: the written `shape` (qconvert writes static shapes, the
  IR's), so rank is len(shape) and a scalar has dims [].
- "broadcast" (NeedBroadcastForBinaryInputs): inputs 0 and 1 have *different dims* -- plain
  inequality, so [1, 2, 3] vs [2, 3] broadcasts and a constant of equal shape does not; the rank
  test (GetInputMaxDims) is the largest rank over all inputs.
- "quantized" (ABS, ADD, MUL input_quantized): the tensor has a quantization table at all, which
  the writer writes when the array has `quant`.
- "per channel" (CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED): the filter's scale count equals its
  output-channel dimension (CONV_2D shape[0], DEPTHWISE shape[3], FULLY_CONNECTED shape[0] and > 1).
- builtin_data: the options table as written; an option the IR leaves unset reads as the schema
  default (ADD/SUB pot_scale_int16 defaults to true).
"""

from __future__ import annotations

import numpy as np

from ..ir import Array, Model, Operator

INT8, INT16, INT32, INT64 = (np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64))
UINT8, UINT32 = np.dtype(np.uint8), np.dtype(np.uint32)
FLOAT32, BOOL = np.dtype(np.float32), np.dtype(np.bool_)


def input_dtype(op: Operator, model: Model, index: int = 0) -> np.dtype | None:
    """The type of input `index` as op_signature.cc reads it: None (kTfLiteNoType) for an omitted
    input or a slot past the end."""
    name = op.inputs[index] if index < len(op.inputs) else ""
    return np.dtype(model.arrays[name].dtype) if name else None


def output_dtype(op: Operator, model: Model, index: int = 0) -> np.dtype | None:
    name = op.outputs[index] if index < len(op.outputs) else ""
    return np.dtype(model.arrays[name].dtype) if name else None


def input_rank(op: Operator, model: Model, index: int = 0) -> int:
    name = op.inputs[index] if index < len(op.inputs) else ""
    return len(model.arrays[name].shape) if name else 0


def has_quantization(array: Array) -> bool:
    """Whether the written tensor carries a quantization table (what `input_quantized` tests)."""
    return array.quant is not None


def scale_count(array: Array) -> int:
    """How many scales the written quantization table holds (0 without one)."""
    return 0 if array.quant is None else int(np.size(array.quant.scale))


def is_type(op: Operator, model: Model, inputs: tuple = (), outputs: tuple = ()) -> bool:
    """Inputs 0, 1, ... and outputs 0, 1, ... have exactly these dtypes (a type signature test like
    op_version.cc's `inputs.at(0).type == kTfLiteInt8 && inputs.at(1).type == ...`)."""
    return (all(input_dtype(op, model, i) == np.dtype(t) for i, t in enumerate(inputs))
            and all(output_dtype(op, model, i) == np.dtype(t) for i, t in enumerate(outputs)))


def broadcast_beyond_4d(op: Operator, model: Model) -> bool:
    """NeedBroadcastForBinaryInputs(op_sig) && GetInputMaxDims(op_sig) > 4."""
    if len(op.inputs) < 2:
        return False
    dims = [model.arrays[n].shape if n else () for n in op.inputs]
    return tuple(dims[0]) != tuple(dims[1]) and max(len(d) for d in dims) > 4


def by_input_dtype(table: dict, index: int = 0, default: int = 1):
    """The common op_version.cc case: a version per dtype of input `index`, else `default`.
    (Tables list the dtypes a case tests; a case that tests one dtype after another for the same
    input is order-independent.)"""
    table = {np.dtype(k): v for k, v in table.items()}

    def version(op: Operator, model: Model) -> int:
        return table.get(input_dtype(op, model, index), default)
    return version


def int16_io_or_int8(int16: int, int8: int):
    """LOGISTIC, TANH, MAX_POOL_2D, AVERAGE_POOL_2D: `int16` when input 0 and output 0 are int16,
    `int8` when input 0 is int8, else 1."""
    def version(op: Operator, model: Model) -> int:
        if is_type(op, model, (INT16,), (INT16,)):
            return int16
        return int8 if input_dtype(op, model) == INT8 else 1
    return version
