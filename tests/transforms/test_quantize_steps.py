"""The quantize steps end to end on small models: what each step decides shows in the written file
(read back with the reader) and in the interpreter's numbers next to onnxruntime's."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from qconvert.ir import QuantParams
from qconvert.onnx.loader import load
from qconvert.calibration.calibrate import CalibrationRun, calibrate_model
from qconvert.tflite.reader import buffer_data, read
from qconvert.transforms.check_quantization import QuantizationCheckError, check_quantization
from qconvert.transforms.pipeline import QuantizeOptions, quantize_steps, run_pipeline
from tests.harness import (
    assert_int8_matches_onnxruntime,
    calibration_set,
    conv_in_front,
    convert_proto,
    convert_quantized,
    grid_weights,
    make_model,
    run_onnxruntime,
    run_tflite,
    without_quantize_step,
)

F = TensorProto.FLOAT
RNG = np.random.default_rng(5)


def _conv_model(extra_nodes, output="y", channels=4, inits=None, bias=None):
    node, w = conv_in_front((1, 3, 8, 8), channels)
    if bias is not None:
        node.input.append("cb")
    model = make_model([node, *extra_nodes], {"x": (F, (1, 3, 8, 8))}, {output: F}, inits)
    model.graph.initializer.append(w)
    if bias is not None:
        model.graph.initializer.append(numpy_helper.from_array(bias, "cb"))
    return model


def _ops(flatbuffer):
    summary = read(flatbuffer)
    return summary, [(op.name, op) for op in summary.operators]


def test_same_scale_ops_share_the_input_params(tmp_path):
    """MaxPool's calibrated output range is narrower than its input's; the int8 kernel copies raw
    values, so the output must take the input's params (TOCO's hardcoded min/max)."""
    model = _conv_model([helper.make_node("MaxPool", ["fm"], ["y"], kernel_shape=[2, 2], strides=[2, 2])])
    flatbuffer, _ = assert_int8_matches_onnxruntime(model, tmp_path)
    summary, ops = _ops(flatbuffer)
    pool = next(op for name, op in ops if name == "MAX_POOL_2D")
    a, b = summary.tensors[pool.inputs[0]], summary.tensors[pool.outputs[0]]
    assert a.dtype == b.dtype == "INT8"
    assert (a.scales, a.zero_points) == (b.scales, b.zero_points)


def test_concat_with_a_fixed_producer_requantizes_only_that_input(tmp_path):
    """Concat(Sigmoid(conv), conv2): the union range goes to conv2's free output; the Sigmoid's
    fixed (1/256, -128) output is requantized by a QUANTIZE in front of the concat."""
    w2 = RNG.standard_normal((2, 4, 1, 1)).astype(np.float32)
    nodes = [helper.make_node("Sigmoid", ["fm"], ["s"]),
             helper.make_node("Conv", ["fm", "w2"], ["c2"]),
             helper.make_node("Concat", ["s", "c2"], ["y"], axis=1)]
    model = _conv_model(nodes, inits={"w2": w2})
    flatbuffer, _ = assert_int8_matches_onnxruntime(model, tmp_path)
    summary, ops = _ops(flatbuffer)
    concat = next(op for name, op in ops if name == "CONCATENATION")
    out = summary.tensors[concat.outputs[0]]
    for index in concat.inputs:
        assert summary.tensors[index].scales == out.scales
        assert summary.tensors[index].zero_points == out.zero_points
    requantized = [op for name, op in ops
                   if name == "QUANTIZE" and summary.tensors[op.inputs[0]].dtype == "INT8"]
    assert len(requantized) == 1
    assert summary.tensors[requantized[0].inputs[0]].scales == [1 / 256]


def test_trivial_fused_relu_is_dropped(tmp_path):
    model = _conv_model([helper.make_node("Relu", ["fm"], ["y"])])
    flatbuffer, _ = assert_int8_matches_onnxruntime(model, tmp_path)
    summary, ops = _ops(flatbuffer)
    conv = next(op for name, op in ops if name == "CONV_2D")
    assert conv.fused_activation == "NONE"
    assert summary.tensors[conv.outputs[0]].zero_points == [-128]


def test_relu6_whose_range_ends_below_6_keeps_its_clamp(tmp_path):
    """Calibrated outputs that never reach 6 give a range whose top is below 6: the clamp at 6 is
    then outside it and trivial; one whose range is wider keeps it. Both must compute right."""
    model = _conv_model([helper.make_node("Clip", ["fm", "lo", "hi"], ["y"])],
                        inits={"lo": np.float32(0), "hi": np.float32(6)})
    assert_int8_matches_onnxruntime(model, tmp_path)


def test_op_without_int8_kernel_stays_float_between_dequantize_and_quantize(tmp_path):
    nodes = [helper.make_node("Sin", ["fm"], ["q"]), helper.make_node("Relu", ["q"], ["y"])]
    model = _conv_model(nodes)
    # The conv's int8 output (step ~0.08 over its wide range) feeds SIN, whose own output step is
    # ~0.004: half a conv step through sin' <= 1 is ~10 of those.
    flatbuffer, report = assert_int8_matches_onnxruntime(model, tmp_path, allow_float=("SIN",), steps=12)
    reasons = [(f.op, f.reason) for f in report.quantization.float_ops]
    assert reasons == [("SIN", "TFLite has no int8 SIN kernel")]
    names = [name for name, _ in _ops(flatbuffer)[1]]
    assert names == ["QUANTIZE", "CONV_2D", "DEQUANTIZE", "SIN", "QUANTIZE", "RELU", "DEQUANTIZE"]


def test_decomposed_op_intermediates_are_calibrated(tmp_path, monkeypatch):
    """LayerNormalization becomes MEAN/SUB/MUL/RSQRT/... whose intermediate tensors ONNX does not
    have; calibration evaluates them from the ONNX values, so every piece can run int8 (with the
    step that keeps the variance float by default off)."""
    without_quantize_step(monkeypatch, "keep_normalization_statistics_float")
    nodes = [helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1)]
    model = make_model(nodes, {"x": (F, (2, 5, 16))}, {"y": F},
                       {"g": np.linspace(0.5, 1.5, 16).astype(np.float32),
                        "b": np.linspace(-1, 1, 16).astype(np.float32)}, opset=17)
    # Several requantizations in a row: each adds up to half a step.
    assert_int8_matches_onnxruntime(model, tmp_path, steps=4)


@pytest.mark.parametrize("io_type", ["int8", "uint8"])
def test_integer_io(tmp_path, io_type):
    model = _conv_model([helper.make_node("Relu", ["fm"], ["y"])])
    calibration = calibration_set(model)
    flatbuffer, report = convert_quantized(model, calibration, tmp_path, io_type=io_type)
    summary, ops = _ops(flatbuffer)
    dtype = {"int8": np.int8, "uint8": np.uint8}[io_type]
    inp = next(t for t in summary.tensors if t.name == "x")
    out = next(t for t in summary.tensors if t.name == "y")
    assert inp.dtype == out.dtype == io_type.upper()
    assert [name for name, _ in ops].count("QUANTIZE") == (2 if io_type == "uint8" else 0)
    x = calibration["x"][0]
    info = np.iinfo(dtype)
    qx = np.clip(np.round(x / inp.scales[0]) + inp.zero_points[0], info.min, info.max)
    actual = run_tflite(flatbuffer, report, {"x": qx.astype(dtype)})["y"]
    real = (actual.astype(np.float32) - out.zero_points[0]) * out.scales[0]
    expected = run_onnxruntime(model, {"x": x})["y"]
    np.testing.assert_allclose(real, expected, atol=2.5 * out.scales[0], rtol=0)


def test_per_tensor_fc(tmp_path):
    w = RNG.standard_normal((12, 5)).astype(np.float32)
    model = make_model([helper.make_node("Gemm", ["x", "w", "b"], ["y"])], {"x": (F, (3, 12))}, {"y": F},
                       {"w": w, "b": RNG.standard_normal(5).astype(np.float32)})
    for per_tensor, scales in ((False, 5), (True, 1)):
        flatbuffer, _ = assert_int8_matches_onnxruntime(model, tmp_path, per_tensor_fc=per_tensor)
        summary, ops = _ops(flatbuffer)
        fc = next(op for name, op in ops if name == "FULLY_CONNECTED")
        assert len(summary.tensors[fc.inputs[1]].scales) == scales
        assert len(summary.tensors[fc.inputs[2]].scales) == scales


def test_all_zero_weight_channel_keeps_its_bias(tmp_path):
    node, w = conv_in_front((1, 3, 8, 8), 4)
    weights = numpy_helper.to_array(w).copy()
    weights[1] = 0
    bias = np.array([0.1, 0.7, -0.3, 0.2], np.float32)
    model = _conv_model([helper.make_node("Identity", ["fm"], ["y"])], bias=bias)
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(weights, "w"))
    flatbuffer, report = assert_int8_matches_onnxruntime(model, tmp_path)
    x = calibration_set(model)["x"][0]
    y = run_tflite(flatbuffer, report, {"x": x})["y"]
    assert np.abs(y[0, 1] - 0.7).max() < 0.05


def test_bias_that_would_overflow_int32_widens_the_weight_scale(tmp_path):
    """Weights ~1e-6 and a bias of 1e4: at S_in * s_w the bias is ~1e12 steps, far past int32.
    The channel's weight scale is widened so the bias fits, and the output stays right."""
    node, w = conv_in_front((1, 3, 8, 8), 2)
    weights = numpy_helper.to_array(w) * 1e-6
    model = _conv_model([helper.make_node("Identity", ["fm"], ["y"])], channels=2,
                        bias=np.array([1e4, -1.0], np.float32))
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(weights.astype(np.float32), "w"))
    flatbuffer, _ = assert_int8_matches_onnxruntime(model, tmp_path)
    summary, ops = _ops(flatbuffer)
    conv = next(op for name, op in ops if name == "CONV_2D")
    bias = summary.tensors[conv.inputs[2]]
    q = np.frombuffer(bytes(buffer_data(flatbuffer, bias.buffer)), np.int32)
    assert abs(int(q[0])) == 2**30  # widened exactly to half the int32 range
    assert summary.tensors[conv.inputs[1]].scales[0] > weights[0].max() / 127


def test_default_range_quantizes_without_data(tmp_path, caplog):
    model = _conv_model([helper.make_node("Relu", ["fm"], ["y"])])
    with caplog.at_level("WARNING", logger="qconvert"):
        flatbuffer, report = convert_proto(model, quantize=QuantizeOptions(default_range=(-6.0, 6.0)))
    assert "accuracy is meaningless" in caplog.text
    assert report.quantization.int8_ops == 1 and report.quantization.calibration_samples == 0
    x = calibration_set(model)["x"][0]
    run_tflite(flatbuffer, report, {"x": x})  # it runs; its numbers are not meant to be right


def _quantized_ir(model, calibration):
    """The IR after every quantize step but the self-check (as convert() builds it)."""
    run = CalibrationRun(model, "all")
    ir = load(model)
    calibrate_model(ir, run, [{k: v[i] for k, v in calibration.items()} for i in range(4)])
    run_pipeline(ir)
    for name, step in quantize_steps(QuantizeOptions()):
        if name != "check_quantization":
            step(ir)
            ir.remove_unused()
    return ir


def test_self_check_names_the_op_that_breaks_a_same_scale_rule():
    model = _conv_model([helper.make_node("MaxPool", ["fm"], ["y"], kernel_shape=[2, 2])])
    ir = _quantized_ir(model, calibration_set(model))
    check_quantization(ir)  # the real pipeline's output passes
    pool = next(op for op in ir.operators if op.type == "MAX_POOL_2D")
    out = ir.arrays[pool.outputs[0]]
    out.quant = QuantParams(out.quant.scale * 2, out.quant.zero_point)
    with pytest.raises(QuantizationCheckError, match="MAX_POOL_2D.*must share scale and zero point"):
        check_quantization(ir)


def test_self_check_catches_a_wrong_bias_scale():
    model = _conv_model([helper.make_node("Identity", ["fm"], ["y"])], bias=np.ones(4, np.float32))
    ir = _quantized_ir(model, calibration_set(model))
    conv = next(op for op in ir.operators if op.type == "CONV_2D")
    bias = ir.arrays[conv.inputs[2]]
    bias.quant = QuantParams(bias.quant.scale * 1.01, bias.quant.zero_point, 0)
    with pytest.raises(QuantizationCheckError, match="CONV_2D.*input scale x weight scale"):
        check_quantization(ir)


def test_max_pool_padding_with_the_lowest_float_saturates_to_int8_min(tmp_path):
    """ResNet's MaxPool(3, stride 2, pads 1) pads with the lowest float (PADV2): that sentinel must
    not widen the shared range (it made the scale 1e36 and XNNPACK refuse the model); in int8 it
    is -128, the bottom of the input's range."""
    model = _conv_model([helper.make_node("MaxPool", ["fm"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                                          pads=[1, 1, 1, 1])])
    flatbuffer, _ = assert_int8_matches_onnxruntime(model, tmp_path)
    summary, ops = _ops(flatbuffer)
    pad = next(op for name, op in ops if name == "PADV2")
    value = summary.tensors[pad.inputs[2]]
    assert np.frombuffer(bytes(buffer_data(flatbuffer, value.buffer)), np.int8).tolist() == [-128]
    assert summary.tensors[pad.inputs[0]].scales == value.scales and value.scales[0] < 1


def test_grouped_conv_pieces_take_the_concat_range(tmp_path):
    """A grouped Conv is SPLIT + one CONV_2D per group + CONCATENATION; the groups' outputs exist
    only in the converted graph, so they take the concatenation's calibrated range."""
    w = np.random.default_rng(2).standard_normal((6, 2, 3, 3)).astype(np.float32)
    model = _conv_model([helper.make_node("Conv", ["fm", "gw"], ["y"], group=2, pads=[1, 1, 1, 1])],
                        inits={"gw": w})
    flatbuffer, report = assert_int8_matches_onnxruntime(model, tmp_path)
    assert report.op_counts["CONV_2D"] == 3 and report.op_counts["CONCATENATION"] == 1


def test_grouped_conv_followed_by_relu_uses_the_relu_range(tmp_path):
    """The Relu goes into each group's CONV_2D; the groups and the concatenation then take the
    Relu's range (zero point -128), not the conv's, which would waste half the int8 codes."""
    w = grid_weights((6, 2, 3, 3), seed=2)
    model = _conv_model([helper.make_node("Conv", ["fm", "gw"], ["c"], group=2, pads=[1, 1, 1, 1]),
                         helper.make_node("Relu", ["c"], ["y"])], inits={"gw": w})
    flatbuffer, _ = assert_int8_matches_onnxruntime(model, tmp_path)
    summary, ops = _ops(flatbuffer)
    concat = next(op for name, op in ops if name == "CONCATENATION")
    for index in concat.inputs + concat.outputs:
        assert summary.tensors[index].zero_points == [-128]


@pytest.mark.parametrize("io_type", ["float", "int8"])
def test_softmax_producing_a_float_model_output_stays_float(tmp_path, io_type):
    """1000 small probabilities in int8 steps of 1/256 would mostly round to 0 just before the
    DEQUANTIZE; with float outputs the final SOFTMAX runs in float instead. With int8 outputs
    the model stays all-integer."""
    w = np.random.default_rng(4).standard_normal((1000, 4)).astype(np.float32)
    nodes = [helper.make_node("GlobalAveragePool", ["fm"], ["g"]), helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "gw"], ["logits"], transB=1),
             helper.make_node("Softmax", ["logits"], ["y"], axis=1)]
    model = _conv_model(nodes, inits={"gw": w})
    flatbuffer, report = convert_quantized(model, calibration_set(model), tmp_path, io_type=io_type)
    names = [name for name, _ in _ops(flatbuffer)[1]]
    if io_type == "float":
        assert names[-2:] == ["DEQUANTIZE", "SOFTMAX"]
        assert [f.op for f in report.quantization.float_ops] == ["SOFTMAX"]
    else:
        assert names[-1] == "SOFTMAX" and report.quantization.float_ops == []


def test_softmax_reaching_the_output_through_a_reshape_stays_float(tmp_path):
    """SqueezeNet ends Softmax -> Reshape: the RESHAPE only moves the probabilities, so both stay
    float. (A Sigmoid feeding a Concat does not end the model: see the concat test.)"""
    nodes = [helper.make_node("Flatten", ["fm"], ["f"]), helper.make_node("Softmax", ["f"], ["s"], axis=1),
             helper.make_node("Reshape", ["s", "shape"], ["y"])]
    model = _conv_model(nodes, inits={"shape": np.array([1, 4, 64], np.int64)})
    _, report = convert_quantized(model, calibration_set(model), tmp_path)
    assert [f.op for f in report.quantization.float_ops] == ["SOFTMAX", "RESHAPE"]


def test_comparisons_with_a_zero_constant_or_a_wide_input_never_abort_the_interpreter(tmp_path):
    """TFLite's int8 comparisons abort unless every input scale is below 1: Greater(x, 0) gives
    the 0 the other input's params; an input whose range needs a scale of 1 or more stays float.
    An attention mask's -inf stays out of the calibrated range."""
    x = {"x": (F, (2, 8))}
    zero = make_model([helper.make_node("Greater", ["x", "z"], ["c"]),
                       helper.make_node("Where", ["c", "x", "n"], ["y"])], x, {"y": F},
                      {"z": np.float32(0), "n": np.float32(-1)})
    assert_int8_matches_onnxruntime(zero, tmp_path)
    wide = make_model([helper.make_node("Mul", ["x", "k"], ["w"]),
                       helper.make_node("Less", ["w", "x"], ["c"]),
                       helper.make_node("Where", ["c", "x", "masked"], ["y"])], x, {"y": F},
                      {"k": np.float32(300), "masked": np.float32(-np.inf)})
    flatbuffer, report = convert_quantized(wide, calibration_set(wide), tmp_path)
    assert [f.op for f in report.quantization.float_ops] == ["LESS"]
    feeds = {"x": calibration_set(wide)["x"][0]}
    actual, expected = run_tflite(flatbuffer, report, feeds)["y"], run_onnxruntime(wide, feeds)["y"]
    masked = expected == -np.inf  # in int8 the -inf saturates to the bottom of the range
    assert masked.any() and np.all(actual[masked] == actual.min())
    assert actual.min() <= expected[~masked].min()
