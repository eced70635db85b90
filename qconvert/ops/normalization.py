"""BatchNormalization (inference) as MUL + ADD by per-channel constants; transforms fold them
into a preceding conv (transforms/fuse_binary_into_affine.py)."""

from __future__ import annotations

import numpy as np

from .registry import onnx_op


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
