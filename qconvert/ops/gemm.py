"""Gemm and MatMul: FULLY_CONNECTED when the right operand is a constant matrix, otherwise
BATCH_MATMUL (with broadcasting batch dimensions)."""

from __future__ import annotations

import numpy as np

from .layout import reshape
from .registry import HybridRule, QuantRule, onnx_op, tflite_op
from .versions import FLOAT32, INT8, INT16, input_dtype, is_type, scale_count


def _fc_version(op, model):
    """op_version.cc's FULLY_CONNECTED, in its order (sparse weights, v8, and int4 weights, v10,
    are never written)."""
    weights = model.arrays[op.inputs[1]]
    hybrid = is_type(op, model, (FLOAT32, INT8), (FLOAT32,))
    if hybrid and 1 < scale_count(weights) == weights.shape[0]:
        return 12  # per-channel hybrid
    if is_type(op, model, (INT16, INT8), (INT16,)):
        return 11  # 16x8: quantized_bias_type, absent, reads as FLOAT32, which op_version.cc counts as set
    if is_type(op, model, (INT16, INT16), (INT16,)):
        return 7
    if len(op.inputs) == 2:  # no bias slot; qconvert writes a -1 bias instead, which counts
        return 6
    if op.options.get("keep_num_dims"):
        return 5
    if is_type(op, model, (INT8, INT8), (INT8,)):
        return 4
    if hybrid:
        return 9 if op.options.get("asymmetric_quantize_inputs") else 3
    return 2 if op.options.get("weights_format", "DEFAULT") == "SHUFFLED4x16INT8" else 1


def _batch_matmul_version(op, model):
    dtype = input_dtype(op, model)
    if dtype == INT16:
        return 3
    if dtype == INT8:
        return 2
    hybrid = is_type(op, model, (FLOAT32, INT8), (FLOAT32,))
    if hybrid and op.options.get("asymmetric_quantize_inputs"):
        return 4
    return 1


def _exact(a: np.ndarray) -> np.ndarray:
    """A float operand of a folded product in float64: BLAS sums a float32 product in an order
    its kernel for this CPU picks, so the folded constant's last bits (the written bytes) would
    depend on the machine; the float64 sum rounded to float32 does not."""
    return a.astype(np.float64) if a.dtype.kind == "f" else a


def _evaluate_fc(inputs, op):
    x, w = inputs[0], inputs[1]
    y = _exact(x).reshape(-1, w.shape[1]) @ _exact(w).T
    if len(inputs) > 2 and inputs[2] is not None:
        y = y + inputs[2]
    if op.options.get("keep_num_dims"):
        y = y.reshape(x.shape[:-1] + (w.shape[0],))
    return [y.astype(x.dtype)]


def _evaluate_batch_matmul(inputs, op):
    a, b = inputs
    if op.options.get("adj_x"):
        a = np.swapaxes(a, -1, -2)
    if op.options.get("adj_y"):
        b = np.swapaxes(b, -1, -2)
    return [np.matmul(_exact(a), _exact(b)).astype(a.dtype)]


# Weights [out, in]: per output channel along axis 0 (per tensor with --per-tensor-fc).
tflite_op("FULLY_CONNECTED", options="FullyConnectedOptions", version=_fc_version,
          quant=QuantRule(weight=1, weight_axis=0, bias=2, int16=True),
          hybrid=HybridRule(axis=0, asymmetric=True),
          evaluate=_evaluate_fc)
# Both operands int8 activations (attention's Q K^T and its probabilities times V): TFLite's
# int8 kernel takes a zero point on each.
tflite_op("BATCH_MATMUL", options="BatchMatMulOptions", version=_batch_matmul_version,
          quant=QuantRule(activations=(0, 1)),
          hybrid=HybridRule(asymmetric=True),
          evaluate=_evaluate_batch_matmul)


def check_product(ctx, a, a_shape, b_shape, y, b_name: str, shown: str = "") -> None:
    """The shapes of y = a @ b (matrices in the last two axes, batch axes broadcast; a 1-D
    operand as a row or a column, as numpy and ONNX take it) agree: a's columns are b's rows and
    y has the product's shape. A weight that does not fit its input (a bit flip in its dims, an
    --input-shape that changes a flattened size) is refused here, naming both sizes, instead of
    ending in a reshape error or a wrong model. `shown` describes b in messages (default: its
    name and shape)."""
    shown = shown or f"{b_name!r} {list(b_shape)}"
    a2 = (1,) + tuple(a_shape) if len(a_shape) == 1 else tuple(a_shape)
    b2 = tuple(b_shape) + (1,) if len(b_shape) == 1 else tuple(b_shape)
    if a2[-1] != b2[-2]:
        raise ctx.error(f"input {a!r} {list(a_shape)} has {a2[-1]:,} features, {shown} "
                        f"expects {b2[-2]:,}")
    try:
        batch = np.broadcast_shapes(a2[:-2], b2[:-2])
    except ValueError:
        raise ctx.error(f"the batch axes of {a!r} {list(a_shape)} and {shown} do not "
                        "broadcast") from None
    product = tuple(batch) + (a2[-2], b2[-1])
    if len(a_shape) == 1:
        product = product[:-2] + product[-1:]
    if len(b_shape) == 1:
        product = product[:-1]
    if product != tuple(ctx.shape(y)):
        raise ctx.error(f"{a!r} {list(a_shape)} times {shown} is {list(product)}, not the "
                        f"output's shape {list(ctx.shape(y))}")


def fully_connected(ctx, a, w, bias, y, bias_name=""):
    """y = a @ w.T + bias over the last axis of `a`; w is a constant [out, in] matrix."""
    out_features = w.shape[0]
    inputs = [a, ctx.constant("weights", np.ascontiguousarray(w, dtype=np.float32))]
    inputs.append(ctx.constant(bias_name or y + "_bias", bias) if bias is not None else "")
    a_shape, y_shape = ctx.shape(a), ctx.shape(y)
    if len(a_shape) == 2:
        ctx.add_op("FULLY_CONNECTED", inputs, [y])
    elif len(a_shape) > 2 and y_shape[-1] == out_features:
        ctx.add_op("FULLY_CONNECTED", inputs, [y], {"keep_num_dims": True})
    else:  # 1-D input: [K] -> [1, K] -> [1, N] -> [N]
        inputs[0] = reshape(ctx, a, (1, a_shape[0]))
        inner = ctx.tensor(y + "_2d", (1, out_features), ctx.dtype(y))
        ctx.add_op("FULLY_CONNECTED", inputs, [inner])
        reshape(ctx, inner, y_shape, y)


@onnx_op("Gemm")
def import_gemm(node, ctx):
    """alpha * A' @ B' + beta * C: FULLY_CONNECTED when B (and C) are constant."""
    a, b = node.inputs[:2]
    c = node.inputs[2] if len(node.inputs) > 2 else ""
    y = node.outputs[0]
    ctx.check_not_empty(a)
    alpha, beta = node.attr("alpha", 1.0), node.attr("beta", 1.0)
    if node.attr("transA", 0):
        a_t = ctx.tensor(a + "_t", ctx.shape(a)[::-1], ctx.dtype(a))
        ctx.add_op("TRANSPOSE", [a, ctx.constant("perm", np.array([1, 0], np.int32))], [a_t])
        a = a_t
    b_shape = ctx.shape(b)
    if node.attr("transB", 0):
        check_product(ctx, a, ctx.shape(a), b_shape[::-1], y, b, f"{b!r} {list(b_shape)} (transB)")
    else:
        check_product(ctx, a, ctx.shape(a), b_shape, y, b)
    if c:  # C broadcasts to [M, N] (unidirectionally: ONNX's rule for Gemm)
        c_shape, y_shape = tuple(ctx.shape(c)), tuple(ctx.shape(y))
        if len(c_shape) > 2 or any(d not in (1, e) for d, e in zip(c_shape[::-1], y_shape[::-1])):
            raise ctx.error(f"C {c!r} of shape {list(c_shape)} does not broadcast to the product's "
                            f"shape {list(y_shape)}")
    w = ctx.const(b)
    bias = ctx.const(c) if c else None
    if w is not None and (not c or bias is not None):
        w = w if node.attr("transB", 0) else w.T
        if alpha != 1.0:
            w = w * np.float32(alpha)
        if bias is not None:
            bias = np.broadcast_to(bias * beta, ctx.shape(y))
            if np.all(bias == bias[:1]):
                bias = np.ascontiguousarray(bias[0], dtype=np.float32)
            else:  # a bias that differs per row cannot be FULLY_CONNECTED's bias
                inner = ctx.tensor(y + "_fc", ctx.shape(y), ctx.dtype(y))
                fully_connected(ctx, a, w, None, inner)
                ctx.add_op("ADD", [inner, ctx.constant(c, bias.astype(np.float32))], [y])
                return
        fully_connected(ctx, a, w, bias, y, c)
        return
    # General case: BATCH_MATMUL, then scale and add.
    b_in = b
    prod = y if alpha == 1.0 and not c else ctx.tensor(y + "_mm", ctx.shape(y), ctx.dtype(y))
    ctx.add_op("BATCH_MATMUL", [a, b_in], [prod], {"adj_y": bool(node.attr("transB", 0))})
    current = prod
    if alpha != 1.0:
        scaled = y if not c else ctx.tensor(y + "_scaled", ctx.shape(y), ctx.dtype(y))
        ctx.add_op("MUL", [current, ctx.constant("alpha", np.array(alpha, np.float32))], [scaled])
        current = scaled
    if c:
        c_in = c
        if beta != 1.0:
            c_in = ctx.tensor(c + "_scaled", ctx.shape(c), ctx.dtype(c))
            ctx.add_op("MUL", [c, ctx.constant("beta", np.array(beta, np.float32))], [c_in])
        ctx.add_op("ADD", [current, c_in], [y])


@onnx_op("MatMul")
def import_matmul(node, ctx):
    a, b = node.inputs[:2]
    y = node.outputs[0]
    ctx.check_not_empty(a)
    check_product(ctx, a, ctx.shape(a), ctx.shape(b), y, b)
    w = ctx.const(b)
    if w is not None and w.ndim == 2 and ctx.rank(a) >= 1:
        fully_connected(ctx, a, np.ascontiguousarray(w.T), None, y)
        return
    a_shape, b_shape = ctx.shape(a), ctx.shape(b)
    if len(a_shape) == 1 or len(b_shape) == 1:
        a2 = reshape(ctx, a, (1,) + a_shape) if len(a_shape) == 1 else a
        b2 = reshape(ctx, b, b_shape + (1,)) if len(b_shape) == 1 else b
        out_shape = np.broadcast_shapes(ctx.shape(a2)[:-2], ctx.shape(b2)[:-2]) + (ctx.shape(a2)[-2], ctx.shape(b2)[-1])
        inner = ctx.tensor(y + "_mm", out_shape, ctx.dtype(y))
        ctx.add_op("BATCH_MATMUL", [a2, b2], [inner])
        reshape(ctx, inner, ctx.shape(y), y)
        return
    ctx.add_op("BATCH_MATMUL", [a, b], [y])
