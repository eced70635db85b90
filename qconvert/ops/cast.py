"""Cast and CastLike (CAST).

Inside the graph int64, int16, uint16, int8 and uint8 are int32, float64 and float16 are float32
(loader.internal_dtype), so a Cast to int64 is a CAST to int32 and a Cast between types that are
equal inside the graph (float32 <-> float64 <-> float16, int32 <-> int64, X -> X) is an IDENTITY
(removed by a transformation). A Cast to a small integer type goes through that type (CAST to it,
CAST back to int32: values wrap as ONNX's do). A Cast of a graph input reads the input in its own
type (a uint8 image: one CAST uint8 -> float32, which TFLite's CAST reads directly).
Float to int truncates toward zero like ONNX: TFLite's CAST kernel uses a C++ static_cast, after
clamping to the int32 range (out-of-range values saturate; ONNX leaves them undefined, and a Cast
to int64 of a value beyond int32 saturates too: int64 computes as int32 inside). A Cast of an
int64 graph input to int32 is exact for any value: its narrowing CAST wraps modulo 2^32 as ONNX's
Cast does. A Cast of a constant was folded at load time (in int64: the loader refuses a result
int32 cannot hold where it is read).
"""

from __future__ import annotations

import numpy as np

from onnx import helper

from .registry import onnx_op, tflite_op

_INT32 = np.iinfo(np.int32)
# The integer types that compute as int32 inside the graph, which a Cast to them wraps into.
_SMALL_INTS = {np.dtype(t) for t in (np.int16, np.uint16, np.int8, np.uint8)}


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


def _graph_input(ctx, x: str) -> str:
    """The graph input `x` stands for when it is that input widened at the graph's edge (the
    loader's CAST, source "input <name>"), else `x`."""
    producer = ctx.model.producer(x)
    if producer is not None and producer.type == "CAST" and producer.source == f"input {producer.inputs[0]}":
        return producer.inputs[0]
    return x


@onnx_op("Cast", "CastLike")
def import_cast(node, ctx):
    """The output array already has the target dtype (ONNX inference, narrowed by the loader)."""
    x, y = _graph_input(ctx, node.inputs[0]), node.outputs[0]
    target = (np.dtype(helper.tensor_dtype_to_np_dtype(node.attr("to")))
              if node.op_type == "Cast" else None)
    if target in _SMALL_INTS and ctx.dtype(x) != target:
        small = ctx.tensor(f"{y}_{target}", ctx.shape(y), target)
        ctx.add_op("CAST", [x], [small], {"in_data_type": ctx.dtype(x), "out_data_type": target})
        x = small
    add_cast(ctx, x, y)
