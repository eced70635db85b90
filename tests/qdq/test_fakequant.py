"""`qconvert fakequant` (qconvert/qdq/fakequant.py): the ONNX model with Q/DQ pairs where the int8
conversion quantizes. The pairs sit exactly where the rules put them (the tensor list is asserted);
onnxruntime runs the result like LiteRT runs the int8 .tflite; converting it back with --quantize
and no calibration gives the params of `--quantize --calibration`, tensor by tensor."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
from ai_edge_litert.interpreter import Interpreter
from onnx import TensorProto, helper, numpy_helper

from tests.harness import fake_quant
from qconvert.transforms.keep_requested_float import KEPT_FLOAT
from qconvert.transforms.pipeline import QuantizeOptions
from tests.harness import convert_proto, output_steps, run_onnxruntime, run_tflite
from tests.qdq.test_qdq_import import SAMPLES, residual_cnn

C = 8


def folded_cnn() -> onnx.ModelProto:
    """What the float steps fold before quantizing: batch norms into a conv and a depthwise conv,
    a Clip(0, 6) fused as RELU6; then a concatenation, an average pool (lowered to a depthwise
    conv), a HardSwish (decomposed), and a MatMul + Add (a FULLY_CONNECTED with bias)."""
    rng = np.random.default_rng(0)

    def init(name, shape, scale=1.0, offset=0.0):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale + offset).astype(np.float32), name)

    def variance(name):
        return numpy_helper.from_array(rng.uniform(0.5, 2, C).astype(np.float32), name)

    nodes = [
        helper.make_node("Mul", ["x", "s0"], ["xs"], name="prescale"),
        helper.make_node("Conv", ["xs", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("BatchNormalization", ["c1", "g1", "be1", "m1", "v1"], ["n1"], name="bn1"),
        helper.make_node("Clip", ["n1", "lo", "hi"], ["r1"], name="relu6"),
        helper.make_node("Conv", ["r1", "wd"], ["d1"], pads=[1, 1, 1, 1], group=C, name="dw"),
        helper.make_node("BatchNormalization", ["d1", "g2", "be2", "m2", "v2"], ["n2"], name="bn2"),
        helper.make_node("Relu", ["n2"], ["r2"], name="relu2"),
        helper.make_node("Conv", ["x", "w3", "b3"], ["c3"], pads=[1, 1, 1, 1], name="side"),
        helper.make_node("Concat", ["r2", "c3"], ["cat"], axis=1, name="cat"),
        helper.make_node("AveragePool", ["cat"], ["ap"], kernel_shape=[2, 2], strides=[2, 2], name="avg"),
        helper.make_node("HardSwish", ["ap"], ["hs"], name="hswish"),
        helper.make_node("GlobalAveragePool", ["hs"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
        helper.make_node("MatMul", ["f", "wm"], ["mm"], name="matmul"),
        helper.make_node("Add", ["mm", "bm"], ["y"], name="bias"),
    ]
    inits = [numpy_helper.from_array(np.array(1.7, np.float32), "s0"),
             init("w1", (C, 3, 3, 3), .3), init("b1", C, .1), init("g1", C, .5, 1), init("be1", C, .2),
             init("m1", C, .1), variance("v1"),
             numpy_helper.from_array(np.array(0, np.float32), "lo"),
             numpy_helper.from_array(np.array(6, np.float32), "hi"),
             init("wd", (C, 1, 3, 3), .5), init("g2", C, .5, -0.2), init("be2", C, .2), init("m2", C, .1),
             variance("v2"), init("w3", (4, 3, 3, 3), 2.0), init("b3", 4, .5),
             init("wm", (C + 4, 5), .5), init("bm", 5, .1)]
    graph = helper.make_graph(nodes, "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)


def conv_chain() -> onnx.ModelProto:
    """Three Conv+Relu, a global average pool, Gemm+Relu and a MatMul, in one chain: every tensor has
    one reader, so onnxruntime's default optimizations make its int8 pairs uint8 and fuse every
    Conv, the Gemm and the MatMul into integer kernels (with int8 weights: u8 x s8, 12 output steps
    off on a CPU without VNNI)."""
    rng = np.random.default_rng(3)
    nodes, inits, x, channels = [], [], "x", 3
    for k, out in enumerate([16, 32, 32]):
        inits += [numpy_helper.from_array((rng.standard_normal((out, channels, 3, 3)) * 0.3).astype(np.float32),
                                          f"w{k}"),
                  numpy_helper.from_array((rng.standard_normal(out) * 0.1).astype(np.float32), f"b{k}")]
        nodes += [helper.make_node("Conv", [x, f"w{k}", f"b{k}"], [f"c{k}"], pads=[1, 1, 1, 1], name=f"conv{k}"),
                  helper.make_node("Relu", [f"c{k}"], [f"r{k}"], name=f"relu{k}")]
        x, channels = f"r{k}", out
    nodes += [helper.make_node("GlobalAveragePool", [x], ["g"], name="gap"),
              helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
              helper.make_node("Gemm", ["f", "wg", "bg"], ["h"], transB=1, name="fc1"),
              helper.make_node("Relu", ["h"], ["hr"], name="relu_fc"),
              helper.make_node("MatMul", ["hr", "wm"], ["y"], name="fc2")]
    inits += [numpy_helper.from_array((rng.standard_normal((64, channels)) * 0.5).astype(np.float32), "wg"),
              numpy_helper.from_array((rng.standard_normal(64) * 0.1).astype(np.float32), "bg"),
              numpy_helper.from_array((rng.standard_normal((64, 5)) * 0.5).astype(np.float32), "wm")]
    graph = helper.make_graph(nodes, "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


MODELS = {"residual": residual_cnn, "folded": folded_cnn, "chain": conv_chain}


@pytest.fixture(scope="module")
def calibration(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("fakequant") / "calibration.npz"
    np.savez(path, x=SAMPLES[:16, 0])
    return str(path)


@pytest.fixture(scope="module", params=sorted(MODELS))
def converted(request, calibration):
    """(float model, fake-quant model and its report, the int8 .tflite of the float model)."""
    model = MODELS[request.param]()
    written, report = fake_quant("<test>", data=model.SerializeToString(), quantize=QuantizeOptions(),
                                 calibration=calibration)
    tflite, tflite_report = convert_proto(model, quantize=QuantizeOptions(), calibration=calibration)
    return model, onnx.load_from_string(written), report, tflite, tflite_report


def _pairs(model: onnx.ModelProto) -> dict[str, tuple[float, int]]:
    """{tensor a QuantizeLinear reads: (scale, zero point)}."""
    constants = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    return {n.input[0].removesuffix("_fq_float"): (float(constants[n.input[1]]), int(constants[n.input[2]]))
            for n in model.graph.node if n.op_type == "QuantizeLinear"}


def test_pairs_sit_where_the_int8_graph_quantizes(calibration):
    """The rule list on a CNN with a residual Add and fused ReLUs: the input; a conv's output after
    the ReLU fused into it (c1 has none); the bypass Add's inputs (c2, r1) and its output after
    the ReLU fused into the ADD (a has none); a max pool's and a flatten's outputs at their inputs'
    params (same-scale ops); weights int8 per channel (stored uint8 q + 128, zero point 128), biases
    int32; the graph output."""
    written, report = fake_quant("<test>", data=residual_cnn().SerializeToString(),
                                 quantize=QuantizeOptions(), calibration=calibration)
    model = onnx.load_from_string(written)
    pairs = _pairs(model)
    assert report.activations == ["x", "r1", "c2", "r2", "p", "g", "f", "y"]
    assert list(pairs) == report.activations
    assert pairs["p"] == pairs["r2"] and pairs["f"] == pairs["g"]
    assert report.weights == ["w1", "w2", "wg"] and report.biases == ["b1", "b2", "bg"]
    assert report.ranges_in_metadata == ["x"] and report.float_weights == []  # the float input's
    dequantized = {n.output[0]: n for n in model.graph.node if n.op_type == "DequantizeLinear"}
    constants = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for weight in report.weights:
        node = dequantized[weight]
        stored = constants[node.input[0]]
        assert stored.dtype == np.uint8 and np.abs(stored.astype(np.int16) - 128).max() == 127
        assert stored.min() >= 1 and np.all(constants[node.input[2]] == 128)  # symmetric on [-127, 127]
    for bias in report.biases:
        assert constants[dequantized[bias].input[0]].dtype == np.int32
    onnx.checker.check_model(model)


def test_onnxruntime_runs_it_as_litert_runs_the_int8_model(converted):
    model, fake, _, tflite, tflite_report = converted
    step = output_steps(tflite)["y"]
    for sample in SAMPLES[16:]:
        feeds = {"x": sample}
        expected = run_tflite(tflite, tflite_report, feeds)["y"]
        got = run_onnxruntime(fake, feeds)["y"]
        assert np.abs(got - expected).max() <= 2.001 * step  # a thousandth: float32 rounding of y
        # the pairs model the int8 rounding: closer to LiteRT than the float model on average (a
        # value at a rounding tie may land a step apart, the float model is off everywhere)
        float_error = np.abs(run_onnxruntime(model, feeds)["y"] - expected).mean()
        assert np.abs(got - expected).mean() < float_error


# onnxruntime's fused kernels that multiply 8-bit integer matrices -> the input index of the weight.
INTEGER_MATMULS = {"QLinearConv": 3, "QLinearConvTranspose": 3, "QLinearMatMul": 3, "QGemm": 3,
                   "MatMulInteger": 1, "ConvInteger": 1, "MatMulIntegerToFloat": 1}
# Fused kernels that quantize their float input themselves, at params no pair says.
RUNTIME_QUANTIZERS = ("DynamicQuantizeLinear", "DynamicQuantizeMatMul", "DynamicQuantizeLSTM", "MatMulNBits")


def test_default_onnxruntime_fuses_no_saturating_kernel_and_runs_it_as_litert(converted, tmp_path):
    """onnxruntime with its default session options (every graph optimization) gives LiteRT's int8
    results within one output step, and each integer kernel it fused the graph into multiplies by
    uint8 weights (u8 x u8), none quantizes a float input itself.

    The weight types stand for CPUs without VNNI wherever the test runs: onnxruntime's graph
    optimizer fuses the same on x86 CPUs with and without VNNI (its choices depend on the model and
    on the build, x86 or ARM); the CPU chooses only the instructions a fused kernel runs, and only
    the kernels with a signed 8-bit weight (u8 x s8, s8 x s8) take another path without VNNI:
    VPMADDUBSW, whose 16-bit sums saturate (12 to 20 output steps off on these models). u8 x u8
    kernels widen to 16 bits first (VPMADDWD) and sum exactly on every x86 CPU. On a VNNI machine,
    where a signed weight would give the right output too, its type still fails the test."""
    import onnxruntime as ort

    _, fake, _, tflite, tflite_report = converted
    options = ort.SessionOptions()  # the default optimizations; errors only in the log
    options.log_severity_level = 3
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    session = ort.InferenceSession(fake.SerializeToString(), options, providers=["CPUExecutionProvider"])
    optimized = onnx.load(options.optimized_model_filepath).graph
    types = {t.name: t.data_type for t in optimized.initializer}
    fused = [n for n in optimized.node if n.op_type in INTEGER_MATMULS]
    for node in fused:
        weight = node.input[INTEGER_MATMULS[node.op_type]]
        assert types.get(weight) == TensorProto.UINT8, (node.op_type, node.name, weight, types.get(weight))
    assert not [n.op_type for n in optimized.node if n.op_type in RUNTIME_QUANTIZERS]
    step = output_steps(tflite)["y"]
    for sample in SAMPLES[16:]:
        expected = run_tflite(tflite, tflite_report, {"x": sample})["y"]
        np.testing.assert_allclose(session.run(["y"], {"x": sample})[0], expected, rtol=0,
                                   atol=1.001 * step)


def _tensors(flatbuffer: bytes) -> dict[str, tuple[dict, np.ndarray | None]]:
    interpreter = Interpreter(model_content=flatbuffer)
    tensors = {}
    for d in interpreter.get_tensor_details():
        try:
            data = interpreter.get_tensor(d["index"]).copy()
        except ValueError:
            data = None
        tensors[d["name"]] = (d["quantization_parameters"], d["dtype"], data)
    return tensors


def assert_same_params(expected_flatbuffer: bytes, got_flatbuffer: bytes) -> None:
    """Tensor by tensor: the same names and types; activation scales and zero points equal;
    weights the same integers, their scales within float32 rounding where a batch norm was folded
    into them (1e-6)."""
    expected, got = _tensors(expected_flatbuffer), _tensors(got_flatbuffer)
    assert sorted(got) == sorted(expected)
    for name, (params, dtype, data) in expected.items():
        got_params, got_dtype, got_data = got[name]
        assert got_dtype == dtype, name
        np.testing.assert_array_equal(got_params["zero_points"], params["zero_points"], err_msg=name)
        np.testing.assert_allclose(got_params["scales"], params["scales"], rtol=1e-6, atol=0, err_msg=name)
        if dtype == np.int8 and data is not None and got_data is not None:  # weights
            np.testing.assert_array_equal(got_data, data, err_msg=name)
        if dtype in (np.int8, np.int16) and data is None:  # an activation: exactly
            np.testing.assert_array_equal(got_params["scales"], params["scales"], err_msg=name)


def test_converting_it_back_gives_the_same_params(converted):
    _, fake, _, tflite, _ = converted
    back, report = convert_proto(fake, quantize=QuantizeOptions())
    assert report.quantization.calibration_samples == 0 and report.quantization.qdq_tensors
    assert_same_params(tflite, back)


def test_cli_writes_the_model_and_one_summary_line(tmp_path, calibration):
    source = tmp_path / "float.onnx"
    onnx.save(folded_cnn(), source)
    before = source.read_bytes()
    out = tmp_path / "fq.onnx"
    run = subprocess.run([sys.executable, "-m", "qconvert", "fakequant", str(source), str(out),
                          "--calibration", calibration, "--json"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stderr.count("\n") == 1 and "fake-quant pairs on 11 tensors" in run.stderr
    report = json.loads(run.stdout)
    assert report["weights"] == ["w1", "wd", "w3", "wm"] and report["biases"] == ["b3"]
    assert "hs_nhwc_gate" in report["ranges_in_metadata"]  # the HardSwish decomposition's gate
    assert source.read_bytes() == before
    onnx.checker.check_model(onnx.load(out))


def test_cli_without_ranges_is_a_usage_error(tmp_path):
    source = tmp_path / "float.onnx"
    onnx.save(residual_cnn(), source)
    out = tmp_path / "fq.onnx"
    run = subprocess.run([sys.executable, "-m", "qconvert", "fakequant", str(source), str(out)],
                         capture_output=True, text=True)
    assert run.returncode == 2 and "--calibration" in run.stderr and run.stderr.count("\n") == 1
    assert not out.exists()


def test_a_float_op_s_output_gets_its_pair_only_on_the_edges_to_int8_readers(tmp_path, calibration):
    """A kept-float LOGISTIC whose output is a graph output and a conv's input: TFLite quantizes
    it for the conv only, so only the conv reads through the pair, the output stays as it was; the
    conversion of the graph keeps it float without --keep-float (the metadata names it)."""
    model = residual_cnn()
    graph = model.graph
    relu = next(n for n in graph.node if n.name == "relu1")
    relu.op_type, relu.name = "Sigmoid", "sigmoid"
    graph.output.append(helper.make_tensor_value_info("r1", TensorProto.FLOAT, None))
    written, report = fake_quant("<test>", data=model.SerializeToString(), quantize=QuantizeOptions(),
                                 calibration=calibration, keep_float=("sigmoid",))
    fake = onnx.load_from_string(written)
    readers = {n.name: list(n.input) for n in fake.graph.node}
    assert "r1" in report.activations
    assert readers["conv2"][0] == "r1_fq" and readers["add"][1] == "r1_fq"
    assert [o.name for o in fake.graph.output] == ["y", "r1"]
    assert next(n for n in fake.graph.node if n.name == "sigmoid").output[0] == "r1"
    assert report.quantization.float_ops[0].op == "LOGISTIC"
    tflite, _ = convert_proto(model, quantize=QuantizeOptions(), calibration=calibration,
                              keep_float=("sigmoid",))
    back, report = convert_proto(fake, quantize=QuantizeOptions())  # the metadata keeps it float
    assert [(f.op, f.reason) for f in report.quantization.float_ops] == [("LOGISTIC", KEPT_FLOAT)]
    assert_same_params(tflite, back)


def test_the_planner_s_promotions_come_back_from_the_metadata(calibration):
    """--target-sqnr: the planner's promoted nodes (float on arm64, int16 on the integer-only
    npu, which also takes int8 inputs and outputs) are in the metadata, and the conversion of the
    graph makes the same model."""
    from qconvert.driver.options import PlanOptions as PlanRequest

    model = folded_cnn()
    for device, target in (("arm64", 50.0), ("npu", 32.0)):  # all int8: 31 dB
        plan, io = PlanRequest(target), QuantizeOptions(io_type="int8" if device == "npu" else "float")
        written, report = fake_quant("<test>", data=model.SerializeToString(), quantize=io,
                                     calibration=calibration, plan=plan, target=device)
        promotions = report.quantization.plan.promotions
        assert promotions, device
        fake = onnx.load_from_string(written)
        precision = json.loads(next(p.value for p in fake.metadata_props
                                    if p.key == "qconvert.fakequant.precision"))
        listed = set(precision["float"]) if device == "arm64" else set(precision["int16"])
        assert listed == {p.node for p in promotions}
        tflite, _ = convert_proto(model, quantize=io, calibration=calibration, plan=plan, target=device)
        back, _ = convert_proto(fake, quantize=io, target=device)
        assert_same_params(tflite, back)


def test_malformed_metadata_ranges_are_one_line_naming_the_key(tmp_path, calibration):
    written, _ = fake_quant("<test>", data=folded_cnn().SerializeToString(), quantize=QuantizeOptions(),
                            calibration=calibration)
    fake = onnx.load_from_string(written)
    entry = next(p for p in fake.metadata_props if p.key == "qconvert.fakequant.ranges")
    entry.value = json.dumps({"hs_nhwc_gate": [1.0, float("nan")]}).replace("NaN", "1e999")
    path = tmp_path / "bad.onnx"
    onnx.save(fake, path)
    run = subprocess.run([sys.executable, "-m", "qconvert", str(path), str(tmp_path / "x.tflite"),
                          "--quantize"], capture_output=True, text=True)
    assert run.returncode == 1 and run.stderr.count("\n") == 1
    assert "metadata 'qconvert.fakequant.ranges'" in run.stderr and "hs_nhwc_gate" in run.stderr


def test_python_api_gives_the_cli_s_graph(tmp_path, calibration):
    import qconvert

    source = tmp_path / "float.onnx"
    onnx.save(residual_cnn(), source)
    out = tmp_path / "fq.onnx"
    subprocess.run([sys.executable, "-m", "qconvert", "fakequant", str(source), str(out), "--calibration",
                    calibration], check=True, capture_output=True)
    written, report = qconvert.fake_quant(residual_cnn(), calibration={"x": SAMPLES[:16, 0]})
    assert written == out.read_bytes()  # deterministic, and the same from a dict of arrays
    assert report.activations == ["x", "r1", "c2", "r2", "p", "g", "f", "y"]
    with pytest.raises(qconvert.UsageError, match="--calibration"):
        qconvert.fake_quant(residual_cnn())


def test_int16_activations_give_int16_pairs_and_the_same_16x8_model_back(calibration):
    """--activations int16: int16 pairs (zero point 0) at opset 21, which onnxruntime (graph
    optimizations off) runs within 4 int16 output steps of LiteRT running the 16x8 .tflite; converting
    the graph back with --quantize alone gives the same 16x8 model's params (the mode rides in the
    metadata)."""
    model = folded_cnn()
    written, report = fake_quant("<test>", data=model.SerializeToString(),
                                 quantize=QuantizeOptions(activations="int16"), calibration=calibration)
    fake = onnx.load_from_string(written)
    assert next(o.version for o in fake.opset_import if o.domain in ("", "ai.onnx")) == 21
    constants = {t.name: numpy_helper.to_array(t) for t in fake.graph.initializer}
    zero_points = [constants[n.input[2]] for n in fake.graph.node if n.op_type == "QuantizeLinear"]
    assert zero_points and all(z.dtype == np.int16 and z == 0 for z in zero_points)
    tflite, tflite_report = convert_proto(model, quantize=QuantizeOptions(activations="int16"),
                                          calibration=calibration)
    assert tflite_report.quantization.int16_ops and not tflite_report.quantization.int8_ops
    back, report = convert_proto(fake, quantize=QuantizeOptions())
    assert report.quantization.int16_ops == tflite_report.quantization.int16_ops
    assert_same_params(tflite, back)
    # onnxruntime's extended optimizations fuse the int16 graph's MatMul into MatMulNBits, which
    # quantizes its input to int8 (261 int16 steps off here); unoptimized (run_onnxruntime) it
    # computes what the pairs say.
    step = output_steps(tflite)["y"]
    for sample in SAMPLES[16:20]:
        np.testing.assert_allclose(run_onnxruntime(fake, {"x": sample})["y"],
                                   run_tflite(tflite, tflite_report, {"x": sample})["y"], rtol=0,
                                   atol=4 * step)


def test_the_same_bytes_every_run(tmp_path, calibration):
    """Byte for byte, whatever Python's hash seed (the --keep-float node set is a set)."""
    import os

    source = tmp_path / "float.onnx"
    onnx.save(folded_cnn(), source)
    written = []
    for seed in ("1", "2"):
        out = tmp_path / f"fq{seed}.onnx"
        subprocess.run([sys.executable, "-m", "qconvert", "fakequant", str(source), str(out), "--calibration",
                        calibration, "--keep-float", "Conv"], check=True, capture_output=True,
                       env={**os.environ, "PYTHONHASHSEED": seed})
        written.append(out.read_bytes())
    assert written[0] == written[1]


def _conv1d_and_dense():
    """x [1, 4, 32] -> Conv 1-D (kernel 5, its IR weight 4-D) -> Relu -> Flatten -> Gemm: weights
    whose ONNX and IR layouts differ in rank (the DNSMOS front end's)."""
    rng = np.random.default_rng(7)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[2, 2]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Flatten", ["r"], ["f"]), helper.make_node("Gemm", ["f", "g"], ["y"], transB=1)]
    inits = {"w": (rng.standard_normal((6, 4, 5)) * 0.3).astype(np.float32),
             "g": (rng.standard_normal((3, 6 * 32)) * 0.1).astype(np.float32)}
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.mark.parametrize("make", [_conv1d_and_dense, residual_cnn, folded_cnn], ids=["conv1d", "residual", "folded"])
def test_weights_in_layout_order_take_the_same_integers_without_sorting(make, tmp_path, monkeypatch):
    """The fake-quant graph's integers from the IR's in layout order (qdq/fakequant.py
    _same_order) are the ones the general ranking gives, for ONNX and IR weights of other ranks
    (a 1-D conv), of the same layout, and with a fold's factor."""
    from qconvert.qdq import fakequant

    model = make()
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    path = tmp_path / "calibration.npz"
    np.savez(path, x=np.random.default_rng(0).standard_normal((8, *shape)).astype(np.float32))

    def integers():
        written, _ = fake_quant("<test>", data=model.SerializeToString(), quantize=QuantizeOptions(),
                                calibration=str(path))
        return {t.name: numpy_helper.to_array(t) for t in onnx.load_from_string(written).graph.initializer
                if t.data_type in (TensorProto.UINT8, TensorProto.INT8)}

    fast = integers()
    monkeypatch.setattr(fakequant, "_same_order", lambda *args: None)
    ranked = integers()
    assert fast.keys() == ranked.keys() and fast
    for name, value in fast.items():
        np.testing.assert_array_equal(value, ranked[name], err_msg=name)
