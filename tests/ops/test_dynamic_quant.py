"""onnxruntime's dynamic quantization (quantize_dynamic): DynamicQuantizeLinear, MatMulInteger,
ConvInteger, com.microsoft DynamicQuantizeLSTM, DynamicQuantizeMatMul and MatMulIntegerToFloat
converted to TFLite's hybrid kernels (ops/dynamic_quant.py, transforms/store_integer_weights.py).

Each model is a small float model made here and quantized by onnxruntime's quantize_dynamic (or
built with the contrib ops). The .tflite must hold the very integers and scales onnxruntime
stores (read back from the file), and compute what onnxruntime running the quantized model
computes within its activation rounding: a bound of one activation step per product on one layer
(_within_steps), SQNR on deeper models; the default verification judges it by SQNR and says why."""

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

from qconvert.check.metrics import sqnr_db
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


def _feeds(model: onnx.ModelProto, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim])
            .astype(np.float32) for i in model.graph.input}


def _int8_weights(flatbuffer: bytes) -> list:
    """(tensor, its int8 values) of each int8 constant of the .tflite."""
    from qconvert.tflite.reader import buffer_data, read

    return [(t, buffer_data(flatbuffer, t.buffer).view(np.int8).reshape(t.shape))
            for t in read(flatbuffer).tensors
            if t.dtype == "INT8" and t.data_offset is not None]


def _check(model, tmp_path, min_db: float, **options):
    """Converts the quantized `model` and compares the .tflite, whose hybrid kernels quantize
    their float inputs at run time as onnxruntime's DynamicQuantizeLinear does (per row rather
    than per tensor: a finer or equal step), with onnxruntime running the quantized model (SQNR
    above `min_db`: each output is a few activation steps from it, see _within_steps for a bound
    on one layer) and, without contrib ops, with onnx's reference evaluator, whose integer sums
    are exact (above 35 dB). Returns the quantized model, the .tflite and its op types."""
    quantized = _quantize(model, tmp_path, **options)
    flatbuffer, report = convert_proto(quantized)
    contrib = any(n.domain == "com.microsoft" for n in quantized.graph.node)
    for seed in (1, 2):
        feeds = _feeds(quantized, seed)
        got = run_tflite(flatbuffer, report, feeds)
        dynamic = run_onnxruntime(quantized, feeds)
        integer = {} if contrib else dict(zip(dynamic, ReferenceEvaluator(quantized).run(None, feeds)))
        for name, value in dynamic.items():
            assert sqnr_db(value, got[name]) > min_db, (name, sqnr_db(value, got[name]))
            if integer:
                assert sqnr_db(integer[name], got[name]) > 35, (name, sqnr_db(integer[name], got[name]))
    from qconvert.tflite.reader import read

    return quantized, flatbuffer, sorted({op.name for op in read(flatbuffer).operators})


def _stored(quantized: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in quantized.graph.initializer}


def _assert_same_integers(flatbuffer: bytes, quantized: onnx.ModelProto, names: list[str],
                          transpose: bool) -> None:
    """The .tflite holds the weights `names` of the quantized model as their very integers (q - z,
    int8) and scales, laid out as the op reads them (a FULLY_CONNECTED's [N, K]: `transpose`)."""
    stored, weights = _stored(quantized), _int8_weights(flatbuffer)
    for name in names:
        q, s = stored[name + "_quantized"], stored[name + "_scale"]
        levels = (q.astype(np.int32) - stored[name + "_zero_point"].astype(np.int32)).astype(np.int8)
        levels = levels.T if transpose else levels
        match = [t for t, v in weights if v.shape == levels.shape and np.array_equal(v, levels)]
        assert match, name
        np.testing.assert_array_equal(np.float32(match[0].scales), np.ravel(s).astype(np.float32))
        assert set(match[0].zero_points) == {0}


def test_matmul_gemm(tmp_path):
    quantized, flatbuffer, ops = _check(_mlp(np.random.default_rng(0)), tmp_path, 35)
    assert {n.op_type for n in quantized.graph.node} >= {"DynamicQuantizeLinear", "MatMulInteger"}
    assert ops == ["FULLY_CONNECTED"]  # hybrid: int8 weights, the scales and biases folded in
    _assert_same_integers(flatbuffer, quantized, ["w1", "w2_Transposed"], transpose=True)


@pytest.mark.parametrize("weight_type", [QuantType.QInt8, QuantType.QUInt8])
def test_per_channel_and_weight_types(tmp_path, caplog, weight_type):
    """Per-column weights. int8 ones keep their integers and per-column scales (FULLY_CONNECTED's
    per-channel hybrid kernel). onnxruntime's uint8 ones have zero points far from 128 (asymmetric
    per column): re-centred they leave int8, so they are requantized as --weight-only does, with a
    warning. With int8 weights onnxruntime itself is off on x86 without VNNI: its u8 x s8 kernel
    (VPMADDUBSW) saturates pairs of products at 16 bits (17.6 dB from onnx's exact reference here,
    each column reaching 127): hence 15 dB against it."""
    quantized, flatbuffer, ops = _check(_mlp(np.random.default_rng(3)), tmp_path,
                                        15 if weight_type == QuantType.QInt8 else 35,
                                        per_channel=True, weight_type=weight_type)
    assert ops == ["FULLY_CONNECTED"] and len(_int8_weights(flatbuffer)) == 2
    if weight_type == QuantType.QInt8:
        _assert_same_integers(flatbuffer, quantized, ["w1", "w2_Transposed"], transpose=True)
        assert "requantized" not in caplog.text
    else:
        assert "minus their zero point run from" in caplog.text and "requantized" in caplog.text


@pytest.mark.parametrize("weight_type", [QuantType.QInt8, QuantType.QUInt8])
def test_conv(tmp_path, caplog, weight_type):
    """Per tensor (onnxruntime's ConvInteger takes no per-channel weights). uint8 weights at zero
    point 128 re-centre exactly (w1 here); w2's zero point 129 leaves int8 (level -129): requantized."""
    quantized, flatbuffer, ops = _check(_convnet(np.random.default_rng(1)), tmp_path, 30,
                                        weight_type=weight_type)
    assert "ConvInteger" in {n.op_type for n in quantized.graph.node}
    assert ops == ["CONV_2D"] and len(_int8_weights(flatbuffer)) == 2
    stored, weights = _stored(quantized), [v for _, v in _int8_weights(flatbuffer)]
    levels = {n: stored[n + "_quantized"].astype(np.int32) - stored[n + "_zero_point"] for n in ("w1", "w2")}
    exact = [n for n, v in levels.items() if v.min() >= -128 and v.max() <= 127]
    if weight_type == QuantType.QInt8:
        assert exact == ["w1", "w2"]
    for name in exact:  # OHWI in the .tflite
        assert any(np.array_equal(v, levels[name].astype(np.int8).transpose(0, 2, 3, 1)) for v in weights), name
    assert ("requantized" in caplog.text) == (len(exact) < 2)


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_lstm(tmp_path, caplog, direction):
    """7-bit weights (reduce_range): with 8-bit ones onnxruntime's own sums saturate on x86
    without VNNI (see above), its forward LSTM here 13 dB from its dequantized float model,
    40 dB with 7 bits. One scale per direction: each gate's weights keep their integers in
    UNIDIRECTIONAL_SEQUENCE_LSTM's hybrid kernel (one per direction)."""
    quantized, flatbuffer, ops = _check(_lstm(np.random.default_rng(4), direction), tmp_path, 35,
                                        reduce_range=True)
    assert [(n.domain, n.op_type) for n in quantized.graph.node if "LSTM" in n.op_type] == \
        [("com.microsoft", "DynamicQuantizeLSTM")]
    d = 2 if direction == "bidirectional" else 1
    assert ops.count("UNIDIRECTIONAL_SEQUENCE_LSTM") == 1 and "DEQUANTIZE" not in ops
    weights = _int8_weights(flatbuffer)
    assert len(weights) == 8 * d + 1  # the gates' input and recurrent weights, and M
    stored = _stored(quantized)
    scales = {float(np.float32(s)) for n in ("W", "R") for s in np.ravel(stored[n + "_scale"])}
    assert {t.scales[0] for t, _ in weights if len(t.scales) == 1 and t.shape[0] == H} == scales
    assert "requantized" not in caplog.text


def test_lstm_per_row_scales_requantized(tmp_path, caplog):
    """per_channel=True gives an LSTM one scale per gate row, which TFLite's hybrid LSTM (one
    scale per weight tensor) cannot hold: requantized per tensor, with a warning."""
    _check(_lstm(np.random.default_rng(4)), tmp_path, 30, reduce_range=True, per_channel=True)
    assert "its weights have one scale per gate row; TFLite's hybrid LSTM takes one per weight " \
        "tensor; dequantized, then requantized" in caplog.text


def _within_steps(weight: np.ndarray, x: np.ndarray, got: np.ndarray,
                  expected: np.ndarray) -> None:
    """One layer y = x @ W: onnxruntime rounds x to its per-tensor step x_s (range including 0,
    over 255), TFLite's hybrid kernel to its per-row step (at most x_s); each rounding moves an
    element of x by at most half its step, so y's columns differ by at most x_s * sum_k |W_kn|."""
    x_s = (max(x.max(), 0) - min(x.min(), 0)) / 255
    bound = x_s * np.abs(weight).sum(axis=0) * 1.001 + 1e-6
    assert (np.abs(got - expected) <= bound).all(), np.max(np.abs(got - expected) / bound)


def test_weights_dominate_size(tmp_path):
    """Two 256x256 MatMuls: the .tflite stores the weights as int8, as the ONNX file does, and is
    no bigger than it; each layer's output is within onnxruntime's rounding (_within_steps)."""
    rng = np.random.default_rng(5)
    w1, w2 = (rng.standard_normal((256, 256)).astype(np.float32) * 0.05 for _ in range(2))
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("MatMul", ["h", "w2"], ["y"])]
    model = make_model(nodes, {"x": (TensorProto.FLOAT, (4, 256))}, {"h": TensorProto.FLOAT, "y": TensorProto.FLOAT},
                       {"w1": w1, "w2": w2})
    quantized = _quantize(model, tmp_path)
    flatbuffer, report = convert_proto(quantized)
    onnx_size = (tmp_path / "dynamic.onnx").stat().st_size
    assert len(flatbuffer) <= onnx_size, (len(flatbuffer), onnx_size)
    assert len(_int8_weights(flatbuffer)) == 2
    _assert_same_integers(flatbuffer, quantized, ["w1", "w2"], transpose=True)
    stored = _stored(quantized)
    dequantized = {n: stored[n + "_quantized"].astype(np.float32) * stored[n + "_scale"] for n in ("w1", "w2")}
    for seed in (1, 2):
        x = _feeds(quantized, seed)["x"]
        got, dynamic = run_tflite(flatbuffer, report, {"x": x}), run_onnxruntime(quantized, {"x": x})
        _within_steps(dequantized["w1"], x, got["h"], dynamic["h"])
        for name in ("h", "y"):
            assert sqnr_db(dynamic[name], got[name]) > 35


def test_lstm_weights_dominate_size(tmp_path):
    """A bidirectional LSTM of 128 inputs and 256 hidden units: its eight int8 gate matrices per
    direction keep the .tflite no bigger than the quantized ONNX file (the gate biases stay float,
    as the hybrid kernel reads them); the output stays within onnxruntime's rounding by SQNR."""
    rng = np.random.default_rng(9)
    nodes = [helper.make_node("LSTM", ["x", "W", "R", "B"], ["Y"], hidden_size=256, direction="bidirectional")]
    model = make_model(nodes, {"x": (TensorProto.FLOAT, (10, 1, 128))}, {"Y": TensorProto.FLOAT},
                       {"W": rng.standard_normal((2, 1024, 128)).astype(np.float32) * 0.1,
                        "R": rng.standard_normal((2, 1024, 256)).astype(np.float32) * 0.05,
                        "B": rng.standard_normal((2, 2048)).astype(np.float32) * 0.1}, opset=14)
    quantized, flatbuffer, _ = _check(model, tmp_path, 35, reduce_range=True)
    assert len(flatbuffer) <= (tmp_path / "dynamic.onnx").stat().st_size
    assert len(_int8_weights(flatbuffer)) == 16


def _contrib_matmul(fused: bool, zero_point: int, per_column: bool) -> tuple[onnx.ModelProto, np.ndarray]:
    """com.microsoft DynamicQuantizeMatMul(x, B, scale, zero point, bias), or
    DynamicQuantizeLinear + MatMulIntegerToFloat(q, B, x_s, scale, x_z, zero point, bias):
    x [3, 64] @ B [64, 32] uint8 at `zero_point`. Returns the model and B dequantized."""
    rng = np.random.default_rng(6)
    q = rng.integers(0, 256, (64, 32)).astype(np.uint8)
    scale = (rng.uniform(0.002, 0.004, 32) if per_column else np.array(0.003)).astype(np.float32)
    zero = np.full(32 if per_column else (), zero_point, np.uint8)
    bias = rng.standard_normal(32).astype(np.float32)
    if fused:
        nodes = [helper.make_node("DynamicQuantizeMatMul", ["x", "B", "s", "z", "b"], ["y"],
                                  domain="com.microsoft", name="dqmm")]
    else:
        nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
                 helper.make_node("MatMulIntegerToFloat", ["xq", "B", "xs", "s", "xz", "z", "b"], ["y"],
                                  domain="com.microsoft", name="mmitf")]
    model = make_model(nodes, {"x": (TensorProto.FLOAT, (3, 64))}, {"y": TensorProto.FLOAT},
                       {"s": scale, "b": bias})
    model.graph.initializer.extend([numpy_helper.from_array(q, "B"), numpy_helper.from_array(zero, "z")])
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return model, (q.astype(np.float32) - zero.astype(np.float32)) * scale


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("per_column", [False, True])
def test_contrib_matmuls(fused, per_column):
    """onnxruntime's fused forms: B's uint8 integers at zero point 128 re-centre to int8 exactly
    and stay those integers in a hybrid FULLY_CONNECTED; the output is within onnxruntime's
    activation rounding (_within_steps)."""
    model, dequantized = _contrib_matmul(fused, 128, per_column)
    flatbuffer, report = convert_proto(model)
    from qconvert.tflite.reader import read

    assert sorted({op.name for op in read(flatbuffer).operators}) == ["FULLY_CONNECTED"]
    (tensor, values), = _int8_weights(flatbuffer)
    q = numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "B"))
    np.testing.assert_array_equal(values, (q.astype(np.int32) - 128).astype(np.int8).T)
    for seed in (1, 2):
        x = _feeds(model, seed)["x"]
        got, expected = run_tflite(flatbuffer, report, {"x": x})["y"], run_onnxruntime(model, {"x": x})["y"]
        _within_steps(dequantized, x, got, expected)


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


@pytest.mark.parametrize("fused", [True, False])
def test_cli_judges_both_contrib_forms_by_sqnr(tmp_path, fused):
    """DynamicQuantizeMatMul quantizes its A inside, as DynamicQuantizeLinear does before
    MatMulIntegerToFloat: the same arithmetic (onnxruntime's outputs agree to 3e-7, both equal
    numpy's per-tensor uint8 quantization of A), the same .tflite, so the same check. It was held
    to the float tolerance (exit 4 at 0.7 % of the output's scale: activation rounding, not an
    error)."""
    model, _ = _contrib_matmul(fused, 128, False)
    source, out = tmp_path / "contrib.onnx", tmp_path / "m.tflite"
    onnx.save(model, source)
    run = subprocess.run([sys.executable, "-m", "qconvert", str(source), str(out), "--json"],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    verify = json.loads(run.stdout)["verify"]
    op = "DynamicQuantizeMatMul" if fused else "DynamicQuantizeLinear"
    assert verify["check"] == "sqnr" and f"(1 {op})" in verify["reason"], verify
    assert min(o["sqnr_db"] for o in verify["outputs"]) > 35


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
    _within_steps(_W, x, run_tflite(flatbuffer, report, {"x": x})["y"], x @ _W)
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
    weight = (w.astype(np.float32) - 1) * np.float32(0.05)
    _within_steps(weight, x, got, x @ weight + b)
    assert sqnr_db(run_onnxruntime(model, {"x": x})["y"], got) > 30


@pytest.mark.parametrize("case", ["depthwise", "conv1d", "shared", "folded", "batched"])
def test_layouts_keep_integers(tmp_path, caplog, case):
    """A depthwise Conv (DEPTHWISE_CONV_2D's hybrid kernel reads one scale per channel: the one
    per-tensor scale is written for each), a Conv1D (its scale stays a MUL after the RESHAPE and
    TRANSPOSE around CONV_2D: the weights are the levels themselves, at scale 1), a weight two
    MatMuls share, and a Mul by 0.5 before a MatMul (GELU's), which the float steps fold into the
    weights (the grid becomes 0.5 s), and a batch of weights (a hybrid BATCH_MATMUL, its scale a
    MUL after it): each keeps onnxruntime's integers, none requantized."""
    rng = np.random.default_rng(8)
    if case == "folded":
        nodes = [helper.make_node("Mul", ["x", "half"], ["xh"]), helper.make_node("MatMul", ["xh", "w"], ["y"])]
        model = make_model(nodes, {"x": (TensorProto.FLOAT, (3, 32))}, {"y": TensorProto.FLOAT},
                           {"w": rng.standard_normal((32, 16)).astype(np.float32), "half": np.float32(0.5)})
        quantized, flatbuffer, ops = _check(model, tmp_path, 35)
        assert ops == ["FULLY_CONNECTED"] and "requantized" not in caplog.text
        stored = _stored(quantized)
        (tensor, values), = _int8_weights(flatbuffer)
        np.testing.assert_array_equal(values, stored["w_quantized"].T)
        np.testing.assert_allclose(tensor.scales, [stored["w_scale"] * 0.5], rtol=1e-6)
        return
    if case == "depthwise":
        nodes = [helper.make_node("Conv", ["x", "w"], ["y"], group=8, pads=[1, 1, 1, 1])]
        shapes, w = (1, 8, 6, 6), rng.standard_normal((8, 1, 3, 3))
    elif case == "conv1d":
        nodes = [helper.make_node("Conv", ["x", "w"], ["y"])]
        shapes, w = (1, 8, 20), rng.standard_normal((6, 8, 3))
    elif case == "batched":
        nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
        shapes, w = (3, 5, 32), rng.standard_normal((3, 32, 16))
    else:
        nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("MatMul", ["h", "w"], ["y"])]
        shapes, w = (3, 32), rng.standard_normal((32, 32)) * 0.2
    model = make_model(nodes, {"x": (TensorProto.FLOAT, shapes)}, {"y": TensorProto.FLOAT},
                       {"w": w.astype(np.float32)})
    quantized, flatbuffer, ops = _check(model, tmp_path, 35)
    assert "requantized" not in caplog.text
    stored = _stored(quantized)
    levels = stored["w_quantized"]
    from qconvert.tflite.reader import read

    buffers = {t.buffer for t in read(flatbuffer).tensors if t.dtype == "INT8" and t.data_offset is not None}
    (tensor, values), *others = _int8_weights(flatbuffer)
    if case == "depthwise":  # [1, H, W, C]
        np.testing.assert_array_equal(values, levels.transpose(1, 2, 3, 0))
        assert tensor.scales == [float(stored["w_scale"])] * 8 and tensor.quantized_dimension == 3
    elif case == "conv1d":  # [O, 1, W, I], at scale 1; the MUL applies onnxruntime's scale
        np.testing.assert_array_equal(values, levels.transpose(0, 2, 1)[:, None])
        assert tensor.scales == [1.0] and "MUL" in ops
    elif case == "batched":
        np.testing.assert_array_equal(values, levels)
        assert tensor.scales == [1.0] and ops == ["BATCH_MATMUL", "MUL"]
    else:
        np.testing.assert_array_equal(values, levels.T)
        assert len(others) == 1 and len(buffers) == 1  # the file holds the integers once


def test_onnxruntime_fused_graph(tmp_path):
    """The model onnxruntime's graph optimizer writes from quantize_dynamic's (extended level):
    DynamicQuantizeMatMul nodes, converted to the same hybrid FULLY_CONNECTEDs with the same
    integers."""
    import onnxruntime as ort

    quantized = _quantize(_mlp(np.random.default_rng(0)), tmp_path)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(tmp_path / "fused.onnx")
    ort.InferenceSession(str(tmp_path / "dynamic.onnx"), options, providers=["CPUExecutionProvider"])
    fused = onnx.load(tmp_path / "fused.onnx")
    assert "DynamicQuantizeMatMul" in {n.op_type for n in fused.graph.node}
    flatbuffer, report = convert_proto(fused)
    from qconvert.tflite.reader import read

    assert sorted({op.name for op in read(flatbuffer).operators}) == ["FULLY_CONNECTED"]
    _assert_same_integers(flatbuffer, quantized, ["w1", "w2_Transposed"], transpose=True)
    for seed in (1, 2):
        feeds = _feeds(fused, seed)
        assert sqnr_db(run_onnxruntime(fused, feeds)["y"], run_tflite(flatbuffer, report, feeds)["y"]) > 35


def test_contrib_uint8_off_center_requantized(caplog):
    """B at zero point 37: its levels reach 218, beyond int8: dequantized, requantized as
    --weight-only does, with a warning naming the node."""
    model, dequantized = _contrib_matmul(True, 37, False)
    flatbuffer, report = convert_proto(model)
    assert "node 'dqmm': its uint8 weights minus their zero point run from -37 to 218, beyond int8; " \
        "dequantized, then requantized to TFLite's int8 weights as --weight-only does" in caplog.text
    (tensor, _), = _int8_weights(flatbuffer)
    x = _feeds(model, 1)["x"]
    got, expected = run_tflite(flatbuffer, report, {"x": x})["y"], run_onnxruntime(model, {"x": x})["y"]
    assert sqnr_db(expected, got) > 35


def test_integer_to_float_reads_its_own_quantization():
    """MatMulIntegerToFloat's A must be read with its DynamicQuantizeLinear's scale and zero
    point; another scale is refused in one line."""
    model, _ = _contrib_matmul(False, 128, False)
    node = model.graph.node[1]
    node.input[2] = "s2"
    model.graph.initializer.append(numpy_helper.from_array(np.float32(0.5), "s2"))
    with pytest.raises(ConversionError, match=r"^node 'mmitf' \(MatMulIntegerToFloat\): input A 'xq' "
                                              r"is not a DynamicQuantizeLinear output read with its own "
                                              r"scale and zero point"):
        convert_proto(model)


# --- integer embedding tables: quantize_dynamic's Gather ------------------------------------------
V, D = 1000, 64


def _embedding(rng, direct: bool = False, rows_out: bool = True) -> onnx.ModelProto:
    """ids [2, 7] -> Gather from a [V, D] table -> (+ pos, unless `direct`) -> MatMul -> Relu ->
    MatMul -> y, with the gathered rows (h) an output too when `rows_out`."""
    rows = "e" if direct else "h"
    nodes = [helper.make_node("Gather", ["table", "ids"], ["e"])]
    nodes += [] if direct else [helper.make_node("Add", ["e", "pos"], ["h"])]
    nodes += [helper.make_node("MatMul", [rows, "w1"], ["m"]),
              helper.make_node("Relu", ["m"], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["y"])]
    outputs = {rows: TensorProto.FLOAT} if rows_out else {}
    outputs["y"] = TensorProto.FLOAT
    return make_model(nodes, {"ids": (TensorProto.INT64, (2, 7))}, outputs,
                      {"table": rng.standard_normal((V, D)).astype(np.float32),
                       "pos": rng.standard_normal((7, D)).astype(np.float32) * 0.1,
                       "w1": rng.standard_normal((D, D)).astype(np.float32) * 0.1,
                       "w2": rng.standard_normal((D, 16)).astype(np.float32) * 0.1})


def _ids(seed: int) -> dict[str, np.ndarray]:
    """Token ids over the whole table, negative ones (counted from the end) too."""
    return {"ids": np.random.default_rng(seed).integers(-V, V, (2, 7)).astype(np.int64)}


def _tables(flatbuffer: bytes) -> list:
    """(tensor, its integers) of each 8-bit constant of the .tflite that GATHER reads."""
    from qconvert.tflite.reader import buffer_data, read

    model = read(flatbuffer)
    gathered = {op.inputs[0] for op in model.operators if op.name == "GATHER"}
    return [(t, buffer_data(flatbuffer, t.buffer).view(np.dtype(t.dtype.lower())).reshape(t.shape))
            for k, t in enumerate(model.tensors) if k in gathered and t.data_offset is not None
            and t.dtype in ("INT8", "UINT8")]


def _assert_same_table(flatbuffer: bytes, quantized: onnx.ModelProto, count: int = 1) -> None:
    """The .tflite's GATHER tables are onnxruntime's uint8 table with its scale and zero point
    (or, read as MatMulInteger's A, its levels: scale 1, the same zero point)."""
    stored = _stored(quantized)
    tables = _tables(flatbuffer)
    assert len(tables) == count, [t.name for t, _ in tables]
    for tensor, q in tables:
        assert tensor.dtype == "UINT8"
        np.testing.assert_array_equal(q, stored["table_quantized"])
        assert tensor.zero_points == [int(stored["table_zero_point"])]
        assert tensor.scales[0] in (1.0, np.float32(stored["table_scale"]))


@pytest.mark.parametrize("direct", [False, True], ids=["dequantized", "read_by_matmul_integer"])
def test_embedding_table_stays_uint8(tmp_path, direct):
    """quantize_dynamic stores the Gather's table as uint8 with a scale and zero point: the
    .tflite keeps those integers once, GATHER reads them and DEQUANTIZE gives the rows
    onnxruntime's DequantizeLinear gives, bit for bit (h; and e, where MatMulInteger also reads
    the integer rows: their levels q - z times the scale); the MatMuls behind them stay within
    onnxruntime's activation rounding (SQNR)."""
    quantized = _quantize(_embedding(np.random.default_rng(3), direct), tmp_path,
                          op_types_to_quantize=["Gather", "MatMul"])
    assert {"Gather", "DequantizeLinear"} <= {n.op_type for n in quantized.graph.node}
    flatbuffer, report = convert_proto(quantized)
    _assert_same_table(flatbuffer, quantized)
    rows = "e" if direct else "h"
    for seed in (1, 2):
        feeds = _ids(seed)
        got, expected = run_tflite(flatbuffer, report, feeds), run_onnxruntime(quantized, feeds)
        np.testing.assert_array_equal(got[rows], expected[rows])
        assert sqnr_db(expected["y"], got["y"]) > 35, sqnr_db(expected["y"], got["y"])


def test_embedding_read_by_matmul_integer_only(tmp_path):
    """quantize_dynamic's Gather read by a MatMul only: MatMulInteger multiplies the gathered
    uint8 rows themselves (with the table's zero point), so the .tflite's table holds the same
    integers at scale 1 and the hybrid FULLY_CONNECTED reads their levels; the table is 8-bit
    and y within the activation rounding of the hybrid kernel (SQNR)."""
    model = _embedding(np.random.default_rng(4), direct=True, rows_out=False)
    quantized = _quantize(model, tmp_path, op_types_to_quantize=["Gather", "MatMul"])
    assert "DequantizeLinear" not in {n.op_type for n in quantized.graph.node}
    flatbuffer, report = convert_proto(quantized)
    _assert_same_table(flatbuffer, quantized)
    for seed in (1, 2):
        feeds = _ids(seed)
        got, expected = run_tflite(flatbuffer, report, feeds), run_onnxruntime(quantized, feeds)
        assert sqnr_db(expected["y"], got["y"]) > 35, sqnr_db(expected["y"], got["y"])


def test_cli_verifies_integer_rows_by_sqnr_and_says_why(tmp_path):
    """The default check of that model: onnxruntime multiplies the integer rows as they are, the
    hybrid kernel quantizes them again at run time, so it is judged by SQNR and says why."""
    model = _embedding(np.random.default_rng(4), direct=True, rows_out=False)
    _quantize(model, tmp_path, op_types_to_quantize=["Gather", "MatMul"])
    source, out = tmp_path / "dynamic.onnx", tmp_path / "m.tflite"
    run = subprocess.run([sys.executable, "-m", "qconvert", str(source), str(out), "--json"],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    verify = json.loads(run.stdout)["verify"]
    assert verify["check"] == "sqnr" and "at run time" in verify["reason"], verify


@pytest.mark.parametrize("mode", ["weight_only", "float16", "quantize"])
def test_embedding_table_with_weight_modes(tmp_path, mode):
    """--weight-only keeps the uint8 table as it is; --float16 and --quantize start from the
    float table (restore_float_weights), which --float16 stores as float16 and --quantize as
    int8. Each runs and stays close to onnxruntime."""
    from qconvert.transforms.pipeline import QuantizeOptions

    quantized = _quantize(_embedding(np.random.default_rng(5)), tmp_path,
                          op_types_to_quantize=["Gather", "MatMul"])
    if mode == "quantize":
        samples = {"ids": np.stack([_ids(seed)["ids"] for seed in range(10, 26)])}
        np.savez(tmp_path / "calibration.npz", **samples)
        flatbuffer, report = convert_proto(quantized, quantize=QuantizeOptions(),
                                           calibration=str(tmp_path / "calibration.npz"))
    else:
        weights = "int8" if mode == "weight_only" else "float16"
        flatbuffer, report = convert_proto(quantized, weights=weights)
    tables = _tables(flatbuffer)
    if mode == "weight_only":
        _assert_same_table(flatbuffer, quantized)
    elif mode == "quantize":
        assert [t.dtype for t, _ in tables] == ["INT8"]
    else:
        assert tables == []
    for seed in (1, 2):
        feeds = _ids(seed)
        got, expected = run_tflite(flatbuffer, report, feeds), run_onnxruntime(quantized, feeds)
        for name in ("h", "y"):
            assert sqnr_db(expected[name], got[name]) > (25 if mode == "quantize" else 35), name


def test_bert_embeddings_keep_the_file_small(tmp_path):
    """The zoo's BERT (bench/zoo.py: 1000 tokens, 2 layers of 64) through quantize_dynamic: its
    word embeddings stay uint8, so the .tflite is no bigger than the dynamic int8 ONNX file, and
    its output stays within onnxruntime's activation rounding."""
    torch = pytest.importorskip("torch", reason="torch is the qat extra: pip install -e '.[qat]'")
    pytest.importorskip("transformers", reason="transformers is in the test extra")
    from bench import zoo, zoo_build

    _, name, kind, spec = zoo.ARCHITECTURES["hf/bert/bert"]
    module, example, names, outputs = zoo_build.build(kind, name, spec)
    source, target = tmp_path / "bert.onnx", tmp_path / "dynamic.onnx"
    torch.onnx.export(module, example, str(source), input_names=names, output_names=outputs,
                      opset_version=17, dynamo=False)
    quantize_dynamic(str(source), str(target))
    quantized = onnx.load(target)
    flatbuffer, report = convert_proto(quantized)
    assert len(flatbuffer) <= target.stat().st_size, (len(flatbuffer), target.stat().st_size)
    tables = _tables(flatbuffer)
    assert [(t.dtype, t.shape) for t, _ in tables] == [("UINT8", [1000, 64])]
    feeds = {n: t.numpy() for n, t in zip(names, example)}
    got, expected = run_tflite(flatbuffer, report, feeds), run_onnxruntime(quantized, feeds)
    assert sqnr_db(expected["output"], got["output"]) > 35


def _transposed_activation(rng, reader: str) -> onnx.ModelProto:
    """x [1, 8, 16] -> MatMul(W) -> a, and x -> Transpose -> `reader` -> b: quantize_dynamic
    quantizes x once, then moves it in int8 (DynamicQuantizeLinear -> Transpose -> MatMulInteger,
    or -> DequantizeLinear at x's run-time scale before a float op)."""
    second = (helper.make_node("MatMul", ["t", "w2"], ["b"]) if reader == "MatMul"
              else helper.make_node("Relu", ["t"], ["b"]))
    nodes = [helper.make_node("MatMul", ["x", "w"], ["a"]),
             helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1]), second]
    return make_model(nodes, {"x": (TensorProto.FLOAT, [1, 8, 16])},
                      {"a": TensorProto.FLOAT, "b": TensorProto.FLOAT},
                      {"w": rng.standard_normal((16, 32)).astype(np.float32),
                       "w2": rng.standard_normal((8, 32)).astype(np.float32)})


def _dynamic_matmul(x: np.ndarray, quantized: onnx.ModelProto, weight: str) -> np.ndarray:
    """x @ `weight` as quantize_dynamic's graph defines it, in numpy: DynamicQuantizeLinear's uint8
    x (its float32 range widened to 0 over 255, the zero point and levels rounded half to even),
    the exact integer sums of (x - zx)(W - zw), times both scales: a reference no CPU's integer
    kernels can change (onnxruntime's u8 x s8 MatMulInteger saturates without VNNI)."""
    init = {t.name: numpy_helper.to_array(t) for t in quantized.graph.initializer}
    lo, hi = np.float32(min(0.0, x.min())), np.float32(max(0.0, x.max()))
    scale = np.float32((hi - lo) / np.float32(255))
    zero = np.clip(np.round(-lo / scale), 0, 255)
    levels = np.clip(np.round(x / scale) + zero, 0, 255).astype(np.int64) - int(zero)
    weights = init[f"{weight}_quantized"].astype(np.int64) - init[f"{weight}_zero_point"].astype(np.int64)
    return (levels @ weights).astype(np.float32) * (scale * init[f"{weight}_scale"])


@pytest.mark.parametrize("reader", ["MatMul", "Relu"])
def test_an_activation_moved_in_int8(tmp_path, reader):
    """The int8 activation moved by a Transpose to a second MatMulInteger, or dequantized after it
    at its run-time scale for a float op: the same movement in float, within onnxruntime's
    rounding, the weights int8. The expected values are the graph's arithmetic in numpy, the same
    on every CPU, and onnxruntime's reference (tests.harness.run_onnxruntime) equals them."""
    quantized = _quantize(_transposed_activation(np.random.default_rng(6), reader), tmp_path)
    assert "Transpose" in {n.op_type for n in quantized.graph.node}
    flatbuffer, report = convert_proto(quantized)
    feeds = _feeds(quantized)
    x = feeds["x"]
    expected = {"a": _dynamic_matmul(x, quantized, "w"),
                "b": (_dynamic_matmul(x.transpose(0, 2, 1), quantized, "w2") if reader == "MatMul"
                      else np.maximum(x.transpose(0, 2, 1), 0))}
    got, reference = run_tflite(flatbuffer, report, feeds), run_onnxruntime(quantized, feeds)
    for name in ("a", "b"):
        np.testing.assert_allclose(reference[name], expected[name], rtol=1e-6, atol=1e-6)
        assert sqnr_db(expected[name], got[name]) > 35, (name, sqnr_db(expected[name], got[name]))
    from qconvert.tflite.reader import read

    assert any(t.dtype == "INT8" and t.shape == [32, 16] for t in read(flatbuffer).tensors)
