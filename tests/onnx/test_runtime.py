"""onnxruntime as the reference (qconvert/onnx/runtime.py): MatMulInteger and ConvInteger give the
integer sums the ops define on every CPU (reproducible_reference), where onnxruntime's own x86
u8 x s8 kernels saturate pairs of products at 16 bits without VNNI."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from qconvert.check.runtimes import Reference
from qconvert.onnx.runtime import reproducible_reference
from tests.harness import make_model


def _saturating(op: str):
    """uint8 activations at 255 times int8 weights at 127: every pair of products is 64770, beyond
    int16 (a saturating kernel gives 32767 per pair)."""
    rng = np.random.default_rng(0)
    if op == "MatMulInteger":
        w = np.full((16, 4), 127, np.int8)
        w[:, 1] = rng.integers(-128, 128, 16)
        nodes = [helper.make_node("MatMulInteger", ["x", "w", "xz"], ["y"])]
        inputs, x = {"x": (TensorProto.UINT8, (2, 16))}, rng.integers(200, 256, (2, 16)).astype(np.uint8)
        want = (x.astype(np.int64) - 3) @ w.astype(np.int64)
    else:
        w = np.full((4, 8, 3, 3), 127, np.int8)
        nodes = [helper.make_node("ConvInteger", ["x", "w", "xz"], ["y"])]
        inputs, x = {"x": (TensorProto.UINT8, (1, 8, 5, 5))}, rng.integers(200, 256, (1, 8, 5, 5)).astype(np.uint8)
        xs = x.astype(np.int64) - 3
        want = np.zeros((1, 4, 3, 3), np.int64)
        for i in range(3):
            for j in range(3):
                want[0, :, i, j] = np.einsum("chw,ochw->o", xs[0, :, i:i + 3, j:j + 3], w.astype(np.int64))
    model = make_model(nodes, inputs, {"y": TensorProto.INT32}, {"w": w, "xz": np.uint8(3)}, opset=13)
    return model, x, want


def test_integer_products_are_exact_on_every_cpu():
    for op in ("MatMulInteger", "ConvInteger"):
        model, x, want = _saturating(op)
        assert reproducible_reference(model) is not None
        got = Reference(model).run({"x": x})["y"]
        np.testing.assert_array_equal(got, want, err_msg=op)


def test_a_quantized_lstm_is_referenced_as_its_float_lstm(tmp_path):
    """quantize_dynamic's DynamicQuantizeLSTM (which rounds inside itself, differently without
    VNNI) is the float LSTM of its dequantized weights in the reference: its outputs follow the
    float model's within the weights' int8 rounding."""
    import onnx

    from bench import quantized_family as family

    model_path, data = family.trained("lstm", tmp_path, steps=50)
    quantized = onnx.load(family.quantized(model_path, family.FORMATS[4], data["calibration"], tmp_path))
    assert any(n.op_type == "DynamicQuantizeLSTM" for n in quantized.graph.node)
    rewritten = reproducible_reference(quantized)
    assert {n.op_type for n in rewritten.graph.node} >= {"LSTM"}
    assert not any(n.op_type == "DynamicQuantizeLSTM" for n in rewritten.graph.node)
    sample = {"x": data["held"][:1]}
    got = Reference(quantized).run(sample)["y"]
    want = Reference(onnx.load(model_path)).run(sample)["y"]
    np.testing.assert_allclose(got, want, rtol=0, atol=0.05 * float(np.abs(want).max()))
