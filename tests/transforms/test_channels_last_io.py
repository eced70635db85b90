"""channels_last_io: a graph input read only by NCHW->NHWC TRANSPOSEs becomes channels-last
itself, and a graph output written by an NHWC->NCHW TRANSPOSE takes the NHWC value; the axis
permutation from the ONNX tensor is recorded in model.io_permutation.

Shown here: the output side (the transpose goes, the output holds the channels-last values), a
rank-3 input ((0, 2, 1)), an input also read by another op staying as it is, and an ONNX Conv ->
Relu model whose file has channels-last input and output and no TRANSPOSE (two with --io-layout
onnx, where the step does not run), both files computing what onnxruntime computes.

And the two cases where a transpose cannot go (IR and ONNX each), which keep their layout: an
NCHW output that other ops also read (a Conv's output that a Relu reads too: made NHWC, its
readers read NHWC values), and an input whose transpose to NHWC is itself a graph output (made
NHWC, that transpose would stay and transpose it twice)."""

import numpy as np
from onnx import TensorProto, helper

from qconvert.transforms.channels_last_io import channels_last_io
from qconvert.transforms.engine import run_to_fixed_point
from tests.harness import assert_matches_onnxruntime, grid_weights, make_model
from tests.transforms.builders import Builder, evaluate_model, op_types

F = TensorProto.FLOAT
rng = np.random.default_rng(0)


def run(model):
    run_to_fixed_point(model, [("channels_last_io", channels_last_io)])


def test_an_nchw_output_written_by_a_transpose_becomes_channels_last():
    b = Builder().input("x", (1, 4, 5, 3)).const("p", np.array([0, 3, 1, 2], np.int32))
    b.op("RELU", ["x"], "r", (1, 4, 5, 3)).op("TRANSPOSE", ["r", "p"], "y", (1, 3, 4, 5)).output("y")
    x = rng.standard_normal((1, 4, 5, 3)).astype(np.float32)
    before = evaluate_model(b.model, {"x": x})["y"]
    run(b.model)
    assert op_types(b.model) == ["RELU"] and b.model.operators[0].outputs == ["y"]
    assert b.model.arrays["y"].shape == (1, 4, 5, 3)
    assert b.model.io_permutation == {"y": (0, 2, 3, 1)}
    np.testing.assert_array_equal(evaluate_model(b.model, {"x": x})["y"], np.transpose(before, (0, 2, 3, 1)))


def test_a_rank_3_input_moves_its_channels_last():
    b = Builder().input("x", (1, 3, 5)).const("p", np.array([0, 2, 1], np.int32))
    b.op("TRANSPOSE", ["x", "p"], "t", (1, 5, 3)).op("RELU", ["t"], "y", (1, 5, 3)).output("y")
    run(b.model)
    assert op_types(b.model) == ["RELU"] and b.model.operators[0].inputs == ["x"]
    assert b.model.arrays["x"].shape == (1, 5, 3) and b.model.io_permutation == {"x": (0, 2, 1)}


def test_an_input_read_by_another_op_too_stays_nchw():
    b = Builder().input("x", (1, 3, 4, 5)).const("p", np.array([0, 2, 3, 1], np.int32))
    b.op("TRANSPOSE", ["x", "p"], "t", (1, 4, 5, 3)).op("RELU", ["x"], "r", (1, 3, 4, 5)).output("t", "r")
    run(b.model)
    assert op_types(b.model) == ["TRANSPOSE", "RELU"]
    assert b.model.arrays["x"].shape == (1, 3, 4, 5) and "x" not in b.model.io_permutation



def test_an_nchw_output_also_read_by_another_op_keeps_that_ops_values():
    b = Builder().input("x", (1, 4, 5, 3)).const("p", np.array([0, 3, 1, 2], np.int32))
    b.const("flat", np.array([1, 60], np.int32))
    b.op("RELU", ["x"], "r", (1, 4, 5, 3)).op("TRANSPOSE", ["r", "p"], "y", (1, 3, 4, 5))
    b.op("RESHAPE", ["y", "flat"], "z", (1, 60)).output("y", "z")
    x = rng.standard_normal((1, 4, 5, 3)).astype(np.float32)
    before = evaluate_model(b.model, {"x": x})["z"]
    run(b.model)
    np.testing.assert_array_equal(evaluate_model(b.model, {"x": x})["z"], before)


def test_onnx_conv_output_also_read_by_a_relu():
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"])]
    model = make_model(nodes, {"x": (F, (1, 3, 5, 6))}, {"c": F, "y": F}, {"w": grid_weights((4, 3, 3, 3))})
    assert_matches_onnxruntime(model)



def test_an_input_transposed_straight_to_an_output_keeps_its_meaning():
    b = Builder().input("x", (1, 3, 4, 5)).const("p", np.array([0, 2, 3, 1], np.int32))
    b.op("TRANSPOSE", ["x", "p"], "y", (1, 4, 5, 3)).output("y")
    x = rng.standard_normal((1, 3, 4, 5)).astype(np.float32)
    run(b.model)
    fed = np.transpose(x, b.model.io_permutation.get("x", (0, 1, 2, 3)))  # the file's layout of x
    y = evaluate_model(b.model, {"x": fed})["y"]
    np.testing.assert_array_equal(y, np.transpose(x, (0, 2, 3, 1)))


def test_onnx_input_transposed_to_an_output():
    model = make_model([helper.make_node("Transpose", ["x"], ["y"], perm=[0, 2, 3, 1])],
                       {"x": (F, (1, 3, 4, 5))}, {"y": F})
    assert_matches_onnxruntime(model)


def test_onnx_image_model_has_channels_last_io_and_no_transpose():
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"])]
    model = make_model(nodes, {"x": (F, (1, 3, 5, 6))}, {"y": F}, {"w": grid_weights((4, 3, 3, 3))})
    _, report = assert_matches_onnxruntime(model)
    assert report.transposes == 0
    assert [(i.name, tuple(i.layout_permutation)) for i in report.inputs + report.outputs] == [
        ("x", (0, 2, 3, 1)), ("y", (0, 2, 3, 1))]
    _, report = assert_matches_onnxruntime(model, io_layout="onnx")
    assert report.transposes == 2
    assert [i.layout_permutation for i in report.inputs + report.outputs] == [None, None]
