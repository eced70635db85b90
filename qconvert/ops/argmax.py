"""ArgMax and ArgMin (ARG_MAX, ARG_MIN), and Hardmax (ARG_MAX then ONE_HOT).

TFLite's kernels drop the reduced axis (keepdims=1 adds a RESHAPE), take the axis as an int32
input, and return the first extreme index (a strict comparison). select_last_index=1 reverses the
axis first (a GATHER with constant reversed indices) and maps the index j back to n-1-j.
The output is int32 inside the graph (ONNX's int64 is narrowed).
Hardmax is 1 at the first maximum along the axis and 0 elsewhere: ONE_HOT of ARG_MAX's index
along that axis (opset 13); before opset 13 along the flattened trailing dimensions from the
axis on (a RESHAPE to 2-D around it).
"""

from __future__ import annotations

import numpy as np

from .layout import reshape
from .registry import QuantRule, onnx_op, tflite_op
from .versions import by_input_dtype


def _evaluate(fn):
    def evaluate(inputs, op):
        x, axis = inputs
        return [fn(x, axis=int(np.reshape(axis, -1)[0]) % x.ndim).astype(np.int32)]
    return evaluate


def remap_dropped_axis(axis: int, perm) -> tuple[int, tuple[int, ...]]:
    """For an op that removes `axis` of transpose(x, perm): the axis of x it removes, and the
    permutation that turns its new output (on x) into the old one."""
    rank = len(perm)
    new_axis = perm[axis]
    kept_old = [perm[a] for a in range(rank) if a != axis]   # x-axes in the old output order
    kept_new = [a for a in range(rank) if a != new_axis]    # x-axes in the new output order
    return new_axis, tuple(kept_new.index(a) for a in kept_old)


def _remap_axis(op, model, perm):
    axis = model.constant(op.inputs[1])
    if axis is None:
        return None
    new_axis, out_perm = remap_dropped_axis(int(np.reshape(axis, -1)[0]) % len(perm), perm)
    model.set_input(op, 1, model.add_constant("axis", np.array([new_axis], np.int32)))
    return out_perm


_argmax_version = by_input_dtype({np.bool_: 3, np.int8: 2})  # the output type does not count


for _name, _options, _fn in [("ARG_MAX", "ArgMaxOptions", np.argmax),
                             ("ARG_MIN", "ArgMinOptions", np.argmin)]:
    tflite_op(_name, options=_options, evaluate=_evaluate(_fn), layout="axis", quant=QuantRule(output="none"),
              layout_inputs=(0,), remap_axes=_remap_axis, version=_argmax_version)


def _reversed_along(ctx, x: str, axis: int) -> str:
    """x with `axis` reversed: GATHER with constant indices n-1, ..., 0."""
    n = ctx.shape(x)[axis]
    out = ctx.tensor(x + "_rev", ctx.shape(x), ctx.dtype(x))
    indices = ctx.constant("reverse_indices", np.arange(n - 1, -1, -1, dtype=np.int32))
    ctx.add_op("GATHER", [x, indices], [out], {"axis": axis, "batch_dims": 0})
    return out


@onnx_op("ArgMax", "ArgMin")
def import_argmax(node, ctx):
    x, y = node.inputs[0], node.outputs[0]
    shape = ctx.shape(x)
    axis = node.attr("axis", 0) % len(shape)
    keep = bool(node.attr("keepdims", 1))
    last = bool(node.attr("select_last_index", 0))
    reduced = tuple(d for a, d in enumerate(shape) if a != axis)
    source = _reversed_along(ctx, x, axis) if last else x
    out = y if not keep and not last else ctx.tensor(y + "_idx", reduced, np.int32)
    op_type = "ARG_MAX" if node.op_type == "ArgMax" else "ARG_MIN"
    ctx.add_op(op_type, [source, ctx.constant("axis", np.array([axis], np.int32))], [out],
               {"output_type": np.int32})
    if last:
        flipped = y if not keep else ctx.tensor(y + "_last", reduced, np.int32)
        ctx.add_op("SUB", [ctx.constant("last_index", np.array(shape[axis] - 1, np.int32)), out],
                   [flipped])
        out = flipped
    if keep:
        reshape(ctx, out, ctx.shape(y), y)


@onnx_op("Hardmax")
def import_hardmax(node, ctx):
    x, y = node.inputs[0], node.outputs[0]
    shape = tuple(ctx.shape(x))
    dtype = np.dtype(ctx.dtype(x))
    if dtype.kind != "f":
        raise ctx.error(f"input {x!r} has dtype {dtype}; Hardmax takes floats")
    rank = len(shape)
    axis = node.attr("axis", -1 if ctx.opset >= 13 else 1)
    if not -rank <= axis < max(rank, 1):
        raise ctx.error(f"axis {axis} is outside [{-rank}, {rank - 1}] for an input of rank {rank}")
    axis %= max(rank, 1)
    source = x
    if ctx.opset < 13:  # the coerced 2-D matrix [prod(shape[:axis]), prod(shape[axis:])]
        matrix = (int(np.prod(shape[:axis], dtype=np.int64)), int(np.prod(shape[axis:], dtype=np.int64)))
        source, axis = reshape(ctx, x, matrix), 1
    n = ctx.shape(source)[axis]
    reduced = tuple(d for a, d in enumerate(ctx.shape(source)) if a != axis)
    index = ctx.tensor(y + "_index", reduced, np.int32)
    ctx.add_op("ARG_MAX", [source, ctx.constant("axis", np.array([axis], np.int32))], [index],
               {"output_type": np.int32})
    out = y if source == x else ctx.tensor(y + "_2d", ctx.shape(source), dtype)
    ctx.add_op("ONE_HOT", [index, ctx.constant("depth", np.array(n, np.int32)),
                           ctx.constant("one", np.array(1, dtype)), ctx.constant("zero", np.array(0, dtype))],
               [out], {"axis": axis})
    if out != y:
        reshape(ctx, out, shape, y)
