"""QDQ import (qconvert/qdq/importer.py): a CNN that onnxruntime's quantize_static wrote in the QDQ
format (per-channel int8 weights; int8 or uint8 activations) converts with --quantize and no
calibration data; LiteRT runs it within 2 int8 steps of onnxruntime running the QDQ model, and the
.tflite's scales and zero points are the QDQ model's, tensor by tensor (uint8 zero points shifted
by -128)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from qconvert.check.inspect_tflite import inspect_file
from qconvert.transforms.pipeline import QuantizeOptions
from tests.harness import convert_proto, output_steps, run_onnxruntime, run_tflite

C = 8


def residual_cnn() -> onnx.ModelProto:
    """Conv+Relu -> Conv -> residual Add -> Relu -> MaxPool -> GlobalAveragePool -> Gemm."""
    rng = np.random.default_rng(0)

    def init(name, shape, scale):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
             helper.make_node("Add", ["c2", "r1"], ["a"], name="add"),
             helper.make_node("Relu", ["a"], ["r2"], name="relu2"),
             helper.make_node("MaxPool", ["r2"], ["p"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
             helper.make_node("GlobalAveragePool", ["p"], ["g"], name="gap"),
             helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "wg", "bg"], ["y"], transB=1, name="fc")]
    inits = [init("w1", (C, 3, 3, 3), 0.3), init("b1", C, 0.1), init("w2", (C, C, 3, 3), 0.2),
             init("b2", C, 0.1), init("wg", (5, C), 0.5), init("bg", 5, 0.1)]
    graph = helper.make_graph(nodes, "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


SAMPLES = np.random.default_rng(1).uniform(-1, 1, (24, 1, 3, 16, 16)).astype(np.float32)


@pytest.fixture(scope="module", params=["int8", "uint8"])
def qdq_model(request, tmp_path_factory) -> onnx.ModelProto:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.samples = iter({"x": s} for s in SAMPLES[:16])

        def get_next(self):
            return next(self.samples, None)

    folder = tmp_path_factory.mktemp(request.param)
    onnx.save(residual_cnn(), folder / "float.onnx")
    activations = QuantType.QInt8 if request.param == "int8" else QuantType.QUInt8
    quantize_static(str(folder / "float.onnx"), str(folder / "qdq.onnx"), Reader(),
                    quant_format=QuantFormat.QDQ, per_channel=True, activation_type=activations,
                    weight_type=QuantType.QInt8)
    return onnx.load(folder / "qdq.onnx")


def _qdq_params(model: onnx.ModelProto) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{tensor a QuantizeLinear reads, or a weight a DequantizeLinear reads: (scales, zero points)}."""
    constants = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    params = {}
    for node in model.graph.node:
        if node.op_type in ("QuantizeLinear", "DequantizeLinear") and (
                node.op_type == "QuantizeLinear" or node.input[0] in constants):
            params[node.input[0]] = (constants[node.input[1]], constants[node.input[2]])
    return params


def test_converts_without_calibration_within_2_steps_of_onnxruntime(qdq_model):
    flatbuffer, report = convert_proto(qdq_model, quantize=QuantizeOptions())
    assert report.quantization.float_ops == [], report.quantization.float_ops
    step = output_steps(flatbuffer)["y"]
    for sample in SAMPLES[16:]:  # inputs the quantizer did not see
        feeds = {"x": sample}
        want = run_onnxruntime(qdq_model, feeds)["y"]
        got = run_tflite(flatbuffer, report, feeds)["y"]
        np.testing.assert_allclose(got, want, rtol=0, atol=2 * step * (1 + 1e-6))


def test_calibration_data_changes_no_pair_s_range(qdq_model, tmp_path):
    """With --calibration too, each pair's range wins over the calibrated one across the
    same-scale ops beside it (a conv's NHWC output next to its TRANSPOSE: the calibrated range had
    been spread there first, so the pair's stopped at the TRANSPOSE and the int8 model ran at
    -0.7 dB), and channels between paired tensors are not equalized: within 2 output steps."""
    np.savez(tmp_path / "cal.npz", x=SAMPLES[:16])
    flatbuffer, report = convert_proto(qdq_model, quantize=QuantizeOptions(), calibration=str(tmp_path / "cal.npz"))
    plain, _ = convert_proto(qdq_model, quantize=QuantizeOptions())
    assert output_steps(flatbuffer) == output_steps(plain)
    step = output_steps(flatbuffer)["y"]
    for sample in SAMPLES[16:]:
        feeds = {"x": sample}
        got = run_tflite(flatbuffer, report, feeds)["y"]
        np.testing.assert_allclose(got, run_onnxruntime(qdq_model, feeds)["y"], rtol=0, atol=2 * step * (1 + 1e-6))


def test_the_tflite_carries_the_qdq_params(qdq_model, tmp_path):
    flatbuffer, _ = convert_proto(qdq_model, quantize=QuantizeOptions())
    (tmp_path / "m.tflite").write_bytes(flatbuffer)
    tensors = {t["name"]: t for t in inspect_file(str(tmp_path / "m.tflite"))["subgraphs"][0]["tensors"]}
    # The names qconvert gives: the ONNX name, its NHWC version, the quantized graph I/O; a
    # weight under its DequantizeLinear's output name; the FC's weights as "weights". The graph
    # output's Q reads ORT's "y_QuantizeLinear_Input": the .tflite has it as y's int8 copy.
    dq_outputs = {n.input[0]: n.output[0] for n in qdq_model.graph.node if n.op_type == "DequantizeLinear"}
    aliases = {"y_QuantizeLinear_Input": "y", "wg_quantized": "weights"}
    checked = []
    for name, (scales, zeros) in _qdq_params(qdq_model).items():
        base = aliases.get(name, name)
        candidates = [base, base + "_nhwc", base + "_int8", dq_outputs.get(name, "")]
        match = next((tensors[c] for c in candidates if c in tensors and tensors[c]["quantization"]), None)
        if match is None:
            match = next(t for n, t in tensors.items() if n.startswith(dq_outputs.get(name, "?")))
        q = match["quantization"]
        if name.startswith("b"):  # a bias: int32 at input scale x weight scale, computed again
            np.testing.assert_allclose(np.float32(q["scales"]), scales.reshape(-1), rtol=1e-6, err_msg=name)
        else:
            np.testing.assert_array_equal(np.float32(q["scales"]), scales.reshape(-1), err_msg=name)
        shift = 128 if zeros.dtype == np.uint8 else 0
        np.testing.assert_array_equal(np.asarray(q["zero_points"]),
                                      zeros.reshape(-1).astype(np.int64) - shift, err_msg=name)
        checked.append(name)
    assert {"x", "r1", "c2", "r2", "g", "y_QuantizeLinear_Input", "w1_quantized", "w2_quantized",
            "wg_quantized", "b1_quantized", "b2_quantized", "bg_quantized"} <= set(checked), checked


def test_without_quantize_the_pairs_become_clips(qdq_model):
    """A float conversion keeps each pair's clipping (onnxruntime's quantizer dropped the Relu
    after conv1: the uint8/int8 grid from 0 does it) and loses only the rounding: within 3 steps
    of the QDQ model's output grid."""
    flatbuffer, report = convert_proto(qdq_model)
    assert "QUANTIZE" not in report.op_counts and "DEQUANTIZE" not in report.op_counts
    y_scale = _qdq_params(qdq_model)["y_QuantizeLinear_Input"][0]
    for sample in SAMPLES[16:20]:
        feeds = {"x": sample}
        np.testing.assert_allclose(run_tflite(flatbuffer, report, feeds)["y"],
                                   run_onnxruntime(qdq_model, feeds)["y"], rtol=0, atol=3 * float(y_scale))


def _with_float_weights(qdq: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of the QDQ model with each constant under a DequantizeLinear (weights, biases) replaced
    by the float values it dequantizes to, on its grid: only the activations keep pairs."""
    model = onnx.ModelProto()
    model.CopyFrom(qdq)
    constants = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    kept = []
    for node in model.graph.node:
        if node.op_type != "DequantizeLinear" or node.input[0] not in constants:
            kept.append(node)
            continue
        q, scale, zero = (constants[name].astype(np.float64) for name in node.input)
        if scale.ndim:  # per channel, along the node's axis
            shape = [1] * q.ndim
            shape[next((a.i for a in node.attribute if a.name == "axis"), 1)] = -1
            scale, zero = scale.reshape(shape), zero.reshape(shape)
        model.graph.initializer.append(numpy_helper.from_array(((q - zero) * scale).astype(np.float32),
                                                               node.output[0]))
    del model.graph.node[:]
    model.graph.node.extend(kept)
    return model


def test_verification_runs_the_pairs_as_written(qdq_model, tmp_path):
    """qconvert's verification (runtimes.run_both's session) runs a graph with pairs unoptimized. With
    float weights on their per-channel grid and pairs on the activations, the .tflite computes what
    the graph says: 0 steps off. onnxruntime's basic level would requantize each float weight of a
    Conv or Gemm behind a DequantizeLinear per tensor (WeightBiasQuantization), 2 output steps off
    here; the default level fuses integer kernels whose results depend on the CPU (VNNI or not)."""
    from qconvert.check.verify import verify

    model = _with_float_weights(qdq_model)
    flatbuffer, _ = convert_proto(model, quantize=QuantizeOptions())
    path = tmp_path / "m.tflite"
    path.write_bytes(flatbuffer)
    check = verify(model, str(path), samples=[{"x": sample} for sample in SAMPLES[16:]]).outputs[0]
    assert check.max_abs_error <= 0.001 * output_steps(flatbuffer)["y"]


def test_params_tflite_must_change_are_changed_with_one_warning_each(qdq_model, caplog):
    """The pooled tensor 'p' given its own scale: MAX_POOL_2D's output must have its input's
    params, so 'p' is written with r2's, and one warning names 'p' with both params."""
    model = onnx.ModelProto()
    model.CopyFrom(qdq_model)
    model.graph.initializer.append(numpy_helper.from_array(np.array(0.05, np.float32), "p_own_scale"))
    for node in model.graph.node:
        if node.input[0] in ("p", "p_QuantizeLinear_Output"):
            node.input[1] = "p_own_scale"
    with caplog.at_level("WARNING", logger="qconvert"):
        flatbuffer, _ = convert_proto(model, quantize=QuantizeOptions())
    warnings = [r.getMessage() for r in caplog.records if "QDQ params" in r.getMessage()]
    assert len(warnings) == 1 and "tensor 'p'" in warnings[0] and "MAX_POOL_2D" in warnings[0], warnings
    assert "scale 0.05" in warnings[0]


def _dequantized_weight_model(scale, zero, axis=0) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.ones((4, 3, 1, 1), np.int8), "wq")
    nodes = [helper.make_node("DequantizeLinear", ["wq", "s", "z"], ["w"], axis=axis, name="dq"),
             helper.make_node("Conv", ["x", "w"], ["y"], name="conv")]
    graph = helper.make_graph(nodes, "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [w, numpy_helper.from_array(scale, "s"), numpy_helper.from_array(zero, "z")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.mark.parametrize("model, fragments", [
    (_dequantized_weight_model(np.ones(5, np.float32), np.zeros(5, np.int8)),
     ["node 'dq' (DequantizeLinear)", "do not fit 'wq'"]),
    (_dequantized_weight_model(np.array(-1.0, np.float32), np.array(0, np.int8)),
     ["node 'dq' (DequantizeLinear)", "finite and positive"]),
    (_dequantized_weight_model(np.ones(4, np.float32), np.zeros(4, np.int8), axis=7),
     ["node 'dq' (DequantizeLinear)", "axis 7"]),
], ids=["scales_do_not_fit", "negative_scale", "axis_out_of_range"])
def test_bad_qdq_params_are_one_line_exit_1(model, fragments, tmp_path):
    from click.testing import CliRunner

    from qconvert.cli import cli

    onnx.save(model, tmp_path / "m.onnx")
    result = CliRunner().invoke(cli, [str(tmp_path / "m.onnx"), str(tmp_path / "m.tflite")])
    assert result.exit_code == 1, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and all(f in lines[0] for f in fragments), lines
    assert not (tmp_path / "m.tflite").exists()


def test_a_bias_off_input_times_weight_scale_is_requantized_with_a_warning(qdq_model, caplog):
    """onnxruntime writes each bias at input scale x weight scale (no warning); one at twice that
    is requantized to it, with one warning naming the node and the bias."""
    with caplog.at_level("WARNING", logger="qconvert"):
        convert_proto(qdq_model, quantize=QuantizeOptions())
    assert not [r for r in caplog.records if r.levelname == "WARNING"], caplog.text
    caplog.clear()
    model = onnx.ModelProto()
    model.CopyFrom(qdq_model)
    scale = next(t for t in model.graph.initializer if t.name == "b1_quantized_scale")
    scale.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(scale) * 2, scale.name))
    with caplog.at_level("WARNING", logger="qconvert"):
        convert_proto(model, quantize=QuantizeOptions())
    warnings = [r.getMessage() for r in caplog.records if "bias" in r.getMessage()]
    assert len(warnings) == 1 and "node 'conv1'" in warnings[0] and "'b1'" in warnings[0], warnings


def _int16_qdq(tmp_path, symmetric: bool) -> onnx.ModelProto:
    """onnxruntime's int16-activation QDQ model of the residual CNN (opset 21: int16 pairs)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.samples = iter({"x": s} for s in SAMPLES[:16])

        def get_next(self):
            return next(self.samples, None)

    model = residual_cnn()
    model.opset_import[0].version, model.ir_version = 21, 10
    onnx.save(model, tmp_path / "float.onnx")
    quantize_static(str(tmp_path / "float.onnx"), str(tmp_path / "qdq16.onnx"), Reader(),
                    quant_format=QuantFormat.QDQ, per_channel=True, activation_type=QuantType.QInt16,
                    weight_type=QuantType.QInt8, extra_options={"ActivationSymmetric": symmetric})
    return onnx.load(tmp_path / "qdq16.onnx")


def test_int16_pairs_run_16x8_kernels_with_their_params(tmp_path):
    """Every op between int16 pairs runs its 16x8 kernel; LiteRT is within 2 int16 steps of
    onnxruntime running the QDQ model; the int16 tensors carry the pairs' scales, zero point 0."""
    qdq = _int16_qdq(tmp_path, symmetric=True)
    flatbuffer, report = convert_proto(qdq, quantize=QuantizeOptions())
    assert report.quantization.int8_ops == 0 and report.quantization.int16_ops == 7
    params = _qdq_params(qdq)
    step = float(params["y_QuantizeLinear_Input"][0])
    for sample in SAMPLES[16:]:
        feeds = {"x": sample}
        np.testing.assert_allclose(run_tflite(flatbuffer, report, feeds)["y"],
                                   run_onnxruntime(qdq, feeds)["y"], rtol=0, atol=2 * step)
    (tmp_path / "m.tflite").write_bytes(flatbuffer)
    tensors = {t["name"]: t for t in inspect_file(str(tmp_path / "m.tflite"))["subgraphs"][0]["tensors"]}
    checked = 0
    for name in ("x", "r1", "c2", "r2", "p", "g", "f"):
        scale, zero = params[name]
        assert zero.dtype == np.int16 and zero == 0
        match = next(tensors[c] for c in (name + "_int16", name + "_nhwc", name) if c in tensors)
        assert match["dtype"] == "INT16", name
        quantization = match["quantization"]
        assert quantization["scales"] == [float(scale)] and quantization["zero_points"] == [0]
        checked += 1
    assert checked == 7


def test_int16_pairs_with_a_zero_point_become_symmetric_with_a_warning_each(tmp_path, caplog):
    """onnxruntime's default int16 pairs are asymmetric; TFLite's 16x8 kernels are not: each pair
    with a zero point is widened to a symmetric range with one warning, and a Clip to its grid keeps
    the clipping the grid did (onnxruntime dropped the Relus a grid from 0 does)."""
    qdq = _int16_qdq(tmp_path, symmetric=False)
    with_zero = [n for n, (_, z) in _qdq_params(qdq).items() if z.dtype == np.int16 and z != 0]
    with caplog.at_level("WARNING", logger="qconvert"):
        flatbuffer, report = convert_proto(qdq, quantize=QuantizeOptions())
    warnings = [r.getMessage() for r in caplog.records if "int16 QDQ pair" in r.getMessage()]
    assert len(warnings) == len(with_zero) > 0
    assert all(any(f"tensor {n!r}" in w for w in warnings) for n in with_zero)
    assert report.quantization.int8_ops == 0 and not report.quantization.float_ops  # Clips in int16 too
    step = max(float(s) for s, z in _qdq_params(qdq).values() if z.dtype == np.int16)
    feeds = {"x": SAMPLES[20]}
    np.testing.assert_allclose(run_tflite(flatbuffer, report, feeds)["y"], run_onnxruntime(qdq, feeds)["y"],
                               rtol=0, atol=8 * step)


@pytest.mark.parametrize("mover", ["Gather", "Transpose", "Reshape"])
def test_a_dequantized_table_moved_before_its_dq_converts(mover):
    """An int8 embedding table gathered (or transposed, reshaped) before its DequantizeLinear, as
    onnxruntime's dynamic quantizer writes it: with per-tensor params the DQ commutes with the
    data movement, so the float model is exact against onnxruntime."""
    rng = np.random.default_rng(0)
    table = rng.integers(-127, 128, (6, 8)).astype(np.int8)
    moved = {"Gather": (helper.make_node("Gather", ["table", "ids"], ["g"], axis=0), (1, 6, 8)),
             "Transpose": (helper.make_node("Transpose", ["table"], ["g"], perm=[1, 0]), (8, 6)),
             "Reshape": (helper.make_node("Reshape", ["table", "shape"], ["g"]), (8, 6))}
    node, moved_shape = moved[mover]
    w = rng.standard_normal((moved_shape[-1], 4)).astype(np.float32)
    nodes = [node, helper.make_node("DequantizeLinear", ["g", "s", "z"], ["e"]),
             helper.make_node("MatMul", ["e", "w"], ["y"])]
    inits = [numpy_helper.from_array(table, "table"), numpy_helper.from_array(np.array(0.02, np.float32), "s"),
             numpy_helper.from_array(np.array(3, np.int8), "z"), numpy_helper.from_array(w, "w"),
             numpy_helper.from_array(np.array([8, 6], np.int64), "shape")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("ids", TensorProto.INT64, (1, 6))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits,
                              value_info=[helper.make_tensor_value_info("g", TensorProto.INT8, moved_shape)])
    if mover != "Gather":  # the ids input still feeds the graph: add it to y
        graph.node.append(helper.make_node("Cast", ["ids"], ["idf"], to=TensorProto.FLOAT))
        graph.node[2].output[0] = "y0"
        graph.node.append(helper.make_node("ReduceSum", ["idf"], ["ids_sum"], keepdims=1))
        graph.node.append(helper.make_node("Add", ["y0", "ids_sum"], ["y"]))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    feeds = {"ids": np.array([[1, 5, 0, 3, 2, 2]], np.int64)}
    flatbuffer, report = convert_proto(model)
    np.testing.assert_allclose(run_tflite(flatbuffer, report, feeds)["y"],
                               run_onnxruntime(model, feeds)["y"], rtol=1e-5, atol=1e-5)


def test_a_table_moved_twice_and_read_by_two_dqs_converts():
    """text2tashkeel's form: Gather(int8 table) read by a DQ and by a Transpose whose output has
    its own DQ; both become float data movement on the dequantized table."""
    rng = np.random.default_rng(1)
    table = rng.integers(0, 256, (6, 8)).astype(np.uint8)
    nodes = [helper.make_node("Gather", ["table", "ids"], ["g"], axis=0),
             helper.make_node("DequantizeLinear", ["g", "s", "z"], ["e1"]),
             helper.make_node("Transpose", ["g"], ["t"], perm=[1, 0, 2]),
             helper.make_node("DequantizeLinear", ["t", "s", "z"], ["e2"]),
             helper.make_node("Transpose", ["e2"], ["e2t"], perm=[1, 0, 2]),
             helper.make_node("Add", ["e1", "e2t"], ["y"])]
    inits = [numpy_helper.from_array(table, "table"), numpy_helper.from_array(np.array(0.05, np.float32), "s"),
             numpy_helper.from_array(np.array(128, np.uint8), "z")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("ids", TensorProto.INT64, (1, 5))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    feeds = {"ids": np.array([[1, 5, 0, 3, 3]], np.int64)}
    flatbuffer, report = convert_proto(model)
    np.testing.assert_array_equal(run_tflite(flatbuffer, report, feeds)["y"], run_onnxruntime(model, feeds)["y"])


def _mask_model() -> onnx.ModelProto:
    """y = Softmax(QDQ(x) + QDQ(mask * FLT_MAX)), the mask's pair at scale inf."""
    float_min = np.finfo(np.float32).min
    nodes = [helper.make_node("Mul", ["mask", "big"], ["m"]),
             helper.make_node("QuantizeLinear", ["m", "inf", "zp"], ["mq"]),
             helper.make_node("DequantizeLinear", ["mq", "inf", "zp"], ["md"], name="mask_dq"),
             helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "zp"], ["xd"]),
             helper.make_node("Add", ["xd", "md"], ["scores"]),
             helper.make_node("Softmax", ["scores"], ["y"], axis=-1)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6]),
                     helper.make_tensor_value_info("mask", TensorProto.FLOAT, [2, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array(-float_min, np.float32), "big"),
         numpy_helper.from_array(np.array(np.inf, np.float32), "inf"),
         numpy_helper.from_array(np.array(0.05, np.float32), "s"),
         numpy_helper.from_array(np.array(0, np.int8), "zp")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def test_a_pair_whose_scale_is_infinite_leaves_its_tensor_float(caplog):
    """quantize_static calibrates an additive attention mask at the float minimum to scale inf:
    that tensor stays float (under --quantize, one warning naming the node), its neighbours keep
    their pairs; the float and the int8 model run and track the model's own arithmetic."""
    model = _mask_model()
    x = np.linspace(-3, 3, 12, dtype=np.float32).reshape(2, 6)
    mask = np.array([[0, 0, 0, 0, -1, -1], [0, 0, 0, -1, -1, -1]], np.float32)
    masked = np.where(mask < 0, -np.inf, np.round(x / 0.05) * 0.05)
    expected = np.exp(masked - masked.max(-1, keepdims=True))
    expected /= expected.sum(-1, keepdims=True)
    for options in ({}, {"quantize": QuantizeOptions()}):
        with caplog.at_level("WARNING", logger="qconvert"):
            flatbuffer, report = convert_proto(model, **options)
        got = run_tflite(flatbuffer, report, {"x": x, "mask": mask})["y"]
        np.testing.assert_allclose(got, expected, atol=0.02)
        assert ("node 'mask_dq' (DequantizeLinear): scale inf" in caplog.text) == bool(options)
        caplog.clear()


def test_the_check_of_a_pair_without_a_usable_scale_runs_it_float(tmp_path):
    """The same mask model converted by default (int8 from its pairs): onnxruntime's run through
    the scale-inf pair is not the model (NaN, or the mask lost: GPT-2's, Llama's and CLIP's QDQ
    exports failed their gate so, at 10.6, 1.7 and -2.6 dB, while the .tflite was 22-31 dB from
    the float model), so the reference computes that tensor in float as the .tflite does: the
    pair is taken out of it (unusable_pairs_bypassed) and the default check passes."""
    import json

    from click.testing import CliRunner

    from qconvert.cli import cli
    from qconvert.qdq.importer import unusable_pairs_bypassed

    model = _mask_model()
    reference = onnx.ModelProto()
    reference.CopyFrom(model)
    assert unusable_pairs_bypassed(reference) == 1
    assert not any(n.name == "mask_dq" for n in reference.graph.node)
    feeds = {"x": np.linspace(-3, 3, 12, dtype=np.float32).reshape(2, 6),
             "mask": np.array([[0, 0, 0, 0, -1, -1], [0, 0, 0, -1, -1, -1]], np.float32)}
    assert not np.all(np.isfinite(run_onnxruntime(model, feeds)["y"]))  # through the pair: NaN
    taken_out = run_onnxruntime(reference, feeds)["y"]
    np.testing.assert_allclose(taken_out.sum(-1), 1, rtol=1e-6)
    assert np.all(taken_out[feeds["mask"] < 0] == 0)  # the mask works
    onnx.save(model, tmp_path / "m.onnx")
    run = CliRunner().invoke(cli, [str(tmp_path / "m.onnx"), str(tmp_path / "m.tflite"), "--json"])
    assert run.exit_code == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["verify"]["passed"] and report["quantization"]["from_pairs"]


def test_calibration_sees_the_values_the_pairs_clip(tmp_path):
    """x's pair clips it to [-1, 1] (scale 1/127); the Mul by 100 after it has no pair, so
    --calibration gives its range: calibrated on the model as it computes (pairs and all), that
    is [-100, 100], not the [-1000, 1000] the unclipped x would give (a normalization after a
    clipped feature was calibrated to 1e12 that way, and the int8 model wrote NaN). The file
    follows onnxruntime's QDQ run within 2 steps of that range."""
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node("Mul", ["xd", "hundred"], ["y"])]
    inits = [numpy_helper.from_array(np.array(1 / 127, np.float32), "s"),
             numpy_helper.from_array(np.array(0, np.int8), "z"),
             numpy_helper.from_array(np.array(100, np.float32), "hundred")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    rng = np.random.default_rng(0)
    calibration = rng.uniform(-10, 10, (8, 1, 16)).astype(np.float32)
    np.savez(tmp_path / "cal.npz", x=calibration)
    flatbuffer, report = convert_proto(model, quantize=QuantizeOptions(), calibration=str(tmp_path / "cal.npz"))
    step = output_steps(flatbuffer)["y"]
    assert step < 1.1 * 200 / 255, step
    feeds = {"x": calibration[0]}
    np.testing.assert_allclose(run_tflite(flatbuffer, report, feeds)["y"], run_onnxruntime(model, feeds)["y"],
                               rtol=0, atol=2 * step)
