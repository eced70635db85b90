"""Quantization numerics: scale/zero-point choice, weight, bias and value (de)quantization.

Pure numpy functions, no IR mutation. Conventions (docs/quantization-spec.md):
real = scale * (q - zero_point); activations are asymmetric int8 [-128, 127]; weights are
symmetric int8 with zero point 0 in the narrow range [-127, 127], per channel or per tensor; biases
are int32 with zero point 0 and scale input_scale * weight_scale.

Rounding is always half away from zero (TFLite's TfLiteRound / std::round), never numpy's
half-to-even, so quantized constants match what TFLite's own tools and kernels produce. Where TFLite
computes in float32 (weight and bias quantization) we do the same, to get bit-identical buffers.

Deliberate departures from TFLite, both to avoid zero scales (a zero scale makes the kernels divide
by zero or, for a conv channel, silently drop that channel's bias):
- an empty range (min == max == 0) gets scale ZERO_RANGE_SCALE (1.0) instead of 0;
- an all-zero weight channel gets the largest scale of the other channels (1.0 if every channel
  is zero) instead of 0.

What a kernel can represent (the limits check_quantization holds every int8 model to):
- every activation scale lies in [MIN_SCALE, MAX_SCALE] = [2^-60, 2^60]. A range too narrow for
  MIN_SCALE (calibration data of 1e-42, which gave a denormal scale of 4e-45 and crashed XNNPACK)
  is stretched about zero until its scale is MIN_SCALE (activation_scale_floor): values that small
  are noise next to anything a model computes, so they become 0, an error below 2^-61, as TFLite's
  own quantizer widens ranges narrower than 1e-6. A range too wide for MAX_SCALE (1e30) is refused:
  widening cannot help and narrowing would clip the data. Within these bounds a product of two
  scales (MUL, a bias scale), a ratio of two, and a scale times 2^20 (ADD's fixed-point headroom)
  are all normal float32 numbers: kernels compute them in float32, and a denormal or infinite one
  crashed LiteRT (SIGSEGV in XNNPACK, an abort in ADD's prepare for scales above 3e32).
- every requantization multiplier of a conv-like kernel, input_scale * weight_scale /
  output_scale computed in float32, is below MAX_MULTIPLIER = 256: XNNPACK refuses the model at
  or above it, and TFLite's QuantizeMultiplier left shifts overflow long before its 2^31 limit.
"""

from __future__ import annotations

import numpy as np

INT32_MAX = 2**31 - 1
# Scale used when a range is the single point 0 (TFLite would use 0; see the module docstring).
ZERO_RANGE_SCALE = 1.0
# Weights whose channel (or tensor) holds nothing larger count as zero: their own scale would be so
# small that its reciprocal, or a bias scale input_scale * scale, overflows float32.
NEGLIGIBLE_WEIGHT = 1e-30
# The span of activation scales every kernel handles (see the module docstring).
MIN_SCALE = 2.0**-60
MAX_SCALE = 2.0**60
# Requantization multipliers must stay below this (XNNPACK's limit for conv-like kernels).
MAX_MULTIPLIER = 256.0


# Measured statistics are snapped to coarse grids before anything is derived from them (docs:
# "the same bytes on every CPU"): a calibrated range's ends outward to RANGE_BITS significant
# bits of its magnitude, a factor to a 1/FACTOR_STEPS-octave grid. onnxruntime's and LiteRT's
# float kernels differ by CPU in their last bits (their summation orders and approximations of
# exp and tanh are picked at run time by instruction set); a value moves to another grid point
# only when its noise straddles a grid line, about 2^RANGE_BITS times the relative noise per
# range end, where a float32 scale computed straight from it would change with every ulp.
RANGE_BITS = 8
FACTOR_STEPS = 16
SNAP_TOLERANCE = 2.0 ** -10  # of a grid step (and of an octave), see snapped_range
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_FLOAT32_TINY = float(np.finfo(np.float32).tiny)


def snapped_range(low: float, high: float) -> tuple[float, float]:
    """[low, high] widened outward, each end to RANGE_BITS significant bits of its own magnitude
    (it moves by at most 2^-RANGE_BITS of itself: below 0.04 dB of SQNR, and an end near 0 or
    beside a huge other end, an attention mask's, stays where it is). The grid's lines sit a hair
    (SNAP_TOLERANCE of a step) beyond the points themselves, and a magnitude just below a power
    of two takes that power's grid, so that the values models hold exactly (0, 1, 6, a power of
    two) and those an ulp from them land on the same point: only a value in general position can
    cross a line. Ends stay within float32's finite range."""
    return _snapped_end(low, np.floor, 1.0), _snapped_end(high, np.ceil, -1.0)


def _snapped_end(value: float, rounding, towards: float) -> float:
    if abs(value) < _FLOAT32_TINY or not np.isfinite(value):  # 0 and denormals: 0 to any scale
        return value
    step = 2.0 ** (np.floor(np.log2(abs(value)) + SNAP_TOLERANCE) - RANGE_BITS)
    snapped = float(rounding(value / step + towards * SNAP_TOLERANCE) * step)
    return float(np.clip(snapped, -_FLOAT32_MAX, _FLOAT32_MAX))


def snapped_factors(factors: np.ndarray) -> np.ndarray:
    """Positive factors rounded to the nearest 2^(k / FACTOR_STEPS) (1 and the powers of two
    are grid points, far from the rounding's lines)."""
    return np.exp2(np.round(np.log2(factors) * FACTOR_STEPS) / FACTOR_STEPS)


def round_half_away(x) -> np.ndarray:
    """Round to the nearest integer, ties away from zero (std::round), keeping x's float dtype.

    np.rint rounds ties to even; x - rint(x) is exact, so the ties are exactly the elements where
    it is +-0.5, and only those are moved away from zero. (Unlike floor(|x| + 0.5) this never
    rounds 0.49999997 up.) Few passes over the data: weights can be hundreds of MB.
    """
    x = np.asarray(x)
    rounded = np.array(np.rint(x))
    with np.errstate(invalid="ignore"):  # inf - inf: not a tie
        ties = np.abs(x - rounded) == 0.5
    if ties.any():
        rounded[ties] = x[ties] + np.copysign(np.asarray(0.5, x.dtype), x[ties])
    return rounded


def _int_range(dtype, narrow_range: bool) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return int(info.min) + (1 if narrow_range else 0), int(info.max)


def _checked_range(rmin, rmax) -> tuple[np.ndarray, np.ndarray]:
    """[rmin, rmax] as float64 arrays; a ValueError unless finite with min <= max."""
    rmin_a = np.asarray(rmin, dtype=np.float64)
    rmax_a = np.asarray(rmax, dtype=np.float64)
    if not (np.all(np.isfinite(rmin_a)) and np.all(np.isfinite(rmax_a))):
        raise ValueError(f"quantization range must be finite, got [{rmin}, {rmax}]")
    if np.any(rmin_a > rmax_a):
        raise ValueError(f"quantization range has min > max: [{rmin}, {rmax}]")
    return rmin_a, rmax_a


def choose_quantization_params(rmin, rmax, qmin: int = -128, qmax: int = 127,
                               narrow_range: bool = False):
    """Asymmetric (scale, zero_point) for the real range [rmin, rmax], as TOCO chooses them.

    The algorithm of TFLite's ChooseQuantizationParams, in float64 like the original:
    1. widen the range to contain 0 (0 must be exactly representable: zero padding);
    2. scale = (rmax - rmin) / (qmax - qmin), where narrow_range raises qmin by one;
    3. the zero point follows from either known pair (rmin -> qmin) or (rmax -> qmax); take the
       candidate whose terms have the smaller magnitude (less floating-point error);
    4. nudge it to an integer: clamp to [qmin, qmax], else round half away from zero.
    The scale is not recomputed after the nudge, so the representable range is shifted slightly
    from [rmin, rmax] (see nudged_range).

    min == max == 0 gives (ZERO_RANGE_SCALE, 0 clamped into [qmin, qmax]) instead of TFLite's
    scale 0: any scale represents an all-zero tensor exactly, and a zero scale breaks kernels.

    Scalars give (float, int). Arrays (e.g. per-channel ranges) are accepted too and give
    (float64 array, int64 array) of the broadcast shape.
    """
    rmin_a, rmax_a = _checked_range(rmin, rmax)
    if narrow_range:
        qmin += 1
    if qmin >= qmax:
        raise ValueError(f"empty integer range [{qmin}, {qmax}]")
    rmin_a, rmax_a = np.broadcast_arrays(np.minimum(rmin_a, 0.0), np.maximum(rmax_a, 0.0))
    qmin_f, qmax_f = float(qmin), float(qmax)

    empty = rmax_a == rmin_a  # both 0 after widening
    scale = np.where(empty, ZERO_RANGE_SCALE, (rmax_a - rmin_a) / (qmax_f - qmin_f))
    with np.errstate(divide="ignore", invalid="ignore"):
        from_min = qmin_f - rmin_a / scale
        from_max = qmax_f - rmax_a / scale
        err_min = abs(qmin_f) + np.abs(rmin_a / scale)
        err_max = abs(qmax_f) + np.abs(rmax_a / scale)
    z = np.where(err_min < err_max, from_min, from_max)
    z = np.where(empty, 0.0, z)
    nudged = np.where(z < qmin_f, qmin_f, np.where(z > qmax_f, qmax_f, round_half_away(z)))
    zero_point = nudged.astype(np.int64)
    if scale.ndim == 0:
        return float(scale), int(zero_point)
    return scale, zero_point


def choose_symmetric_params(rmin, rmax, qmax: int = 32767) -> tuple[float, int]:
    """Symmetric (scale, 0) for the real range [rmin, rmax]: scale = max(|rmin|, |rmax|) / qmax,
    as TFLite chooses int16 activation params (16x8 kernels want zero point 0). An empty range
    {0} gets ZERO_RANGE_SCALE."""
    rmin_a, rmax_a = _checked_range(rmin, rmax)
    bound = max(abs(float(rmin_a)), abs(float(rmax_a)))
    return (bound / qmax if bound > 0 else ZERO_RANGE_SCALE), 0


def activation_scale_floor(scale: float) -> float:
    """The scale raised to MIN_SCALE when the range was too narrow for it (see the module
    docstring). The zero point depends only on where 0 lies in the range, so raising the scale
    stretches the range about zero and leaves the zero point as chosen."""
    return max(scale, MIN_SCALE)


def nudged_range(scale, zero_point, qmin: int = -128, qmax: int = 127):
    """The real range [S*(qmin - Z), S*(qmax - Z)] a (scale, zero_point) pair represents.

    TOCO rewrites an array's min/max to this after choosing its parameters; it contains the
    original (0-widened) range up to about one quantization step on either side.
    """
    scale = np.asarray(scale, dtype=np.float64)
    zero_point = np.asarray(zero_point, dtype=np.float64)
    lo, hi = scale * (qmin - zero_point), scale * (qmax - zero_point)
    if lo.ndim == 0:
        return float(lo), float(hi)
    return lo, hi


def _move_axis_shape(ndim: int, axis: int, n: int) -> tuple[int, ...]:
    shape = [1] * ndim
    shape[axis] = n
    return tuple(shape)


def quantize(values, scale, zero_point=0, dtype=np.int8, axis: int | None = None,
             narrow_range: bool = False) -> np.ndarray:
    """Quantize real values: clamp(round(v / S) + Z, qmin, qmax) as `dtype`.

    The order (round first, then add Z) is that of TFLite's QUANTIZE kernel, so constants we
    quantize equal what the runtime would produce. 8- and 16-bit targets compute in float32 like
    the kernel; wider targets (int32/int64 biases) in float64 so large values keep their precision.
    With `axis`, `scale` and `zero_point` are per-slice along that axis. narrow_range excludes the
    lowest integer (e.g. int8 [-127, 127]). Scales must be positive.
    """
    dtype = np.dtype(dtype)
    ftype = np.float32 if dtype.itemsize <= 2 else np.float64
    v = np.asarray(values, dtype=ftype)
    s = np.asarray(scale, dtype=np.float32).astype(ftype)
    z = np.asarray(zero_point, dtype=np.int64)
    if np.any(~(s > 0)):
        raise ValueError("quantization scales must be positive")
    if axis is not None:
        axis = axis % v.ndim
        s = s.reshape(_move_axis_shape(v.ndim, axis, s.size))
        z = np.broadcast_to(z, (s.size,)).reshape(s.shape)
    qmin, qmax = _int_range(dtype, narrow_range)
    with np.errstate(over="ignore"):  # a float sentinel (-FLT_MAX padding) overflows to -inf
        scaled = np.clip(v / s, -(2.0**40), 2.0**40)  # finite, and still saturates below
    q = round_half_away(scaled).astype(np.float64) + z
    return np.clip(q, qmin, qmax).astype(dtype)


def dequantize(q, scale, zero_point=0, axis: int | None = None) -> np.ndarray:
    """Real values S * (q - Z) as float32 (the DEQUANTIZE kernel); per-slice along `axis` if given."""
    q = np.asarray(q).astype(np.int64)
    s = np.asarray(scale, dtype=np.float32)
    z = np.asarray(zero_point, dtype=np.int64)
    if axis is not None:
        axis = axis % q.ndim
        s = s.reshape(_move_axis_shape(q.ndim, axis, s.size))
        z = np.broadcast_to(z, (s.size,)).reshape(s.shape)
    return (s * (q - z).astype(np.float32)).astype(np.float32)


def _symmetric_scales(wmin, wmax, narrow: bool) -> np.ndarray:
    """float32 symmetric scales covering [wmin, wmax] per entry; 0 where the range is {0}."""
    wmin = np.asarray(wmin, dtype=np.float32)
    wmax = np.asarray(wmax, dtype=np.float32)
    if narrow:
        # TFLite: max(|min|, |max|) / 127, in float32.
        return np.maximum(np.abs(wmin), np.abs(wmax)) / np.float32(127)
    # Full range [-128, 127] with Z = 0: whichever side needs the larger step limits the scale.
    return np.maximum(np.maximum(-wmin, 0) / np.float32(128), np.maximum(wmax, 0) / np.float32(127))


# Weights are quantized in slices of about this many elements, so the float temporaries stay
# small next to a weight of hundreds of MB.
CHUNK_ELEMENTS = 1 << 22


def _scale_round_clip(w: np.ndarray, inv: np.ndarray, qmin: int, qmax: int) -> np.ndarray:
    """clamp(round(w * inv), qmin, qmax) as int8, computed over slices of w's first axis; `inv`
    broadcasts against w (per-channel reciprocals, or one)."""
    if w.ndim == 0:
        return np.clip(round_half_away(w * inv), qmin, qmax).astype(np.int8)
    out = np.empty(w.shape, np.int8)
    per_row = inv.ndim == w.ndim and inv.shape[0] == w.shape[0] > 1
    rows = max(1, CHUNK_ELEMENTS // max(1, w[0].size))
    for start in range(0, w.shape[0], rows):
        part = slice(start, start + rows)
        out[part] = np.clip(round_half_away(w[part] * (inv[part] if per_row else inv)), qmin, qmax)
    return out


def _quantize_symmetric(w: np.ndarray, scales: np.ndarray, narrow: bool) -> np.ndarray:
    """round(w * (1/scale)) clamped, in float32 with a precomputed reciprocal as TFLite does."""
    qmin, qmax = _int_range(np.int8, narrow)
    return _scale_round_clip(w, np.asarray(np.float32(1) / scales), qmin, qmax)


def _floor_zero_scales(scales: np.ndarray) -> np.ndarray:
    """Replace zero scales (all-zero channels) by the largest other scale, or ZERO_RANGE_SCALE.

    Any positive scale quantizes zeros exactly; borrowing the tensor's largest scale keeps the
    channel's bias scale (input_scale * s_c) in the same range as the other channels, so its bias
    is quantized with similar precision and per-channel rescale multipliers stay in the range
    delegates such as XNNPACK accept.
    """
    zero = scales == 0
    if not zero.any():
        return scales
    fill = scales.max() if (~zero).any() else np.float32(ZERO_RANGE_SCALE)
    return np.where(zero, fill, scales).astype(np.float32)


def quantize_weights_per_channel(w, axis: int, narrow: bool = True,
                                 scales=None) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric per-channel int8 weights: (q int8 of w's shape, scales float32[w.shape[axis]]).

    Zero point 0 everywhere. s_c = max|w_c| / 127 and q = clamp(round(w * (127 / max|w_c|)),
    -127, 127), computed in float32 like TFLite's SymmetricPerChannelQuantization. narrow=False
    uses [-128, 127] (s_c = max(-min_c / 128, max_c / 127)); TFLite's int8 kernels expect narrow.
    An all-zero channel gets a positive scale (see _floor_zero_scales) so its bias survives.
    `scales` overrides the computed scales (e.g. after adjust_weight_scales_for_bias).
    """
    w = np.asarray(w, dtype=np.float32)
    axis = axis % w.ndim
    reduce_axes = tuple(i for i in range(w.ndim) if i != axis)
    if scales is None:
        wmin = w.min(axis=reduce_axes) if w.size else np.zeros(w.shape[axis], np.float32)
        wmax = w.max(axis=reduce_axes) if w.size else np.zeros(w.shape[axis], np.float32)
        negligible = np.maximum(np.abs(wmin), np.abs(wmax)) < NEGLIGIBLE_WEIGHT
        wmin, wmax = np.where(negligible, 0, wmin), np.where(negligible, 0, wmax)
        if narrow:
            half_range = np.maximum(np.abs(wmin), np.abs(wmax)).astype(np.float32)
            scales = half_range / np.float32(127)
        else:
            scales = _symmetric_scales(wmin, wmax, narrow=False)
        scales = _floor_zero_scales(np.asarray(scales, dtype=np.float32))
        if narrow:
            # TFLite multiplies by 127 / half_range rather than by 1 / scale (they can differ in
            # the last bit); use its reciprocal where the channel is not all zero.
            with np.errstate(divide="ignore"):
                inv = np.where(half_range > 0, np.float32(127) / half_range, np.float32(0))
            inv = inv.astype(np.float32).reshape(_move_axis_shape(w.ndim, axis, w.shape[axis]))
            return _scale_round_clip(w, inv, -127, 127), scales
    scales = np.asarray(scales, dtype=np.float32).reshape(-1)
    if scales.size != w.shape[axis] or np.any(~(scales > 0)):
        raise ValueError("need one positive scale per channel")
    q = _quantize_symmetric(w, scales.reshape(_move_axis_shape(w.ndim, axis, scales.size)), narrow)
    return q, scales


def quantize_weights_per_tensor(w, narrow: bool = True, scale=None) -> tuple[np.ndarray, float]:
    """Symmetric per-tensor int8 weights: (q int8, scale float).

    scale = max|w| / 127 (narrow) as in TFLite's SymmetricQuantizeFloats; an all-zero tensor gets
    ZERO_RANGE_SCALE. `scale` overrides the computed one.
    """
    w = np.asarray(w, dtype=np.float32)
    if scale is None:
        wmin = w.min() if w.size else np.float32(0)
        wmax = w.max() if w.size else np.float32(0)
        s = _symmetric_scales(wmin, wmax, narrow)
        negligible = max(abs(float(wmin)), abs(float(wmax))) < NEGLIGIBLE_WEIGHT
        s = np.float32(ZERO_RANGE_SCALE) if s == 0 or negligible else np.float32(s)
    else:
        s = np.float32(scale)
        if not s > 0:
            raise ValueError("weight scale must be positive")
    return _quantize_symmetric(w, s, narrow), float(s)


def bias_scales(input_scale: float, weight_scales) -> np.ndarray:
    """float32 bias scales input_scale * weight_scale (per channel), the product TFLite requires."""
    return (np.float32(input_scale) * np.asarray(weight_scales, dtype=np.float32)).astype(np.float32)


def quantize_bias(bias, input_scale: float, weight_scales,
                  dtype=np.int32) -> tuple[np.ndarray, np.ndarray]:
    """int32 bias with zero point 0 and scale input_scale * weight_scale: (q int32, scales float32).
    With dtype int64 (the 16x8 kernels' bias) the clamp is at +-2^62 instead, far beyond any
    accumulator and still exact when the float64 product is cast.

    weight_scales is one scale per channel (per-channel weights) or a single scale (per-tensor;
    the returned scales then hold that single value). q = clamp(round(b / S_c), -(2^31-1),
    2^31-1): symmetric clamp, -2^31 is never produced, rounding half away from zero. Computed like
    TFLite's SymmetricPerChannelBiasQuantize: float32 scale, float32 reciprocal, float32 product.
    Zero scales are rejected (TFLite would silently write 0, dropping the bias).
    """
    b = np.asarray(bias, dtype=np.float32)
    scales = bias_scales(input_scale, weight_scales).reshape(-1)
    if np.any(~(scales > 0)):
        raise ValueError("bias scales must be positive (input_scale * weight_scale)")
    if scales.size not in (1, b.shape[-1] if b.ndim else 1):
        raise ValueError(f"{scales.size} weight scales for a bias of shape {b.shape}")
    inv = (1.0 / scales.astype(np.float64)).astype(np.float32)
    q = round_half_away(b * inv).astype(np.float64)
    bound = INT32_MAX if np.dtype(dtype) == np.int32 else 2.0**62
    q = np.clip(q, -bound, bound).astype(dtype)
    return q, scales


def adjust_weight_scales_for_bias(bias, input_scale: float, weight_scales) -> np.ndarray:
    """Widen weight scales so each quantized bias fits in half the int32 range (float32 result).

    TFLite's AdjustWeightsForBiasScale: if |b_c| >= 0.5 * S_in * s_c * (2^31-1), the channel's
    weight range is widened to max|w_c| = 2|b_c| / (2^31-1) * 127 / S_in, i.e. the new scale is
    s_c' = 2|b_c| / ((2^31-1) * S_in), which puts the quantized bias at exactly 2^30. The
    condition guarantees s_c' >= s_c, so scales only grow. This leaves headroom for the
    accumulator (bias + sum of input*weight products) and avoids the int32 bias clamp.
    With a single (per-tensor) weight scale, the largest |b_c| decides, as in TFLite.
    The weights must then be quantized with the returned scales.
    """
    b = np.abs(np.asarray(bias, dtype=np.float64)).reshape(-1)
    s = np.asarray(weight_scales, dtype=np.float32).reshape(-1).astype(np.float64)
    if s.size == 1:
        b = np.array([b.max() if b.size else 0.0])
    elif s.size != b.size:
        raise ValueError(f"{s.size} weight scales for {b.size} bias values")
    in_s = float(input_scale)
    needs = b >= 0.5 * in_s * s * INT32_MAX
    widened = 2.0 * b / INT32_MAX / in_s
    return np.where(needs, np.maximum(widened, s), s).astype(np.float32)
