"""keep_mixed_concatenation_float: a detector-style head concatenating box coordinates (0..320)
with class scores (0..1) keeps each part within its own quantization bound in LiteRT."""

import numpy as np
from onnx import TensorProto, helper

from qconvert.tflite.reader import read as read_tflite
from tests.harness import (
    convert_quantized,
    make_model,
    run_onnxruntime,
    run_tflite,
    snap_to_input_grid,
    without_quantize_step,
)

F = TensorProto.FLOAT


def head(box_scale: float = 320.0):
    """boxes = Sigmoid(a) * box_scale (0..box_scale), scores = Sigmoid(b) (0..1), concatenated
    along axis 1 into the output, as a YOLO head writes [boxes, scores]."""
    nodes = [helper.make_node("Sigmoid", ["a"], ["sa"]),
             helper.make_node("Mul", ["sa", "k"], ["boxes"]),
             helper.make_node("Sigmoid", ["b"], ["scores"]),
             helper.make_node("Concat", ["boxes", "scores"], ["y"], axis=1)]
    return make_model(nodes, {"a": (F, (1, 4, 50)), "b": (F, (1, 3, 50))}, {"y": F},
                      {"k": np.array(box_scale, np.float32)})


def _convert_and_run(model, tmp_path):
    rng = np.random.default_rng(0)
    calibration = {"a": rng.standard_normal((16, 1, 4, 50)).astype(np.float32) * 3,
                   "b": rng.standard_normal((16, 1, 3, 50)).astype(np.float32) * 3}
    flatbuffer, report = convert_quantized(model, calibration, tmp_path)
    feeds = snap_to_input_grid(flatbuffer, {n: v[0] for n, v in calibration.items()})
    return flatbuffer, report, run_onnxruntime(model, feeds)["y"], run_tflite(flatbuffer, report, feeds)["y"]


def _scale_of(flatbuffer: bytes, name: str) -> float:
    return next(t.scales[0] for t in read_tflite(flatbuffer).tensors if t.name == name)


def test_box_and_score_parts_keep_their_own_precision(tmp_path):
    flatbuffer, report, expected, actual = _convert_and_run(head(), tmp_path)
    reasons = {f.op: f.reason for f in report.quantization.float_ops}
    assert "differ" in reasons["CONCATENATION"], reasons
    box_step = _scale_of(flatbuffer, "boxes")  # the MUL's own int8 output
    # Each part within 2 steps of its own params: the boxes' (320/255), the scores' sigmoid in
    # float from int8 inputs (its slope is at most 1/4: within a step of 1/256 of the input's).
    box_error = np.abs(actual[:, :4] - expected[:, :4]).max()
    score_error = np.abs(actual[:, 4:] - expected[:, 4:]).max()
    assert box_error <= 2 * box_step, (box_error, box_step)
    assert score_error <= 2 / 256, score_error


def test_without_the_rule_the_scores_are_rounded_away(tmp_path, monkeypatch):
    """The same head with the rule off: one int8 scale of about 1.25 for both parts."""
    without_quantize_step(monkeypatch, "keep_mixed_concatenation_float")
    _, report, expected, actual = _convert_and_run(head(), tmp_path)
    assert "CONCATENATION" not in {f.op for f in report.quantization.float_ops}
    assert np.abs(actual[:, 4:] - expected[:, 4:]).max() > 0.3


def test_parts_of_similar_ranges_stay_int8(tmp_path):
    flatbuffer, report, expected, actual = _convert_and_run(head(box_scale=4.0), tmp_path)
    assert "CONCATENATION" not in {f.op for f in report.quantization.float_ops}
    step = _scale_of(flatbuffer, "y_int8")
    assert np.abs(actual - expected).max() <= 2 * step
