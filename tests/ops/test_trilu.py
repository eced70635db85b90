"""Trilu (qconvert/ops/trilu.py) against onnxruntime: upper and lower, k from below the matrix to
beyond it, square and wide/tall matrices with batch dimensions, int64 and bool data, infinities
and NaN kept in the triangle and zeroed outside it, and a k fed at run time (its mask compared
when the model runs)."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from tests.harness import assert_matches_onnxruntime, convert_proto, make_model, run_tflite

RNG = np.random.default_rng(5)


def trilu_model(shape, upper, k=None, elem_type=TensorProto.FLOAT):
    inputs = ["x", "k"] if k is not None else ["x"]
    node = helper.make_node("Trilu", inputs, ["y"], upper=upper)
    inits = {"k": np.array(k, np.int64)} if k is not None else {}
    return make_model([node], {"x": (elem_type, shape)}, {"y": elem_type}, inits, opset=14)


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [None, -7, -2, -1, 0, 1, 3, 9])
@pytest.mark.parametrize("shape", [(5, 5), (2, 3, 4, 6), (3, 6, 4)], ids=str)
def test_trilu(shape, upper, k):
    x = RNG.standard_normal(shape).astype(np.float32)
    x.reshape(-1)[::7] = np.inf
    x.reshape(-1)[3::11] = np.nan
    assert_matches_onnxruntime(trilu_model(shape, upper, k), {"x": x}, rtol=0, atol=0)


@pytest.mark.parametrize("elem_type", [TensorProto.INT64, TensorProto.BOOL])
@pytest.mark.parametrize("upper", [0, 1])
def test_trilu_int_and_bool(elem_type, upper):
    shape = (2, 4, 5)
    x = RNG.integers(-9, 9, shape)
    x = x > 0 if elem_type == TensorProto.BOOL else x.astype(np.int64)
    assert_matches_onnxruntime(trilu_model(shape, upper, 1, elem_type), {"x": x}, rtol=0, atol=0)


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("shape", [(4, 4), (2, 3, 5)], ids=str)
def test_run_time_k(shape, upper):
    """k a graph input: one .tflite, run at every k from below the matrix to beyond it."""
    node = helper.make_node("Trilu", ["x", "k"], ["y"], name="mask", upper=upper)
    model = make_model([node], {"x": (TensorProto.FLOAT, shape), "k": (TensorProto.INT64, ())},
                       {"y": TensorProto.FLOAT}, opset=14)
    flatbuffer, report = convert_proto(model)
    assert {"GREATER_EQUAL" if upper else "LESS_EQUAL", "SELECT_V2"} <= set(report.op_counts)
    session = ort.InferenceSession(model.SerializeToString())
    x = RNG.standard_normal(shape).astype(np.float32)
    x.reshape(-1)[::5] = np.inf
    for k in range(-6, 7):
        feeds = {"x": x, "k": np.array(k, np.int64)}
        np.testing.assert_array_equal(run_tflite(flatbuffer, report, feeds)["y"],
                                      session.run(None, feeds)[0], err_msg=f"k={k}")


def test_run_time_k_through_the_harness():
    node = helper.make_node("Trilu", ["x", "k"], ["y"], upper=0)
    model = make_model([node], {"x": (TensorProto.FLOAT, (3, 5)), "k": (TensorProto.INT64, ())},
                       {"y": TensorProto.FLOAT}, opset=14)
    assert_matches_onnxruntime(model, {"x": RNG.standard_normal((3, 5)).astype(np.float32),
                                       "k": np.array(1, np.int64)}, rtol=0, atol=0)
