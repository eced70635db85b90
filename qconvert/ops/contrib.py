"""onnxruntime's contrib ops as its transformer optimizer writes them (onnxruntime.transformers.
optimizer, model types bert, gpt2, vit, clip...): com.microsoft Gelu, FastGelu, QuickGelu,
BiasGelu, SkipLayerNormalization, SkipSimplifiedLayerNormalization, FusedMatMul, FusedConv,
Attention, MultiHeadAttention and EmbedLayerNormalization, and SimplifiedLayerNormalization
(RMSNorm), which onnxruntime defines in the ONNX domain.

Each is the op sequence the plain ONNX importers emit for the subgraph the optimizer fused: those
importers are called (MatMul, LayerNormalization, Conv, Gather, Gelu, the activations), so later
steps (GELU and bias fusion, int8) treat a fused model as the unfused one. Attention is the
BERT export's: per-head Q K^T (BATCH_MATMUL), times the scale, plus the mask as an additive bias
(mask_filter_value where a key is masked, as onnxruntime adds it), SOFTMAX, times V.

ONNX shape inference knows none of these ops: `infer_types` gives their outputs' shapes and
dtypes from their inputs', and `value_info` shows them to the next inference run
(onnx/loader.py, _Graph.infer_shapes, repeats inference while `infer_types` finds new ones).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Callable

import numpy as np
import onnx
from onnx import helper

from .layout import reshape, transpose
from .registry import ONNX_IMPORTERS, onnx_op

MS = "com.microsoft."
# Output types by op key ("com.microsoft.Attention"): fn(input shapes, input dtypes, attrs) ->
# [(shape, dtype) or None per output]; inputs omitted or unknown are None.
_TYPES: dict[str, Callable] = {}
_FLOAT = np.dtype(np.float32)


def _key(node) -> str:
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"


def _types(*keys: str):
    def register(fn):
        for key in keys:
            _TYPES[key] = fn
        return fn
    return register


def infer_types(nodes, shapes: dict, dtypes: dict) -> bool:
    """Adds to `shapes` and `dtypes` the outputs of the contrib nodes among `nodes` (in graph
    order, so one contrib op feeding another is resolved in one pass) whose inputs are known and
    which shape inference left unknown. Returns whether it added any."""
    added = False
    for node in nodes:
        fn = _TYPES.get(_key(node))
        if fn is None or all(not o or o in shapes for o in node.output):
            continue
        if any(n and n not in shapes for n in node.input):
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        try:
            types = fn([shapes.get(n) if n else None for n in node.input],
                       [dtypes.get(n) if n else None for n in node.input], attrs)
        except (ValueError, IndexError, TypeError, KeyError, ZeroDivisionError):
            continue  # malformed: the importer names what is wrong
        for name, found in zip(node.output, types):
            if name and found is not None and name not in shapes and all(d >= 0 for d in found[0]):
                shapes[name], dtypes[name] = tuple(int(d) for d in found[0]), np.dtype(found[1])
                added = True
    return added


def value_info(nodes, shapes: dict, dtypes: dict) -> list:
    """The known outputs of contrib nodes as ValueInfoProtos, for shape inference to start from."""
    return [helper.make_tensor_value_info(o, helper.np_dtype_to_tensor_dtype(dtypes[o]), shapes[o])
            for node in nodes if _key(node) in _TYPES for o in node.output if o in shapes]


# --- helpers --------------------------------------------------------------------------------
def _call(ctx, node, op_type: str, inputs, outputs, **attrs) -> None:
    """Runs the plain ONNX importer of `op_type` on `inputs` and `outputs`, as part of `node`."""
    ONNX_IMPORTERS[op_type](replace(node, op_type=op_type, inputs=list(inputs),
                                    outputs=list(outputs), attrs=attrs, domain=""), ctx)


def _op(ctx, type: str, inputs, hint: str, shape, dtype=_FLOAT, options=None, out=None) -> str:
    """One op writing `out` (or a new tensor of `shape`); returns the output's name."""
    out = out or ctx.tensor(hint, tuple(int(d) for d in shape), dtype)
    ctx.add_op(type, list(inputs), [out], options)
    return out


def _binary(ctx, type: str, a: str, b: str, hint: str, out=None) -> str:
    shape = np.broadcast_shapes(ctx.shape(a), ctx.shape(b))
    return _op(ctx, type, [a, b], hint, shape, ctx.dtype(a), out=out)


def _scalar(ctx, value, dtype=_FLOAT) -> str:
    return ctx.constant("c", np.array(value, dtype))


def _input(node, k: int) -> str:
    return node.inputs[k] if len(node.inputs) > k else ""


def _output(ctx, node, k: int) -> str:
    """Output k when the model has an array for it (it is read), else ""."""
    name = node.outputs[k] if len(node.outputs) > k else ""
    return name if name and name in ctx.model.arrays else ""


def _check_float(ctx, name: str, what: str) -> None:
    if ctx.dtype(name) != np.float32:
        raise ctx.error(f"{what} {name!r} has dtype {ctx.dtype(name)}; float32 is supported")


def _same_as_input(shapes, dtypes, attrs):
    return [(shapes[0], dtypes[0])]


# --- activations ----------------------------------------------------------------------------
_types(MS + "Gelu", MS + "FastGelu", MS + "BiasGelu", MS + "QuickGelu")(
    lambda shapes, dtypes, attrs: [(np.broadcast_shapes(*[s for s in shapes if s is not None]), dtypes[0])])


@onnx_op(MS + "Gelu", MS + "FastGelu", MS + "BiasGelu")
def import_gelu(node, ctx):
    """GELU (FastGelu: its tanh approximation) of X, or of X + bias."""
    x, y = node.inputs[0], node.outputs[0]
    _check_float(ctx, x, "input")
    bias = _input(node, 1)
    if bias:
        ctx.check_broadcast([x, bias], y)
        x = _binary(ctx, "ADD", x, bias, y + "_biased")
    approximate = "tanh" if node.op_type == "FastGelu" else "none"
    _call(ctx, node, "Gelu", [x], [y], approximate=approximate)


@onnx_op(MS + "QuickGelu")
def import_quick_gelu(node, ctx):
    """x * sigmoid(alpha * x)."""
    x, y = node.inputs[0], node.outputs[0]
    _check_float(ctx, x, "input")
    alpha = float(node.attr("alpha", 1.702))
    scaled = x if alpha == 1.0 else _binary(ctx, "MUL", x, _scalar(ctx, alpha), y + "_scaled")
    gate = _op(ctx, "LOGISTIC", [scaled], y + "_sigmoid", ctx.shape(x))
    ctx.add_op("MUL", [x, gate], [y])


# --- normalizations -------------------------------------------------------------------------
def _norm_types(shapes, dtypes, attrs, skip: bool, axis_default=-1):
    x = tuple(shapes[0])
    axis = int(attrs.get("axis", axis_default)) % len(x)
    stats = (x[:axis] + (1,) * (len(x) - axis), _FLOAT)
    return [(x, dtypes[0]), stats, stats] + ([(x, dtypes[0])] if skip else [])


_types(MS + "SkipLayerNormalization", MS + "SkipSimplifiedLayerNormalization")(
    lambda shapes, dtypes, attrs: _norm_types(shapes, dtypes, attrs, True))
_types("LayerNormalization")(lambda shapes, dtypes, attrs: _norm_types(shapes, dtypes, attrs, False))
# SimplifiedLayerNormalization's outputs: Y, inv_std_var.
_types("SimplifiedLayerNormalization")(
    lambda shapes, dtypes, attrs: [t for k, t in enumerate(_norm_types(shapes, dtypes, attrs, False))
                                   if k != 1])


def _rms_norm(ctx, x: str, scale: str, axis: int, eps: float, y: str, inv_std: str = "") -> None:
    """y = x * RSQRT(MEAN(x * x) + eps) * scale over axes [axis, rank) (RMSNorm)."""
    shape, rank = ctx.shape(x), ctx.rank(x)
    small = shape[:axis] + (1,) * (rank - axis)
    square = _op(ctx, "MUL", [x, x], y + "_sq", shape)
    axes = ctx.constant("axes", np.arange(axis, rank, dtype=np.int32))
    mean = _op(ctx, "MEAN", [square, axes], y + "_mean_sq", small, options={"keep_dims": True})
    shifted = _op(ctx, "ADD", [mean, _scalar(ctx, eps)], y + "_var_eps", small)
    inv = _op(ctx, "RSQRT", [shifted], y + "_inv_std", small, out=inv_std or None)
    normed = _op(ctx, "MUL", [x, inv], y + "_normed", shape)
    ctx.add_op("MUL", [normed, scale], [y])


@onnx_op(MS + "SkipLayerNormalization", MS + "SkipSimplifiedLayerNormalization")
def import_skip_layer_norm(node, ctx):
    """LayerNormalization (RMSNorm for the Simplified one) over the last axis of input + skip
    (+ bias), the sum being the optional input_skip_bias_sum output."""
    simplified = node.op_type == "SkipSimplifiedLayerNormalization"
    x, skip = node.inputs[:2]
    gamma = _input(node, 2)
    beta = "" if simplified else _input(node, 3)
    bias = _input(node, 3 if simplified else 4)
    y = node.outputs[0]
    for name, what in ((x, "input"), (skip, "skip")):
        _check_float(ctx, name, what)
    ctx.check_broadcast([x, skip], x)
    total = _output(ctx, node, 3)
    if bias:
        partial = _binary(ctx, "ADD", x, skip, y + "_skip_sum")
        total = _binary(ctx, "ADD", partial, bias, y + "_skip_bias_sum", out=total or None)
    else:
        total = _binary(ctx, "ADD", x, skip, y + "_skip_sum", out=total or None)
    eps = float(node.attr("epsilon", 1e-12 if not simplified else 1e-5))
    if simplified:
        if _output(ctx, node, 1):
            raise ctx.error("the mean output of SkipSimplifiedLayerNormalization is not supported")
        _rms_norm(ctx, total, gamma, ctx.rank(total) - 1, eps, y, _output(ctx, node, 2))
        return
    _call(ctx, node, "LayerNormalization", [total, gamma] + ([beta] if beta else []),
          [y, _output(ctx, node, 1), _output(ctx, node, 2)], axis=-1, epsilon=eps)


@onnx_op("SimplifiedLayerNormalization")
def import_simplified_layer_norm(node, ctx):
    """onnxruntime's RMSNorm (ONNX domain): X * RSQRT(MEAN(X^2) + epsilon) * scale over
    [axis, rank)."""
    x, scale = node.inputs[:2]
    _check_float(ctx, x, "input")
    axis = int(node.attr("axis", -1)) % ctx.rank(x)
    _rms_norm(ctx, x, scale, axis, float(node.attr("epsilon", 1e-5)), node.outputs[0],
              _output(ctx, node, 1))


# --- products -------------------------------------------------------------------------------
def _operand_perm(rank: int, trans: bool, trans_batch: bool) -> tuple[int, ...] | None:
    """FusedMatMul's operand as MatMul reads it: transBatch moves axis 0 behind the batch axes
    (x[k, b..., c] -> [b..., k, c]), trans swaps the matrix axes; None: as it is."""
    if rank < 2 or not (trans or trans_batch):
        return None
    batch, rows = (tuple(range(1, rank - 1)), 0) if trans_batch and rank > 2 else \
        (tuple(range(rank - 2)), rank - 2)
    return batch + ((rank - 1, rows) if trans else (rows, rank - 1))


def _product_shape(a, b) -> tuple[int, ...]:
    a2 = (1,) + tuple(a) if len(a) == 1 else tuple(a)
    b2 = tuple(b) + (1,) if len(b) == 1 else tuple(b)
    if a2[-1] != b2[-2]:
        raise ValueError("inner dimensions differ")
    shape = tuple(np.broadcast_shapes(a2[:-2], b2[:-2])) + (a2[-2], b2[-1])
    return shape[:-2] + shape[-1:] if len(a) == 1 else shape[:-1] if len(b) == 1 else shape


@_types(MS + "FusedMatMul")
def _fused_matmul_types(shapes, dtypes, attrs):
    operands = []
    for shape, t, tb in ((shapes[0], "transA", "transBatchA"), (shapes[1], "transB", "transBatchB")):
        perm = _operand_perm(len(shape), bool(attrs.get(t, 0)), bool(attrs.get(tb, 0)))
        operands.append(shape if perm is None else tuple(shape[p] for p in perm))
    return [(_product_shape(*operands), dtypes[0])]


@onnx_op(MS + "FusedMatMul")
def import_fused_matmul(node, ctx):
    """alpha * (A' @ B'), A' and B' the operands after transA/transBatchA and transB/transBatchB:
    a constant B transposed and scaled by alpha here (the MatMul importer then makes it a
    FULLY_CONNECTED), else TRANSPOSE ops in front of MatMul and a MUL by alpha behind."""
    a, b = node.inputs[:2]
    y = node.outputs[0]
    alpha = float(node.attr("alpha", 1.0))
    if (node.attr("transBatchA", 0) or node.attr("transBatchB", 0)) and \
            not ctx.rank(a) == ctx.rank(b) >= 3:
        raise ctx.error(f"transBatchA/transBatchB take operands of one rank >= 3, not "
                        f"{list(ctx.shape(a))} and {list(ctx.shape(b))}")
    operands = []
    for name, t, tb in ((a, "transA", "transBatchA"), (b, "transB", "transBatchB")):
        perm = _operand_perm(ctx.rank(name), bool(node.attr(t, 0)), bool(node.attr(tb, 0)))
        value = ctx.const(name)
        if value is not None and name == b:
            value = value if perm is None else np.transpose(value, perm)
            operands.append(ctx.constant(name, np.ascontiguousarray(value * np.float32(alpha),
                                                                    dtype=np.float32)))
            alpha = 1.0
        else:
            operands.append(name if perm is None else transpose(ctx, name, perm))
    product = y if alpha == 1.0 else ctx.tensor(y + "_product", ctx.shape(y), ctx.dtype(y))
    _call(ctx, node, "MatMul", operands, [product])
    if alpha != 1.0:
        ctx.add_op("MUL", [product, _scalar(ctx, alpha)], [y])


# FusedConv's activations (its `activation` attribute) as ONNX ops, with how activation_params
# become the op's attributes.
_CONV_ACTIVATIONS = {
    "Relu": lambda p: {}, "Tanh": lambda p: {}, "Sigmoid": lambda p: {},
    "LeakyRelu": lambda p: {"alpha": p[0]} if p else {},
    "HardSigmoid": lambda p: dict(zip(("alpha", "beta"), p)),
    "Clip": lambda p: dict(zip(("min", "max"), p)),
}
_CONV_ATTRIBUTES = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")


def _conv_node(shapes, dtypes, attrs):
    return helper.make_node("Conv", [f"i{k}" for k in range(min(len(shapes), 3))], ["y"],
                            **{k: v for k, v in attrs.items() if k in _CONV_ATTRIBUTES})


@_types(MS + "FusedConv")
def _fused_conv_types(shapes, dtypes, attrs):
    """Conv's, from onnx's own Conv inference."""
    node = _conv_node(shapes, dtypes, attrs)
    types = {name: helper.make_tensor_type_proto(helper.np_dtype_to_tensor_dtype(dtypes[k]), shapes[k])
             for k, name in enumerate(node.input)}
    try:
        found = onnx.shape_inference.infer_node_outputs(onnx.defs.get_schema("Conv", 11), node, types)
    except Exception:  # onnx raises several types; the importer names what is wrong
        return [None]
    dims = found["y"].tensor_type.shape.dim
    return [(tuple(d.dim_value if d.HasField("dim_value") else -1 for d in dims), dtypes[0])]


@onnx_op(MS + "FusedConv")
def import_fused_conv(node, ctx):
    """activation(Conv(X, W, B) + Z): the Conv importer, an ADD of Z, the activation's importer
    (a RELU or clamp that the pipeline fuses into the CONV_2D)."""
    x, w = node.inputs[:2]
    b, z, y = _input(node, 2), _input(node, 3), node.outputs[0]
    activation = node.attr("activation", "")
    params = [float(p) for p in node.attr("activation_params", [])]
    if activation and activation not in _CONV_ACTIVATIONS:
        raise ctx.error(f"activation {activation!r} is not supported ("
                        + ", ".join(_CONV_ACTIVATIONS) + " are)")
    conv_attrs = {k: v for k, v in node.attrs.items() if k in _CONV_ATTRIBUTES}
    out = y if not (activation or z) else ctx.tensor(y + "_conv", ctx.shape(y), ctx.dtype(y))
    _call(ctx, node, "Conv", [x, w] + ([b] if b else []), [out], **conv_attrs)
    if z:
        ctx.check_broadcast([out, z], y)
        out = _binary(ctx, "ADD", out, z, y + "_sum", out=None if activation else y)
    if not activation:
        return
    attrs = _CONV_ACTIVATIONS[activation](params)
    inputs = [out]
    if activation == "Clip":  # bounds as inputs from opset 11, as attributes before
        inputs += [_scalar(ctx, attrs.get("min", -np.inf)), _scalar(ctx, attrs.get("max", np.inf))]
    _call(ctx, node, activation, inputs, [y], **attrs)
