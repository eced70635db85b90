"""quantize_activations (quantize phase): decides which ops run their int8 (or 16x8) kernel and
gives their outputs params by the op's rule: from the output's range (free), the input's params
(single-input same-scale), or the kernel's fixed params; every other op that handles float
stays float with the reason recorded. A fixed-output op whose values reach a float model output,
or a float op, stays float (its fixed step would round small values away).

Shown here, with the step alone on IR carrying calibrated ranges: a FULLY_CONNECTED, a RESHAPE
and a LOGISTIC quantized with params worked out by hand, a SIN and an op without a range kept
float with their reasons, the 16x8 choice, and a LOGISTIC reaching a float output or a kept-float
op staying float. End to end, Conv -> Sigmoid -> Conv with the second conv kept float
(--keep-float) writes the LOGISTIC float (int8, with params 1/256 and -128, when nothing is
kept), and both files match onnxruntime: within 2 output steps, and for the float tail within
the first conv's output step propagated through the sigmoid (slope <= 1/4) and the second conv."""

import numpy as np
from onnx import TensorProto, helper

from qconvert.ir import MinMax
from qconvert.transforms.quantization import Int16Choice
from qconvert.tflite.reader import read
from qconvert.transforms.engine import run_once
from qconvert.transforms.quantize_activations import quantize_activations
from tests.harness import (
    assert_int8_matches_onnxruntime,
    calibration_set,
    convert_quantized,
    grid_weights,
    make_model,
    run_onnxruntime,
    run_tflite,
    snap_to_input_grid,
)
from tests.transforms.builders import Builder

F = TensorProto.FLOAT
S = (1, 4)


def chain(tail="SIN", float_outputs=True, int16=Int16Choice(), tail_kept_float=False):
    """x -> FULLY_CONNECTED -> f -> RESHAPE -> r -> LOGISTIC -> s -> `tail` -> y, with ranges;
    `tail` None makes s the graph output."""
    b = Builder().input("x", (1, 3)).const("w", np.ones((4, 3), np.float32))
    b.const("bias", np.zeros(4, np.float32))
    b.const("shape", np.array(S, np.int32))
    b.op("FULLY_CONNECTED", ["x", "w", "bias"], "f", S).op("RESHAPE", ["f", "shape"], "r", S)
    b.op("LOGISTIC", ["r"], "s", S)
    if tail:
        b.op(tail, ["s", "w", "bias"] if tail == "FULLY_CONNECTED" else ["s"], "y", S)
    b.output("y" if tail else "s")
    for name, (lo, hi) in {"x": (-1.28, 1.27), "f": (0.0, 2.55), "r": (0.0, 2.55), "s": (0.5, 0.92),
                           "y": (0.5, 0.8)}.items():
        if name in b.model.arrays:
            b.model.arrays[name].minmax = MinMax(lo, hi, "calibration")
    if tail_kept_float:
        b.model.operators[-1].float_reason = "--keep-float"
    run_once(b.model, [("quantize_activations",
                        lambda m: quantize_activations(m, float_outputs=float_outputs, int16=int16))])
    return b.model, {op.type: op for op in b.model.operators}


def params(model, name):
    array = model.arrays[name]
    return array.dtype, float(array.quant.scale[0]), int(array.quant.zero_point[0])


def test_int8_ops_get_params_by_their_rule_and_sin_stays_float():
    model, ops = chain()
    assert [ops[t].quantized for t in ("FULLY_CONNECTED", "RESHAPE", "LOGISTIC", "SIN")] == ["int8"] * 3 + [""]
    dtype, scale, zero_point = params(model, "f")  # [0, 2.55]: 255 steps of 0.01 from -128
    assert dtype == np.int8 and np.isclose(scale, 0.01, rtol=1e-6) and zero_point == -128
    assert params(model, "r") == params(model, "f")
    assert params(model, "s") == (np.int8, 1 / 256, -128)
    assert ops["SIN"].float_reason == "TFLite has no int8 SIN kernel" and model.arrays["y"].dtype == np.float32


def test_an_op_without_a_range_stays_float():
    b = Builder().input("x", S).op("ADD", ["x", "x"], "y", S).output("y")
    run_once(b.model, [("quantize_activations", quantize_activations)])
    assert b.model.operators[0].quantized == ""
    assert b.model.operators[0].float_reason == "tensor 'x' has no calibrated range"


def test_16x8_ops_get_symmetric_int16_params():
    model, ops = chain(int16=Int16Choice(whole_model=True))
    dtype, scale, zero_point = params(model, "f")
    assert ops["FULLY_CONNECTED"].quantized == "int16"
    assert dtype == np.int16 and np.isclose(scale, 2.55 / 32767, rtol=1e-6) and zero_point == 0


def test_a_logistic_reaching_a_float_output_stays_float():
    model, ops = chain(tail=None)
    assert ops["LOGISTIC"].quantized == "" and "its output is a model output" in ops["LOGISTIC"].float_reason
    model, ops = chain(tail=None, float_outputs=False)
    assert ops["LOGISTIC"].quantized == "int8"


def test_a_logistic_read_by_a_kept_float_op_stays_float():
    model, ops = chain(tail="FULLY_CONNECTED", tail_kept_float=True)
    assert [op.quantized for op in model.operators] == ["int8", "int8", "", ""]
    assert "read by a float FULLY_CONNECTED" in ops["LOGISTIC"].float_reason


def conv_sigmoid_conv():
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Sigmoid", ["c"], ["s"], name="sigmoid"),
             helper.make_node("Conv", ["s", "w2"], ["y"], name="conv2")]
    return make_model(nodes, {"x": (F, (1, 3, 6, 6))}, {"y": F},
                      {"w1": grid_weights((4, 3, 3, 3), seed=1), "w2": grid_weights((2, 4, 1, 1), seed=2)})


def output_type(summary, op_name):
    op = next(op for op in summary.operators if op.name == op_name)
    return summary.tensors[op.outputs[0]]


def test_onnx_sigmoid_read_by_a_kept_float_conv_stays_float(tmp_path):
    model = conv_sigmoid_conv()
    calibration = calibration_set(model)
    flatbuffer, _ = assert_int8_matches_onnxruntime(model, tmp_path, calibration)
    logistic = output_type(read(flatbuffer), "LOGISTIC")
    assert logistic.dtype == "INT8" and (logistic.scales, logistic.zero_points) == ([1 / 256], [-128])

    flatbuffer, report = convert_quantized(model, calibration, tmp_path, keep_float=("conv2",))
    kept = [(f.op, f.node) for f in report.quantization.float_ops]
    assert kept == [("LOGISTIC", "sigmoid"), ("CONV_2D", "conv2")]
    assert "read by a float CONV_2D" in report.quantization.float_ops[0].reason
    summary = read(flatbuffer)
    assert [op.name for op in summary.operators] == ["QUANTIZE", "CONV_2D", "DEQUANTIZE", "LOGISTIC", "CONV_2D"]
    assert output_type(summary, "LOGISTIC").dtype == "FLOAT32"
    step = summary.tensors[summary.operators[1].outputs[0]].scales[0]  # the int8 conv's output step
    feeds = snap_to_input_grid(flatbuffer, {"x": calibration["x"][0]})
    bound = np.abs(grid_weights((2, 4, 1, 1), seed=2)).sum(axis=(1, 2, 3)).reshape(1, 2, 1, 1) * step / 4
    error = np.abs(run_tflite(flatbuffer, report, feeds)["y"] - run_onnxruntime(model, feeds)["y"])
    assert np.all(error <= bound * (1 + 1e-5)), (error.max(), bound.max())
