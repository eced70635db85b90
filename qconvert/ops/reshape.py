"""Ops that move data without computing: Reshape, Flatten, Squeeze, Unsqueeze (RESHAPE),
Transpose (TRANSPOSE), and Identity/Dropout (IDENTITY, removed by transforms/remove_identity);
TFLite's SHAPE, which a dynamic dimension's run-time sizes start from."""

from __future__ import annotations

import numpy as np

from .layout import reshape
from .registry import SAME16, onnx_op, tflite_op
from .versions import INT16, by_input_dtype, input_dtype, input_rank


def _evaluate_reshape(inputs, op):
    return [inputs[0].reshape(inputs[1] if len(inputs) > 1 and inputs[1] is not None
                              else op.options["new_shape"])]


def _evaluate_transpose(inputs, op):
    return [np.transpose(inputs[0], inputs[1])]


def _transpose_version(op, model):
    """op_version.cc's TRANSPOSE: rank > 5, int16, rank 5, then bool / int8."""
    rank = input_rank(op, model)
    if rank > 5:
        return 6
    if input_dtype(op, model) == INT16:
        return 5
    if rank > 4:
        return 4
    return _transpose_dtype_version(op, model)


_transpose_dtype_version = by_input_dtype({np.bool_: 3, np.int8: 2})


tflite_op("RESHAPE", options="ReshapeOptions", evaluate=_evaluate_reshape, quant=SAME16)
tflite_op("TRANSPOSE", options="TransposeOptions", evaluate=_evaluate_transpose, quant=SAME16,
          version=_transpose_version)
tflite_op("IDENTITY", evaluate=lambda inputs, op: [inputs[0]])
# A tensor's shape when the model runs: what a dimension left dynamic computes from
# (onnx/dynamic_dims.py). No `evaluate`: its input's shape is the one thing folding cannot know.
tflite_op("SHAPE", options="ShapeOptions")


@onnx_op("Reshape", "Flatten", "Squeeze", "Unsqueeze")
def import_reshape(node, ctx):
    """All four only change the shape, which shape inference already computed for the output;
    a Reshape whose target is computed when the model runs, in a model loaded again with the
    shape arithmetic computed that the dynamic dimensions could not follow
    (ctx.sizes_computed), reads it as a tensor, so that the output follows it (a window
    partition of a padded size, H / 7, or a batch times a length, which no constant slope
    follows)."""
    x, y = node.inputs[0], node.outputs[0]
    if np.prod(ctx.shape(x), dtype=np.int64) != np.prod(ctx.shape(y), dtype=np.int64):
        raise ctx.error(f"cannot reshape {list(ctx.shape(x))} to {list(ctx.shape(y))}: the "
                        "element counts differ")
    target = node.inputs[1] if node.op_type == "Reshape" and len(node.inputs) > 1 else ""
    if _run_time_target(ctx, target):
        ctx.add_op("RESHAPE", [x, target], [y])
        return
    reshape(ctx, x, ctx.shape(y), y)


def _run_time_target(ctx, target: str) -> bool:
    """Whether a Reshape's `target` is computed when the model runs from sizes that move, with
    no entry TFLite's RESHAPE reads otherwise (ONNX's 0: a dimension copied), at most one -1."""
    if not (target and ctx.sizes_computed and target in ctx.run_time_shaped and target in ctx.at_sizes):
        return False
    value = np.ravel(ctx.at_sizes[target])
    return bool(np.all(value != 0) and np.sum(value == -1) <= 1 and ctx.dtype(target) == np.int32)


@onnx_op("Transpose")
def import_transpose(node, ctx):
    x, y = node.inputs[0], node.outputs[0]
    perm = node.attr("perm", list(reversed(range(ctx.rank(x)))))
    ctx.add_op("TRANSPOSE", [x, ctx.constant("perm", np.array(perm, dtype=np.int32))], [y])


@onnx_op("Identity", "Dropout")
def import_identity(node, ctx):
    ctx.add_op("IDENTITY", node.inputs[:1], node.outputs[:1])
    if len(node.outputs) > 1 and node.outputs[1] in ctx.model.arrays:
        # Dropout's mask in inference is all true.
        mask = node.outputs[1]
        ctx.model.arrays[mask].data = np.ones(ctx.shape(mask), dtype=ctx.dtype(mask))
