"""Normalizations. BatchNormalization (inference) is MUL + ADD by per-channel constants, which
transforms/fuse_binary_into_affine.py folds into a preceding conv.

InstanceNormalization, LayerNormalization and MeanVarianceNormalization come from MEAN, SUB, MUL,
ADD, RSQRT (SQRT and DIV for MVN), in the ONNX layout.

All three are (x - mean) / sqrt(var + eps) over some axes: mean = MEAN(x, keep_dims),
xc = x - mean, var = MEAN(xc * xc). Nothing is layout-sensitive, so when the input comes from a
conv the layout pass moves its NHWC->NCHW transpose down through these ops (remapping the MEAN
axes) and the whole normalisation runs in NHWC.
"""

from __future__ import annotations

import numpy as np

from .registry import onnx_op


def _reduced_shape(shape, axes):
    return tuple(1 if a in axes else d for a, d in enumerate(shape))


def _centered(ctx, x, axes, hint, mean=None):
    """(xc, var): x minus its mean over `axes` and the mean of xc^2 (both kept-dims).

    `mean` names the array to write the mean into (LayerNormalization's Mean output)."""
    shape, dtype = ctx.shape(x), ctx.dtype(x)
    small = _reduced_shape(shape, axes)
    axes_const = ctx.constant("axes", np.array(sorted(axes), np.int32))
    mean = mean or ctx.tensor(hint + "_mean", small, dtype)
    ctx.add_op("MEAN", [x, axes_const], [mean], {"keep_dims": True})
    xc = ctx.tensor(hint + "_centered", shape, dtype)
    ctx.add_op("SUB", [x, mean], [xc])
    square = ctx.tensor(hint + "_sq", shape, dtype)
    ctx.add_op("MUL", [xc, xc], [square])
    var = ctx.tensor(hint + "_var", small, dtype)
    ctx.add_op("MEAN", [square, axes_const], [var], {"keep_dims": True})
    return xc, var


def _inv_std(ctx, var, eps, hint, out=None):
    """RSQRT(var + eps), written to `out` when given (LayerNormalization's InvStdDev output)."""
    shifted = ctx.tensor(hint + "_var_eps", ctx.shape(var), ctx.dtype(var))
    ctx.add_op("ADD", [var, ctx.constant("epsilon", np.array(eps, ctx.dtype(var)))], [shifted])
    out = out or ctx.tensor(hint + "_inv_std", ctx.shape(var), ctx.dtype(var))
    ctx.add_op("RSQRT", [shifted], [out])
    return out


def _affine(ctx, normed, scale, bias, y):
    """y = normed * scale + bias with constant scale/bias (either may be None)."""
    if bias is None:
        if scale is None:
            ctx.add_op("IDENTITY", [normed], [y])
        else:
            ctx.add_op("MUL", [normed, scale], [y])
        return
    if scale is not None:
        scaled = ctx.tensor(y + "_scaled", ctx.shape(y), ctx.dtype(y))
        ctx.add_op("MUL", [normed, scale], [scaled])
        normed = scaled
    ctx.add_op("ADD", [normed, bias], [y])


def _check_float(ctx, x):
    if ctx.dtype(x) != np.float32:
        raise ctx.error(f"normalizing {ctx.dtype(x)} is not supported (float32 is)")


@onnx_op("InstanceNormalization")
def import_instance_norm(node, ctx):
    """Per (n, c) over the spatial axes; scale folds into the small inverse std first."""
    x, scale_name, bias_name = node.inputs[:3]
    y = node.outputs[0]
    _check_float(ctx, x)
    rank = ctx.rank(x)
    if rank < 3:
        raise ctx.error(f"InstanceNormalization needs a rank >= 3 input, got rank {rank}")
    per_channel = (ctx.shape(x)[1],) + (1,) * (rank - 2)
    scale = ctx.require_const(scale_name, "InstanceNormalization scale").astype(np.float32)
    bias = ctx.require_const(bias_name, "InstanceNormalization bias").astype(np.float32)
    xc, var = _centered(ctx, x, range(2, rank), y)
    inv = _inv_std(ctx, var, float(node.attr("epsilon", 1e-5)), y)
    factor = ctx.tensor(y + "_factor", ctx.shape(inv), ctx.dtype(inv))
    ctx.add_op("MUL", [inv, ctx.constant(scale_name, scale.reshape(per_channel))], [factor])
    normed = ctx.tensor(y + "_normed", ctx.shape(x), ctx.dtype(x))
    ctx.add_op("MUL", [xc, factor], [normed])
    ctx.add_op("ADD", [normed, ctx.constant(bias_name, bias.reshape(per_channel))], [y])


@onnx_op("LayerNormalization")
def import_layer_norm(node, ctx):
    """Over axes [axis, rank); the optional Mean and InvStdDev outputs are the kept-dims
    intermediates themselves."""
    x = node.inputs[0]
    y = node.outputs[0]
    _check_float(ctx, x)
    rank = ctx.rank(x)
    axis = int(node.attr("axis", -1)) % rank
    outputs = list(node.outputs) + ["", ""]
    scale = ctx.require_const(node.inputs[1], "LayerNormalization scale").astype(np.float32)
    bias_name = node.inputs[2] if len(node.inputs) > 2 else ""
    bias = ctx.require_const(bias_name, "LayerNormalization bias").astype(np.float32) if bias_name else None
    xc, var = _centered(ctx, x, range(axis, rank), y, mean=outputs[1] or None)
    inv = _inv_std(ctx, var, float(node.attr("epsilon", 1e-5)), y, out=outputs[2] or None)
    normed = ctx.tensor(y + "_normed", ctx.shape(x), ctx.dtype(x))
    ctx.add_op("MUL", [xc, inv], [normed])
    scale_name = None if np.all(scale == 1) else ctx.constant(node.inputs[1], scale)
    bias_const = None if bias is None or not np.any(bias) else ctx.constant(bias_name, bias)
    _affine(ctx, normed, scale_name, bias_const, y)


@onnx_op("MeanVarianceNormalization")
def import_mvn(node, ctx):
    """(x - mean) / (sqrt(var) + 1e-9), the epsilon of ONNX's function body."""
    x, y = node.inputs[0], node.outputs[0]
    _check_float(ctx, x)
    rank = ctx.rank(x)
    axes = sorted({int(a) % rank for a in node.attr("axes", [0, 2, 3])})
    xc, var = _centered(ctx, x, axes, y)
    std = ctx.tensor(y + "_std", ctx.shape(var), ctx.dtype(var))
    ctx.add_op("SQRT", [var], [std])
    std_eps = ctx.tensor(y + "_std_eps", ctx.shape(var), ctx.dtype(var))
    ctx.add_op("ADD", [std, ctx.constant("epsilon", np.array(1e-9, np.float32))], [std_eps])
    ctx.add_op("DIV", [xc, std_eps], [y])


@onnx_op("BatchNormalization")
def import_batch_norm(node, ctx):
    x, scale, bias, mean, var = node.inputs[:5]
    y = node.outputs[0]
    eps = node.attr("epsilon", 1e-5)
    values = [ctx.require_const(n, "BatchNormalization parameter").astype(np.float64)
              for n in (scale, bias, mean, var)]
    gamma, beta, mu, sigma2 = values
    multiplier = gamma / np.sqrt(sigma2 + eps)
    shift = beta - mu * multiplier
    channels = ctx.shape(x)[1]
    shape = (channels,) + (1,) * (ctx.rank(x) - 2)
    scaled = ctx.tensor(y + "_scaled", ctx.shape(x), ctx.dtype(x))
    ctx.add_op("MUL", [x, ctx.constant(scale + "_folded", multiplier.astype(np.float32).reshape(shape))], [scaled])
    ctx.add_op("ADD", [scaled, ctx.constant(bias + "_folded", shift.astype(np.float32).reshape(shape))], [y])
