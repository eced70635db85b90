"""The flatbuffer writer (qconvert/tflite/writer.py): constant de-duplication and writing out."""

import io

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from qconvert.driver import conversion
from tests.harness import convert, options_of
from qconvert.ir import WORK
from qconvert.tflite.reader import read
from tests.harness import assert_matches_onnxruntime

A = np.random.default_rng(0).standard_normal(64).astype(np.float32)
C = np.random.default_rng(1).standard_normal(64).astype(np.float32)


def make_model():
    """y = ((x + A) * A2 - C) over [1, 64], z = x8 + D over [8, 8]: A2 and D hold A's bytes
    (D in another shape), C the same number of other bytes."""
    nodes = [helper.make_node("Add", ["x", "A"], ["s"]), helper.make_node("Mul", ["s", "A2"], ["p"]),
             helper.make_node("Sub", ["p", "C"], ["y"]), helper.make_node("Add", ["x8", "D"], ["z"])]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64]),
         helper.make_tensor_value_info("x8", TensorProto.FLOAT, [8, 8])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "z")],
        [numpy_helper.from_array(A, "A"), numpy_helper.from_array(A.copy(), "A2"),
         numpy_helper.from_array(C, "C"), numpy_helper.from_array(A.reshape(8, 8), "D")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def test_equal_bytes_are_stored_once_and_compared_only_on_a_hash_hit():
    WORK.clear()
    flatbuffer, _ = assert_matches_onnxruntime(make_model())
    assert WORK["constant byte compares"] == 2  # A2 and D, each with A; C is never compared
    buffers = {t.name: t.buffer for t in read(flatbuffer).tensors}
    assert buffers["A"] == buffers["A2"] == buffers["D"] != buffers["C"]


def test_written_out_once_with_the_same_bytes(tmp_path):
    data = make_model().SerializeToString()
    expected = bytes(convert("<test>", data=data)[0])
    written = []

    def write(flatbuffer, finish):  # as the command line writes a file
        out = io.BytesIO()
        flatbuffer.write_to(out)
        written.append((flatbuffer, out.getvalue()))
        finish(None)

    _, report = conversion.convert("<test>", options_of(), data=data, write=write)
    (flatbuffer, content), = written
    assert content == expected and len(flatbuffer) == len(expected) == report.size_bytes
    with pytest.raises(RuntimeError, match="released"):  # the driver lets each array go once written
        flatbuffer.write_to(io.BytesIO())


def unrolled_recurrence(steps: int = 6, width: int = 64):
    """h = tanh(h @ W + x_k) unrolled over `steps`, every step reading the one initializer W
    (each MatMul's FULLY_CONNECTED weight is its own transposed copy until the file dedups it)."""
    rng = np.random.default_rng(2)
    w = (rng.standard_normal((width, width)) * 0.2).astype(np.float32)
    nodes, h = [], "x"
    for k in range(steps):
        nodes += [helper.make_node("MatMul", [h, "W"], [f"m{k}"]),
                  helper.make_node("Add", [f"m{k}", "x"], [f"a{k}"]),
                  helper.make_node("Tanh", [f"a{k}"], [f"h{k}"])]
        h = f"h{k}"
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
                              [helper.make_tensor_value_info(h, TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "W")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), w


def test_the_weight_size_counts_a_shared_weight_once(tmp_path):
    """The report's weight bytes are the stored buffers, a weight that six steps share once: before
    quantization W's float bytes, after it W's int8 bytes (and no more than the file holds)."""
    from tests.harness import calibration_set, convert_proto, convert_quantized

    model, w = unrolled_recurrence()
    flatbuffer, report = convert_quantized(model, calibration_set(model, count=4), tmp_path)
    q = report.quantization
    assert q.weights_bytes_float == w.nbytes
    assert w.size <= q.weights_bytes <= w.size + 1024 < len(flatbuffer)
    _, report = convert_proto(model, weights="int8", weight_only_min_elements=16)
    assert (report.weights.weights_bytes_float, report.weights.weights_bytes) == (w.nbytes, w.size)
