"""GridSample as a GATHER of the input's pixels at computed indices, weighted and summed.

TFLite has no sampler at arbitrary positions, but onnxruntime's is a fixed recipe of elementwise
steps that TFLite's kernels compute: each grid position is denormalized to pixel coordinates
(((g + 1) * L - 1) / 2, or (g + 1) / 2 * (L - 1) with align_corners), its neighbouring pixels are
the corners floor(x) + {0, 1} (linear), floor(x) + {-1, 0, 1, 2} (cubic, Keys' kernel with
a = -0.75) or round-half-even(x) (nearest), each corner's integer index is padded as onnxruntime
pads it (zeros: a corner outside reads 0; border: clamped; reflection: reflected about the
borders, -0.5 and L - 0.5 or 0 and L - 1), and the corners' pixels, read by one GATHER
(batch_dims 1) from the channels-last input flattened to [N, pixels, C], are summed with the
product of their per-axis weights. A constant grid folds to constant indices and weights. Any number of spatial axes: the corners of all of them are one axis of the computation
(2**r or 4**r of them), the output positions another, so every tensor has rank 4 at most. Indices
are computed in float32, exact below 2**24 pixels an image (D * H * W), beyond which the op is
refused.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from .layout import reshape, to_channels_first, to_channels_last
from .registry import onnx_op

_MODES = {"bilinear": "linear", "linear": "linear", "nearest": "nearest", "bicubic": "cubic",
          "cubic": "cubic"}
_PADDINGS = ("zeros", "border", "reflection")
_EXACT_INDICES = 1 << 24
# Keys' cubic convolution kernel with a = -0.75 (onnxruntime's GsGetCubicCoeffs): the weight of the
# corners at offsets -1, 0, 1, 2 from floor(x), as polynomials (highest power first) in t + 1,
# t, 1 - t and 2 - t, t = x - floor(x).
_A = -0.75
# (shift, polynomial): evaluated at t + shift for shift >= 0, at -shift - t for a negative shift.
_CUBIC = [(1.0, [_A, -5 * _A, 8 * _A, -4 * _A]), (0.0, [_A + 2, -(_A + 3), 0.0, 1.0]),
          (-1.0, [_A + 2, -(_A + 3), 0.0, 1.0]), (-2.0, [_A, -5 * _A, 8 * _A, -4 * _A])]


class _Builder:
    """Adds one op writing a new float32 (or given dtype) tensor and returns its name."""

    def __init__(self, ctx, hint: str):
        self.ctx, self.hint = ctx, hint

    def const(self, value, dtype=np.float32) -> str:
        return self.ctx.constant("grid_sample", np.asarray(value, dtype))

    def op(self, type: str, inputs, shape, dtype=np.float32, options=None) -> str:
        out = self.ctx.tensor(self.hint, list(shape), np.dtype(dtype))
        self.ctx.add_op(type, list(inputs), [out], options)
        return out

    def binary(self, type: str, a: str, b, dtype=np.float32) -> str:
        """a (op) b, b a tensor or a constant value, broadcast to their joint shape."""
        b = b if isinstance(b, str) else self.const(b)
        shape = np.broadcast_shapes(tuple(self.ctx.shape(a)), tuple(self.ctx.shape(b)))
        return self.op(type, [a, b], shape, dtype)

    def horner(self, u: str, coefficients) -> str:
        """The polynomial with `coefficients` (highest power first) at u."""
        value = self.binary("MUL", u, coefficients[0])
        for k, c in enumerate(coefficients[1:]):
            if c:
                value = self.binary("ADD", value, c)
            if k < len(coefficients) - 2:
                value = self.binary("MUL", value, u)
        return value


def _axis_weights(b: _Builder, coords: str, base: str, mode: str) -> tuple[list[float], str]:
    """The corner offsets along one axis and the weights [N, P, r, K] of the K corners of each
    axis: linear (floor + 1 - x, x - floor), or Keys' cubic kernel."""
    shape = list(b.ctx.shape(coords)) + [1]
    if mode == "linear":
        parts = [b.binary("SUB", b.binary("ADD", base, 1.0), coords), b.binary("SUB", coords, base)]
        offsets = [0.0, 1.0]
    else:
        t = b.binary("SUB", coords, base)
        parts = []
        for shift, coefficients in _CUBIC:
            if shift < 0:
                u = b.binary("SUB", b.const(-shift), t)
            else:
                u = b.binary("ADD", t, shift) if shift else t
            parts.append(b.horner(u, coefficients))
        offsets = [-1.0, 0.0, 1.0, 2.0]
    parts = [reshape(b.ctx, p, shape) for p in parts]
    weights = b.op("CONCATENATION", parts, shape[:-1] + [len(parts)], options={"axis": 3})
    return offsets, weights


def _pad(b: _Builder, index: str, sizes: np.ndarray, padding: str, align: bool) -> tuple[str, str | None]:
    """Corner indices [N, P, corners, r] padded as onnxruntime pads them: clamped into the input
    (border, and zeros, whose corners outside come back as a mask [N, P, corners] of those
    inside), or reflected."""
    top = sizes - 1
    inside = None
    if padding == "zeros":
        shape = b.ctx.shape(index)
        low = b.binary("GREATER_EQUAL", index, 0.0, np.bool_)
        high = b.binary("LESS_EQUAL", index, top, np.bool_)
        both = b.op("LOGICAL_AND", [low, high], shape, np.bool_)
        inside = b.op("REDUCE_ALL", [both, b.const([len(shape) - 1], np.int32)], shape[:-1] + (1,),
                      np.bool_, {"keep_dims": True})
    if padding in ("zeros", "border"):
        return b.binary("MINIMUM", b.binary("MAXIMUM", index, 0.0), top), inside
    # reflection: period 2L about -0.5 and L - 0.5 (2(L - 1) about 0 and L - 1 with align_corners)
    period = np.maximum(2 * top, 1) if align else 2 * sizes
    mirror = 2 * top if align else 2 * sizes - 1
    m = b.binary("FLOOR_MOD", index, period)
    beyond = b.binary("GREATER", m, top, np.bool_)
    return b.op("SELECT_V2", [beyond, b.binary("SUB", b.const(mirror), m), m], b.ctx.shape(m)), None


@onnx_op("GridSample")
def import_grid_sample(node, ctx):
    """GridSample as onnxruntime computes it: pixel coordinates, corner indices and weights, one
    GATHER of the corners' pixels, weighted and summed (module docstring)."""
    x, grid = node.inputs[:2]
    y = node.outputs[0]
    mode, padding, align = _attributes(node, ctx)
    x_shape, g_shape = ctx.shape(x), ctx.shape(grid)
    rank = len(x_shape) - 2
    batch, channels, dims = x_shape[0], x_shape[1], list(x_shape[2:])
    out_dims = list(g_shape[1:-1])
    positions = math.prod(out_dims)
    b = _Builder(ctx, y + "_sample")
    # Grid coordinate i runs along spatial axis rank - 1 - i (x, the last axis, first).
    sizes = np.array(dims[::-1], np.float32)
    coords = _pixel_coords(b, reshape(ctx, grid, [batch, positions, rank]), sizes, align)
    if mode == "nearest":
        base = b.op("ROUND", [coords], ctx.shape(coords))
        offsets, weights = [0.0], None
    else:
        base = b.op("FLOOR", [coords], ctx.shape(coords))
        offsets, weights = _axis_weights(b, coords, base, mode)
    corners = np.array(list(itertools.product(range(len(offsets)), repeat=rank)), np.int32)  # [k**rank, rank]
    flat, inside = _corner_indices(b, base, offsets, corners, dims, padding, align)
    values = _gather(b, x, flat, inside)
    if weights is not None:  # each corner's weight: the product of its axes' weights
        values = b.binary("MUL", values, _corner_weights(b, weights, corners))
    summed = b.op("SUM", [values, b.const([2], np.int32)], [batch, positions, channels],
                  options={"keep_dims": False})
    to_channels_first(ctx, reshape(ctx, summed, [batch] + out_dims + [channels]), y)


def _attributes(node, ctx):
    """(mode: linear, cubic or nearest; padding_mode; align_corners), after refusing an unknown
    mode, a grid that does not fit the input, non-float tensors and images too large for
    float32 to compute their pixel indices exactly."""
    x, grid = node.inputs[:2]
    x_shape, g_shape = ctx.shape(x), ctx.shape(grid)
    rank = len(x_shape) - 2
    mode = _MODES.get(node.attr("mode", "bilinear"))
    padding = node.attr("padding_mode", "zeros")
    align = bool(node.attr("align_corners", 0))
    if mode is None or padding not in _PADDINGS:
        raise ctx.error(f"mode {node.attr('mode')!r} with padding_mode {padding!r} is not a GridSample "
                        "mode")
    if rank < 1 or len(g_shape) != rank + 2 or g_shape[0] != x_shape[0] or g_shape[-1] != rank:
        raise ctx.error(f"grid {grid!r} {list(g_shape)} does not sample input {x!r} {list(x_shape)} "
                        f"(it must be [N, output dims..., {rank}])")
    if ctx.dtype(x).kind != "f" or ctx.dtype(grid).kind != "f":
        raise ctx.error(f"input {x!r} and grid {grid!r} must be float")
    pixels = math.prod(x_shape[2:])
    if pixels >= _EXACT_INDICES:
        raise ctx.error(f"input {x!r} {list(x_shape)} has {pixels:,} pixels an image, more than the "
                        f"{_EXACT_INDICES:,} whose indices float32 computes exactly")
    return mode, padding, align


def _pixel_coords(b: _Builder, g: str, sizes: np.ndarray, align: bool) -> str:
    """The grid [N, P, r] denormalized to pixel coordinates, as onnxruntime does:
    (g + 1) / 2 * (L - 1) with align_corners, ((g + 1) * L - 1) / 2 without."""
    coords = b.binary("ADD", g, 1.0)
    if align:
        return b.binary("MUL", b.binary("MUL", coords, 0.5), sizes - 1)
    return b.binary("MUL", b.binary("SUB", b.binary("MUL", coords, sizes), 1.0), 0.5)


def _corner_indices(b: _Builder, base: str, offsets, corners: np.ndarray, dims, padding: str,
                    align: bool) -> tuple[str, str | None]:
    """(int32 flat pixel index [N, P, corners] of every corner, the zeros padding's mask of the
    corners inside or None): base + offset per axis, padded (_pad), then row-major flattened
    over the spatial dims for one GATHER."""
    batch, positions, rank = b.ctx.shape(base)
    sizes = np.array(dims[::-1], np.float32)
    index = b.binary("ADD", reshape(b.ctx, base, [batch, positions, 1, rank]),
                     np.array(offsets, np.float32)[corners])
    index, inside = _pad(b, index, sizes, padding, align)
    strides = np.array([math.prod(dims[rank - i:]) for i in range(rank)], np.float32)
    flat = b.op("SUM", [b.binary("MUL", index, strides), b.const([3], np.int32)],
                [batch, positions, len(corners)], options={"keep_dims": False})
    flat = b.op("CAST", [flat], b.ctx.shape(flat), np.int32,
                {"in_data_type": np.dtype(np.float32), "out_data_type": np.dtype(np.int32)})
    return flat, inside


def _gather(b: _Builder, x: str, flat: str, inside: str | None) -> str:
    """The corners' pixels [N, P, corners, C]: one GATHER (batch_dims 1) from the channels-last
    input flattened to [N, pixels, C]; zero where the zeros padding's mask says outside."""
    batch, positions, count = b.ctx.shape(flat)
    x_shape = b.ctx.shape(x)
    channels, pixels = x_shape[1], math.prod(x_shape[2:])
    table = reshape(b.ctx, to_channels_last(b.ctx, x), [batch, pixels, channels])
    values = b.op("GATHER", [table, flat], [batch, positions, count, channels],
                  b.ctx.dtype(x), {"axis": 1, "batch_dims": 1})
    if inside is not None:
        values = b.op("SELECT_V2", [inside, values, b.const(0.0)], b.ctx.shape(values))
    return values


def _corner_weights(b: _Builder, weights: str, corners: np.ndarray) -> str:
    """Each corner's weight [N, P, corners, 1]: the product over the axes of that axis's weight
    (from the per-axis weights [N, P, r, K]) at the corner's offset."""
    batch, positions, rank, k = b.ctx.shape(weights)
    per_axis = reshape(b.ctx, weights, [batch, positions, rank * k])
    picked = b.op("GATHER", [per_axis, b.const(np.arange(rank) * k + corners, np.int32)],
                  [batch, positions, len(corners), rank], options={"axis": 2, "batch_dims": 0})
    return b.op("REDUCE_PROD", [picked, b.const([3], np.int32)],
                [batch, positions, len(corners), 1], options={"keep_dims": True})
