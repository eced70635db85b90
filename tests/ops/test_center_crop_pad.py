"""CenterCropPad (qconvert/ops/center_crop_pad.py) against onnxruntime: crop, pad, both, odd
differences, axes; after a conv too. A target shape computed at run time is refused."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.harness import assert_matches_onnxruntime, assert_refused_in_one_line, conv_in_front, make_model

F = TensorProto.FLOAT


@pytest.mark.parametrize("x_shape,target,axes", [
    ((4, 7, 3), (2, 4, 3), None), ((4, 7, 3), (7, 10, 3), None), ((5, 6, 3), (2, 9, 3), None),
    ((3, 9, 8), (5, 4), (1, 2)), ((3, 9, 8), (4, 11), (-1, -2)), ((2, 5), (2, 5), None)])
def test_center_crop_pad(x_shape, target, axes):
    attrs = {} if axes is None else {"axes": list(axes)}
    node = helper.make_node("CenterCropPad", ["x", "shape"], ["y"], **attrs)
    model = make_model([node], {"x": (F, x_shape)}, {"y": F}, {"shape": np.array(target, np.int64)}, opset=18)
    assert_matches_onnxruntime(model)


def test_center_crop_pad_after_a_conv():
    conv, w = conv_in_front((1, 3, 8, 7), 4)
    node = helper.make_node("CenterCropPad", ["fm", "shape"], ["y"], axes=[2, 3])
    model = make_model([conv, node], {"x": (F, (1, 3, 8, 7))}, {"y": F}, {"shape": np.array([5, 10], np.int64)},
                       opset=18)
    model.graph.initializer.append(w)
    assert_matches_onnxruntime(model)


def test_computed_shape_is_refused():
    node = helper.make_node("CenterCropPad", ["x", "shape"], ["y"])
    model = make_model([node], {"x": (F, (4, 5)), "shape": (TensorProto.INT64, (2,))}, {"y": F}, opset=18)
    assert_refused_in_one_line(model, "shape|static shape")
