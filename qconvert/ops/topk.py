"""TopK (TOPK_V2).

TOPK_V2 works on the last axis, returns the k largest sorted from the largest, and breaks ties
towards the lower index (its comparison prefers the earlier element among equal values), as ONNX
requires. Another `axis` goes through TRANSPOSE (in and out); largest=0 ranks the order-reversing
map of the input -- NEG for floats, -1 - x for integers (exact over the whole int32 range, where NEG
would overflow at its minimum) -- and maps the values back; equal values stay equal, so ties still
go to the lower index. sorted=0 leaves the order to the implementation: the sorted one is
returned. K computed at run time is the tensor TOPK_V2 reads, when the model declares the
outputs' shape (shape inference cannot know it); the indices are int32 inside the graph (ONNX's
int64 is narrowed).
"""

from __future__ import annotations

import numpy as np

from .layout import transpose
from .registry import SAME, onnx_op, tflite_op
from .versions import INT8, INT16, input_dtype, output_dtype


def _topk_version(op, model):
    """op_version.cc's TOPK_V2: int16 input, k or indices first, then int8 input."""
    if INT16 in (input_dtype(op, model, 0), input_dtype(op, model, 1), output_dtype(op, model, 1)):
        return 3
    return 2 if input_dtype(op, model) == INT8 else 1


# int8: the values output shares the input's params (the kernel copies int8 values); the int32
# indices output is not quantized (transforms/quantization.value_outputs).
tflite_op("TOPK_V2", options="TopKV2Options", version=_topk_version, quant=SAME)


def _k(node, ctx, axis_dim: int) -> tuple[int, str | None]:
    """(K, None) from the attribute (TopK-1) or the constant 1-D, one-element input; (K, the
    input) when it is computed at run time (_computed_k)."""
    if len(node.inputs) < 2 or not node.inputs[1]:
        k = node.attr("k")
        if k is None:
            raise ctx.error("has neither a K input nor a `k` attribute")
        k = np.array([k])
    else:
        name = node.inputs[1]
        k = ctx.const(name)
        if k is None:
            return _computed_k(node, ctx, name)
        if k.shape != (1,):
            raise ctx.error(f"K (input {name!r}) has shape {list(k.shape)}; ONNX wants a 1-D "
                            "tensor of one element")
    k = int(k.reshape(-1)[0])
    if not 0 < k <= axis_dim:
        raise ctx.error(f"K = {k} is outside [1, {axis_dim}], the size of the axis it selects from")
    return k, None


def _computed_k(node, ctx, name: str) -> tuple[int, str]:
    """K computed at run time: the tensor TOPK_V2 reads (it sizes its outputs when it runs); the
    outputs' shape, which the model declares (shape inference cannot know it), says which K the
    graph is built for."""
    if ctx.shape(name) != (1,) or ctx.dtype(name) != np.int32:
        raise ctx.error(f"K (input {name!r}) has shape {list(ctx.shape(name))} and dtype "
                        f"{ctx.dtype(name)}; ONNX wants a 1-D tensor of one integer")
    x = node.inputs[0]
    declared = next((ctx.shape(o) for o in node.outputs if o and o in ctx.model.arrays), None)
    axis = node.attr("axis", -1) % ctx.rank(x)
    k = None if declared is None else int(declared[axis])
    if k is None or not 0 < k <= ctx.shape(x)[axis]:
        raise ctx.error(f"K (input {name!r}) is computed at run time and the outputs declare no K "
                        f"in [1, {ctx.shape(x)[axis]}] (the size of the axis it selects from)")
    return k, name


def _output(ctx, name: str, shape, dtype, hint: str) -> str:
    """The node's output `name`, or a fresh tensor when no op reads it (TOPK_V2 writes both)."""
    return name if name and name in ctx.model.arrays else ctx.tensor(hint, shape, dtype)


def _reversed_order(ctx, x: str, out: str | None = None) -> str:
    """A map of x that reverses its order exactly (and is its own inverse): -x for floats,
    -1 - x for integers."""
    out = out or ctx.tensor(x + "_reversed", ctx.shape(x), ctx.dtype(x))
    if np.dtype(ctx.dtype(x)).kind == "f":
        ctx.add_op("NEG", [x], [out])
    else:
        ctx.add_op("SUB", [ctx.constant("minus_one", np.array(-1, ctx.dtype(x))), x], [out])
    return out


@onnx_op("TopK")
def import_topk(node, ctx):
    x = node.inputs[0]
    shape = ctx.shape(x)
    rank = len(shape)
    if rank == 0:
        raise ctx.error("input X is a scalar; TopK needs at least one axis")
    axis = node.attr("axis", -1)
    if not -rank <= axis < rank:
        raise ctx.error(f"axis {axis} is outside [{-rank}, {rank - 1}] for input of rank {rank}")
    axis %= rank
    if np.dtype(ctx.dtype(x)).kind not in "fi":
        raise ctx.error(f"input X has dtype {np.dtype(ctx.dtype(x))}; TOPK_V2 ranks numbers only")
    k, k_input = _k(node, ctx, shape[axis])
    out_shape = tuple(k if a == axis else d for a, d in enumerate(shape))
    values_name, indices_name = (list(node.outputs) + ["", ""])[:2]
    for name in (values_name, indices_name):
        if name in ctx.model.arrays and tuple(ctx.shape(name)) != out_shape:
            raise ctx.error(f"output {name!r} has shape {list(ctx.shape(name))}, not "
                            f"{list(out_shape)} (K = {k} along axis {axis})")
    largest = bool(node.attr("largest", 1))
    last = axis == rank - 1
    perm = [a for a in range(rank) if a != axis] + [axis]
    inner_shape = tuple(out_shape[p] for p in perm)
    source = x if last else transpose(ctx, x, perm)
    if not largest:
        source = _reversed_order(ctx, source)
    dtype = ctx.dtype(x)
    base = values_name or indices_name
    values = (_output(ctx, values_name, out_shape, dtype, base + "_values") if last and largest
              else ctx.tensor(base + "_topk_values", inner_shape, dtype))
    indices = (_output(ctx, indices_name, out_shape, np.int32, base + "_indices") if last
               else ctx.tensor(base + "_topk_indices", inner_shape, np.int32))
    k_input = k_input or ctx.constant("k", np.array([k], np.int32))
    ctx.add_op("TOPK_V2", [source, k_input], [values, indices])
    if not largest:
        restored = (_output(ctx, values_name, out_shape, dtype, base + "_values") if last
                    else ctx.tensor(base + "_topk_restored", inner_shape, dtype))
        values = _reversed_order(ctx, values, restored)
    if not last:
        inverse = list(np.argsort(perm))
        if values_name in ctx.model.arrays:
            transpose(ctx, values, inverse, values_name)
        if indices_name in ctx.model.arrays:
            transpose(ctx, indices, inverse, indices_name)

