"""Concat (CONCATENATION) and Split (SPLIT / SPLIT_V); both carry an axis the layout pass remaps."""

from __future__ import annotations

import numpy as np

from .registry import SAME16, QuantRule, onnx_op, tflite_op
from .versions import by_input_dtype


def _remap_axis_option(op, model, perm):
    rank = len(perm)
    op.options["axis"] = perm[op.options["axis"] % rank]
    return perm


def remap_axis_input(index):
    def remap(op, model, perm):
        axis = model.constant(op.inputs[index])
        if axis is None:
            return None
        new_axis = np.array(perm[int(axis) % len(perm)], np.int32)
        model.set_input(op, index, model.add_constant("axis", new_axis))
        return perm
    return remap


_concat_version = by_input_dtype({np.uint32: 4, np.int16: 3, np.int8: 2})  # uint8 is 1


def _evaluate_split(inputs, op):
    axis, x = int(inputs[0]), inputs[1]
    return np.split(x, op.options["num_splits"], axis=axis)


def _evaluate_split_v(inputs, op):
    x, sizes, axis = inputs
    return np.split(x, np.cumsum(sizes)[:-1], axis=int(axis))


tflite_op("CONCATENATION", options="ConcatenationOptions", layout="axis",
          quant=QuantRule(activations=None, output="same", int16=True),
          remap_axes=_remap_axis_option, version=_concat_version,
          evaluate=lambda inputs, op: [np.concatenate(inputs, axis=op.options["axis"])])
tflite_op("SPLIT", options="SplitOptions", layout="axis", layout_inputs=(1,),
          quant=QuantRule(activations=(1,), output="same", int16=True),
          remap_axes=remap_axis_input(0), evaluate=_evaluate_split,
          version=by_input_dtype({np.int16: 4, np.int32: 3, np.int8: 2}, index=1))  # 0 is the axis
tflite_op("SPLIT_V", options="SplitVOptions", layout="axis", layout_inputs=(0,), quant=SAME16,
          remap_axes=remap_axis_input(2), evaluate=_evaluate_split_v,
          version=by_input_dtype({np.int8: 2}))


@onnx_op("Concat")
def import_concat(node, ctx):
    inputs = [n for n in node.inputs if n and np.prod(ctx.shape(n)) > 0]
    axis = node.attr("axis") % ctx.rank(node.outputs[0])
    if len(inputs) == 1:
        ctx.add_op("IDENTITY", inputs, node.outputs)
        return
    ctx.add_op("CONCATENATION", inputs, node.outputs, {"axis": axis})


@onnx_op("Split")
def import_split(node, ctx):
    x = node.inputs[0]
    axis = node.attr("axis", 0) % ctx.rank(x)
    sizes = [ctx.shape(o)[axis] for o in node.outputs]
    if len(set(sizes)) == 1:
        ctx.add_op("SPLIT", [ctx.constant("axis", np.array(axis, np.int32)), x], node.outputs,
                   {"num_splits": len(sizes)})
    else:
        ctx.add_op("SPLIT_V", [x, ctx.constant("sizes", np.array(sizes, np.int32)),
                               ctx.constant("axis", np.array(axis, np.int32))], node.outputs,
                   {"num_splits": len(sizes)})
