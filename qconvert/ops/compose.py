"""Building blocks for importers that compose an op from other ops: onnxruntime's fused contrib
ops (contrib.py), ONNX's Attention (attention.py), Col2Im (col2im.py), and the output types of ops
whose output is their first input's shape (registry.onnx_types)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from .registry import ONNX_IMPORTERS

FLOAT = np.dtype(np.float32)


def call_importer(ctx, node, op_type: str, inputs, outputs, **attrs) -> None:
    """Runs the plain ONNX importer of `op_type` on `inputs` and `outputs`, as part of `node`."""
    ONNX_IMPORTERS[op_type](replace(node, op_type=op_type, inputs=list(inputs),
                                    outputs=list(outputs), attrs=attrs, domain=""), ctx)


def emit(ctx, type: str, inputs, hint: str, shape, dtype=FLOAT, options=None, out=None) -> str:
    """One op writing `out` (or a new tensor of `shape`); returns the output's name."""
    out = out or ctx.tensor(hint, tuple(int(d) for d in shape), dtype)
    ctx.add_op(type, list(inputs), [out], options)
    return out


def binary(ctx, type: str, a: str, b: str, hint: str, out=None) -> str:
    """One broadcasting binary op of a and b (a's dtype)."""
    shape = np.broadcast_shapes(ctx.shape(a), ctx.shape(b))
    return emit(ctx, type, [a, b], hint, shape, ctx.dtype(a), out=out)


def scalar(ctx, value, dtype=FLOAT) -> str:
    return ctx.constant("c", np.array(value, dtype))


def input_at(node, k: int) -> str:
    """Input k, or "" when the node has fewer (an omitted optional input)."""
    return node.inputs[k] if len(node.inputs) > k else ""


def used_output(ctx, node, k: int) -> str:
    """Output k when something reads it (a node or the graph's outputs), else "" (an optional
    output named but unread is not computed)."""
    name = node.outputs[k] if len(node.outputs) > k else ""
    return name if ctx.is_used(name) else ""


def check_float32(ctx, name: str, what: str) -> None:
    if ctx.dtype(name) != np.float32:
        raise ctx.error(f"{what} {name!r} has dtype {ctx.dtype(name)}; float32 is supported")


def same_as_input(shapes, dtypes, attrs):
    """Output types (registry.onnx_types) of an op whose one output has its first input's type."""
    return [(shapes[0], dtypes[0])]
