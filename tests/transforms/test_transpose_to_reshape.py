"""transpose_to_reshape: a TRANSPOSE that only moves size-1 axes (the others keep their order) is a
RESHAPE to its output shape.

Shown here: two such transposes (rank 3 and rank 4) become RESHAPEs computing the same values, a
transpose that swaps two axes of size > 1 stays, and an ONNX Transpose of size-1 axes converts
to a RESHAPE (a TRANSPOSE without the step) whose file computes what onnxruntime computes."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from qconvert.transforms.engine import run_to_fixed_point
from qconvert.transforms.transpose_to_reshape import transpose_to_reshape
from tests.harness import assert_matches_onnxruntime, make_model, without_float_step
from tests.transforms.builders import Builder, evaluate_model, op_types

F = TensorProto.FLOAT


def transpose(shape, perm):
    b = Builder().input("x", shape).const("perm", np.array(perm, np.int32))
    b.op("TRANSPOSE", ["x", "perm"], "y", tuple(shape[p] for p in perm)).output("y")
    return b.model


@pytest.mark.parametrize("shape, perm", [((2, 1, 3), (1, 0, 2)), ((1, 2, 3, 1), (0, 3, 1, 2))])
def test_moving_only_size_one_axes_is_a_reshape(shape, perm):
    model = transpose(shape, perm)
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    run_to_fixed_point(model, [("transpose_to_reshape", transpose_to_reshape)])
    assert op_types(model) == ["RESHAPE"]
    new_shape = tuple(shape[p] for p in perm)
    assert model.constant(model.operators[0].inputs[1]).tolist() == list(new_shape)
    np.testing.assert_array_equal(evaluate_model(model, {"x": x})["y"], np.transpose(x, perm))


def test_swapping_two_axes_larger_than_one_stays_a_transpose():
    model = transpose((2, 3, 1), (1, 0, 2))
    run_to_fixed_point(model, [("transpose_to_reshape", transpose_to_reshape)])
    assert op_types(model) == ["TRANSPOSE"]


def test_onnx_transpose_of_size_one_axes_is_a_reshape_in_the_file(monkeypatch):
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2]),
             helper.make_node("Relu", ["t"], ["y"])]
    model = make_model(nodes, {"x": (F, (2, 1, 3))}, {"y": F})
    _, report = assert_matches_onnxruntime(model)
    assert report.op_counts == {"RESHAPE": 1, "RELU": 1}
    without_float_step(monkeypatch, "transpose_to_reshape")
    _, report = assert_matches_onnxruntime(model)
    assert report.op_counts == {"TRANSPOSE": 1, "RELU": 1}
