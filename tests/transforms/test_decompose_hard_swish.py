"""decompose_hard_swish: an int8 HARD_SWISH becomes its [0, 1]-saturating gate (a 1x1 depthwise
conv on feature maps, MUL + ADD on other ranks) times x; the file has no HARD_SWISH left, matches
onnxruntime within 2 int8 steps in LiteRT, and XNNPACK takes a conv -> HardSwish -> conv chain
whole where the HARD_SWISH split it."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from qconvert.check.inspect_tflite import inspect_file
from qconvert.tflite.reader import read
from tests.harness import (
    assert_int8_matches_onnxruntime,
    calibration_set,
    convert_quantized,
    grid_weights,
    make_model,
    output_steps,
    run_onnxruntime,
    run_tflite,
    snap_to_input_grid,
    without_quantize_step,
)

F = TensorProto.FLOAT


def conv_hard_swish_conv():
    """x [1, 3, 8, 8] -> Conv 3x3 -> HardSwish -> Conv 1x1 -> y."""
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("HardSwish", ["a"], ["b"]),
             helper.make_node("Conv", ["b", "w2"], ["y"])]
    return make_model(nodes, {"x": (F, (1, 3, 8, 8))}, {"y": F},
                      {"w1": grid_weights((4, 3, 3, 3), seed=1), "w2": grid_weights((4, 4, 1, 1), seed=2)},
                      opset=14)


def hard_swish_alone(shape):
    """One HardSwish: the error measured is the replacement's own (inputs snapped to int8)."""
    return make_model([helper.make_node("HardSwish", ["x"], ["y"])], {"x": (F, shape)}, {"y": F}, opset=14)


def dense_hard_swish_dense():
    """x [2, 6] -> Gemm -> HardSwish -> Gemm -> y: a classifier head, rank 2 (the MUL + ADD gate)."""
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["a"]),
             helper.make_node("HardSwish", ["a"], ["b"]),
             helper.make_node("Gemm", ["b", "w2"], ["y"])]
    rng = np.random.default_rng(3)
    return make_model(nodes, {"x": (F, (2, 6))}, {"y": F},
                      {"w1": grid_weights((6, 8), seed=4, axis=1),
                       "b1": rng.standard_normal(8).astype(np.float32),
                       "w2": grid_weights((8, 3), seed=5, axis=1)}, opset=14)


def partitions(flatbuffer: bytes, tmp_path) -> int:
    path = tmp_path / "model.tflite"
    path.write_bytes(flatbuffer)
    return inspect_file(str(path))["delegation"]["partitions"]


def assert_every_sample_within(model, flatbuffer, report, samples, steps=2.0):
    scales = output_steps(flatbuffer)
    for k in range(len(samples["x"])):
        feeds = snap_to_input_grid(flatbuffer, {"x": samples["x"][k]})
        want = run_onnxruntime(model, feeds)["y"]
        got = run_tflite(flatbuffer, report, feeds)["y"]
        np.testing.assert_allclose(got, want, rtol=0, atol=steps * scales["y"] * (1 + 1e-6),
                                   err_msg=f"sample {k}")


@pytest.mark.parametrize("shape, gate", [((1, 3, 6, 6), {"DEPTHWISE_CONV_2D"}), ((2, 3, 8), {"MUL", "ADD"})],
                         ids=["nhwc", "rank3"])
def test_decomposed_hard_swish_is_within_2_steps(shape, gate, tmp_path):
    model = hard_swish_alone(shape)
    # x 3: well past -3 and 3, where relu6 clamps.
    samples = calibration_set(model, scale=3.0)
    flatbuffer, report = assert_int8_matches_onnxruntime(model, tmp_path, samples, steps=2)
    # The HARD_SWISH kernel's own error is up to 0.9 steps on these samples; the gate's roundings
    # keep it within 1.
    assert_every_sample_within(model, flatbuffer, report, samples, steps=1)
    ops = read(flatbuffer).op_counts
    assert "HARD_SWISH" not in ops, ops
    assert gate <= set(ops), ops


@pytest.mark.parametrize("build", [conv_hard_swish_conv, dense_hard_swish_dense], ids=["conv", "dense"])
def test_chain_through_hard_swish_is_one_partition(build, tmp_path):
    model = build()
    samples = calibration_set(model, scale=3.0)
    flatbuffer, _ = assert_int8_matches_onnxruntime(model, tmp_path, samples, steps=2)
    assert "HARD_SWISH" not in read(flatbuffer).op_counts
    assert partitions(flatbuffer, tmp_path) == 1


def test_without_the_step_hard_swish_splits_the_delegated_graph(tmp_path, monkeypatch):
    model = conv_hard_swish_conv()
    samples = calibration_set(model, scale=3.0)
    with_step, _ = convert_quantized(model, samples, tmp_path)
    without_quantize_step(monkeypatch, "decompose_hard_swish")
    without, _ = convert_quantized(model, samples, tmp_path)
    assert "HARD_SWISH" in read(without).op_counts
    assert partitions(without, tmp_path) > 1 == partitions(with_step, tmp_path)


def test_gate_range_saturates_at_0_and_1(tmp_path):
    """The gate's int8 params span [0, 1] exactly (x reaches past -3 and 3): q = -128 is 0 and
    q = 127 is 1, so saturation is relu6's clamp. On the MUL + ADD path x / 6 is cut where its
    q = 127 is exactly 0.5 (scale 0.5 / 127, zero point 0), so a large x gets a gate of 1."""
    for shape, gate_op in (((1, 3, 6, 6), "DEPTHWISE_CONV_2D"), ((2, 3, 8), "ADD")):
        model = hard_swish_alone(shape)
        flatbuffer, _ = convert_quantized(model, calibration_set(model, scale=3.0), tmp_path)
        summary = read(flatbuffer)
        op = next(op for op in summary.operators if op.name == gate_op)
        gate = summary.tensors[op.outputs[0]]
        assert gate.zero_points == [-128]
        np.testing.assert_allclose(gate.scales[0] * 255, 1.0, rtol=1e-6)
        if gate_op == "ADD":
            sixth = summary.tensors[op.inputs[0]]  # the MUL's x / 6
            assert sixth.zero_points == [0]
            np.testing.assert_allclose(sixth.scales[0] * 127, 0.5, rtol=1e-6)


def test_int16_activations_leave_hard_swish_alone(tmp_path):
    """--activations int16: no 16x8 HARD_SWISH kernel, the op stays float, and the int8 rewrite
    does not apply (its saturation needs the asymmetric int8 range)."""
    model = conv_hard_swish_conv()
    flatbuffer, _ = convert_quantized(model, calibration_set(model, scale=3.0), tmp_path, activations="int16")
    assert "HARD_SWISH" in read(flatbuffer).op_counts
