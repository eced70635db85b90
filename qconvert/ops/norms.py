"""Normalizations. BatchNormalization (inference) is MUL + ADD by per-channel constants, which
transforms/fuse_binary_into_affine.py folds into a preceding conv.

InstanceNormalization, LayerNormalization and MeanVarianceNormalization come from MEAN, SUB, MUL,
ADD, RSQRT (SQRT and DIV for MVN), in the ONNX layout; RMSNormalization from MUL, MEAN, ADD, RSQRT
(no centring).

All three are (x - mean) / sqrt(var + eps) over some axes: mean = MEAN(x, keep_dims),
xc = x - mean, var = MEAN(xc * xc). Nothing is layout-sensitive, so when the input comes from a
conv the layout pass moves its NHWC->NCHW transpose down through these ops (remapping the MEAN
axes) and the whole normalisation runs in NHWC.
"""

from __future__ import annotations

import numpy as np

from .compose import same_as_input
from .layout import reshape
from .registry import onnx_op, onnx_types


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
    """y = normed * scale + bias (either may be None: nothing to do)."""
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


def _computed(ctx, name: str, what: str, shape=None) -> str:
    """A parameter computed at run time, as the tensor TFLite's MUL/ADD read (they take one as
    well as a constant): checked to be float32, RESHAPEd to the per-channel `shape` if given."""
    if ctx.dtype(name) != np.float32:
        raise ctx.error(f"{what} (input {name!r}) has dtype {ctx.dtype(name)}; float32 is supported")
    if shape is None:
        return name
    if int(np.prod(ctx.shape(name))) != int(np.prod(shape)):
        raise ctx.error(f"{what} (input {name!r}) has shape {list(ctx.shape(name))}, one value per "
                        f"channel ({int(np.prod(shape))}) expected")
    return reshape(ctx, name, shape)


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
    scale, bias = ctx.const(scale_name), ctx.const(bias_name)
    xc, var = _centered(ctx, x, range(2, rank), y)
    inv = _inv_std(ctx, var, float(node.attr("epsilon", 1e-5)), y)
    factor = ctx.tensor(y + "_factor", ctx.shape(inv), ctx.dtype(inv))
    scale = (_computed(ctx, scale_name, "InstanceNormalization scale", per_channel) if scale is None
             else ctx.constant(scale_name, scale.astype(np.float32).reshape(per_channel)))
    ctx.add_op("MUL", [inv, scale], [factor])
    normed = ctx.tensor(y + "_normed", ctx.shape(x), ctx.dtype(x))
    ctx.add_op("MUL", [xc, factor], [normed])
    bias = (_computed(ctx, bias_name, "InstanceNormalization bias", per_channel) if bias is None
            else ctx.constant(bias_name, bias.astype(np.float32).reshape(per_channel)))
    ctx.add_op("ADD", [normed, bias], [y])


@onnx_op("LayerNormalization")
def import_layer_norm(node, ctx):
    """Over axes [axis, rank); the optional Mean and InvStdDev outputs are the kept-dims
    intermediates themselves. A scale or bias computed at run time is the tensor MUL/ADD read."""
    x = node.inputs[0]
    y = node.outputs[0]
    _check_float(ctx, x)
    rank = ctx.rank(x)
    axis = int(node.attr("axis", -1)) % rank
    outputs = list(node.outputs) + ["", ""]
    scale_name, bias_name = node.inputs[1], node.inputs[2] if len(node.inputs) > 2 else ""
    scale, bias = ctx.const(scale_name), ctx.const(bias_name) if bias_name else None
    for name, value, what in ((scale_name, scale, "scale"), (bias_name, bias, "bias")):
        if name and value is None:
            _computed(ctx, name, f"LayerNormalization {what}")
            ctx.check_broadcast([x, name], y)
    xc, var = _centered(ctx, x, range(axis, rank), y, mean=outputs[1] or None)
    inv = _inv_std(ctx, var, float(node.attr("epsilon", 1e-5)), y, out=outputs[2] or None)
    normed = ctx.tensor(y + "_normed", ctx.shape(x), ctx.dtype(x))
    ctx.add_op("MUL", [xc, inv], [normed])
    if scale is not None:
        scale = np.asarray(scale, np.float32)
        scale_name = None if np.all(scale == 1) else ctx.constant(scale_name, scale)
    if bias is not None:
        bias = np.asarray(bias, np.float32)
        bias_name = None if not np.any(bias) else ctx.constant(bias_name, bias)
    _affine(ctx, normed, scale_name, bias_name or None, y)


@onnx_op("RMSNormalization")
def import_rms_norm(node, ctx):
    """x * RSQRT(MEAN(x * x) + epsilon) * scale over axes [axis, rank) (opset 23), composed like
    LayerNormalization without the centring. stash_type is ignored: TFLite computes in float32,
    which is stash_type's default. A scale computed at run time is the tensor MUL reads."""
    x, scale_name = node.inputs[:2]
    y = node.outputs[0]
    _check_float(ctx, x)
    shape, dtype, rank = ctx.shape(x), ctx.dtype(x), ctx.rank(x)
    axis = int(node.attr("axis", -1))
    if not -rank <= axis < rank:
        raise ctx.error(f"axis {axis} is out of range for the rank {rank} input {x!r}")
    axes = range(axis % rank, rank)
    scale = ctx.const(scale_name)
    if scale is None:
        _computed(ctx, scale_name, "RMSNormalization scale")
    else:
        scale = np.asarray(scale, np.float32)
        scale_name = None if np.all(scale == 1) else ctx.constant(scale_name, scale)
    ctx.check_broadcast([x] + ([scale_name] if scale_name else []), y)
    square = ctx.tensor(y + "_sq", shape, dtype)
    ctx.add_op("MUL", [x, x], [square])
    mean = ctx.tensor(y + "_mean_sq", _reduced_shape(shape, axes), dtype)
    ctx.add_op("MEAN", [square, ctx.constant("axes", np.array(list(axes), np.int32))], [mean],
               {"keep_dims": True})
    inv = _inv_std(ctx, mean, float(node.attr("epsilon", 1e-5)), y)
    normed = ctx.tensor(y + "_normed", shape, dtype) if scale_name else y
    ctx.add_op("MUL", [x, inv], [normed])
    if scale_name:
        ctx.add_op("MUL", [normed, scale_name], [y])


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
    """x * multiplier + shift per channel, multiplier = scale / sqrt(var + eps) and shift =
    bias - mean * multiplier: folded into constants, or computed by small per-channel ops when a
    parameter is computed at run time (TFLite's MUL and ADD take tensors)."""
    x, scale, bias, mean, var = node.inputs[:5]
    y = node.outputs[0]
    eps = node.attr("epsilon", 1e-5)
    channels = ctx.shape(x)[1]
    shape = (channels,) + (1,) * (ctx.rank(x) - 2)
    values = [ctx.const(n) for n in (scale, bias, mean, var)]
    if any(v is None for v in values):
        multiplier, shift = _batch_norm_tensors(ctx, node, values, eps, shape)
        scaled = ctx.tensor(y + "_scaled", ctx.shape(x), ctx.dtype(x))
        ctx.add_op("MUL", [x, multiplier], [scaled])
        ctx.add_op("ADD", [scaled, shift], [y])
        return
    gamma, beta, mu, sigma2 = (v.astype(np.float64) for v in values)
    multiplier = gamma / np.sqrt(sigma2 + eps)
    shift = beta - mu * multiplier
    scaled = ctx.tensor(y + "_scaled", ctx.shape(x), ctx.dtype(x))
    ctx.add_op("MUL", [x, ctx.constant(scale + "_folded", multiplier.astype(np.float32).reshape(shape))], [scaled])
    ctx.add_op("ADD", [scaled, ctx.constant(bias + "_folded", shift.astype(np.float32).reshape(shape))], [y])


def _batch_norm_tensors(ctx, node, values, eps: float, shape) -> tuple[str, str]:
    """(multiplier, shift) of shape `shape` computed by ops from the parameters, each its
    constant or its computed tensor (fold_constants folds what only constants feed)."""
    names = []
    for name, value, what in zip(node.inputs[1:5], values, ("scale", "B", "input_mean", "input_var")):
        if value is None:
            names.append(_computed(ctx, name, f"BatchNormalization {what}", shape))
        else:
            names.append(ctx.constant(name, np.asarray(value, np.float32).reshape(shape)))
    gamma, beta, mu, sigma2 = names
    y = node.outputs[0]

    def op(type, inputs, hint):
        out = ctx.tensor(f"{y}_{hint}", shape, np.float32)
        ctx.add_op(type, inputs, [out])
        return out

    shifted = op("ADD", [sigma2, ctx.constant("epsilon", np.array(eps, np.float32))], "var_eps")
    multiplier = op("MUL", [gamma, op("RSQRT", [shifted], "inv_std")], "multiplier")
    return multiplier, op("SUB", [beta, op("MUL", [mu, multiplier], "mean_scaled")], "shift")


# onnx's shape inference does not expand GroupNormalization's function body.
onnx_types("GroupNormalization")(same_as_input)


@onnx_op("GroupNormalization")
def import_group_norm(node, ctx):
    """x [N, C, ...] in `num_groups` groups of C/G channels: each (n, group) normalised over its
    channels and spatial positions, as x reshaped to [N, G, C/G, S]; then the affine per channel
    (opset 21's scale and bias of C values; opset 18's of G values, repeated over each group's
    channels)."""
    x, y = node.inputs[0], node.outputs[0]
    _check_float(ctx, x)
    shape = ctx.shape(x)
    if len(shape) < 3:
        raise ctx.error(f"GroupNormalization needs a rank >= 3 input, got rank {len(shape)}")
    groups, channels = int(node.attr("num_groups")), shape[1]
    if groups <= 0 or channels % groups:
        raise ctx.error(f"num_groups {groups} does not divide the {channels} channels")
    spatial = int(np.prod(shape[2:]))
    grouped = reshape(ctx, x, (shape[0], groups, channels // groups, spatial))
    xc, var = _centered(ctx, grouped, (2, 3), y)
    inv = _inv_std(ctx, var, float(node.attr("epsilon", 1e-5)), y)
    normed = ctx.tensor(y + "_normed", ctx.shape(grouped), ctx.dtype(x))
    ctx.add_op("MUL", [xc, inv], [normed])
    normed = reshape(ctx, normed, shape)
    per_channel = (channels,) + (1,) * (len(shape) - 2)
    names = []
    for name, what in zip(node.inputs[1:3], ("scale", "bias")):
        value = ctx.require_const(name, f"GroupNormalization {what}")
        value = np.asarray(value, np.float32).reshape(-1)
        if value.size == groups and groups != channels:
            value = np.repeat(value, channels // groups)
        if value.size != channels:
            raise ctx.error(f"{what} (input {name!r}) has {value.size} values; {channels} (one per "
                            f"channel) or {groups} (one per group) expected")
        names.append(ctx.constant(name, value.reshape(per_channel)))
    _affine(ctx, normed, *names, y)


@onnx_op("LpNormalization")
def import_lp_norm(node, ctx):
    """x / ||x||_p along `axis`, p 1 (SUM of ABS) or 2 (SQRT of the SUM of squares), as ONNX
    defines it (no epsilon; a zero norm gives zeros)."""
    x, y = node.inputs[0], node.outputs[0]
    _check_float(ctx, x)
    p, rank = int(node.attr("p", 2)), ctx.rank(x)
    if p not in (1, 2):
        raise ctx.error(f"p = {p}: LpNormalization is defined for p 1 and 2")
    axis = int(node.attr("axis", -1)) % rank
    shape, dtype = ctx.shape(x), ctx.dtype(x)
    small = _reduced_shape(shape, (axis,))
    magnitude = ctx.tensor(y + "_magnitude", shape, dtype)
    ctx.add_op("ABS" if p == 1 else "MUL", [x] if p == 1 else [x, x], [magnitude])
    total = ctx.tensor(y + "_sum", small, dtype)
    ctx.add_op("SUM", [magnitude, ctx.constant("axes", np.array([axis], np.int32))], [total],
               {"keep_dims": True})
    if p == 2:
        norm = ctx.tensor(y + "_norm", small, dtype)
        ctx.add_op("SQRT", [total], [norm])
        total = norm
    # A slice of zeros normalises to zeros (ONNX's 0 / 0 = 0): its norm is raised to the smallest
    # normal float, which leaves every other norm as it is.
    safe = ctx.tensor(y + "_norm_safe", small, dtype)
    ctx.add_op("MAXIMUM", [total, ctx.constant("tiny", np.array(np.finfo(np.float32).tiny, dtype))],
               [safe])
    ctx.add_op("DIV", [x, safe], [y])
