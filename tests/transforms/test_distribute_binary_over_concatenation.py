import numpy as np

from qconvert.transforms.distribute_binary_over_concatenation import distribute_binary_over_concatenation
from qconvert.transforms.engine import run_to_fixed_point
from qconvert.transforms.fuse_binary_into_affine import fuse_binary_into_affine
from tests.transforms.builders import Builder, evaluate_model, op_types

rng = np.random.default_rng(0)
STEPS = [("distribute", distribute_binary_over_concatenation), ("fuse", fuse_binary_into_affine)]


def grouped_dense_then(op_type, value, second_branch="FULLY_CONNECTED"):
    b = Builder().input("x", (2, 4))
    b.const("w1", rng.standard_normal((3, 4)).astype(np.float32)).const("b1", np.zeros(3, np.float32))
    b.const("w2", rng.standard_normal((2, 4)).astype(np.float32)).const("b2", np.zeros(2, np.float32))
    b.const("c", value)
    b.op("FULLY_CONNECTED", ["x", "w1", "b1"], "f1", (2, 3))
    if second_branch == "FULLY_CONNECTED":
        b.op("FULLY_CONNECTED", ["x", "w2", "b2"], "f2", (2, 2))
    else:
        b.const("s", np.array([0, 0], np.int32)).const("z", np.array([2, 2], np.int32))
        b.op("SLICE", ["x", "s", "z"], "f2", (2, 2))
    b.op("CONCATENATION", ["f1", "f2"], "cat", (2, 5), axis=1)
    b.op(op_type, ["cat", "c"], "y", (2, 5), activation="RELU").output("y")
    return b.model


def check(model, expected):
    x = rng.standard_normal((2, 4)).astype(np.float32)
    before = evaluate_model(model, {"x": x})["y"]
    run_to_fixed_point(model, STEPS)
    assert op_types(model) == expected
    np.testing.assert_allclose(evaluate_model(model, {"x": x})["y"], before, rtol=1e-5, atol=1e-6)


def test_batch_norm_after_a_grouped_layer_folds_into_each_group():
    model = grouped_dense_then("MUL", rng.uniform(0.5, 2, 5).astype(np.float32))
    check(model, ["FULLY_CONNECTED", "FULLY_CONNECTED", "CONCATENATION"])
    assert all(op.fused_activation == "RELU" for op in model.operators[:2])


def test_a_branch_that_is_not_affine_blocks_it():
    model = grouped_dense_then("ADD", rng.standard_normal(5).astype(np.float32), second_branch="SLICE")
    check(model, ["FULLY_CONNECTED", "SLICE", "CONCATENATION", "ADD"])
