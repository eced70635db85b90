"""One index of an ONNX graph: its constants, the node writing each tensor and the nodes reading it,
its inputs and outputs. Built in time linear in the graph; constant values are converted only
when asked for (a weight is not held twice). producers_of and uses_of are its producer and reader
maps over any list of nodes (the loader's, which changes while it loads, is no GraphProto).

The constants are the initializers and the values of ONNX's Constant nodes (PaddlePaddle's
exporter writes weights as those). An initializer that a graph input of the same name lists is a
constant too: old exporters list every initializer among the inputs, and the loader does not make
those model inputs. Where a Constant node and an initializer share a name the initializer is taken
(validate.check_model refuses such a model).

A Constant node counts when it is ONNX's op (domain "" or ai.onnx: another domain's Constant is
another op), writes a named output and gives its value in exactly one attribute (ONNX's rule).
Which attributes a reader takes is `constant_attributes`: all of CONSTANT_ATTRIBUTES by default;
the QDQ importer and the fake-quant writer take `value` only (a tensor they can rewrite in place),
as does a Loop body's condition (control_flow.py), the float check `value` and `value_float`. String and sparse values are not constants here.

A constant whose data is not in the graph has no value (None): an initializer whose bytes
read_onnx left in the file (OnnxFile.stored), external data when no `base_dir` is given (read_onnx
loads external data into the graph after checking it; with `base_dir` it is read from there,
refused like read_onnx refuses it outside that folder), and data that does not fit its type and
dims (validate.check_model refuses those).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .validate import external_fields, external_file

# The attributes in which a Constant node may give its value, and the dtype of each attribute's
# Python value (None: a TensorProto, which says its own).
CONSTANT_ATTRIBUTES = {"value": None, "value_float": np.float32, "value_floats": np.float32,
                       "value_int": np.int64, "value_ints": np.int64}
_ONNX_DOMAINS = ("", "ai.onnx")
# The TensorProto fields that hold data in the graph itself.
_DATA_FIELDS = ("float_data", "int32_data", "string_data", "int64_data", "double_data", "uint64_data")


def producers_of(nodes: Iterable[onnx.NodeProto]) -> dict[str, onnx.NodeProto]:
    """Tensor name -> the node writing it (the last, should two), over `nodes`; omitted outputs
    (empty names) are no tensors."""
    return {name: node for node in nodes for name in node.output if name}


def uses_of(nodes: Iterable[onnx.NodeProto]) -> dict[str, list[tuple[onnx.NodeProto, int]]]:
    """Tensor name -> the (node, input index) pairs reading it, in the order of `nodes`; omitted
    inputs (empty names) are no tensors."""
    uses: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for node in nodes:
        for index, name in enumerate(node.input):
            if name:
                uses.setdefault(name, []).append((node, index))
    return uses


class GraphIndex:
    """The constants, producers and readers of an ONNX graph (its top level, not subgraphs), by
    tensor name. Omitted inputs and outputs (empty names) are no tensors and are not indexed.

    - initializers: name -> TensorProto (the last of a name, as protobuf parsing keeps it);
    - constant_nodes: name -> the Constant node writing it (of any attribute kind);
    - producers: name -> the node writing it;
    - readers: name -> the nodes reading it, in graph order, once per input that reads it;
    - inputs, outputs: the graph's inputs and outputs, name -> ValueInfoProto, in order.

    The maps describe the graph when the index was built: a caller that rewrites the graph keeps
    them up to date itself where it needs them (add_initializer)."""

    def __init__(self, graph: onnx.GraphProto, base_dir: str | None = None,
                 constant_attributes: Collection[str] = tuple(CONSTANT_ATTRIBUTES)):
        unknown = set(constant_attributes) - set(CONSTANT_ATTRIBUTES)
        if unknown:
            raise ValueError(f"not a Constant attribute: {sorted(unknown)}")
        self.graph = graph
        self.base_dir = base_dir
        self.constant_attributes = frozenset(constant_attributes)
        self.initializers: dict[str, onnx.TensorProto] = {t.name: t for t in graph.initializer}
        self.constant_nodes: dict[str, onnx.NodeProto] = {
            node.output[0]: node for node in graph.node
            if node.op_type == "Constant" and node.domain in _ONNX_DOMAINS and node.output and node.output[0]}
        self.producers: dict[str, onnx.NodeProto] = producers_of(graph.node)
        self.readers: dict[str, list[onnx.NodeProto]] = {
            name: [node for node, _ in pairs] for name, pairs in uses_of(graph.node).items()}
        self.inputs: dict[str, onnx.ValueInfoProto] = {v.name: v for v in graph.input}
        self.outputs: dict[str, onnx.ValueInfoProto] = {v.name: v for v in graph.output}

    def __contains__(self, name: str) -> bool:
        """Whether `name` is an initializer or a Constant node's output (whatever its value)."""
        return name in self.initializers or name in self.constant_nodes

    def uses(self, name: str) -> list[tuple[onnx.NodeProto, int]]:
        """The (node, input index) pairs that read `name`, in graph order."""
        readers = {id(n): n for n in self.readers.get(name, [])}.values()
        return [(n, k) for n in readers for k, i in enumerate(n.input) if i == name]

    def tensor(self, name: str) -> onnx.TensorProto | None:
        """The TensorProto holding the constant `name` (an initializer, or a Constant node's
        `value` when `value` is taken), which a rewrite may change in place; else None."""
        if name in self.initializers:
            return self.initializers[name]
        attribute = self._value_attribute(name)
        if attribute is None or attribute.name != "value" or attribute.type != onnx.AttributeProto.TENSOR:
            return None
        return attribute.t

    def constant(self, name: str) -> np.ndarray | None:
        """The value of the constant `name` as a new array; None for a tensor computed at run
        time, a graph input, or a constant whose data is not here (the module docstring)."""
        if name in self.initializers:
            return self._array(self.initializers[name], name)
        attribute = self._value_attribute(name)
        if attribute is None:
            return None
        if attribute.name == "value":
            return self._array(attribute.t, name) if attribute.type == onnx.AttributeProto.TENSOR else None
        return np.array(helper.get_attribute_value(attribute), CONSTANT_ATTRIBUTES[attribute.name])

    def add_initializer(self, tensor: onnx.TensorProto) -> None:
        """Appends an initializer to the graph and to the index."""
        self.graph.initializer.append(tensor)
        self.initializers[tensor.name] = self.graph.initializer[-1]

    def _value_attribute(self, name: str) -> onnx.AttributeProto | None:
        """The attribute holding the value of the Constant node writing `name`, when it has
        exactly one and is of a kind taken (constant_attributes)."""
        node = self.constant_nodes.get(name)
        if node is None or len(node.attribute) != 1 or node.attribute[0].name not in self.constant_attributes:
            return None
        return node.attribute[0]

    def _array(self, tensor: onnx.TensorProto, name: str) -> np.ndarray | None:
        external = tensor.data_location == onnx.TensorProto.EXTERNAL
        if external:
            if self.base_dir is None:
                return None
            what = f"constant {name!r}"
            external_file(external_fields(tensor, what)[0], self.base_dir, what)  # refused outside
        elif not _holds_data(tensor):
            return None
        try:
            return numpy_helper.to_array(tensor, self.base_dir or "")
        except (ValueError, TypeError):  # data that does not fit its type and dims
            return None


def _holds_data(tensor: onnx.TensorProto) -> bool:
    """Whether the graph holds the tensor's data: it has none, or some field holds it (not the
    bytes read_onnx leaves in the file)."""
    if tensor.HasField("raw_data") or any(len(getattr(tensor, f)) for f in _DATA_FIELDS):
        return True
    return 0 in tensor.dims  # an empty tensor has nothing to hold
