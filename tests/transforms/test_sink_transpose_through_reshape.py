"""sink_transpose_through_reshape: TRANSPOSE -> RESHAPE becomes RESHAPE -> TRANSPOSE when the
reshape only splits or merges axes that stay whole under the transpose, and only when the
reshape's readers are transposes (the moved one then merges with them).

Shown here, with the step alone: the first half of a channel shuffle (NHWC -> NCHW, split C into
groups, swap) is rewritten with the same values; merging two axes that the transpose keeps apart,
or a reshape that is a graph output, is left alone; and an ONNX Conv -> Reshape (split C) ->
Transpose converts with one TRANSPOSE (two without the step) to a file that computes what
onnxruntime computes."""

import numpy as np
from onnx import TensorProto, helper

from qconvert.transforms.engine import run_to_fixed_point
from qconvert.transforms.sink_transpose_through_reshape import sink_transpose_through_reshape
from tests.harness import assert_matches_onnxruntime, grid_weights, make_model, without_float_step
from tests.transforms.builders import Builder, evaluate_model, op_types

F = TensorProto.FLOAT
NCHW = (0, 3, 1, 2)


def run(model):
    run_to_fixed_point(model, [("sink", sink_transpose_through_reshape)])


def nhwc_to_nchw_then_reshape(shape, then=(0, 2, 1, 3, 4)):
    """x [1, 4, 5, 6] (NHWC) -> TRANSPOSE to NCHW -> RESHAPE(shape) -> TRANSPOSE(then) -> y."""
    b = Builder().input("x", (1, 4, 5, 6)).const("p", np.array(NCHW, np.int32))
    b.const("shape", np.array(shape, np.int32)).const("then", np.array(then, np.int32))
    b.op("TRANSPOSE", ["x", "p"], "t", (1, 6, 4, 5)).op("RESHAPE", ["t", "shape"], "r", tuple(shape))
    b.op("TRANSPOSE", ["r", "then"], "y", tuple(shape[p] for p in then)).output("y")
    return b.model


def test_channel_split_moves_ahead_of_the_layout_transpose():
    model = nhwc_to_nchw_then_reshape((1, 2, 3, 4, 5))
    x = np.random.default_rng(0).standard_normal((1, 4, 5, 6)).astype(np.float32)
    before = evaluate_model(model, {"x": x})["y"]
    run(model)
    assert op_types(model) == ["RESHAPE", "TRANSPOSE", "TRANSPOSE"]
    split = model.operators[0]
    assert split.inputs[0] == "x" and model.arrays[split.outputs[0]].shape == (1, 4, 5, 2, 3)
    np.testing.assert_array_equal(evaluate_model(model, {"x": x})["y"], before)


def test_merging_axes_the_transpose_keeps_apart_is_left_alone():
    model = nhwc_to_nchw_then_reshape((1, 24, 5), then=(0, 2, 1))  # merges C and H of NCHW
    run(model)
    assert op_types(model) == ["TRANSPOSE", "RESHAPE", "TRANSPOSE"]


def test_a_reshape_that_is_a_graph_output_is_left_alone():
    model = nhwc_to_nchw_then_reshape((1, 2, 3, 4, 5))
    model.outputs.append("r")
    run(model)
    assert op_types(model) == ["TRANSPOSE", "RESHAPE", "TRANSPOSE"]


def test_onnx_channel_split_after_a_conv_keeps_one_transpose(monkeypatch):
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Reshape", ["c", "shape"], ["g"]),
             helper.make_node("Transpose", ["g"], ["y"], perm=[0, 2, 1, 3, 4])]
    model = make_model(nodes, {"x": (F, (1, 3, 5, 6))}, {"y": F},
                       {"w": grid_weights((4, 3, 3, 3)), "shape": np.array([1, 2, 2, 5, 6], np.int64)})
    _, report = assert_matches_onnxruntime(model)
    assert report.op_counts == {"CONV_2D": 1, "RESHAPE": 1, "TRANSPOSE": 1}
    without_float_step(monkeypatch, "sink_transpose_through_reshape")
    _, report = assert_matches_onnxruntime(model)
    assert report.transposes == 2
