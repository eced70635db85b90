"""CumSum (qconvert/ops/cumsum.py) against onnxruntime: every exclusive/reverse combination,
every axis (negative ones too), int64 and int32 axes, int64 data, after a Conv (the axis remapped
by the layout pass), and the refusal of a run-time axis."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from qconvert.ops.cumsum import cumulative_sum
from tests.harness import (assert_matches_onnxruntime, assert_refused_in_one_line, conv_in_front,
                           make_model)

RNG = np.random.default_rng(11)
SHAPE = (2, 3, 4, 5)


def cumsum_model(shape, axis, exclusive=0, reverse=0, elem_type=TensorProto.FLOAT, axis_dtype=np.int64,
                 opset=14):
    node = helper.make_node("CumSum", ["x", "axis"], ["y"], exclusive=exclusive, reverse=reverse)
    return make_model([node], {"x": (elem_type, shape)}, {"y": elem_type},
                      {"axis": np.array(axis, axis_dtype)}, opset=opset)


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("axis", [0, 1, 2, 3, -1, -3])
def test_cumsum(axis, exclusive, reverse):
    model = cumsum_model(SHAPE, axis, exclusive, reverse)
    assert_matches_onnxruntime(model, {"x": RNG.standard_normal(SHAPE).astype(np.float32)},
                               rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
def test_cumsum_int64_and_int32_axis(exclusive, reverse):
    """Position ids from a padding mask (RoBERTa's export): int64 data, an int32 axis."""
    model = cumsum_model((2, 9), 1, exclusive, reverse, TensorProto.INT64, np.int32, opset=11)
    x = RNG.integers(0, 2, (2, 9)).astype(np.int64)
    assert_matches_onnxruntime(model, {"x": x}, rtol=0, atol=0)


def test_cumsum_after_conv():
    node, w = conv_in_front((1, 3, 6, 7), 4)
    model = make_model([node, helper.make_node("CumSum", ["fm", "axis"], ["y"], reverse=1)],
                       {"x": (TensorProto.FLOAT, (1, 3, 6, 7))}, {"y": TensorProto.FLOAT},
                       {"axis": np.array(1, np.int64)})
    model.graph.initializer.append(w)
    _, report = assert_matches_onnxruntime(model, {"x": RNG.standard_normal((1, 3, 6, 7)).astype(np.float32)},
                                           rtol=1e-5, atol=1e-5)
    assert report.transposes == 0


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
def test_cumulative_sum_matches_onnx_reference(exclusive, reverse):
    """The numpy twin constant folding uses, against onnx's reference evaluator."""
    from onnx.reference import ReferenceEvaluator

    x = RNG.standard_normal(SHAPE).astype(np.float32)
    for axis in range(4):
        want = ReferenceEvaluator(cumsum_model(SHAPE, axis, exclusive, reverse)).run(None, {"x": x})[0]
        np.testing.assert_array_equal(cumulative_sum(x, axis, bool(exclusive), bool(reverse)), want)


def test_runtime_axis_is_refused():
    node = helper.make_node("CumSum", ["x", "axis"], ["y"], name="positions")
    model = make_model([node], {"x": (TensorProto.FLOAT, (2, 5)), "axis": (TensorProto.INT64, ())},
                       {"y": TensorProto.FLOAT})
    assert_refused_in_one_line(model, "axis", node="positions")
