"""store_integer_weights with each weight mode: a dynamically quantized model (onnxruntime's
quantize_dynamic) keeps onnxruntime's int8 weights in a float conversion and under --weight-only;
--float16 and --quantize start from the float weights again (restore_float_weights). Every
.tflite runs in LiteRT against onnxruntime running the quantized model."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnxruntime.quantization import quantize_dynamic

from qconvert.check.metrics import sqnr_db
from qconvert.tflite.reader import read
from qconvert.transforms.pipeline import QuantizeOptions
from tests.harness import convert_proto, make_model, run_onnxruntime, run_tflite


def _quantized(tmp_path) -> onnx.ModelProto:
    """x [2, 64] -> MatMul 64x48 -> Relu -> MatMul 48x40 (biases), quantized per tensor (QInt8)."""
    rng = np.random.default_rng(7)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["a"]),
             helper.make_node("Relu", ["a"], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["y"])]
    model = make_model(nodes, {"x": (TensorProto.FLOAT, (2, 64))}, {"y": TensorProto.FLOAT},
                       {"w1": rng.standard_normal((64, 48)).astype(np.float32) * 0.2,
                        "b1": rng.standard_normal(48).astype(np.float32) * 0.1,
                        "w2": rng.standard_normal((48, 40)).astype(np.float32) * 0.2})
    onnx.save(model, tmp_path / "float.onnx")
    quantize_dynamic(str(tmp_path / "float.onnx"), str(tmp_path / "dynamic.onnx"))
    return onnx.load(tmp_path / "dynamic.onnx")


@pytest.mark.parametrize("mode, weight_types", [
    ({}, {"INT8"}),  # the hybrid FULLY_CONNECTEDs read onnxruntime's int8 weights
    ({"weights": "int8", "weight_only_min_elements": 1}, {"INT8"}),
    ({"weights": "float16"}, {"FLOAT16"}),
    ({"quantize": QuantizeOptions(default_range=(-8.0, 8.0))}, {"INT8"}),  # full int8
])
def test_weight_modes(tmp_path, mode, weight_types):
    quantized = _quantized(tmp_path)
    flatbuffer, report = convert_proto(quantized, **mode)
    summary = read(flatbuffer)
    weights = [t for t in summary.tensors if t.data_offset is not None and len(t.shape) == 2]
    assert {t.dtype for t in weights} == weight_types and len(weights) == 2
    if "quantize" not in mode:  # --default-range's int8 model is meaningless by design
        x = np.random.default_rng(1).standard_normal((2, 64)).astype(np.float32)
        got, expected = run_tflite(flatbuffer, report, {"x": x})["y"], run_onnxruntime(quantized, {"x": x})["y"]
        assert sqnr_db(expected, got) > 35
    if not mode:
        assert [op for op, _ in summary.ops] == ["FULLY_CONNECTED"] * 2
