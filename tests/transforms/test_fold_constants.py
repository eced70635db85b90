"""fold_constants: an op whose inputs are all constant is computed at conversion time and replaced
by its value (its fused activation applied), except one writing a graph output or touching a
stateful (variable) tensor.

Shown here: a RESHAPE -> SUB with a fused RELU over constants folds, over rounds, into the one
constant the remaining ADD reads, equal to the value computed here with numpy; an op reading a
variable tensor stays; and an ONNX Sqrt of a CastLike'd constant (which the loader cannot fold:
CastLike reads the activation x) converts to a lone ADD (an ADD and a SQRT without the step)
whose file computes what onnxruntime computes."""

import numpy as np
from onnx import TensorProto, helper

from qconvert.transforms.engine import run_to_fixed_point
from qconvert.transforms.fold_constants import fold_constants
from tests.harness import assert_matches_onnxruntime, make_model, without_float_step
from tests.transforms.builders import Builder, evaluate_model, op_types

F = TensorProto.FLOAT
C = np.array([-3, -1, 0, 1, 2, 5], np.float32)
X = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)


def run(model):
    run_to_fixed_point(model, [("fold_constants", fold_constants)])


def test_a_constant_chain_folds_into_one_constant_with_the_activation_applied():
    b = Builder().input("x", (2, 3)).const("c", C).const("shape", np.array([2, 3], np.int32))
    b.const("k", np.float32(1.5))
    b.op("RESHAPE", ["c", "shape"], "r", (2, 3))
    b.op("SUB", ["r", "k"], "s", (2, 3), activation="RELU")
    b.op("ADD", ["x", "s"], "y", (2, 3)).output("y")
    before = evaluate_model(b.model, {"x": X})["y"]
    run(b.model)
    assert op_types(b.model) == ["ADD"]
    folded = b.model.constant(b.model.operators[0].inputs[1])
    np.testing.assert_array_equal(folded, np.maximum(C.reshape(2, 3) - 1.5, 0))
    np.testing.assert_array_equal(evaluate_model(b.model, {"x": X})["y"], before)


def test_an_op_reading_a_variable_tensor_stays():
    b = Builder().input("x", (2, 3)).const("state", np.zeros((2, 3), np.float32)).const("k", np.float32(1))
    b.model.arrays["state"].is_variable = True
    b.op("ADD", ["state", "k"], "s", (2, 3)).op("ADD", ["x", "s"], "y", (2, 3)).output("y")
    run(b.model)
    assert op_types(b.model) == ["ADD", "ADD"]


def test_onnx_constant_computed_after_loading_is_folded(monkeypatch):
    nodes = [helper.make_node("CastLike", ["c", "x"], ["cf"]),
             helper.make_node("Sqrt", ["cf"], ["root"]),
             helper.make_node("Add", ["x", "root"], ["y"])]
    model = make_model(nodes, {"x": (F, (2, 3))}, {"y": F}, {"c": np.array([1, 4, 9], np.float64)}, opset=15)
    _, report = assert_matches_onnxruntime(model, {"x": X})
    assert report.op_counts == {"ADD": 1}
    without_float_step(monkeypatch, "fold_constants")
    _, report = assert_matches_onnxruntime(model, {"x": X})
    assert report.op_counts == {"ADD": 1, "SQRT": 1}
