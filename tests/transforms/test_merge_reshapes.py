"""merge_reshapes: a RESHAPE of a RESHAPE reads the first one's input, and a RESHAPE to the shape
it already has disappears.

Shown here: a chain of three reshapes becomes one, a no-op reshape between two ops goes, a first
reshape that is also a graph output stays (the second one still skips it), and ONNX
Flatten -> Unsqueeze -> Squeeze converts to one RESHAPE (three without the step) whose file
computes what onnxruntime computes."""

import numpy as np
from onnx import TensorProto, helper

from qconvert.transforms.engine import run_to_fixed_point
from qconvert.transforms.merge_reshapes import merge_reshapes
from tests.harness import assert_matches_onnxruntime, make_model, without_float_step
from tests.transforms.builders import Builder, evaluate_model, op_types

F = TensorProto.FLOAT
X = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)


def run(model):
    before = evaluate_model(model, {"x": X})
    run_to_fixed_point(model, [("merge_reshapes", merge_reshapes)])
    after = evaluate_model(model, {"x": X})
    for name in before:
        np.testing.assert_array_equal(after[name], before[name])


def reshape(b, source, target, shape):
    b.const(target + "_shape", np.array(shape, np.int32))
    return b.op("RESHAPE", [source, target + "_shape"], target, shape)


def test_a_chain_of_reshapes_becomes_one_reading_the_first_input():
    b = Builder().input("x", (2, 3, 4))
    reshape(reshape(reshape(b, "x", "a", (6, 4)), "a", "c", (24,)), "c", "y", (4, 6)).output("y")
    run(b.model)
    assert op_types(b.model) == ["RESHAPE"]
    assert b.model.operators[0].inputs[0] == "x" and b.model.arrays["y"].shape == (4, 6)


def test_a_reshape_to_its_own_shape_disappears():
    b = Builder().input("x", (2, 3, 4)).op("RELU", ["x"], "r", (2, 3, 4))
    reshape(b, "r", "s", (2, 3, 4)).op("LOGISTIC", ["s"], "y", (2, 3, 4)).output("y")
    run(b.model)
    assert op_types(b.model) == ["RELU", "LOGISTIC"]


def test_a_first_reshape_that_is_a_graph_output_stays():
    b = Builder().input("x", (2, 3, 4))
    reshape(reshape(b, "x", "a", (6, 4)), "a", "y", (24,)).output("a", "y")
    run(b.model)
    assert op_types(b.model) == ["RESHAPE", "RESHAPE"]
    assert [op.inputs[0] for op in b.model.operators] == ["x", "x"]


def flatten_unsqueeze_squeeze():
    nodes = [helper.make_node("Flatten", ["x"], ["f"], axis=1),
             helper.make_node("Unsqueeze", ["f", "axes"], ["u"]),
             helper.make_node("Squeeze", ["u", "axes"], ["s"]),
             helper.make_node("Relu", ["s"], ["y"])]
    return make_model(nodes, {"x": (F, (2, 3, 4))}, {"y": F}, {"axes": np.array([1], np.int64)})


def test_onnx_reshape_chain_is_one_reshape_in_the_file(monkeypatch):
    model = flatten_unsqueeze_squeeze()
    _, report = assert_matches_onnxruntime(model, {"x": X})
    assert report.op_counts == {"RESHAPE": 1, "RELU": 1}
    without_float_step(monkeypatch, "merge_reshapes")
    _, report = assert_matches_onnxruntime(model, {"x": X})
    assert report.op_counts == {"RESHAPE": 3, "RELU": 1}
