"""The flatbuffer writer (qconvert/tflite/writer.py): constant de-duplication and writing out."""

import io

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from qconvert.converter import convert
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
    flatbuffer, report = convert("<test>", data=data)
    out = io.BytesIO()
    flatbuffer.write_to(out)
    assert out.getvalue() == expected and len(flatbuffer) == len(expected) == report.size_bytes
    with pytest.raises(RuntimeError, match="released"):  # convert() lets each array go once written
        flatbuffer.write_to(io.BytesIO())
