"""prelu_to_leaky_relu: a PRelu whose slope is one value (a scalar, a [1] tensor, one per channel
all equal) writes an int8 LEAKY_RELU, which XNNPACK takes (the int8 PRELU it does not: a partition
split twice), within 2 int8 steps of onnxruntime in LiteRT; a slope that differs per channel stays
PRELU."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from qconvert.check.inspect_tflite import inspect_file
from tests.harness import assert_int8_matches_onnxruntime, grid_weights, make_model

F = TensorProto.FLOAT


def conv_prelu_conv(slope: np.ndarray):
    """x [1, 3, 8, 8] -> Conv 3x3 -> PRelu(slope) -> Conv 1x1 -> y."""
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("PRelu", ["a", "slope"], ["b"]),
             helper.make_node("Conv", ["b", "w2"], ["y"])]
    return make_model(nodes, {"x": (F, (1, 3, 8, 8))}, {"y": F},
                      {"w1": grid_weights((4, 3, 3, 3), seed=1), "w2": grid_weights((4, 4, 1, 1), seed=2),
                       "slope": slope.astype(np.float32)})


def _delegation(flatbuffer: bytes, tmp_path) -> dict:
    path = tmp_path / "model.tflite"
    path.write_bytes(flatbuffer)
    return inspect_file(str(path))["delegation"]


@pytest.mark.parametrize("slope", [np.array(0.25), np.array([0.25]), np.full((4, 1, 1), 0.25)],
                         ids=["scalar", "one", "per-channel-equal"])
def test_a_single_slope_writes_a_delegated_leaky_relu(slope, tmp_path):
    flatbuffer, report = assert_int8_matches_onnxruntime(conv_prelu_conv(slope), tmp_path, steps=2.0)
    assert report.op_counts.get("LEAKY_RELU") == 1 and "PRELU" not in report.op_counts
    delegation = _delegation(flatbuffer, tmp_path)
    assert delegation["partitions"] == 1 and delegation["delegated_ops"] == delegation["ops"]


def test_slopes_that_differ_per_channel_stay_prelu(tmp_path):
    flatbuffer, report = assert_int8_matches_onnxruntime(
        conv_prelu_conv(np.array([0.1, 0.2, 0.3, 0.4]).reshape(4, 1, 1)), tmp_path, steps=2.0)
    assert report.op_counts.get("PRELU") == 1 and "LEAKY_RELU" not in report.op_counts
    assert _delegation(flatbuffer, tmp_path)["partitions"] == 2  # XNNPACK takes no int8 PRELU
