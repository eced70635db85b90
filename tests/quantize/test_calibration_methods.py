"""Calibration methods minmax, percentile[:P] and mse (qconvert.quantize.calibration_methods and
their use in calibrate): hand-worked expectations, derived in the comments.

Notation for mse: int8 has 255 steps, so a kept value's expected squared rounding error is
(range / 255)^2 / 12 = range^2 / 780300; a clipped value's is its squared distance to the end."""

import io
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from qconvert.onnx.loader import load
from qconvert.calibration import calibrate
from qconvert.calibration.calibrate import CalibrationRun, calibrate_model, calibrate_ranges
from qconvert.quantize.calibration_methods import (
    BINS,
    MINMAX,
    MSE,
    PERCENTILE,
    CalibrationMethod,
    HistogramRecorder,
    parse_calibration_method,
    softmax_floor,
    softmax_margin,
)

ROUNDING = 255**2 * 12  # 780300


def histogram_ranges(samples, ranges, method):
    """The ranges `method` gives for `samples` (dicts name -> values), with the tensors' min/max
    given by hand."""
    recorder = HistogramRecorder(ranges)
    for sample in samples:
        recorder.record(sample)
    return recorder.result(method)


# --- parsing -----------------------------------------------------------------------------------

@pytest.mark.parametrize("text, method, canonical", [
    ("minmax", MINMAX, "minmax"),
    ("mse", MSE, "mse"),
    ("percentile", CalibrationMethod("percentile", 99.99), "percentile:99.99"),
    ("percentile:99.9", CalibrationMethod("percentile", 99.9), "percentile:99.9"),
    ("percentile:99.90", CalibrationMethod("percentile", 99.9), "percentile:99.9"),
    ("percentile:100", CalibrationMethod("percentile", 100.0), "percentile:100"),
    ("percentile:1e2", CalibrationMethod("percentile", 100.0), "percentile:100"),
    ("percentile:50.5", CalibrationMethod("percentile", 50.5), "percentile:50.5"),
])
def test_parse_and_canonical_text(text, method, canonical):
    parsed = parse_calibration_method(text)
    assert parsed == method
    assert str(parsed) == canonical
    assert parse_calibration_method(canonical) == parsed
    assert PERCENTILE == parse_calibration_method("percentile")


@pytest.mark.parametrize("text, words", [
    ("percentile:40", "50 < P <= 100"),
    ("percentile:50", "50 < P <= 100"),
    ("percentile:100.5", "50 < P <= 100"),
    ("percentile:abc", "must be a number"),
    ("percentile:nan", "50 < P <= 100"),
    ("percentile:", "must be a number"),
    ("foo", "expected minmax, percentile[:P] or mse"),
    ("", "unknown calibration method"),
    ("MSE", "unknown calibration method"),
    ("minmax:1", "takes no parameter"),
    ("mse:2", "takes no parameter"),
])
def test_parse_errors_are_one_line(text, words):
    with pytest.raises(ValueError) as e:
        parse_calibration_method(text)
    message = str(e.value)
    assert words in message and "\n" not in message


def test_methods_made_directly_are_checked():
    with pytest.raises(ValueError):
        CalibrationMethod("percentile", 40)
    with pytest.raises(ValueError):
        CalibrationMethod("mse", 99.0)
    with pytest.raises(ValueError):
        CalibrationMethod("entropy")


# --- histograms --------------------------------------------------------------------------------

def test_values_fall_in_equal_bins_over_the_range():
    # Range [0, 1], 2048 bins of 1/2048: 0 -> bin 0, 0.5 -> bin 1024, 1 (the max) -> the last bin;
    # 0.25 + 1/4096 is in the middle of bin 512. NaN and +-inf are not counted.
    recorder = HistogramRecorder({"t": (0.0, 1.0), "c": (2.0, 2.0)})
    recorder.record({"t": np.array([0, 0.5, 1, 0.25 + 1 / 4096, np.nan, np.inf, -np.inf], np.float32),
                     "c": np.array([2.0])})
    recorder.record({"t": np.array([[0.5]], np.float64), "c": np.array([2.0])})  # another layout
    recorder._count()
    counts = recorder.counts.reshape(-1, BINS)
    assert counts.shape == (1, BINS)  # a constant tensor has no histogram
    assert {int(i): int(counts[0, i]) for i in np.flatnonzero(counts[0])} == {0: 1, 512: 1, 1024: 2, 2047: 1}


def test_ranges_too_wide_for_float32_arithmetic_and_booleans():
    # [-3e38, 3e38] is wider than float32 can hold (value - min would overflow): -3e38, 0 and 3e38
    # still land in the first, the middle and the last bin. Booleans count as 0 and 1.
    recorder = HistogramRecorder({"w": (-3e38, 3e38), "b": (0.0, 1.0)})
    recorder.record({"w": np.array([-3e38, 0, 3e38], np.float32), "b": np.array([True, False, True])})
    recorder._count()
    assert np.flatnonzero(recorder.counts[0]).tolist() == [0, 1024, 2047]
    assert recorder.counts[1, 0] == 1 and recorder.counts[1, 2047] == 2


def test_large_and_small_tensors_of_several_dtypes_together():
    # "big" (1.5M values, binned in slices) 0, 1, ..., 1499999: 90% of them lie below 1.35M, 10%
    # below 150000. "i" int16 -1000..1000 (2001 values, 1 apart): 90% (1800.9 values) lie below
    # -1000 + 1800.9 = 800.9, 10% below -1000 + 200.1 = -799.9, each within one
    # value (discrete values have no sharper quantile) plus one bin. "f" float16 0, 1, 2, 3 split
    # over two samples: 10% and 90% of 4 values are 0.4 of a value from either end, inside the
    # bins of 0 and 3, the first and the last: 0 and 3 within a bin.
    big = np.arange(1_500_000, dtype=np.float32)
    ranges = {"big": (0.0, 1_499_999.0), "i": (-1000.0, 1000.0), "f": (0.0, 3.0)}
    samples = [{"big": big, "i": np.arange(-1000, 1001, dtype=np.int16), "f": np.array([0, 1], np.float16)},
               {"f": np.array([2, 3], np.float16)}]
    result = histogram_ranges(samples, ranges, CalibrationMethod("percentile", 90))
    bin_of = {name: (hi - lo) / BINS for name, (lo, hi) in ranges.items()}
    assert result["big"][0] == pytest.approx(150_000, abs=bin_of["big"])
    assert result["big"][1] == pytest.approx(1_350_000, abs=bin_of["big"])
    assert result["i"][0] == pytest.approx(-799.9, abs=bin_of["i"] + 1)
    assert result["i"][1] == pytest.approx(800.9, abs=bin_of["i"] + 1)
    assert result["f"][0] == pytest.approx(0.0, abs=bin_of["f"])
    assert result["f"][1] == pytest.approx(3.0, abs=bin_of["f"])


# --- percentile --------------------------------------------------------------------------------

def test_percentile_leaves_out_a_far_outlier():
    # 10,000 values 0, 0.01, ..., 99.99 and one at 1000: 10,001 values over [0, 1000], bins of
    # 1000/2048 = 0.49. 99.9% of 10,001 = 9991 values lie below ~99.9; 0.1% = 10 values below ~0.1.
    values = np.append(np.arange(10_000) / 100, 1000.0)
    samples = [{"t": part} for part in np.array_split(values, 7)]
    lo, hi = histogram_ranges(samples, {"t": (0.0, 1000.0)}, CalibrationMethod("percentile", 99.9))["t"]
    width = 1000 / BINS
    assert hi == pytest.approx(99.9, abs=width)
    assert lo == pytest.approx(0.1, abs=width)


def test_percentile_symmetric():
    # 20,001 values -1, -0.9999, ..., 1 (steps of 1e-4): 1% of them lie below -0.98, 1% above 0.98.
    values = np.linspace(-1, 1, 20_001)
    lo, hi = histogram_ranges([{"t": values}], {"t": (-1.0, 1.0)}, CalibrationMethod("percentile", 99))["t"]
    assert lo == pytest.approx(-0.98, abs=2 / BINS)
    assert hi == pytest.approx(0.98, abs=2 / BINS)
    assert lo == pytest.approx(-hi, abs=1e-9)


def test_percentile_100_and_constant_tensors_give_min_and_max():
    values = {"t": np.array([-2.0, 0.3, 5.0]), "c": np.full(10, 4.0), "one": np.array([7.0])}
    ranges = {"t": (-2.0, 5.0), "c": (4.0, 4.0), "one": (7.0, 7.0)}
    assert histogram_ranges([values], ranges, CalibrationMethod("percentile", 100)) == ranges
    for method in (PERCENTILE, MSE):
        result = histogram_ranges([values], ranges, method)
        assert result["c"] == (4.0, 4.0) and result["one"] == (7.0, 7.0)


# --- mse ---------------------------------------------------------------------------------------

def test_mse_clips_a_far_outlier_when_enough_values_pay_for_it():
    # N values uniform in [0, 1) and one at 100, range [0, 100]. With the top end at e (1 <= e <= 100)
    # the error is (100 - e)^2 (the outlier, clipped) + N e^2 / 780300 (rounding of the rest),
    # minimal where 100 - e = N e / 780300: e* = 100 / (1 + N / 780300).
    # N = 3 * 780300: e* = 25, error 75^2 + 3 * 625 = 7500, against 30000 for the full range.
    n = 3 * ROUNDING
    values = np.append((np.arange(n) + 0.5) / n, 100.0)
    lo, hi = histogram_ranges([{"t": values}], {"t": (0.0, 100.0)}, MSE)["t"]
    assert lo == 0.0
    assert hi == pytest.approx(25, rel=0.01)


def test_mse_barely_clips_a_far_outlier_when_few_values_would_gain():
    # As above with N = 7803: e* = 100 / 1.01 = 99.01, error 0.99^2 + 7803 * 99.01^2 / 780300 = 99.0
    # against 100 for the full range: clipping 1% of the range saves 1% of the error.
    n = 7803
    values = np.append((np.arange(n) + 0.5) / n, 100.0)
    lo, hi = histogram_ranges([{"t": values}], {"t": (0.0, 100.0)}, MSE)["t"]
    assert lo == 0.0
    assert hi == pytest.approx(99.01, abs=0.25)  # the search's last grid: 0.2 apart here


def test_mse_keeps_nearly_the_whole_range_of_a_uniform_distribution():
    # Uniform density 1 on [0, 1], top end e: clipping costs (1 - e)^3 / 3, rounding e^3 / 780300;
    # the minimum is where (1 - e)^2 = 3 e^2 / 780300, i.e. 1 - e = e / 510: e = 510/511, 0.2%
    # below the max (values within about half a step of the end cost less clipped than rounded).
    # Symmetric on [-1, 1] (density 1/2): the error at ends -a, b is (1-a)^3/6 + (1-b)^3/6 +
    # ((a + b)/2) (a + b)^2 / 780300; d/da = 0 at a = b: (1 - a)^2 = 12 a^2 / 780300, 1 - a = a / 255:
    # the ends +-255/256.
    n = 100_000
    values = (np.arange(n) + 0.5) / n
    lo, hi = histogram_ranges([{"t": values}], {"t": (0.0, 1.0)}, MSE)["t"]
    assert lo == 0.0 and hi == pytest.approx(510 / 511, abs=1 / BINS)
    symmetric = np.concatenate([-values, values])
    lo, hi = histogram_ranges([{"t": symmetric}], {"t": (-1.0, 1.0)}, MSE)["t"]
    assert lo == pytest.approx(-255 / 256, abs=2 / BINS) and hi == pytest.approx(255 / 256, abs=2 / BINS)


def test_mse_moves_each_end_on_its_own():
    # N = 3 * 780300 values uniform in [-1, 1) (density N/2 per unit) and one at 100, range
    # [-1, 100]. Top end e (the outlier clipped), low end -1 + d: the error is
    #   (100 - e)^2 + (N/2) d^3 / 3 + N (1 - d/2) (e + 1 - d)^2 / 780300.
    # d/dd = 0: (N/2) d^2 = (N/2) s^2/12 + 2 N (e + 1) / 780300 with s = (e + 1) / 255 the step:
    # at e = 24.5, d^2 = 8.2e-4 + 1.3e-4, d = 0.031. d/de = 0: 100 - e = 3 (1 - d/2) (e + 1 - d):
    # e = (100 - 2.9535 * 0.969) / 3.9535 = 24.57. So the low end moves in by 3%, to -0.969 (on
    # this histogram's bin edges, 101/2048 = 0.049 apart), the top end by 75%: shrinking both
    # ends by one factor would have clipped the bulk at -0.25.
    n = 3 * ROUNDING
    values = np.append((np.arange(n) + 0.5) / n * 2 - 1, 100.0)
    lo, hi = histogram_ranges([{"t": values}], {"t": (-1.0, 100.0)}, MSE)["t"]
    assert lo == pytest.approx(-0.969, abs=101 / BINS)
    assert hi == pytest.approx(24.57, rel=0.01)


# --- through onnxruntime -----------------------------------------------------------------------

def neg_model() -> onnx.ModelProto:
    """x [1, 1000] -> Neg -> n."""
    graph = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["n"], name="neg")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1000])],
        [helper.make_tensor_value_info("n", TensorProto.FLOAT, [1, 1000])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def outlier_samples():
    """Ten samples of 1000 values: 0, 0.01, ..., 99.99 in order, then the last value of the last
    sample 99.99 replaced by 1000, and sample 3 given a NaN and a +inf (each replacing a value)."""
    values = (np.arange(10_000) / 100).astype(np.float32).reshape(10, 1, 1000)
    values[9, 0, 999] = 1000
    values[3, 0, 10] = np.nan
    values[3, 0, 11] = np.inf
    return [{"x": v} for v in values]


def test_methods_through_onnxruntime():
    # Without the NaN, +inf and 99.99: the values 0 .. 99.98 and 1000, 9,998 of them. minmax:
    # [0, 1000] for x, [-1000, 0] for n. percentile:99.9: 9988 values below ~99.9 and ~10 below
    # ~0.1, bins of 1000/2048; n mirrors x.
    model = neg_model()
    minmax = calibrate_ranges(model, outlier_samples())
    assert minmax == calibrate_ranges(model, outlier_samples(), method=MINMAX)
    assert minmax == {"x": (0.0, 1000.0), "n": (-1000.0, 0.0)}
    width = 1000 / BINS
    ranges = calibrate_ranges(model, outlier_samples(), method=parse_calibration_method("percentile:99.9"))
    assert ranges["x"] == (pytest.approx(0.1, abs=width), pytest.approx(99.9, abs=width))
    assert ranges["n"] == (pytest.approx(-99.9, abs=width), pytest.approx(-0.1, abs=width))
    # mse: 9,997 values in [0, 100] and one at 1000. Top end e in [100, 1000]:
    # (1000 - e)^2 + 9997 e^2 / 780300, minimal at e = 1000 / (1 + 9997/780300) = 987.4: the
    # outlier is nearly kept; n mirrors x. The generator is run twice (made a list).
    ranges = calibrate_ranges(model, (s for s in outlier_samples()), method=MSE)
    assert ranges["x"][0] == 0.0 and ranges["x"][1] == pytest.approx(987.4, rel=0.005)
    assert ranges["n"][1] == 0.0 and ranges["n"][0] == pytest.approx(-987.4, rel=0.005)


def test_minmax_builds_no_histogram(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("minmax made a histogram")
    monkeypatch.setattr(calibrate, "HistogramRecorder", refuse)
    assert calibrate_ranges(neg_model(), outlier_samples())["x"] == (0.0, 1000.0)


def test_progress_counts_both_passes(monkeypatch):
    class Tty(io.StringIO):
        def isatty(self):
            return True
    tty = Tty()
    monkeypatch.setattr(sys, "stderr", tty)
    calibrate_ranges(neg_model(), outlier_samples()[:2], progress=True, method=MSE)
    assert tty.getvalue().endswith("\rcalibrating: 4/4\n")


def test_calibrate_model_sets_the_method_and_names_it():
    model = neg_model()
    run = CalibrationRun(model, "all")
    ir = load(model)
    calibrate_model(ir, run, outlier_samples(), method=CalibrationMethod("percentile", 99.9))
    x = ir.arrays["x"].minmax
    assert x.source == "calibration (percentile:99.9)"
    assert x.max == pytest.approx(99.9, abs=1000 / BINS)
    ir = load(neg_model())
    calibrate_model(ir, CalibrationRun(neg_model(), "all"), outlier_samples())
    assert (ir.arrays["x"].minmax.max, ir.arrays["x"].minmax.source) == (1000.0, "calibration")


# --- softmax_floor -------------------------------------------------------------------------------
# margin(n) = ln(512 n): for 4 values ln(2048) = 7.6246.

def test_softmax_margin_is_half_an_int8_step_for_the_whole_row():
    assert softmax_margin(4) == pytest.approx(np.log(2048))
    assert softmax_margin(4, beta=2.0) == pytest.approx(np.log(2048) / 2)
    # every value of a row of 4 at its maximum minus the margin: together below half a step
    row = np.array([0.0, -softmax_margin(4), -softmax_margin(4), -softmax_margin(4)])
    p = np.exp(row) / np.exp(row).sum()
    assert 1 - p[0] < 1 / 512 and p[1:].max() < 1 / 512


def test_softmax_floor_of_rows_with_masked_values():
    """The unmasked values: row 1's 2 and 0 (-inf masked), row 2's 1, 0, 0.5 (-1e4 masked), row
    3's all; the lowest 0, the floor 0 - 7.62."""
    x = np.array([[2.0, -np.inf, -np.inf, 0.0], [1.0, -1e4, 0.0, 0.5], [0.5, 1.0, 2.0, 3.0]])
    floor, masked = softmax_floor(x)
    assert masked and floor == pytest.approx(-np.log(2048))


def test_softmax_floor_without_masked_values_and_with_whole_masked_rows():
    """A row spanning 50 (more than the margin, less than MASKED_GAP = 104) is no mask; a row whose
    maximum lies MASKED_GAP below the others' is masked whole and left out (the floor: row 1's
    lowest unmasked value 0, minus 7.62)."""
    floor, masked = softmax_floor(np.array([[0.0, -50.0, 3.0, 1.0]]))
    assert not masked and floor == pytest.approx(-50 - np.log(2048))
    lowest = np.finfo(np.float32).min
    rows = np.array([[0.0, lowest, 3.0, 1.0], [lowest] * 4, [np.nan] * 4])
    floor, masked = softmax_floor(rows)
    assert masked and floor == pytest.approx(-np.log(2048))
    assert softmax_floor(np.full((2, 4), np.nan)) is None


def masked_softmax_model() -> onnx.ModelProto:
    """s = x + bias, bias [4] = [0, 0, 0, -1e4] (the last key masked); p = Softmax(s); and an
    unmasked Softmax(x)."""
    nodes = [helper.make_node("Add", ["x", "bias"], ["s"]), helper.make_node("Softmax", ["s"], ["p"]),
             helper.make_node("Softmax", ["x"], ["q"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4])],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in "pq"],
                              [onnx.numpy_helper.from_array(np.array([0, 0, 0, -1e4], np.float32), "bias")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def test_calibrate_model_gives_a_masked_softmax_input_its_floor():
    """x's rows: [r, r + 1, r + 2, r + 3] for r in -1, 0, 1 over two samples (shifted by 0 and
    -2). In s the last key is masked: the lowest unmasked value is -1 - 2 = -3, the floor
    -3 - ln(2048) = -10.62, and the calibrated minimum -1e4 + (-1 + 3 - 2) = -1e4, both widened
    to 8 significant bits (quantize/params.py snapped_range): -1e4 on the grid of 2^(13 - 8) = 32
    is -10016, -10.62 on the grid of 2^(3 - 8) is -10.625. x's rows are unmasked: no floor."""
    model = masked_softmax_model()
    rows = np.arange(-1, 2, dtype=np.float32)[:, None] + np.arange(4, dtype=np.float32)
    samples = [{"x": (rows + shift)[None]} for shift in (0.0, -2.0)]
    run = CalibrationRun(model, "all")  # before load, which frees the model's weights
    ir = load(model)
    calibrate_model(ir, run, samples)
    s = ir.arrays["s"].minmax
    assert (s.min, s.softmax_floor) == (-10016.0, -10.625)
    assert -10.625 <= -3 - np.log(2048) < -10.625 + 2 ** -5
    assert ir.arrays["x"].minmax.softmax_floor is None
