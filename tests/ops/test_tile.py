"""Expand -> BROADCAST_TO / RESHAPE / IDENTITY and Tile -> TILE, on plain tensors and on NCHW
feature maps (where the transposes must move through), plus BROADCAST_TO's version."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from qconvert.tflite import schema_generated as S
from tests.harness import assert_matches_onnxruntime, assert_refused_in_one_line, conv_in_front


def _model(op_type, x_shape, target, conv_channels=None, dtype=TensorProto.FLOAT, relu=False):
    """x -> [Conv 3x3 pad 1] -> Expand/Tile(target) -> [Relu] -> y."""
    inits = [numpy_helper.from_array(np.array(target, np.int64), "target")]
    nodes, data = [], "x"
    if conv_channels:
        conv, weights = conv_in_front(x_shape, conv_channels)
        nodes.append(conv)
        inits.append(weights)
        data = "fm"
    nodes.append(helper.make_node(op_type, [data, "target"], ["t" if relu else "y"]))
    if relu:
        nodes.append(helper.make_node("Relu", ["t"], ["y"]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", dtype, x_shape)],
                              [helper.make_tensor_value_info("y", dtype, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _feeds(shape, dtype=np.float32):
    return {"x": (np.random.default_rng(0).standard_normal(shape) * 10).astype(dtype)}


def _op_versions(flatbuffer) -> dict[str, int]:
    model = S.ModelT.InitFromPackedBuf(flatbuffer, 0)
    names = {v: k for k, v in vars(S.BuiltinOperator).items() if not k.startswith("_")}
    return {names[max(c.builtinCode, c.deprecatedBuiltinCode)]: c.version for c in model.operatorCodes}


def test_tile_of_conv_output_leaves_no_transpose():
    model = _model("Tile", [1, 3, 4, 5], [2, 1, 3, 2], conv_channels=6)
    _, report = assert_matches_onnxruntime(model, _feeds([1, 3, 4, 5]))
    assert report.op_counts.get("TILE") == 1
    assert "TRANSPOSE" not in report.op_counts, report.op_counts


def test_tile_plain_int64():
    _, report = assert_matches_onnxruntime(_model("Tile", [2, 3], [3, 2], dtype=TensorProto.INT64),
                                           _feeds([2, 3], np.int64))
    assert report.op_counts.get("TILE") == 1


def test_tile_by_ones_is_removed():
    _, report = assert_matches_onnxruntime(_model("Tile", [2, 3], [1, 1], relu=True), _feeds([2, 3]))
    assert report.op_counts == {"RELU": 1}


def test_expand_of_conv_output_leaves_no_transpose():
    # [1, 6, 4, 5] (channel-pooled to [1, 1, 4, 5]) broadcast over batch and channels.
    graph_model = _model("Expand", [1, 3, 4, 5], [2, 6, 4, 5], conv_channels=1)
    flatbuffer, report = assert_matches_onnxruntime(graph_model, _feeds([1, 3, 4, 5]))
    assert report.op_counts.get("BROADCAST_TO") == 1
    assert "TRANSPOSE" not in report.op_counts, report.op_counts
    assert _op_versions(flatbuffer)["BROADCAST_TO"] == 2


@pytest.mark.parametrize("x_shape,target", [([3, 1], [2, 3, 4]), ([4, 1, 5], [1, 3, 1]),
                                            ([2, 1], [2, 1, 6])])
def test_expand_plain_bidirectional_broadcast(x_shape, target):
    _, report = assert_matches_onnxruntime(_model("Expand", x_shape, target), _feeds(x_shape))
    assert report.op_counts.get("BROADCAST_TO") == 1


def test_expand_that_only_adds_leading_ones_is_a_reshape():
    _, report = assert_matches_onnxruntime(_model("Expand", [3, 4], [1, 1, 3, 4]), _feeds([3, 4]))
    assert report.op_counts == {"RESHAPE": 1}


def test_expand_to_the_same_shape_is_removed():
    _, report = assert_matches_onnxruntime(_model("Expand", [3, 4], [1, 4], relu=True), _feeds([3, 4]))
    assert report.op_counts == {"RELU": 1}


def test_expand_bool():
    model = _model("Expand", [3, 1], [3, 4], dtype=TensorProto.BOOL)
    assert_matches_onnxruntime(model, {"x": np.array([[True], [False], [True]])})


@pytest.mark.parametrize("declared", [False, True])
def test_computed_repeats(declared):
    """Repeats computed at run time (from the input "r"): without a declared output shape the
    loader refuses in one line (shape inference finds none); with one, TILE reads them
    (tests/ops/test_runtime_operand_clamping.py has the family)."""
    graph = helper.make_graph(
        [helper.make_node("Tile", ["x", "r"], ["y"], name="tile")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4]),
         helper.make_tensor_value_info("r", TensorProto.INT64, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 8] if declared else None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    if not declared:
        assert_refused_in_one_line(model, "tensor 'y' .* has no static shape", node="tile")
        return
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 3, 4, 4)).astype(np.float32),
             "r": np.array([1, 1, 2, 2], np.int64)}
    _, report = assert_matches_onnxruntime(model, feeds)
    assert report.op_counts.get("TILE") == 1, report.op_counts
