"""DFT and STFT as one FULLY_CONNECTED by a constant DFT matrix.

A discrete Fourier transform of length L is a linear map of the signal, so it is one matrix
product with the [bins x 2, samples x channels] matrix of its real and imaginary parts (computed in
float64, written float32): exact to float32 rounding for every length, inverse (scaled 1/L),
one-sided output, the real inverse of a one-sided spectrum (irfft, as onnxruntime computes it:
the spectrum extended Hermitian, imaginary parts of DC and Nyquist ignored), padding or
truncating to dft_length, on any axis. TFLite's RFFT2D would need complex64 tensors, power-of-two
lengths and REAL/IMAG behind it; the matrix product needs none of that, and quantizes as any
FULLY_CONNECTED does. Its cost is L squared weights, so lengths whose matrix exceeds
MATRIX_ELEMENTS are refused. STFT frames the signal with one GATHER of constant indices, weights
the frames by the window (folded into the matrix when it is constant, a MUL when it is computed)
and applies the same matrix.
"""

from __future__ import annotations

import math

import numpy as np

from .gemm import fully_connected
from .layout import reshape, transpose
from .registry import onnx_op

# The largest DFT matrix written (float32 elements: 64 MiB), e.g. a one-sided 2900-point DFT.
MATRIX_ELEMENTS = 1 << 24


def _scalar(ctx, node, position: int, what: str, needs: str) -> int | None:
    """The value of an optional scalar input (None when omitted)."""
    if position >= len(node.inputs) or not node.inputs[position]:
        return None
    return int(np.ravel(ctx.require_const(node.inputs[position], what, needs))[0])


_STATIC = "the output's shape follows from it, so qconvert needs it constant"


def _spectrum_matrix(samples: int, length: int, bins: int, inverse: bool, hermitian: bool) -> np.ndarray:
    """The complex [bins, samples] matrix M of y = M x along the transformed axis: x padded with
    zeros or truncated to `length`; `hermitian`: x is the one-sided spectrum of a real signal
    (irfft), each bin but DC and Nyquist standing for its conjugate too."""
    used = min(samples, length // 2 + 1 if hermitian else length)
    k = np.arange(bins)[:, None] * np.arange(used)[None, :] % length
    angle = 2 * np.pi * k / length
    m = np.exp(1j * angle if inverse else -1j * angle)
    if hermitian:
        twice = np.arange(used)
        m = m * np.where((twice > 0) & (2 * twice != length), 2.0, 1.0)
    if inverse:
        m = m / length
    full = np.zeros((bins, samples), np.complex128)
    full[:, :used] = m
    return full


def _real_matrix(m: np.ndarray, channels: int, real_output: bool) -> np.ndarray:
    """The real [bins * parts, samples * channels] matrix of the complex product y = M x, x's
    samples interleaved as (real[, imaginary]) pairs, y's as (real, imaginary) or real only."""
    re, im = m.real, m.imag
    rows = [[re, -im][:channels]] if real_output else [[re, -im][:channels], [im, re][:channels]]
    # blocks[p][q][o, j] -> w[o, p, j, q]
    w = np.stack([np.stack(row, axis=-1) for row in rows], axis=1)
    return w.reshape(m.shape[0] * len(rows), m.shape[1] * channels)


def _check_size(ctx, w_shape, length: int) -> None:
    if math.prod(w_shape) > MATRIX_ELEMENTS:
        raise ctx.error(f"a {length}-point DFT composes a {w_shape[0]}x{w_shape[1]} matrix, more than "
                        f"the {MATRIX_ELEMENTS:,} elements qconvert writes (TFLite's RFFT2D needs "
                        "complex tensors qconvert does not write)")


def _transform_last(ctx, x: str, w: np.ndarray, y_shape, y: str) -> None:
    """y [..., bins, parts] = w applied to x [..., samples, channels]: the last two axes
    flattened, FULLY_CONNECTED keeping the leading ones (a batch stays axis 0)."""
    x_shape = ctx.shape(x)
    flat = reshape(ctx, x, list(x_shape[:-2]) + [x_shape[-2] * x_shape[-1]])
    product = ctx.tensor(y + "_fc", list(x_shape[:-2]) + [w.shape[0]], ctx.dtype(x))
    fully_connected(ctx, flat, w.astype(np.float32), None, product)
    reshape(ctx, product, y_shape, y)


@onnx_op("DFT")
def import_dft(node, ctx):
    x, y = node.inputs[0], node.outputs[0]
    shape = ctx.shape(x)
    rank = len(shape)
    if ctx.dtype(x).kind != "f":
        raise ctx.error(f"input {x!r} has dtype {ctx.dtype(x)}; DFT takes a float signal")
    channels = shape[-1]
    if rank < 2 or channels not in (1, 2):
        raise ctx.error(f"input {x!r} {list(shape)} must end in a dimension of 1 (real) or 2 "
                        "(complex)")
    axis = node.attr("axis", 1)
    if ctx.opset >= 20:
        axis = _scalar(ctx, node, 2, "the DFT axis", _STATIC)
        axis = -2 if axis is None else axis
    if not -rank <= axis < rank or axis % rank == rank - 1:
        raise ctx.error(f"axis {axis} of input {x!r} {list(shape)}: the DFT axis must not be the "
                        "last one (it holds the real and imaginary parts)")
    axis %= rank
    inverse, onesided = bool(node.attr("inverse", 0)), bool(node.attr("onesided", 0))
    samples = shape[axis]
    hermitian = inverse and onesided
    length = _scalar(ctx, node, 1, "dft_length", _STATIC)
    if length is None:
        length = 2 * (samples - 1) if hermitian else samples
    if length < 1:
        raise ctx.error(f"dft_length {length} is not positive")
    if hermitian and samples > length // 2 + 1:  # numpy drops the extra bins, onnxruntime does not
        raise ctx.error(f"a one-sided inverse of {samples} bins to dft_length {length} reads more "
                        f"than its {length // 2 + 1} bins, which onnxruntime and the ONNX reference "
                        "read differently")
    bins = length // 2 + 1 if onesided and not inverse else length
    real_output = hermitian
    m = _spectrum_matrix(samples, length, bins, inverse, hermitian)
    w = _real_matrix(m, channels, real_output)
    _check_size(ctx, w.shape, length)
    parts = 1 if real_output else 2
    y_shape = list(shape[:axis]) + [bins] + list(shape[axis + 1:-1]) + [parts]
    if list(ctx.shape(y)) != y_shape:
        raise ctx.error(f"the DFT gives shape {y_shape}, not the output's {list(ctx.shape(y))}")
    others = [a for a in range(rank - 1) if a != axis]
    if axis == rank - 2:
        _transform_last(ctx, x, w, y_shape, y)
        return
    moved = transpose(ctx, x, others + [axis, rank - 1])
    inner_shape = [shape[a] for a in others] + [bins, parts]
    inner = ctx.tensor(y + "_moved", inner_shape, ctx.dtype(y))
    _transform_last(ctx, moved, w, inner_shape, inner)
    back = list(range(axis)) + [rank - 2] + list(range(axis, rank - 2)) + [rank - 1]
    transpose(ctx, inner, back, y)


@onnx_op("STFT")
def import_stft(node, ctx):
    x, y = node.inputs[0], node.outputs[0]
    shape = ctx.shape(x)
    if len(shape) != 3 or shape[-1] not in (1, 2):
        raise ctx.error(f"signal {x!r} {list(shape)} must be [batch, length, 1 or 2]")
    if ctx.dtype(x).kind != "f":
        raise ctx.error(f"signal {x!r} has dtype {ctx.dtype(x)}; STFT takes a float signal")
    batch, signal_length, channels = shape
    step = _scalar(ctx, node, 1, "frame_step", _STATIC)
    window = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else ""
    frame_length = _scalar(ctx, node, 3, "frame_length", _STATIC)
    if frame_length is None:
        if not window:
            raise ctx.error("STFT needs a window or a frame_length")
        frame_length = ctx.shape(window)[0]
    if window and ctx.shape(window) != (frame_length,):
        raise ctx.error(f"window {window!r} {list(ctx.shape(window))} does not have frame_length "
                        f"{frame_length}")
    if step is None or step < 1 or not 1 <= frame_length <= signal_length:
        raise ctx.error(f"frame_step {step} and frame_length {frame_length} do not frame a signal "
                        f"of length {signal_length}")
    onesided = bool(node.attr("onesided", 1))
    frames = (signal_length - frame_length) // step + 1
    bins = frame_length // 2 + 1 if onesided else frame_length
    y_shape = [batch, frames, bins, 2]
    if list(ctx.shape(y)) != y_shape:
        raise ctx.error(f"the STFT gives shape {y_shape}, not the output's {list(ctx.shape(y))}")
    m = _spectrum_matrix(frame_length, frame_length, bins, False, False)
    weights = ctx.const(window) if window else np.ones(frame_length)
    if weights is not None:
        m = m * weights.astype(np.float64)[None, :]
    w = _real_matrix(m, channels, False)
    _check_size(ctx, w.shape, frame_length)
    indices = np.arange(frames)[:, None] * step + np.arange(frame_length)[None, :]
    framed = ctx.tensor(x + "_frames", [batch, frames, frame_length, channels], ctx.dtype(x))
    ctx.add_op("GATHER", [x, ctx.constant("frames", indices.astype(np.int32))], [framed],
               {"axis": 1, "batch_dims": 0})
    if weights is None:  # a window computed at run time weights the frames
        weighted = ctx.tensor(x + "_windowed", ctx.shape(framed), ctx.dtype(x))
        ctx.add_op("MUL", [framed, reshape(ctx, window, [frame_length, 1])], [weighted])
        framed = weighted
    _transform_last(ctx, framed, w, y_shape, y)
