"""MaxUnpool (qconvert/ops/max_unpool.py) against onnxruntime, fed the values and indices a max
pool of an image gives (MaxPool's Indices output itself is not converted, so both are graph inputs
here): several batches and channels, overlapping windows (an element picked twice), an
output_shape larger than the kernel's (undeclared: onnx infers no shape from it, the loader's
per-node types take its value)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.harness import assert_matches_onnxruntime, make_model


def _max_pool(image: np.ndarray, kernel, strides):
    """(values, indices) of a max pool of `image` [N, C, H, W], indices flat over the whole tensor
    as ONNX's MaxPool writes them."""
    n, c, h, w = image.shape
    oh, ow = (h - kernel[0]) // strides[0] + 1, (w - kernel[1]) // strides[1] + 1
    values, indices = np.zeros((n, c, oh, ow), np.float32), np.zeros((n, c, oh, ow), np.int64)
    for i in range(oh):
        for j in range(ow):
            top, left = i * strides[0], j * strides[1]
            window = image[:, :, top:top + kernel[0], left:left + kernel[1]].reshape(n, c, -1)
            best = window.argmax(axis=-1)
            rows, cols = top + best // kernel[1], left + best % kernel[1]
            values[:, :, i, j] = window.max(axis=-1)
            indices[:, :, i, j] = (np.arange(n)[:, None] * c + np.arange(c)[None]) * h * w + rows * w + cols
    return values, indices


@pytest.mark.parametrize("image_shape,kernel,strides,output_shape", [
    ((2, 3, 6, 8), (2, 2), (2, 2), None),
    ((1, 2, 7, 7), (3, 3), (2, 2), None),
    ((1, 2, 5, 7), (2, 2), (2, 2), (1, 2, 5, 7)),
])
def test_max_unpool(image_shape, kernel, strides, output_shape):
    rng = np.random.default_rng(9)
    image = rng.permutation(np.prod(image_shape)).reshape(image_shape).astype(np.float32)  # no ties
    values, indices = _max_pool(image, kernel, strides)
    node = helper.make_node("MaxUnpool", ["x", "i"] + (["s"] if output_shape else []), ["y"],
                            kernel_shape=list(kernel), strides=list(strides))
    inits = {"s": np.array(output_shape, np.int64)} if output_shape else {}
    model = make_model([node], {"x": (TensorProto.FLOAT, values.shape), "i": (TensorProto.INT64, values.shape)},
                       {"y": TensorProto.FLOAT}, inits, opset=11)
    _, report = assert_matches_onnxruntime(model, {"x": values, "i": indices}, io_layout="onnx")
    assert "SCATTER_ND" in report.op_counts
