"""OneHot (qconvert/ops/onehot.py) against onnxruntime: ONE_HOT at every axis, negative indices
wrapped (index + depth) as ONNX wraps them while TFLite writes all-off, indices out of range on
both sides all-off, float indices truncated, [off, on] as a constant or a run-time input, int
values, depth as a scalar or a one-element vector; an int8 model around it; one-line refusals."""

import functools

import numpy as np
import pytest
from onnx import TensorProto, helper

from qconvert.tflite import reader
from tests.harness import (
    assert_refused_in_one_line,
    assert_matches_onnxruntime,
    calibration_set,
    convert_proto,
    convert_quantized,
    make_model,
    run_onnxruntime,
    run_tflite,
)

RNG = np.random.default_rng(7)
F, I32, I64 = TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64
ELEM = {np.dtype(np.float32): F, np.dtype(np.int32): I32, np.dtype(np.int64): I64}


def one_hot_model(indices_shape, depth=5, axis=None, indices_elem=I64, values=None,
                  values_input=False, indices=None, name="hot"):
    """OneHot(indices, depth, values): indices a graph input (or the constant `indices`), depth
    and values constants (values a graph input with values_input)."""
    values = np.array([-1.5, 2.0], np.float32) if values is None else values
    inputs, inits = {}, {"depth": np.asarray(depth)}
    if indices is None:
        inputs["i"] = (indices_elem, indices_shape)
    else:
        inits["i"] = indices
    if values_input:
        inputs["v"] = (ELEM[values.dtype], (2,))
    else:
        inits["v"] = values
    attrs = {} if axis is None else {"axis": axis}
    node = helper.make_node("OneHot", ["i", "depth", "v"], ["y"], name=name, **attrs)
    return make_model([node], inputs, {"y": ELEM[values.dtype]}, inits, opset=11)


def indices_with_negatives(shape, depth=5, dtype=np.int64):
    """Indices in [-depth - 2, depth + 1]: in range, wrapped, and beyond on both sides."""
    return RNG.integers(-depth - 2, depth + 2, shape).astype(dtype)


@pytest.mark.parametrize("shape,axis", [((6,), None), ((6,), 0), ((2, 3), 1), ((2, 3), -1),
                                        ((2, 3), -3), ((2, 3, 4), 2), ((2, 3, 4), -2)], ids=str)
def test_one_hot_axes_and_negative_indices(shape, axis):
    model = one_hot_model(shape, axis=axis)
    assert_matches_onnxruntime(model, {"i": indices_with_negatives(shape)}, rtol=0, atol=0)


def test_all_indices_of_the_range():
    """Every index from -depth - 3 to depth + 2 once: wrapped, in range, out of range."""
    depth = 4
    indices = np.arange(-depth - 3, depth + 3, dtype=np.int64)
    flatbuffer, report = convert_proto(one_hot_model(indices.shape, depth=depth))
    got = run_tflite(flatbuffer, report, {"i": indices})["y"]
    want = run_onnxruntime(one_hot_model(indices.shape, depth=depth), {"i": indices})["y"]
    np.testing.assert_array_equal(got, want)
    assert np.all(got[:3] == -1.5) and np.all(got[-3:] == -1.5)  # beyond [-depth, depth-1]: all off


def test_float_indices_are_truncated():
    indices = np.array([[0.0, 1.7, -1.2], [3.9, -4.5, 2.2]], np.float32)
    model = one_hot_model(indices.shape, depth=np.float32(5), indices_elem=F, axis=1)  # ORT's types
    assert_matches_onnxruntime(model, {"i": indices}, rtol=0, atol=0)


@pytest.mark.parametrize("values", [np.array([0, 7], np.int32), np.array([3, -9], np.int64),
                                    np.array([0.25, -4.0], np.float32)], ids=["int32", "int64", "float"])
@pytest.mark.parametrize("values_input", [False, True])
def test_values_constant_or_input(values, values_input):
    shape = (3, 4)
    # onnxruntime's OneHot has int32 values with a float depth only.
    depth = np.float32(6) if values.dtype == np.int32 else np.int64(6)
    model = one_hot_model(shape, depth=depth, values=values, values_input=values_input, axis=0)
    feeds = {"i": indices_with_negatives(shape, 6)}
    if values_input:
        feeds["v"] = values
    assert_matches_onnxruntime(model, feeds, rtol=0, atol=0)


@pytest.mark.parametrize("depth", [np.array(7, np.int64), np.array([7], np.int64),
                                   np.array(7.0, np.float32)], ids=["scalar", "vector", "float"])
def test_depth_forms(depth):
    model = one_hot_model((5,), depth=depth)
    assert_matches_onnxruntime(model, {"i": indices_with_negatives((5,), 7)}, rtol=0, atol=0)


def test_constant_indices():
    indices = np.array([[-1, 0, 9], [2, -5, -6]], np.int64)
    model = one_hot_model(indices.shape, indices=indices, axis=1)
    flatbuffer, report = convert_proto(model)
    got = run_tflite(flatbuffer, report, {})["y"]
    np.testing.assert_array_equal(got, run_onnxruntime(model, {})["y"])


def test_written_op():
    flatbuffer, _ = convert_proto(one_hot_model((4,)))
    assert ("ONE_HOT", 1) in reader.read(flatbuffer).ops


def test_int8_model_keeps_one_hot_float(tmp_path):
    """ONE_HOT has no QuantRule: under --quantize it stays float and feeds an int8 MatMul."""
    w = RNG.standard_normal((5, 4)).astype(np.float32)
    model = make_model([helper.make_node("OneHot", ["i", "depth", "v"], ["h"], axis=-1),
                        helper.make_node("MatMul", ["h", "w"], ["y"])],
                       {"i": (I64, (3,))}, {"y": F},
                       {"depth": np.array(5, np.int64), "v": np.array([0, 1], np.float32), "w": w},
                       opset=11)
    calibration = calibration_set(model)
    flatbuffer, report = convert_quantized(model, calibration, tmp_path)
    assert "ONE_HOT" in [f.op for f in report.quantization.float_ops]
    feeds = {"i": calibration["i"][0]}
    got, want = run_tflite(flatbuffer, report, feeds)["y"], run_onnxruntime(model, feeds)["y"]
    np.testing.assert_allclose(got, want, atol=0.05 * np.abs(want).max())


refused = functools.partial(assert_refused_in_one_line, node='hot')


def test_runtime_depth_is_refused():
    model = one_hot_model((4,))
    model.graph.initializer.remove(next(t for t in model.graph.initializer if t.name == "depth"))
    model.graph.input.append(helper.make_tensor_value_info("depth", I64, []))
    # The output's shape is declared, so that the importer (not shape inference) decides.
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", F, [4, 5]))
    refused(model, "depth .input 'depth.*must be a constant")


@pytest.mark.parametrize("depth,match", [
    (np.array([3, 4], np.int64), "'depth' must have at most one element"),
    (np.array(0, np.int64), "is 0; it must be a positive int32 count"),
], ids=["two-elements", "zero"])
def test_bad_depth_is_refused(depth, match):
    """(ONNX shape inference finds a depth of two elements before the importer.)"""
    refused(one_hot_model((4,), depth=depth), match)


def test_values_of_three_elements_are_refused():
    refused(one_hot_model((4,), values=np.array([0, 1, 2], np.float32)), "'values' must have exactly two")
