"""Col2Im (opset 18), 2-D: the columns [N, C*kh*kw, L] summed back into an image [N, C, H, W]
with constant image_shape and block_shape. It is a transposed convolution: the columns as a
[N, C*kh*kw, oh, ow] map (L = oh * ow blocks, row-major), and one-hot weights taking channel
c*kh*kw + i*kw + j to output channel c at kernel tap (i, j); strides, dilations and pads are the
transposed convolution's, and output_padding makes up the rows and columns no block reaches. So
the ConvTranspose importer computes it (TRANSPOSE_CONV)."""

from __future__ import annotations

import numpy as np

from .compose import call_importer
from .layout import reshape
from .registry import onnx_op


def _ints(ctx, name: str, what: str) -> list[int]:
    return [int(v) for v in np.ravel(ctx.require_const(
        name, what, "it sets the output's shape, so it must be a constant (make it an initializer)"))]


@onnx_op("Col2Im")
def import_col2im(node, ctx):
    x, image_name, block_name = node.inputs[:3]
    y = node.outputs[0]
    image, block = _ints(ctx, image_name, "image_shape"), _ints(ctx, block_name, "block_shape")
    if ctx.dtype(x) != np.float32:
        raise ctx.error(f"input {x!r} has dtype {ctx.dtype(x)}; float32 is supported")
    if len(image) != 2 or len(block) != 2:
        raise ctx.error(f"image_shape {image} and block_shape {block}: only 2-D images are supported "
                        "(TFLite's transposed convolution is 2-D)")
    strides = [int(s) for s in node.attr("strides", [1, 1])]
    dilations = [int(d) for d in node.attr("dilations", [1, 1])]
    pads = [int(p) for p in node.attr("pads", [0, 0, 0, 0])]
    taps = block[0] * block[1]
    batch, width, count = ctx.shape(x)
    effective = [(k - 1) * d + 1 for k, d in zip(block, dilations)]
    spans = [i + pads[a] + pads[a + 2] - e for a, (i, e) in enumerate(zip(image, effective))]
    blocks = [s // st + 1 for s, st in zip(spans, strides)]
    if width % taps or min(spans) < 0 or blocks[0] * blocks[1] != count:
        raise ctx.error(f"input {list(ctx.shape(x))} does not hold C * {taps} channels of {blocks[0]} x "
                        f"{blocks[1]} blocks for image_shape {image}, block_shape {block}")
    channels = width // taps
    weights = np.zeros((width, channels) + tuple(block), np.float32)
    tap = np.tile(np.arange(taps), channels)
    weights[np.arange(width), np.repeat(np.arange(channels), taps), tap // block[1], tap % block[1]] = 1.0
    columns = reshape(ctx, x, (batch, width, blocks[0], blocks[1]))
    call_importer(ctx, node, "ConvTranspose", [columns, ctx.constant("col2im_weights", weights)], [y],
          strides=strides, dilations=dilations, pads=pads,
          output_padding=[s % st for s, st in zip(spans, strides)])
