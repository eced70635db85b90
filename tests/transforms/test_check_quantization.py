"""check_quantization (quantize phase): the self-check before an int8 model is written; it
rewrites nothing. Params a kernel cannot represent (scales outside [2^-60, 2^60], requantization
multipliers of 256 or more) come from the user's data and are a ConversionError naming the op;
any other broken kernel constraint is a qconvert bug, a QuantizationCheckError.

Shown here, on a hand-quantized FULLY_CONNECTED (valid as built: the step passes it and changes
nothing), each constraint broken in turn: weights using -128, a scale count that is not one per
channel, a zero point outside int8, a float op reading an int8 tensor, a LOGISTIC without its
fixed params (QuantizationCheckError each), and an input scale of 2^70 or a multiplier of
0.01 x 0.03 / 1e-6 = 300 (ConversionError). End to end, the small classifier converts with
--quantize to the same bytes with and without the step, the file matching onnxruntime within 2
output steps; and an Add calibrated on values of 1e36 is refused naming the node and the tensor
(scale 1e36 / 255); without the step its file is written, and LiteRT crashes on it
(tests/harness.py crashing_tflite).
(tests/transforms/test_quantize_steps.py covers the same-scale and bias-scale checks.)"""

import numpy as np
import pytest
from onnx import TensorProto, helper

from qconvert.errors import ConversionError
from qconvert.ir import QuantParams
from qconvert.transforms.check_quantization import QuantizationCheckError, check_quantization
from qconvert.transforms.engine import run_once
from tests.harness import (
    assert_int8_matches_onnxruntime,
    convert_quantized,
    make_model,
    small_classifier,
    without_quantize_step,
)
from tests.transforms.builders import Builder, op_types


def params(scales, zero_point=0, axis=None):
    scales = np.atleast_1d(np.asarray(scales, np.float32))
    return QuantParams(scales, np.full(scales.size, zero_point, np.int64), axis)


def quantized_fc():
    """x (int8, 0.01) -> FULLY_CONNECTED(int8 weights, scales 0.02 and 0.03; int32 bias) -> y (int8)."""
    b = Builder().input("x", (1, 3), np.int8)
    b.const("w", np.array([[1, -2, 3], [127, 0, -127]], np.int8))
    b.const("bias", np.array([2500, -3333], np.int32))
    b.op("FULLY_CONNECTED", ["x", "w", "bias"], "y", (1, 2), np.int8).output("y")
    arrays = b.model.arrays
    arrays["x"].quant, arrays["y"].quant = params(0.01), params(0.1, -5)
    arrays["w"].quant, arrays["w"].narrow_range = params([0.02, 0.03], axis=0), True
    arrays["bias"].quant = params(np.float32(0.01) * np.array([0.02, 0.03], np.float32), axis=0)
    b.model.operators[0].quantized = "int8"
    return b


def check(model):
    run_once(model, [("check_quantization", check_quantization)])


def test_a_valid_int8_op_passes_unchanged():
    model = quantized_fc().model
    assert check_quantization(model) is False
    assert op_types(model) == ["FULLY_CONNECTED"]
    assert model.arrays["w"].data.tolist() == [[1, -2, 3], [127, 0, -127]]


def weights_using_minus_128(b):
    b.model.arrays["w"].data = np.array([[1, -2, 3], [127, 0, -128]], np.int8)


def three_weight_scales(b):
    b.model.arrays["w"].quant = params([0.02, 0.03, 0.04], axis=0)


def zero_point_200(b):
    b.model.arrays["y"].quant = params(0.1, 200)


def float_op_reading_int8(b):
    b.op("RELU", ["y"], "r", (1, 2)).output("r")


def logistic_with_other_params(b):
    b.op("LOGISTIC", ["y"], "s", (1, 2), np.int8).output("s")
    b.model.operators[-1].quantized = "int8"
    b.model.arrays["s"].quant = params(1 / 128, 0)


@pytest.mark.parametrize("damage, message", [
    (weights_using_minus_128, "weights 'w' use -128"),
    (three_weight_scales, "weights 'w' have 3 scales along axis 0"),
    (zero_point_200, "'y' zero point 200 is outside"),
    (float_op_reading_int8, "RELU .*float op reads int8 tensor 'y'"),
    (logistic_with_other_params, "LOGISTIC .*must have scale 0.00390625 and zero point -128"),
])
def test_a_broken_kernel_constraint_is_a_qconvert_bug(damage, message):
    b = quantized_fc()
    damage(b)
    with pytest.raises(QuantizationCheckError, match=message):
        check(b.model)


@pytest.mark.parametrize("array, quant, message", [
    ("x", params(2.0**70), "'x' scale 1.18e\\+21 is outside \\[2\\^-60, 2\\^60\\]"),
    ("y", params(1e-6), "requantization multiplier .* = 300 is not below 256"),
])
def test_params_no_kernel_represents_are_the_users_error(array, quant, message):
    b = quantized_fc()
    b.model.arrays[array].quant = quant
    with pytest.raises(ConversionError, match="cannot quantize FULLY_CONNECTED .*" + message):
        check(b.model)


def test_onnx_classifier_is_written_the_same_with_and_without_the_check(tmp_path, monkeypatch):
    model = small_classifier(np.random.default_rng(0))
    checked, _ = assert_int8_matches_onnxruntime(model, tmp_path)
    without_quantize_step(monkeypatch, "check_quantization")
    unchecked, _ = assert_int8_matches_onnxruntime(model, tmp_path)
    assert checked == unchecked


def test_onnx_add_calibrated_on_1e36_is_refused_naming_the_node(tmp_path, monkeypatch):
    """The self-check's last line of defence: keep_unrepresentable_float keeps such an ADD float,
    without it the check refuses the model naming the node."""
    without_quantize_step(monkeypatch, "keep_unrepresentable_float")
    f = TensorProto.FLOAT
    model = make_model([helper.make_node("Add", ["a", "b"], ["y"], name="add")],
                       {"a": (f, (1, 8)), "b": (f, (1, 8))}, {"y": f})
    calibration = {"a": np.full((4, 1, 8), 1e36, np.float32), "b": np.full((4, 1, 8), -1e-3, np.float32)}
    message = "from ONNX node 'add': tensor 'a_int8' scale 3.9\\de\\+33 .*outside"
    with pytest.raises(ConversionError, match=message):
        convert_quantized(model, calibration, tmp_path)
