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
