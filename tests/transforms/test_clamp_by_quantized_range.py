"""clamp_by_quantized_range: HardSigmoid's upper clamp becomes the int8 range's saturation;
the file has no MINIMUM/MAXIMUM left, matches onnxruntime in LiteRT, and XNNPACK takes it whole."""

import pytest
from onnx import TensorProto, helper, numpy_helper

from qconvert.check.inspect_tflite import inspect_file
from tests.harness import assert_int8_matches_onnxruntime, conv_in_front, make_model

F = TensorProto.FLOAT


def gated(activation: helper.NodeProto):
    """x -> Conv -> activation -> times the conv's output (a squeeze-excitation's gate)."""
    conv, weights = conv_in_front((1, 3, 6, 6), 4)
    nodes = [conv, activation, helper.make_node("Mul", ["fm", "g"], ["y"])]
    return make_model(nodes, {"x": (F, (1, 3, 6, 6))}, {"y": F},
                      {weights.name: numpy_helper.to_array(weights)})


@pytest.mark.parametrize("activation", [
    helper.make_node("HardSigmoid", ["fm"], ["g"], alpha=0.2, beta=0.5),
    helper.make_node("HardSigmoid", ["fm"], ["g"], alpha=1 / 6, beta=0.5),
], ids=["onnx_default", "pytorch"])
def test_hard_sigmoid_clamp_is_the_saturation_of_the_int8_range(activation, tmp_path):
    model = gated(activation)
    flatbuffer, _ = assert_int8_matches_onnxruntime(model, tmp_path, steps=2)
    path = tmp_path / "model.tflite"
    path.write_bytes(bytes(flatbuffer))
    facts = inspect_file(str(path))
    ops = {op["op"] for op in facts["subgraphs"][0]["operators"]}
    assert not ops & {"MINIMUM", "MAXIMUM"}, ops
    assert facts["delegation"]["partitions"] == 1
