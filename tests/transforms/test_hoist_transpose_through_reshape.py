"""hoist_transpose_through_reshape: TRANSPOSE -> RESHAPE -> TRANSPOSE becomes TRANSPOSE -> TRANSPOSE
-> RESHAPE when the reshape only splits or merges axes that the second transpose keeps whole and
in order (the second half of a channel shuffle meeting the next conv's layout transpose).

Shown here, with the step alone: the second half of a shuffle is rewritten with the same values,
a reshape reading a non-transpose is left alone, and a split whose parts the transpose separates
is left alone; and an ONNX Transpose -> Reshape -> Conv converts with one TRANSPOSE (two without
the step) to a file that computes what onnxruntime computes."""

import numpy as np
from onnx import TensorProto, helper

from qconvert.transforms.engine import run_to_fixed_point
from qconvert.transforms.hoist_transpose_through_reshape import hoist_transpose_through_reshape
from tests.harness import assert_matches_onnxruntime, grid_weights, make_model, without_float_step
from tests.transforms.builders import Builder, evaluate_model, op_types

F = TensorProto.FLOAT
rng = np.random.default_rng(0)


def run(model):
    run_to_fixed_point(model, [("hoist", hoist_transpose_through_reshape)])


def transpose_reshape_transpose(first, x_shape, merged, second):
    """x -> TRANSPOSE(first) -> RESHAPE(merged) -> TRANSPOSE(second) -> y; a RELU in place of the
    first TRANSPOSE when `first` is None."""
    b = Builder().input("x", x_shape).const("p2", np.array(second, np.int32))
    b.const("shape", np.array(merged, np.int32))
    if first is None:
        b.op("RELU", ["x"], "t", x_shape)
    else:
        b.const("p1", np.array(first, np.int32))
        b.op("TRANSPOSE", ["x", "p1"], "t", tuple(x_shape[p] for p in first))
    b.op("RESHAPE", ["t", "shape"], "m", tuple(merged))
    b.op("TRANSPOSE", ["m", "p2"], "y", tuple(merged[p] for p in second)).output("y")
    return b.model


def test_second_half_of_a_channel_shuffle_is_hoisted():
    # [1, g=2, C/g=3, 4, 5] -> swap groups -> [1, 3, 2, 4, 5] -> merge to NCHW -> NHWC.
    model = transpose_reshape_transpose((0, 2, 1, 3, 4), (1, 2, 3, 4, 5), (1, 6, 4, 5), (0, 2, 3, 1))
    x = rng.standard_normal((1, 2, 3, 4, 5)).astype(np.float32)
    before = evaluate_model(model, {"x": x})["y"]
    run(model)
    assert op_types(model) == ["TRANSPOSE", "TRANSPOSE", "RESHAPE"]
    assert model.operators[2].outputs == ["y"]
    np.testing.assert_array_equal(evaluate_model(model, {"x": x})["y"], before)


def test_a_reshape_of_a_non_transpose_is_left_alone():
    model = transpose_reshape_transpose(None, (1, 3, 2, 4, 5), (1, 6, 4, 5), (0, 2, 3, 1))
    run(model)
    assert op_types(model) == ["RELU", "RESHAPE", "TRANSPOSE"]


def test_a_split_whose_parts_the_transpose_separates_is_left_alone():
    # [1, 6, 4] split to [1, 2, 3, 4]; the transpose puts the 4 between the 2 and the 3.
    model = transpose_reshape_transpose((0, 2, 1), (1, 4, 6), (1, 2, 3, 4), (0, 1, 3, 2))
    run(model)
    assert op_types(model) == ["TRANSPOSE", "RESHAPE", "TRANSPOSE"]


def test_onnx_group_swap_before_a_conv_keeps_one_transpose(monkeypatch):
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1, 3, 4]),
             helper.make_node("Reshape", ["t", "shape"], ["c"]),
             helper.make_node("Conv", ["c", "w"], ["y"])]
    model = make_model(nodes, {"x": (F, (1, 2, 3, 5, 6))}, {"y": F},
                       {"w": grid_weights((3, 6, 1, 1)), "shape": np.array([1, 6, 5, 6], np.int64)})
    _, report = assert_matches_onnxruntime(model)
    assert report.op_counts == {"TRANSPOSE": 1, "RESHAPE": 1, "CONV_2D": 1}
    without_float_step(monkeypatch, "hoist_transpose_through_reshape")
    _, report = assert_matches_onnxruntime(model)
    assert report.transposes == 2
