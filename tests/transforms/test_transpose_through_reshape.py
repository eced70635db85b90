"""sink_transpose_through_reshape and hoist_transpose_through_reshape on a channel shuffle."""

import numpy as np

from qconvert.transforms.engine import run_to_fixed_point
from qconvert.transforms.hoist_transpose_through_reshape import hoist_transpose_through_reshape
from qconvert.transforms.sink_transpose_through_reshape import sink_transpose_through_reshape
from qconvert.transforms.sink_transposes import sink_transposes
from tests.transforms.builders import Builder, evaluate_model, op_types

STEPS = [("hoist", hoist_transpose_through_reshape), ("sink_reshape", sink_transpose_through_reshape),
         ("sink", sink_transposes)]


def shuffle_between_layout_transposes():
    """NHWC x -> NCHW -> channel shuffle (groups 3) in NCHW -> NHWC, as imported."""
    n, h, w, c, g = 1, 4, 5, 6, 3
    b = Builder().input("x", (n, h, w, c))
    b.const("to_nchw", np.array([0, 3, 1, 2], np.int32)).const("to_nhwc", np.array([0, 2, 3, 1], np.int32))
    b.const("split", np.array([n, g, c // g, h, w], np.int32)).const("swap", np.array([0, 2, 1, 3, 4], np.int32))
    b.const("merge", np.array([n, c, h, w], np.int32))
    b.op("TRANSPOSE", ["x", "to_nchw"], "a", (n, c, h, w))
    b.op("RESHAPE", ["a", "split"], "s", (n, g, c // g, h, w))
    b.op("TRANSPOSE", ["s", "swap"], "t", (n, c // g, g, h, w))
    b.op("RESHAPE", ["t", "merge"], "m", (n, c, h, w))
    b.op("TRANSPOSE", ["m", "to_nhwc"], "y", (n, h, w, c)).output("y")
    return b.model


def test_channel_shuffle_keeps_one_transpose_in_nhwc():
    model = shuffle_between_layout_transposes()
    x = np.random.default_rng(0).standard_normal((1, 4, 5, 6)).astype(np.float32)
    before = evaluate_model(model, {"x": x})["y"]
    run_to_fixed_point(model, STEPS)
    assert op_types(model) == ["RESHAPE", "TRANSPOSE", "RESHAPE"]
    np.testing.assert_array_equal(evaluate_model(model, {"x": x})["y"], before)


def test_a_reshape_read_by_a_non_transpose_keeps_its_transpose_in_front():
    b = Builder().input("x", (1, 2, 3, 4))
    b.const("p", np.array([0, 3, 1, 2], np.int32)).const("s", np.array([1, 4, 6], np.int32))
    b.op("TRANSPOSE", ["x", "p"], "a", (1, 4, 2, 3))
    b.op("RESHAPE", ["a", "s"], "r", (1, 4, 6))
    b.op("RELU", ["r"], "y", (1, 4, 6)).output("y")
    run_to_fixed_point(b.model, STEPS)
    assert op_types(b.model) == ["TRANSPOSE", "RESHAPE", "RELU"]
