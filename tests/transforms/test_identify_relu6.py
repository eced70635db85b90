"""identify_relu6: MAXIMUM(x, 0) becomes RELU, MINIMUM(MAXIMUM(x, 0), 6) and MINIMUM(RELU(x), 6)
become RELU6, and MINIMUM(MAXIMUM(x, -1), 1) becomes RELU_N1_TO_1, the scalar on either side.

Shown here, with the step alone (no fusion into a producer): the constant on the left, the
clamp pairs, a clamp pair whose inner result is read elsewhere or whose bounds are other values
(left as MAXIMUM/MINIMUM, the 0 still a RELU), all computing the same values; and ONNX
Relu -> Min(6) and Max(-1) -> Min(1) on a graph input converting to one RELU6 / RELU_N1_TO_1
(MINIMUM and MAXIMUM without the step), whose files compute what onnxruntime computes."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from qconvert.transforms.engine import run_to_fixed_point
from qconvert.transforms.identify_relu6 import identify_relu6
from tests.harness import assert_matches_onnxruntime, make_model, without_float_step
from tests.transforms.builders import Builder, evaluate_model, op_types

F = TensorProto.FLOAT
X = np.linspace(-9, 9, 24, dtype=np.float32).reshape(2, 3, 4)


def clamp(ops, extra_output=None):
    """x -> each (op type, scalar or None, scalar first) in turn -> y."""
    b = Builder().input("x", (2, 3, 4))
    current = "x"
    for k, (op_type, value, first) in enumerate(ops):
        inputs = [current]
        if value is not None:
            b.const(f"c{k}", np.float32(value))
            inputs = [f"c{k}", current] if first else [current, f"c{k}"]
        current = "y" if k == len(ops) - 1 else f"t{k}"
        b.op(op_type, inputs, current, (2, 3, 4))
    b.output("y", *([extra_output] if extra_output else []))
    return b.model


@pytest.mark.parametrize("ops, expected", [
    ([("MAXIMUM", 0.0, True)], ["RELU"]),
    ([("MAXIMUM", 0.0, False), ("MINIMUM", 6.0, True)], ["RELU6"]),
    ([("RELU", None, False), ("MINIMUM", 6.0, False)], ["RELU6"]),
    ([("MAXIMUM", -1.0, True), ("MINIMUM", 1.0, False)], ["RELU_N1_TO_1"]),
    ([("MAXIMUM", -1.0, False), ("MINIMUM", 6.0, False)], ["MAXIMUM", "MINIMUM"]),
    ([("MAXIMUM", 0.0, False), ("MINIMUM", 5.0, False)], ["RELU", "MINIMUM"]),
])
def test_clamps_become_activation_ops(ops, expected):
    model = clamp(ops)
    before = evaluate_model(model, {"x": X})["y"]
    run_to_fixed_point(model, [("identify_relu6", identify_relu6)])
    assert op_types(model) == expected
    assert model.operators[0].inputs[0] == "x"
    np.testing.assert_array_equal(evaluate_model(model, {"x": X})["y"], before)


def test_a_relu_read_elsewhere_keeps_its_minimum():
    model = clamp([("RELU", None, False), ("MINIMUM", 6.0, False)], extra_output="t0")
    run_to_fixed_point(model, [("identify_relu6", identify_relu6)])
    assert op_types(model) == ["RELU", "MINIMUM"]


@pytest.mark.parametrize("nodes, inits, op", [
    ([("Relu", ["x"], ["r"]), ("Min", ["r", "six"], ["y"])], {"six": np.float32(6)}, "RELU6"),
    ([("Max", ["x", "m1"], ["a"]), ("Min", ["one", "a"], ["y"])],
     {"m1": np.float32(-1), "one": np.float32(1)}, "RELU_N1_TO_1"),
])
def test_onnx_clamps_on_a_graph_input_are_one_op(nodes, inits, op, monkeypatch):
    model = make_model([helper.make_node(*n) for n in nodes], {"x": (F, (2, 3, 4))}, {"y": F}, inits)
    _, report = assert_matches_onnxruntime(model, {"x": X})
    assert report.op_counts == {op: 1}
    without_float_step(monkeypatch, "identify_relu6")
    _, report = assert_matches_onnxruntime(model, {"x": X})
    assert "MINIMUM" in report.op_counts and op not in report.op_counts
