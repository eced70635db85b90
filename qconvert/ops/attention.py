"""The ONNX domain's attention ops (opset 23 and later): Attention and RotaryEmbedding, composed
from the ops qconvert/ops/contrib.py builds onnxruntime's fused attention from (ops/compose.py's helpers;
RotaryEmbedding is com.microsoft RotaryEmbedding's importer with the ONNX input order).

Attention works per head in [B, N, S, H] (3-D inputs [B, S, N*H] are reshaped and transposed
there, and the output back): K and V after their past (CONCATENATION along the sequence: the
present key/value, static shapes), each K/V head GATHERed to the query heads it serves (GQA),
scores Q K^T (BATCH_MATMUL) times the scale, the softcap (c * TANH(scores / c)), the additive bias
(the mask: a bool mask is 0 where True and -inf where False, a float mask is added as it is; the
causal and window biases, aligned bottom-right after the past, as constants; with
nonpad_kv_seqlen, an external cache's lengths, computed at run time by comparisons), SOFTMAX, and a row
whose keys are all masked gives zeros (as the ONNX reference defines it), then times V.
softmax_precision is ignored: TFLite computes the softmax in float32.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from .compose import binary, call_importer, check_float32, emit, input_at, scalar, used_output
from .contrib import import_rotary_embedding
from .layout import reshape, transpose
from .registry import onnx_op

FLOAT = np.dtype(np.float32)
_NEG_INF = np.float32(-np.inf)


def _heads_first(ctx, x: str, heads: int, what: str) -> str:
    """A 3-D [B, S, N*H] input as [B, N, S, H]."""
    batch, length, width = ctx.shape(x)
    if heads < 1:
        raise ctx.error(f"3-D {what} {x!r} needs q_num_heads and kv_num_heads (missing or not positive)")
    if width % heads:
        raise ctx.error(f"{what} {x!r} of shape {list(ctx.shape(x))} does not split into {heads} heads "
                        "(q_num_heads/kv_num_heads)")
    return transpose(ctx, reshape(ctx, x, (batch, length, heads, width // heads)), (0, 2, 1, 3))


def _with_past(ctx, node, current: str, past_index: int, present_index: int, what: str) -> str:
    """K or V [B, Nk, L, H] after its past (CONCATENATION along L), written to the present
    output when something reads it."""
    past, present = input_at(node, past_index), used_output(ctx, node, present_index)
    if not past:
        if present:
            ctx.add_op("IDENTITY", [current], [present])
        return current
    check_float32(ctx, past, f"past_{what}")
    shape, past_shape = ctx.shape(current), ctx.shape(past)
    if len(past_shape) != 4 or past_shape[:2] != shape[:2] or past_shape[3] != shape[3]:
        raise ctx.error(f"past_{what} {past!r} of shape {list(past_shape)} does not fit the {what} heads "
                        f"{list(shape)}")
    out = present or ctx.tensor(f"{current}_present", shape[:2] + (past_shape[2] + shape[2], shape[3]),
                                ctx.dtype(current))
    call_importer(ctx, node, "Concat", [past, current], [out], axis=2)
    return out


def _constant_bias(node, length: int, keys: int, offset: int) -> np.ndarray | None:
    """The causal and window biases [S, L] (0 where a query may attend a key, -inf elsewhere),
    query i sitting at position i + offset among the keys; None when neither applies."""
    causal = bool(node.attr("is_causal", 0))
    left, right = int(node.attr("left_window_size", -1)), int(node.attr("right_window_size", -1))
    if not causal and left < 0 and right < 0:
        return None
    diff = (np.arange(length)[:, None] + offset) - np.arange(keys)[None, :]
    allowed = np.ones((length, keys), np.bool_)
    if causal:
        allowed &= diff >= 0
    if left >= 0:
        allowed &= diff <= left
    if right >= 0:
        allowed &= -diff <= right
    return np.where(allowed, np.float32(0), _NEG_INF)


def _padding_bias(ctx, node, nonpad: str, batch: int, length: int, keys: int, y: str) -> str:
    """An external cache's bias [B, 1, S|1, L] from nonpad_kv_seqlen [B]: -inf for the keys at or
    past each batch's length n and, causal or windowed, the frontier aligned to n (query i at
    position i + n - S among the keys)."""
    if ctx.shape(nonpad) != (batch,) or ctx.dtype(nonpad).kind not in "iu":
        raise ctx.error(f"nonpad_kv_seqlen {nonpad!r} of shape {list(ctx.shape(nonpad))} is not [{batch}] "
                        "integers")
    n = reshape(ctx, nonpad, (batch, 1, 1, 1))
    keys_at = ctx.constant("key_positions", np.arange(keys, dtype=np.int32).reshape(1, 1, 1, keys))
    allowed = emit(ctx, "LESS", [keys_at, n], y + "_valid_keys", (batch, 1, 1, keys), np.bool_)
    causal = bool(node.attr("is_causal", 0))
    left, right = int(node.attr("left_window_size", -1)), int(node.attr("right_window_size", -1))
    if causal or left >= 0 or right >= 0:  # diff = i + n - S - j
        grid = (np.arange(length)[:, None] - length - np.arange(keys)[None, :]).astype(np.int32)
        diff = binary(ctx, "ADD", ctx.constant("offsets", grid.reshape(1, 1, length, keys)), n, y + "_diff")
        for flag, bound, op in ((causal, 0, "GREATER_EQUAL"), (left >= 0, left, "LESS_EQUAL"),
                                (right >= 0, -right, "GREATER_EQUAL")):
            if flag:
                inside = emit(ctx, op, [diff, ctx.constant("bound", np.array(bound, np.int32))],
                             y + "_inside", ctx.shape(diff), np.bool_)
                allowed = emit(ctx, "LOGICAL_AND", [allowed, inside], y + "_allowed",
                              np.broadcast_shapes(ctx.shape(allowed), ctx.shape(inside)), np.bool_)
    return emit(ctx, "SELECT_V2", [allowed, scalar(ctx, 0.0), scalar(ctx, _NEG_INF)], y + "_padding",
               ctx.shape(allowed))


def _mask_bias(ctx, node, mask: str, keys: int, hint: str):
    """The mask as an additive bias whose last axis has the keys' length (a shorter mask is
    padded with masked keys): a numpy array for a constant mask, else a tensor name."""
    value = ctx.const(mask)
    shape = ctx.shape(mask)
    if not shape or shape[-1] > keys:
        raise ctx.error(f"attn_mask {mask!r} of shape {list(shape)} does not fit the {keys} keys")
    if value is not None:
        bias = (np.where(value, np.float32(0), _NEG_INF) if value.dtype == np.bool_
                else np.asarray(value, np.float32))
        pad = [(0, 0)] * (bias.ndim - 1) + [(0, keys - shape[-1])]
        return np.pad(bias, pad, constant_values=_NEG_INF)
    if ctx.dtype(mask) == np.bool_:
        bias = emit(ctx, "SELECT_V2", [mask, scalar(ctx, 0.0), scalar(ctx, _NEG_INF)], hint + "_mask_bias",
                   shape)
    else:
        check_float32(ctx, mask, "attn_mask")
        bias = mask
    if shape[-1] < keys:
        block = ctx.constant("masked", np.full(shape[:-1] + (keys - shape[-1],), _NEG_INF))
        padded = ctx.tensor(hint + "_mask_padded", shape[:-1] + (keys,), FLOAT)
        call_importer(ctx, node, "Concat", [bias, block], [padded], axis=len(shape) - 1)
        bias = padded
    return bias


@onnx_op("Attention")
def import_attention(node, ctx):
    """Scaled dot-product attention of Q, K, V (3-D [B, S, N*H] with q_num_heads/kv_num_heads, or
    4-D [B, N, S, H]), optional attn_mask, past_key/past_value (the present_key/present_value
    outputs are them concatenated with K and V) or nonpad_kv_seqlen, is_causal, the sliding
    window (opset 25), GQA, scale, softcap and the qk_matmul_output of qk_matmul_output_mode 0 to 3
    (the scaled Q K^T, after the softcap, after the bias, after the softmax: onnxruntime's stages)."""
    y = node.outputs[0]
    q4, k4, v4 = _heads_first_inputs(node, ctx)
    (batch, heads, length, _), kv_heads = ctx.shape(q4), ctx.shape(k4)[1]
    past = ctx.shape(input_at(node, 4))[2] if input_at(node, 4) else 0
    k4 = _with_past(ctx, node, k4, 4, 1, "key")
    v4 = _with_past(ctx, node, v4, 5, 2, "value")
    keys = ctx.shape(k4)[2]
    if heads != kv_heads:  # each K/V head serves heads / kv_heads query heads, in order
        index = ctx.constant("heads", np.arange(heads, dtype=np.int32) // (heads // kv_heads))
        k4, v4 = (emit(ctx, "GATHER", [name, index], name + "_heads", (batch, heads) + ctx.shape(name)[2:],
                      options={"axis": 1, "batch_dims": 0}) for name in (k4, v4))
    scores_shape = (batch, heads, length, keys)
    scores = _scaled_scores(node, ctx, q4, k4, scores_shape)
    mode = int(node.attr("qk_matmul_output_mode", 0))
    if mode not in (0, 1, 2, 3):
        raise ctx.error(f"qk_matmul_output_mode {mode} is not one of 0, 1, 2, 3")
    qk_output = used_output(ctx, node, 3)

    def stage(tensor: str, at: int) -> None:
        """Writes `tensor` to qk_matmul_output when the mode asks for this stage."""
        if qk_output and mode == at:
            ctx.add_op("IDENTITY", [tensor], [qk_output])
    stage(scores, 0)  # the scaled Q K^T
    scores = _softcap(node, ctx, scores, scores_shape)
    stage(scores, 1)  # after the softcap, before the bias
    bias, constant = _attention_bias(node, ctx, scores_shape, past)
    if bias:
        scores = binary(ctx, "ADD", scores, bias, y + "_biased")
    stage(scores, 2)
    probs = emit(ctx, "SOFTMAX", [scores], y + "_probs", scores_shape, options={"beta": 1.0})
    if bias:
        probs = _guard_masked_rows(ctx, bias, constant, probs, scores_shape, y)
    stage(probs, 3)
    _context(ctx, node, probs, v4)


def _heads_first_inputs(node, ctx):
    """Q, K and V as [B, N, S, H] (3-D inputs split into heads, _heads_first), after refusing
    inputs that do not fit each other: past_key without past_value, a past with
    nonpad_kv_seqlen, other than float32, neither all 3-D nor all 4-D, mismatched shapes."""
    q, k, v = node.inputs[:3]
    nonpad = input_at(node, 6)
    if bool(input_at(node, 4)) != bool(input_at(node, 5)):
        raise ctx.error("past_key and past_value must be given together")
    if nonpad and input_at(node, 4):
        raise ctx.error("nonpad_kv_seqlen and past_key/past_value cannot be given together")
    for name, what in ((q, "Q"), (k, "K"), (v, "V")):
        check_float32(ctx, name, what)
    rank = ctx.rank(q)
    if rank not in (3, 4) or ctx.rank(k) != rank or ctx.rank(v) != rank:
        raise ctx.error(f"Q {list(ctx.shape(q))}, K {list(ctx.shape(k))} and V {list(ctx.shape(v))}: "
                        "expected three 3-D or three 4-D inputs")
    if rank == 3:
        q4 = _heads_first(ctx, q, int(node.attr("q_num_heads", 0)), "Q")
        k4, v4 = (_heads_first(ctx, name, int(node.attr("kv_num_heads", 0)), what)
                  for name, what in ((k, "K"), (v, "V")))
    else:
        q4, k4, v4 = q, k, v
    (batch, heads, _, size), (_, kv_heads, _, key_size) = ctx.shape(q4), ctx.shape(k4)
    if ctx.shape(k4)[0] != batch or key_size != size or ctx.shape(v4)[:3] != ctx.shape(k4)[:3] or \
            heads % kv_heads:
        raise ctx.error(f"Q {list(ctx.shape(q))}, K {list(ctx.shape(k))} and V {list(ctx.shape(v))} do "
                        "not fit each other (the query heads a multiple of the key/value heads)")
    return q4, k4, v4


def _scaled_scores(node, ctx, q4: str, k4: str, scores_shape) -> str:
    """Q K^T (BATCH_MATMUL with K transposed) times the scale attribute, 1/sqrt(H) by default."""
    y = node.outputs[0]
    kt = transpose(ctx, k4, (0, 1, 3, 2))
    scores = emit(ctx, "BATCH_MATMUL", [q4, kt], y + "_qk", scores_shape)
    scale = node.attr("scale")
    scale = 1 / math.sqrt(ctx.shape(q4)[3]) if scale is None else float(scale)
    return binary(ctx, "MUL", scores, scalar(ctx, scale), y + "_scaled")


def _softcap(node, ctx, scores: str, scores_shape) -> str:
    """The scores through the softcap attribute c > 0, c * TANH(scores / c); as they are without."""
    y = node.outputs[0]
    softcap = float(node.attr("softcap", 0.0))
    if softcap > 0:
        scores = binary(ctx, "MUL", scores, scalar(ctx, 1 / softcap), y + "_capped_in")
        scores = emit(ctx, "TANH", [scores], y + "_tanh", scores_shape)
        scores = binary(ctx, "MUL", scores, scalar(ctx, softcap), y + "_capped")
    return scores


def _attention_bias(node, ctx, scores_shape, past: int):
    """(additive bias tensor or None, its constant part as numpy or None): attn_mask, the causal
    and window biases (constants, or run-time ones with nonpad_kv_seqlen), added into one;
    refused unless it broadcasts to the scores. The constant part decides _guard_masked_rows."""
    y, mask, nonpad = node.outputs[0], input_at(node, 3), input_at(node, 6)
    batch, _, length, keys = scores_shape
    constant = None if nonpad else _constant_bias(node, length, keys, past)
    bias = _mask_bias(ctx, node, mask, keys, y) if mask else None
    if isinstance(bias, np.ndarray):
        constant = bias if constant is None else bias + constant
        bias = None
    if nonpad:
        padding = _padding_bias(ctx, node, nonpad, batch, length, keys, y)
        bias = padding if bias is None else binary(ctx, "ADD", bias, padding, y + "_padded_bias")
    shapes = [s for s in (np.shape(constant) if constant is not None else None,
                          ctx.shape(bias) if bias else None) if s is not None]
    try:
        fits = tuple(np.broadcast_shapes(scores_shape, *shapes)) == scores_shape
    except ValueError:
        fits = False
    if not fits:
        raise ctx.error(f"attn_mask {mask!r} of shape {list(ctx.shape(mask))} does not broadcast to the "
                        f"scores {list(scores_shape)}")
    if constant is not None:
        constant_name = ctx.constant("attention_bias", constant.astype(np.float32))
        bias = constant_name if bias is None else binary(ctx, "ADD", bias, constant_name, y + "_bias")
    return bias, constant


def _context(ctx, node, probs: str, v4: str) -> None:
    """The output: the probabilities times V (BATCH_MATMUL), written as [B, N, S, H] for 4-D
    inputs, back to [B, S, N*H] for 3-D ones."""
    y = node.outputs[0]
    batch, heads, length, _ = ctx.shape(probs)
    value_size = ctx.shape(v4)[3]
    if ctx.rank(node.inputs[0]) == 4:
        emit(ctx, "BATCH_MATMUL", [probs, v4], y, (batch, heads, length, value_size), out=y)
        return
    context = emit(ctx, "BATCH_MATMUL", [probs, v4], y + "_context", (batch, heads, length, value_size))
    reshape(ctx, transpose(ctx, context, (0, 2, 1, 3)), (batch, length, heads * value_size), y)


def _guard_masked_rows(ctx, bias: str, constant, probs: str, scores_shape, y: str) -> str:
    """The probabilities with the rows whose keys are all masked (-inf bias, where SOFTMAX gives
    NaN) set to 0, as the ONNX reference sets them: decided on the constant bias when the bias is
    one, else at run time (REDUCE_MAX of the bias over the keys, compared with -inf)."""
    if ctx.const(bias) is None:
        shape = ctx.shape(bias)
        axes = ctx.constant("axes", np.array([len(shape) - 1], np.int32))
        top = emit(ctx, "REDUCE_MAX", [bias, axes], y + "_bias_max", shape[:-1] + (1,),
                  options={"keep_dims": True})
        attended = emit(ctx, "GREATER", [top, scalar(ctx, _NEG_INF)], y + "_has_key", shape[:-1] + (1,),
                       np.bool_)
    else:
        rows = np.max(constant, axis=-1, keepdims=True) > _NEG_INF
        if rows.all():
            return probs
        attended = ctx.constant("has_key", rows)
    return emit(ctx, "SELECT_V2", [attended, probs, scalar(ctx, 0.0)], y + "_probs_guarded", scores_shape)


@onnx_op("RotaryEmbedding")
def import_rotary_embedding_onnx(node, ctx):
    """ONNX's RotaryEmbedding (X, cos_cache, sin_cache, position_ids) is com.microsoft
    RotaryEmbedding's computation: with position_ids, caches [positions, R/2] indexed by them;
    without, caches [B, S, R/2] holding each position's angles already (as a table of B*S rows
    read at positions 0..B*S-1). The caches are constants (a model's precomputed tables)."""
    x, cos_cache, sin_cache = node.inputs[:3]
    position_ids = input_at(node, 3)
    attrs = {"interleaved": node.attr("interleaved", 0), "num_heads": node.attr("num_heads", 0),
             "rotary_embedding_dim": node.attr("rotary_embedding_dim", 0)}
    values = [ctx.require_const(cache, what, "the rotation's angle tables are taken as constants "
                                "(make them initializers)")
              for cache, what in ((cos_cache, "cos_cache"), (sin_cache, "sin_cache"))]
    if not position_ids:
        shape = ctx.shape(x)
        batch, length = shape[0], shape[2] if len(shape) == 4 else shape[1]
        if ctx.shape(cos_cache)[:2] != (batch, length) or ctx.rank(cos_cache) != 3:
            raise ctx.error(f"cos_cache {cos_cache!r} of shape {list(ctx.shape(cos_cache))} is not "
                            f"[{batch}, {length}, R/2] (without position_ids)")
        cos_cache, sin_cache = (ctx.constant(f"{cache}_rows", np.asarray(value, np.float32).reshape(
            batch * length, -1)) for cache, value in zip((cos_cache, sin_cache), values))
        position_ids = ctx.constant("positions", np.arange(batch * length, dtype=np.int32).reshape(batch, length))
    import_rotary_embedding(replace(node, inputs=[x, position_ids, cos_cache, sin_cache], attrs=attrs), ctx)
