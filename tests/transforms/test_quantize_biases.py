"""quantize_biases (quantize phase): the float bias of a quantized op with int8 weights becomes
int32 (int64 for a 16x8 op) with zero point 0, quantized dimension 0 and, per output channel,
scale input_scale * weight_scale; a bias shared by several ops is copied so that each gets the
scales of its own input.

Shown here, with the step alone on hand-quantized IR: the values and params of an int8
FULLY_CONNECTED's bias and of a 16x8 one's, worked out by hand; a bias shared by two ops whose
inputs have different scales; a bias left float while the weights are float. End to end, two
Gemms sharing one bias initializer (the importer gives each its own copy) but reading inputs of
different ranges get one int32 bias each, whose scales are their input scale times their weight
scales and whose values are the bias divided by them (all read back from the file); the file
matches onnxruntime within 2 steps."""

import numpy as np
from onnx import TensorProto, helper

from qconvert.ir import QuantParams
from qconvert.tflite.reader import buffer_data, read
from qconvert.transforms.engine import run_once
from qconvert.transforms.quantize_biases import quantize_biases
from tests.harness import assert_int8_matches_onnxruntime, calibration_set, grid_weights, make_model
from tests.transforms.builders import Builder

F = TensorProto.FLOAT
BIAS = np.array([0.5, -1.0], np.float32)
WEIGHT_SCALES = np.array([0.02, 0.03], np.float32)


def params(scales, axis=None):
    scales = np.atleast_1d(np.asarray(scales, np.float32))
    return QuantParams(scales, np.zeros(scales.size, np.int64), axis)


def add_fc(b, x, input_scale, y, bias="bias", kind="int8"):
    """A quantized FULLY_CONNECTED from input `x` (quantized with `input_scale`) to `y`."""
    dtype = np.int16 if kind == "int16" else np.int8
    b.input(x, (1, 3), dtype)
    b.model.arrays[x].quant = params(input_scale)
    b.op("FULLY_CONNECTED", [x, "w", bias], y, (1, 2), dtype).output(y)
    b.model.operators[-1].quantized = kind
    b.model.arrays[y].quant = params(0.1)


def model_with(*inputs, kind="int8", weights_int8=True):
    b = Builder().const("bias", BIAS)
    if weights_int8:
        b.const("w", np.array([[1, -2, 3], [127, 0, -127]], np.int8))
        b.model.arrays["w"].quant = params(WEIGHT_SCALES, axis=0)
    else:
        b.const("w", np.ones((2, 3), np.float32))
    for k, scale in enumerate(inputs):
        add_fc(b, f"x{k}", scale, f"y{k}", kind=kind)
    run_once(b.model, [("quantize_biases", quantize_biases)])
    return b.model


def bias_of(model, k):
    return model.arrays[model.operators[k].inputs[2]]


def test_int8_op_bias_is_int32_at_input_times_weight_scale():
    bias = bias_of(model_with(0.01), 0)
    assert bias.dtype == np.int32 and bias.data.tolist() == [2500, -3333]  # 0.5 / 0.0002, -1 / 0.0003
    np.testing.assert_allclose(bias.quant.scale, [0.0002, 0.0003], rtol=1e-6)
    assert bias.quant.zero_point.tolist() == [0, 0] and bias.quant.axis == 0


def test_16x8_op_bias_is_int64():
    bias = bias_of(model_with(0.001, kind="int16"), 0)
    assert bias.dtype == np.int64 and bias.data.tolist() == [25000, -33333]  # scales 2e-5, 3e-5


def test_a_shared_bias_is_copied_for_each_input_scale():
    model = model_with(0.01, 0.04)
    first, second = bias_of(model, 0), bias_of(model, 1)
    assert first.name != second.name and "bias" not in model.arrays
    assert first.data.tolist() == [2500, -3333] and second.data.tolist() == [625, -833]
    np.testing.assert_allclose(second.quant.scale, [0.0008, 0.0012], rtol=1e-6)


def test_a_bias_beside_float_weights_stays_float():
    model = model_with(0.01, weights_int8=False)
    assert bias_of(model, 0).dtype == np.float32 and bias_of(model, 0).quant is None


def two_gemms_one_bias():
    nodes = [helper.make_node("Gemm", ["a", "w1", "b"], ["y1"]),
             helper.make_node("Gemm", ["c", "w2", "b"], ["y2"])]
    return make_model(nodes, {"a": (F, (2, 6)), "c": (F, (2, 6))}, {"y1": F, "y2": F},
                      {"w1": grid_weights((6, 5), seed=1, axis=1), "w2": grid_weights((6, 5), seed=2, axis=1),
                       "b": np.array([0.3, -0.7, 1.1, 0.05, -2.0], np.float32)})


def test_onnx_gemms_sharing_a_bias_get_one_int32_bias_each(tmp_path):
    model = two_gemms_one_bias()
    calibration = calibration_set(model)
    calibration["c"] = calibration["c"] * 5  # another input range, another input scale
    flatbuffer, _ = assert_int8_matches_onnxruntime(model, tmp_path, calibration)
    summary = read(flatbuffer)
    fcs = [op for op in summary.operators if op.name == "FULLY_CONNECTED"]
    assert len(fcs) == 2 and fcs[0].inputs[2] != fcs[1].inputs[2]
    for fc in fcs:
        x, w, bias = (summary.tensors[i] for i in fc.inputs)
        assert bias.dtype == "INT32" and bias.zero_points == [0] * 5
        scales = np.float32(x.scales[0]) * np.array(w.scales, np.float32)
        np.testing.assert_allclose(bias.scales, scales, rtol=1e-6)
        values = np.frombuffer(bytes(buffer_data(flatbuffer, bias.buffer)), np.int32)
        np.testing.assert_array_equal(values, np.round(np.array([0.3, -0.7, 1.1, 0.05, -2.0]) / scales))
