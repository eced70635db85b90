"""onnxruntime's contrib ops as its transformer optimizer writes them (onnxruntime.transformers.
optimizer, model types bert, gpt2, vit, clip, unet...; with its graph optimizations too):
com.microsoft Gelu, FastGelu, QuickGelu, BiasGelu, BiasAdd, BiasSplitGelu, SkipLayerNormalization,
SkipSimplifiedLayerNormalization, FusedMatMul (and its older name TransposeMatMul), FusedConv,
FusedGemm, Attention, MultiHeadAttention, EmbedLayerNormalization, RotaryEmbedding and
GroupQueryAttention (a prompt without a cache), and the two it defines in the ONNX domain,
SimplifiedLayerNormalization (RMSNorm) and LayerNormalization before opset 17 (the ONNX importer
converts it; only its output types come from here).

Each is the op sequence the plain ONNX importers emit for the subgraph the optimizer fused: those
importers are called (MatMul, Gemm, LayerNormalization, Conv, Gather, Split, Concat, Gelu, the
activations), so later steps (GELU and bias fusion, int8) treat a fused model as the unfused one.
Attention is the BERT export's: per-head Q K^T (BATCH_MATMUL), times the scale, plus the masks as
additive biases (mask_filter_value where a key is masked, as onnxruntime adds it), SOFTMAX, times V.
A decoder's past/present key-value cache is refused: a static TFLite graph has no state.

ONNX shape inference knows none of these ops: each registers its output types
(registry.onnx_types), which the loader's per-node inference uses (onnx/node_types.py).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import onnx
from onnx import helper

from .compose import (FLOAT, binary, call_importer, check_float32, emit, input_at, same_as_input, scalar,
                      used_output)
from .layout import reshape, transpose
from .registry import onnx_op, onnx_types

MS = "com.microsoft."


# --- activations ----------------------------------------------------------------------------
onnx_types(MS + "Gelu", MS + "FastGelu", MS + "BiasGelu", MS + "QuickGelu")(
    lambda shapes, dtypes, attrs: [(np.broadcast_shapes(*[s for s in shapes if s is not None]), dtypes[0])])


@onnx_op(MS + "Gelu", MS + "FastGelu", MS + "BiasGelu")
def import_gelu(node, ctx):
    """GELU (FastGelu: its tanh approximation) of X, or of X + bias."""
    x, y = node.inputs[0], node.outputs[0]
    check_float32(ctx, x, "input")
    bias = input_at(node, 1)
    if bias:
        ctx.check_broadcast([x, bias], y)
        x = binary(ctx, "ADD", x, bias, y + "_biased")
    approximate = "tanh" if node.op_type == "FastGelu" else "none"
    call_importer(ctx, node, "Gelu", [x], [y], approximate=approximate)


@onnx_op(MS + "QuickGelu")
def import_quick_gelu(node, ctx):
    """x * sigmoid(alpha * x)."""
    x, y = node.inputs[0], node.outputs[0]
    check_float32(ctx, x, "input")
    alpha = float(node.attr("alpha", 1.702))
    scaled = x if alpha == 1.0 else binary(ctx, "MUL", x, scalar(ctx, alpha), y + "_scaled")
    gate = emit(ctx, "LOGISTIC", [scaled], y + "_sigmoid", ctx.shape(x))
    ctx.add_op("MUL", [x, gate], [y])


onnx_types(MS + "BiasAdd")(same_as_input)


@onnx_types(MS + "BiasSplitGelu")
def _bias_split_gelu_types(shapes, dtypes, attrs):
    x = tuple(shapes[0])
    if x[-1] % 2:
        raise ValueError("odd width")
    return [(x[:-1] + (x[-1] // 2,), dtypes[0])]


@onnx_op(MS + "BiasAdd")
def import_bias_add(node, ctx):
    """X + bias + skip (a diffusion model's fusion; onnxruntime runs it on GPU only)."""
    x, bias, skip = node.inputs[:3]
    y = node.outputs[0]
    check_float32(ctx, x, "input")
    ctx.check_broadcast([x, bias, skip], y)
    ctx.add_op("ADD", [binary(ctx, "ADD", x, bias, y + "_biased"), skip], [y])


@onnx_op(MS + "BiasSplitGelu")
def import_bias_split_gelu(node, ctx):
    """X + bias split in halves along the last axis: left * GELU(right) (a diffusion model's
    fusion; onnxruntime runs it on GPU only)."""
    x, bias = node.inputs[:2]
    y = node.outputs[0]
    check_float32(ctx, x, "input")
    ctx.check_broadcast([x, bias], x)
    biased = binary(ctx, "ADD", x, bias, y + "_biased")
    halves = [ctx.tensor(f"{y}_{side}", ctx.shape(y), ctx.dtype(y)) for side in ("left", "right")]
    ctx.add_op("SPLIT", [ctx.constant("axis", np.array(ctx.rank(x) - 1, np.int32)), biased], halves,
               {"num_splits": 2})
    gate = ctx.tensor(y + "_gelu", ctx.shape(y), ctx.dtype(y))
    call_importer(ctx, node, "Gelu", [halves[1]], [gate], approximate="none")
    ctx.add_op("MUL", [halves[0], gate], [y])


# --- normalizations -------------------------------------------------------------------------
def _norm_types(shapes, dtypes, attrs, skip: bool, axis_default=-1):
    x = tuple(shapes[0])
    axis = int(attrs.get("axis", axis_default)) % len(x)
    stats = (x[:axis] + (1,) * (len(x) - axis), FLOAT)
    return [(x, dtypes[0]), stats, stats] + ([(x, dtypes[0])] if skip else [])


onnx_types(MS + "SkipLayerNormalization", MS + "SkipSimplifiedLayerNormalization")(
    lambda shapes, dtypes, attrs: _norm_types(shapes, dtypes, attrs, True))
onnx_types("LayerNormalization")(lambda shapes, dtypes, attrs: _norm_types(shapes, dtypes, attrs, False))
# SimplifiedLayerNormalization's outputs: Y, inv_std_var.
onnx_types("SimplifiedLayerNormalization")(
    lambda shapes, dtypes, attrs: [t for k, t in enumerate(_norm_types(shapes, dtypes, attrs, False))
                                   if k != 1])


def _rms_norm(ctx, x: str, scale: str, axis: int, eps: float, y: str, inv_std: str = "") -> None:
    """y = x * RSQRT(MEAN(x * x) + eps) * scale over axes [axis, rank) (RMSNorm)."""
    shape, rank = ctx.shape(x), ctx.rank(x)
    small = shape[:axis] + (1,) * (rank - axis)
    square = emit(ctx, "MUL", [x, x], y + "_sq", shape)
    axes = ctx.constant("axes", np.arange(axis, rank, dtype=np.int32))
    mean = emit(ctx, "MEAN", [square, axes], y + "_mean_sq", small, options={"keep_dims": True})
    shifted = emit(ctx, "ADD", [mean, scalar(ctx, eps)], y + "_var_eps", small)
    inv = emit(ctx, "RSQRT", [shifted], y + "_inv_std", small, out=inv_std or None)
    normed = emit(ctx, "MUL", [x, inv], y + "_normed", shape)
    ctx.add_op("MUL", [normed, scale], [y])


@onnx_op(MS + "SkipLayerNormalization", MS + "SkipSimplifiedLayerNormalization")
def import_skip_layer_norm(node, ctx):
    """LayerNormalization (RMSNorm for the Simplified one) over the last axis of input + skip
    (+ bias), the sum being the optional input_skip_bias_sum output."""
    simplified = node.op_type == "SkipSimplifiedLayerNormalization"
    x, skip = node.inputs[:2]
    gamma = input_at(node, 2)
    beta = "" if simplified else input_at(node, 3)
    bias = input_at(node, 3 if simplified else 4)
    y = node.outputs[0]
    for name, what in ((x, "input"), (skip, "skip")):
        check_float32(ctx, name, what)
    ctx.check_broadcast([x, skip], x)
    total = used_output(ctx, node, 3)
    if bias:
        partial = binary(ctx, "ADD", x, skip, y + "_skip_sum")
        total = binary(ctx, "ADD", partial, bias, y + "_skip_bias_sum", out=total or None)
    else:
        total = binary(ctx, "ADD", x, skip, y + "_skip_sum", out=total or None)
    eps = float(node.attr("epsilon", 1e-12))
    if simplified:
        if used_output(ctx, node, 1):
            raise ctx.error("the mean output of SkipSimplifiedLayerNormalization is not supported")
        _rms_norm(ctx, total, gamma, ctx.rank(total) - 1, eps, y, used_output(ctx, node, 2))
        return
    call_importer(ctx, node, "LayerNormalization", [total, gamma] + ([beta] if beta else []),
          [y, used_output(ctx, node, 1), used_output(ctx, node, 2)], axis=-1, epsilon=eps)


@onnx_op("SimplifiedLayerNormalization")
def import_simplified_layer_norm(node, ctx):
    """onnxruntime's RMSNorm (ONNX domain): X * RSQRT(MEAN(X^2) + epsilon) * scale over
    [axis, rank)."""
    x, scale = node.inputs[:2]
    check_float32(ctx, x, "input")
    axis = int(node.attr("axis", -1)) % ctx.rank(x)
    _rms_norm(ctx, x, scale, axis, float(node.attr("epsilon", 1e-5)), node.outputs[0],
              used_output(ctx, node, 1))


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


@onnx_types(MS + "FusedMatMul", MS + "TransposeMatMul")
def _fused_matmul_types(shapes, dtypes, attrs):
    operands = []
    for shape, t, tb in ((shapes[0], "transA", "transBatchA"), (shapes[1], "transB", "transBatchB")):
        perm = _operand_perm(len(shape), bool(attrs.get(t, 0)), bool(attrs.get(tb, 0)))
        operands.append(shape if perm is None else tuple(shape[p] for p in perm))
    return [(_product_shape(*operands), dtypes[0])]


@onnx_op(MS + "FusedMatMul", MS + "TransposeMatMul")
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
    for index, (name, t, tb) in enumerate(((a, "transA", "transBatchA"), (b, "transB", "transBatchB"))):
        perm = _operand_perm(ctx.rank(name), bool(node.attr(t, 0)), bool(node.attr(tb, 0)))
        value = ctx.const(name)
        if value is not None and index == 1:
            value = value if perm is None else np.transpose(value, perm)
            operands.append(ctx.constant(name, np.ascontiguousarray(value * np.float32(alpha),
                                                                    dtype=np.float32)))
            alpha = 1.0
        else:
            operands.append(name if perm is None else transpose(ctx, name, perm))
    product = y if alpha == 1.0 else ctx.tensor(y + "_product", ctx.shape(y), ctx.dtype(y))
    call_importer(ctx, node, "MatMul", operands, [product])
    if alpha != 1.0:
        ctx.add_op("MUL", [product, scalar(ctx, alpha)], [y])


# FusedConv's and FusedGemm's activations (their `activation` attribute) as ONNX ops, with how
# their parameters (FusedConv's activation_params, FusedGemm's activation_alpha/beta/gamma)
# become the op's attributes.
_ACTIVATIONS = {
    "Relu": (), "Tanh": (), "Sigmoid": (), "LeakyRelu": ("alpha",), "HardSigmoid": ("alpha", "beta"),
    "Clip": ("min", "max"), "Elu": ("alpha",), "Selu": ("alpha", "gamma"),
}
_CONV_ATTRIBUTES = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")
_GEMM_ATTRIBUTES = ("alpha", "beta", "transA", "transB")


def _onnx_types(op_type: str, version: int, names: tuple[str, ...], inputs: int):
    """Output types of a fused op as onnx infers those of the ONNX op it extends, from the
    attributes `names` and the first `inputs` inputs."""
    def infer(shapes, dtypes, attrs):
        node = helper.make_node(op_type, [f"i{k}" for k in range(min(len(shapes), inputs))], ["y"],
                                **{k: v for k, v in attrs.items() if k in names})
        types = {name: helper.make_tensor_type_proto(helper.np_dtype_to_tensor_dtype(dtypes[k]), shapes[k])
                 for k, name in enumerate(node.input)}
        schema = onnx.defs.get_schema(op_type, version)
        try:
            found = onnx.shape_inference.infer_node_outputs(schema, node, types)
        except Exception:  # onnx raises several types; the importer names what is wrong
            return [None]
        dims = found["y"].tensor_type.shape.dim
        return [(tuple(d.dim_value if d.HasField("dim_value") else -1 for d in dims), dtypes[0])]
    return infer


onnx_types(MS + "FusedConv")(_onnx_types("Conv", 11, _CONV_ATTRIBUTES, 3))
onnx_types(MS + "FusedGemm")(_onnx_types("Gemm", 13, _GEMM_ATTRIBUTES, 3))


def _check_activation(ctx, activation: str, known=tuple(_ACTIVATIONS)) -> None:
    if activation and activation not in known:
        raise ctx.error(f"activation {activation!r} is not supported ("
                        + ", ".join(known) + " are)")


def _activate(ctx, node, activation: str, params: dict, x: str, y: str) -> None:
    """y = activation(x) by the activation's ONNX importer (a RELU or clamp the pipeline fuses
    into the op before it); `params` the ONNX op's attributes."""
    inputs = [x]
    if activation == "Clip":  # bounds as inputs from opset 11, as attributes before
        inputs += [scalar(ctx, params.get("min", -np.inf)), scalar(ctx, params.get("max", np.inf))]
    call_importer(ctx, node, activation, inputs, [y], **params)


@onnx_op(MS + "FusedConv")
def import_fused_conv(node, ctx):
    """activation(Conv(X, W, B) + Z): the Conv importer, an ADD of Z, the activation."""
    x, w = node.inputs[:2]
    b, z, y = input_at(node, 2), input_at(node, 3), node.outputs[0]
    activation = node.attr("activation", "")
    _check_activation(ctx, activation)
    conv_attrs = {k: v for k, v in node.attrs.items() if k in _CONV_ATTRIBUTES}
    out = y if not (activation or z) else ctx.tensor(y + "_conv", ctx.shape(y), ctx.dtype(y))
    call_importer(ctx, node, "Conv", [x, w] + ([b] if b else []), [out], **conv_attrs)
    if z:
        ctx.check_broadcast([out, z], y)
        out = binary(ctx, "ADD", out, z, y + "_sum", out=None if activation else y)
    if activation:
        params = [float(p) for p in node.attr("activation_params", [])]
        _activate(ctx, node, activation, dict(zip(_ACTIVATIONS[activation], params)), out, y)


@onnx_op(MS + "FusedGemm")
def import_fused_gemm(node, ctx):
    """activation(Gemm(A, B, C)): the Gemm importer, then the activation with
    activation_alpha/beta/gamma as its alpha/beta/gamma."""
    y = node.outputs[0]
    activation = node.attr("activation", "")
    _check_activation(ctx, activation, tuple(a for a in _ACTIVATIONS if a != "Clip"))  # no bounds
    out = ctx.tensor(y + "_gemm", ctx.shape(y), ctx.dtype(y)) if activation else y
    call_importer(ctx, node, "Gemm", node.inputs[:3], [out],
          **{k: v for k, v in node.attrs.items() if k in _GEMM_ATTRIBUTES})
    if activation:  # activation_alpha is the activation's alpha, and so on
        params = {name: float(node.attr(f"activation_{name}")) for name in _ACTIVATIONS[activation]
                  if node.attr(f"activation_{name}") is not None}
        _activate(ctx, node, activation, params, out, y)


# --- attention ------------------------------------------------------------------------------
def _attention_sizes(w_shape, attrs) -> tuple[int, int, int]:
    sizes = attrs.get("qkv_hidden_sizes") or [w_shape[1] // 3] * 3
    return tuple(int(s) for s in sizes)


@onnx_types(MS + "Attention")
def _attention_types(shapes, dtypes, attrs):
    """Output [B, S, v]; present [2, B, N, past + S, H] (so that the importer is reached to
    refuse it)."""
    x, sizes, heads = shapes[0], _attention_sizes(shapes[1], attrs), int(attrs.get("num_heads") or 1)
    past = shapes[4][3] if len(shapes) > 4 and shapes[4] is not None else 0
    present = (2, x[0], heads, past + x[1], sizes[1] // heads)
    return [(tuple(x[:-1]) + (sizes[2],), dtypes[0]), (present, dtypes[0])]


@onnx_types(MS + "MultiHeadAttention")
def _multi_head_attention_types(shapes, dtypes, attrs):
    """[B, S, value width]; the packed forms too (query [B, S, N, 3, H], key [B, L, N, 2, H], key
    and value [B, N, L, H]), so that the importer is reached to refuse them."""
    q, k, v = (list(shapes) + [None] * 3)[:3]
    if len(q) == 5:
        return [(tuple(q[:2]) + (q[2] * q[4],), dtypes[0])]
    width = v[-1] if v is not None and len(v) == 3 else v[1] * v[3] if v is not None else k[2] * k[4]
    heads = int(attrs.get("num_heads") or 1)
    keys = k[1] if k is not None and len(k) == 3 else q[1]
    present = ((q[0], heads, keys, q[2] // heads), dtypes[0])  # only for the refusal
    return [(tuple(q[:2]) + (width,), dtypes[0]), present, present]


def _refuse_state(ctx, node, past_inputs, present_outputs) -> None:
    if any(input_at(node, k) for k in past_inputs) or any(used_output(ctx, node, k) for k in present_outputs):
        raise ctx.error("past and present key/value state (a decoder's cache) is not supported; "
                        "export the model without a cache")
    if node.attr("do_rotary", 0):
        raise ctx.error("do_rotary is not supported")


def _heads(ctx, node) -> int:
    heads = node.attr("num_heads")
    if not heads or heads < 1:
        raise ctx.error("num_heads is missing or not positive")
    return int(heads)


def _project(ctx, node, x: str, w: np.ndarray, b: np.ndarray | None, hint: str) -> str:
    """x @ w (+ b) as MatMul and Add import it (FULLY_CONNECTED, then the bias the pipeline
    folds into it)."""
    shape = ctx.shape(x)[:-1] + (w.shape[1],)
    out = ctx.tensor(hint, shape, ctx.dtype(x))
    call_importer(ctx, node, "MatMul", [x, ctx.constant(hint + "_weight", np.ascontiguousarray(w, np.float32))],
          [out])
    if b is None:
        return out
    return binary(ctx, "ADD", out, ctx.constant(hint + "_bias", np.asarray(b, np.float32)), hint + "_biased")


def _attend(ctx, q: str, k: str, v: str, heads: int, scale: float, biases, y: str) -> None:
    """y = concat over heads of SOFTMAX(Q K^T * scale + biases) V, q [B, S, N*h], k [B, L, N*h],
    v [B, L, N*hv]; each bias broadcasts to the scores [B, N, S, L]."""
    batch, length, width = ctx.shape(q)
    keys, value_width = ctx.shape(k)[1], ctx.shape(v)[2]
    size, value_size = width // heads, value_width // heads
    qh = transpose(ctx, reshape(ctx, q, (batch, length, heads, size)), (0, 2, 1, 3))
    kh = transpose(ctx, reshape(ctx, k, (batch, keys, heads, size)), (0, 2, 3, 1))
    vh = transpose(ctx, reshape(ctx, v, (batch, keys, heads, value_size)), (0, 2, 1, 3))
    scores = emit(ctx, "BATCH_MATMUL", [qh, kh], y + "_scores", (batch, heads, length, keys))
    scores = binary(ctx, "MUL", scores, scalar(ctx, scale), y + "_scaled")
    for bias in biases:
        scores = binary(ctx, "ADD", scores, bias, y + "_masked")
    probs = emit(ctx, "SOFTMAX", [scores], y + "_probs", ctx.shape(scores), options={"beta": 1.0})
    context = emit(ctx, "BATCH_MATMUL", [probs, vh], y + "_context", (batch, heads, length, value_size))
    merged = transpose(ctx, context, (0, 2, 1, 3))
    reshape(ctx, merged, (batch, length, value_width), y)


def _mask_bias(ctx, mask: str, batch: int, length: int, keys: int, fill: float, what: str) -> str:
    """The additive bias of a mask, broadcasting to the scores [B, N, S, L]: 0 where a key is
    attended, `fill` (mask_filter_value) where it is masked. Forms: [B] key lengths (keys at or
    past the length masked), [2B] end and start positions, [B, L] and [B, S, L] 0/1 masks (a key
    is attended where > 0). Megatron's [B, 1, M, M] is refused: onnxruntime's CPU kernel has none."""
    shape = ctx.shape(mask)
    if ctx.dtype(mask) != np.int32:
        raise ctx.error(f"{what} {mask!r} has dtype {ctx.dtype(mask)}; int32 is supported")
    zero = ctx.constant("zero", np.zeros((), np.int32))
    if shape in ((batch,), (2 * batch,)):
        positions = ctx.constant("positions", np.arange(keys, dtype=np.int32).reshape(1, keys))
        bounds = reshape(ctx, mask, (batch, 1) if shape == (batch,) else (2, batch, 1))
        ends = bounds if shape == (batch,) else _call_gather(ctx, bounds, 0, (batch, 1))
        valid = emit(ctx, "LESS", [positions, ends], mask + "_valid", (batch, keys), np.bool_)
        if shape == (2 * batch,):
            starts = _call_gather(ctx, bounds, 1, (batch, 1))
            after = emit(ctx, "GREATER_EQUAL", [positions, starts], mask + "_after", (batch, keys), np.bool_)
            valid = emit(ctx, "LOGICAL_AND", [valid, after], mask + "_window", (batch, keys), np.bool_)
        target = (batch, 1, 1, keys)
    elif shape == (batch, keys):
        valid, target = mask, (batch, 1, 1, keys)
    elif shape == (batch, length, keys):
        valid, target = mask, (batch, 1, length, keys)
    else:
        raise ctx.error(f"{what} {mask!r} of shape {list(shape)} is not supported (forms: [{batch}], "
                        f"[{2 * batch}], [{batch}, {keys}], [{batch}, {length}, {keys}])")
    if ctx.dtype(valid) != np.bool_:
        valid = emit(ctx, "GREATER", [valid, zero], mask + "_attended", ctx.shape(valid), np.bool_)
    bias = emit(ctx, "SELECT_V2", [valid, scalar(ctx, 0.0), scalar(ctx, fill)], mask + "_bias",
               ctx.shape(valid))
    return reshape(ctx, bias, target)


def _call_gather(ctx, x: str, index: int, shape) -> str:
    out = ctx.tensor(x + f"_{index}", shape, ctx.dtype(x))
    ctx.add_op("GATHER", [x, ctx.constant("index", np.array(index, np.int32))], [out],
               {"axis": 0, "batch_dims": 0})
    return out


def _causal_bias(ctx, length: int, keys: int, fill: float) -> str:
    """`fill` where a query attends a later key (unidirectional)."""
    later = np.arange(keys)[None, :] > np.arange(length)[:, None]
    bias = np.where(later, np.float32(fill), np.float32(0))
    return ctx.constant("causal", bias.reshape(1, 1, length, keys))


def _biases(ctx, node, mask: str, attention_bias: str, batch, length, keys, heads, what) -> list[str]:
    fill = float(node.attr("mask_filter_value", -10000.0))
    biases = [_mask_bias(ctx, mask, batch, length, keys, fill, what)] if mask else []
    if node.attr("unidirectional", 0):
        biases.append(_causal_bias(ctx, length, keys, fill))
    if attention_bias:
        check_float32(ctx, attention_bias, "attention_bias")
        try:
            np.broadcast_shapes(ctx.shape(attention_bias), (batch, heads, length, keys))
        except ValueError:
            raise ctx.error(f"attention_bias {attention_bias!r} of shape {list(ctx.shape(attention_bias))} "
                            f"does not broadcast to the scores {[batch, heads, length, keys]}") from None
        biases.append(attention_bias)
    return biases


@onnx_op(MS + "Attention")
def import_attention(node, ctx):
    """BERT's self-attention from packed weights [in, q + k + v] (qkv_hidden_sizes, else thirds):
    three projections (MatMul + Add), then _attend with the mask, causal and attention biases."""
    x, w_name = node.inputs[:2]
    bias_name, mask, attention_bias = input_at(node, 2), input_at(node, 3), input_at(node, 5)
    y = node.outputs[0]
    _refuse_state(ctx, node, (4, 6), (1,))
    heads = _heads(ctx, node)
    check_float32(ctx, x, "input")
    if ctx.rank(x) != 3:
        raise ctx.error(f"input {x!r} of shape {list(ctx.shape(x))} is not [batch, sequence, hidden]")
    w = np.asarray(ctx.require_const(w_name, "weights"), np.float32)
    sizes = _attention_sizes(w.shape, node.attrs)
    if w.ndim != 2 or w.shape[0] != ctx.shape(x)[2] or sum(sizes) != w.shape[1] or \
            sizes[0] != sizes[1] or any(s % heads for s in sizes):
        raise ctx.error(f"weights {list(w.shape)} with qkv_hidden_sizes {list(sizes)} and {heads} heads "
                        f"do not fit the input {list(ctx.shape(x))}")
    b = np.asarray(ctx.require_const(bias_name, "bias"), np.float32) if bias_name else None
    if b is not None and b.shape != (w.shape[1],):
        raise ctx.error(f"bias {list(b.shape)} does not fit the weights {list(w.shape)}")
    ends = np.cumsum((0,) + sizes)
    q, k, v = (_project(ctx, node, x, w[:, lo:hi], None if b is None else b[lo:hi], f"{y}_{part}")
               for part, lo, hi in zip("qkv", ends[:-1], ends[1:]))
    batch, length = ctx.shape(x)[:2]
    scale = float(node.attr("scale", 0.0)) or 1 / math.sqrt(sizes[0] // heads)
    biases = _biases(ctx, node, mask, attention_bias, batch, length, length, heads, "mask_index")
    _attend(ctx, q, k, v, heads, scale, biases, y)


@onnx_op(MS + "MultiHeadAttention")
def import_multi_head_attention(node, ctx):
    """Attention of separate Q [B, S, D], K [B, L, D] and V [B, L, Dv] (already projected), the
    optional bias [D + D + Dv] added to them, then _attend with key_padding_mask, causal and
    attention biases."""
    q, k, v = (input_at(node, i) for i in range(3))
    bias_name, mask, attention_bias = input_at(node, 3), input_at(node, 4), input_at(node, 5)
    y = node.outputs[0]
    _refuse_state(ctx, node, (6, 7, 8, 9), (1, 2, 3))
    heads = _heads(ctx, node)
    if not (k and v) or any(ctx.rank(n) != 3 for n in (q, k, v)):
        raise ctx.error("only separate 3-D query, key and value are supported (not packed QKV or KV, "
                        "nor key and value in [batch, heads, length, size])")
    for name in (q, k, v):
        check_float32(ctx, name, "input")
    (batch, length, width), (_, keys, key_width), value_width = ctx.shape(q), ctx.shape(k), ctx.shape(v)[2]
    if key_width != width or ctx.shape(k)[0] != batch or ctx.shape(v)[:2] != (batch, keys) or \
            width % heads or value_width % heads:
        raise ctx.error(f"query {list(ctx.shape(q))}, key {list(ctx.shape(k))} and value "
                        f"{list(ctx.shape(v))} do not fit each other and {heads} heads")
    if bias_name:
        b = np.asarray(ctx.require_const(bias_name, "bias"), np.float32)
        if b.shape != (2 * width + value_width,):
            raise ctx.error(f"bias {list(b.shape)} is not [{2 * width + value_width}]")
        parts = (b[:width], b[width:2 * width], b[2 * width:])
        q, k, v = (binary(ctx, "ADD", name, ctx.constant(f"{name}_bias", part), f"{y}_{tag}")
                   for name, part, tag in zip((q, k, v), parts, "qkv"))
    scale = float(node.attr("scale", 0.0)) or 1 / math.sqrt(width // heads)
    biases = _biases(ctx, node, mask, attention_bias, batch, length, keys, heads, "key_padding_mask")
    _attend(ctx, q, k, v, heads, scale, biases, y)


# --- embeddings -----------------------------------------------------------------------------
@onnx_types(MS + "EmbedLayerNormalization")
def _embed_types(shapes, dtypes, attrs):
    ids, words = shapes[0], shapes[2]
    out = (tuple(ids) + (words[1],), dtypes[2])
    return [out, ((ids[0],), np.dtype(np.int32)), out]


@onnx_op(MS + "EmbedLayerNormalization")
def import_embed_layer_norm(node, ctx):
    """BERT's embeddings: word[input_ids] + position[position_ids, else 0..S-1] (+ segment[
    segment_ids]) through LayerNormalization; mask_index is the mask's count of attended (1)
    positions per sequence (0 without a mask)."""
    ids, segment_ids, words, positions, segments, gamma, beta, mask, position_ids = (
        input_at(node, k) for k in range(9))
    y = node.outputs[0]
    if ctx.rank(ids) != 2:
        raise ctx.error(f"input_ids {ids!r} of shape {list(ctx.shape(ids))} is not [batch, sequence]")
    batch, length = ctx.shape(ids)
    total = _gather(ctx, node, words, ids, y + "_words")
    if position_ids:
        position = _gather(ctx, node, positions, position_ids, y + "_positions")
    else:
        table = ctx.const(positions)
        if table is None or table.shape[0] < length:
            raise ctx.error(f"position_embedding {positions!r} must be a constant of at least "
                            f"{length} rows")
        position = ctx.constant(positions, np.asarray(table[:length], np.float32)[None])
    last = not segment_ids
    total = binary(ctx, "ADD", total, position, y + "_embedded",
                    out=(used_output(ctx, node, 2) or None) if last else None)
    if segment_ids:
        total = binary(ctx, "ADD", total, _gather(ctx, node, segments, segment_ids, y + "_segments"),
                        y + "_embedded", out=used_output(ctx, node, 2) or None)
    call_importer(ctx, node, "LayerNormalization", [total, gamma, beta], [y], axis=-1,
          epsilon=float(node.attr("epsilon", 1e-12)))
    index = used_output(ctx, node, 1)
    if not index:
        return
    if not mask:  # onnxruntime's mask_index of no mask
        ctx.set_constant(index, np.zeros(batch, np.int32))
        return
    ones = emit(ctx, "EQUAL", [mask, ctx.constant("one", np.ones((), ctx.dtype(mask)))], mask + "_ones",
               ctx.shape(mask), np.bool_)
    counted = emit(ctx, "CAST", [ones], mask + "_count", ctx.shape(mask), np.int32,
                  {"in_data_type": np.dtype(np.bool_), "out_data_type": np.dtype(np.int32)})
    ctx.add_op("SUM", [counted, ctx.constant("axes", np.array([1], np.int32))], [index],
               {"keep_dims": False})


def _gather(ctx, node, table: str, indices: str, hint: str) -> str:
    if ctx.const(table) is None:
        raise ctx.error(f"embedding table {table!r} is computed at run time; it must be a constant")
    out = ctx.tensor(hint, ctx.shape(indices) + ctx.shape(table)[1:], ctx.dtype(table))
    call_importer(ctx, node, "Gather", [table, indices], [out], axis=0)
    return out


# --- rotary position embedding --------------------------------------------------------------
onnx_types(MS + "RotaryEmbedding")(same_as_input)


@onnx_op(MS + "RotaryEmbedding")
def import_rotary_embedding(node, ctx):
    """Rotates the first rotary_embedding_dim R features of each head (input [B, S, N*H] or
    [B, N, S, H]) by the angles of its position: with c, s = cos_cache, sin_cache[position]
    (position_ids [B, S], or [1] the first position), halves x1, x2 (interleaved: even and odd
    features) become x1*c - x2*s and x2*c + x1*s; features past R pass unchanged."""
    x, position_ids, cos_cache, sin_cache = node.inputs[:4]
    y = node.outputs[0]
    check_float32(ctx, x, "input")
    if node.attr("is_packed_batching", 0):
        raise ctx.error("is_packed_batching is not supported")
    shape, rank = ctx.shape(x), ctx.rank(x)
    half = ctx.shape(cos_cache)[1]
    if rank not in (3, 4) or ctx.shape(sin_cache) != ctx.shape(cos_cache) or ctx.rank(cos_cache) != 2:
        raise ctx.error(f"input {list(shape)} with cos_cache {list(ctx.shape(cos_cache))} and sin_cache "
                        f"{list(ctx.shape(sin_cache))}: expected a 3-D or 4-D input and [positions, "
                        "R/2] caches")
    rotary = int(node.attr("rotary_embedding_dim", 0)) or 2 * half
    heads = int(node.attr("num_heads", 0))
    size = shape[3] if rank == 4 else shape[2] // heads if heads else rotary
    if rotary != 2 * half or rotary > size or (rank == 3 and shape[2] % size):
        raise ctx.error(f"rotary_embedding_dim {rotary} with caches of {half} columns does not fit heads "
                        f"of {size} features in the input {list(shape)}")
    batch, length = shape[0], shape[2] if rank == 4 else shape[1]
    # x as [B, S, N, H] (3-D) or [B, N, S, H]; the angles as [B|1, S, 1, R/2] or [B|1, 1, S, R/2].
    x4 = x if rank == 4 else reshape(ctx, x, (batch, length, shape[2] // size, size))
    angle_shape = (-1, 1, length, half) if rank == 4 else (-1, length, 1, half)
    cos, sin = (_angles(ctx, node, cache, position_ids, batch, length, angle_shape)
                for cache in (cos_cache, sin_cache))
    shape4 = ctx.shape(x4)
    parts = _split(ctx, node, x4, 3, [rotary, size - rotary] if rotary < size else [rotary])
    rotated = parts[0]
    if node.attr("interleaved", 0):  # pairs (x[2i], x[2i+1]): the halves along a new last axis
        pairs = reshape(ctx, rotated, shape4[:3] + (half, 2))
        first, second = _split(ctx, node, pairs, 4, [1, 1])
        cos, sin = (reshape(ctx, a, ctx.shape(a) + (1,)) for a in (cos, sin))
        axis = 4
    else:
        first, second = _split(ctx, node, rotated, 3, [half, half])
        axis = 3
    low = binary(ctx, "SUB", binary(ctx, "MUL", first, cos, y + "_x1c"),
                  binary(ctx, "MUL", second, sin, y + "_x2s"), y + "_low")
    high = binary(ctx, "ADD", binary(ctx, "MUL", second, cos, y + "_x2c"),
                   binary(ctx, "MUL", first, sin, y + "_x1s"), y + "_high")
    joined = ctx.tensor(y + "_rotated", ctx.shape(first)[:axis] + (2 * ctx.shape(first)[axis],), ctx.dtype(x))
    call_importer(ctx, node, "Concat", [low, high], [joined], axis=axis)
    if axis == 4:
        joined = reshape(ctx, joined, shape4[:3] + (rotary,))
    if len(parts) > 1:
        whole = ctx.tensor(y + "_whole", shape4, ctx.dtype(x))
        call_importer(ctx, node, "Concat", [joined, parts[1]], [whole], axis=3)
        joined = whole
    reshape(ctx, joined, shape, y)


def _split(ctx, node, x: str, axis: int, sizes) -> list[str]:
    if len(sizes) == 1:
        return [x]
    shape = ctx.shape(x)
    parts = [ctx.tensor(f"{x}_part", shape[:axis] + (s,) + shape[axis + 1:], ctx.dtype(x)) for s in sizes]
    call_importer(ctx, node, "Split", [x], parts, axis=axis)
    return parts


def _angles(ctx, node, cache: str, position_ids: str, batch: int, length: int, target) -> str:
    """cache[position] for each (batch, position), reshaped to `target` (-1: 1 or the batch)."""
    table, positions = ctx.const(cache), ctx.const(position_ids)
    offsets = (positions.size == 1) if positions is not None else ctx.shape(position_ids) in ((1,), ())
    if not offsets and ctx.shape(position_ids) != (batch, length):
        raise ctx.error(f"position_ids {position_ids!r} of shape {list(ctx.shape(position_ids))} is not "
                        f"[1] or [{batch}, {length}]")
    if table is not None and positions is not None:
        index = (int(np.ravel(positions)[0]) + np.arange(length))[None] if offsets else positions
        value = np.asarray(table, np.float32)[np.asarray(index, np.int64)]
        return ctx.constant(cache, value.reshape([value.shape[0] if d == -1 else d for d in target]))
    if offsets:
        start = reshape(ctx, position_ids, (1, 1))
        index = binary(ctx, "ADD", start, ctx.constant("positions", np.arange(length, dtype=np.int32)[None]),
                        position_ids + "_positions")
    else:
        index = position_ids
    gathered = _gather(ctx, node, cache, index, f"{cache}_at")
    rows = ctx.shape(gathered)[0]
    return reshape(ctx, gathered, [rows if d == -1 else d for d in target])


# --- grouped-query attention ----------------------------------------------------------------
@onnx_types(MS + "GroupQueryAttention")
def _group_query_attention_types(shapes, dtypes, attrs):
    """Output [B, S, N*H]; present_key and present_value [B, Nk, S, H]."""
    q = shapes[0]
    heads, kv_heads = int(attrs.get("num_heads") or 1), int(attrs.get("kv_num_heads") or 1)
    packed = len(shapes) < 2 or shapes[1] is None
    size = q[2] // (heads + 2 * kv_heads) if packed else q[2] // heads
    past = shapes[3][2] if len(shapes) > 3 and shapes[3] is not None else 0  # a past: refused
    present = (q[0], kv_heads, past + q[1], size)
    return [((q[0], q[1], heads * size), dtypes[0])] + [(present, dtypes[0])] * 2


# GroupQueryAttention's inputs beyond the ones converted, and attributes that must keep their
# defaults, with what they are.
_GQA_INPUTS = {3: "past_key", 4: "past_value", 11: "head_sink", 12: "k_scale", 13: "v_scale",
               14: "q_norm_weight", 15: "k_norm_weight", 16: "query_seqlens"}
_GQA_DEFAULTS = {"local_window_size": -1, "softcap": 0.0, "smooth_softmax": 0, "qk_output": 0}


@onnx_op(MS + "GroupQueryAttention")
def import_group_query_attention(node, ctx):
    """A decoder's attention over its prompt, without a cache: Q [B, S, N*H], K and V [B, S, Nk*H]
    (or packed in Q), each K/V head serving N/Nk query heads (GATHERed to N heads), the optional
    rotary embedding of Q and K (RotaryEmbedding's ops, positions 0..S-1 or position_ids), keys
    past seqlens_k[b] masked and, causal, later keys too; present_key/present_value are K and V
    in [B, Nk, S, H]."""
    q, k, v = (input_at(node, i) for i in range(3))
    seqlens, cos_cache, sin_cache, position_ids, attention_bias = (input_at(node, i) for i in (5, 7, 8, 9, 10))
    y = node.outputs[0]
    given = [what for index, what in _GQA_INPUTS.items() if input_at(node, index)]
    changed = [name for name, default in _GQA_DEFAULTS.items() if node.attr(name, default) != default]
    if given or changed:
        raise ctx.error(f"{(given + changed)[0]} is not supported (a cache-free prompt attention is: "
                        "no past_key/past_value, query_seqlens, head_sink, KV scales, QK norms, "
                        "local window, softcap, smooth softmax or QK output)")
    heads, kv_heads = _heads(ctx, node), int(node.attr("kv_num_heads", 0))
    check_float32(ctx, q, "query")
    if kv_heads < 1 or heads % kv_heads or ctx.rank(q) != 3:
        raise ctx.error(f"num_heads {heads} and kv_num_heads {kv_heads} with query {list(ctx.shape(q))}: "
                        "expected a 3-D query and num_heads a multiple of kv_num_heads")
    batch, length, width = ctx.shape(q)
    if not (k or v):  # packed [B, S, (N + 2 Nk) H]
        size = width // (heads + 2 * kv_heads)
        q, k, v = _split(ctx, node, q, 2, [heads * size, kv_heads * size, kv_heads * size])
    size = ctx.shape(q)[2] // heads
    for name in (k, v):
        if ctx.shape(name) != (batch, length, kv_heads * size):
            raise ctx.error(f"key/value {name!r} {list(ctx.shape(name))} is not [{batch}, {length}, "
                            f"{kv_heads * size}]")
    if node.attr("do_rotary", 0):
        if not (cos_cache and sin_cache):
            raise ctx.error("do_rotary without cos_cache and sin_cache")
        positions = position_ids or ctx.constant("position", np.zeros(1, np.int32))
        q, k = (_rotate(ctx, node, name, positions, cos_cache, sin_cache, count)
                for name, count in ((q, heads), (k, kv_heads)))
    for name, index in ((k, 1), (v, 2)):
        present = used_output(ctx, node, index)
        if present:
            transpose(ctx, reshape(ctx, name, (batch, length, kv_heads, size)), (0, 2, 1, 3), present)
    if heads != kv_heads:
        k, v = (_repeat_heads(ctx, name, kv_heads, heads, size) for name in (k, v))
    fill = float(np.finfo(np.float32).min)
    lengths = binary(ctx, "ADD", seqlens, ctx.constant("one", np.ones((), np.int32)), seqlens + "_lengths")
    biases = [_mask_bias(ctx, lengths, batch, length, length, fill, "seqlens_k")]
    if node.attr("causal", 1):
        biases.append(_causal_bias(ctx, length, length, fill))
    if attention_bias:
        biases += _biases(ctx, replace(node, attrs={}), "", attention_bias, batch, length, length, heads, "")
    scale = float(node.attr("scale", 0.0)) or 1 / math.sqrt(size)
    _attend(ctx, q, k, v, heads, scale, biases, y)


def _rotate(ctx, node, x: str, positions: str, cos_cache: str, sin_cache: str, heads: int) -> str:
    out = ctx.tensor(x + "_rotary", ctx.shape(x), ctx.dtype(x))
    attrs = {"interleaved": node.attr("rotary_interleaved", 0), "num_heads": heads}
    import_rotary_embedding(replace(node, op_type="RotaryEmbedding", outputs=[out], attrs=attrs,
                                    inputs=[x, positions, cos_cache, sin_cache]), ctx)
    return out


def _repeat_heads(ctx, x: str, kv_heads: int, heads: int, size: int) -> str:
    """[B, L, Nk*H] -> [B, L, N*H], head n being K/V head n // (N / Nk)."""
    batch, length = ctx.shape(x)[:2]
    split = reshape(ctx, x, (batch, length, kv_heads, size))
    index = ctx.constant("heads", np.arange(heads, dtype=np.int32) // (heads // kv_heads))
    repeated = emit(ctx, "GATHER", [split, index], x + "_heads", (batch, length, heads, size), ctx.dtype(x),
                   {"axis": 2, "batch_dims": 0})
    return reshape(ctx, repeated, (batch, length, heads * size))
