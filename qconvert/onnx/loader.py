"""Loader: an ONNX file becomes the IR (qconvert.ir.Model).

Steps: parse (qconvert.onnx.file: big weights are read from the file one at a time), pin input
shapes (a dynamic batch is set to 1: qconvert/onnx/dynamic_batch.py), then alternate ONNX shape
inference with folding of nodes whose inputs are all known (PyTorch's Shape/Gather/Concat/Reshape
chains), until nothing changes; then every remaining node goes to its importer (qconvert.ops).
int64 tensors are narrowed to int32 inside the graph (TFLite's kernels index with int32), the small
integer types widened to it, float64 and float16 computed as float32 (_NARROWED); graph inputs and
outputs keep their ONNX dtype through a CAST.

The narrowing is proven for constants (initializers and everything folded, which folding computes
in int64): one that int32 cannot hold keeps the op reading it in int64 where TFLite has an int64
kernel for it and its output leaves the graph as int64 (import_context.INT64_KERNELS), is
saturated only where its reader computes the same with it (import_context.saturation_is_exact),
and is otherwise refused in one line naming it, its value and the node reading it. At run
time it is a contract: an int64 graph input takes values int32 holds (its CAST wraps others
modulo 2^32, as ONNX's Cast to int32 does), and int64 results are computed in int32; the default
float check draws such inputs over int32's whole range (qconvert/check/runtimes.py).
"""

from __future__ import annotations

import copy
import functools
import logging
import re
from collections.abc import Collection

import numpy as np
import onnx
import onnx.version_converter
from onnx import helper, numpy_helper

from . import (control_flow, control_flow_import, dynamic_batch, dynamic_dims, dynamic_quant,
               node_types)
from ..errors import ConversionError, UsageError
from ..ir import DynamicBatch, Model, Operator
from .file import OnnxFile
from .folding import Folding, shapes_behind
from .graph import GraphIndex
from .import_context import INT64_KERNELS, ImportContext, OnnxNode, narrow, saturation_is_exact
from ..ops.refused import refusal
from ..ops.registry import ONNX_IMPORTERS, op_key
from .validate import check_model, check_node_types, type_name

log = logging.getLogger("qconvert")

# Ops never folded at load time: their value is not a function of their inputs.
_INT32 = np.iinfo(np.int32)
# Tensor types a float model may compute in: TFLite's float kernels take float32, int32 and bool;
# the others compute as one of those (_NARROWED).
ACTIVATION_DTYPES = {np.dtype(t) for t in (np.float32, np.float64, np.float16, np.int32, np.int64,
                                           np.int16, np.uint16, np.int8, np.uint8, np.bool_)}
# Inside the graph, int64 computes as int32 (TFLite's kernels index with int32), float64 and
# float16 as float32 (TFLite's float kernels; float16 models are computed in float32 as TFLite's
# float16 mode does), the small integer types as int32 (TFLite's CAST reads and writes them, its
# arithmetic kernels mostly do not); graph inputs and outputs keep the ONNX type through a CAST.
_NARROWED = {np.dtype(np.int64): np.dtype(np.int32), np.dtype(np.float64): np.dtype(np.float32),
             np.dtype(np.float16): np.dtype(np.float32),
             **{np.dtype(t): np.dtype(np.int32) for t in (np.int16, np.uint16, np.int8, np.uint8)}}


def _np_dtype(elem_type: int) -> np.dtype:
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, TypeError):
        raise ConversionError(
            f"tensor type {type_name(elem_type)} is not supported") from None


_TABLE_TYPES = {onnx.TensorProto.FLOAT: "<f4", onnx.TensorProto.INT64: "<i8", onnx.TensorProto.INT32: "<i4"}


def tables(source: OnnxFile):
    """The float32, int64 and int32 initializers of `source` that are not scalars, read one at a
    time (the tables a dynamic dimension's constant may have been cut from: a position
    embedding, a buffer of position ids; dynamic_dims.keep_dynamic); the proto keeps its bytes."""
    for t in source.proto.graph.initializer:
        if t.data_type in _TABLE_TYPES and len(t.dims) >= 1:
            if t.name in source.stored:
                yield source.read_stored(t, np.dtype(_TABLE_TYPES[t.data_type]))
            else:
                yield numpy_helper.to_array(t)


def _tensor_to_array(t: onnx.TensorProto, source: OnnxFile) -> np.ndarray:
    """Reads an initializer without a second copy of raw data (from the file when its bytes were
    left there), then frees the proto's bytes."""
    if t.data_type == onnx.TensorProto.STRING:
        raise ConversionError(f"initializer {t.name!r}: string tensors are not supported")
    if t.name in source.stored:
        return source.read_stored(t, _np_dtype(t.data_type).newbyteorder("<"))
    if t.HasField("raw_data") and t.data_type not in (onnx.TensorProto.BFLOAT16,) and \
            _np_dtype(t.data_type).kind in "fiub":
        array = np.frombuffer(t.raw_data, dtype=_np_dtype(t.data_type).newbyteorder("<"))
        array = array.reshape(tuple(t.dims))
        t.ClearField("raw_data")
        return array
    return numpy_helper.to_array(t)


# Attributes whose default onnx's shape inference reads wrongly: spelled out before inference.
# STFT's onesided is 1 by the spec and in onnxruntime; onnx 1.23's inference takes a missing one as 0.
_DEFAULTS = {"STFT": {"onesided": 1}}


def _spell_out_defaults(node: onnx.NodeProto) -> None:
    for name, value in _DEFAULTS.get(node.op_type, {}).items() if node.domain in ("", "ai.onnx") else ():
        if all(a.name != name for a in node.attribute):
            node.attribute.append(helper.make_attribute(name, value))


def _declared_outputs(graph) -> list:
    """The graph's outputs as declared, but with negative dimensions (some exporters write -1
    for a dynamic one) made unknown: shape inference keeps a declared dimension over the one it
    infers, and -1 would leave the output without a static shape."""
    outputs = []
    for value in graph.output:
        value = copy.deepcopy(value)  # only the declaration: no data
        if value.type.HasField("tensor_type") and value.type.tensor_type.HasField("shape"):
            for dim in value.type.tensor_type.shape.dim:
                if dim.HasField("dim_value") and dim.dim_value < 0:
                    dim.Clear()
        outputs.append(value)
    return outputs


def _pinned_dims(value: onnx.ValueInfoProto, dims: list, pinned: tuple[int, ...]) -> list:
    """The shape --input-shape gives the input `value` (whose shape so far is `dims`), of the
    rank the model declares."""
    if value.type.tensor_type.HasField("shape") and len(pinned) != len(dims):
        raise ConversionError(
            f"--input-shape {value.name}: rank {len(pinned)} given, the model's input has "
            f"rank {len(dims)}")
    return list(pinned)


def _check_static(name: str, dims: list, declared: list) -> None:
    """Every dimension of the input `name` known; else the message names the first one left
    dynamic and the --input-shape that pins them all."""
    for axis, d in enumerate(dims):
        if not isinstance(d, int) or d < 0:
            shown = ",".join(str(x) for x in declared)
            raise ConversionError(
                f"input {name!r} has dynamic dimension {d!r} (axis {axis}, shape "
                f"[{shown}]); pin it with --input-shape {name}:"
                + ",".join(str(x) if isinstance(x, int) and x >= 0 else "1" for x in dims))


class _Graph(Folding):
    """What the loader knows about the ONNX graph: constants, shapes and dtypes by value name."""

    def __init__(self, source: OnnxFile, input_shapes: dict[str, tuple[int, ...]], body: bool = False,
                 sizes: dict[str, int] | None = None, outer=None, computed: Collection[str] = ()):
        proto = source.proto
        self.proto = proto
        self.graph = proto.graph
        self.opsets = {o.domain: o.version for o in proto.opset_import}
        self.opset = self.opsets.get("", self.opsets.get("ai.onnx", 1))
        index = GraphIndex(self.graph)
        self.constants: dict[str, np.ndarray] = {
            name: _tensor_to_array(t, source) for name, t in index.initializers.items()}
        # Old exporters list initializers (and even node outputs) among the graph inputs.
        self.inputs = [i for i in self.graph.input
                       if i.name not in index.initializers and i.name not in index.producers]
        self.shapes: dict[str, tuple] = {}
        self.dtypes: dict[str, np.dtype] = {}
        self.body, self.probe_sizes = body, sizes or {}
        self._pin_inputs(input_shapes, body, self.probe_sizes)
        for name, value in self.constants.items():
            self.shapes[name] = value.shape
            self.dtypes[name] = value.dtype
        self.nodes = list(self.graph.node)
        for node in self.nodes:
            _spell_out_defaults(node)
        self.folded: dict[tuple, list[np.ndarray]] = {}  # _fold_key -> the values it folded to
        # id(Loop node) -> its iteration count found by control_flow's simulation (or None)
        self.simulated_counts: dict[int, int | None] = {}
        # Values whose shapes the values decide (a NonZero's output, what it flows into): their
        # Shape and Size are computed when the model runs, never folded at the size they were
        # given here (a TopK's k of min(300, count) folded at the base count is wrong above it).
        self.run_time_shaped: set[str] = set()
        # A body's (outer _Graph, control-flow op's name): the inputs it passes whose shapes the
        # values decide are so here too, and its symbols are the outer graph's.
        self.outer = outer
        # Those whose sizes inference could not tell, set as dimensions the values decide: a
        # size whole-graph inference tells later (data propagation) replaces the guess.
        self.guessed: set[str] = set()
        # Computed shapes (run_time_shaped's Shape and what follows) at the loader's sizes: see
        # _at_sizes.
        self.at_sizes: dict[str, np.ndarray] = {}
        # The Shape and Size nodes behind `computed` (constants dynamic_dims could not follow: a
        # causal mask from the length): their values, and so what they make, are computed when
        # the model runs, as a shape the values decide is; and so are theirs (a Gather's data
        # flattened from batch x length: its size bounds the indices when the model runs).
        self.run_time_shaped.update(shapes_behind(computed, index))
        self.computed = frozenset(computed)
        self.run_time_shaped.update(n for n in computed if n in index.producers)
        if outer is not None:
            self.run_time_shaped.update(i.name for i in self.inputs if i.name in outer[0].run_time_shaped)
        # Each node's name in messages and in Operator.source, fixed by its place in the file.
        self.names = {id(node): name for node, name in zip(self.nodes, node_names(proto))}

    def _run_time_size(self, node: onnx.NodeProto, axis: int) -> int:
        """The size of a dimension of `node`'s output that its values decide (NonZero's count):
        a symbol of its own (dynamic_dims.py), "node[axis]", at its base size or a probe's; in a
        control-flow body, the outer graph's symbol "op/node[axis]"."""
        self.run_time_shaped.update(o for o in node.output if o)
        return self.symbol_size(f"{self.names[id(node)]}[{axis}]")

    def symbol_size(self, symbol: str) -> int:
        if self.outer is not None:
            outer, label = self.outer
            return outer.symbol_size(f"{label}/{symbol}")
        if self.dynamic is None:
            self.dynamic = dynamic_dims.DynamicDims({}, {})
        self.dynamic.sizes.setdefault(symbol, self.probe_sizes.get(symbol, dynamic_dims.BASE_SIZE))
        self.dynamic.value_dependent.add(symbol)
        return self.dynamic.sizes[symbol]

    def sizes_at_run_time(self) -> bool:
        """Whether a dimension the values decide gets a size here (the main graph, or a body
        whose outer graph says: `outer`); else such an output stays unknown."""
        return not self.body or self.outer is not None

    def _pin_inputs(self, input_shapes: dict[str, tuple[int, ...]], body: bool,
                    sizes: dict[str, int]) -> None:
        """Each graph input's static shape (_input_dims) and dtype. A dynamic batch (axis 0 of
        every input, one name) is set to 1 unless shapes are pinned; else a dynamic axis 0 of an
        input --input-shape leaves out is set to 1 (or to the size --input-shape gives the same
        name); any dimension named like one --input-shape pins has its size; the other dynamic
        dimensions are symbols (dynamic_dims.py) at their base size, or at `sizes`' (a probe).
        A control-flow `body`'s input shapes are those its op passes (no --input-shape is
        involved)."""
        unknown = set(input_shapes) - {i.name for i in self.inputs}
        if unknown and body:
            raise ConversionError(f"the body's input {sorted(unknown)[0]!r} is also one of its "
                                  "initializers or node outputs")
        if unknown:
            names = ", ".join(i.name for i in self.inputs)
            raise ConversionError(
                f"--input-shape names {sorted(unknown)[0]!r}, which is not a model input "
                f"(inputs: {names})")
        self.batch = None if input_shapes else dynamic_batch.default_batch(self.inputs)
        leading = {} if self.batch is not None else dynamic_batch.leading_sizes(self.inputs, input_shapes)
        named = dynamic_batch.pinned_names(self.inputs, input_shapes)
        self.dynamic = None if body else dynamic_dims.symbols(self.inputs, input_shapes, named)
        if self.dynamic is not None:
            self.dynamic.sizes.update((s, size) for s, size in sizes.items() if s in self.dynamic.sizes)
        places = self.dynamic.inputs if self.dynamic is not None else {}
        for i in self.inputs:
            tt = i.type.tensor_type
            if not i.type.HasField("tensor_type"):
                raise ConversionError(f"input {i.name!r}: only tensor inputs are supported")
            declared = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                        for d in tt.shape.dim]
            dims = declared
            if self.batch is not None:  # a probe may set it (dynamic_dims.DynamicDims.add_batch)
                dims = [sizes.get(dynamic_dims.batch_symbol(self.batch), 1)] + dims[1:]
            elif i.name in leading:
                dims = [leading[i.name]] + dims[1:]
            dims = [named.get(d, d) if isinstance(d, str) else d for d in dims]
            for axis, symbol in places.get(i.name, {}).items():
                dims[axis] = self.dynamic.sizes[symbol]
            if i.name in input_shapes:
                dims = _pinned_dims(i, dims, input_shapes[i.name])
            _check_static(i.name, dims, declared)
            check_tensor_size(dims, f"input {i.name!r}")
            self.shapes[i.name] = tuple(dims)
            self.dtypes[i.name] = _np_dtype(tt.elem_type)
            if i.name in places:
                self.dynamic.shapes[i.name] = tuple(dims)

    # --- shape inference ----------------------------------------------------------------------
    def _inference_model(self, declared: bool = False) -> onnx.ModelProto:
        """The graph as shape inference sees it: only small constants hold data; the graph
        outputs by name only, or (`declared`) with their declared types and shapes."""
        outputs = (_declared_outputs(self.graph) if declared else
                   [helper.make_tensor_value_info(o.name, 0, None) for o in self.graph.output])
        g = helper.make_graph(self.nodes, self.graph.name or "g", [], outputs,
                              value_info=control_flow.loop_output_shapes(self)
                              + node_types.value_info(self.nodes, self.shapes, self.dtypes))
        for name in [i.name for i in self.inputs] + list(self.constants):
            value = self.constants.get(name)
            if value is not None and value.size <= node_types.DATA_LIMIT and value.dtype.kind in "fiub":
                g.initializer.append(numpy_helper.from_array(value, name))
            else:
                g.input.append(helper.make_tensor_value_info(
                    name, helper.np_dtype_to_tensor_dtype(self.dtypes[name]), self.shapes[name]))
        # IR version 4 and newer treat initializers that are not graph inputs as constants.
        m = helper.make_model(g, opset_imports=list(self.proto.opset_import),
                              ir_version=max(self.proto.ir_version, 4))
        m.functions.extend(self.proto.functions)
        return m

    def infer_shapes(self) -> None:
        """ONNX shape inference, lenient: a node it cannot infer leaves its outputs unknown.
        What the model computes wins over what its outputs declare (a declaration that
        contradicts the computation would make a model LiteRT refuses); a declared output shape
        is used only where inference finds none (onnx cannot infer some function ops)."""
        self._take(self._inference(declared=False), None)
        missing = {o.name for o in self.graph.output} - set(self.shapes)
        if missing:
            self._take(self._inference(declared=True), missing)

    def _inference(self, declared: bool) -> onnx.ModelProto:
        try:
            return onnx.shape_inference.infer_shapes(self._inference_model(declared),
                                                     strict_mode=False, data_prop=True)
        except Exception as e:  # onnx raises several types here; all mean "the model is invalid"
            raise ConversionError(f"ONNX shape inference failed: {str(e).splitlines()[0]}") from None

    def _take(self, inferred: onnx.ModelProto, names: set[str] | None) -> None:
        """Records the inferred dtypes and static shapes (of `names` only, unless None)."""
        for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
            if vi.name in self.constants or not vi.type.HasField("tensor_type"):
                continue
            if names is not None and vi.name not in names:
                continue
            tt = vi.type.tensor_type
            if tt.elem_type:
                self.dtypes[vi.name] = _np_dtype(tt.elem_type)
            if tt.HasField("shape"):
                dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tt.shape.dim)
                if all(d >= 0 for d in dims):
                    self.shapes[vi.name] = dims
                elif vi.name in self.guessed and len(dims) == len(self.shapes[vi.name]):
                    # inference knows some of its sizes (a Reshape to [count, 4]): those stay
                    self.shapes[vi.name] = tuple(d if d >= 0 else old
                                                 for d, old in zip(dims, self.shapes[vi.name]))

    def why_no_shape(self) -> str:
        """Why a tensor has no static shape, for the message: the first error ONNX shape inference
        finds in strict mode (a contradiction in the model: shapes that do not broadcast, a
        weight of the wrong rank), else a shape that depends on computed values."""
        try:
            onnx.shape_inference.infer_shapes(self._inference_model(), strict_mode=True, data_prop=True)
        except Exception as e:  # onnx raises several types; the message is what matters
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            return "ONNX shape inference: " + first.replace(
                "[ShapeInferenceError] Inference error(s): ", "")
        return ("it depends on values computed at run time, which a static TFLite graph cannot "
                "express")


def _decode_attrs(node: onnx.NodeProto) -> dict:
    attrs = {}
    for a in node.attribute:
        value = helper.get_attribute_value(a)
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        elif isinstance(value, onnx.TensorProto):
            value = numpy_helper.to_array(value)
        elif isinstance(value, list) and value and isinstance(value[0], bytes):
            value = [v.decode("utf-8", "replace") for v in value]
        attrs[a.name] = value
    return attrs


def check_tensor_size(shape, what: str) -> None:
    """Every dimension, and the element count, within int32: TFLite stores shapes as int32 and
    its kernels count elements in int."""
    if any(d > _INT32.max for d in shape) or int(np.prod(shape, dtype=object)) > _INT32.max:
        raise ConversionError(f"{what}: shape {list(shape)} has more than {_INT32.max:,} elements "
                              "or a dimension beyond int32, more than a TFLite tensor holds")


def stores_float16(proto: onnx.ModelProto) -> bool:
    """Whether the model's weights are float16 (onnxconverter-common's float16 models): they are
    computed in float32 inside (narrow) and stored as float16 again, as TFLite's float16 mode
    stores them (qconvert/transforms/store_weights_float16.py), so that the .tflite keeps the
    ONNX file's size."""
    return any(t.data_type == onnx.TensorProto.FLOAT16 for t in proto.graph.initializer)


def internal_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype a tensor has inside the TFLite graph (see _NARROWED)."""
    dtype = np.dtype(dtype)
    return _NARROWED.get(dtype, dtype)


def check_activation_dtype(dtype: np.dtype, what: str) -> None:
    if np.dtype(dtype) not in ACTIVATION_DTYPES:
        raise ConversionError(
            f"{what} has dtype {np.dtype(dtype)}; a float conversion computes in float16/32/64, "
            "int8/16/32/64, uint8/16 and bool only (TFLite has no plain kernels for other types)")


def _cast_options(source: np.dtype, target: np.dtype) -> dict:
    return {"in_data_type": np.dtype(source), "out_data_type": np.dtype(target)}


OLDEST_IMPORTED_OPSET = 9


def upgrade_old_opset(source: OnnxFile) -> OnnxFile:
    """Models older than opset 9 (legacy broadcast attributes, BatchNormalization's is_test...)
    go through onnx's version converter, so importers only know opset 9 and newer."""
    proto = source.proto
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is None or opset >= OLDEST_IMPORTED_OPSET:
        return source
    source.restore_weights()  # the version converter reads initializers
    try:
        return OnnxFile(onnx.version_converter.convert_version(proto, OLDEST_IMPORTED_OPSET),
                        checked=True)
    except Exception as e:  # the converter raises several types; all mean it cannot upgrade
        raise ConversionError(f"opset {opset} model could not be upgraded to opset "
                              f"{OLDEST_IMPORTED_OPSET}: {str(e).splitlines()[0]}") from None


def node_names(proto: onnx.ModelProto) -> list[str]:
    """The name of each node of the graph, in order: its own, or made from its op type, its place
    and its first output."""
    return [node.name or f"{node.op_type}_{k}:{node.output[0] if node.output else ''}"
            for k, node in enumerate(proto.graph.node)]


def nodes_matching(proto: onnx.ModelProto, patterns: tuple[str, ...]) -> frozenset[str]:
    """The names (node_names) of the nodes --keep-float patterns pick: each pattern is a node
    name, an op type, or a regular expression matching whole node names. A pattern that picks
    no node is a ConversionError (a mistyped name would otherwise be ignored)."""
    names = node_names(proto)
    types = [node.op_type for node in proto.graph.node]
    picked: set[str] = set()
    for pattern in patterns:
        if pattern in names:
            chosen = {pattern}
        elif pattern in types:
            chosen = {n for n, t in zip(names, types) if t == pattern}
        else:
            try:
                expression = re.compile(pattern)
            except re.error as e:
                raise UsageError(f"--keep-float {pattern!r}: not a node name, an op type or a "
                                 f"regular expression ({e})") from None
            chosen = {n for n in names if expression.fullmatch(n)}
        if not chosen:
            raise ConversionError(f"--keep-float {pattern!r} matches no node name or op type of "
                                  "the model")
        picked |= chosen
    return frozenset(picked)


def onnx_names(graph: onnx.GraphProto) -> set[str]:
    """Every tensor name of `graph` and of the subgraphs in its nodes' attributes (If, Loop,
    Scan): inputs, outputs, initializers, value_info, node inputs and outputs."""
    names: set[str] = set()
    graphs = [graph]
    while graphs:
        g = graphs.pop()
        names.update(v.name for v in g.input)
        names.update(v.name for v in g.output)
        names.update(v.name for v in g.value_info)
        names.update(t.name for t in g.initializer)
        names.update(t.values.name for t in g.sparse_initializer)
        for node in g.node:
            names.update(node.input)
            names.update(node.output)
            for a in node.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    graphs.append(a.g)
                elif a.type == onnx.AttributeProto.GRAPHS:
                    graphs.extend(a.graphs)
    names.discard("")
    return names


def unsupported_nodes(unsupported: dict[str, list[str]]) -> str:
    """One line for the nodes no importer takes, by op: its count, up to three node names, and
    why TFLite cannot run it where that is known (ops/refused.py)."""
    count = sum(map(len, unsupported.values()))
    parts = []
    for key, names in unsupported.items():
        shown = ", ".join(repr(n) for n in names[:3]) + (", ..." if len(names) > 3 else "")
        times = f" x {len(names)}" if len(names) > 1 else ""
        reason = refusal(key)
        parts.append(f"{key}{times} ({shown})" + (f": {reason}" if reason else ""))
    return f"{count} unsupported ONNX node{'s' if count > 1 else ''}: " + "; ".join(parts)


def _settle(graph: _Graph) -> None:
    """Shape inference and load-time folding (constant control flow flattened too: If with a
    constant condition, small loops), alternated until folding finds nothing new, even allowed
    to guess (Folding.fold_constants)."""
    rounds, waiting, guess = 0, set(), False
    while rounds < 20:
        graph.infer_shapes()
        folded = graph.fold_constants(guess)
        found = control_flow.flatten(graph) or folded
        if found or (graph.deferred and not guess):
            # sizes only the values decide are guessed when nothing else is found (fold_constants)
            rounds, guess = rounds + 1, not found
            continue
        # Loop outputs typed a round after their initial values, until no more are (each round
        # types some: their names leave the set for good, so it changes while there is progress).
        known, waiting = waiting, control_flow.untyped_loop_outputs(graph)
        if not waiting or waiting == known:
            break


def load(source: OnnxFile | onnx.ModelProto,
         input_shapes: dict[str, tuple[int, ...]] | None = None, body: bool = False,
         sizes: dict[str, int] | None = None, probe: bool = False, outer=None,
         computed: Collection[str] = ()) -> Model:
    """Turns a parsed ONNX model into the IR; raises ConversionError naming what is at fault.
    `input_shapes` are --input-shape's, or (`body`) those a control-flow op gives its body;
    `sizes` set dynamic dimensions (dynamic_dims.py) to other sizes than their base size, as the
    calibration data or (`probe`) the dimensions' probe ask. A body's `outer` is (the outer
    _Graph, the control-flow op's name): see _Graph.outer. `computed`: values whose shape
    arithmetic stays computed when the model runs (_Graph.__init__)."""
    if isinstance(source, onnx.ModelProto):
        source = OnnxFile(source)
    if not source.checked:
        check_model(source.proto, {name: where.length for name, where in source.stored.items()})
    source = upgrade_old_opset(source)
    graph = _Graph(source, input_shapes or {}, body, sizes, outer, computed)
    try:
        return _load_graph(graph, probe)
    except ConversionError as e:
        if graph.dynamic is None or probe or not graph.dynamic.inputs:  # a probe's: its reason
            raise
        raise ConversionError(f"{e} ({dynamic_dims.pin_advice(graph.dynamic, graph.shapes)})") from None


def _load_graph(graph: _Graph, probing: bool = False) -> Model:
    """The IR of the loader's graph: folded, checked, imported. A batch that cannot follow
    axis 0 (dynamic_batch's check 1) is probed as a dynamic dimension (dynamic_dims.py), where
    there are other dimensions to probe; a probe (`probing`) checks no batch."""
    dynamic_quant.dequantize(graph)  # onnxruntime's quantize_dynamic ops as float ops
    probe = dynamic_batch.probe(graph) if graph.batch is not None and not probing else None
    _settle(graph)
    _check_supported(graph)

    model = Model()
    # The model's names first: a constant an importer creates (PRelu's "slope", HardSigmoid's
    # "c") must never take the name of a model tensor the loader adds later.
    model.reserved = onnx_names(graph.graph) | control_flow.inlined_names(graph.nodes)
    if probe is not None:
        model.dynamic_batch = DynamicBatch(graph.batch, dynamic_batch.onnx_blocker(graph, probe, _settle))
        del probe
        if model.dynamic_batch.fixed_because and graph.dynamic is not None:
            graph.dynamic.add_batch(graph.batch, [i.name for i in graph.inputs], graph.shapes)
    importer = _Importer(graph, model)
    importer.add_inputs()
    importer.import_nodes()
    importer.add_outputs()
    model.dynamic_dims = graph.dynamic  # after the bodies, whose symbols are the graph's
    model.remove_unused()
    return model


def _check_supported(graph: _Graph) -> None:
    """Every node left after folding has an importer (else one line for all those without one,
    unsupported_nodes) and types its importer takes."""
    unsupported: dict[str, list[str]] = {}
    for node in graph.nodes:
        key = op_key(node)
        if key not in ONNX_IMPORTERS and not control_flow_import.is_runtime_control(node):
            unsupported.setdefault(key, []).append(graph.names[id(node)])
    if unsupported:
        raise ConversionError(unsupported_nodes(unsupported))
    for node in graph.nodes:
        check_node_types(node, f"node {graph.names[id(node)]!r} ({node.op_type})", graph.opsets,
                         graph.dtypes)


def _beyond_int32(value) -> bool:
    """Whether `value` (a constant, or None) is int64 data int32 cannot hold."""
    return (value is not None and np.asarray(value).dtype == np.int64 and np.asarray(value).size > 0
            and bool(np.any((value < _INT32.min) | (value > _INT32.max))))


def _readers(graph: _Graph) -> dict[str, list[tuple[str, str, int]]]:
    """name -> (label, op type, input slot) of each node of `graph` reading it; a graph output,
    or a value a subgraph reads, counts as a reader of no op type (one that takes no saturated
    value: saturation_is_exact)."""
    readers: dict[str, list[tuple[str, str, int]]] = {}
    for node in graph.nodes:
        label = f"node {graph.names[id(node)]!r} ({node.op_type})"
        for slot, name in enumerate(node.input):
            readers.setdefault(name, []).append((label, node.op_type, slot))
    for name in [o.name for o in graph.graph.output]:
        readers.setdefault(name, []).append(("the graph output", "", -1))
    for name in control_flow.outer_reads(graph.nodes):
        readers.setdefault(name, []).append(("a subgraph", "", -1))
    return readers


class _Importer:
    """Fills the IR model from the settled graph: graph inputs, each node through its importer,
    graph outputs. IR arrays keep the ONNX tensors' names, but for `aliases`: a graph input's
    name -> the array holding it inside the graph (a narrowed dtype's CAST)."""

    def __init__(self, graph: _Graph, model: Model):
        self.graph, self.model = graph, model
        self.aliases: dict[str, str] = {}
        self.readers = _readers(graph)
        self.consumed = self.readers.keys()  # node inputs, graph outputs, subgraphs' outer reads
        # The graph outputs' declared element types (computes_in_int64's test, per node).
        self.declared = {o.name: o.type.tensor_type.elem_type for o in graph.graph.output}

    def ensure_array(self, name: str, node_label: str) -> None:
        """The IR array of the ONNX tensor `name` (a constant with its narrowed value); an
        unused one without a static shape (Dropout's mask) gets none."""
        graph, model = self.graph, self.model
        if not name or name in model.arrays or name in self.aliases:
            return
        if name in graph.constants:
            value = self.narrow_constant(name, graph.constants[name])
            model.add_named_array(name, value.shape, value.dtype, value)
            return
        if name not in graph.shapes:
            if name not in self.consumed:
                return  # an unused output (Dropout's mask) needs no array
            raise ConversionError(f"tensor {name!r} ({node_label}) has no static shape after shape "
                                  f"inference; {graph.why_no_shape()}")
        check_tensor_size(graph.shapes[name], f"tensor {name!r} ({node_label})")
        check_activation_dtype(graph.dtypes[name], f"tensor {name!r} ({node_label})")
        model.add_named_array(name, graph.shapes[name], internal_dtype(graph.dtypes[name]))

    def narrow_constant(self, name: str, value: np.ndarray) -> np.ndarray:
        """The constant `name` narrowed (narrow); int64 values int32 cannot hold are saturated
        where every reader computes the same with them so, else refused naming a reader that
        does not."""
        value = np.asarray(value)
        if value.dtype != np.int64 or not value.size or (
                _INT32.min <= value.min() and value.max() <= _INT32.max):
            return narrow(value, f"tensor {name!r}")
        readers = self.readers.get(name, [("a subgraph or graph output", "", -1)])
        for label, op_type, slot in readers:
            if not saturation_is_exact(op_type, slot, value):
                return narrow(value, f"tensor {name!r}", reader=label, op_type=op_type)
        return narrow(value, f"tensor {name!r}", saturate=True)

    def add_inputs(self) -> None:
        """Graph inputs keep the ONNX name and dtype; a narrowed dtype goes through a CAST."""
        graph, model = self.graph, self.model
        for i in graph.inputs:
            dtype = graph.dtypes[i.name]
            check_activation_dtype(dtype, f"input {i.name!r}")
            model.add_named_array(i.name, graph.shapes[i.name], dtype)
            model.inputs.append(i.name)
            inner_dtype = internal_dtype(dtype)
            if inner_dtype != dtype:
                inner = model.add_array(f"{i.name}_{inner_dtype}", graph.shapes[i.name], inner_dtype)
                model.add_operator(Operator("CAST", [i.name], [inner], _cast_options(dtype, inner_dtype),
                                            source=f"input {i.name}"))
                self.aliases[i.name] = inner

    def import_nodes(self) -> None:
        """Each node through its importer (control flow through control_flow_import's)."""
        graph, aliases = self.graph, self.aliases
        ctx = ImportContext(self.model, graph.opset, self.consumed)
        ctx.run_time_shaped, ctx.at_sizes = graph.run_time_shaped, graph.at_sizes
        ctx.sizes_computed = bool(graph.computed)
        for node in graph.nodes:
            node_name = graph.names[id(node)]
            label = f"output of node {node_name!r} ({node.op_type})"
            if control_flow_import.is_runtime_control(node):
                control_flow_import.import_control(node, node_name, graph, self.model,
                                                   self.ensure_array, aliases,
                                                   functools.partial(load, body=True))
                continue
            if self.computes_in_int64(node):
                inputs, ctx.wide = self.int64_operands(node), True
            else:
                for name in list(node.input) + list(node.output):
                    self.ensure_array(name, label)
                inputs, ctx.wide = [aliases.get(n, n) for n in node.input], False
            ctx.node = OnnxNode(node_name, node.op_type, inputs,
                                [aliases.get(n, n) for n in node.output], _decode_attrs(node), node.domain)
            ONNX_IMPORTERS[op_key(node)](ctx.node, ctx)

    def computes_in_int64(self, node: onnx.NodeProto) -> bool:
        """Whether `node` stays in int64 (INT64_KERNELS): an op with a TFLite int64 kernel that
        reads an int64 constant int32 cannot hold and whose int64 outputs only leave the graph,
        declared int64 (a subgraph's outputs are declared untyped: they stay int32 inside)."""
        return (node.domain in ("", "ai.onnx") and node.op_type in INT64_KERNELS
                and any(_beyond_int32(self.graph.constants.get(n)) for n in node.input)
                and all(self.declared.get(o) == onnx.TensorProto.INT64
                        and {r[0] for r in self.readers.get(o, [])} == {"the graph output"}
                        for o in node.output))

    def int64_operands(self, node: onnx.NodeProto) -> list[str]:
        """The arrays an int64 node (computes_in_int64) reads and writes: constants in int64,
        an int64 graph input as it is (any int64 value), other activations (int32 inside)
        through a CAST to int64; outputs int64."""
        model, names = self.model, []
        for name in node.input:
            value = self.graph.constants.get(name)
            if value is not None:
                names.append(model.add_constant(name, np.asarray(value).astype(np.int64)))
                continue
            if name in self.aliases and model.arrays[name].dtype == np.int64:
                names.append(name)
                continue
            self.ensure_array(name, f"input of node {self.graph.names[id(node)]!r} ({node.op_type})")
            inner = self.aliases.get(name, name)
            wide = model.add_array(f"{inner}_int64", model.arrays[inner].shape, np.int64)
            model.add_operator(Operator("CAST", [inner], [wide], _cast_options(model.arrays[inner].dtype,
                                                                               np.dtype(np.int64)),
                                        source=self.graph.names[id(node)]))
            names.append(wide)
        for name in node.output:
            model.add_named_array(name, self.graph.shapes[name], np.int64)
        return names

    def add_outputs(self) -> None:
        """Graph outputs keep their ONNX name and dtype (a narrowed one through a CAST); a
        constant output gets a producing op so that the TFLite graph has a tensor to return."""
        graph, model = self.graph, self.model
        graph_input_names = {i.name for i in graph.inputs}
        for name in [o.name for o in graph.graph.output]:
            if name in graph_input_names:  # an input returned as it is: the same tensor
                model.outputs.append(name)
                continue
            self.ensure_array(name, "graph output")
            inner = self.aliases.get(name, name)
            onnx_dtype = np.dtype(graph.dtypes.get(name, model.arrays[inner].dtype))
            if onnx_dtype != model.arrays[inner].dtype or model.arrays[inner].is_constant:
                if inner == name:  # free the ONNX name for the graph output tensor
                    inner = model.unique_name(name + "_value")
                    model.rename_tensor(name, inner)
                model.add_named_array(name, model.arrays[inner].shape, onnx_dtype)
                model.add_operator(Operator("CAST", [inner], [name],
                                            _cast_options(model.arrays[inner].dtype, onnx_dtype),
                                            source=f"output {name}"))
            model.outputs.append(name)
