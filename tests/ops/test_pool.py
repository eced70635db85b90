import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.harness import assert_matches_onnxruntime, make_model


@pytest.mark.parametrize("op_type, attrs, expected", [
    # Inception's last pool: a 7x7 window over a 6x6 map, pads only rounding the size up.
    ("AveragePool", {"kernel_shape": [7, 7], "pads": [0, 0, 1, 1]}, "MEAN"),
    ("AveragePool", {"kernel_shape": [6, 6]}, "MEAN"),
    ("MaxPool", {"kernel_shape": [7, 7], "pads": [1, 1, 0, 0]}, "REDUCE_MAX"),
    # Counting the zero padding in the average is not a mean of the map: stays a pool.
    ("AveragePool", {"kernel_shape": [7, 7], "pads": [0, 0, 1, 1], "count_include_pad": 1}, "AVERAGE_POOL_2D"),
])
def test_a_pool_whose_one_window_covers_the_map_is_a_global_reduction(op_type, attrs, expected):
    model = make_model([helper.make_node(op_type, ["x"], ["y"], **attrs)],
                       {"x": (TensorProto.FLOAT, (1, 5, 6, 6))}, {"y": TensorProto.FLOAT})
    x = {"x": np.random.default_rng(0).standard_normal((1, 5, 6, 6)).astype(np.float32)}
    _, report = assert_matches_onnxruntime(model, x)
    assert expected in report.op_counts, report.op_counts


@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [3, 3], "p": 2},
    {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 1, 1], "p": 3},
    {"kernel_shape": [2, 2], "auto_pad": "SAME_UPPER", "p": 1},
    {"kernel_shape": [3], "strides": [2], "p": 2},
])
def test_lp_pool(attrs):
    """The window sums of |x|^p (zero pads add nothing) to the power 1/p, after a conv (NHWC)."""
    spatial = [9] if len(attrs["kernel_shape"]) == 1 else [7, 8]
    model = make_model([helper.make_node("LpPool", ["x"], ["y"], **attrs)],
                       {"x": (TensorProto.FLOAT, [1, 3, *spatial])}, {"y": TensorProto.FLOAT}, opset=18)
    assert_matches_onnxruntime(model, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("p", [1, 2, 3])
def test_global_lp_pool(p):
    model = make_model([helper.make_node("GlobalLpPool", ["x"], ["y"], p=p)],
                       {"x": (TensorProto.FLOAT, [2, 3, 5, 4])}, {"y": TensorProto.FLOAT})
    assert_matches_onnxruntime(model, rtol=1e-4, atol=1e-5)
