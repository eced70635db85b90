"""TensorScatter (qconvert/ops/tensor_scatter.py) against onnxruntime: linear and circular writes
into a KV cache, write indices fed at run time, constant or absent, 3-D and 4-D caches."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.harness import assert_matches_onnxruntime, make_model

F = TensorProto.FLOAT


@pytest.mark.parametrize("mode,written", [("linear", [0, 2, 5]), ("circular", [4, 6, 1])])
@pytest.mark.parametrize("indices", ["input", "constant", "absent"])
@pytest.mark.parametrize("cache_shape,update_shape,axis", [((3, 7, 4), (3, 2, 4), -2),
                                                           ((3, 2, 7, 4), (3, 2, 2, 4), 2)])
def test_tensor_scatter(cache_shape, update_shape, axis, indices, mode, written):
    rng = np.random.default_rng(24)
    inputs = {"past": (F, cache_shape), "update": (F, update_shape)}
    inits, names = {}, ["past", "update"]
    if indices == "input":
        inputs["w"] = (TensorProto.INT64, (3,))
        names.append("w")
    elif indices == "constant":
        inits["w"] = np.array(written, np.int64)
        names.append("w")
    node = helper.make_node("TensorScatter", names, ["y"], mode=mode, axis=axis)
    model = make_model([node], inputs, {"y": F}, inits, opset=24)
    feeds = {"past": rng.standard_normal(cache_shape).astype(np.float32),
             "update": rng.standard_normal(update_shape).astype(np.float32)}
    if indices == "input":
        feeds["w"] = np.array(written, np.int64)
    _, report = assert_matches_onnxruntime(model, feeds, io_layout="onnx")
    assert report.op_counts.get("GATHER") == 1
