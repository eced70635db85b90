"""Col2Im (qconvert/ops/col2im.py) against onnxruntime: blocks, strides (dividing the span or
not), dilations, pads, several channels and batches; a 3-D image is refused in one line."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.harness import assert_matches_onnxruntime, assert_refused_in_one_line, make_model

F = TensorProto.FLOAT


def _blocks(image, block, strides, dilations, pads):
    return [(i + pads[a] + pads[a + 2] - ((k - 1) * d + 1)) // s + 1
            for a, (i, k, s, d) in enumerate(zip(image, block, strides, dilations))]


@pytest.mark.parametrize("batch,channels,image,block,strides,dilations,pads", [
    (1, 1, (5, 5), (2, 2), (1, 1), (1, 1), (0, 0, 0, 0)),
    (2, 3, (6, 7), (3, 2), (2, 1), (1, 1), (0, 0, 0, 0)),
    (1, 2, (7, 8), (3, 3), (2, 3), (1, 1), (1, 0, 1, 2)),
    (2, 1, (9, 6), (2, 3), (1, 2), (2, 1), (0, 1, 0, 1)),
])
def test_col2im(batch, channels, image, block, strides, dilations, pads):
    oh, ow = _blocks(image, block, strides, dilations, pads)
    shape = (batch, channels * block[0] * block[1], oh * ow)
    node = helper.make_node("Col2Im", ["x", "image_shape", "block_shape"], ["y"], strides=list(strides),
                            dilations=list(dilations), pads=list(pads))
    model = make_model([node], {"x": (F, shape)}, {"y": F},
                       {"image_shape": np.array(image, np.int64), "block_shape": np.array(block, np.int64)},
                       opset=18)
    assert_matches_onnxruntime(model, io_layout="onnx")


def test_3d_image_is_refused():
    node = helper.make_node("Col2Im", ["x", "image_shape", "block_shape"], ["y"])
    model = make_model([node], {"x": (F, (1, 8, 8))}, {"y": F},
                       {"image_shape": np.array([3, 3, 3], np.int64), "block_shape": np.array([2, 2, 2], np.int64)},
                       opset=18)
    assert_refused_in_one_line(model, "only 2-D images")
