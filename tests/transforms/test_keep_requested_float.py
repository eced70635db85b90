"""keep_requested_float: the ops of --keep-float nodes stay float through every later quantize
step, including the rewrites that would otherwise replace them by new int8 ops (a batch norm's
MUL + ADD by affine_to_depthwise, a HardSwish by decompose_hard_swish)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from qconvert.tflite.reader import read
from tests.harness import (
    calibration_set,
    convert_quantized,
    grid_weights,
    make_model,
    output_steps,
    run_onnxruntime,
    run_tflite,
    snap_to_input_grid,
)

F = TensorProto.FLOAT


def affine_hard_swish_conv():
    """Conv -> Relu -> per-channel Mul -> per-channel Add (a batch norm the RELU keeps from folding
    into the conv) -> HardSwish -> Conv."""
    inits = {"w0": grid_weights((3, 3, 1, 1), seed=2),
             "scale": np.array([0.5, 1.5, -1.0], np.float32).reshape(1, 3, 1, 1),
             "shift": np.array([0.1, -0.2, 0.3], np.float32).reshape(1, 3, 1, 1),
             "w": grid_weights((2, 3, 1, 1), seed=3)}
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c"], name="conv0"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Mul", ["r", "scale"], ["m"], name="bn_scale"),
             helper.make_node("Add", ["m", "shift"], ["a"], name="bn_shift"),
             helper.make_node("HardSwish", ["a"], ["h"], name="act"),
             helper.make_node("Conv", ["h", "w"], ["y"], name="conv")]
    return make_model(nodes, {"x": (F, (1, 3, 4, 4))}, {"y": F}, inits, opset=14)


def test_kept_nodes_stay_float_through_the_rewrites(tmp_path):
    model = affine_hard_swish_conv()
    samples = calibration_set(model, scale=2.0)
    plain, _ = convert_quantized(model, samples, tmp_path)
    counts = read(plain).op_counts  # not kept: the affine and the HardSwish's gate are depthwise
    assert counts.get("DEPTHWISE_CONV_2D") == 2 and "ADD" not in counts and "HARD_SWISH" not in counts
    flatbuffer, report = convert_quantized(model, samples, tmp_path,
                                           keep_float=("bn_scale", "bn_shift", "act"))
    summary = read(flatbuffer)
    kinds = {op.name: summary.tensors[op.outputs[0]].dtype for op in summary.operators}
    assert "DEPTHWISE_CONV_2D" not in kinds
    assert {k: kinds[k] for k in ("MUL", "ADD", "HARD_SWISH", "CONV_2D")} == {
        "MUL": "FLOAT32", "ADD": "FLOAT32", "HARD_SWISH": "FLOAT32", "CONV_2D": "INT8"}
    assert sorted(f.node for f in report.quantization.float_ops) == ["act", "bn_scale", "bn_shift"]
    feeds = snap_to_input_grid(flatbuffer, {"x": samples["x"][0]})
    step = output_steps(flatbuffer)["y"]
    np.testing.assert_allclose(run_tflite(flatbuffer, report, feeds)["y"],
                               run_onnxruntime(model, feeds)["y"], rtol=0, atol=2 * step)
