"""Every TFLite op with a 16x8 rule (QuantRule.int16), quantized alone with --activations int16:
the one-op models of test_ops_int8 (weighted ops with weights int8 represents exactly, so that
weight rounding, 1/254 of a channel's range, is not mistaken for the kernel's error at int16's
finer output step), run in LiteRT and compared with onnxruntime within 2 int16 output steps on
every calibration sample, and read back from the written file: activations INT16 with zero point
0, weights INT8 per channel, bias INT64.

Also the boundaries: an op without a 16x8 kernel stays float between DEQUANTIZE and QUANTIZE,
and --io-type int8 requantizes between the int8 graph tensors and the int16 ones."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from qconvert.ops.registry import TFLITE_OPS
from qconvert.tflite.reader import read as read_tflite
from tests.harness import (
    assert_int8_matches_onnxruntime,
    convert_quantized,
    grid_weights,
    make_model,
    run_onnxruntime,
    run_tflite,
    snap_to_input_grid,
)
from tests.quantize.test_ops_int8 import (
    CASES,
    MICRO_UNSUPPORTED,
    NCHW,
    Case,
    assert_every_sample_matches,
    calibration,
    check_int8_op,
    run_micro,
    run_reference_kernels,
    unary,
    wide,
)

F = TensorProto.FLOAT


def grid_conv(out_channels, group=1, transpose=False, **attrs):
    """Conv (ConvTranspose) from a 3-channel NCHW input with int8-exact weights and a bias."""
    def build():
        shape = (3, out_channels // group) if transpose else (out_channels, 3 // group)
        inits = {"w": grid_weights(shape + (3, 3), seed=5, axis=1 if transpose else 0),
                 "b": np.random.default_rng(5).standard_normal(out_channels).astype(np.float32)}
        node = helper.make_node("ConvTranspose" if transpose else "Conv", ["x", "w", "b"], ["y"],
                                group=group, **attrs)
        return make_model([node], {"x": (F, NCHW)}, {"y": F}, inits)
    return build


def grid_dense(shape=(2, 12)):
    def build():
        inits = {"w": grid_weights((5, 12), seed=6), "b": np.linspace(-1, 1, 5, dtype=np.float32)}
        node = helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)
        return make_model([node], {"x": (F, shape)}, {"y": F}, inits)
    return build


WEIGHTED = {
    "conv": Case("conv", "CONV_2D", grid_conv(4, pads=[1, 1, 1, 1])),
    "conv-stride2-nobias": Case("conv-stride2", "CONV_2D", grid_conv(5, strides=[2, 2])),
    "conv-relu": None,  # the fused RELU is covered by "conv" with a clamp below
    "depthwise": Case("depthwise", "DEPTHWISE_CONV_2D", grid_conv(3, group=3, pads=[1, 1, 1, 1])),
    "depthwise-multiplier2": Case("depthwise-multiplier2", "DEPTHWISE_CONV_2D", grid_conv(6, group=3)),
    "conv-transpose": Case("conv-transpose", "TRANSPOSE_CONV", grid_conv(4, transpose=True, strides=[2, 2])),
    "gemm": Case("gemm", "FULLY_CONNECTED", grid_dense()),
    "matmul": None,
    "matmul-3d": None,
    "gemm-per-tensor": None,
}
# The fixed-output ops alone: in int16 their output step is 1/32768, so they stay int16 at a
# model output (the int8 tests put a MUL behind them).
FIXED = [
    Case("sigmoid", "LOGISTIC", unary("Sigmoid"), wide),
    Case("tanh", "TANH", unary("Tanh"), wide),
    Case("softmax", "SOFTMAX", unary("Softmax"), wide),
]


# TFLite's 16x8 TANH and SOFTMAX read their function from lookup tables with linear interpolation
# between entries: measured up to 2.1 (TANH) and 7.5 (SOFTMAX) int16 steps of 1/32768 from the exact
# function on these samples (SOFTMAX's 7.5 steps are 1/34 of its int8 step), so they are held to
# that. (Its 16x8 EXP, 100 steps off at large outputs, is not used: EXP has no int16 rule.)
LOOKUP_TABLE_STEPS = {"tanh": 3, "softmax": 8}
# Variants whose 16x8 kernel is not exact enough to use: they stay float (test_variant_stays_float).
NOT_INT16 = {"resize-bilinear-align-corners"}
# Where TFLite Micro has no 16x8 kernel (it refuses the int16 tensors at prepare or invoke time;
# MICRO_UNSUPPORTED also applies).
MICRO_UNSUPPORTED16 = {
    "reduce-max": "TFLite Micro's REDUCE_MAX has no int16 kernel",
    "reduce-min": "TFLite Micro's REDUCE_MIN has no int16 kernel",
    "pad-reflect": "TFLite Micro's MIRROR_PAD has no int16 kernel",
    "gather": "TFLite Micro's GATHER has no int16 kernel",
    "gather-nd": "TFLite Micro's GATHER_ND has no int16 kernel",
    "resize-bilinear": "TFLite Micro's RESIZE_BILINEAR has no int16 kernel",
}


def _int16_cases():
    cases = []
    for case in CASES:
        rule = TFLITE_OPS[case.op].quant
        if case.id in WEIGHTED:
            case = WEIGHTED[case.id]
        if case is None or not rule.int16 or rule.output == "fixed" or case.id in NOT_INT16:
            continue
        cases.append(case)
    return cases + [c for c in FIXED if TFLITE_OPS[c.op].quant.int16]


CASES16 = _int16_cases()


@pytest.mark.parametrize("case", CASES16, ids=[c.id for c in CASES16])
def test_op_int16(case, tmp_path):
    model = case.model()
    samples = calibration(model, case.draw)
    options = {**case.options, "activations": "int16"}
    steps = LOOKUP_TABLE_STEPS.get(case.id, 2)
    flatbuffer, report = assert_int8_matches_onnxruntime(model, tmp_path, samples, steps=steps, **options)
    assert_every_sample_matches(model, flatbuffer, report, samples, steps=steps)
    check_int8_op(flatbuffer, case.op, activation_type="INT16")
    assert report.quantization.int16_ops >= 1 and report.quantization.int8_ops == 0


def test_op_without_16x8_kernel_stays_float(tmp_path):
    """HardSwish has no 16x8 kernel: between int16 convolutions it runs float, read through a
    DEQUANTIZE from int16 and written back through a QUANTIZE to int16."""
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("HardSwish", ["a"], ["h"]),
             helper.make_node("Conv", ["h", "w2"], ["y"], pads=[1, 1, 1, 1])]
    inits = {"w1": grid_weights((4, 3, 3, 3), seed=1), "w2": grid_weights((2, 4, 3, 3), seed=2)}
    model = make_model(nodes, {"x": (F, NCHW)}, {"y": F}, inits, opset=14)
    samples = calibration(model, wide)
    flatbuffer, report = assert_int8_matches_onnxruntime(
        model, tmp_path, samples, steps=2, activations="int16", allow_float=("HARD_SWISH",))
    summary = read_tflite(flatbuffer)
    kinds = [(op.name, summary.tensors[op.inputs[0]].dtype, summary.tensors[op.outputs[0]].dtype)
             for op in summary.operators]
    assert kinds == [("QUANTIZE", "FLOAT32", "INT16"), ("CONV_2D", "INT16", "INT16"),
                     ("DEQUANTIZE", "INT16", "FLOAT32"), ("HARD_SWISH", "FLOAT32", "FLOAT32"),
                     ("QUANTIZE", "FLOAT32", "INT16"), ("CONV_2D", "INT16", "INT16"),
                     ("DEQUANTIZE", "INT16", "FLOAT32")]
    assert [f.op for f in report.quantization.float_ops] == ["HARD_SWISH"]
    assert "16x8" in report.quantization.float_ops[0].reason


@pytest.mark.parametrize("case_id", sorted(NOT_INT16))
def test_variant_stays_float(case_id, tmp_path):
    """RESIZE_BILINEAR with align_corners: its 16x8 kernel's fixed-point weights are 100 int16
    steps off, so under --activations int16 it runs float (and matches onnxruntime closely)."""
    case = next(c for c in CASES if c.id == case_id)
    model = case.model()
    samples = calibration(model, case.draw)
    flatbuffer, report = convert_quantized(model, samples, tmp_path, activations="int16")
    assert [f.op for f in report.quantization.float_ops] == [case.op]
    feeds = snap_to_input_grid(flatbuffer, {name: values[0] for name, values in samples.items()})
    for name, want in run_onnxruntime(model, feeds).items():
        np.testing.assert_allclose(run_tflite(flatbuffer, report, feeds)[name], want, rtol=1e-5, atol=1e-6)


def test_int8_io_requantizes_to_int16(tmp_path):
    """--io-type int8 with int16 activations: the graph's input and output are int8, QUANTIZE ops
    convert them to and from the int16 tensors inside; the output is within 2 of its int8 steps."""
    model = grid_conv(4, pads=[1, 1, 1, 1])()
    samples = calibration(model, wide)
    flatbuffer, report = convert_quantized(model, samples, tmp_path, activations="int16", io_type="int8")
    summary = read_tflite(flatbuffer)
    kinds = [(op.name, summary.tensors[op.inputs[0]].dtype, summary.tensors[op.outputs[0]].dtype)
             for op in summary.operators]
    assert kinds == [("QUANTIZE", "INT8", "INT16"), ("CONV_2D", "INT16", "INT16"),
                     ("QUANTIZE", "INT16", "INT8")]
    x_info, y_info = summary.tensors[summary.operators[0].inputs[0]], summary.tensors[summary.operators[2].outputs[0]]
    feeds = snap_to_input_grid(flatbuffer, {"x": samples["x"][0]})  # no float QUANTIZE: unchanged
    x = feeds["x"]
    q = np.clip(np.round(x / x_info.scales[0]) + x_info.zero_points[0], -128, 127).astype(np.int8)
    real = ((q.astype(np.float32) - x_info.zero_points[0]) * x_info.scales[0]).astype(np.float32)
    out = run_tflite(flatbuffer, report, {"x": q})["y"]
    got = (out.astype(np.float32) - y_info.zero_points[0]) * y_info.scales[0]
    want = run_onnxruntime(model, {"x": real})["y"]
    np.testing.assert_allclose(got, want, rtol=0, atol=2 * y_info.scales[0])


@pytest.mark.parametrize("case", CASES16, ids=[c.id for c in CASES16])
def test_op_int16_reference_kernels(case, tmp_path):
    """The same with TFLite's reference kernels (the code TFLite Micro's kernels follow)."""
    model = case.model()
    samples = calibration(model, case.draw)
    flatbuffer, report = convert_quantized(model, samples, tmp_path, activations="int16")
    assert_every_sample_matches(model, flatbuffer, report, samples, LOOKUP_TABLE_STEPS.get(case.id, 2),
                                run=run_reference_kernels)


@pytest.mark.parametrize("case", CASES16, ids=[c.id for c in CASES16])
def test_op_int16_micro(case, tmp_path):
    """The same in TFLite Micro where it has a 16x8 kernel (MICRO_UNSUPPORTED16 says where not)."""
    if case.id in MICRO_UNSUPPORTED or case.id in MICRO_UNSUPPORTED16:
        pytest.skip(MICRO_UNSUPPORTED.get(case.id) or MICRO_UNSUPPORTED16[case.id])
    model = case.model()
    samples = calibration(model, case.draw)
    flatbuffer, report = convert_quantized(model, samples, tmp_path, activations="int16")
    assert_every_sample_matches(model, flatbuffer, report, samples, LOOKUP_TABLE_STEPS.get(case.id, 2),
                                run=run_micro)
