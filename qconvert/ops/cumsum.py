"""CumSum (CUMSUM).

TFLite's CUMSUM has ONNX's semantics exactly: an int32 scalar axis input and the `exclusive` and
`reverse` options; float32, int32 and int64 kernels (ONNX's int64 computes as int32 inside the
graph, float64 as float32). The axis must be a constant: the layout pass remaps it.
"""

from __future__ import annotations

import numpy as np

from .concat import remap_axis_input
from .registry import onnx_op, tflite_op


def cumulative_sum(x: np.ndarray, axis: int, exclusive: bool, reverse: bool) -> np.ndarray:
    """ONNX's CumSum in numpy, summing in x's dtype in the order the kernels do."""
    if reverse:
        x = np.flip(x, axis)
    y = np.cumsum(x, axis=axis, dtype=x.dtype)
    if exclusive:
        y = np.concatenate([np.zeros_like(np.take(y, [0], axis=axis)), np.delete(y, -1, axis=axis)],
                           axis=axis) if x.shape[axis] else y
    return np.flip(y, axis) if reverse else y


def _evaluate(inputs, op):
    x, axis = inputs
    return [cumulative_sum(x, int(np.reshape(axis, -1)[0]) % x.ndim, op.options.get("exclusive", False),
                           op.options.get("reverse", False))]


tflite_op("CUMSUM", options="CumsumOptions", evaluate=_evaluate, layout="axis", layout_inputs=(0,),
          remap_axes=remap_axis_input(1))


@onnx_op("CumSum")
def import_cumsum(node, ctx):
    x, axis_name = node.inputs[:2]
    dtype = np.dtype(ctx.dtype(x))
    if dtype.kind not in "fi":
        raise ctx.error(f"input {x!r} has dtype {dtype}; CUMSUM computes float32, int32 and int64")
    value = ctx.require_const(axis_name, "the axis", "TFLite's CUMSUM and the layout pass need it "
                              "constant: make it an initializer")
    rank = ctx.rank(x)
    if value.size != 1 or value.ndim > 1:
        raise ctx.error(f"axis (input {axis_name!r}) has shape {list(value.shape)}; ONNX wants a "
                        "scalar")
    axis = int(value.reshape(()))
    if not -rank <= axis < rank:
        raise ctx.error(f"axis {axis} is outside [{-rank}, {rank - 1}] for an input of rank {rank}")
    if rank == 0:
        raise ctx.error(f"input {x!r} is a scalar; CumSum needs an axis")
    ctx.add_op("CUMSUM", [x, ctx.constant("axis", np.array(axis % rank, np.int32))], node.outputs,
               {"exclusive": bool(node.attr("exclusive", 0)), "reverse": bool(node.attr("reverse", 0))})
