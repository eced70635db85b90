"""remove_identity: IDENTITY ops (ONNX Identity, Dropout at inference) go, their readers reading
the input instead; one that copies a graph input straight to a graph output becomes a RESHAPE.

Shown here: a chain of identities from input to output leaves one RESHAPE, an identity writing a
graph output that other ops also read hands its name to its input, and an ONNX model with
Dropout/Identity in the middle and at an output converts to a file with no trace of them that
computes what onnxruntime computes."""

import numpy as np
from onnx import TensorProto, helper

from qconvert.transforms.engine import run_to_fixed_point
from qconvert.transforms.remove_identity import remove_identity
from tests.harness import assert_matches_onnxruntime, make_model
from tests.transforms.builders import Builder, evaluate_model, op_types

F = TensorProto.FLOAT
X = np.linspace(-2, 2, 6, dtype=np.float32).reshape(2, 3)


def run(model):
    before = evaluate_model(model, {"x": X})
    run_to_fixed_point(model, [("remove_identity", remove_identity)])
    after = evaluate_model(model, {"x": X})
    assert after.keys() == before.keys()
    for name in before:
        np.testing.assert_array_equal(after[name], before[name])


def test_a_chain_of_identities_from_input_to_output_is_one_reshape():
    b = Builder().input("x", (2, 3))
    b.op("IDENTITY", ["x"], "i", (2, 3)).op("IDENTITY", ["i"], "y", (2, 3)).output("y")
    run(b.model)
    assert op_types(b.model) == ["RESHAPE"]
    assert b.model.operators[0].inputs[0] == "x" and b.model.operators[0].outputs == ["y"]
    assert b.model.constant(b.model.operators[0].inputs[1]).tolist() == [2, 3]


def test_an_identity_writing_a_read_graph_output_gives_its_name_to_its_input():
    b = Builder().input("x", (2, 3))
    b.op("RELU", ["x"], "r", (2, 3)).op("IDENTITY", ["r"], "y", (2, 3))
    b.op("LOGISTIC", ["y"], "z", (2, 3)).output("y", "z")
    run(b.model)
    assert op_types(b.model) == ["RELU", "LOGISTIC"]
    assert b.model.operators[0].outputs == ["y"] and b.model.operators[1].inputs == ["y"]
    assert "r" not in b.model.arrays


def test_onnx_identity_and_dropout_leave_no_op_in_the_file():
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Dropout", ["r"], ["d"]),
             helper.make_node("Identity", ["d"], ["y"]),  # a graph output, also read below
             helper.make_node("Sigmoid", ["y"], ["s"]),
             helper.make_node("Identity", ["s"], ["z"])]
    model = make_model(nodes, {"x": (F, (2, 3))}, {"y": F, "z": F})
    _, report = assert_matches_onnxruntime(model, {"x": X})
    assert report.op_counts == {"RELU": 1, "LOGISTIC": 1}
    assert [o.name for o in report.outputs] == ["y", "z"]
