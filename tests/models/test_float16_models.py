"""float16 models (as onnxconverter-common's convert_float_to_float16 writes them, made here by
hand): float16 weights and activations, float32 or float16 graph inputs and outputs. They convert
computed in float32 from the same float16 weights, stored as float16 behind DEQUANTIZE (TFLite's
float16 mode), so that the .tflite stays the ONNX file's size; the default float check compares
with onnxruntime running the float16 model, within float16's rounding (check/verify.py)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from qconvert.check.float_check import FLOAT16_TOLERANCE
from qconvert.driver import conversion
from qconvert.driver.options import options_from_flags
from tests.harness import convert_proto, random_feeds, run_onnxruntime, run_tflite


def float32_model() -> onnx.ModelProto:
    """x [1, 3, 8, 8] -> Conv -> Relu -> GlobalAveragePool -> Flatten -> Gemm -> layer norm
    (ReduceMean, Sub, Mul, Sqrt, Div) -> Softmax -> y [1, 16]."""
    rng = np.random.default_rng(3)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]), helper.make_node("GlobalAveragePool", ["r"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "dense", "bias"], ["h"], transB=1),
             helper.make_node("ReduceMean", ["h"], ["mu"], axes=[-1]), helper.make_node("Sub", ["h", "mu"], ["d"]),
             helper.make_node("Mul", ["d", "d"], ["d2"]), helper.make_node("ReduceMean", ["d2"], ["v"], axes=[-1]),
             helper.make_node("Add", ["v", "eps"], ["ve"]), helper.make_node("Sqrt", ["ve"], ["s"]),
             helper.make_node("Div", ["d", "s"], ["n"]), helper.make_node("Softmax", ["n"], ["y"], axis=-1)]
    inits = {"w": rng.standard_normal((8, 3, 3, 3)) / 3, "b": rng.standard_normal(8),
             "dense": rng.standard_normal((16, 8)) / 3, "bias": rng.standard_normal(16),
             "eps": np.array(1e-5)}
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])],
                              [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def to_float16(model: onnx.ModelProto, keep_io_types: bool) -> onnx.ModelProto:
    """What convert_float_to_float16 writes: float16 weights and activations; with
    `keep_io_types`, float32 inputs and outputs through a Cast at each."""
    half = onnx.ModelProto()
    half.CopyFrom(model)
    graph = half.graph
    for t in graph.initializer:
        t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float16), t.name))
    if keep_io_types:
        for value in graph.input:
            graph.node.insert(0, helper.make_node("Cast", [value.name], [value.name + "_half"],
                                                  to=TensorProto.FLOAT16))
            for node in graph.node[1:]:
                node.input[:] = [value.name + "_half" if n == value.name else n for n in node.input]
        for value in graph.output:
            for node in graph.node:
                node.output[:] = [value.name + "_half" if n == value.name else n for n in node.output]
            graph.node.append(helper.make_node("Cast", [value.name + "_half"], [value.name],
                                               to=TensorProto.FLOAT))
    else:
        for value in list(graph.input) + list(graph.output):
            value.type.tensor_type.elem_type = TensorProto.FLOAT16
    return half


@pytest.mark.parametrize("keep_io_types", [True, False], ids=["float32_io", "float16_io"])
def test_float16_model_matches_onnxruntime_within_float16_rounding(keep_io_types):
    model = to_float16(float32_model(), keep_io_types)
    feeds = random_feeds(model)
    flatbuffer, report = convert_proto(model)
    got, want = run_tflite(flatbuffer, report, feeds)["y"], run_onnxruntime(model, feeds)["y"]
    assert got.dtype == want.dtype == (np.float32 if keep_io_types else np.float16)
    scale = float(np.abs(want.astype(np.float32)).max())
    assert np.abs(got.astype(np.float32) - want.astype(np.float32)).max() <= FLOAT16_TOLERANCE * scale
    # Computed in float32 inside: the Casts between float16 and float32 are gone; the weights are
    # float16 behind DEQUANTIZE.
    counts = report.op_counts
    assert counts.get("CAST", 0) == (0 if keep_io_types else 2), counts
    assert counts["DEQUANTIZE"] >= 4 and report.weights.mode == "float16"
    assert report.weights.weights_bytes <= report.weights.weights_bytes_float / 2 + 64


def test_float16_model_keeps_the_onnx_file_size_and_passes_the_default_check():
    """Through the driver with its default verification: the float check at float16's tolerance."""
    model = to_float16(float32_model(), keep_io_types=True)
    data = model.SerializeToString()
    flatbuffer, report = conversion.convert("<test>", options_from_flags(), data=data)
    assert report.verify.passed and report.verify.check == "float", report.summary()
    assert report.verify.tolerance == FLOAT16_TOLERANCE and "float16 ulps" in report.summary()
    float32, _ = convert_proto(float32_model())
    weights = sum(t.ByteSize() for t in model.graph.initializer)
    assert len(bytes(flatbuffer)) < len(float32) and len(bytes(flatbuffer)) <= len(data) + 4096 + weights // 8


def _scaled_by_its_width(scale_type: int) -> onnx.ModelProto:
    """x (float16) * width ** -0.5, the width from x's shape through a Cast to `scale_type`
    (Swin's attention scale): with FLOAT, what onnxconverter-common writes for Swin, a Mul of
    float16 and float32 that onnxruntime refuses."""
    nodes = [helper.make_node("Cast", ["x"], ["h"], to=TensorProto.FLOAT16),
             helper.make_node("Shape", ["h"], ["shape"]),
             helper.make_node("Gather", ["shape", "last"], ["width"]),
             helper.make_node("Cast", ["width"], ["w"], to=scale_type),
             helper.make_node("Pow", ["w", "power"], ["scale"]),
             helper.make_node("Mul", ["h", "scale"], ["m"]),
             helper.make_node("Cast", ["m"], ["y"], to=TensorProto.FLOAT)]
    power = np.array(-0.5, np.float16 if scale_type == TensorProto.FLOAT16 else np.float32)
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 7])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.array(1, np.int64), "last"),
                               numpy_helper.from_array(power, "power")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def test_a_float32_scale_in_a_float16_graph_converts():
    """float16 and float32 are one type inside: the model onnxruntime refuses converts, and gives
    what onnxruntime gives for the same model with the scale in float16."""
    invalid, valid = _scaled_by_its_width(TensorProto.FLOAT), _scaled_by_its_width(TensorProto.FLOAT16)
    with pytest.raises(Exception, match="Type"):
        run_onnxruntime(invalid, {"x": np.zeros((2, 7), np.float32)})
    feeds = random_feeds(valid)
    flatbuffer, report = convert_proto(invalid)
    got, want = run_tflite(flatbuffer, report, feeds)["y"], run_onnxruntime(valid, feeds)["y"]
    assert np.abs(got - want).max() <= FLOAT16_TOLERANCE * np.abs(want).max()
