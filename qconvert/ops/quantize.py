"""QUANTIZE and DEQUANTIZE: the ops the quantization steps insert where float and int8 meet.

QUANTIZE turns float32 into int8/uint8, or requantizes int8 to other params (int8 <-> uint8 at the
graph I/O, or a concat input whose producer's params are fixed); DEQUANTIZE turns int8/uint8 (or
float16) back into float32. No ONNX op maps to them here.
"""

from __future__ import annotations

import numpy as np

from ..ir import Model, Operator
from .registry import tflite_op
from .versions import INT8, INT16, input_dtype, output_dtype, scale_count


def _per_channel(model: Model, name: str) -> bool:
    array = model.arrays[name]
    return (array.quant is not None and scale_count(array) > 1
            and scale_count(array) == array.shape[array.quant.axis or 0])


def _quantize_version(op: Operator, model: Model) -> int:
    if _per_channel(model, op.outputs[0]):
        return 3
    return 2 if output_dtype(op, model) == INT16 else 1


def _dequantize_version(op: Operator, model: Model) -> int:
    dtype = input_dtype(op, model)
    if dtype in (INT16, np.dtype(np.float16)):
        return 3
    if dtype == INT8:
        return 5 if _per_channel(model, op.inputs[0]) else 2
    return 1


tflite_op("QUANTIZE", version=_quantize_version)
tflite_op("DEQUANTIZE", version=_dequantize_version)
