"""Loader coverage: every opset from 9 to the newest the installed onnx knows, files with
external data, several inputs and outputs, and int64 inputs/outputs."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from tests.harness import convert
from tests.harness import assert_matches_onnxruntime, make_model, run_onnxruntime, run_tflite

rng = np.random.default_rng(0)


def small_cnn(opset: int) -> onnx.ModelProto:
    """Conv + BatchNorm + Relu + MaxPool + Reshape + Gemm + Softmax, valid in every opset >= 9."""
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3, "w")
    bn = [numpy_helper.from_array(v.astype(np.float32), n) for n, v in
          [("g", rng.uniform(0.5, 1.5, 4)), ("b", rng.normal(0, .1, 4)), ("m", rng.normal(0, .1, 4)),
           ("v", rng.uniform(0.5, 1.5, 4))]]
    fc = numpy_helper.from_array(rng.standard_normal((5, 4 * 3 * 4)).astype(np.float32) * 0.2, "fc")
    fcb = numpy_helper.from_array(rng.normal(0, 0.1, 5).astype(np.float32), "fcb")
    shape = numpy_helper.from_array(np.array([1, 48], np.int64), "shape")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "g", "b", "m", "v"], ["n"]),
        helper.make_node("Relu", ["n"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Reshape", ["p", "shape"], ["f"]),
        helper.make_node("Gemm", ["f", "fc", "fcb"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["y"], axis=1),
    ]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])],
                              [w, fc, fcb, shape] + bn)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def reference(model: onnx.ModelProto, feeds) -> np.ndarray:
    """onnxruntime's output; onnx's reference evaluator for opsets onnxruntime does not know yet
    (not for all: its BatchNormalization before opset 14 disagrees with onnxruntime and the spec)."""
    try:
        return run_onnxruntime(model, feeds)["y"]
    except Exception:  # noqa: BLE001  (onnxruntime refuses opsets newer than it knows)
        return ReferenceEvaluator(model).run(None, feeds)[0]


@pytest.mark.parametrize("opset", range(9, onnx.defs.onnx_opset_version() + 1))
def test_every_opset_converts(opset):
    model = small_cnn(opset)
    feeds = {"x": rng.standard_normal((1, 3, 6, 8)).astype(np.float32)}
    expected = reference(model, feeds)
    flatbuffer, report = convert("<test>", data=model.SerializeToString())
    actual = run_tflite(bytes(flatbuffer), report, feeds)["y"]
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-6)


def test_external_data_file_converts(tmp_path):
    model = small_cnn(13)
    path = tmp_path / "model.onnx"
    saved = onnx.ModelProto()
    saved.CopyFrom(model)  # onnx.save moves the data of the proto it is given out to the file
    onnx.save(saved, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
              location="weights.bin", size_threshold=0)
    assert (tmp_path / "weights.bin").stat().st_size > 1000
    feeds = {"x": rng.standard_normal((1, 3, 6, 8)).astype(np.float32)}
    flatbuffer, report = convert(str(path))
    expected = reference(model, feeds)
    np.testing.assert_allclose(run_tflite(bytes(flatbuffer), report, feeds)["y"], expected, rtol=1e-4, atol=1e-6)


def test_several_inputs_and_outputs_with_int64():
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["emb"], axis=0),
        helper.make_node("Add", ["emb", "bias"], ["sum"]),
        helper.make_node("ReduceSum", ["sum"], ["total"], axes=[1], keepdims=0),
        helper.make_node("ArgMax", ["sum"], ["best"], axis=1, keepdims=0),
    ]
    graph = helper.make_graph(
        nodes, "multi",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [3]),
         helper.make_tensor_value_info("bias", TensorProto.FLOAT, [3, 4])],
        [helper.make_tensor_value_info("total", TensorProto.FLOAT, [3]),
         helper.make_tensor_value_info("best", TensorProto.INT64, [3])],
        [numpy_helper.from_array(rng.standard_normal((10, 4)).astype(np.float32), "table")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)], ir_version=8)
    feeds = {"ids": np.array([7, 0, 3], np.int64), "bias": rng.standard_normal((3, 4)).astype(np.float32)}
    _, report = assert_matches_onnxruntime(model, feeds)
    assert [i.dtype for i in report.inputs] == ["int64", "float32"]
    assert [o.dtype for o in report.outputs] == ["float32", "int64"]


def test_int64_constant_that_does_not_fit_int32_is_an_error():
    """Where the op computes in int32 (a Div: TFLite has no int64 DIV); an Add whose output is an
    int64 graph output stays int64 (tests/ops/test_int64_narrowing.py)."""
    from qconvert.errors import ConversionError

    nodes = [helper.make_node("Div", ["x", "big"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.INT64, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.INT64, [2])],
                              [numpy_helper.from_array(np.array([1, 2**40], np.int64), "big")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    with pytest.raises(ConversionError, match="'big'.*int32"):
        convert("<test>", data=model.SerializeToString())


def test_pytorch_shape_chains_fold_away():
    """x.view(x.size(0), -1) as PyTorch exports it: Shape -> Gather -> Unsqueeze -> Concat ->
    Reshape. The chain folds at load time: the TFLite graph has no SHAPE/GATHER/CONCATENATION."""
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Shape", ["c"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus_one"], ["target"], axis=0),
        helper.make_node("Reshape", ["c", "target"], ["y"]),
    ]
    inits = {"w": rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "zero": np.array(0, np.int64),
             "axes": np.array([0], np.int64), "minus_one": np.array([-1], np.int64)}
    model = make_model(nodes, {"x": (TensorProto.FLOAT, [2, 3, 5, 6])}, {"y": TensorProto.FLOAT}, inits)
    _, report = assert_matches_onnxruntime(model)
    assert set(report.op_counts) <= {"CONV_2D", "TRANSPOSE", "RESHAPE"}, report.op_counts
