"""Ops the loader evaluates at load time: Shape, Size, Constant, ConstantOfShape, Range, EyeLike.

loader._Graph.fold_constants computes them whenever their inputs are constant (and Shape/Size of
any tensor, since every shape is static), so these importers normally never run. Shape, Size and
EyeLike only depend on their input's static shape, so they still become constants here; Range and
ConstantOfShape with a computed input would have a data-dependent output shape, which a static
TFLite graph cannot express.
"""

from __future__ import annotations

import numpy as np
from onnx import helper

from ..errors import FOLDED_BYTES
from .registry import onnx_op


@onnx_op("Shape")
def import_shape(node, ctx):
    shape = np.array(ctx.shape(node.inputs[0]), dtype=np.int64)
    rank = len(shape)
    start, end = node.attr("start", 0), node.attr("end", rank)
    ctx.set_constant(node.outputs[0], shape[start:end])


@onnx_op("Size")
def import_size(node, ctx):
    ctx.set_constant(node.outputs[0], np.prod(ctx.shape(node.inputs[0]), dtype=np.int64))


@onnx_op("EyeLike")
def import_eye_like(node, ctx):
    rows, cols = ctx.shape(node.inputs[0])
    dtype = node.attr("dtype")
    dtype = ctx.dtype(node.inputs[0]) if dtype is None else helper.tensor_dtype_to_np_dtype(dtype)
    # sized in its own dtype before it is made (an activation's shape may be of any size)
    FOLDED_BYTES.check(rows * cols * np.dtype(dtype).itemsize, f"node {node.name!r} (EyeLike)")
    ctx.set_constant(node.outputs[0], np.eye(rows, cols, k=node.attr("k", 0), dtype=dtype))


@onnx_op("Constant")
def import_constant(node, ctx):
    for name in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        if node.attr(name) is not None:
            ctx.set_constant(node.outputs[0], node.attr(name))
            return
    raise ctx.error("only numeric Constant values are supported (string/sparse are not)")


@onnx_op("Range")
def import_range(node, ctx):
    raise ctx.error("Range's start, limit or delta is computed at run time, so its output's length "
                    "follows from values and TFLite needs it known: make them constants, or compute "
                    "them from constants and input shapes only (the loader folds those)")


@onnx_op("ConstantOfShape")
def import_constant_of_shape(node, ctx):
    raise ctx.error("ConstantOfShape's shape is computed at run time, so its output's shape follows "
                    "from values and TFLite needs it known: compute it from constants and input "
                    "shapes only (the loader folds those; pin dynamic dimensions with --input-shape)")
