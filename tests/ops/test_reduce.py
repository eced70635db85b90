"""ReduceMean/Sum/Max/Min/Prod/L2/SumSquare (qconvert/ops/reduce.py) whose axes are computed at
run time: refused in one line naming the node and the input, by the importer when the model
declares the output's shape, else by the loader (shape inference finds none)."""

from __future__ import annotations

import pytest
from onnx import TensorProto, helper

from tests.test_validate import _assert_refused, _convert


def _model(declared: bool):
    graph = helper.make_graph(
        [helper.make_node("ReduceSum", ["x", "a"], ["y"], name="sum", keepdims=1)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4]),
         helper.make_tensor_value_info("a", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 4, 4] if declared else None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.mark.parametrize("declared", [False, True])
def test_computed_axes_are_refused_in_one_line(tmp_path, declared):
    model = _model(declared)
    result, source, out = _convert(tmp_path, model)
    if declared:
        fragments = ["node 'sum' (ReduceSum): reduction axes (input 'a'): a graph input, fed at run time",
                     "the output's shape follows from them", "make them an initializer"]
    else:
        fragments = ["tensor 'y' (output of node 'sum' (ReduceSum)) has no static shape"]
    _assert_refused(result, source, model.SerializeToString(), out, fragments)


@pytest.mark.parametrize("op_type", ["ReduceL1", "ReduceLogSum", "ReduceLogSumExp"])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_composed_reductions(op_type, keepdims):
    """ReduceLogSumExp on values up to 200, where exp alone overflows float32: the max is
    subtracted first, as onnxruntime does."""
    import numpy as np

    from tests.harness import assert_matches_onnxruntime, make_model

    model = make_model([helper.make_node(op_type, ["x"], ["y"], axes=[1, 2], keepdims=keepdims)],
                       {"x": (TensorProto.FLOAT, [2, 3, 4, 5])}, {"y": TensorProto.FLOAT})
    rng = np.random.default_rng(3)
    x = rng.uniform(0.1, 3, (2, 3, 4, 5)).astype(np.float32)
    if op_type == "ReduceLogSumExp":
        x = x * 70
    assert_matches_onnxruntime(model, {"x": x})
