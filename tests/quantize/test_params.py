"""qconvert.quantize.params: hand-worked cases (expected values derived in the comments) and
properties. Notation: S scale, Z zero point, int8 [qmin, qmax] = [-128, 127] unless narrow."""

import numpy as np
import pytest

from qconvert.quantize.params import (
    INT32_MAX,
    ZERO_RANGE_SCALE,
    adjust_weight_scales_for_bias,
    choose_quantization_params,
    dequantize,
    nudged_range,
    quantize,
    quantize_bias,
    quantize_weights_per_channel,
    quantize_weights_per_tensor,
    round_half_away,
)

# --- choose_quantization_params -------------------------------------------------------------

def test_positive_range_is_widened_to_zero_and_puts_zero_point_at_qmin():
    # [2, 10] -> [0, 10]; S = 10/255. From the min side: Z = -128 - 0/S = -128.
    scale, zp = choose_quantization_params(2.0, 10.0)
    assert scale == pytest.approx(10 / 255)
    assert zp == -128


def test_negative_range_is_widened_to_zero_and_puts_zero_point_at_qmax():
    # [-6, -1] -> [-6, 0]; S = 6/255. Max side: Z = 127 - 0/S = 127 (error term 127 < 128 + 255).
    scale, zp = choose_quantization_params(-6.0, -1.0)
    assert scale == pytest.approx(6 / 255)
    assert zp == 127


def test_point_range_nonzero():
    # [3, 3] -> [0, 3]: S = 3/255 = 1/85, Z = -128.  [-3, -3] -> [-3, 0]: S = 1/85, Z = 127.
    assert choose_quantization_params(3.0, 3.0) == (pytest.approx(1 / 85), -128)
    assert choose_quantization_params(-3.0, -3.0) == (pytest.approx(1 / 85), 127)


def test_point_range_zero_gets_a_positive_scale():
    # TFLite returns S = 0 here; we return ZERO_RANGE_SCALE (1.0) and Z = 0, which represents
    # the all-zero tensor exactly without a zero scale.
    assert ZERO_RANGE_SCALE == 1.0
    assert choose_quantization_params(0.0, 0.0) == (1.0, 0)
    # uint8-style range: Z = 0 is inside [0, 255].
    assert choose_quantization_params(0.0, 0.0, qmin=0, qmax=255) == (1.0, 0)
    # A range without 0 in it: Z clamps to qmin.
    assert choose_quantization_params(0.0, 0.0, qmin=1, qmax=255) == (1.0, 1)


def test_symmetric_range_full_and_narrow():
    # [-1, 1], full int8: S = 2/255, 1/S = 127.5; both candidates are -128 + 127.5 = -0.5 and
    # 127 - 127.5 = -0.5 (exact in float64). Half away from zero -> Z = -1 (numpy's rint gives 0).
    scale, zp = choose_quantization_params(-1.0, 1.0)
    assert scale == pytest.approx(2 / 255)
    assert zp == -1
    # Narrow [-127, 127]: S = 2/254 = 1/127, Z = -127 + 127 = 0.
    scale, zp = choose_quantization_params(-1.0, 1.0, narrow_range=True)
    assert scale == pytest.approx(1 / 127)
    assert zp == 0


def test_candidates_differ_min_side_chosen():
    # [-2.75, 277.75]: S = 280.5/255 = 1.1.
    # Min side: -128 - (-2.75/1.1) = -128 + 2.5 = -125.5, error term 128 + 2.5 = 130.5.
    # Max side: 127 - 277.75/1.1 = 127 - 252.5 = -125.5 mathematically, error term 379.5; in
    # float64 it comes out as -125.49999999999997, which would round to -125.
    # The smaller error term picks the min side: round(-125.5) half away from zero = -126.
    scale, zp = choose_quantization_params(-2.75, 277.75)
    assert scale == pytest.approx(1.1)
    assert zp == -126


def test_candidates_differ_max_side_chosen():
    # [-39.15, 37.35]: S = 76.5/255 = 0.3.
    # Min side: -128 + 130.5 = 2.5, error term 128 + 130.5 = 258.5.
    # Max side: 127 - 124.5 = 2.5 mathematically, error term 127 + 124.5 = 251.5 (smaller);
    # in float64 it is 2.4999999999999867, so Z = 2 (the min side would have given 3).
    scale, zp = choose_quantization_params(-39.15, 37.35)
    assert scale == pytest.approx(0.3)
    assert zp == 2


def test_narrow_range_positive_range():
    # [0, 254] narrow: qmin = -127, S = 254/254 = 1, Z = -127 - 0 = -127.
    assert choose_quantization_params(0.0, 254.0, narrow_range=True) == (1.0, -127)


def test_vectorised_ranges():
    # Same answers element-wise as the scalar cases above.
    scale, zp = choose_quantization_params(np.array([2.0, -6.0, 0.0]), np.array([10.0, -1.0, 0.0]))
    np.testing.assert_allclose(scale, [10 / 255, 6 / 255, 1.0])
    np.testing.assert_array_equal(zp, [-128, 127, 0])


@pytest.mark.parametrize("rmin, rmax", [(1.0, 0.0), (float("nan"), 1.0), (-1.0, float("inf"))])
def test_bad_ranges_rejected(rmin, rmax):
    with pytest.raises(ValueError):
        choose_quantization_params(rmin, rmax)


def test_nudged_range():
    # [-1, 1] -> S = 2/255, Z = -1: [S*(-128+1), S*(127+1)] = [-254/255, 256/255].
    lo, hi = nudged_range(*choose_quantization_params(-1.0, 1.0))
    assert lo == pytest.approx(-254 / 255)
    assert hi == pytest.approx(256 / 255)


@pytest.mark.parametrize("narrow", [False, True])
def test_chooser_properties(narrow):
    rng = np.random.default_rng(0)
    qmin = -127 if narrow else -128
    for _ in range(2000):
        a, b = sorted(rng.normal(scale=rng.choice([1e-3, 1.0, 1e3]), size=2) + rng.normal())
        scale, zp = choose_quantization_params(a, b, narrow_range=narrow)
        assert scale > 0 and qmin <= zp <= 127
        # 0 is exactly representable: it quantizes to Z and Z dequantizes to 0.
        assert quantize(0.0, scale, zp, np.int8, narrow_range=narrow) == zp
        assert dequantize(np.int8(zp), scale, zp) == 0.0
        # The representable range covers the 0-widened [a, b] up to one step.
        lo, hi = nudged_range(scale, zp, qmin, 127)
        assert lo <= min(a, 0.0) + scale and hi >= max(b, 0.0) - scale
    # Symmetric ranges in the narrow range have Z = 0.
    for m in [1e-6, 0.5, 1.0, 3.7, 1e4]:
        assert choose_quantization_params(-m, m, narrow_range=True)[1] == 0


# --- rounding, quantize / dequantize -------------------------------------------------------

def test_round_half_away_from_zero():
    x = np.array([0.5, -0.5, 1.5, -1.5, 2.5, 0.49999999999999994, -2.4999])
    np.testing.assert_array_equal(round_half_away(x), [1, -1, 2, -2, 3, 0, -2])


def test_quantize_rounds_before_adding_zero_point_and_clamps():
    # S = 0.5, Z = 3. -0.25/S = -0.5 -> -1, then +3 = 2 (rounding v/S + Z = 2.5 would give 3,
    # TFLite's QUANTIZE kernel rounds first). 100/S + 3 = 203 -> 127; -100/S + 3 -> -128.
    q = quantize([-0.25, 0.25, 100.0, -100.0], 0.5, 3, np.int8)
    np.testing.assert_array_equal(q, [2, 4, 127, -128])
    assert q.dtype == np.int8
    # narrow range clamps at -127.
    assert quantize(-100.0, 0.5, 0, np.int8, narrow_range=True) == -127
    np.testing.assert_array_equal(dequantize(q, 0.5, 3), [-0.5, 0.5, 62.0, -65.5])


def test_quantize_per_axis():
    # Scales [1, 0.5] along axis 1: column 0 divides by 1, column 1 by 0.5 (then +Z 0 / +1).
    v = np.array([[1.0, 1.0], [-2.0, -2.0]])
    q = quantize(v, [1.0, 0.5], [0, 1], np.int8, axis=1)
    np.testing.assert_array_equal(q, [[1, 3], [-2, -3]])
    np.testing.assert_array_equal(dequantize(q, [1.0, 0.5], [0, 1], axis=1), v)


def test_quantize_rejects_zero_scale():
    with pytest.raises(ValueError):
        quantize([1.0], 0.0, 0, np.int8)


# --- weights --------------------------------------------------------------------------------

def test_per_channel_weights_with_an_all_zero_channel():
    # Axis 0, three channels, values chosen so float32 arithmetic is exact:
    #   ch0 [31.75, -15.875]: max|w| = 31.75, S = 31.75/127 = 0.25; q = [127, -63.5 -> -64].
    #   ch1 [0, 0]: S would be 0; it borrows the largest other scale, 0.25; q = [0, 0].
    #   ch2 [-7.9375, 0.03125]: max|w| = 7.9375 = 127/16, S = 1/16; q = [-127, 0.5 -> 1].
    w = np.array([[31.75, -15.875], [0.0, 0.0], [-7.9375, 0.03125]], np.float32)
    q, scales = quantize_weights_per_channel(w, axis=0)
    np.testing.assert_array_equal(q, [[127, -64], [0, 0], [-127, 1]])
    np.testing.assert_array_equal(scales, np.float32([0.25, 0.25, 0.0625]))
    assert q.dtype == np.int8 and scales.dtype == np.float32


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_denormal_weights_count_as_zero():
    """A channel of 1e-40s (PP-OCRv4's recognizer has them) would get a scale whose reciprocal,
    and whose bias scale's reciprocal, overflow float32: it quantizes like an all-zero channel."""
    w = np.array([[31.75, -15.875], [1e-40, -2e-41]], np.float32)
    q, scales = quantize_weights_per_channel(w, axis=0)
    np.testing.assert_array_equal(q, [[127, -64], [0, 0]])
    np.testing.assert_array_equal(scales, np.float32([0.25, 0.25]))
    bias, _ = quantize_bias(np.float32([1, 1]), 0.5, scales)
    np.testing.assert_array_equal(bias, [8, 8])
    q, scale = quantize_weights_per_tensor(np.full(3, 1e-39, np.float32))
    assert scale == ZERO_RANGE_SCALE and not q.any()


def test_per_channel_weights_last_axis_and_all_channels_zero():
    # Depthwise-style layout, channels on the last axis. All zero -> every scale 1.0, q 0.
    q, scales = quantize_weights_per_channel(np.zeros((1, 2, 2, 3), np.float32), axis=-1)
    np.testing.assert_array_equal(scales, [1.0, 1.0, 1.0])
    assert not q.any() and q.shape == (1, 2, 2, 3)


def test_tiny_weight_scales():
    # max|w| = 127 * 2^-100 (about 1e-28): S = 2^-100 exactly; 127/max|w| = 2^100 exactly.
    # w / S = [127, -63.5, 0.5, -0.5] -> [127, -64, 1, -1].
    e = np.float32(2.0 ** -100)
    w = np.array([[127 * e, -63.5 * e, 0.5 * e, -0.5 * e]], np.float32)
    q, scales = quantize_weights_per_channel(w, axis=0)
    assert scales[0] == e
    np.testing.assert_array_equal(q, [[127, -64, 1, -1]])


def test_weights_narrow_never_produce_minus_128():
    # Narrow: S = 1/127 for max|w| = 1; -1 -> -127. Full range: min -1.28 limits:
    # S = max(1.28/128, 1/127) = 0.01, so -1.28 -> -128 and 1 -> 100.
    q, _ = quantize_weights_per_channel(np.array([[-1.0, 1.0]], np.float32), axis=0)
    np.testing.assert_array_equal(q, [[-127, 127]])
    q, scales = quantize_weights_per_channel(np.array([[-1.28, 1.0]], np.float32), axis=0,
                                             narrow=False)
    assert scales[0] == pytest.approx(0.01)
    np.testing.assert_array_equal(q, [[-128, 100]])


def test_per_channel_with_given_scales():
    # Scales [0.5, 2] on axis 1: [[1, 1], [-1, 4]] / S = [[2, 0.5 -> 1], [-2, 2]].
    q, _ = quantize_weights_per_channel(np.array([[1.0, 1.0], [-1.0, 4.0]]), axis=1,
                                        scales=[0.5, 2.0])
    np.testing.assert_array_equal(q, [[2, 1], [-2, 2]])
    with pytest.raises(ValueError):
        quantize_weights_per_channel(np.ones((2, 2)), axis=1, scales=[0.5, 0.0])


def test_per_tensor_weights():
    # Power-of-two values so float32 keeps the ties exact: max|w| = 31.75 -> S = 0.25; [31.75, -15.875, 0.125] -> [127, -64, 1].
    q, scale = quantize_weights_per_tensor(np.array([31.75, -15.875, 0.125], np.float32))
    assert scale == 0.25
    np.testing.assert_array_equal(q, [127, -64, 1])
    q, scale = quantize_weights_per_tensor(np.zeros(4, np.float32))
    assert scale == 1.0 and not q.any()


# --- bias -----------------------------------------------------------------------------------

def test_bias_rounds_half_away_from_zero():
    # S_in = 0.5, s_w = 0.5 -> S_bias = 0.25. b / S = [0.5, -0.5, 1.5, -1.5, 2.5] ->
    # [1, -1, 2, -2, 3] (half-to-even would give [0, 0, 2, -2, 2]).
    q, scales = quantize_bias([0.125, -0.125, 0.375, -0.375, 0.625], 0.5, [0.5] * 5)
    np.testing.assert_array_equal(q, [1, -1, 2, -2, 3])
    np.testing.assert_array_equal(scales, [0.25] * 5)
    assert q.dtype == np.int32


def test_bias_scale_is_the_product_in_float32():
    rng = np.random.default_rng(1)
    s_in, s_w = 0.0173, rng.uniform(1e-4, 1e-2, 8).astype(np.float32)
    _, scales = quantize_bias(rng.normal(size=8), s_in, s_w)
    np.testing.assert_array_equal(scales, np.float32(s_in) * s_w)
    # Per-tensor: one weight scale for every channel.
    q, scales = quantize_bias([1.0, -1.0], 0.5, 0.25)
    np.testing.assert_array_equal(scales, [0.125])
    np.testing.assert_array_equal(q, [8, -8])


def test_bias_saturates_symmetrically():
    # S_bias = 2^-10 * 2^-20 = 2^-30; b = +-3 -> +-3 * 2^30, beyond int32: clamp to +-(2^31 - 1).
    q, _ = quantize_bias([3.0, -3.0], 2.0 ** -10, [2.0 ** -20, 2.0 ** -20])
    np.testing.assert_array_equal(q, [INT32_MAX, -INT32_MAX])
    with pytest.raises(ValueError):
        quantize_bias([1.0], 0.5, [0.0])


def test_bias_overflow_widens_weight_scales():
    # S_in = 2^-10, s_w = 2^-20: S_bias = 2^-30 and the threshold is
    # 0.5 * 2^-30 * (2^31 - 1) = 1 - 2^-31 (just below 1).
    #   b0 = 1.0  >= threshold -> s' = 2 * 1 / ((2^31 - 1) * 2^-10) = 2^11 / (2^31 - 1)
    #   b1 = 0.5  <  threshold -> unchanged 2^-20
    #   b2 = -3.0 >= threshold -> s' = 6 * 2^10 / (2^31 - 1)
    s_in, s_w = 2.0 ** -10, np.full(3, 2.0 ** -20, np.float32)
    bias = np.array([1.0, 0.5, -3.0], np.float32)
    new = adjust_weight_scales_for_bias(bias, s_in, s_w)
    np.testing.assert_allclose(new, [2.0 ** 11 / INT32_MAX, 2.0 ** -20, 6 * 2.0 ** 10 / INT32_MAX],
                               rtol=1e-6)
    assert new[1] == s_w[1] and np.all(new >= s_w)
    # The widened channels' biases land at +-(2^31 - 1)/2, i.e. +-2^30 up to float32 precision.
    q, _ = quantize_bias(bias, s_in, new)
    assert abs(q[0] - 2 ** 30) <= 128 and abs(q[2] + 2 ** 30) <= 128
    assert q[1] == 2 ** 29  # 0.5 / 2^-30


def test_bias_overflow_per_tensor_uses_largest_bias():
    # One weight scale 2^-20, S_in 2^-10: max |b| = 3 decides -> s' = 6 * 2^10 / (2^31 - 1).
    new = adjust_weight_scales_for_bias([0.1, -3.0], 2.0 ** -10, 2.0 ** -20)
    np.testing.assert_allclose(new, [6 * 2.0 ** 10 / INT32_MAX], rtol=1e-6)
    # Small biases change nothing.
    np.testing.assert_array_equal(adjust_weight_scales_for_bias([0.1], 0.5, [0.01]), np.float32([0.01]))
