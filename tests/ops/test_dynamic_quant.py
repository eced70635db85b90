"""onnxruntime's dynamic quantization (quantize_dynamic): DynamicQuantizeLinear, MatMulInteger,
ConvInteger and com.microsoft DynamicQuantizeLSTM converted to float (ops/dynamic_quant.py).

Each model is a small float model made here and quantized by onnxruntime's quantize_dynamic. The
.tflite must compute the model with its activations in float: it matches onnxruntime running the
float model with the dequantized weights within the float check's tolerance (which shows that
every weight, zero point, scale and layout is read right), and onnxruntime running the quantized
model itself by SQNR; the default verification judges it by SQNR and says why."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from onnxruntime.quantization import QuantType, quantize_dynamic

from qconvert.check.verify import FLOAT_TOLERANCE, sqnr_db
from qconvert.errors import ConversionError
from tests.harness import convert_proto, make_model, run_onnxruntime, run_tflite

T, B, I, H = 5, 2, 6, 8


def _mlp(rng) -> onnx.ModelProto:
    """x [3, 16] -> MatMul + Add -> Relu -> Gemm (transB) -> y [3, 5]."""
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["ha"]),
             helper.make_node("Relu", ["ha"], ["r"]),
             helper.make_node("Gemm", ["r", "w2", "b2"], ["y"], transB=1)]
    return make_model(nodes, {"x": (TensorProto.FLOAT, (3, 16))}, {"y": TensorProto.FLOAT},
                      {"w1": rng.standard_normal((16, 24)).astype(np.float32) * 0.3,
                       "b1": rng.standard_normal(24).astype(np.float32) * 0.1,
                       "w2": rng.standard_normal((5, 24)).astype(np.float32) * 0.3,
                       "b2": rng.standard_normal(5).astype(np.float32)})


def _convnet(rng) -> onnx.ModelProto:
    """x [1, 3, 10, 10] -> Conv 3x3 pad 1 + bias -> Relu -> Conv 3x3 stride 2 (no bias) -> y."""
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["y"], strides=[2, 2])]
    return make_model(nodes, {"x": (TensorProto.FLOAT, (1, 3, 10, 10))}, {"y": TensorProto.FLOAT},
                      {"w1": rng.standard_normal((6, 3, 3, 3)).astype(np.float32) * 0.3,
                       "b1": rng.standard_normal(6).astype(np.float32) * 0.1,
                       "w2": rng.standard_normal((4, 6, 3, 3)).astype(np.float32) * 0.3})


def _lstm(rng, direction="forward") -> onnx.ModelProto:
    """x [T, B, I] -> LSTM (bias, `direction`) -> Y, Y_h, then a MatMul of Y_h."""
    d = 2 if direction == "bidirectional" else 1
    nodes = [helper.make_node("LSTM", ["x", "W", "R", "B"], ["Y", "Y_h"], hidden_size=H,
                              direction=direction),
             helper.make_node("MatMul", ["Y_h", "M"], ["z"])]
    return make_model(nodes, {"x": (TensorProto.FLOAT, (T, B, I))},
                      {"Y": TensorProto.FLOAT, "z": TensorProto.FLOAT},
                      {"W": rng.standard_normal((d, 4 * H, I)).astype(np.float32) * 0.4,
                       "R": rng.standard_normal((d, 4 * H, H)).astype(np.float32) * 0.4,
                       "B": rng.standard_normal((d, 8 * H)).astype(np.float32) * 0.2,
                       "M": rng.standard_normal((H, 3)).astype(np.float32)}, opset=14)


def _quantize(model: onnx.ModelProto, tmp_path, **options) -> onnx.ModelProto:
    source, target = tmp_path / "float.onnx", tmp_path / "dynamic.onnx"
    onnx.save(model, source)
    options.setdefault("op_types_to_quantize", ["MatMul", "Gemm", "Conv", "LSTM"])
    quantize_dynamic(str(source), str(target), **options)
    return onnx.load(target)


def _dequantized(model: onnx.ModelProto, quantized: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with each weight quantize_dynamic quantized replaced by its dequantized value,
    (q - z) * s, read from the quantized model's initializers (an LSTM's W and R back from its
    [D, rows, 4H] layout, a Gemm's transB weight from [K, N]): what the float conversion
    computes."""
    stored = {t.name: numpy_helper.to_array(t) for t in quantized.graph.initializer}
    result = onnx.ModelProto()
    result.CopyFrom(model)
    for t in result.graph.initializer:
        stem = next((n for n in (t.name, t.name + "_Transposed") if n + "_quantized" in stored), None)
        if stem is None:
            continue
        q = stored[stem + "_quantized"].astype(np.float32)
        s, z = stored[stem + "_scale"], stored[stem + "_zero_point"].astype(np.float32)
        shape = numpy_helper.to_array(t).shape
        if stem != t.name:  # a Gemm's transB weight, quantized transposed
            value = ((q - z) * s).T
        elif q.shape != shape:  # an LSTM's W/R: per direction, transposed
            value = ((q - z.reshape(-1, 1, 1)) * s.reshape(-1, 1, 1)).transpose(0, 2, 1)
        elif s.size > 1 and len(shape) == 4:  # a Conv weight per output channel
            value = (q - z.reshape(-1, 1, 1, 1)) * s.reshape(-1, 1, 1, 1)
        else:  # per tensor, or per column of a MatMul weight
            value = (q - z) * s
        t.CopyFrom(numpy_helper.from_array(value.astype(np.float32).reshape(shape), t.name))
    return result


def _feeds(model: onnx.ModelProto, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim])
            .astype(np.float32) for i in model.graph.input}


def _check(model, tmp_path, min_db: float, **options):
    """Converts the quantized `model`; the .tflite against the dequantized float model (within
    the float tolerance of each output's largest magnitude), against the quantized model in
    onnxruntime (SQNR above `min_db`) and, without contrib ops, in onnx's reference evaluator,
    whose integer sums are exact (SQNR above 35 dB). Returns the quantized model and the op
    types of the .tflite."""
    quantized = _quantize(model, tmp_path, **options)
    flatbuffer, report = convert_proto(quantized)
    contrib = any(n.domain == "com.microsoft" for n in quantized.graph.node)
    for seed in (1, 2):
        feeds = _feeds(quantized, seed)
        got = run_tflite(flatbuffer, report, feeds)
        exact = run_onnxruntime(_dequantized(model, quantized), feeds)
        dynamic = run_onnxruntime(quantized, feeds)
        integer = {} if contrib else dict(zip(exact, ReferenceEvaluator(quantized).run(None, feeds)))
        for name, value in exact.items():
            error = np.abs(got[name] - value).max() / np.abs(value).max()
            assert error <= FLOAT_TOLERANCE, (name, error)
            assert sqnr_db(dynamic[name], got[name]) > min_db, (name, sqnr_db(dynamic[name], got[name]))
            if integer:
                assert sqnr_db(integer[name], got[name]) > 35, (name, sqnr_db(integer[name], got[name]))
    from qconvert.tflite.reader import read

    return quantized, sorted({op.name for op in read(flatbuffer).operators})


def test_matmul_gemm(tmp_path):
    quantized, ops = _check(_mlp(np.random.default_rng(0)), tmp_path, 35)
    assert {n.op_type for n in quantized.graph.node} >= {"DynamicQuantizeLinear", "MatMulInteger"}
    assert ops == ["FULLY_CONNECTED"]  # the scales and biases folded into the weights


@pytest.mark.parametrize("weight_type", [QuantType.QInt8, QuantType.QUInt8])
def test_per_channel_and_weight_types(tmp_path, weight_type):
    """Per-column weights. With int8 ones onnxruntime itself is off on x86 without VNNI: its
    u8 x s8 kernel (VPMADDUBSW) saturates pairs of products at 16 bits, 17.6 dB from onnx's
    exact reference here (per column, each column reaches 127), where the .tflite is 44.9 dB
    from it."""
    _check(_mlp(np.random.default_rng(3)), tmp_path, 15 if weight_type == QuantType.QInt8 else 35,
           per_channel=True, weight_type=weight_type)


def test_conv(tmp_path):
    quantized, ops = _check(_convnet(np.random.default_rng(1)), tmp_path, 30)
    assert "ConvInteger" in {n.op_type for n in quantized.graph.node}
    assert "CONV_2D" in ops


def test_conv_uint8_weights(tmp_path):
    _check(_convnet(np.random.default_rng(2)), tmp_path, 30, weight_type=QuantType.QUInt8)


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_lstm(tmp_path, direction):
    """7-bit weights (reduce_range): with 8-bit ones onnxruntime's own sums saturate on x86
    without VNNI (see above), its forward LSTM here 13 dB from its dequantized float model,
    40 dB with 7 bits."""
    quantized, _ = _check(_lstm(np.random.default_rng(4), direction), tmp_path, 35, reduce_range=True)
    assert [(n.domain, n.op_type) for n in quantized.graph.node if "LSTM" in n.op_type] == \
        [("com.microsoft", "DynamicQuantizeLSTM")]


def test_cli_verifies_by_sqnr_and_says_why(tmp_path):
    _quantize(_mlp(np.random.default_rng(0)), tmp_path)
    source, out = tmp_path / "dynamic.onnx", tmp_path / "m.tflite"
    run = subprocess.run([sys.executable, "-m", "qconvert", str(source), str(out), "--json"],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    verify = json.loads(run.stdout)["verify"]
    assert verify["check"] == "sqnr"
    assert verify["reason"].startswith("onnxruntime quantizes activations at run time "
                                       "(2 DynamicQuantizeLinear)")
    assert min(o["sqnr_db"] for o in verify["outputs"]) > 30
    run = subprocess.run([sys.executable, "-m", "qconvert", str(source), str(out)],
                         capture_output=True, text=True)
    assert run.returncode == 0 and "verify: by SQNR, onnxruntime quantizes activations at run time " \
        "(2 DynamicQuantizeLinear), a rounding the .tflite does not repeat; worst output 'y'" \
        in run.stderr + run.stdout, run.stderr


def test_float_models_unchanged(tmp_path):
    """A model without these ops gives the same bytes with or without the loader step."""
    import qconvert.onnx.dynamic_quant as step

    model = _mlp(np.random.default_rng(0))
    before = convert_proto(model)[0]
    original, step.dequantize = step.dequantize, lambda graph: None
    try:
        assert convert_proto(model)[0] == before
    finally:
        step.dequantize = original


_W = np.array([[1, 2], [3, 4], [5, 6], [7, 8]], np.float32)


def _integer_product(reader: str) -> onnx.ModelProto:
    """x -> DynamicQuantizeLinear -> MatMulInteger ("mm") -> Cast, then the scale Mul
    (`reader` "scaled"), or not ("unscaled"), or the quantized x read by a Cast ("peek")."""
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "s", "z"]),
             helper.make_node("MatMulInteger", ["q", "w", "z"], ["acc"], name="mm"),
             helper.make_node("Cast", ["acc"], ["f"], to=TensorProto.FLOAT)]
    nodes.append({"scaled": helper.make_node("Mul", ["f", "s"], ["y"]),
                  "unscaled": helper.make_node("Relu", ["f"], ["y"], name="relu"),
                  "peek": helper.make_node("Cast", ["q"], ["y"], to=TensorProto.FLOAT, name="peek")}[reader])
    model = make_model(nodes, {"x": (TensorProto.FLOAT, (1, 4))}, {"y": TensorProto.FLOAT})
    model.graph.initializer.append(numpy_helper.from_array(_W.astype(np.int8), "w"))
    return model


def test_only_quantize_dynamic_pattern():
    """The rewrite is exact where the sum is multiplied by its activation's scale; a model that
    reads the integers otherwise is refused in one line naming the node."""
    flatbuffer, report = convert_proto(_integer_product("scaled"))
    x = np.array([[1, 2, -3, 4]], np.float32)
    np.testing.assert_allclose(run_tflite(flatbuffer, report, {"x": x})["y"], x @ _W)
    with pytest.raises(ConversionError, match=r"^node 'mm' \(MatMulInteger\): its sum reaches node 'relu' "
                                              r"\(Relu\) without being multiplied by its activation's scale"):
        convert_proto(_integer_product("unscaled"))
    with pytest.raises(ConversionError, match=r"^node 'DynamicQuantizeLinear_0:q' \(DynamicQuantizeLinear\): "
                                              r"output 'q' is read by node 'peek' \(Cast\)"):
        convert_proto(_integer_product("peek"))


def test_bias_rounded_at_run_time():
    """Older quantizers (ddddocr's common_old.onnx) add the bias to the int32 sum, rounded to
    its grid at run time: Cast(int32)(Floor(b / (x_s * w_s))), Reshape, Add. Its rounding is
    dropped with the activation's: the .tflite adds b in float."""
    w = np.array([[1, -2, 3], [4, 5, -6], [-7, 8, 9], [10, -11, 12]], np.int8)
    b = np.array([0.3, -1.7, 2.2], np.float32)
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "s", "z"]),
             helper.make_node("Mul", ["s", "ws"], ["bs"]),
             helper.make_node("Div", ["b", "bs"], ["bq_f"]), helper.make_node("Floor", ["bq_f"], ["bq_r"]),
             helper.make_node("Cast", ["bq_r"], ["bq"], to=TensorProto.INT32),
             helper.make_node("Reshape", ["bq", "shape"], ["bq_2"]),
             helper.make_node("MatMulInteger", ["q", "w", "z", "wz"], ["acc"]),
             helper.make_node("Add", ["acc", "bq_2"], ["acc_b"]),
             helper.make_node("Cast", ["acc_b"], ["f"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["s", "ws"], ["ys"]), helper.make_node("Mul", ["f", "ys"], ["y"])]
    model = make_model(nodes, {"x": (TensorProto.FLOAT, (2, 4))}, {"y": TensorProto.FLOAT},
                       {"ws": np.float32(0.05), "b": b, "shape": np.array([1, 3], np.int64)})
    model.graph.initializer.extend([numpy_helper.from_array(w, "w"),
                                    numpy_helper.from_array(np.int8(1), "wz")])
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    flatbuffer, report = convert_proto(model)
    got = run_tflite(flatbuffer, report, {"x": x})["y"]
    expected = x @ ((w.astype(np.float32) - 1) * np.float32(0.05)) + b
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    assert sqnr_db(run_onnxruntime(model, {"x": x})["y"], got) > 30
