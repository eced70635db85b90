import numpy as np

from qconvert.transforms.engine import run_to_fixed_point
from qconvert.transforms.sink_transposes import sink_transposes
from tests.transforms.builders import Builder, evaluate_model, op_types

NHWC, NCHW = (0, 2, 3, 1), (0, 3, 1, 2)


def run(model):
    run_to_fixed_point(model, [("sink_transposes", sink_transposes)])


def test_transpose_moves_through_relu_and_cancels_with_its_inverse():
    b = Builder().input("x", (1, 2, 3, 5))
    b.const("p1", np.array(NCHW, np.int32)).const("p2", np.array(NHWC, np.int32))
    b.op("TRANSPOSE", ["x", "p1"], "t", (1, 5, 2, 3))
    b.op("RELU", ["t"], "r", (1, 5, 2, 3))
    b.op("TRANSPOSE", ["r", "p2"], "y", (1, 2, 3, 5)).output("y")
    x = np.random.default_rng(0).standard_normal((1, 2, 3, 5)).astype(np.float32)
    before = evaluate_model(b.model, {"x": x})["y"]
    run(b.model)
    assert op_types(b.model) == ["RELU"]
    np.testing.assert_array_equal(evaluate_model(b.model, {"x": x})["y"], before)


def test_binary_op_with_constant_takes_the_transposed_constant():
    b = Builder().input("x", (1, 2, 3, 5))
    b.const("p1", np.array(NCHW, np.int32)).const("p2", np.array(NHWC, np.int32))
    b.const("c", np.arange(5, dtype=np.float32).reshape(5, 1, 1))  # per-channel in NCHW
    b.op("TRANSPOSE", ["x", "p1"], "t", (1, 5, 2, 3))
    b.op("MUL", ["t", "c"], "m", (1, 5, 2, 3))
    b.op("TRANSPOSE", ["m", "p2"], "y", (1, 2, 3, 5)).output("y")
    x = np.random.default_rng(1).standard_normal((1, 2, 3, 5)).astype(np.float32)
    before = evaluate_model(b.model, {"x": x})["y"]
    run(b.model)
    assert op_types(b.model) == ["MUL"]
    assert b.model.constant(b.model.operators[0].inputs[1]).shape == (1, 1, 1, 5)
    np.testing.assert_array_equal(evaluate_model(b.model, {"x": x})["y"], before)


def test_concatenation_axis_is_remapped():
    b = Builder().input("x", (1, 2, 3, 5)).input("z", (1, 2, 3, 4))
    b.const("p1", np.array(NCHW, np.int32)).const("p2", np.array(NHWC, np.int32))
    b.op("TRANSPOSE", ["x", "p1"], "tx", (1, 5, 2, 3))
    b.op("TRANSPOSE", ["z", "p1"], "tz", (1, 4, 2, 3))
    b.op("CONCATENATION", ["tx", "tz"], "c", (1, 9, 2, 3), axis=1)
    b.op("TRANSPOSE", ["c", "p2"], "y", (1, 2, 3, 9)).output("y")
    rng = np.random.default_rng(2)
    feeds = {"x": rng.standard_normal((1, 2, 3, 5)).astype(np.float32),
             "z": rng.standard_normal((1, 2, 3, 4)).astype(np.float32)}
    before = evaluate_model(b.model, feeds)["y"]
    run(b.model)
    assert op_types(b.model) == ["CONCATENATION"]
    assert b.model.operators[0].options["axis"] == 3
    np.testing.assert_array_equal(evaluate_model(b.model, feeds)["y"], before)


def test_mean_without_keep_dims_gets_the_right_output_permutation():
    b = Builder().input("x", (1, 2, 3, 5))
    b.const("p1", np.array(NCHW, np.int32)).const("axes", np.array([2, 3], np.int32))
    b.op("TRANSPOSE", ["x", "p1"], "t", (1, 5, 2, 3))
    b.op("MEAN", ["t", "axes"], "y", (1, 5), keep_dims=False).output("y")
    x = np.random.default_rng(3).standard_normal((1, 2, 3, 5)).astype(np.float32)
    before = evaluate_model(b.model, {"x": x})["y"]
    run(b.model)
    assert op_types(b.model)[0] == "MEAN"
    np.testing.assert_allclose(evaluate_model(b.model, {"x": x})["y"], before, rtol=1e-6)


def test_a_transpose_feeding_a_reshape_stays():
    b = Builder().input("x", (1, 2, 3, 5))
    b.const("p1", np.array(NCHW, np.int32)).const("s", np.array([1, 30], np.int32))
    b.op("TRANSPOSE", ["x", "p1"], "t", (1, 5, 2, 3))
    b.op("RESHAPE", ["t", "s"], "y", (1, 30)).output("y")
    run(b.model)
    assert op_types(b.model) == ["TRANSPOSE", "RESHAPE"]


def test_mixed_permutations_do_not_move():
    b = Builder().input("x", (1, 2, 3, 5)).input("z", (1, 5, 2, 3))
    b.const("p1", np.array(NCHW, np.int32))
    b.op("TRANSPOSE", ["x", "p1"], "t", (1, 5, 2, 3))
    b.op("ADD", ["t", "z"], "y", (1, 5, 2, 3)).output("y")
    run(b.model)
    assert op_types(b.model) == ["TRANSPOSE", "ADD"]


def test_a_computed_single_value_operand_lets_the_transpose_move():
    """MAXIMUM(transposed x, a scalar computed at run time): the scalar has no layout, so the
    transposes move past the op and cancel; a computed per-channel operand keeps them."""
    for bound_shape, moved in (((1, 1, 1, 1), True), ((), True), ((1, 5, 1, 1), False)):
        b = Builder().input("x", (1, 2, 3, 5)).input("s", bound_shape)
        b.const("p1", np.array(NCHW, np.int32)).const("p2", np.array(NHWC, np.int32))
        b.op("TRANSPOSE", ["x", "p1"], "t", (1, 5, 2, 3))
        b.op("MAXIMUM", ["t", "s"], "m", (1, 5, 2, 3))
        b.op("TRANSPOSE", ["m", "p2"], "y", (1, 2, 3, 5)).output("y")
        rng = np.random.default_rng(3)
        feeds = {"x": rng.standard_normal((1, 2, 3, 5)).astype(np.float32),
                 "s": rng.standard_normal(bound_shape).astype(np.float32)}
        before = evaluate_model(b.model, feeds)["y"]
        run(b.model)
        assert (op_types(b.model) == ["MAXIMUM"]) == moved, op_types(b.model)
        np.testing.assert_array_equal(evaluate_model(b.model, feeds)["y"], before)
