"""Calibration data loading and range collection (qconvert.calibration.data and
calibrate)."""

import io
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from qconvert.errors import ConversionError
from qconvert.calibration.calibrate import calibrate_ranges
from qconvert.calibration.data import load_calibration, model_input_specs

RNG = np.random.default_rng(7)
W = RNG.normal(size=(4, 3, 3, 3)).astype(np.float32)
B = RNG.normal(size=(4,)).astype(np.float32)
INPUTS = {"x": ((1, 3, 8, 8), np.dtype(np.float32)), "y": ((1, 4, 8, 8), np.dtype(np.float32))}


def make_model(untyped_value_info: bool = False) -> onnx.ModelProto:
    """x -> Conv(3x3, pad 1) -> c -> Relu -> r; out = r + y."""
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Add", ["r", "y"], ["out"], name="add")]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 4, 8, 8])],
        [numpy_helper.from_array(W, "W"), numpy_helper.from_array(B, "B")])
    if untyped_value_info:
        vi = graph.value_info.add()
        vi.name = "c"  # listed, but without a type: shape inference must supply it
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def reference(x: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    """numpy forward pass over a batch of samples x [N,3,8,8], y [N,4,8,8]."""
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))  # N,C,H,W,3,3
    c = np.einsum("nchwij,ocij->nohw", windows, W.astype(np.float64)) + B[None, :, None, None]
    r = np.maximum(c, 0)
    return {"x": x, "y": y, "c": c, "r": r, "out": r + y}


def data(n: int = 6):
    x = RNG.normal(size=(n, 3, 8, 8)).astype(np.float32) * 3
    y = RNG.uniform(-2, 5, size=(n, 4, 8, 8)).astype(np.float32)
    return x, y


def check_ranges(ranges, x, y, names=("x", "y", "c", "r", "out")):
    expected = reference(x, y)
    assert set(ranges) == set(names)
    for name in names:
        lo, hi = ranges[name]
        assert lo == pytest.approx(expected[name].min(), abs=1e-4), name
        assert hi == pytest.approx(expected[name].max(), abs=1e-4), name


def error(path, inputs=INPUTS, max_samples=None) -> str:
    with pytest.raises(ConversionError) as e:
        load_calibration(str(path), inputs, max_samples)
    message = str(e.value)
    assert "\n" not in message and message
    return message


# --- ranges ------------------------------------------------------------------------------------

def test_npz_ranges_equal_numpy_global_min_max(tmp_path):
    x, y = data()
    np.savez(tmp_path / "cal.npz", x=x, y=y)
    samples = load_calibration(str(tmp_path / "cal.npz"), INPUTS, None)
    assert len(samples) == 6
    assert samples[0]["x"].shape == (1, 3, 8, 8) and samples[0]["x"].dtype == np.float32
    check_ranges(calibrate_ranges(make_model(), samples, None, progress=False), x, y)


def test_input_model_unchanged_and_untyped_value_info(tmp_path):
    model = make_model(untyped_value_info=True)
    before = model.SerializeToString()
    x, y = data(3)
    np.savez(tmp_path / "cal.npz", x=x, y=y)
    ranges = calibrate_ranges(model, load_calibration(str(tmp_path / "cal.npz"), INPUTS), None, False)
    assert model.SerializeToString() == before
    check_ranges(ranges, x, y)


def test_requested_tensors_only(tmp_path):
    x, y = data(3)
    samples = [{"x": x[i:i + 1], "y": y[i:i + 1]} for i in range(3)]
    ranges = calibrate_ranges(make_model(), samples, ["r", "x"], progress=False)
    check_ranges(ranges, x, y, names=("r", "x"))


def test_max_samples_takes_the_first(tmp_path):
    x, y = data(8)
    x[5:] *= 100  # only in the samples left out
    np.savez(tmp_path / "cal.npz", x=x, y=y)
    samples = load_calibration(str(tmp_path / "cal.npz"), INPUTS, max_samples=5)
    assert len(samples) == 5
    check_ranges(calibrate_ranges(make_model(), samples), x[:5], y[:5])
    assert len(load_calibration(str(tmp_path / "cal.npz"), INPUTS, max_samples=100)) == 8


def test_directory_of_npy_and_npz_shards(tmp_path):
    x, y = data(7)
    np.save(tmp_path / "x.npy", x[:, None])  # the [N, 1, 3, 8, 8] form
    np.savez(tmp_path / "part-000.npz", y=y[:3])
    np.savez_compressed(tmp_path / "part-001.npz", y=y[3:])
    (tmp_path / "README.txt").write_text("ignored")
    samples = load_calibration(str(tmp_path), INPUTS)
    assert len(samples) == 7
    assert isinstance(samples._inputs["x"].segments[0].source, np.memmap)  # not loaded whole
    assert isinstance(samples._inputs["y"].segments[0].source, np.memmap)  # stored npz member
    for i, s in enumerate(samples):
        np.testing.assert_array_equal(s["x"], x[i:i + 1])
        np.testing.assert_array_equal(s["y"], y[i:i + 1])
    check_ranges(calibrate_ranges(make_model(), samples), x, y)


def test_rows_grouped_by_the_model_batch_and_float64_cast(tmp_path):
    inputs = {"v": ((2, 3), np.dtype(np.float32))}
    rows = np.arange(18, dtype=np.float64).reshape(6, 3)
    np.savez(tmp_path / "rows.npz", v=rows)
    samples = load_calibration(str(tmp_path / "rows.npz"), inputs)
    assert len(samples) == 3
    assert samples[1]["v"].dtype == np.float32
    np.testing.assert_array_equal(samples[1]["v"], rows[2:4])
    np.savez(tmp_path / "odd.npz", v=rows[:5])
    assert "multiple of 2" in error(tmp_path / "odd.npz", inputs)


def test_integer_inputs_cast_when_values_fit(tmp_path):
    inputs = {"ids": ((1, 4), np.dtype(np.int32))}
    np.savez(tmp_path / "ok.npz", ids=np.arange(8, dtype=np.int64).reshape(2, 4))
    assert load_calibration(str(tmp_path / "ok.npz"), inputs)[1]["ids"].dtype == np.int32
    np.savez(tmp_path / "big.npz", ids=np.full((2, 4), 2**40, dtype=np.int64))
    assert "do not fit" in error(tmp_path / "big.npz", inputs)


def test_progress_only_on_a_terminal(tmp_path, monkeypatch):
    x, y = data(2)
    samples = [{"x": x[i:i + 1], "y": y[i:i + 1]} for i in range(2)]

    class Tty(io.StringIO):
        def isatty(self):
            return True
    tty = Tty()
    monkeypatch.setattr(sys, "stderr", tty)
    calibrate_ranges(make_model(), samples, ["r"], progress=True)
    assert tty.getvalue().endswith("\rcalibrating: 2/2\n")
    pipe = io.StringIO()
    monkeypatch.setattr(sys, "stderr", pipe)
    calibrate_ranges(make_model(), samples, ["r"], progress=True)
    assert pipe.getvalue() == ""


# --- errors ------------------------------------------------------------------------------------

def test_missing_input(tmp_path):
    x, _ = data(2)
    np.savez(tmp_path / "cal.npz", x=x)
    assert "'y'" in error(tmp_path / "cal.npz") and "cal.npz" in error(tmp_path / "cal.npz")


def test_extra_name(tmp_path):
    x, y = data(2)
    np.savez(tmp_path / "cal.npz", x=x, y=y, z=y)
    message = error(tmp_path / "cal.npz")
    assert "'z'" in message and "not a model input" in message


def test_extra_npy_in_directory(tmp_path):
    x, y = data(2)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    np.save(tmp_path / "w.npy", y)
    assert "'w'" in error(tmp_path)


def test_wrong_shape(tmp_path):
    x, y = data(2)
    np.savez(tmp_path / "cal.npz", x=x[:, :, :4], y=y)
    message = error(tmp_path / "cal.npz")
    assert "'x'" in message and "[2,3,4,8]" in message and "[1,3,8,8]" in message


def test_wrong_dtype(tmp_path):
    x, y = data(2)
    np.savez(tmp_path / "cal.npz", x=(x * 10).astype(np.uint8), y=y)
    message = error(tmp_path / "cal.npz")
    assert "'x'" in message and "uint8" in message


def test_mismatched_sample_counts(tmp_path):
    x, y = data(3)
    np.savez(tmp_path / "cal.npz", x=x, y=y[:2])
    message = error(tmp_path / "cal.npz")
    assert "'x': 3" in message and "'y': 2" in message


def test_shards_with_different_inputs(tmp_path):
    x, y = data(2)
    np.savez(tmp_path / "a.npz", x=x, y=y)
    np.savez(tmp_path / "b.npz", x=x)
    assert "b.npz" in error(tmp_path)


def test_empty(tmp_path):
    np.savez(tmp_path / "cal.npz", x=np.zeros((0, 3, 8, 8), np.float32), y=np.zeros((0, 4, 8, 8), np.float32))
    assert "no calibration samples" in error(tmp_path / "cal.npz")
    (tmp_path / "empty").mkdir()
    assert "no calibration samples" in error(tmp_path / "empty")


@pytest.mark.parametrize("bad, word", [(np.nan, "NaN"), (np.inf, "Inf"), (-np.inf, "Inf")])
def test_non_finite(tmp_path, bad, word):
    x, y = data(4)
    y[2, 1, 3, 3] = bad
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    message = error(tmp_path)
    assert word in message and "'y'" in message and "y.npy" in message and "sample 2" in message
    # a bad value past --calibration-samples is never read
    assert len(load_calibration(str(tmp_path), INPUTS, max_samples=2)) == 2


def test_not_a_file(tmp_path):
    assert "no such file" in error(tmp_path / "missing.npz")
    (tmp_path / "text.npz").write_text("not an archive")
    assert "not an .npz archive" in error(tmp_path / "text.npz")
    (tmp_path / "bad.npy").write_text("not an array")
    dir_message = error(tmp_path)
    assert "bad.npy" in dir_message or "text.npz" in dir_message


def test_model_input_specs():
    assert model_input_specs(make_model()) == INPUTS


# --- the range recorder ------------------------------------------------------------------------

def test_recorder_global_ranges_by_dtype_size_and_special_values(caplog):
    """Small tensors are reduced together per dtype, big ones alone; NaN is skipped (and
    counted in a warning), +-inf left out of the range; a tensor with no finite value, or empty,
    has no range; the tensors may change from one sample to the next."""
    from qconvert.calibration.calibrate import _SMALL, _RangeRecorder

    big = np.zeros(_SMALL + 1, np.float32)
    big[5], big[-1] = -3.0, 7.5
    recorder = _RangeRecorder()
    recorder.record({"a": np.array([1.0, -2.0], np.float32), "i": np.array([3, 9], np.int64),
                     "b": np.array([True, True]), "h": np.array([0.5], np.float16),
                     "nan": np.array([np.nan, 4.0, -1.0], np.float32), "big": big,
                     "mask": np.array([-np.inf, 2.0], np.float32), "none": np.array([np.nan]),
                     "empty": np.zeros((0, 3), np.float32)})
    recorder.record({"a": np.array([0.5, 6.0], np.float32), "i": np.array([-4, 0], np.int64),
                     "b": np.array([False, True]), "h": np.array([0.25], np.float16),
                     "nan": np.array([np.nan, np.nan, 2.0], np.float32), "big": big * 2,
                     "mask": np.array([-np.inf, 1.0], np.float32), "none": np.array([np.nan]),
                     "empty": np.zeros((0, 3), np.float32)})
    recorder.record({"a": np.array([-5.0], np.float32), "later": np.array([1, 2], np.int32)})
    assert recorder.result() == {"a": (-5.0, 6.0), "i": (-4.0, 9.0), "b": (0.0, 1.0), "h": (0.25, 0.5),
                                 "nan": (-1.0, 4.0), "big": (-6.0, 15.0), "mask": (1.0, 2.0),
                                 "later": (1.0, 2.0)}
    (line,) = [r.getMessage() for r in caplog.records if "NaN" in r.getMessage()]  # one line
    assert "tensor 'nan' (3 values) and 1 more tensor; skipped" in line
