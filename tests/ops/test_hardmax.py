"""Hardmax (qconvert/ops/argmax.py) against onnxruntime: every axis at opset 13 (the axis alone)
and at opset 11 (the input coerced to 2-D around the axis), ties (the first maximum wins), after a
Conv (the layout pass remaps ARG_MAX's and ONE_HOT's axes)."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.harness import assert_matches_onnxruntime, conv_in_front, make_model

RNG = np.random.default_rng(9)
SHAPE = (2, 3, 4, 5)


def hardmax_model(shape, axis, opset):
    attrs = {} if axis is None else {"axis": axis}
    return make_model([helper.make_node("Hardmax", ["x"], ["y"], **attrs)],
                      {"x": (TensorProto.FLOAT, shape)}, {"y": TensorProto.FLOAT}, opset=opset)


def ties(shape):
    """Few distinct values, so that most rows hold their maximum more than once."""
    return RNG.integers(0, 3, shape).astype(np.float32)


@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("axis", [None, 0, 1, 2, 3, -1, -2])
def test_hardmax(axis, opset):
    model = hardmax_model(SHAPE, axis, opset)
    assert_matches_onnxruntime(model, {"x": RNG.standard_normal(SHAPE).astype(np.float32)}, rtol=0, atol=0)
    assert_matches_onnxruntime(model, {"x": ties(SHAPE)}, rtol=0, atol=0)


@pytest.mark.parametrize("opset", [11, 13])
def test_hardmax_after_conv(opset):
    node, w = conv_in_front((1, 3, 6, 7), 4)
    model = make_model([node, helper.make_node("Hardmax", ["fm"], ["y"], axis=1)],
                       {"x": (TensorProto.FLOAT, (1, 3, 6, 7))}, {"y": TensorProto.FLOAT}, opset=opset)
    model.graph.initializer.append(w)
    assert_matches_onnxruntime(model, {"x": RNG.standard_normal((1, 3, 6, 7)).astype(np.float32)},
                               rtol=0, atol=0)
