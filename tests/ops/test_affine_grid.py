"""AffineGrid (qconvert/ops/affine_grid.py) against onnxruntime: 2-D and 3-D, both align_corners,
sizes of 1 too; a size computed at run time is refused in one line."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.harness import assert_matches_onnxruntime, assert_refused_in_one_line, make_model

F = TensorProto.FLOAT


def _model(theta_shape, size, align_corners):
    node = helper.make_node("AffineGrid", ["theta", "size"], ["grid"], align_corners=align_corners)
    return make_model([node], {"theta": (F, theta_shape)}, {"grid": F},
                      {"size": np.array(size, np.int64)}, opset=20)


@pytest.mark.parametrize("align_corners", [0, 1])
@pytest.mark.parametrize("theta_shape,size", [((2, 2, 3), (2, 3, 5, 7)), ((1, 2, 3), (1, 1, 2, 4)),
                                              ((2, 3, 4), (2, 1, 3, 4, 5)), ((1, 3, 4), (1, 2, 2, 2, 3))])
def test_affine_grid(theta_shape, size, align_corners):
    rng = np.random.default_rng(20)
    feeds = {"theta": rng.standard_normal(theta_shape).astype(np.float32)}
    _, report = assert_matches_onnxruntime(_model(theta_shape, size, align_corners), feeds)
    assert report.op_counts.get("BATCH_MATMUL") == 1


@pytest.mark.parametrize("theta_shape,size", [((1, 2, 3), (1, 1, 1, 4)), ((1, 3, 4), (1, 2, 3, 2, 1))])
def test_size_1_is_exact_without_align_corners_and_refused_with_it(theta_shape, size):
    feeds = {"theta": np.random.default_rng(22).standard_normal(theta_shape).astype(np.float32)}
    assert_matches_onnxruntime(_model(theta_shape, size, 0), feeds)
    assert_refused_in_one_line(_model(theta_shape, size, 1), "align_corners with a spatial size of 1")


def test_affine_grid_feeds_grid_sample():
    """The grid a spatial transformer samples with: AffineGrid then GridSample."""
    rng = np.random.default_rng(21)
    nodes = [helper.make_node("AffineGrid", ["theta", "size"], ["grid"]),
             helper.make_node("GridSample", ["x", "grid"], ["y"])]
    model = make_model(nodes, {"x": (F, (2, 3, 6, 5)), "theta": (F, (2, 2, 3))}, {"y": F},
                       {"size": np.array([2, 3, 4, 4], np.int64)}, opset=20)
    feeds = {"x": rng.standard_normal((2, 3, 6, 5)).astype(np.float32),
             "theta": (np.eye(2, 3) * 0.8 + rng.standard_normal((2, 2, 3)) * 0.1).astype(np.float32)}
    assert_matches_onnxruntime(model, feeds, io_layout="onnx")


def test_computed_size_is_refused():
    node = helper.make_node("AffineGrid", ["theta", "size"], ["grid"])
    model = make_model([node], {"theta": (F, (1, 2, 3)), "size": (TensorProto.INT64, (4,))}, {"grid": F},
                       opset=20)
    assert_refused_in_one_line(model, "size|static shape")
