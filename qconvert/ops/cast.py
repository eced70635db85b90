"""Cast and CastLike (CAST).

Inside the graph int64 is int32 and float64 is float32 (loader.internal_dtype), so a Cast to int64
is a CAST to int32 and a Cast between types that are equal inside the graph (float32 <-> float64,
int32 <-> int64, X -> X) is an IDENTITY (removed by a transformation).
Float to int truncates toward zero like ONNX: TFLite's CAST kernel uses a C++ static_cast, after
clamping to the int32 range (out-of-range values saturate; ONNX leaves them undefined). Other
dtypes (float16, uint8, ...) never reach here: the loader rejects such activations, and a
Cast of a constant was folded at load time.
"""

from __future__ import annotations

import numpy as np

from .registry import onnx_op, tflite_op

_INT32 = np.iinfo(np.int32)


def _cast_value(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """numpy twin of TFLite's CAST: float -> int32 truncates and saturates (NaN -> int32 max)."""
    dtype = np.dtype(dtype)
    if x.dtype.kind == "f" and dtype == np.int32:
        wide = np.nan_to_num(x.astype(np.float64), nan=np.inf)
        return np.clip(np.trunc(wide), _INT32.min, _INT32.max).astype(np.int32)
    return x.astype(dtype)


def _evaluate(inputs, op):
    return [_cast_value(inputs[0], op.options.get("out_data_type", inputs[0].dtype))]


def _cast_version(op, model) -> int:
    """op_version.cc: 5 for float16/float64, 4 for uint16, 3 for int8, 2 for uint32, else 1."""
    types = {np.dtype(model.arrays[name].dtype) for name in (op.inputs[0], op.outputs[0])}
    for dtypes, version in [((np.float64, np.float16), 5), ((np.uint16,), 4), ((np.int8,), 3),
                            ((np.uint32,), 2)]:
        if types & {np.dtype(t) for t in dtypes}:
            return version
    return 1


tflite_op("CAST", options="CastOptions", evaluate=_evaluate, layout="elementwise",
          version=_cast_version)


def add_cast(ctx, x: str, y: str) -> None:
    """CAST x into y (their dtypes differ), or IDENTITY when they are the same inside the graph."""
    in_dtype, out_dtype = ctx.dtype(x), ctx.dtype(y)
    if in_dtype == out_dtype:
        ctx.add_op("IDENTITY", [x], [y])
        return
    ctx.add_op("CAST", [x], [y], {"in_data_type": in_dtype, "out_data_type": out_dtype})


@onnx_op("Cast", "CastLike")
def import_cast(node, ctx):
    """The output array already has the target dtype (ONNX inference, narrowed by the loader)."""
    add_cast(ctx, node.inputs[0], node.outputs[0])
