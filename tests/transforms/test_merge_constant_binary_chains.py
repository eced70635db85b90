import numpy as np
from onnx import TensorProto, helper

from qconvert.transforms.engine import run_to_fixed_point
from qconvert.transforms.merge_constant_binary_chains import merge_constant_binary_chains
from tests.harness import assert_int8_matches_onnxruntime, assert_matches_onnxruntime, make_model
from tests.transforms.builders import Builder, evaluate_model, op_types

rng = np.random.default_rng(0)
SHAPE = (1, 4, 4, 3)


def chain(*steps, activation="NONE"):
    """x -> op(., constant) for each (op, constant) step; the last op carries `activation`."""
    b = Builder().input("x", SHAPE)
    name = "x"
    for k, (op_type, constant) in enumerate(steps):
        b.const(f"c{k}", constant)
        last = k == len(steps) - 1
        b.op(op_type, [name, f"c{k}"], "y" if last else f"t{k}", SHAPE,
             activation=activation if last else "NONE")
        name = f"t{k}"
    return b.output("y").model


def check(model, expected_ops):
    x = rng.standard_normal(SHAPE).astype(np.float32)
    before = evaluate_model(model, {"x": x})["y"]
    run_to_fixed_point(model, [("merge", merge_constant_binary_chains)])
    assert op_types(model) == expected_ops
    np.testing.assert_allclose(evaluate_model(model, {"x": x})["y"], before, rtol=1e-5, atol=1e-6)


def per_channel():
    return rng.uniform(0.5, 2, 3).astype(np.float32)


def test_batch_norm_then_scale_layer_becomes_one_mul_and_one_add():
    """DenseNet: BN (MUL, ADD) then the scale layer (MUL, ADD), the last with a RELU."""
    model = chain(("MUL", per_channel()), ("ADD", per_channel()), ("MUL", per_channel()),
                  ("ADD", per_channel()), activation="RELU")
    check(model, ["MUL", "ADD"])
    assert model.operators[-1].fused_activation == "RELU"


def test_add_then_mul_swaps_when_a_merge_follows_and_a_scalar_broadcasts():
    check(chain(("ADD", per_channel()), ("MUL", np.float32(3.0)), ("ADD", per_channel())), ["MUL", "ADD"])
    # Alone, ADD -> MUL stays as written (GELU's (1 + erf) * 0.5 must keep its shape).
    check(chain(("ADD", per_channel()), ("MUL", np.float32(3.0))), ["ADD", "MUL"])


def test_constants_varying_along_rows_merge_and_a_shape_changing_one_does_not():
    check(chain(("MUL", per_channel()), ("MUL", rng.standard_normal((4, 1, 1)).astype(np.float32))), ["MUL"])
    model = chain(("MUL", per_channel()), ("MUL", rng.standard_normal((2, 1, 1, 1)).astype(np.float32)))
    run_to_fixed_point(model, [("merge", merge_constant_binary_chains)])  # [2,4,4,3] != the shape
    assert op_types(model) == ["MUL", "MUL"]


def test_a_middle_tensor_read_twice_is_kept():
    model = chain(("MUL", per_channel()), ("ADD", per_channel()))
    model.outputs.append("t0")
    model.add_operator(model.operators[0].__class__("RELU", ["t0"], ["z"]))
    model.add_array("z", SHAPE, np.float32)
    run_to_fixed_point(model, [("merge", merge_constant_binary_chains)])
    assert op_types(model) == ["MUL", "ADD", "RELU"]


def _standalone_batch_norm_model():
    """MaxPool -> BatchNormalization -> Mul -> Add -> Relu (DenseNet's pre-activation block)."""
    c = 4
    nodes = [helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2]),
             helper.make_node("BatchNormalization", ["p", "g", "b", "m", "v"], ["n"]),
             helper.make_node("Mul", ["n", "s"], ["ns"]), helper.make_node("Add", ["ns", "t"], ["nt"]),
             helper.make_node("Relu", ["nt"], ["y"])]
    inits = {k: rng.uniform(0.5, 1.5, c).astype(np.float32) for k in ("g", "v")}
    inits.update({k: rng.standard_normal(c).astype(np.float32) for k in ("b", "m")})
    inits.update({"s": rng.uniform(0.5, 1.5, (1, c, 1, 1)).astype(np.float32),
                  "t": rng.standard_normal((1, c, 1, 1)).astype(np.float32)})
    return make_model(nodes, {"x": (TensorProto.FLOAT, (1, c, 8, 8))}, {"y": TensorProto.FLOAT}, inits)


def test_standalone_batch_norm_and_scale_layer_end_to_end():
    model = _standalone_batch_norm_model()
    _, report = assert_matches_onnxruntime(model)
    assert report.op_counts == {"MAX_POOL_2D": 1, "MUL": 1, "ADD": 1}


def test_under_quantize_the_affine_pair_is_one_depthwise_conv(tmp_path):
    """affine_to_depthwise: the MUL + ADD pair runs as one 1x1 DEPTHWISE_CONV_2D in int8 (one
    rounding, per-channel scale), its RELU fused."""
    model = _standalone_batch_norm_model()
    _, report = assert_int8_matches_onnxruntime(model, tmp_path)
    assert report.op_counts == {"QUANTIZE": 1, "MAX_POOL_2D": 1, "DEPTHWISE_CONV_2D": 1, "DEQUANTIZE": 1}
