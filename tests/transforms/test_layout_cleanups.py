"""transpose_to_reshape, merge_reshapes, fold_transpose_into_fully_connected, channels_last_io,
remove_identity and fold_constants, each on a hand-built model."""

import numpy as np

from qconvert.transforms.channels_last_io import channels_last_io
from qconvert.transforms.engine import run_to_fixed_point
from qconvert.transforms.fold_constants import fold_constants
from qconvert.transforms.fold_transpose_into_fully_connected import fold_transpose_into_fully_connected
from qconvert.transforms.merge_reshapes import merge_reshapes
from qconvert.transforms.remove_identity import remove_identity
from qconvert.transforms.transpose_to_reshape import transpose_to_reshape
from tests.transforms.builders import Builder, evaluate_model, op_types

rng = np.random.default_rng(0)


def check(model, steps, expected_ops, feeds):
    before = evaluate_model(model, feeds)
    run_to_fixed_point(model, steps)
    assert op_types(model) == expected_ops
    after = evaluate_model(model, feeds)
    for name in before:
        np.testing.assert_allclose(after[name], before[name], rtol=1e-5, atol=1e-6)


def test_transpose_of_size_one_axes_becomes_reshape_and_merges():
    b = Builder().input("x", (1, 1, 1, 7))
    b.const("p", np.array([0, 3, 1, 2], np.int32)).const("s", np.array([1, 7], np.int32))
    b.op("TRANSPOSE", ["x", "p"], "t", (1, 7, 1, 1))
    b.op("RESHAPE", ["t", "s"], "y", (1, 7)).output("y")
    check(b.model, [("t2r", transpose_to_reshape), ("merge", merge_reshapes)], ["RESHAPE"],
          {"x": rng.standard_normal((1, 1, 1, 7)).astype(np.float32)})


def test_flatten_of_nchw_feeds_fully_connected_without_transpose():
    b = Builder().input("x", (1, 2, 3, 4))  # NHWC
    b.const("p", np.array([0, 3, 1, 2], np.int32)).const("s", np.array([1, 24], np.int32))
    b.const("w", rng.standard_normal((5, 24)).astype(np.float32))
    b.op("TRANSPOSE", ["x", "p"], "t", (1, 4, 2, 3))
    b.op("RESHAPE", ["t", "s"], "f", (1, 24))
    b.op("FULLY_CONNECTED", ["f", "w", ""], "y", (1, 5)).output("y")
    check(b.model, [("fold", fold_transpose_into_fully_connected)], ["RESHAPE", "FULLY_CONNECTED"],
          {"x": rng.standard_normal((1, 2, 3, 4)).astype(np.float32)})


def test_image_input_becomes_channels_last():
    b = Builder().input("x", (1, 3, 4, 5))
    b.const("p", np.array([0, 2, 3, 1], np.int32))
    b.op("TRANSPOSE", ["x", "p"], "t", (1, 4, 5, 3))
    b.op("RELU", ["t"], "y", (1, 4, 5, 3)).output("y")
    run_to_fixed_point(b.model, [("io", channels_last_io)])
    assert op_types(b.model) == ["RELU"]
    assert b.model.arrays["x"].shape == (1, 4, 5, 3)
    assert b.model.io_permutation["x"] == (0, 2, 3, 1)


def test_identity_between_input_and_output_becomes_reshape():
    b = Builder().input("x", (2, 3)).op("IDENTITY", ["x"], "y", (2, 3)).output("y")
    check(b.model, [("identity", remove_identity)], ["RESHAPE"],
          {"x": rng.standard_normal((2, 3)).astype(np.float32)})


def test_identity_inside_the_graph_disappears():
    b = Builder().input("x", (2, 3)).op("IDENTITY", ["x"], "i", (2, 3)).op("RELU", ["i"], "y", (2, 3))
    check(b.output("y").model, [("identity", remove_identity)], ["RELU"],
          {"x": rng.standard_normal((2, 3)).astype(np.float32)})


def test_constant_subgraph_folds_but_the_output_op_stays():
    b = Builder().input("x", (2, 3)).const("c", np.ones((3, 2), np.float32))
    b.const("p", np.array([1, 0], np.int32))
    b.op("TRANSPOSE", ["c", "p"], "ct", (2, 3))
    b.op("ADD", ["x", "ct"], "y", (2, 3)).output("y")
    check(b.model, [("fold", fold_constants)], ["ADD"],
          {"x": rng.standard_normal((2, 3)).astype(np.float32)})
