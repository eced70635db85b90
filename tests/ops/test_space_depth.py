"""DepthToSpace / SpaceToDepth in DCR and CRD modes, on plain tensors and on NCHW feature maps
(where no transpose may remain), including the large-shuffle (TRANSPOSE) path of CRD."""

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from tests.harness import assert_matches_onnxruntime, conv_in_front, convert_proto, run_tflite


def _model(op_type, x_shape, blocksize, mode=None, conv_channels=None, opset=13):
    """x -> [Conv 3x3 pad 1] -> DepthToSpace/SpaceToDepth -> y."""
    inits, nodes, data = [], [], "x"
    if conv_channels:
        conv, weights = conv_in_front(x_shape, conv_channels)
        nodes.append(conv)
        inits.append(weights)
        data = "fm"
    attrs = {"blocksize": blocksize}
    if mode:
        attrs["mode"] = mode
    nodes.append(helper.make_node(op_type, [data], ["y"], **attrs))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _feeds(shape):
    return {"x": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}


def _assert_matches_reference(model, feeds):
    """For opset 28 (SpaceToDepth's mode), which onnxruntime does not load: the onnx package's
    reference evaluator is the expectation. Returns the report."""
    flatbuffer, report = convert_proto(model)
    [want] = ReferenceEvaluator(model).run(None, feeds)
    np.testing.assert_allclose(run_tflite(flatbuffer, report, feeds)["y"], want, rtol=1e-4, atol=1e-5)
    return report


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space_of_conv_output_leaves_no_transpose(mode):
    model = _model("DepthToSpace", [1, 3, 4, 5], 2, mode, conv_channels=12)
    _, report = assert_matches_onnxruntime(model, _feeds([1, 3, 4, 5]))
    assert report.op_counts.get("DEPTH_TO_SPACE") == 1
    assert "TRANSPOSE" not in report.op_counts, report.op_counts


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_space_to_depth_of_conv_output_leaves_no_transpose(mode):
    model = _model("SpaceToDepth", [1, 2, 6, 4], 2, mode, conv_channels=3, opset=28)
    report = _assert_matches_reference(model, _feeds([1, 2, 6, 4]))
    assert report.op_counts.get("SPACE_TO_DEPTH") == 1
    assert "TRANSPOSE" not in report.op_counts, report.op_counts


@pytest.mark.parametrize("mode,blocksize,shape", [
    ("DCR", 3, [2, 18, 2, 3]),
    ("CRD", 3, [2, 18, 2, 3]),
    ("CRD", 5, [1, 50, 2, 3]),   # 25 slices would be too many: the shuffle is one TRANSPOSE
    ("CRD", 2, [1, 4, 3, 2]),    # one output channel: CRD equals DCR
])
def test_depth_to_space_plain(mode, blocksize, shape):
    assert_matches_onnxruntime(_model("DepthToSpace", shape, blocksize, mode), _feeds(shape))


@pytest.mark.parametrize("mode,blocksize,shape", [
    ("DCR", 2, [2, 3, 4, 6]),
    ("CRD", 2, [2, 3, 4, 6]),
    ("CRD", 2, [1, 17, 2, 4]),   # 17 channels: the shuffle is one TRANSPOSE
    ("CRD", 3, [1, 1, 3, 6]),    # one input channel: CRD equals DCR
])
def test_space_to_depth_plain(mode, blocksize, shape):
    _assert_matches_reference(_model("SpaceToDepth", shape, blocksize, mode, opset=28), _feeds(shape))


def test_space_to_depth_default_mode_before_opset_28():
    assert_matches_onnxruntime(_model("SpaceToDepth", [1, 3, 4, 4], 2), _feeds([1, 3, 4, 4]))
