"""resize_nearest_to_depth_to_space: an int8 nearest upsample by integer factors becomes copies
(CONCATENATION + DEPTH_TO_SPACE, or CONCATENATION + RESHAPE per axis); the file has no
RESIZE_NEAREST_NEIGHBOR left, computes bit for bit what the resize kernel computed, matches
onnxruntime within 2 int8 steps, and XNNPACK takes a conv -> Resize -> conv chain whole."""

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
    run_tflite,
    snap_to_input_grid,
    without_quantize_step,
)

F = TensorProto.FLOAT


def conv_resize_conv(scales, **attrs):
    """x [1, 3, 5, 6] -> Conv 3x3 -> Resize nearest by `scales` (H, W) -> Conv 1x1 -> y."""
    attrs = attrs or {"coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Resize", ["a", "roi", "scales"], ["b"], mode="nearest", **attrs),
             helper.make_node("Conv", ["b", "w2"], ["y"])]
    return make_model(nodes, {"x": (F, (1, 3, 5, 6))}, {"y": F},
                      {"w1": grid_weights((4, 3, 3, 3), seed=1), "w2": grid_weights((4, 4, 1, 1), seed=2),
                       "roi": np.zeros(0, np.float32), "scales": np.array([1, 1, *scales], np.float32)})


def partitions(flatbuffer: bytes, tmp_path) -> int:
    path = tmp_path / "model.tflite"
    path.write_bytes(flatbuffer)
    return inspect_file(str(path))["delegation"]["partitions"]


CASES = {
    "x2": ((2, 2), {}, {"DEPTH_TO_SPACE"}),
    "x2-half-pixel": ((2, 2), {"coordinate_transformation_mode": "half_pixel"}, {"DEPTH_TO_SPACE"}),
    "x3": ((3, 3), {}, {"DEPTH_TO_SPACE"}),  # 9 copies: two concatenations of 3
    "x8": ((8, 8), {}, {"DEPTH_TO_SPACE"}),  # 64 copies: 4 x 4 x 4 (PP-OCR's FPN)
    "x2-x3": ((2, 3), {}, {"RESHAPE"}),
    "x1-x2": ((1, 2), {}, {"RESHAPE"}),
}


@pytest.mark.parametrize("case", CASES)
def test_resize_becomes_copies_bit_exactly(case, tmp_path, monkeypatch):
    scales, attrs, expected_ops = CASES[case]
    model = conv_resize_conv(scales, **attrs)
    samples = calibration_set(model)
    flatbuffer, report = assert_int8_matches_onnxruntime(model, tmp_path, samples, steps=2)
    ops = read(flatbuffer).op_counts
    assert "RESIZE_NEAREST_NEIGHBOR" not in ops, ops
    assert expected_ops <= set(ops), ops
    assert partitions(flatbuffer, tmp_path) == 1
    # XNNPACK takes a CONCATENATION of at most 5 inputs.
    assert all(len(op.inputs) <= 5 for op in read(flatbuffer).operators if op.name == "CONCATENATION")

    without_quantize_step(monkeypatch, "resize_nearest_to_depth_to_space")
    reference, reference_report = convert_quantized(model, samples, tmp_path)
    assert "RESIZE_NEAREST_NEIGHBOR" in read(reference).op_counts
    assert partitions(reference, tmp_path) > 1
    for k in range(4):
        feeds = snap_to_input_grid(flatbuffer, {"x": samples["x"][k]})
        np.testing.assert_array_equal(run_tflite(flatbuffer, report, feeds)["y"],
                                      run_tflite(reference, reference_report, feeds)["y"])


def test_fractional_factor_stays(tmp_path):
    """A factor of 1.5 samples input rows 0, 0, 1, 2, 2, ...: not copies, the resize stays."""
    model = conv_resize_conv((1.5, 2))
    flatbuffer, _ = convert_quantized(model, calibration_set(model), tmp_path)
    assert "RESIZE_NEAREST_NEIGHBOR" in read(flatbuffer).op_counts
