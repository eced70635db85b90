import numpy as np

from qconvert.transforms.engine import run_to_fixed_point
from qconvert.transforms.fuse_binary_into_affine import fuse_binary_into_affine
from tests.transforms.builders import Builder, evaluate_model, op_types

rng = np.random.default_rng(0)


def fc_then(op_type, constant, activation="NONE"):
    b = Builder().input("x", (3, 4))
    b.const("w", rng.standard_normal((5, 4)).astype(np.float32))
    b.const("bias", rng.standard_normal(5).astype(np.float32)).const("c", constant)
    b.op("FULLY_CONNECTED", ["x", "w", "bias"], "f", (3, 5))
    b.op(op_type, ["f", "c"], "y", (3, 5), activation=activation).output("y")
    return b.model


def check(model, expected_ops):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    before = evaluate_model(model, {"x": x})["y"]
    run_to_fixed_point(model, [("fuse", fuse_binary_into_affine)])
    assert op_types(model) == expected_ops
    np.testing.assert_allclose(evaluate_model(model, {"x": x})["y"], before, rtol=1e-5, atol=1e-6)


def test_per_channel_mul_then_add_fold_into_weights_and_bias():
    model = fc_then("MUL", rng.uniform(0.5, 2, 5).astype(np.float32))
    check(model, ["FULLY_CONNECTED"])


def test_the_binary_ops_activation_moves_to_the_affine_op():
    model = fc_then("ADD", rng.standard_normal(5).astype(np.float32), activation="RELU")
    check(model, ["FULLY_CONNECTED"])
    assert model.operators[0].fused_activation == "RELU"


def test_scalar_sub_and_div_fold():
    check(fc_then("SUB", np.float32(0.5)), ["FULLY_CONNECTED"])
    check(fc_then("DIV", np.float32(4.0)), ["FULLY_CONNECTED"])


def test_a_constant_varying_along_rows_does_not_fold():
    check(fc_then("MUL", rng.standard_normal((3, 1)).astype(np.float32)), ["FULLY_CONNECTED", "MUL"])


def test_an_affine_output_read_twice_does_not_fold():
    model = fc_then("MUL", np.float32(2.0))
    model.outputs.append("f")
    check(model, ["FULLY_CONNECTED", "MUL"])


def test_a_damaged_models_arithmetic_prints_no_numpy_warning():
    """An infinite weight times a zero scale is NaN, as in any runtime; the steps compute it
    under the engine's np.errstate, so numpy's RuntimeWarning never reaches stderr."""
    import warnings

    model = fc_then("MUL", np.array([0, 1, 2, 3, 4], np.float32))
    model.arrays["w"].data = np.full((5, 4), np.inf, np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run_to_fixed_point(model, [("fuse", fuse_binary_into_affine)])
    assert op_types(model) == ["FULLY_CONNECTED"]
    assert np.isnan(model.constant(model.operators[0].inputs[1])[0]).all()
