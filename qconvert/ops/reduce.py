"""Reductions: ReduceMean, ReduceSum, ReduceMax, ReduceMin, ReduceProd as MEAN, SUM, REDUCE_MAX,
REDUCE_MIN, REDUCE_PROD; the others composed around SUM: ReduceL2 SQRT(SUM(x*x)), ReduceSumSquare
SUM(x*x), ReduceL1 SUM(ABS(x)), ReduceLogSum LOG(SUM(x)), and ReduceLogSumExp in the overflow-free
form onnxruntime computes, m + LOG(SUM(EXP(x - m))) with m the REDUCE_MAX over the same axes.
Axes are an attribute before opset 18 (13 for ReduceSum) and an input after."""

from __future__ import annotations

import numpy as np

from .registry import FREE, FREE16, SAME16, onnx_op, tflite_op
from .versions import by_input_dtype


def _evaluate(fn):
    def evaluate(inputs, op):
        x, axes = inputs
        axes = tuple(int(a) % x.ndim for a in np.atleast_1d(axes))
        extra = {}
        if fn in (np.max, np.min) and x.size == 0:  # an empty reduction: TFLite's starting value
            limits = np.finfo(x.dtype) if x.dtype.kind == "f" else np.iinfo(x.dtype)
            extra["initial"] = limits.min if fn is np.max else limits.max
        return [fn(x, axis=axes, keepdims=bool(op.options.get("keep_dims")), **extra).astype(x.dtype)]
    return evaluate


def remap_reduce_axes(op, model, perm):
    """The op reduced axes A of transpose(x, perm); on x it reduces perm[A]."""
    axes = model.constant(op.inputs[1])
    if axes is None:
        return None
    rank = len(perm)
    axes = sorted(int(a) % rank for a in np.atleast_1d(axes))
    new_axes = sorted(perm[a] for a in axes)
    model.set_input(op, 1, model.add_constant("axes", np.array(new_axes, dtype=np.int32)))
    if op.options.get("keep_dims"):
        return perm
    kept_old = [perm[a] for a in range(rank) if a not in axes]   # x-axes in old output order
    kept_new = [a for a in range(rank) if a not in new_axes]     # x-axes in new output order
    return tuple(kept_new.index(a) for a in kept_old)


# op_version.cc per reducer (uint8 is version 1 for all of them; REDUCE_ANY/ALL have no rule).
_INT8_INT16 = {np.int16: 3, np.int8: 2}
# int8: MEAN and SUM rescale (free output); REDUCE_MAX/MIN pick input values (same params).
# REDUCE_PROD stays float: its int8 kernel multiplies in the quantized domain, losing precision
# fast with the number of reduced elements.
for _name, _fn, _table, _quant in [
        ("MEAN", np.mean, _INT8_INT16, FREE16), ("SUM", np.sum, {np.int8: 2}, FREE),
        ("REDUCE_MAX", np.max, _INT8_INT16, SAME16), ("REDUCE_MIN", np.min, _INT8_INT16, SAME16),
        ("REDUCE_PROD", np.prod, {np.int8: 2, np.int16: 2}, None),
        ("REDUCE_ANY", np.any, {}, None), ("REDUCE_ALL", np.all, {}, None)]:
    tflite_op(_name, options="ReducerOptions", evaluate=_evaluate(_fn), layout="axis",
              layout_inputs=(0,), remap_axes=remap_reduce_axes, version=by_input_dtype(_table),
              quant=_quant)

_REDUCERS = {"ReduceMean": "MEAN", "ReduceSum": "SUM", "ReduceMax": "REDUCE_MAX",
             "ReduceMin": "REDUCE_MIN", "ReduceProd": "REDUCE_PROD", "ReduceL2": "SUM",
             "ReduceSumSquare": "SUM", "ReduceL1": "SUM", "ReduceLogSum": "SUM",
             "ReduceLogSumExp": "SUM"}


# Why computed axes are refused (TFLite's reductions take an axis tensor, but the output's shape
# and the layout pass's remapping of the axes need their values).
_AXES_NEEDED = ("the output's shape follows from them, so qconvert needs them constant: make them an "
                "initializer, or compute them from constants and input shapes only (the loader "
                "folds those)")


@onnx_op(*_REDUCERS)
def import_reduce(node, ctx):
    x, y = node.inputs[0], node.outputs[0]
    rank = ctx.rank(x)
    axes = node.attr("axes")
    if len(node.inputs) > 1 and node.inputs[1]:
        axes = ctx.require_const(node.inputs[1], "reduction axes", _AXES_NEEDED)
    keep = bool(node.attr("keepdims", 1))
    if axes is None or len(np.atleast_1d(axes)) == 0:
        if node.attr("noop_with_empty_axes", 0):
            ctx.add_op("IDENTITY", [x], [y])
            return
        axes = range(rank)
    axes = np.array(sorted(int(a) % rank for a in np.atleast_1d(axes)), dtype=np.int32)
    axes_name = ctx.constant("axes", axes)
    dtype = ctx.dtype(x)

    def step(op_type: str, inputs: list[str], shape, hint: str, options=None) -> str:
        out = ctx.tensor(hint, shape, dtype)
        ctx.add_op(op_type, inputs, [out], options)
        return out

    source, shift = x, None
    if node.op_type in ("ReduceL2", "ReduceSumSquare"):
        source = step("MUL", [x, x], ctx.shape(x), x + "_sq")
    elif node.op_type == "ReduceL1":
        source = step("ABS", [x], ctx.shape(x), x + "_abs")
    elif node.op_type == "ReduceLogSumExp":
        kept_shape = tuple(1 if a in axes else d for a, d in enumerate(ctx.shape(x)))
        peak = step("REDUCE_MAX", [x, axes_name], kept_shape, x + "_max", {"keep_dims": True})
        source = step("EXP", [step("SUB", [x, peak], ctx.shape(x), x + "_shifted")], ctx.shape(x),
                      x + "_exp")
        shift = peak if keep else step("REDUCE_MAX", [x, axes_name], ctx.shape(y), x + "_max_out",
                                       {"keep_dims": False})
    after = {"ReduceL2": "SQRT", "ReduceLogSum": "LOG", "ReduceLogSumExp": "LOG"}.get(node.op_type)
    out = y if after is None else ctx.tensor(y + "_sum", ctx.shape(y), dtype)
    op_type = _REDUCERS[node.op_type]
    if dtype == np.bool_:  # TFLite's max/min kernels have no bool variant
        op_type = {"REDUCE_MAX": "REDUCE_ANY", "REDUCE_MIN": "REDUCE_ALL"}.get(op_type, op_type)
    ctx.add_op(op_type, [source, axes_name], [out], {"keep_dims": keep})
    if after is not None and shift is None:
        ctx.add_op(after, [out], [y])
    elif after is not None:
        ctx.add_op("ADD", [step(after, [out], ctx.shape(y), y + "_log"), shift], [y])
