"""NonMaxSuppression (qconvert/ops/nms.py) against onnxruntime: one NON_MAX_SUPPRESSION_V4 per
batch and class compacted into ONNX's [num_selected, 3] rows, their count resized when the model
runs. Both box formats (corners in either diagonal, centers), batches and classes, thresholds
given or not, a maximum beyond the boxes, a postprocess that gathers the selected boxes; each on
inputs where the selection differs (few boxes kept, many, none); the refusals in one line."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.harness import assert_matches_onnxruntime, assert_refused_in_one_line, make_model

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def nms_model(batches=1, classes=1, boxes=6, maximum=3, iou=0.5, threshold=0.0, center=0, after=()):
    """NonMaxSuppression of graph inputs boxes [B, N, 4], scores [B, C, N]; None leaves an
    optional input out."""
    inputs = ["boxes", "scores"]
    inits = {}
    for name, value, dtype in (("max", maximum, np.int64), ("iou", iou, np.float32),
                               ("threshold", threshold, np.float32)):
        if value is None:
            inputs.append("")
        else:
            inputs.append(name)
            inits[name] = np.array([value], dtype)
    while inputs[-1] == "":
        inputs.pop()
    node = helper.make_node("NonMaxSuppression", inputs, ["selected"], name="nms", center_point_box=center)
    outputs = {"selected": I64, **{n.output[0]: t for n, t in after}}
    return make_model([node, *(n for n, _ in after)],
                      {"boxes": (F, (batches, boxes, 4)), "scores": (F, (batches, classes, boxes))},
                      outputs, inits, opset=11)


def feeds(model, seed, center=0, spread=1.0):
    """Boxes of a positive size, some overlapping (`spread` smaller: more of them), corners in
    either diagonal order; scores uniform."""
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    scores_shape = [d.dim_value for d in model.graph.input[1].type.tensor_type.shape.dim]
    rng = np.random.default_rng(seed)
    at = rng.uniform(0, spread, shape[:2] + [2])
    size = rng.uniform(0.05, 0.4, shape[:2] + [2])
    if center:
        boxes = np.concatenate([at, size], -1)
    else:
        flip = rng.random(shape[:2] + [1]) < 0.5
        boxes = np.where(flip, np.concatenate([at + size, at], -1), np.concatenate([at, at + size], -1))
    return {"boxes": boxes.astype(np.float32),
            "scores": rng.uniform(0, 1, scores_shape).astype(np.float32)}


CASES = {
    "one_class": dict(),
    "classes_and_batches": dict(batches=2, classes=3, boxes=20, maximum=5, iou=0.4, threshold=0.3),
    "centers": dict(batches=2, classes=2, boxes=12, maximum=4, center=1),
    "maximum_beyond_the_boxes": dict(boxes=5, maximum=100, iou=0.3),
    "no_score_threshold": dict(classes=2, boxes=10, maximum=4, threshold=None),
    "no_thresholds": dict(classes=2, boxes=10, maximum=4, iou=None),
    "iou_one": dict(boxes=10, maximum=10, iou=1.0),
    "iou_zero": dict(classes=2, boxes=10, maximum=6, iou=0.0),
}


@pytest.mark.parametrize("name", list(CASES))
def test_nms_matches_onnxruntime_at_every_count(name):
    """One file for every input: crowded boxes (many suppressed), spread ones (many kept)."""
    spec = CASES[name]
    model = nms_model(**spec)
    for seed, spread in ((0, 1.0), (1, 0.2), (2, 3.0)):
        assert_matches_onnxruntime(model, feeds(model, seed, spec.get("center", 0), spread), rtol=0, atol=0)


def test_nms_with_a_high_threshold_selects_none():
    model = nms_model(classes=2, boxes=8, threshold=0.99)
    assert_matches_onnxruntime(model, feeds(model, 3), rtol=0, atol=0)


def test_nms_postprocess_gathers_the_selected_boxes():
    """A detector's postprocess: the box column of the selected rows gathers their boxes."""
    after = [(helper.make_node("Gather", ["selected", "two"], ["index"], axis=1), I64),
             (helper.make_node("Gather", ["flat", "index"], ["kept"], axis=0), F),
             (helper.make_node("Squeeze", ["boxes"], ["flat"], axes=[0]), F)]
    model = nms_model(boxes=16, maximum=6, iou=0.3, after=after)
    model.graph.initializer.append(helper.make_tensor("two", I64, [], [2]))
    for seed in range(3):
        assert_matches_onnxruntime(model, feeds(model, seed, spread=0.5), rtol=0, atol=0)


def test_nms_with_a_zero_maximum_selects_nothing():
    model = nms_model(maximum=0)
    flatbuffer, _ = assert_matches_onnxruntime(model, feeds(model, 0), rtol=0, atol=0)


def test_nms_refusals_are_one_line():
    assert_refused_in_one_line(nms_model(maximum=None, iou=None, threshold=None),
                               "has no max_output_boxes_per_class", node="nms")
    assert_refused_in_one_line(nms_model(iou=1.5), "iou_threshold 1.5 is outside", node="nms")
    model = nms_model()
    model.graph.initializer.pop(0)  # max becomes a graph input
    model.graph.input.append(helper.make_tensor_value_info("max", I64, [1]))
    assert_refused_in_one_line(model, "max_output_boxes_per_class", node="nms")


def test_nms_agrees_where_an_iou_equals_the_threshold():
    """Boxes 0 and 3 overlap with an IoU of exactly 1/3 (in float32): onnxruntime keeps box 3 at
    that threshold (it drops an IoU above it), TFLite's kernel alone would drop it."""
    model = nms_model(boxes=4, maximum=4, iou=float(np.float32(1 / 3)), threshold=None)
    boxes = np.array([[[0, 0, 1, 1], [2, 2, 3, 3], [0, 0, 1, 1.2], [0.5, 0, 1.5, 1]]], np.float32)
    scores = np.array([[[0.9, 0.8, 0.7, 0.6]]], np.float32)
    assert_matches_onnxruntime(model, {"boxes": boxes, "scores": scores}, rtol=0, atol=0)


def _yolo_head(agnostic: bool, anchors: int = 60):
    """A YOLOv8 export's output0 [1, 4 + 3, anchors] (here the graph input itself), with NMS
    appended as deployment scripts append it (bench/trained_models/yolo_nms.py)."""
    import onnx

    from bench.trained_models.yolo_nms import with_nms

    head = make_model([helper.make_node("Identity", ["x"], ["output0"])],
                      {"x": (F, (1, 7, anchors))}, {"output0": F}, opset=17)
    return onnx.load_from_string(with_nms(head.SerializeToString(), agnostic))


@pytest.mark.parametrize("agnostic", [False, True])
def test_a_yolo_head_with_nms_appended_matches_at_every_count(agnostic):
    """Per class on (cx, cy, w, h) boxes (center_point_box 1), or class-agnostic on corners with
    the best class's ReduceMax score and ArgMax label: boxes, scores and labels of the kept,
    their count the values' (many kept, few, none above the 0.25 threshold)."""
    model = _yolo_head(agnostic)
    rng = np.random.default_rng(4)
    for spread, top in ((320, 1.0), (60, 1.0), (320, 0.2)):
        centres = rng.uniform(0, spread, (1, 2, 60))
        sizes = rng.uniform(10, 60, (1, 2, 60))
        scores = rng.uniform(0, top, (1, 3, 60))
        x = np.concatenate([centres, sizes, scores], 1).astype(np.float32)
        assert_matches_onnxruntime(model, {"x": x}, rtol=0, atol=0)
