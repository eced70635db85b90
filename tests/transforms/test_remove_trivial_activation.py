"""remove_trivial_activation (quantize phase): a quantized op's fused RELU, RELU6 or RELU_N1_TO_1
is dropped when its output params make the clamp a no-op: the clamp's bounds in steps,
zero_point + round(bound / scale), reach past both ends of the int8 range.

Shown here, with the step alone on hand-quantized IR: which (activation, scale, zero point)
clamps go and which stay (a float op's and a 16x8 op's stay), the bounds worked out by hand beside
each case. End to end, a Conv + Clip(0, 6) calibrated with values past 6 gets the output range
[0, 6] (scale 6/255, zero point -128), so its CONV_2D is written without RELU6 (with it, without
the step); both files match onnxruntime within 2 output steps."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from qconvert.ir import QuantParams
from qconvert.tflite.reader import read
from qconvert.transforms.engine import run_once
from qconvert.transforms.remove_trivial_activation import remove_trivial_activation
from tests.harness import (
    assert_int8_matches_onnxruntime,
    calibration_set,
    grid_weights,
    make_model,
    without_quantize_step,
)
from tests.transforms.builders import Builder

F = TensorProto.FLOAT


def quantized_add(activation, scale, zero_point, quantized="int8"):
    dtype = {"int8": np.int8, "int16": np.int16, "": np.float32}[quantized]
    b = Builder().input("x", (2, 3), dtype).input("z", (2, 3), dtype)
    b.op("ADD", ["x", "z"], "y", (2, 3), dtype, activation=activation).output("y")
    b.model.operators[0].quantized = quantized
    if quantized:
        b.model.arrays["y"].quant = QuantParams(np.array([scale], np.float32), np.array([zero_point], np.int64))
    return b.model


@pytest.mark.parametrize("activation, scale, zero_point, quantized, kept", [
    ("RELU", 0.1, -128, "int8", "NONE"),  # 0 is step -128: nothing below it to clamp
    ("RELU", 0.1, -127, "int8", "RELU"),  # -128 means -0.1: clamped to 0
    ("RELU6", 6 / 255, -128, "int8", "NONE"),  # 6 is step -128 + 255 = 127
    ("RELU6", 0.025, -128, "int8", "RELU6"),  # 6 is step 112: above it is clamped
    ("RELU_N1_TO_1", 1 / 128, 0, "int8", "NONE"),  # -1 and 1 are steps -128 and 128
    ("RELU_N1_TO_1", 1 / 100, 0, "int8", "RELU_N1_TO_1"),  # steps -100 and 100
    ("RELU", 0.1, 0, "int16", "RELU"),  # int16 reaches -32768: 0 is step 0
    ("RELU", 0.1, -128, "", "RELU"),  # a float op keeps its clamp
])
def test_which_clamps_are_dropped(activation, scale, zero_point, quantized, kept):
    model = quantized_add(activation, scale, zero_point, quantized)
    run_once(model, [("remove_trivial_activation", remove_trivial_activation)])
    assert model.operators[0].fused_activation == kept


def conv_relu6():
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["c", "lo", "hi"], ["y"])]
    return make_model(nodes, {"x": (F, (1, 3, 6, 6))}, {"y": F},
                      {"w": grid_weights((4, 3, 3, 3)), "lo": np.float32(0), "hi": np.float32(6)})


def written_conv(flatbuffer):
    summary = read(flatbuffer)
    conv = next(op for op in summary.operators if op.name == "CONV_2D")
    return conv, summary.tensors[conv.outputs[0]]


def test_onnx_relu6_whose_range_is_0_to_6_is_dropped(tmp_path, monkeypatch):
    model = conv_relu6()
    calibration = calibration_set(model, scale=4.0)  # the conv's outputs reach far past 6
    flatbuffer, _ = assert_int8_matches_onnxruntime(model, tmp_path, calibration)
    conv, output = written_conv(flatbuffer)
    assert conv.fused_activation == "NONE"
    assert output.zero_points == [-128] and np.isclose(output.scales[0], 6 / 255, rtol=1e-6)
    without_quantize_step(monkeypatch, "remove_trivial_activation")
    flatbuffer, _ = assert_int8_matches_onnxruntime(model, tmp_path, calibration)
    assert written_conv(flatbuffer)[0].fused_activation == "RELU6"
