"""Slice (attributes before opset 10, constant inputs since) as SLICE, or STRIDED_SLICE when a step
is not 1. Constant indices are resolved at import as ONNX's Slice spec does (_resolved: negative
indices count from the end, out-of-range ones clamp to the dimension), so the TFLite op only ever
sees in-range begins; the one end that cannot be written as an index (a negative step running past
index 0) uses STRIDED_SLICE's end_mask. Starts, ends or steps computed at run time are resolved the
same way by ops in the graph (_onnx_bounds) before STRIDED_SLICE reads them, when the output's
shape is known all the same. Also the `slice_tensor` / `strided_slice` helpers that other
importers use to cut tensors.
"""

from __future__ import annotations

import numpy as np

from .registry import SAME16, onnx_op, tflite_op

MAX_RANK = 5  # TFLite's SLICE and STRIDED_SLICE kernels handle up to 5 dimensions


# --- TFLite ops ---------------------------------------------------------------------------------
def _bit(mask: int, axis: int) -> bool:
    return bool(int(mask) >> axis & 1)


def _permute_bits(mask: int, perm) -> int:
    """Bit i of the old mask becomes bit perm[i] (axis i of transpose(x, perm) is axis perm[i] of x)."""
    return sum(1 << p for i, p in enumerate(perm) if _bit(mask, i))


def _permuted(value: np.ndarray, perm) -> np.ndarray:
    """Entry i (about axis i of transpose(x, perm)) moves to position perm[i] (axis perm[i] of x)."""
    result = np.empty_like(value)
    result[list(perm)] = value
    return result


def _evaluate_slice(inputs, op):
    x, begin, size = inputs
    index = tuple(slice(int(b), None if s < 0 else int(b) + int(s)) for b, s in zip(begin, size))
    return [x[index]]


def _evaluate_strided_slice(inputs, op):
    """TF's strided slice for begin/end/shrink masks and `offset` (the variants qconvert emits)."""
    x, begin, end, strides = inputs
    o = op.options
    if o.get("ellipsis_mask", 0) or o.get("new_axis_mask", 0):
        raise ValueError("STRIDED_SLICE evaluation: ellipsis and new-axis masks are not supported")
    index, shrink = [], []
    for axis in range(len(begin)):
        b, e, s = int(begin[axis]), int(end[axis]), int(strides[axis])
        if o.get("offset"):
            e += b
        if _bit(o.get("shrink_axis_mask", 0), axis):
            b = b + x.shape[axis] if b < 0 else b
            index.append(slice(b, b + 1))
            shrink.append(axis)
            continue
        index.append(slice(None if _bit(o.get("begin_mask", 0), axis) else b,
                           None if _bit(o.get("end_mask", 0), axis) else e, s))
    return [np.squeeze(x[tuple(index)], axis=tuple(shrink))]


def _remap_slice(op, model, perm):
    """SLICE read transpose(x, perm): permute its begin and size vectors so that it reads x."""
    begin, size = model.constant(op.inputs[1]), model.constant(op.inputs[2])
    if begin is None or size is None:
        return None
    model.set_input(op, 1, model.add_constant("begin", _permuted(begin, perm)))
    model.set_input(op, 2, model.add_constant("size", _permuted(size, perm)))
    return perm


def _remap_strided_slice(op, model, perm):
    """As for SLICE, plus the begin/end mask bits; shrink, new-axis and ellipsis masks change the
    rank, so those ops keep their transpose."""
    o = op.options
    if o.get("shrink_axis_mask", 0) or o.get("new_axis_mask", 0) or o.get("ellipsis_mask", 0):
        return None
    values = [model.constant(n) for n in op.inputs[1:4]]
    if any(v is None or v.shape != (len(perm),) for v in values):
        return None
    for k, (hint, value) in enumerate(zip(("begin", "end", "strides"), values)):
        model.set_input(op, 1 + k, model.add_constant(hint, _permuted(value, perm)))
    for mask in ("begin_mask", "end_mask"):
        o[mask] = _permute_bits(o.get(mask, 0), perm)
    return perm


def _slice_version(op, model):
    x = model.arrays[op.inputs[0]]
    if x.dtype == np.uint32:
        return 6
    if len(x.shape) > 4:
        return 5
    if x.dtype == np.int16:
        return 4
    return 2 if x.dtype == np.int8 else 1


def _strided_slice_version(op, model):
    x, o = model.arrays[op.inputs[0]], op.options
    if o.get("offset"):
        return 8
    if x.dtype == np.uint32:
        return 7
    if o.get("ellipsis_mask", 0) or o.get("new_axis_mask", 0):
        return 6
    if len(x.shape) > 4:
        return 4
    if x.dtype == np.bool_:
        return 3
    return 2 if x.dtype == np.int8 else 1


tflite_op("SLICE", options="SliceOptions", quant=SAME16, version=_slice_version, evaluate=_evaluate_slice,
          layout="axis", layout_inputs=(0,), remap_axes=_remap_slice)
tflite_op("STRIDED_SLICE", options="StridedSliceOptions", quant=SAME16, version=_strided_slice_version,
          evaluate=_evaluate_strided_slice, layout="axis", layout_inputs=(0,),
          remap_axes=_remap_strided_slice)


# --- helpers for importers ----------------------------------------------------------------------
def _length(begin: int, end: int, stride: int, end_masked: bool, dim: int) -> int:
    """Elements a resolved (in-range begin) strided slice of one axis takes."""
    if end_masked:
        end = dim if stride > 0 else -1
    return len(range(begin, end, stride))


def slice_tensor(ctx, x: str, begin, size, y: str | None = None) -> str:
    """SLICE of x (in-range begin, size per axis); returns the output name."""
    begin, size = np.asarray(begin, np.int32), np.asarray(size, np.int32)
    if y is None:
        y = ctx.tensor(x + "_slice", size, ctx.dtype(x))
    ctx.add_op("SLICE", [x, ctx.constant("begin", begin), ctx.constant("size", size)], [y])
    return y


def strided_slice(ctx, x: str, begin, end, strides, y: str | None = None, end_mask: int = 0) -> str:
    """STRIDED_SLICE of x with resolved (non-negative) begins; returns the output name."""
    if y is None:
        shape = [_length(b, e, s, _bit(end_mask, a), d)
                 for a, (b, e, s, d) in enumerate(zip(begin, end, strides, ctx.shape(x)))]
        y = ctx.tensor(x + "_slice", shape, ctx.dtype(x))
    inputs = [x] + [ctx.constant(hint, np.asarray(v, np.int32))
                    for hint, v in (("begin", begin), ("end", end), ("strides", strides))]
    ctx.add_op("STRIDED_SLICE", inputs, [y], {"begin_mask": 0, "end_mask": int(end_mask),
                                              "ellipsis_mask": 0, "new_axis_mask": 0,
                                              "shrink_axis_mask": 0, "offset": False})
    return y


# --- ONNX importer ------------------------------------------------------------------------------
def _slice_params(node, ctx):
    """(starts, ends, axes, steps) as Python ints, from attributes or constant inputs."""
    rank = ctx.rank(node.inputs[0])
    if ctx.opset < 10:
        starts, ends = node.attr("starts"), node.attr("ends")
        axes, steps = node.attr("axes"), None
    else:
        def const(i, what):
            name = node.inputs[i] if len(node.inputs) > i else ""
            return ctx.require_const(name, f"Slice {what}", _AXES_NEEDED) if name else None
        starts, ends, axes, steps = (const(i, w) for i, w in
                                     enumerate(("starts", "ends", "axes", "steps"), start=1))
    starts = [int(v) for v in np.atleast_1d(starts)]
    ends = [int(v) for v in np.atleast_1d(ends)]
    axes = list(range(len(starts))) if axes is None else [int(a) for a in np.atleast_1d(axes)]
    steps = [1] * len(starts) if steps is None else [int(s) for s in np.atleast_1d(steps)]
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ctx.error("starts, ends, axes and steps must have the same length")
    if any(not -rank <= a < rank for a in axes):
        raise ctx.error(f"axes {axes} out of range for rank {rank}")
    if 0 in steps:
        raise ctx.error("a step of 0 is invalid")
    return starts, ends, [a % rank for a in axes], steps


_AXES_NEEDED = ("the axes say which dimensions STRIDED_SLICE cuts, so qconvert needs them constant: "
                "make them an initializer")


def _computed_slice(node, ctx, names) -> None:
    """STRIDED_SLICE reading starts, ends or steps computed at run time, or slicing a tensor whose
    shape the values decide (ctx.run_time_shaped: its dimensions are read by SHAPE when it runs,
    so an end of 300 stays 300 whatever the count the loader sized it at). The importer only sees
    such a Slice when the output's shape is known (the model declares it: shape inference cannot
    know it from computed values), and that is the shape the rest of the graph is built for. Axes
    must be constants: they say which dimensions are cut. The graph resolves the computed values
    as ONNX does (_onnx_bounds) before STRIDED_SLICE reads them."""
    x, y = node.inputs[0], node.outputs[0]
    rank = ctx.rank(x)
    starts, ends, axes_name, steps = names
    if rank > MAX_RANK:
        raise ctx.error(f"rank {rank}: TFLite slices tensors of up to {MAX_RANK} dimensions")
    count = int(np.prod(ctx.shape(starts)))
    axes = (list(range(count)) if not axes_name else
            [int(a) for a in np.atleast_1d(ctx.require_const(axes_name, "Slice axes", _AXES_NEEDED))])
    if any(not -rank <= a < rank for a in axes):
        raise ctx.error(f"axes {axes} out of range for rank {rank}")
    axes = [a % rank for a in axes]
    if len(set(axes)) != len(axes):
        raise ctx.error(f"axes {axes} repeat an axis")
    whole = sum(1 << a for a in range(rank) if a not in axes)  # axes not cut: begin/end masked
    if steps and ctx.const(steps) is not None and not np.all(ctx.const(steps)):
        raise ctx.error("a step of 0 is invalid")
    vectors = [_per_axis(ctx, y, name, default, hint, axes, rank)
               for name, default, hint in ((starts, 0, "begin"), (ends, 0, "end"), (steps, 1, "strides"))]
    dims = np.array(ctx.shape(x), np.int32)
    if x in ctx.run_time_shaped:
        dims = ctx.tensor(f"{y}_dims", (rank,), np.int32)
        ctx.add_op("SHAPE", [x], [dims], {"out_type": np.int32})
    begin, end = _onnx_bounds(ctx, y, *vectors, dims)
    inputs = [x] + [ctx.constant(h, v) if isinstance(v, np.ndarray) else v
                    for h, v in (("begin", begin), ("end", end), ("strides", vectors[2]))]
    ctx.add_op("STRIDED_SLICE", inputs, [y], {"begin_mask": whole, "end_mask": whole,
                                              "ellipsis_mask": 0, "new_axis_mask": 0,
                                              "shrink_axis_mask": 0, "offset": False})


def _per_axis(ctx, y: str, name: str, default: int, hint: str, axes: list, rank: int):
    """The rank-long vector of one Slice parameter: entry axes[i] from `name`'s i-th value, the
    others `default`; a numpy array when `name` is a constant (or omitted), else a tensor
    GATHERed from it at run time."""
    count = len(axes)
    value = ctx.const(name) if name else np.full(count, default, np.int32)
    if value is not None and value.size != count:
        raise ctx.error(f"Slice {hint} has {value.size} values for {count} sliced axes")
    if value is not None:
        vector = np.full(rank, default, np.int32)
        vector[axes] = np.asarray(value, np.int32).reshape(-1)
        return vector
    if ctx.dtype(name) != np.int32 or ctx.shape(name) != (count,):
        raise ctx.error(f"Slice {hint} {name!r} has shape {list(ctx.shape(name))} and dtype "
                        f"{ctx.dtype(name)}; {count} integers expected, one per sliced axis")
    name = _saturated(ctx, name)
    if axes == list(range(rank)):
        return name
    joined = ctx.tensor(f"{y}_{hint}_all", (count + rank,), np.int32)
    ctx.add_op("CONCATENATION", [name, ctx.constant(hint, np.full(rank, default, np.int32))],
               [joined], {"axis": 0})
    indices = [axes.index(a) if a in axes else count + a for a in range(rank)]
    vector = ctx.tensor(f"{y}_{hint}", (rank,), np.int32)
    ctx.add_op("GATHER", [joined, ctx.constant("indices", np.array(indices, np.int32))], [vector],
               {"axis": 0, "batch_dims": 0})
    return vector


def _saturated(ctx, name: str) -> str:
    """`name`, or when it is an int64 graph input's CAST to int32 (which wraps: INT64_MAX, the
    exporters' "to the end", would read -1), that input saturated to int32's range in int64 first:
    INT64_MAX becomes INT32_MAX, the other end sentinel (_onnx_bounds), and any other value past
    INT32_MAX becomes INT32_MAX - 1, an index past every dimension as well (INT32_MAX itself
    stays: a sentinel too)."""
    producer = ctx.model.producer(name)
    if producer is None or producer.type != "CAST" or not producer.source.startswith("input "):
        return name
    source = producer.inputs[0]
    if ctx.dtype(source) != np.int64:
        return name
    shape, limit = ctx.shape(source), np.iinfo(np.int32)

    def step(op, inputs, dtype, hint):
        out = ctx.tensor(f"{name}_{hint}", shape, dtype)
        ctx.add_op(op, [ctx.model.add_constant(hint, np.array(v, np.int64)) if isinstance(v, int) else v
                        for v in inputs], [out])
        return out

    above = step("GREATER", [source, int(limit.max)], np.bool_, "above_int32_max")
    below = step("SELECT_V2", [above, int(limit.max) - 1, source], np.int64, "below_int32_max")
    within = step("MAXIMUM", [below, int(limit.min)], np.int64, "within_int32")
    narrowed = ctx.tensor(f"{name}_narrowed", shape, np.int32)
    ctx.add_op("CAST", [within], [narrowed], dict(producer.options))
    sentinel = step("EQUAL", [source, int(np.iinfo(np.int64).max)], np.bool_, "is_int64_max")
    saturated = ctx.tensor(f"{name}_saturated", shape, np.int32)
    ctx.add_op("SELECT_V2", [sentinel, ctx.constant("int32_max", np.array(limit.max, np.int32)),
                             narrowed], [saturated])
    return saturated


# Ends that mean "through the end in the step's direction" (onnxruntime's reading; numpy's None):
# INT64_MAX (narrowed to INT32_MAX inside the graph) and INT32_MAX.
_END_SENTINELS = (int(np.iinfo(np.int32).max), int(np.iinfo(np.int64).max))
_FOLDED = {"MAXIMUM": np.maximum, "MINIMUM": np.minimum, "LESS": np.less, "ADD": np.add,
           "SUB": np.subtract,
           "SELECT_V2": np.where, "EQUAL": np.equal, "LOGICAL_AND": np.logical_and}


def _vector_op(ctx, y: str, op: str, operands: list, hint: str):
    """One elementwise op over rank-long vectors, each a numpy array or a tensor name: folded
    with numpy when all are arrays, else emitted (the arrays as constants); returns the result."""
    if all(isinstance(v, np.ndarray) for v in operands):
        return np.asarray(_FOLDED[op](*operands))
    shape = next(ctx.shape(v) for v in operands if isinstance(v, str))
    names = [ctx.constant(hint, v) if isinstance(v, np.ndarray) else v for v in operands]
    out = ctx.tensor(f"{y}_{hint}", shape, np.bool_ if op in ("LESS", "EQUAL", "LOGICAL_AND") else np.int32)
    ctx.add_op(op, names, [out])
    return out


def _wrapped(ctx, y: str, value, dims, low, hint: str):
    """`value` clamped to [low, dims] (low >= -dims - 1, so no sum below overflows and nothing
    ONNX would resolve differently is lost), then counted from the end where negative (+ dims)."""
    value = _vector_op(ctx, y, "MAXIMUM", [value, low], hint + "_above_low")
    value = _vector_op(ctx, y, "MINIMUM", [value, dims], hint + "_below_dim")
    rank = len(dims) if isinstance(dims, np.ndarray) else ctx.shape(dims)[0]
    negative = _vector_op(ctx, y, "LESS", [value, np.zeros(rank, np.int32)], hint + "_negative")
    shifted = _vector_op(ctx, y, "ADD", [value, dims], hint + "_from_end")
    return _vector_op(ctx, y, "SELECT_V2", [negative, shifted, value], hint + "_wrapped")


def _onnx_bounds(ctx, y: str, begin, end, strides, dims: np.ndarray):
    """(begin, end) resolved as ONNX's Slice spec says, whatever their values: a negative index
    counts from the end once; then a start clamps to [0, dim] and an end to [0, dim], or with a
    negative step a start to [0, dim - 1] and an end to [-1, dim - 1] (-1: through index 0).
    STRIDED_SLICE's kernel resolves a negative step's start below -dim to -1 (nothing, where ONNX
    takes index 0), so the graph resolves them itself: its begins are in range, which the kernel
    keeps as they are, and an end of -1 is written -dim - 1, which the kernel wraps to -1. Each
    op is folded when its operands are constants (numpy arrays). An end of INT32_MAX (INT64_MAX
    narrowed) with a negative step runs through index 0, as onnxruntime reads it (numpy's None).
    `dims` is a numpy array, or a tensor (the SHAPE of a tensor the values size)."""
    rank = len(dims) if isinstance(dims, np.ndarray) else ctx.shape(dims)[0]
    zeros, ones = np.zeros(rank, np.int32), np.ones(rank, np.int32)
    dims_less_1 = _vector_op(ctx, y, "SUB", [dims, ones], "dims_less_1")
    minus_dims = _vector_op(ctx, y, "SUB", [zeros, dims], "minus_dims")
    minus_dims_1 = _vector_op(ctx, y, "SUB", [minus_dims, ones], "minus_dims_less_1")
    backward = _vector_op(ctx, y, "LESS", [strides, zeros], "backward")
    high = _vector_op(ctx, y, "SELECT_V2", [backward, dims_less_1, dims], "high")
    low = _vector_op(ctx, y, "SELECT_V2", [backward, -ones, zeros], "low")
    sentinel = _vector_op(ctx, y, "EQUAL", [end, np.full(rank, _END_SENTINELS[0], np.int32)], "end_sentinel")
    through_first = _vector_op(ctx, y, "LOGICAL_AND", [sentinel, backward], "end_through_first")
    end = _vector_op(ctx, y, "SELECT_V2", [through_first, minus_dims_1, end], "end_or_before_first")
    begin = _wrapped(ctx, y, begin, dims, minus_dims, "begin")
    begin = _vector_op(ctx, y, "MINIMUM", [begin, high], "begin_clamped")
    end = _wrapped(ctx, y, end, dims, minus_dims_1, "end")
    end = _vector_op(ctx, y, "MAXIMUM", [end, low], "end_above_low")
    end = _vector_op(ctx, y, "MINIMUM", [end, high], "end_clamped")
    before_first = _vector_op(ctx, y, "LESS", [end, zeros], "end_before_first")
    end = _vector_op(ctx, y, "SELECT_V2", [before_first, minus_dims_1, end], "end_encoded")
    return begin, end


def _resolved(start: int, stop: int, step: int, dim: int) -> tuple[int, int]:
    """One axis's (begin, end) as ONNX resolves constant starts and ends (see _onnx_bounds); an
    end of -1 runs through index 0. (Python's slice.indices differs in one case: a negative step
    starting below -dim takes nothing there, index 0 in ONNX; and an end sentinel with a negative
    step runs through index 0.)"""
    if step < 0 and stop in _END_SENTINELS:
        stop = -dim - 1
    start, stop = (v + dim if v < 0 else v for v in (start, stop))
    high = dim - 1 if step < 0 else dim
    return min(max(start, 0), high), min(max(stop, -1 if step < 0 else 0), high)


def _shape_mismatch(params, shape, out_shape, inferred) -> str:
    """Why the resolved slice's shape is not the one shape inference gave: an end sentinel with a
    negative step, which onnxruntime and ONNX's spec read two ways (so the model means two
    things), or else the two shapes."""
    for _, stop, axis, step in zip(*params):
        if step < 0 and stop in _END_SENTINELS:
            return (f"an end of INT_MAX ({stop}) with step {step} on axis {axis}: onnxruntime slices "
                    "through index 0, ONNX's Slice spec and shape inference stop at index "
                    f"{shape[axis] - 1} (output {inferred}); write the end as INT64_MIN to slice "
                    f"through index 0, or as {shape[axis] - 1} to stop there")
    return f"computed output shape {out_shape} differs from the inferred {inferred}"


@onnx_op("Slice")
def import_slice(node, ctx):
    x, y = node.inputs[0], node.outputs[0]
    if ctx.opset >= 10:
        names = [node.inputs[i] if len(node.inputs) > i else "" for i in range(1, 5)]
        starts, ends, _, steps = names
        if any(n and ctx.const(n) is None for n in (starts, ends, steps)) or x in ctx.run_time_shaped:
            _computed_slice(node, ctx, names)
            return
    shape = ctx.shape(x)
    rank = len(shape)
    begin, end, strides, end_mask = [0] * rank, list(shape), [1] * rank, 0
    params = _slice_params(node, ctx)
    for start, stop, axis, step in zip(*params):
        resolved = (*_resolved(start, stop, step, shape[axis]), step)
        if not len(range(*resolved)):
            resolved = (0, 0, 1)  # empty (the begin may be -1, which TFLite reads as the end)
        begin[axis], end[axis], strides[axis] = resolved
        if end[axis] < 0:  # a negative step that runs through index 0
            end_mask |= 1 << axis
    out_shape = tuple(_length(b, e, s, _bit(end_mask, a), d)
                      for a, (b, e, s, d) in enumerate(zip(begin, end, strides, shape)))
    if out_shape != tuple(ctx.shape(y)):
        raise ctx.error(_shape_mismatch(params, shape, out_shape, tuple(ctx.shape(y))))
    if out_shape == tuple(shape) and all(s == 1 for s in strides):
        ctx.add_op("IDENTITY", [x], [y])
        return
    if rank > MAX_RANK:
        raise ctx.error(f"rank {rank}: TFLite slices tensors of up to {MAX_RANK} dimensions")
    if all(s == 1 for s in strides):
        slice_tensor(ctx, x, begin, out_shape, y)
    else:
        strided_slice(ctx, x, begin, end, strides, y, end_mask)
