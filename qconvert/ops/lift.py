"""1-D convs and pools as 2-D ones over a unit height: TFLite's CONV_2D, DEPTHWISE_CONV_2D,
TRANSPOSE_CONV and pools are 2-D only. The input [N, C, L] becomes [N, C, 1, L] (a RESHAPE), each
per-axis attribute gets the unit height's value first and the pads none along it;
from_channels_last reshapes the result back. Shared by Conv, ConvTranspose, MaxPool and
AveragePool."""

from __future__ import annotations

from .layout import reshape


def lift_1d_input(ctx, x: str) -> str:
    """The input [N, C, L] of a 1-D conv or pool as [N, C, 1, L] (a RESHAPE)."""
    n, c, length = ctx.shape(x)
    return reshape(ctx, x, (n, c, 1, length))


def lift_1d(ctx, x: str, w_name: str, w, w_shape):
    """(x, w_name, w, w_shape) of a 1-D conv lifted to 2-D: the input lifted (lift_1d_input),
    the weights [A, B, K] as [A, B, 1, K] (sliced at import, or a RESHAPE when computed at run
    time, w None). Shared by Conv and ConvTranspose."""
    x = lift_1d_input(ctx, x)
    if w is None:
        w_name = reshape(ctx, w_name, w_shape[:2] + (1,) + w_shape[2:])
    else:
        w = w[:, :, None, :]
    return x, w_name, w, w_shape[:2] + (1,) + w_shape[2:]


def lift_1d_values(values, default) -> list:
    """A 1-D conv's or pool's per-axis attribute (kernel, strides, dilations, ...) for its 2-D
    lift: the unit height's `default` first."""
    return [default] + list(values)


def lift_1d_pads(pads) -> list:
    """A 1-D conv's or pool's ONNX pads [begin, end] for its 2-D lift: [top, left, bottom, right]
    with no pad along the unit height."""
    return [0, pads[0], 0, pads[1]]
