"""qconvert.onnx.graph.GraphIndex on real ONNX graphs: constants (initializers, each kind of
Constant node, external data, data left in the file), producers, readers, inputs and outputs."""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from qconvert.errors import ConversionError
from qconvert.onnx.file import read_onnx
from qconvert.onnx.graph import GraphIndex, producers_of, uses_of

WEIGHT = np.arange(12, dtype=np.float32).reshape(3, 4) / 8
BIAS = np.array([1, -2, 3], np.int64)


def _model(nodes, outputs, initializers=(), inputs=(), types=None) -> onnx.ModelProto:
    """A model of `nodes` with float outputs (or of the `types` given by name)."""
    types = types or {}
    graph = helper.make_graph(nodes, "g", list(inputs),
                              [helper.make_tensor_value_info(o, types.get(o, TensorProto.FLOAT), None)
                               for o in outputs],
                              initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


# Constant nodes of every kind GraphIndex decodes, each a graph output (through an Identity, so
# that onnxruntime computes it).
CONSTANTS = {
    "tensor": {"value": numpy_helper.from_array(WEIGHT)},
    "float": {"value_float": 0.25},
    "floats": {"value_floats": [0.5, -1.5]},
    "int": {"value_int": 7},
    "ints": {"value_ints": [3, -4, 5]},
}


def _constants_model() -> onnx.ModelProto:
    nodes = []
    for name, attributes in CONSTANTS.items():
        nodes.append(helper.make_node("Constant", [], [name], **attributes))
        nodes.append(helper.make_node("Identity", [name], [f"{name}_out"]))
    return _model(nodes, [f"{name}_out" for name in CONSTANTS],
                  types={"int_out": TensorProto.INT64, "ints_out": TensorProto.INT64})


def test_each_kind_of_constant_node_has_the_value_onnxruntime_computes():
    model = _constants_model()
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    computed = dict(zip(CONSTANTS, session.run([f"{name}_out" for name in CONSTANTS], {})))
    index = GraphIndex(model.graph)
    for name, expected in computed.items():
        value = index.constant(name)
        assert value is not None and name in index, name
        assert value.dtype == expected.dtype and value.shape == expected.shape, name
        np.testing.assert_array_equal(value, expected)


def test_constant_attributes_chooses_the_kinds_taken():
    index = GraphIndex(_constants_model().graph, constant_attributes=("value",))
    np.testing.assert_array_equal(index.constant("tensor"), WEIGHT)
    assert all(index.constant(name) is None for name in CONSTANTS if name != "tensor")
    assert all(name in index for name in CONSTANTS)  # Constant nodes all the same
    with pytest.raises(ValueError):
        GraphIndex(_constants_model().graph, constant_attributes=("sparse_value",))


def test_what_is_no_constant_value():
    strings = helper.make_node("Constant", [], ["strings"], value_strings=[b"a", b"b"])
    two = helper.make_node("Constant", [], ["two"], value_float=1.0, value_int=2)  # invalid ONNX
    other = helper.make_node("Constant", [], ["other"], domain="com.example", value_float=1.0)
    add = helper.make_node("Add", ["x", "w"], ["y"])
    model = _model([strings, two, other, add], ["y"], [numpy_helper.from_array(WEIGHT, "w")],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])])
    index = GraphIndex(model.graph)
    for name in ("strings", "two", "other", "x", "y", "missing"):
        assert index.constant(name) is None, name
    assert "other" not in index and "x" not in index and "w" in index


def test_initializers_are_constants_even_when_listed_as_graph_inputs():
    w = numpy_helper.from_array(WEIGHT, "w")
    b = numpy_helper.from_array(BIAS, "b")
    node = helper.make_node("Identity", ["w"], ["y"])
    model = _model([node], ["y"], [w, b], [helper.make_tensor_value_info("w", TensorProto.FLOAT, [3, 4])])
    index = GraphIndex(model.graph)
    np.testing.assert_array_equal(index.constant("w"), WEIGHT)
    assert index.constant("b").dtype == np.int64
    np.testing.assert_array_equal(index.constant("b"), BIAS)
    assert index.tensor("w") is index.initializers["w"] and index.tensor("y") is None
    assert list(index.inputs) == ["w"] and list(index.outputs) == ["y"]


def test_tensor_is_the_graphs_own_and_add_initializer_indexes_it():
    model = _constants_model()
    index = GraphIndex(model.graph)
    index.tensor("tensor").CopyFrom(numpy_helper.from_array(-WEIGHT, "tensor"))
    np.testing.assert_array_equal(numpy_helper.to_array(model.graph.node[0].attribute[0].t), -WEIGHT)
    assert index.tensor("float") is None  # no TensorProto holds it
    index.add_initializer(numpy_helper.from_array(BIAS, "added"))
    assert model.graph.initializer[-1].name == "added" and index.tensor("added") is model.graph.initializer[-1]
    np.testing.assert_array_equal(index.constant("added"), BIAS)


def test_producers_readers_and_uses():
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="first"),
             helper.make_node("Mul", ["a", "a"], ["b"], name="square"),
             helper.make_node("Dropout", ["b"], ["c", ""], name="drop"),
             helper.make_node("Clip", ["c", "", "hi"], ["d"], name="clip"),
             helper.make_node("Add", ["a", "d"], ["y"], name="last")]
    model = _model(nodes, ["y"], [numpy_helper.from_array(np.float32(6), "hi")],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])])
    index = GraphIndex(model.graph)
    assert {name: node.name for name, node in index.producers.items()} == {
        "a": "first", "b": "square", "c": "drop", "d": "clip", "y": "last"}
    assert {name: [n.name for n in nodes] for name, nodes in index.readers.items()} == {
        "x": ["first"], "a": ["square", "square", "last"], "b": ["drop"], "c": ["clip"],
        "hi": ["clip"], "d": ["last"]}  # once per input reading it; omitted names are no tensors
    assert [(n.name, k) for n, k in index.uses("a")] == [("square", 0), ("square", 1), ("last", 0)]
    assert index.uses("y") == [] and "" not in index.producers


def test_producers_and_uses_of_a_node_list():
    """The maps of a list of nodes (the loader's, no GraphProto), the last producer of a name."""
    nodes = [helper.make_node("Split", ["x"], ["a", ""], name="split"),
             helper.make_node("Mul", ["a", "a"], ["b"], name="square"),
             helper.make_node("Clip", ["b", "", "a"], ["c"], name="clip"),
             helper.make_node("Identity", ["c"], ["b"], name="again")]
    assert {name: node.name for name, node in producers_of(nodes).items()} == {
        "a": "split", "b": "again", "c": "clip"}
    assert {name: [(n.name, k) for n, k in pairs] for name, pairs in uses_of(nodes).items()} == {
        "x": [("split", 0)], "a": [("square", 0), ("square", 1), ("clip", 2)], "b": [("clip", 0)],
        "c": [("again", 0)]}


def _save_external(tmp_path, location: str = "weights.bin") -> str:
    """A model whose initializer `w` lies in an external data file, as onnx.save writes it."""
    node = helper.make_node("MatMul", ["x", "w"], ["y"])
    model = _model([node], ["y"], [numpy_helper.from_array(WEIGHT.T.copy(), "w")],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])])
    path = str(tmp_path / "model.onnx")
    onnx.save(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
              location=location, size_threshold=0)
    return path


def test_external_data(tmp_path):
    path = _save_external(tmp_path)
    loaded = onnx.load(path)  # external data read into the graph
    np.testing.assert_array_equal(GraphIndex(loaded.graph).constant("w"), WEIGHT.T)
    bare = onnx.load(path, load_external_data=False)
    assert bare.graph.initializer[0].data_location == TensorProto.EXTERNAL
    assert GraphIndex(bare.graph).constant("w") is None  # no folder to read it from
    np.testing.assert_array_equal(GraphIndex(bare.graph, str(tmp_path)).constant("w"), WEIGHT.T)
    assert bare.graph.initializer[0].data_location == TensorProto.EXTERNAL  # the graph unchanged
    assert not bare.graph.initializer[0].HasField("raw_data")


def test_external_data_outside_the_folder_is_refused(tmp_path):
    inside = tmp_path / "model"
    inside.mkdir()
    path = _save_external(tmp_path, "weights.bin")
    bare = onnx.load(path, load_external_data=False)
    for entry in bare.graph.initializer[0].external_data:
        if entry.key == "location":
            entry.value = "../weights.bin"
    with pytest.raises(ConversionError, match="outside the model's folder"):
        GraphIndex(bare.graph, str(inside)).constant("w")


def test_data_left_in_the_file_has_no_value_until_restored(tmp_path):
    big = np.linspace(-1, 1, 4096, dtype=np.float32).reshape(64, 64)
    node = helper.make_node("MatMul", ["x", "w"], ["y"])
    model = _model([node], ["y"], [numpy_helper.from_array(big, "w"), numpy_helper.from_array(BIAS, "b")],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])])
    path = os.path.join(tmp_path, "big.onnx")
    onnx.save(model, path)
    source = read_onnx(path)
    assert "w" in source.stored
    assert GraphIndex(source.proto.graph).constant("w") is None
    np.testing.assert_array_equal(GraphIndex(source.proto.graph).constant("b"), BIAS)  # small: kept
    source.restore_weights()
    np.testing.assert_array_equal(GraphIndex(source.proto.graph).constant("w"), big)
