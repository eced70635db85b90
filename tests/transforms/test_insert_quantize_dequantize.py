"""insert_quantize_dequantize (quantize phase): a QUANTIZE or DEQUANTIZE wherever int8 and float
meet (one per tensor and params, shared by its readers), a requantizing QUANTIZE in front of a
same-scale op reading other params, the constants that int8 ops read as activations quantized,
and graph inputs/outputs of the type --io-type asks for.

Shown here, with the step alone on hand-quantized IR: a float input read by two int8 ops goes
through one QUANTIZE (params from its range, worked out by hand), an int8 ADD's constant is
quantized over its own range, int8 outputs come back through DEQUANTIZEs keeping their names; an
int8 tensor read by two float ops goes through one DEQUANTIZE; with int8 I/O there is no boundary
op at all; a concatenation reading a LOGISTIC's fixed params requantizes it. End to end, Conv ->
Sin and Cos (no int8 kernels) is written QUANTIZE -> CONV_2D -> one DEQUANTIZE read by both, and
both outputs match onnxruntime within the conv's output step (|sin'|, |cos'| <= 1)."""

import numpy as np
from onnx import TensorProto, helper

from qconvert.ir import MinMax, QuantParams
from qconvert.tflite.reader import read
from qconvert.transforms.engine import run_once
from qconvert.transforms.insert_quantize_dequantize import insert_quantize_dequantize
from tests.harness import (
    calibration_set,
    conv_in_front,
    convert_quantized,
    make_model,
    run_onnxruntime,
    run_tflite,
    snap_to_input_grid,
)
from tests.transforms.builders import Builder, op_types

F = TensorProto.FLOAT
S = (2, 3)


def quantize(model, name, scale, zero_point):
    model.arrays[name].dtype = np.dtype(np.int8)
    model.arrays[name].quant = QuantParams(np.array([scale], np.float32), np.array([zero_point], np.int64))


def int8_op(b, op_type, inputs, output, scale=0.02, zero_point=-128, **options):
    b.op(op_type, inputs, output, options.pop("shape", S), **options)
    b.model.operators[-1].quantized = "int8"
    quantize(b.model, output, scale, zero_point)


def run(model, io_type="float"):
    run_once(model, [("insert_quantize_dequantize", lambda m: insert_quantize_dequantize(m, io_type=io_type))])


def float_input_read_by_two_int8_ops():
    b = Builder().input("x", S).const("c", np.array([0.0, 1.27, 2.55], np.float32))
    b.model.arrays["x"].minmax = MinMax(-1.28, 1.27, "calibration")  # scale 0.01, zero point 0
    int8_op(b, "RELU", ["x"], "r")
    int8_op(b, "ADD", ["x", "c"], "a")
    return b.output("r", "a").model


def test_float_input_and_outputs_meet_int8_through_shared_boundary_ops():
    model = float_input_read_by_two_int8_ops()
    run(model)
    assert op_types(model) == ["QUANTIZE", "RELU", "ADD", "DEQUANTIZE", "DEQUANTIZE"]
    quantized_x = model.operators[0].outputs[0]
    assert model.operators[1].inputs == [quantized_x] and model.operators[2].inputs[0] == quantized_x
    q = model.arrays[quantized_x].quant
    assert np.isclose(q.scale[0], 0.01, rtol=1e-6) and q.zero_point.tolist() == [0]
    c = model.arrays[model.operators[2].inputs[1]]  # its own range [0, 2.55]: scale 0.01 from -128
    assert c.dtype == np.int8 and c.data.tolist() == [-128, -1, 127] and np.isclose(c.quant.scale[0], 0.01)
    assert model.outputs == ["r", "a"] and [model.arrays[n].dtype for n in model.outputs] == [np.float32] * 2
    assert [op.inputs[0] for op in model.operators[3:]] == ["r_int8", "a_int8"]


def test_int8_tensor_read_by_two_float_ops_goes_through_one_dequantize():
    b = Builder().input("x", S)
    b.model.arrays["x"].minmax = MinMax(-1.28, 1.27, "calibration")
    int8_op(b, "RELU", ["x"], "r")
    b.op("SIN", ["r"], "s", S).op("COS", ["r"], "c", S).output("s", "c")
    run(b.model)
    assert op_types(b.model) == ["QUANTIZE", "RELU", "DEQUANTIZE", "SIN", "COS"]
    dequantized = b.model.operators[2].outputs[0]
    assert [op.inputs for op in b.model.operators[3:]] == [[dequantized], [dequantized]]


def test_int8_io_has_no_boundary_ops():
    model = float_input_read_by_two_int8_ops()
    run(model, io_type="int8")
    assert op_types(model) == ["RELU", "ADD"]
    assert model.arrays["x"].dtype == np.int8 and np.isclose(model.arrays["x"].quant.scale[0], 0.01)


def test_a_concatenation_requantizes_an_input_with_other_params():
    b = Builder().input("x", S).input("z", S)
    for name in ("x", "z"):
        quantize(b.model, name, 0.02, -128)
    int8_op(b, "LOGISTIC", ["x"], "s", scale=1 / 256, zero_point=-128)
    int8_op(b, "CONCATENATION", ["s", "z"], "y", shape=(2, 6), axis=1)
    b.output("y")
    run(b.model, io_type="int8")
    assert op_types(b.model) == ["LOGISTIC", "QUANTIZE", "CONCATENATION"]
    requantized = b.model.operators[1]
    assert requantized.inputs == ["s"] and b.model.operators[2].inputs == [requantized.outputs[0], "z"]
    assert np.isclose(b.model.arrays[requantized.outputs[0]].quant.scale[0], 0.02)


def conv_sin_cos():
    node, w = conv_in_front((1, 3, 6, 6), 4)
    model = make_model([node, helper.make_node("Sin", ["fm"], ["s"]), helper.make_node("Cos", ["fm"], ["c"])],
                       {"x": (F, (1, 3, 6, 6))}, {"s": F, "c": F})
    model.graph.initializer.append(w)
    return model


def test_onnx_conv_read_by_two_float_ops_is_dequantized_once(tmp_path):
    model = conv_sin_cos()
    calibration = calibration_set(model)
    flatbuffer, report = convert_quantized(model, calibration, tmp_path)
    summary = read(flatbuffer)
    assert [op.name for op in summary.operators] == ["QUANTIZE", "CONV_2D", "DEQUANTIZE", "SIN", "COS"]
    dequantize = summary.operators[2]
    assert [op.inputs for op in summary.operators[3:]] == [dequantize.outputs] * 2
    step = summary.tensors[dequantize.inputs[0]].scales[0]
    feeds = snap_to_input_grid(flatbuffer, {"x": calibration["x"][0]})
    actual, expected = run_tflite(flatbuffer, report, feeds), run_onnxruntime(model, feeds)
    for name in ("s", "c"):
        np.testing.assert_allclose(actual[name], expected[name], rtol=0, atol=step, err_msg=name)
