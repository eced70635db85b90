"""affine_to_depthwise (quantize phase): a per-channel MUL then a per-channel ADD on an NHWC feature
map becomes one 1x1 DEPTHWISE_CONV_2D with the scale as weights and the shift as bias, the ADD's
fused activation kept.

Shown here, with the step alone: the rewrite (constants on either side, a scalar scale, a fused
RELU) computes the same values in float (the 1x1 depthwise computed by hand); a rank-3 input, a
MUL read elsewhere, a MUL with its own activation, an ADD kept float, and a scale varying along H
are left alone. End to end, a BatchNormalization behind a Relu (which keeps it from folding into
the conv) and a Relu after it convert with --quantize to a DEPTHWISE_CONV_2D whose int8 weights
have one scale per channel (a MUL and an ADD, the MUL's constant with one scale, without the
step); both files match onnxruntime within 2 output steps. A QDQ model's exact GELU (onnxruntime
runs its Erf in float: no pair inside) converted by default keeps the Erf polynomial's MUL and ADD
float, not a float DEPTHWISE_CONV_2D, its convs int8, within 2 output steps of onnxruntime."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from qconvert.tflite.reader import read
from qconvert.transforms.affine_to_depthwise import affine_to_depthwise
from qconvert.transforms.engine import run_once
from tests.harness import assert_int8_matches_onnxruntime, grid_weights, make_model, without_quantize_step
from tests.transforms.builders import Builder, evaluate_model, op_types

F = TensorProto.FLOAT
NHWC = (1, 4, 4, 3)
SCALE = np.array([0.5, -1.5, 2.0], np.float32)
SHIFT = np.array([0.1, -0.2, 0.3], np.float32).reshape(1, 1, 1, 3)


def mul_add(shape=NHWC, scale=SCALE, activation="RELU"):
    b = Builder().input("x", shape).const("scale", scale).const("shift", SHIFT.reshape(-1)[:shape[-1]])
    b.op("MUL", ["x", "scale"], "m", shape).op("ADD", ["shift", "m"], "y", shape, activation=activation)
    return b.output("y").model


def run(model):
    run_once(model, [("affine_to_depthwise", affine_to_depthwise)])


def depthwise_1x1(x, op, model):
    """A 1x1, stride 1 DEPTHWISE_CONV_2D with depth multiplier 1 and a fused RELU, by hand
    (the op has no numpy evaluate)."""
    assert op.options["padding"] == "VALID" and op.options["depth_multiplier"] == 1
    assert (op.options["stride_h"], op.options["stride_w"]) == (1, 1)
    weights, bias = model.constant(op.inputs[1]), model.constant(op.inputs[2])
    assert weights.shape == (1, 1, 1, x.shape[-1]) and op.fused_activation == "RELU"
    return np.maximum(x * weights.reshape(-1) + bias, 0)


@pytest.mark.parametrize("scale", [SCALE, np.float32(2.0)])
def test_mul_add_becomes_a_depthwise_conv_keeping_the_activation(scale):
    model = mul_add(scale=scale)
    x = np.random.default_rng(0).standard_normal(NHWC).astype(np.float32)
    before = evaluate_model(model, {"x": x})["y"]
    run(model)
    assert op_types(model) == ["DEPTHWISE_CONV_2D"] and model.operators[0].inputs[0] == "x"
    np.testing.assert_allclose(depthwise_1x1(x, model.operators[0], model), before, rtol=1e-6, atol=1e-6)


def read_elsewhere():
    model = mul_add()
    model.outputs.append("m")
    return model


def mul_with_activation():
    model = mul_add()
    model.operators[0].fused_activation = "RELU"
    return model


def add_kept_float():
    model = mul_add()
    model.operators[1].float_reason = "--keep-float"
    return model


@pytest.mark.parametrize("build", [
    lambda: mul_add(shape=(4, 4, 3)),
    read_elsewhere,
    mul_with_activation,
    add_kept_float,
    lambda: mul_add(scale=np.array([1, 2, 3, 4], np.float32).reshape(4, 1, 1)),
], ids=["rank-3", "mul-read-elsewhere", "mul-activation", "add-kept-float", "scale-along-h"])
def test_left_alone(build):
    model = build()
    run(model)
    assert op_types(model) == ["MUL", "ADD"]


def relu_batchnorm_relu():
    bn = {"g": np.array([0.5, -1.5, 2.0], np.float32), "b": np.array([0.1, -0.2, 0.3], np.float32),
          "mu": np.array([0.2, 0.1, -0.3], np.float32), "var": np.array([1.0, 0.5, 2.0], np.float32),
          "w": grid_weights((3, 3, 3, 3))}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("BatchNormalization", ["r", "g", "b", "mu", "var"], ["n"]),
             helper.make_node("Relu", ["n"], ["y"])]
    return make_model(nodes, {"x": (F, (1, 3, 6, 6))}, {"y": F}, bn)


def test_onnx_batchnorm_after_relu_is_one_int8_depthwise_with_per_channel_scales(tmp_path, monkeypatch):
    model = relu_batchnorm_relu()
    flatbuffer, report = assert_int8_matches_onnxruntime(model, tmp_path)
    assert "MUL" not in report.op_counts and "ADD" not in report.op_counts
    summary = read(flatbuffer)
    conv = next(op for op in summary.operators if op.name == "DEPTHWISE_CONV_2D")
    weights = summary.tensors[conv.inputs[1]]
    assert weights.dtype == "INT8" and len(weights.scales) == 3 and weights.quantized_dimension == 3

    without_quantize_step(monkeypatch, "affine_to_depthwise")
    flatbuffer, report = assert_int8_matches_onnxruntime(model, tmp_path)
    assert report.op_counts.get("MUL") == report.op_counts.get("ADD") == 1
    assert "DEPTHWISE_CONV_2D" not in report.op_counts
    summary = read(flatbuffer)
    mul = next(op for op in summary.operators if op.name == "MUL")
    assert [len(summary.tensors[i].scales) for i in mul.inputs] == [1, 1]


def gelu_cnn() -> "onnx.ModelProto":
    """Conv 1x1 -> the exact GELU as exporters write it (Div, Erf, Add, Mul, Mul) -> Conv 1x1,
    quantized by onnxruntime's quantize_static to QDQ (per-channel int8 weights): its Erf has no
    pair on either side (onnxruntime runs Erf in float), as in the zoo's ConvNeXt blocks."""
    import math

    import onnx
    from onnx import numpy_helper
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    rng = np.random.default_rng(0)
    weights = {"w1": rng.standard_normal((8, 3, 1, 1)) * 0.8, "b1": rng.standard_normal(8) * 0.1,
               "w2": rng.standard_normal((4, 8, 1, 1)) * 0.4, "b2": rng.standard_normal(4) * 0.1,
               "sqrt2": np.array(math.sqrt(2)), "one": np.array(1.0), "half": np.array(0.5)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"]),
             helper.make_node("Div", ["c1", "sqrt2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["a"]), helper.make_node("Mul", ["c1", "a"], ["m"]),
             helper.make_node("Mul", ["m", "half"], ["g"]),
             helper.make_node("Conv", ["g", "w2", "b2"], ["y"])]
    inits = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [1, 3, 6, 6])],
                              [helper.make_tensor_value_info("y", F, [1, 4, 6, 6])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.samples = iter({"x": s} for s in GELU_SAMPLES[:16])

        def get_next(self):
            return next(self.samples, None)

    import tempfile
    from pathlib import Path
    with tempfile.TemporaryDirectory() as folder:
        onnx.save(model, Path(folder) / "float.onnx")
        quantize_static(str(Path(folder) / "float.onnx"), str(Path(folder) / "qdq.onnx"), Reader(),
                        quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
        return onnx.load(Path(folder) / "qdq.onnx")


GELU_SAMPLES = np.random.default_rng(1).uniform(-2, 2, (20, 1, 3, 6, 6)).astype(np.float32)


def _convert_by_default(model, folder):
    """`qconvert IN OUT --json` with default flags: (the file's bytes, its --json report with
    the inputs and outputs as attributes, as tests.harness.run_tflite reads them)."""
    import json
    from types import SimpleNamespace

    import onnx
    from click.testing import CliRunner

    from qconvert.cli import cli

    onnx.save(model, folder / "m.onnx")
    run = CliRunner().invoke(cli, [str(folder / "m.onnx"), str(folder / "m.tflite"), "--json"])
    assert run.exit_code == 0, run.stderr
    report = json.loads(run.stdout)
    ios = {key: [SimpleNamespace(dtype=np.dtype(io["dtype"]), name=io["name"],
                                 layout_permutation=io.get("layout_permutation")) for io in report[key]]
           for key in ("inputs", "outputs")}
    return (folder / "m.tflite").read_bytes(), report, SimpleNamespace(**ios)


def test_a_qdq_erf_s_float_polynomial_stays_mul_and_add_and_matches_onnxruntime(tmp_path):
    """Converted by default (int8 from the pairs), the Erf's polynomial steps (a MUL and an ADD
    by scalars on an NHWC map, tensors without a range) stay a float MUL and ADD: a
    DEPTHWISE_CONV_2D would have stayed float too, its scalar spread over the channels as float32
    weights, and counted as a weighted op left float. The convs are int8, the file within 2
    output steps of onnxruntime's QDQ run."""
    from tests.harness import output_steps, run_onnxruntime, run_tflite

    model = gelu_cnn()
    flatbuffer, report, ios = _convert_by_default(model, tmp_path)
    assert report["quantization"]["from_pairs"] and report["verify"]["passed"]
    assert "DEPTHWISE_CONV_2D" not in report["op_counts"], report["op_counts"]
    floats = {f["op"] for f in report["quantization"]["float_ops"]}
    assert {"MUL", "ADD"} <= floats and not floats & {"CONV_2D", "DEPTHWISE_CONV_2D"}, floats
    summary = read(flatbuffer)
    convs = [op for op in summary.operators if op.name == "CONV_2D"]
    assert len(convs) == 2 and all(summary.tensors[op.inputs[1]].dtype == "INT8" for op in convs)
    step = output_steps(flatbuffer)["y"]
    for sample in GELU_SAMPLES[16:]:  # inputs the quantizer did not see
        want = run_onnxruntime(model, {"x": sample})["y"]
        got = run_tflite(flatbuffer, ios, {"x": sample})["y"]
        np.testing.assert_allclose(got, want, rtol=0, atol=2 * step * (1 + 1e-6))
