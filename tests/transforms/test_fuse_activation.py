import numpy as np

from qconvert.transforms.engine import run_to_fixed_point
from qconvert.transforms.fuse_activation import fuse_activation
from qconvert.transforms.identify_relu6 import identify_relu6
from tests.transforms.builders import Builder, evaluate_model, op_types


def add_then(*ops):
    b = Builder().input("x", (2, 3)).input("z", (2, 3))
    b.op("ADD", ["x", "z"], "a", (2, 3))
    current = "a"
    for k, (op_type, consts) in enumerate(ops):
        inputs = [current]
        for j, value in enumerate(consts):
            b.const(f"c{k}{j}", np.float32(value))
            inputs.append(f"c{k}{j}")
        current = f"o{k}"
        b.op(op_type, inputs, current, (2, 3))
    return b.output(current).model


def check(model, expected_ops, activation):
    feeds = {"x": np.linspace(-8, 8, 6, dtype=np.float32).reshape(2, 3),
             "z": np.full((2, 3), 0.5, np.float32)}
    before = evaluate_model(model, feeds)[model.outputs[0]]
    run_to_fixed_point(model, [("relu6", identify_relu6), ("fuse", fuse_activation)])
    assert op_types(model) == expected_ops
    assert model.operators[0].fused_activation == activation
    np.testing.assert_array_equal(evaluate_model(model, feeds)[model.outputs[0]], before)


def test_relu_fuses_into_add():
    check(add_then(("RELU", [])), ["ADD"], "RELU")


def test_min_of_max_is_relu6_and_fuses():
    check(add_then(("MAXIMUM", [0.0]), ("MINIMUM", [6.0])), ["ADD"], "RELU6")


def test_relu_then_min_1_is_not_relu6():
    check(add_then(("RELU", []), ("MINIMUM", [1.0])), ["ADD", "MINIMUM"], "RELU")


def test_clip_minus_one_to_one_fuses():
    check(add_then(("MAXIMUM", [-1.0]), ("MINIMUM", [1.0])), ["ADD"], "RELU_N1_TO_1")


def test_activation_does_not_fuse_when_the_pre_activation_is_an_output():
    model = add_then(("RELU", []))
    model.outputs.append("a")
    run_to_fixed_point(model, [("fuse", fuse_activation)])
    assert op_types(model) == ["ADD", "RELU"]


def test_relu_after_a_concatenation_of_adds_goes_into_each_add():
    b = Builder().input("x", (2, 3)).input("z", (2, 3))
    b.op("ADD", ["x", "z"], "a", (2, 3)).op("SUB", ["x", "z"], "s", (2, 3))
    b.op("CONCATENATION", ["a", "s"], "c", (2, 6), axis=1)
    b.op("RELU", ["c"], "y", (2, 6)).output("y")
    feeds = {"x": np.linspace(-3, 3, 6, dtype=np.float32).reshape(2, 3),
             "z": np.full((2, 3), 0.5, np.float32)}
    before = evaluate_model(b.model, feeds)["y"]
    run_to_fixed_point(b.model, [("fuse", fuse_activation)])
    assert op_types(b.model) == ["ADD", "SUB", "CONCATENATION"]
    assert [op.fused_activation for op in b.model.operators] == ["RELU", "RELU", "NONE"]
    np.testing.assert_array_equal(evaluate_model(b.model, feeds)["y"], before)
