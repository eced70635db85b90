"""affine_to_depthwise (quantize phase): a per-channel MUL then a per-channel ADD on an NHWC feature
map becomes one 1x1 DEPTHWISE_CONV_2D with the scale as weights and the shift as bias, the ADD's
fused activation kept.

Shown here, with the step alone: the rewrite (constants on either side, a scalar scale, a fused
RELU) computes the same values in float (the 1x1 depthwise computed by hand); a rank-3 input, a
MUL read elsewhere, a MUL with its own activation, an ADD kept float, and a scale varying along H
are left alone. End to end, a BatchNormalization behind a Relu (which keeps it from folding into
the conv) and a Relu after it convert with --quantize to a DEPTHWISE_CONV_2D whose int8 weights
have one scale per channel (a MUL and an ADD, the MUL's constant with one scale, without the
step); both files match onnxruntime within 2 output steps."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from qconvert.tflite.reader import read
from qconvert.transforms.affine_to_depthwise import affine_to_depthwise
from qconvert.transforms.engine import run_once
from tests.harness import assert_int8_matches_onnxruntime, grid_weights, make_model, without_quantize_step
from tests.transforms.builders import Builder, evaluate_model, op_types

F = TensorProto.FLOAT
NHWC = (1, 4, 4, 3)
SCALE = np.array([0.5, -1.5, 2.0], np.float32)
SHIFT = np.array([0.1, -0.2, 0.3], np.float32).reshape(1, 1, 1, 3)


def mul_add(shape=NHWC, scale=SCALE, activation="RELU"):
    b = Builder().input("x", shape).const("scale", scale).const("shift", SHIFT.reshape(-1)[:shape[-1]])
    b.op("MUL", ["x", "scale"], "m", shape).op("ADD", ["shift", "m"], "y", shape, activation=activation)
    return b.output("y").model


def run(model):
    run_once(model, [("affine_to_depthwise", affine_to_depthwise)])


def depthwise_1x1(x, op, model):
    """A 1x1, stride 1 DEPTHWISE_CONV_2D with depth multiplier 1 and a fused RELU, by hand
    (the op has no numpy evaluate)."""
    assert op.options["padding"] == "VALID" and op.options["depth_multiplier"] == 1
    assert (op.options["stride_h"], op.options["stride_w"]) == (1, 1)
    weights, bias = model.constant(op.inputs[1]), model.constant(op.inputs[2])
    assert weights.shape == (1, 1, 1, x.shape[-1]) and op.fused_activation == "RELU"
    return np.maximum(x * weights.reshape(-1) + bias, 0)


@pytest.mark.parametrize("scale", [SCALE, np.float32(2.0)])
def test_mul_add_becomes_a_depthwise_conv_keeping_the_activation(scale):
    model = mul_add(scale=scale)
    x = np.random.default_rng(0).standard_normal(NHWC).astype(np.float32)
    before = evaluate_model(model, {"x": x})["y"]
    run(model)
    assert op_types(model) == ["DEPTHWISE_CONV_2D"] and model.operators[0].inputs[0] == "x"
    np.testing.assert_allclose(depthwise_1x1(x, model.operators[0], model), before, rtol=1e-6, atol=1e-6)


def read_elsewhere():
    model = mul_add()
    model.outputs.append("m")
    return model


def mul_with_activation():
    model = mul_add()
    model.operators[0].fused_activation = "RELU"
    return model


def add_kept_float():
    model = mul_add()
    model.operators[1].float_reason = "--keep-float"
    return model


@pytest.mark.parametrize("build", [
    lambda: mul_add(shape=(4, 4, 3)),
    read_elsewhere,
    mul_with_activation,
    add_kept_float,
    lambda: mul_add(scale=np.array([1, 2, 3, 4], np.float32).reshape(4, 1, 1)),
], ids=["rank-3", "mul-read-elsewhere", "mul-activation", "add-kept-float", "scale-along-h"])
def test_left_alone(build):
    model = build()
    run(model)
    assert op_types(model) == ["MUL", "ADD"]


def relu_batchnorm_relu():
    bn = {"g": np.array([0.5, -1.5, 2.0], np.float32), "b": np.array([0.1, -0.2, 0.3], np.float32),
          "mu": np.array([0.2, 0.1, -0.3], np.float32), "var": np.array([1.0, 0.5, 2.0], np.float32),
          "w": grid_weights((3, 3, 3, 3))}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("BatchNormalization", ["r", "g", "b", "mu", "var"], ["n"]),
             helper.make_node("Relu", ["n"], ["y"])]
    return make_model(nodes, {"x": (F, (1, 3, 6, 6))}, {"y": F}, bn)


def test_onnx_batchnorm_after_relu_is_one_int8_depthwise_with_per_channel_scales(tmp_path, monkeypatch):
    model = relu_batchnorm_relu()
    flatbuffer, report = assert_int8_matches_onnxruntime(model, tmp_path)
    assert "MUL" not in report.op_counts and "ADD" not in report.op_counts
    summary = read(flatbuffer)
    conv = next(op for op in summary.operators if op.name == "DEPTHWISE_CONV_2D")
    weights = summary.tensors[conv.inputs[1]]
    assert weights.dtype == "INT8" and len(weights.scales) == 3 and weights.quantized_dimension == 3

    without_quantize_step(monkeypatch, "affine_to_depthwise")
    flatbuffer, report = assert_int8_matches_onnxruntime(model, tmp_path)
    assert report.op_counts.get("MUL") == report.op_counts.get("ADD") == 1
    assert "DEPTHWISE_CONV_2D" not in report.op_counts
    summary = read(flatbuffer)
    mul = next(op for op in summary.operators if op.name == "MUL")
    assert [len(summary.tensors[i].scales) for i in mul.inputs] == [1, 1]
