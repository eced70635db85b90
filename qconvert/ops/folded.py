"""Ops the loader evaluates at load time: Shape, Size, Constant, ConstantOfShape, Range, EyeLike.

loader._Graph.fold_constants computes them whenever their inputs are constant (and Shape/Size of
any tensor, since every shape is static), so these importers normally never run. Shape, Size and
EyeLike only depend on their input's static shape, so they still become constants here; a Range
of computed operands is TFLite's RANGE, its length set when the model runs (registry.RUN_TIME);
ConstantOfShape with a computed input stays refused.
"""

from __future__ import annotations

import numpy as np
from onnx import helper

from ..errors import FOLDED_BYTES
from .layout import reshape
from .registry import UNKNOWN, onnx_op, onnx_types, tflite_op


@onnx_op("Shape")
def import_shape(node, ctx):
    """A shape the loader knows is a constant; one the values decide (ctx.run_time_shaped: a
    NonZero's output, what follows it), or one marked to be computed (the loader's `computed`),
    TFLite's SHAPE, its entries start:end sliced."""
    x, y = node.inputs[0], node.outputs[0]
    rank = ctx.rank(x)
    start, end = slice(node.attr("start", 0), node.attr("end", rank)).indices(rank)[:2]
    if x not in ctx.run_time_shaped and y not in ctx.run_time_shaped:
        ctx.set_constant(y, np.array(ctx.shape(x), dtype=np.int64)[start:end])
        return
    shape_of(ctx, x, start, end, y)


def shape_of(ctx, x: str, start: int = 0, end: int | None = None, y: str | None = None) -> str:
    """x's shape[start:end] as an int32 vector: a constant, or TFLite's SHAPE (sliced) when the
    values decide it (ctx.run_time_shaped), into `y` (a new tensor when None). An op that
    writes a tensor of x's shape (SCATTER_ND into its data) takes it so, rather than a constant
    the dynamic dimensions' probe would have to tell from the other counts."""
    rank = ctx.rank(x)
    end = rank if end is None else end
    if x not in ctx.run_time_shaped and y is None:
        return ctx.constant("shape", np.array(ctx.shape(x), np.int32)[start:end])
    y = y or ctx.tensor("shape", (max(end - start, 0),), np.int32)
    if (start, end) == (0, rank):
        ctx.add_op("SHAPE", [x], [y], {"out_type": np.int32})
        return y
    whole = ctx.tensor("shape", (rank,), np.int32)
    ctx.add_op("SHAPE", [x], [whole], {"out_type": np.int32})
    ctx.add_op("SLICE", [whole, ctx.constant("begin", np.array([start], np.int32)),
                         ctx.constant("size", np.array([max(end - start, 0)], np.int32))], [y])
    return y


@onnx_op("Size")
def import_size(node, ctx):
    """As Shape: a constant, or the product of the SHAPE when the values decide it."""
    x, y = node.inputs[0], node.outputs[0]
    if x not in ctx.run_time_shaped and y not in ctx.run_time_shaped:
        ctx.set_constant(y, np.prod(ctx.shape(x), dtype=np.int64))
        return
    whole = ctx.tensor("shape", (ctx.rank(x),), np.int32)
    ctx.add_op("SHAPE", [x], [whole], {"out_type": np.int32})
    ctx.add_op("REDUCE_PROD", [whole, ctx.constant("axis", np.array([0], np.int32))], [y],
               {"keep_dims": False})


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


tflite_op("RANGE", options="RangeOptions")


@onnx_types("Range", values=True, run_time=True)
def _range_types(shapes, dtypes, attrs, values):
    """A Range of computed operands: where they are shapes known at the loader's sizes
    (loader._at_sizes: arange(num_classes) of a [count, 91] Shape), that length, which moves
    with those sizes as any shape does; else a length known when it runs (UNKNOWN: they may be
    known later; then RUN_TIME)."""
    if all(v is not None for v in values[:3]):
        start, limit, delta = (float(np.ravel(v)[0]) for v in values[:3])
        if delta != 0:
            return [((max(int(np.ceil((limit - start) / delta)), 0),), dtypes[0])]
    return [((UNKNOWN,), dtypes[0])]


@onnx_op("Range")
def import_range(node, ctx):
    """Operands computed at run time (constant ones are folded): TFLite's RANGE, whose length
    the interpreter sets when it runs; scalars of one dtype (int64 computes as int32)."""
    names = node.inputs[:3]
    if any(ctx.shape(n) not in ((), (1,)) for n in names):
        raise ctx.error("start, limit and delta must be scalars")
    scalars = []
    for name in names:
        if ctx.shape(name) == (1,):
            name = reshape(ctx, name, ())
        scalars.append(name)
    ctx.add_op("RANGE", scalars, node.outputs[:1])


@onnx_types("ConstantOfShape", values=True, run_time=True)
def _constant_of_shape_types(shapes, dtypes, attrs, values):
    """A shape computed when the model runs: its value at the loader's sizes where known, else
    each of its entries a size the values decide (UNKNOWN: it may be known later)."""
    value = attrs.get("value")
    dtype = (helper.tensor_dtype_to_np_dtype(value.data_type) if value is not None
             else np.dtype(np.float32))
    if values[0] is not None:  # the shape's value at the loader's sizes (loader._at_sizes)
        return [(tuple(int(v) for v in np.ravel(values[0])), dtype)]
    if shapes[0] is None or len(shapes[0]) != 1:
        return [None]
    return [((UNKNOWN,) * shapes[0][0], dtype)]


@onnx_op("ConstantOfShape")
def import_constant_of_shape(node, ctx):
    """A computed shape the values decide (ctx.run_time_shaped): TFLite's FILL; other computed
    shapes stay refused (the loader folds those it can)."""
    shape, y = node.inputs[0], node.outputs[0]
    if shape in ctx.run_time_shaped:
        value = node.attr("value")
        value = (np.zeros(1, np.float32) if value is None else np.asarray(value)).reshape(())
        ctx.add_op("FILL", [shape, ctx.constant("value", value.astype(ctx.dtype(y)))], [y])
        return
    raise ctx.error("ConstantOfShape's shape is computed at run time, so its output's shape follows "
                    "from values and TFLite needs it known: compute it from constants and input "
                    "shapes only (the loader folds those; pin dynamic dimensions with --input-shape)")
