"""Checks of an ONNX model before it is converted: what would otherwise end in an internal error, a
hang, or a .tflite that LiteRT refuses is refused here with one ConversionError line naming the
tensor, node, attribute or file at fault.

Two entry points, both linear in the size of the model:
- check_external_data(proto, base_dir): before anything reads external data. Every location must
  be a relative path to a regular file inside the model's folder, reached without a symbolic
  link, its offset and length inside that file; a model never makes qconvert read elsewhere.
  Returns the number of bytes the external data adds (for errors.MODEL_BYTES).
- check_model(proto, stored): the top-level graph's structure (names valid UTF-8, outputs and
  ops present, one producer per tensor, every read tensor produced, no cycle; nodes out of
  topological order are sorted, as onnxruntime does),
  every tensor's data type and data size against its dims (`stored`: the lengths of raw data
  onnx_file left in the file), and every attribute's type and range against the op's schema.

What needs shapes (broadcasting, Reshape sizes, Conv channels) is checked where shapes are known:
in the loader and the op importers.
"""

from __future__ import annotations

import heapq
import math
import os
from collections.abc import Iterator, Mapping

import onnx
from onnx import AttributeProto, TensorProto, defs, helper

from ..errors import ConversionError

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
# Integer attributes may hold any int32 (TFLite stores them as int32), but for these, which ONNX
# defines with INT64_MAX-like sentinels or as plain int64 values (and the loader saturates or
# narrows them with a clear error).
_INT64_ATTRIBUTES = {("Slice", "starts"), ("Slice", "ends"), ("Shape", "start"), ("Shape", "end"),
                     ("Constant", "value_int"), ("Constant", "value_ints")}
# Attributes that must be >= 1 or >= 0 (for every op that has them; Pad's pads may be negative).
_POSITIVE = {"strides", "dilations", "kernel_shape", "group", "blocksize", "size"}  # size: LRN
_NON_NEGATIVE = {"pads", "output_padding", "output_shape", "split"}
_SIGNED_PADS = {"Pad"}
# Attributes whose value is a TensorProto data type.
_TYPE_ATTRIBUTES = {"to", "dtype"}
# Sub-byte types: their raw data packs several elements in a byte.
_BITS = {getattr(TensorProto, name): bits for name, bits in
         (("UINT4", 4), ("INT4", 4), ("FLOAT4E2M1", 4), ("UINT2", 2), ("INT2", 2),
          ("FLOAT6E2M3", 6), ("FLOAT6E3M2", 6)) if hasattr(TensorProto, name)}
_TWO_VALUES = {TensorProto.COMPLEX64, TensorProto.COMPLEX128}  # two typed values per element


def _shown(name) -> str:
    """A name as messages quote it (a name that is not valid UTF-8 arrives as bytes)."""
    if isinstance(name, bytes):
        return repr(name.decode("utf-8", "backslashreplace"))
    return repr(name)


def type_name(data_type: int) -> str:
    """TensorProto.DataType's name, or the bare number of an unknown one."""
    try:
        return TensorProto.DataType.Name(data_type)
    except ValueError:
        return str(data_type)


def check_data_type(data_type: int, what: str) -> None:
    """A TensorProto data type that numpy (and so qconvert) can hold; UNDEFINED and numbers no
    ONNX version defines are refused."""
    try:
        helper.tensor_dtype_to_np_dtype(data_type)
    except (KeyError, TypeError, ValueError):
        raise ConversionError(f"{what}: data type {type_name(data_type)} is not a valid ONNX "
                              "tensor type") from None


# --- external data ---------------------------------------------------------------------------
def _graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """The graph and every subgraph in its nodes' attributes."""
    yield graph
    for node in graph.node:
        for a in node.attribute:
            for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                yield from _graphs(sub)


def _tensors(graph: onnx.GraphProto) -> Iterator[tuple[onnx.TensorProto, str]]:
    """Every tensor stored in the graph and its subgraphs (initializers, tensor attributes),
    with how messages name it."""
    for g in _graphs(graph):
        for t in g.initializer:
            yield t, f"initializer {_shown(t.name)}"
        for node in g.node:
            for a in node.attribute:
                tensors = ([a.t] if a.HasField("t") else []) + list(a.tensors)
                for t in tensors:
                    yield t, f"attribute {_shown(a.name)} of node {_shown(node.name)} ({node.op_type})"


def external_fields(t: onnx.TensorProto, what: str) -> tuple[str, int, int | None]:
    """(location, offset, length or None) of an external tensor, refused unless well-formed."""
    fields = {entry.key: entry.value for entry in t.external_data}
    location = fields.get("location", "")
    if not isinstance(location, str) or not location:
        raise ConversionError(f"{what}: external data without a valid location")
    numbers = []
    for key in ("offset", "length"):
        text = fields.get(key)
        if text is None:
            numbers.append(None)
            continue
        try:
            value = int(text)
        except (TypeError, ValueError):
            value = -1
        if value < 0:
            raise ConversionError(f"{what}: external data {key} {text!r} is not a byte count")
        numbers.append(value)
    return location, numbers[0] or 0, numbers[1]


def external_file(location: str, base_dir: str, what: str) -> str:
    """The external data file's path, refused unless a regular file in `base_dir`, reached without symlinks."""
    shown = f"{what}: external data location {location!r}"
    if os.path.isabs(location) or location.startswith(("/", "\\")) or ":" in location:
        raise ConversionError(f"{shown} is an absolute path; qconvert only reads external data "
                              "inside the model's folder")
    parts = [p for p in location.replace("\\", "/").split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        raise ConversionError(f"{shown} leads outside the model's folder")
    path = base_dir
    for part in parts:
        path = os.path.join(path, part)
        if os.path.islink(path):
            raise ConversionError(f"{shown} goes through a symbolic link; qconvert only reads "
                                  "regular files inside the model's folder")
    if not os.path.exists(path):
        raise ConversionError(f"{shown}: no such file")
    if not os.path.isfile(path):
        raise ConversionError(f"{shown} is not a regular file")
    return path


def check_external_data(proto: onnx.ModelProto, base_dir: str) -> int:
    """Refuses external data outside `base_dir` (see the module docstring) or beyond its file's
    end; returns the bytes of external data the model reads."""
    total = 0
    sizes: dict[str, int] = {}
    for t, what in _tensors(proto.graph):
        if t.data_location != TensorProto.EXTERNAL:
            continue
        location, offset, length = external_fields(t, what)
        path = external_file(location, base_dir, what)
        if path not in sizes:
            sizes[path] = os.path.getsize(path)
        available = sizes[path] - offset
        if available < 0 or (length is not None and length > available):
            raise ConversionError(f"{what}: external data {location!r} has {sizes[path]:,} bytes, "
                                  f"fewer than offset {offset:,} + length {length or 0:,}")
        total += length if length is not None else available
    return total


# --- tensors ---------------------------------------------------------------------------------
def check_tensor(t: onnx.TensorProto, what: str, stored_bytes: int | None = None) -> None:
    """The tensor's data type is valid and its data (raw, typed fields, or `stored_bytes` left in
    the file) holds exactly the elements its dims say."""
    check_data_type(t.data_type, what)
    if any(d < 0 for d in t.dims):
        raise ConversionError(f"{what}: negative dimension in dims {list(t.dims)}")
    count = math.prod(t.dims)
    if t.data_location == TensorProto.EXTERNAL:
        return  # loaded into raw_data by onnx, then checked again
    if t.data_type == TensorProto.STRING:
        found, expected, unit = len(t.string_data), count, "strings"
    elif stored_bytes is not None or t.HasField("raw_data"):
        found = stored_bytes if stored_bytes is not None else len(t.raw_data)
        bits = _BITS.get(t.data_type, helper.tensor_dtype_to_np_dtype(t.data_type).itemsize * 8)
        expected, unit = -(-count * bits // 8), "bytes of raw data"
    elif t.data_type in _BITS:
        return  # packed typed fields: numpy_helper checks them
    else:
        field = helper.tensor_dtype_to_field(t.data_type)
        found = len(getattr(t, field))
        expected = count * (2 if t.data_type in _TWO_VALUES else 1)
        unit = f"values in {field}"
    if found != expected:
        raise ConversionError(f"{what}: dims {list(t.dims)} of {type_name(t.data_type)} need "
                              f"{expected:,} {unit}, the tensor has {found:,}")


# --- attributes --------------------------------------------------------------------------------
def _schema(node: onnx.NodeProto, opsets: Mapping[str, int]):
    domain = "" if node.domain == "ai.onnx" else node.domain
    version = opsets.get(domain, opsets.get("ai.onnx", 1) if domain == "" else None)
    if version is None:
        return None
    try:
        return defs.get_schema(node.op_type, version, domain)
    except defs.SchemaError:
        return None


def _check_node(node: onnx.NodeProto, label: str, opsets: Mapping[str, int]) -> None:
    """The node's inputs and attributes as its op's schema declares them (see _check_inputs and
    _check_attributes); ops without a schema (other domains) are left to their importers."""
    schema = _schema(node, opsets)
    if schema is not None:
        _check_inputs(node, label, schema)
    _check_attributes(node, label, schema.attributes if schema is not None else {})


def _check_inputs(node: onnx.NodeProto, label: str, schema) -> None:
    """Inputs and outputs within the schema's counts, and no required input left empty."""
    if not schema.min_input <= len(node.input) <= schema.max_input:
        raise ConversionError(f"{label}: {len(node.input)} inputs, the op takes "
                              f"{schema.min_input} to {schema.max_input}")
    if not schema.min_output <= len(node.output) <= schema.max_output:
        raise ConversionError(f"{label}: {len(node.output)} outputs, the op has "
                              f"{schema.min_output} to {schema.max_output}")
    single = defs.OpSchema.FormalParameterOption.Single
    for k, (name, formal) in enumerate(zip(node.input, schema.inputs)):
        if not name and formal.option == single:
            raise ConversionError(f"{label}: input {k} ({formal.name}) is required but empty")


def _tensor_type(dtype) -> str | None:
    """A numpy dtype as ONNX schemas spell it: "tensor(float)"."""
    try:
        return f"tensor({TensorProto.DataType.Name(helper.np_dtype_to_tensor_dtype(dtype)).lower()})"
    except (KeyError, TypeError, ValueError):
        return None


# float16 and float32 are one type inside the TFLite graph (float32: loader._NARROWED). A float16
# model may mix them in one op where onnxconverter-common's convert_float_to_float16 left a Cast to
# float32 in a float16 graph (a shape-derived scale, as in Swin's attention): an invalid ONNX model
# that onnxruntime refuses, but whose meaning is plain; it converts (unverified, with a warning).
_ONE_TYPE_INSIDE = {"tensor(float)", "tensor(float16)"}


def check_node_types(node: onnx.NodeProto, label: str, opsets: Mapping[str, int],
                     dtypes: Mapping) -> None:
    """Each input and output of the node (of known numpy dtype in `dtypes`) has a type its op's
    schema allows, and those sharing a type variable (T) one type: TFLite's kernels refuse mixed
    types at prepare time. Run by the loader once types are inferred."""
    schema = _schema(node, opsets)
    if schema is None:
        return
    allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
    variadic = defs.OpSchema.FormalParameterOption.Variadic
    bound: dict[str, tuple[str, str]] = {}
    for names, formals in ((node.input, schema.inputs), (node.output, schema.outputs)):
        for k, name in enumerate(names):
            if not formals or not name or name not in dtypes:
                continue
            formal = formals[min(k, len(formals) - 1)]
            if k >= len(formals) and (formal.option != variadic or not formal.is_homogeneous):
                continue
            found = _tensor_type(dtypes[name])
            if found is None:
                continue
            expected = allowed.get(formal.type_str, {formal.type_str})
            if found not in expected:
                shown = ", ".join(sorted(expected)) if len(expected) <= 4 else "other types"
                raise ConversionError(f"{label}: {name!r} is {found}, which {formal.name} does not "
                                      f"take ({shown})")
            other = bound.setdefault(formal.type_str, (name, found))
            if {other[1], found} == _ONE_TYPE_INSIDE:
                continue
            if formal.type_str in allowed and other[1] != found:
                raise ConversionError(f"{label}: {name!r} is {found} and {other[0]!r} is {other[1]}; "
                                      f"the op takes one type for both ({formal.type_str})")


def _check_attributes(node: onnx.NodeProto, label: str, declared: Mapping) -> None:
    """Each attribute once, of a defined type, of the type the op's schema declares, its integers
    in int32 and in range; the schema's required attributes present. The one place attributes
    are checked, so importers read them as the types ONNX promises."""
    seen = set()
    for a in node.attribute:
        if isinstance(a.name, bytes):
            raise ConversionError(f"{label}: attribute name {_shown(a.name)} is not valid UTF-8")
        what = f"{label}: attribute {a.name!r}"
        if a.name in seen:
            raise ConversionError(f"{what} is given twice")
        seen.add(a.name)
        if a.type == AttributeProto.UNDEFINED or a.type not in AttributeProto.AttributeType.values():
            raise ConversionError(f"{what} has no valid type")
        if a.name in declared:
            expected = declared[a.name].type.value
            if a.type != expected:
                raise ConversionError(
                    f"{what} is {AttributeProto.AttributeType.Name(a.type)}, the op takes "
                    f"{AttributeProto.AttributeType.Name(expected)}")
        if a.type == AttributeProto.TENSOR:
            check_tensor(a.t, what)
        elif a.type in (AttributeProto.INT, AttributeProto.INTS):
            _check_integers(node.op_type, a, what)
    for name, attribute in declared.items():
        if attribute.required and name not in seen:
            raise ConversionError(f"{label}: required attribute {name!r} is missing")


def _check_integers(op_type: str, a: onnx.AttributeProto, what: str) -> None:
    values = [a.i] if a.type == AttributeProto.INT else list(a.ints)
    if not values:
        return
    low, high = min(values), max(values)
    if (op_type, a.name) not in _INT64_ATTRIBUTES and (low < _INT32_MIN or high > _INT32_MAX):
        raise ConversionError(f"{what}: value {high if high > _INT32_MAX else low} does not fit "
                              "in int32")
    if a.name in _POSITIVE and low < 1:
        raise ConversionError(f"{what}: value {low} must be at least 1")
    if a.name in _NON_NEGATIVE and low < 0 and op_type not in _SIGNED_PADS:
        raise ConversionError(f"{what}: value {low} must not be negative")
    if a.name in _TYPE_ATTRIBUTES and a.type == AttributeProto.INT:
        check_data_type(a.i, what)


# --- the graph ---------------------------------------------------------------------------------
def _check_names(graph: onnx.GraphProto) -> None:
    """Names must be text: protobuf hands a name that is not valid UTF-8 over as bytes."""
    for kind, values in (("input", graph.input), ("output", graph.output),
                         ("value_info", graph.value_info), ("initializer", graph.initializer)):
        for v in values:
            if isinstance(v.name, bytes):
                raise ConversionError(f"graph {kind} name {_shown(v.name)} is not valid UTF-8")
    for k, node in enumerate(graph.node):
        for kind, names in (("name", [node.name]), ("op type", [node.op_type]),
                            ("domain", [node.domain]), ("input", node.input), ("output", node.output)):
            for name in names:
                if isinstance(name, bytes):
                    raise ConversionError(f"node {k} ({_shown(node.op_type)}): {kind} "
                                          f"{_shown(name)} is not valid UTF-8")


def _check_unique(graph: onnx.GraphProto) -> None:
    """Each graph input and each initializer named once (onnx.checker's single assignment;
    onnxruntime refuses a repeated input, "Duplicate definition-site", and keeps the last of two
    initializers). A weight listed both as an input and as an initializer (old exporters) is
    valid in the main graph (the initializer is the input's default value), not in a subgraph
    (If, Loop, Scan bodies), whose names are checked the same way."""
    for g in _graphs(graph):
        where = "" if g is graph else f" of the subgraph {_shown(g.name)}"
        for kind, names in (("input", [v.name for v in g.input]),
                            ("initializer", [t.name for t in g.initializer])):
            seen = set()
            for name in names:
                if name in seen:
                    raise ConversionError(f"graph {kind} {_shown(name)}{where} is listed twice; "
                                          f"ONNX names each graph {kind} once")
                seen.add(name)
        both = {v.name for v in g.input} & {t.name for t in g.initializer}
        if g is not graph and both:
            raise ConversionError(f"{_shown(sorted(both)[0])} is both an input and an initializer{where}; "
                                  "ONNX allows that in the main graph only (onnx.checker and "
                                  "onnxruntime refuse it in a body)")


def _label(node: onnx.NodeProto, k: int) -> str:
    """A node as messages name it (the loader's node_names for an unnamed node)."""
    name = node.name or f"{node.op_type}_{k}:{node.output[0] if node.output else ''}"
    return f"node {name!r} ({node.op_type})"


def _sort_nodes(graph: onnx.GraphProto, labels: list[str], producer: dict[str, int]) -> None:
    """Puts the nodes in topological order, in place: ONNX requires it, but exporters break it
    (onnxconverter-common's float16 appends the input Casts at the end) and onnxruntime sorts
    them, so qconvert does too. The order is Kahn's, each time taking the ready node that came
    first in the file, so a sorted graph keeps its order and any other order gives one answer.
    A graph that cannot be ordered has a cycle, which is said so."""
    inputs = [{producer[n] for n in node.input if n and producer[n] >= 0} for node in graph.node]
    if all(j < k for k, sources in enumerate(inputs) for j in sources):
        return
    readers: list[list[int]] = [[] for _ in graph.node]
    for k, sources in enumerate(inputs):
        for j in sources:
            readers[j].append(k)
    waiting = [len(sources) for sources in inputs]
    ready = [k for k, w in enumerate(waiting) if w == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        k = heapq.heappop(ready)
        order.append(k)
        for reader in readers[k]:
            waiting[reader] -= 1
            if waiting[reader] == 0:
                heapq.heappush(ready, reader)
    if len(order) < len(graph.node):
        cycle = _node_on_a_cycle(inputs, waiting)
        raise ConversionError(f"the graph has a cycle through {labels[cycle]}")
    nodes = [graph.node[k] for k in order]
    del graph.node[:]
    graph.node.extend(nodes)


def _node_on_a_cycle(inputs: list[set[int]], waiting: list[int]) -> int:
    """A node on a cycle, given what Kahn's algorithm left over (`waiting` > 0): every node left
    over reads from another node left over, so walking back from one of them comes round to a
    node already visited, which is on a cycle."""
    visited, k = set(), next(k for k, w in enumerate(waiting) if w > 0)
    while k not in visited:
        visited.add(k)
        k = next(j for j in inputs[k] if waiting[j] > 0)
    return k


def _checked_opsets(proto: onnx.ModelProto) -> dict[str, int]:
    """{domain: version} of the model's opset imports, each version within int32 and not negative
    (what onnx's schema lookup and shape inference take: a larger one ends in their TypeError)."""
    opsets = {}
    for o in proto.opset_import:
        if not 0 <= o.version <= _INT32_MAX:
            raise ConversionError(f"opset import {o.domain or 'ai.onnx'!r} has version {o.version}, "
                                  f"not an opset (0 to {_INT32_MAX:,})")
        opsets[o.domain] = o.version
    return opsets


def check_model(proto: onnx.ModelProto, stored: Mapping[str, int] | None = None) -> None:
    """The checks of the module docstring on the top-level graph; `stored` maps initializer names
    to the length of the raw data that onnx_file left in the file."""
    graph = proto.graph
    stored = stored or {}
    _check_names(graph)
    if not graph.output:
        raise ConversionError("the ONNX graph has no outputs")
    if not graph.node:
        raise ConversionError("the ONNX graph has no nodes")
    for t in graph.initializer:
        check_tensor(t, f"initializer {t.name!r}", stored.get(t.name))
    _check_unique(graph)
    initializer_names = {t.name for t in graph.initializer}
    for kind, values in (("input", graph.input), ("output", graph.output),
                         ("value_info", graph.value_info)):
        for v in values:
            # A real input (one no initializer feeds) must say what it takes; elsewhere an
            # unset type (0) is left to inference.
            real_input = kind == "input" and v.name not in initializer_names
            if real_input and not v.type.HasField("tensor_type"):
                raise ConversionError(f"graph input {v.name!r} declares no tensor type (qconvert "
                                      "converts tensor inputs)")
            if v.type.HasField("tensor_type") and (v.type.tensor_type.elem_type or real_input):
                check_data_type(v.type.tensor_type.elem_type, f"graph {kind} {v.name!r}")
    opsets = _checked_opsets(proto)
    labels = [_label(node, k) for k, node in enumerate(graph.node)]
    # producer: -1 for graph inputs and initializers, else the index of the node writing it.
    producer = dict.fromkeys([v.name for v in graph.input] + [t.name for t in graph.initializer], -1)
    for k, node in enumerate(graph.node):
        _check_node(node, labels[k], opsets)
        for name in node.output:
            if not name:
                continue
            if name in initializer_names:
                raise ConversionError(f"{labels[k]} writes {name!r}, which is also an initializer")
            if producer.get(name, -1) >= 0:
                raise ConversionError(f"tensor {name!r} is written by two nodes: "
                                      f"{labels[producer[name]]} and {labels[k]}")
            producer[name] = k  # a graph input of the same name: old exporters list node outputs
    for k, node in enumerate(graph.node):
        for name in node.input:
            if name and name not in producer:
                raise ConversionError(f"{labels[k]} reads {name!r}, which no node, graph input or "
                                      "initializer provides")
    for v in graph.output:
        if v.name not in producer:
            raise ConversionError(f"graph output {v.name!r} is not written by any node, nor a "
                                  "graph input or initializer")
    _sort_nodes(graph, labels, producer)
