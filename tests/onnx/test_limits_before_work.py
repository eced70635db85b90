"""Limits before work (issue 32): every constant a fold makes is sized in its own dtype against
QCONVERT_MAX_FOLDED_BYTES before it is computed.

Each fold kind (ConstantOfShape, Expand, Tile, Range, EyeLike, OneHot, Concat, Resize) in two or
three dtypes, with the limit set to the constant's size in its dtype (it converts and matches
onnxruntime) and to one byte less (refused in one line naming the node, the size and the
variable). A size counted in float64, or after computing, fails one of the two. Then the issue's
cases as a user meets them: folds of hundreds of millions of elements under a 4 GiB address-space
limit end in that one line (they were MemoryErrors), and a long float32 Range equals onnxruntime's
bit for bit (the evaluator computed it in float64).
"""

from __future__ import annotations

import resource
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests import processes
from tests.harness import assert_matches_onnxruntime, assert_refused_in_one_line

_TYPES = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16, np.int32: TensorProto.INT32,
          np.int64: TensorProto.INT64}


def _folding(node: onnx.NodeProto, inits: dict, shape: tuple, dtype, opset: int = 13) -> onnx.ModelProto:
    """y = x + fold, `fold` the output of `node` over the constants `inits` (shape `shape`,
    dtype `dtype`): the folded constant reaches the .tflite and is compared through y."""
    elem = _TYPES[dtype]
    graph = helper.make_graph(
        [node, helper.make_node("Add", ["x", "fold"], ["y"])], "g",
        [helper.make_tensor_value_info("x", elem, list(shape))],
        [helper.make_tensor_value_info("y", elem, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _constant_of_shape(dtype):
    value = numpy_helper.from_array(np.array([3], dtype))
    return _folding(helper.make_node("ConstantOfShape", ["s"], ["fold"], name="n", value=value),
                    {"s": np.array([2, 3, 5], np.int64)}, (2, 3, 5), dtype)


def _expand(dtype):
    return _folding(helper.make_node("Expand", ["d", "s"], ["fold"], name="n"),
                    {"d": np.arange(3, dtype=dtype).reshape(3, 1), "s": np.array([2, 3, 4], np.int64)},
                    (2, 3, 4), dtype)


def _tile(dtype):
    return _folding(helper.make_node("Tile", ["d", "r"], ["fold"], name="n"),
                    {"d": np.arange(6, dtype=dtype).reshape(2, 3), "r": np.array([3, 2], np.int64)},
                    (6, 6), dtype)


def _range(dtype):
    start, limit, delta = (np.array(v, dtype) for v in (2, 50, 3))
    return _folding(helper.make_node("Range", ["a", "b", "c"], ["fold"], name="n"),
                    {"a": start, "b": limit, "c": delta}, (16,), dtype)


def _eye_like(dtype):
    return _folding(helper.make_node("EyeLike", ["d"], ["fold"], name="n", k=1,
                                     dtype=_TYPES[dtype]),
                    {"d": np.zeros((4, 6), np.float32)}, (4, 6), dtype)


def _one_hot(dtype):
    return _folding(helper.make_node("OneHot", ["i", "d", "v"], ["fold"], name="n", axis=1),
                    {"i": np.array([[0, 4], [-1, 7]], np.int64), "d": np.array(5, np.int64),
                     "v": np.array([1, 9], dtype)}, (2, 5, 2), dtype, opset=11)


def _concat(dtype):
    return _folding(helper.make_node("Concat", ["a", "b"], ["fold"], name="n", axis=1),
                    {"a": np.ones((2, 3), dtype), "b": np.arange(10, dtype=dtype).reshape(2, 5)},
                    (2, 8), dtype)


def _resize(dtype):
    return _folding(helper.make_node("Resize", ["d", "", "s"], ["fold"], name="n", mode="nearest"),
                    {"d": np.arange(6, dtype=dtype).reshape(1, 1, 2, 3),
                     "s": np.array([1, 1, 2, 2], np.float32)}, (1, 1, 4, 6), dtype)


# kind -> (model maker, dtypes): onnxruntime's kernels for each (no float16 Range or OneHot there)
_KINDS = {
    "ConstantOfShape": (_constant_of_shape, (np.float32, np.float16, np.int64)),
    "Expand": (_expand, (np.float32, np.float16, np.int32)),
    "Tile": (_tile, (np.float32, np.int64)),
    "Range": (_range, (np.float32, np.int32, np.int64)),
    "EyeLike": (_eye_like, (np.float32, np.int64)),
    "OneHot": (_one_hot, (np.float32, np.int64)),
    "Concat": (_concat, (np.float32, np.float16, np.int64)),
    "Resize": (_resize, (np.float32,)),
}
_CASES = [(kind, np.dtype(d)) for kind, (_, dtypes) in _KINDS.items() for d in dtypes]


def _bytes(model: onnx.ModelProto, dtype: np.dtype) -> int:
    """The folded constant's bytes in its own dtype (from the graph input of its shape)."""
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    return int(np.prod(dims)) * dtype.itemsize


@pytest.mark.parametrize("kind,dtype", _CASES, ids=[f"{k}-{d}" for k, d in _CASES])
def test_a_fold_as_big_as_the_limit_converts(kind, dtype, monkeypatch):
    model = _KINDS[kind][0](dtype.type)
    monkeypatch.setenv("QCONVERT_MAX_FOLDED_BYTES", str(_bytes(model, dtype)))
    assert_matches_onnxruntime(model, rtol=0, atol=0)


@pytest.mark.parametrize("kind,dtype", _CASES, ids=[f"{k}-{d}" for k, d in _CASES])
def test_a_fold_one_byte_over_the_limit_is_refused_before_it_is_computed(kind, dtype, monkeypatch):
    model = _KINDS[kind][0](dtype.type)
    size = _bytes(model, dtype)
    monkeypatch.setenv("QCONVERT_MAX_FOLDED_BYTES", str(size - 1))
    message = assert_refused_in_one_line(model, "exceed the limit", node="n")
    assert f"({kind}): {size:,} bytes in one folded constant exceed the limit of {size - 1:,}" in message
    assert "QCONVERT_MAX_FOLDED_BYTES" in message


def test_a_long_float32_range_equals_onnxruntimes():
    """onnxruntime adds delta to the previous value in float32; the reference evaluator computed
    start + k * delta in float64 (twice the memory, and other last bits)."""
    inits = {"a": np.array(0.1, np.float32), "b": np.array(3e4, np.float32),
             "c": np.array(0.3, np.float32)}
    model = _folding(helper.make_node("Range", ["a", "b", "c"], ["fold"], name="n"), inits,
                     (100_000,), np.float32)
    assert_matches_onnxruntime(model, rtol=0, atol=0)


def _huge(kind: str) -> onnx.ModelProto:
    """A fold of hundreds of millions of elements (the issue's 256 M-element ConstantOfShape)."""
    nodes = {
        "ConstantOfShape": (helper.make_node("ConstantOfShape", ["s"], ["fold"], name="n",
                                             value=numpy_helper.from_array(np.ones(1, np.float32))),
                            {"s": np.array([1 << 28], np.int64)}),
        "Expand": (helper.make_node("Expand", ["d", "s"], ["fold"], name="n"),
                   {"d": np.ones((1, 1), np.float32), "s": np.array([20000, 15000], np.int64)}),
        "Tile": (helper.make_node("Tile", ["d", "s"], ["fold"], name="n"),
                 {"d": np.ones((2, 2), np.float32), "s": np.array([10000, 10000], np.int64)}),
        "Range": (helper.make_node("Range", ["a", "b", "c"], ["fold"], name="n"),
                  {"a": np.array(0, np.int64), "b": np.array(3 * 10**8, np.int64),
                   "c": np.array(1, np.int64)}),
    }
    node, inits = nodes[kind]
    graph = helper.make_graph(
        [node, helper.make_node("ReduceMax", ["fold"], ["m"], keepdims=0),
         helper.make_node("Cast", ["m"], ["mf"], to=TensorProto.FLOAT),
         helper.make_node("Add", ["x", "mf"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))


@pytest.mark.parametrize("kind", ["ConstantOfShape", "Expand", "Tile", "Range"])
def test_a_huge_fold_under_a_4_gib_address_space_is_one_line(kind, tmp_path):
    source, out = tmp_path / "huge.onnx", tmp_path / "out.tflite"
    onnx.save(_huge(kind), source)
    result = processes.run([sys.executable, "-m", "qconvert", str(source), str(out)],
                           capture_output=True, text=True, preexec_fn=_limit_memory, cpu_seconds=300)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1 and len(lines) == 1, result.stderr
    assert f"node 'n' ({kind})" in lines[0] and "QCONVERT_MAX_FOLDED_BYTES" in lines[0], lines[0]
    assert not out.exists()


def test_a_huge_constant_output_under_a_4_gib_address_space_is_one_line(tmp_path):
    """The issue's case: a ConstantOfShape of 64 M float32 values (within the fold limit) that is
    the graph's output; the default check's comparison then needs more than 4 GiB: one line,
    exit 1 (it was an internal error: 'MemoryError: Unable to allocate 512. MiB ... float64')."""
    node = helper.make_node("ConstantOfShape", ["s"], ["y"], name="n",
                            value=numpy_helper.from_array(np.ones(1, np.float32)))
    graph = helper.make_graph([node, helper.make_node("Identity", ["x"], ["z"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.array([1 << 26], np.int64), "s")])
    source, out = tmp_path / "big.onnx", tmp_path / "out.tflite"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), source)
    result = processes.run([sys.executable, "-m", "qconvert", str(source), str(out)],
                           capture_output=True, text=True, preexec_fn=_limit_memory, cpu_seconds=300)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    if result.returncode == 0:  # a machine where 4 GiB was enough: written and verified
        assert out.exists()
    else:
        assert result.returncode == 1 and lines[0].startswith("qconvert: error: out of memory"), lines[0]
        assert not out.exists()
