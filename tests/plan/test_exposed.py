"""The plan of a model whose outputs the values size (qconvert/plan/exposed.py): a detector head
whose kept boxes int8 changes on some samples is judged by what its selection reads, reaches the
target with int8 in it, writes the model's own outputs only, and its kept boxes, run by LiteRT,
are onnxruntime's. Three forms of the selection: class-agnostic NMS on corners (ReduceMax
scores), NMS per class on centers (center_point_box 1), a score threshold (Greater, NonZero)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import qconvert
from tests.harness import make_model, run_onnxruntime, run_tflite

F = TensorProto.FLOAT
ANCHORS = 60


def _head(rng: np.random.Generator) -> tuple[list, dict]:
    """x [1, ANCHORS, 8] -> output0 [1, 7, ANCHORS]: centres around 160, sizes 0..60 and three
    class scores (sigmoids), as a YOLOv8 export's output0 lays them out."""
    inits = {"wc": rng.normal(0, 0.5, (8, 2)), "ws": rng.normal(0, 0.5, (8, 2)),
             "wk": rng.normal(0, 0.8, (8, 3)), "spread": [60.0], "mid": [160.0], "big": [60.0]}
    node = helper.make_node
    nodes = [node("MatMul", ["x", "wc"], ["c0"]), node("Mul", ["c0", "spread"], ["c1"]),
             node("Add", ["c1", "mid"], ["centres"]),
             node("MatMul", ["x", "ws"], ["s0"]), node("Sigmoid", ["s0"], ["s1"]),
             node("Mul", ["s1", "big"], ["sizes"]),
             node("MatMul", ["x", "wk"], ["k0"]), node("Sigmoid", ["k0"], ["kscores"]),
             node("Concat", ["centres", "sizes", "kscores"], ["rows"], axis=2),
             node("Transpose", ["rows"], ["output0"], perm=[0, 2, 1])]
    return nodes, {k: np.asarray(v, np.float32) for k, v in inits.items()}


def _model(form: str) -> onnx.ModelProto:
    nodes, inits = _head(np.random.default_rng(0))
    if form == "threshold":  # the scores above 0.5, as a NonZero of a comparison selects them
        inits["half"] = np.array(0.5, np.float32)
        nodes += [helper.make_node("ReduceMax", ["kscores"], ["best"], axes=[2], keepdims=0),
                  helper.make_node("Greater", ["best", "half"], ["above"]),
                  helper.make_node("NonZero", ["above"], ["where"]),
                  helper.make_node("Transpose", ["where"], ["at"], perm=[1, 0]),
                  helper.make_node("GatherND", ["best", "at"], ["scores"])]
        return make_model(nodes, {"x": (F, (1, ANCHORS, 8))}, {"scores": F}, inits, opset=17)
    from bench.trained_models.yolo_nms import with_nms

    head = make_model(nodes, {"x": (F, (1, ANCHORS, 8))}, {"output0": F}, inits, opset=17)
    return onnx.load_from_string(with_nms(head.SerializeToString(), form == "agnostic"))


def _kept(expected: dict, got: dict) -> float:
    """The share of onnxruntime's kept rows the .tflite keeps too: boxes of the same label at an
    IoU above 0.5 (a detection's match), or (no boxes) scores within 0.02."""
    if "boxes" not in expected:
        want, have = np.ravel(expected["scores"]), np.ravel(got["scores"])
        return float(np.mean([np.any(np.abs(have - w) < 0.02) for w in want])) if want.size else 1.0
    found = []
    for box, label in zip(expected["boxes"], expected["labels"]):
        same = got["boxes"][got["labels"] == label]
        top_left, bottom_right = np.maximum(same[:, :2], box[:2]), np.minimum(same[:, 2:], box[2:])
        inter = np.prod(np.clip(bottom_right - top_left, 0, None), axis=1)
        union = np.prod(box[2:] - box[:2]) + np.prod(same[:, 2:] - same[:, :2], axis=1) - inter
        found.append(bool(np.any(inter / union > 0.5)))
    return float(np.mean(found)) if found else 1.0


@pytest.mark.parametrize("form", ["agnostic", "per_class", "threshold"])
def test_a_head_whose_kept_boxes_int8_changes_is_planned_by_its_selection(form):
    model = _model(form)
    rng = np.random.default_rng(1)
    calibration = {"x": rng.normal(0, 1, (32, 1, ANCHORS, 8)).astype(np.float32)}
    planned = qconvert.convert(model, quantize=True, calibration=calibration, verify=True)
    plan = planned.report.quantization.plan
    assert plan.reached and plan.mix.get("int8", 0) >= 3, (plan.mix, plan.summary)
    assert [o.name for o in planned.report.outputs] == [o.name for o in model.graph.output]
    shares = []
    for seed in range(2, 8):  # samples the plan never saw
        feeds = {"x": np.random.default_rng(seed).normal(0, 1, (1, ANCHORS, 8)).astype(np.float32)}
        expected = run_onnxruntime(model, feeds)
        shares.append(_kept(expected, run_tflite(planned.tflite, planned.report, feeds)))
    assert np.mean(shares) >= 0.9, shares
    again = qconvert.convert(model, quantize=True, calibration=calibration)
    assert again.tflite == planned.tflite  # deterministic
