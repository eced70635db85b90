"""yolov8-shapes with NMS in the graph: the trained YOLOv8-style detector (detector.py) with
ONNX's NonMaxSuppression appended, as deployment scripts append it to a YOLOv8 export, in the two
forms they write:

- yolov8-shapes-nms: per class, the (cx, cy, w, h) boxes as the head gives them
  (center_point_box 1) against each class's scores;
- yolov8-shapes-nms-agnostic: class-agnostic (ultralytics' agnostic_nms): corners first, the
  best class's score (ReduceMax) and its ArgMax label.

Outputs boxes [K, 4] (x1, y1, x2, y2 pixels), scores [K] and labels [K] int64 of the K boxes
kept: K is decided by the values, so the .tflite's outputs resize when it runs. The score
threshold (detector.SCORE_THRESHOLD) and NMS_IOU are in the node, at most NMS_LIMIT boxes a
class. Its own module, so that detector.py's cache key (its file) stays the same.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from . import common, detector, train

NMS_LIMIT, NMS_IOU = 100, 0.5


def with_nms(model: bytes, agnostic: bool) -> bytes:
    """The exported detector's ONNX bytes with NMS appended (module docstring)."""
    import onnx
    from onnx import helper, numpy_helper

    proto = onnx.load_from_string(model)
    graph, pred = proto.graph, proto.graph.output[0].name
    consts = {"lo4": [0], "hi4": [4], "lo_s": [4], "hi_s": [4 + detector.CLASSES], "axis1": [1],
              "two": [2, 2], "zero": [0], "box_col": [2], "cls_col": [1], "limit": [NMS_LIMIT]}
    for name, values in consts.items():
        graph.initializer.append(numpy_helper.from_array(np.array(values, np.int64), name))
    for name, value in (("iou", NMS_IOU), ("threshold", detector.SCORE_THRESHOLD), ("half", 0.5)):
        graph.initializer.append(numpy_helper.from_array(np.array([value], np.float32), name))
    node = helper.make_node
    nodes = [node("Slice", [pred, "lo4", "hi4", "axis1"], ["cxcywh_t"]),
             node("Transpose", ["cxcywh_t"], ["cxcywh"], perm=[0, 2, 1]),
             node("Slice", [pred, "lo_s", "hi_s", "axis1"], ["class_scores"]),
             node("Split", ["cxcywh", "two"], ["centre", "size"], axis=2),
             node("Mul", ["size", "half"], ["half_size"]),
             node("Sub", ["centre", "half_size"], ["top_left"]),
             node("Add", ["centre", "half_size"], ["bottom_right"]),
             node("Concat", ["top_left", "bottom_right"], ["corners"], axis=2),
             node("Squeeze", ["corners", "zero"], ["all_boxes"])]
    nodes += _selection(agnostic)
    graph.node.extend(nodes)
    del graph.output[:]
    graph.output.extend([helper.make_tensor_value_info("boxes", onnx.TensorProto.FLOAT, ["K", 4]),
                         helper.make_tensor_value_info("scores", onnx.TensorProto.FLOAT, ["K"]),
                         helper.make_tensor_value_info("labels", onnx.TensorProto.INT64, ["K"])])
    onnx.checker.check_model(proto)
    return proto.SerializeToString()


def _selection(agnostic: bool) -> list:
    """The NonMaxSuppression and the gathers of what it keeps (with_nms)."""
    from onnx import helper

    node = helper.make_node
    if agnostic:
        nodes = [node("ReduceMax", ["class_scores"], ["nms_scores"], axes=[1], keepdims=1),  # opset 17
                 node("ArgMax", ["class_scores"], ["best_class"], axis=1, keepdims=0),
                 node("NonMaxSuppression", ["corners", "nms_scores", "limit", "iou", "threshold"],
                      ["selected"])]
    else:
        nodes = [node("Identity", ["class_scores"], ["nms_scores"]),
                 node("NonMaxSuppression", ["cxcywh", "nms_scores", "limit", "iou", "threshold"],
                      ["selected"], center_point_box=1)]
    nodes += [node("Gather", ["selected", "box_col"], ["box_index_2d"], axis=1),
              node("Squeeze", ["box_index_2d", "axis1"], ["box_index"]),
              node("Gather", ["all_boxes", "box_index"], ["boxes"], axis=0),
              node("GatherND", ["nms_scores", "selected"], ["scores"])]
    if agnostic:
        return nodes + [node("Squeeze", ["best_class", "zero"], ["classes"]),
                        node("Gather", ["classes", "box_index"], ["labels"], axis=0)]
    return nodes + [node("Gather", ["selected", "cls_col"], ["label_2d"], axis=1),
                    node("Squeeze", ["label_2d", "axis1"], ["labels"])]


def decode(outputs: dict) -> list:
    """with_nms's outputs per sample (lists where K differs) -> [n, 5] (class, x1, y1, x2, y2),
    best first, as detector.decode gives them."""
    found = []
    for boxes, scores, labels in zip(outputs["boxes"], outputs["scores"], outputs["labels"]):
        order = np.argsort(-np.asarray(scores).ravel(), kind="stable")
        rows = np.concatenate([np.asarray(labels, np.float32).reshape(-1, 1),
                               np.asarray(boxes, np.float32).reshape(-1, 4)], 1)
        found.append(rows[order])
    return found


def _onnx(agnostic: bool) -> Path:
    source = train.onnx_path(detector.RECIPE)
    name = detector.RECIPE.name + ("-nms-agnostic" if agnostic else "-nms")
    key = common.digest(source, Path(__file__))
    return common.cached(name, key, ".onnx", lambda: with_nms(source.read_bytes(), agnostic))


def _spec(agnostic: bool) -> common.Spec:
    base = detector.SPECS[0]
    form = "class-agnostic, corners" if agnostic else "per class, center_point_box 1"
    return common.Spec(
        name=detector.RECIPE.name + ("-nms-agnostic" if agnostic else "-nms"), kind="boxes",
        metric=base.metric, structure=f"yolov8-shapes with ONNX NonMaxSuppression appended ({form})",
        data_text=base.data_text, source=base.source, onnx=lambda: _onnx(agnostic),
        data=base.data, decode=decode, info=base.info)


SPECS = [_spec(False), _spec(True)]
