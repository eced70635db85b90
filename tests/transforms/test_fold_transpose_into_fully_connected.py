"""fold_transpose_into_fully_connected: TRANSPOSE -> RESHAPE (flatten) -> FULLY_CONNECTED flattens
the untransposed tensor and permutes the weights' columns instead; the flattened tensor, now in
another order, takes a name of its own.

Shown here: with a batch of 2 the transpose goes, the result is unchanged and the flattened
tensor is renamed; a flattened tensor that is also a graph output, or a transpose that moves the
batch axis, keeps the transpose; and an ONNX Conv -> Relu -> Flatten -> Gemm head converts
without any TRANSPOSE (one without the step) to a file that computes what onnxruntime computes."""

import numpy as np
from onnx import TensorProto, helper

from qconvert.transforms.engine import run_to_fixed_point
from qconvert.transforms.fold_transpose_into_fully_connected import fold_transpose_into_fully_connected
from tests.harness import assert_matches_onnxruntime, grid_weights, make_model, without_float_step
from tests.transforms.builders import Builder, evaluate_model, op_types

F = TensorProto.FLOAT
rng = np.random.default_rng(0)


def flatten_head(perm, t_shape, x_shape=(2, 2, 3, 4)):
    b = Builder().input("x", x_shape)
    b.const("perm", np.array(perm, np.int32)).const("shape", np.array([t_shape[0], -1], np.int32))
    b.const("w", rng.standard_normal((5, 24)).astype(np.float32)).const("bias", np.arange(5, dtype=np.float32))
    b.op("TRANSPOSE", ["x", "perm"], "t", t_shape)
    b.op("RESHAPE", ["t", "shape"], "f", (t_shape[0], 24))
    b.op("FULLY_CONNECTED", ["f", "w", "bias"], "y", (t_shape[0], 5)).output("y")
    return b.model


def run(model):
    run_to_fixed_point(model, [("fold", fold_transpose_into_fully_connected)])


def test_nchw_flatten_of_a_batch_reads_the_nhwc_tensor():
    model = flatten_head((0, 3, 1, 2), (2, 4, 2, 3))
    x = rng.standard_normal((2, 2, 3, 4)).astype(np.float32)
    before = evaluate_model(model, {"x": x})["y"]
    run(model)
    assert op_types(model) == ["RESHAPE", "FULLY_CONNECTED"]
    reshape = model.operators[0]
    assert reshape.inputs[0] == "x" and reshape.outputs[0].startswith("f_reordered")
    np.testing.assert_allclose(evaluate_model(model, {"x": x})["y"], before, rtol=1e-5, atol=1e-5)


def test_a_flattened_tensor_that_is_a_graph_output_keeps_the_transpose():
    model = flatten_head((0, 3, 1, 2), (2, 4, 2, 3))
    model.outputs.append("f")
    run(model)
    assert op_types(model) == ["TRANSPOSE", "RESHAPE", "FULLY_CONNECTED"]


def test_a_transpose_moving_the_batch_axis_stays():
    model = flatten_head((1, 0, 2, 3), (2, 2, 3, 4))
    run(model)
    assert op_types(model) == ["TRANSPOSE", "RESHAPE", "FULLY_CONNECTED"]


def classifier_head():
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Flatten", ["r"], ["f"]),
             helper.make_node("Gemm", ["f", "gw", "gb"], ["y"], transB=1)]
    return make_model(nodes, {"x": (F, (1, 3, 4, 4))}, {"y": F},
                      {"w": grid_weights((4, 3, 3, 3)), "gw": rng.standard_normal((5, 64)).astype(np.float32),
                       "gb": rng.standard_normal(5).astype(np.float32)})


def test_onnx_classifier_head_has_no_transpose(monkeypatch):
    model = classifier_head()
    _, report = assert_matches_onnxruntime(model)
    assert report.op_counts == {"CONV_2D": 1, "RESHAPE": 1, "FULLY_CONNECTED": 1}
    without_float_step(monkeypatch, "fold_transpose_into_fully_connected")
    _, report = assert_matches_onnxruntime(model)
    assert report.transposes == 1
