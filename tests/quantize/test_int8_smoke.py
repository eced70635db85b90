from onnx import TensorProto, helper

from tests.harness import assert_int8_matches_onnxruntime, conv_in_front, make_model

F = TensorProto.FLOAT


def test_conv_relu_add(tmp_path):
    node, w = conv_in_front((1, 3, 8, 8), 4)
    nodes = [node, helper.make_node("Relu", ["fm"], ["r"]), helper.make_node("Add", ["r", "fm"], ["y"])]
    model = make_model(nodes, {"x": (F, (1, 3, 8, 8))}, {"y": F})
    model.graph.initializer.append(w)
    assert_int8_matches_onnxruntime(model, tmp_path)
