"""distribute_split_over_concatenation: a split that takes back what concatenations joined moves up
to their inputs, through concatenations on other axes, reshapes and transposes, until it meets the
concatenation it undoes.

Shown on a detector head as YOLOv8 exports it (per level: Concat(box, class) on channels, Reshape
to [1, C, H*W]; Concat of the levels; Split(box, class)), with box values over +-300 and class
logits over +-1, and on the same head whose levels are transposed to [1, H*W, C] first:
in float the split is gone and the output matches onnxruntime; in int8 (LiteRT) the class output
keeps its own step, where without the step it takes the box logits' (2.4 against 0.008 here), and
its SQNR goes from below 10 dB to above 35. A split whose boundaries do not fall on the
concatenation's stays."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.harness import (assert_matches_onnxruntime, convert_quantized, make_model, run_onnxruntime,
                           run_tflite, without_float_step)

F = TensorProto.FLOAT
N = helper.make_node
LEVELS = ((8, 8), (4, 4))
BOX, CLASSES = 6, 3


def head(transposed: bool = False, split=(BOX, CLASSES)):
    """(model, calibration): per level a 1x1 conv to BOX box channels (x 300) and one to CLASSES
    class channels, concatenated, flattened and joined over the levels, then split back."""
    rng = np.random.default_rng(0)
    nodes, inits, levels, inputs = [], {}, [], {}
    for k, (h, w) in enumerate(LEVELS):
        x = f"x{k}"
        inputs[x] = (F, (1, 4, h, w))
        inits[f"wb{k}"] = (rng.standard_normal((BOX, 4, 1, 1)) * 300 / 4).astype(np.float32)
        inits[f"wc{k}"] = (rng.standard_normal((CLASSES, 4, 1, 1)) / 4).astype(np.float32)
        inits[f"shape{k}"] = np.array([1, BOX + CLASSES, h * w], np.int64)
        nodes += [N("Conv", [x, f"wb{k}"], [f"b{k}"]), N("Conv", [x, f"wc{k}"], [f"c{k}"]),
                  N("Concat", [f"b{k}", f"c{k}"], [f"bc{k}"], axis=1),
                  N("Reshape", [f"bc{k}", f"shape{k}"], [f"flat{k}"])]
        level = f"flat{k}"
        if transposed:
            nodes.append(N("Transpose", [level], [f"t{k}"], perm=[0, 2, 1]))
            level = f"t{k}"
        levels.append(level)
    axis = 2 if transposed else 1
    nodes += [N("Concat", levels, ["all"], axis=1 if transposed else 2),
              N("Split", ["all", "sizes"], ["boxes", "classes"], axis=axis)]
    inits["sizes"] = np.array(split, np.int64)
    model = make_model(nodes, inputs, {"boxes": F, "classes": F}, inits)
    calibration = {x: rng.standard_normal((16,) + shape).astype(np.float32) for x, (_, shape) in inputs.items()}
    return model, calibration


def _feeds(calibration):
    return {name: samples[0] for name, samples in calibration.items()}


@pytest.mark.parametrize("transposed", [False, True])
def test_the_split_is_distributed_and_the_float_model_matches(transposed):
    model, calibration = head(transposed)
    _, report = assert_matches_onnxruntime(model, _feeds(calibration), rtol=1e-5, atol=1e-3)
    assert "SPLIT_V" not in report.op_counts and "SPLIT" not in report.op_counts


def _class_sqnr(model, calibration, tmp_path):
    flatbuffer, report = convert_quantized(model, calibration, tmp_path)
    feeds = _feeds(calibration)
    want = run_onnxruntime(model, feeds)["classes"]
    got = run_tflite(flatbuffer, report, feeds)["classes"]
    return 10 * np.log10(np.sum(want ** 2) / np.sum((got - want) ** 2))


@pytest.mark.parametrize("transposed", [False, True])
def test_in_int8_the_class_logits_keep_their_own_step(transposed, tmp_path, monkeypatch):
    model, calibration = head(transposed)
    distributed = _class_sqnr(model, calibration, tmp_path)
    without_float_step(monkeypatch, "distribute_split_over_concatenation")
    joined = _class_sqnr(model, calibration, tmp_path)
    assert distributed > 35 and joined < 10, (distributed, joined)


def test_a_split_across_the_boundaries_stays():
    model, calibration = head(split=(BOX - 1, CLASSES + 1))
    _, report = assert_matches_onnxruntime(model, _feeds(calibration), rtol=1e-5, atol=1e-3)
    assert report.op_counts.get("SPLIT_V") == 1
