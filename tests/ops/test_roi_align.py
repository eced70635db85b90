"""RoiAlign (qconvert/ops/roi_align.py) against onnxruntime: both coordinate transformations
(half_pixel; output_half_pixel, opset 10's only one), sampling ratios 1, 2 and 3, output sizes
1x1, 7x7 and 2x3, spatial scales 1 and 1/16, boxes partly or wholly outside the image and
degenerate ones (x1 > x2, a point), a batch of two images, max mode as onnxruntime computes it
(the largest weighted corner); a box count that NonZero decides, one file at every count (zero
too), and a dynamic image size, one file at every size; one-line refusals of the adaptive
sampling ratio and of unknown modes."""

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests import processes
from tests.harness import (assert_matches_onnxruntime, assert_refused_in_one_line, convert_proto,
                           make_model, run_onnxruntime, run_tflite)

F, I64 = TensorProto.FLOAT, TensorProto.INT64
QCONVERT = str(Path(sys.executable).parent / "qconvert")
X_SHAPE = (2, 3, 6, 8)
# (x1, y1, x2, y2) in pixels of the 6x8 feature map: inside, partly outside on every side,
# degenerate (x1 > x2, y1 > y2), a point, wholly outside (every sample weighs 0).
BOXES = np.array([[0.0, 0.0, 7.0, 5.0], [-3.0, -2.0, 4.0, 9.0], [5.0, 4.0, 1.0, 2.0],
                  [2.3, 1.1, 6.7, 5.2], [7.0, 5.0, 12.0, 9.0], [3.5, 2.5, 3.5, 2.5],
                  [-0.6, -0.9, 0.4, 0.2], [20.0, 20.0, 30.0, 30.0]], np.float32)
BATCH = np.array([0, 1, 1, 0, 1, 0, 1, 0], np.int64)
# Which transformation each case names: opset 10 has no attribute (output_half_pixel).
CASES = [(10, None), (16, "half_pixel"), (16, "output_half_pixel")]


def roi_align_model(opset, transform=None, count=len(BOXES), **attrs):
    if transform is not None:
        attrs["coordinate_transformation_mode"] = transform
    node = helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], **attrs)
    return make_model([node], {"x": (F, X_SHAPE), "rois": (F, (count, 4)), "batch": (I64, (count,))},
                      {"y": F}, opset=opset)


def feeds(scale=1.0, seed=0):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal(X_SHAPE).astype(np.float32),
            "rois": (BOXES / np.float32(scale)).astype(np.float32), "batch": BATCH}


@pytest.mark.parametrize("scale", [1.0, 1 / 16])
@pytest.mark.parametrize("output", [(1, 1), (7, 7), (2, 3)])
@pytest.mark.parametrize("ratio", [1, 2, 3])
@pytest.mark.parametrize("opset, transform", CASES)
def test_roi_align_avg(opset, transform, ratio, output, scale):
    model = roi_align_model(opset, transform, sampling_ratio=ratio, output_height=output[0],
                            output_width=output[1], spatial_scale=scale)
    inputs = feeds(scale, seed=ratio)
    expected = run_onnxruntime(model, inputs)["y"]
    assert not expected[-1].any() and expected[0].all()  # the box outside is 0, the one inside not
    assert_matches_onnxruntime(model, inputs, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("ratio", [1, 2, 3])
@pytest.mark.parametrize("opset, transform", CASES)
def test_roi_align_max_takes_the_largest_weighted_corner(opset, transform, ratio):
    """onnxruntime's max mode: the maximum over the samples of the largest of each sample's
    four weighted corners (not of the interpolated values): the same products, compared, so the
    results are equal to the bit."""
    model = roi_align_model(opset, transform, mode="max", sampling_ratio=ratio, output_height=2,
                            output_width=3, spatial_scale=1 / 16)
    assert_matches_onnxruntime(model, feeds(1 / 16, seed=ratio + 10), rtol=0, atol=0)


def _selected_boxes_model():
    """RoiAlign of the boxes (and their images) that NonZero of `keep` selects: torchvision's
    boxes of one pyramid level."""
    nodes = [helper.make_node("NonZero", ["keep"], ["nz"]),
             helper.make_node("Squeeze", ["nz", "axis"], ["picked"]),
             helper.make_node("Gather", ["boxes", "picked"], ["rois"], axis=0),
             helper.make_node("Gather", ["images", "picked"], ["batch"], axis=0),
             helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], sampling_ratio=2,
                              output_height=7, output_width=7, spatial_scale=1 / 16,
                              coordinate_transformation_mode="output_half_pixel")]
    count = len(BOXES)
    model = make_model(nodes, {"x": (F, X_SHAPE), "boxes": (F, (count, 4)), "keep": (F, (count,)),
                               "images": (I64, (count,))}, {"y": F},
                       {"axis": np.array([0], np.int64)}, opset=16)
    return model


def test_a_box_count_nonzero_decides_runs_in_one_file_at_every_count():
    """One .tflite, run at 3, 0, 8 and 1 boxes, matches onnxruntime at each."""
    model = _selected_boxes_model()
    count = len(BOXES)
    flatbuffer, report = convert_proto(model)
    inputs = feeds(1 / 16, seed=3)
    inputs = {"x": inputs["x"], "boxes": inputs["rois"], "images": BATCH}
    for keep in ([1, 0, 1, 1, 0, 0, 0, 0], [0] * count, [1] * count, [0, 0, 0, 0, 0, 0, 1, 0]):
        inputs["keep"] = np.array(keep, np.float32)
        expected = run_onnxruntime(model, inputs)["y"]
        actual = run_tflite(flatbuffer, report, inputs)["y"]
        assert actual.shape == expected.shape == (sum(keep), 3, 7, 7)
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6)


def test_the_cli_check_passes_on_samples_that_keep_no_box(tmp_path):
    """The check of a written file on --verify-data samples that keep no box (an empty output on
    every sample: a pyramid level no box maps to, in Faster R-CNN) exits 0."""
    model = _selected_boxes_model()
    onnx.save(model, tmp_path / "m.onnx")
    inputs = feeds(1 / 16, seed=4)
    keep = np.zeros((2, len(BOXES)), np.float32)
    np.savez(tmp_path / "d.npz", x=np.stack([inputs["x"]] * 2), boxes=np.stack([inputs["rois"]] * 2),
             keep=keep, images=np.stack([BATCH] * 2))
    done = processes.run([QCONVERT, "m.onnx", "m.tflite", "--verify-data", "d.npz"],
                         capture_output=True, text=True, cwd=tmp_path, cpu_seconds=120)
    assert done.returncode == 0 and "verify: float" in done.stdout + done.stderr, done.stderr


def test_a_dynamic_image_size_stays_resizable():
    """The feature map's height and width dynamic: read by SHAPE when the model runs, so one
    .tflite (written at 64 x 64) matches onnxruntime at 6 x 8, 11 x 5 and 64 x 64."""
    node = helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], sampling_ratio=2,
                            output_height=2, output_width=3, spatial_scale=1 / 16)
    count = len(BOXES)
    model = make_model([node], {"x": (F, (2, 3, "H", "W")), "rois": (F, (count, 4)),
                                "batch": (I64, (count,))}, {"y": F}, opset=16)
    flatbuffer, report = convert_proto(model)
    rng = np.random.default_rng(7)
    for height, width in ((6, 8), (11, 5), (64, 64)):
        inputs = {"x": rng.standard_normal((2, 3, height, width)).astype(np.float32),
                  "rois": BOXES * np.float32(16 * max(height, width) / 8), "batch": BATCH}
        expected = run_onnxruntime(model, inputs)["y"]
        actual = run_tflite(flatbuffer, report, inputs)["y"]
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("attrs, match", [
    ({}, "sampling_ratio 0 is adaptive"),
    ({"sampling_ratio": 2, "mode": "median"}, "'median' .* is not a RoiAlign mode"),
    ({"sampling_ratio": 2, "coordinate_transformation_mode": "align_corners"},
     "'align_corners' is not a RoiAlign mode"),
])
def test_refusals_are_one_line(attrs, match):
    model = roi_align_model(16, **attrs)
    assert_refused_in_one_line(model, match)
