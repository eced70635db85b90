"""NonMaxSuppression: one NON_MAX_SUPPRESSION_V4 per batch and class, compacted into ONNX's rows.

ONNX's NonMaxSuppression(boxes [B, N, 4], scores [B, C, N], max_output_boxes_per_class,
iou_threshold, score_threshold) returns [num_selected, 3] rows (batch, class, box), batch first,
then class, then the selection order (score descending), num_selected known only when it runs.
TFLite's NON_MAX_SUPPRESSION_V4 (tensorflow/lite/kernels/non_max_suppression.cc) takes one
batch's boxes [N, 4] as two corners (y1, x1, y2, x2; either diagonal, as ONNX's center_point_box
0: its IoU takes each box's min and max) and one class's scores [N], and writes a fixed
max_output_size of indices, padded after a count of valid ones. So, per (batch, class): its
boxes (GATHER, or the center format [xc, yc, w, h] turned into corners first) and scores, the
op, then rows [batch, class, index] for all max_output_size places and a mask of the valid ones
(LESS of the places and the count); every pair's rows and masks end to end, in ONNX's order,
and WHERE of the mask with GATHER_ND of the rows it points at: the valid rows, as many as there
are. Their count is a dimension the values decide (registry.RUN_TIME): the loader sizes it as a
dynamic dimension (onnx/dynamic_dims.py) and the interpreter resizes what follows.

Both kernels keep a box whose score is above score_threshold (none: every box); onnxruntime
drops one whose IoU with a kept box is above iou_threshold, TFLite's kernel one whose IoU
reaches it (_selection says how they are made to agree). max_output_boxes_per_class, iou_threshold and
score_threshold must be constants (TFLite's output size is fixed by the first); a zero maximum
selects nothing, a constant [0, 3], and a missing one is refused (it would select nothing too).
"""

from __future__ import annotations

import numpy as np

from .registry import RUN_TIME, onnx_op, onnx_types, tflite_op

tflite_op("NON_MAX_SUPPRESSION_V4", options="NonMaxSuppressionV4Options")


def _maximum(value, boxes: int) -> int:
    """max_output_boxes_per_class as the op uses it: at most the boxes there are."""
    return int(min(max(int(np.ravel(value)[0]), 0), boxes)) if np.size(value) else 0


@onnx_types("NonMaxSuppression", values=True, run_time=True)
def _nms_types(shapes, dtypes, attrs, values):
    if shapes[0] is None:
        return [None]
    given = values[2] if len(values) > 2 else None
    count = 0 if given is not None and _maximum(given, shapes[0][1]) == 0 else RUN_TIME
    return [((count, 3), np.int64)]


def _scalar(ctx, node, k: int, what: str, default: float) -> float:
    name = node.inputs[k] if len(node.inputs) > k else ""
    if not name:
        return default
    value = ctx.require_const(name, what, "TFLite's NON_MAX_SUPPRESSION_V4 takes it as a constant "
                                          "(its output size is fixed when the model is built)")
    if np.size(value) != 1:
        raise ctx.error(f"{what} has {np.size(value)} values, not one")
    return float(np.ravel(value)[0])


def _corner_boxes(ctx, boxes: str, center: bool) -> str:
    """The boxes as TFLite's corners: ONNX's corners as they are; [xc, yc, w, h] (center_point_box
    1) as [yc - h/2, xc - w/2, yc + h/2, xc + w/2]."""
    if not center:
        return boxes
    shape, last = ctx.shape(boxes), len(ctx.shape(boxes)) - 1
    centers = ctx.tensor(boxes + "_yx", shape, np.float32)
    ctx.add_op("GATHER", [boxes, ctx.constant("centers", np.array([1, 0, 1, 0], np.int32))], [centers],
               {"axis": last})
    sizes = ctx.tensor(boxes + "_hw", shape, np.float32)
    ctx.add_op("GATHER", [boxes, ctx.constant("sizes", np.array([3, 2, 3, 2], np.int32))], [sizes],
               {"axis": last})
    halves = ctx.tensor(boxes + "_halves", shape, np.float32)
    ctx.add_op("MUL", [sizes, ctx.constant("halves", np.array([-0.5, -0.5, 0.5, 0.5], np.float32))], [halves])
    corners = ctx.tensor(boxes + "_corners", shape, np.float32)
    ctx.add_op("ADD", [centers, halves], [corners])
    return corners


def _pick(ctx, x: str, index: int, shape: tuple) -> str:
    """x[index] along axis 0 (GATHER with a scalar index)."""
    out = ctx.tensor(f"{x}_{index}", shape, np.float32)
    ctx.add_op("GATHER", [x, ctx.constant("index", np.int32(index))], [out], {"axis": 0})
    return out


def _selection(ctx, y: str, boxes: str, scores: str, limits: tuple) -> tuple[str, str]:
    """One (batch, class)'s selected box indices [maximum] int32 and the mask of the valid ones.
    TFLite's kernel drops a box whose IoU reaches iou_threshold, onnxruntime one whose IoU passes
    it: the next float32 above it makes them agree. At 1 or more onnxruntime drops none, which
    the kernel cannot say (above 1 it selects garbage): the top scores (TOPK_V2) above
    score_threshold then."""
    maximum, iou, threshold = limits
    indices = ctx.tensor(f"{y}_indices", (maximum,), np.int32)
    valid = ctx.tensor(f"{y}_valid", (maximum,), np.bool_)
    if iou >= 1:
        top = ctx.tensor(f"{y}_top", (maximum,), np.float32)
        ctx.add_op("TOPK_V2", [scores, ctx.constant("k", np.int32(maximum))], [top, indices])
        ctx.add_op("GREATER", [top, ctx.constant("threshold", np.float32(threshold))], [valid])
        return indices, valid
    count = ctx.tensor(f"{y}_count", (), np.int32)
    ctx.add_op("NON_MAX_SUPPRESSION_V4", [boxes, scores, ctx.constant("max", np.int32(maximum)),
                                          ctx.constant("iou", np.nextafter(np.float32(iou), np.float32(2))),
                                          ctx.constant("threshold", np.float32(threshold))],
               [indices, count])
    ctx.add_op("LESS", [ctx.constant("places", np.arange(maximum, dtype=np.int32)), count], [valid])
    return indices, valid


def _pair_rows(ctx, y: str, indices: str, b: int, c: int, maximum: int) -> str:
    """Rows [maximum, 3] int32 of (batch, class, index) for one pair's selected indices."""
    column = ctx.tensor(f"{y}_column", (maximum, 1), np.int32)
    ctx.add_op("RESHAPE", [indices, ctx.constant("shape", np.array([maximum, 1], np.int32))], [column])
    rows = ctx.tensor(f"{y}_rows", (maximum, 3), np.int32)
    pair = ctx.constant("pair", np.tile(np.array([[b, c]], np.int32), (maximum, 1)))
    ctx.add_op("CONCATENATION", [pair, column], [rows], {"axis": 1})
    return rows


@onnx_op("NonMaxSuppression")
def import_non_max_suppression(node, ctx):
    boxes, scores, y = node.inputs[0], node.inputs[1], node.outputs[0]
    batches, n, _ = ctx.shape(boxes)
    classes = ctx.shape(scores)[1]
    if len(node.inputs) < 3 or not node.inputs[2]:
        raise ctx.error("has no max_output_boxes_per_class: ONNX's NonMaxSuppression then selects "
                        "no box")
    maximum = _maximum(ctx.require_const(node.inputs[2], "max_output_boxes_per_class", "TFLite's "
                                         "NON_MAX_SUPPRESSION_V4 writes a fixed number of indices"), n)
    iou = _scalar(ctx, node, 3, "iou_threshold", 0.0)
    if not 0 <= iou <= 1:
        raise ctx.error(f"iou_threshold {iou:g} is outside [0, 1], which TFLite's kernel requires")
    threshold = _scalar(ctx, node, 4, "score_threshold", -np.inf)
    if maximum == 0:
        ctx.set_constant(y, np.zeros((0, 3), np.int64))
        return
    corners = _corner_boxes(ctx, boxes, bool(node.attr("center_point_box", 0)))
    rows, masks = [], []
    for b in range(batches):
        batch_boxes = _pick(ctx, corners, b, (n, 4))
        batch_scores = _pick(ctx, scores, b, (classes, n))
        for c in range(classes):
            indices, valid = _selection(ctx, y, batch_boxes, _pick(ctx, batch_scores, c, (n,)),
                                        (maximum, iou, threshold))
            rows.append(_pair_rows(ctx, y, indices, b, c, maximum))
            masks.append(valid)
    every_row = ctx.tensor(y + "_every_row", (len(rows) * maximum, 3), np.int32)
    ctx.add_op("CONCATENATION", rows, [every_row], {"axis": 0})
    every_mask = ctx.tensor(y + "_every_valid", (len(rows) * maximum,), np.bool_)
    ctx.add_op("CONCATENATION", masks, [every_mask], {"axis": 0})
    selected = ctx.tensor(y + "_selected", (ctx.shape(y)[0], 1), np.int64)
    ctx.add_op("WHERE", [every_mask], [selected])
    ctx.add_op("GATHER_ND", [every_row, selected], [y])
