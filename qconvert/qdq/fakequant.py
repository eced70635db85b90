"""The fake-quant (eval) graph: the ONNX model with QuantizeLinear -> DequantizeLinear pairs
exactly where qconvert's int8 conversion of it quantizes, holding the params it chose.

tf.contrib.quantize's create_eval_graph wrote FakeQuant nodes where TOCO's integer graph would
quantize; here the quantize steps themselves decide (fused activations, same-scale ops,
fixed-output ops, int32 biases, ops that stay float), and `insert_fake_quant` reads their
decisions off the quantized IR model:

- an int8 activation of the IR whose ONNX counterpart (report.counterpart: qconvert keeps ONNX
  names, with suffixes) is a node output or a graph input gets one Q -> DQ pair with its scale
  and zero point, read by every reader of the tensor. A graph output keeps its name: its producer
  writes `<name>_fq_float` and the pair's DQ writes the output. A conv's output that TFLite fuses
  with its ReLU does not exist in the IR, so it gets no pair: exactly the rule. A float op's
  output that int8 ops read through a QUANTIZE gets its pair on the edges to those ops only.
- a weight of an int8 CONV_2D, DEPTHWISE_CONV_2D, TRANSPOSE_CONV or FULLY_CONNECTED becomes its
  ONNX initializer (or Constant node) as the IR's int8 integers q + DequantizeLinear per output
  channel. The IR quantized the weight after folding what follows the ONNX node into it (batch
  norm, a Mul, a scalar before it), which scales each output channel c by some f_c: the ONNX
  weight is sign(f_c) q at scale s_c / |f_c|, and folded again it is the IR's weight
  (round(w f / s) = sign(f) round(w |f| / s)). A weight whose relation to the IR's is not such a
  per-channel factor stays float, listed.
  The integers are stored as uint8 q + 128 with zero point 128: the same grid and the same values,
  for onnxruntime's default graph optimizations. Those fuse a DQ'd weight, its op and the pairs
  around it into an integer kernel (QLinearConv, QGemm, QLinearMatMul); with a signed weight
  its x86 u8 x s8 path (VPMADDUBSW) saturates 16-bit sums on CPUs without VNNI, 12 to 20 output
  steps off on the test CNNs. With an unsigned weight the kernel is u8 x u8, which widens to 16
  bits first and is exact on every CPU, or nothing is fused (an int8 input with a uint8 weight
  matches no kernel). Float weights on the grid would not do: onnxruntime's
  WeightBiasQuantization quantizes a float Conv or Gemm weight behind a DQ'd input again, per
  tensor (2 to 11 steps off).
- a bias that reached the IR unchanged becomes int32 + DequantizeLinear at input scale x weight
  scale (TFLite's int32 bias); a folded one stays float (its rounding is far below int8's).
- what no pair can carry goes into the model's metadata (RANGES_KEY, by the name the loader gives
  the tensor), which the importer reads back: the params' range of an int8 tensor without an
  ONNX counterpart (a decomposition's intermediate: a HardSigmoid's clamp before its upper bound),
  and the range of a float tensor (rules such as keep_mixed_concatenation_float read it).
  onnxruntime does not round at those intermediates: the only difference between the fake-quant
  graph's arithmetic and the int8 model's, besides the kernels' own rounding.

Converting the result with `--quantize` and no calibration (qdq/importer.py) gives back the same
params, tensor by tensor; weight scales up to float32 rounding where a factor was folded in.
"""

from __future__ import annotations

import collections
import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper, version_converter

from ..errors import ConversionError
from ..ir import Model, counterpart, without_layout_suffix, without_type_suffix
from ..onnx.control_flow import outer_reads, rename_outer, subgraphs
from ..onnx.graph import GraphIndex
from ..onnx.loader import node_names, onnx_names
from ..onnx.file import attribute
from ..transforms.quantization import FIXED_BY_OP, rule_of
from .importer import ACTIVATIONS_KEY, PRECISION_KEY, RANGES_KEY
from .names import FreshNames

# ONNX op with its weight at input 1 -> that weight's output-channel axis (None: not one axis)
_WEIGHT_AXIS = {
    "Conv": lambda node: 0,
    "ConvTranspose": lambda node: 1 if attribute(node, "group", 1) == 1 else None,
    "Gemm": lambda node: 0 if attribute(node, "transB", 0) else 1,
    "MatMul": lambda node: 1,
}
PER_AXIS_OPSET = 13  # DequantizeLinear's `axis`
INT16_OPSET = 21  # QuantizeLinear/DequantizeLinear on int16


@dataclass
class FakeQuantGraph:
    """The fake-quant model and what it holds."""

    proto: onnx.ModelProto
    activations: list[str] = field(default_factory=list)  # ONNX tensors with a Q -> DQ pair
    weights: list[str] = field(default_factory=list)  # initializers stored uint8 q + 128 + DQ
    biases: list[str] = field(default_factory=list)  # initializers stored int32 + DQ
    float_weights: list[str] = field(default_factory=list)  # int8 in the IR, float here
    # Tensors whose range no pair carries (by their loader names): the metadata's RANGES_KEY.
    ranges_in_metadata: list[str] = field(default_factory=list)
    # With gates (insert_fake_quant's `gated`): each gate's graph input (a bool scalar: true runs
    # the pair, false passes the float value) -> what it quantizes, an ONNX tensor (an activation)
    # or the ONNX node whose weight (and bias) it is, as Gate.
    gates: dict[str, "Gate"] = field(default_factory=dict)


@dataclass(frozen=True)
class Gate:
    """What one gate of a gated fake-quant graph quantizes: an activation (`tensor`, read through
    its pair by `readers`, ONNX node names; None: by every reader; `imposed`: params its
    producer's kernel fixes, see _imposed) or the weight of `node`."""

    kind: str  # "activation" or "weight"
    tensor: str  # the ONNX tensor, or the weight's initializer
    node: str = ""  # the weight's node
    readers: frozenset[str] | None = None
    imposed: bool = False


class FloatWeights:
    """Called with the model before the quantize steps: keeps each weighted op's float weight and
    bias (the quantize steps replace the arrays' data, these references stay), by the op's ONNX
    node and type (the planner quantizes copies of the model, and the quantize steps rename
    outputs); a node with two such ops of one type is left out (None)."""

    def __init__(self):
        self.by_op: dict[tuple[str, str], tuple[np.ndarray, np.ndarray | None] | None] = {}

    def __call__(self, model: Model) -> None:
        for op in model.operators:
            rule = rule_of(op)
            if rule is None or rule.weight is None or rule.weight >= len(op.inputs):
                continue
            weight = model.constant(op.inputs[rule.weight])
            if weight is None or weight.dtype.kind != "f":
                continue
            bias = None
            if rule.bias is not None and rule.bias < len(op.inputs):
                bias = model.constant(op.inputs[rule.bias])
            key = (op.source, op.type)
            self.by_op[key] = None if key in self.by_op else (weight, bias)


QUANTIZED = (np.dtype(np.int8), np.dtype(np.int16))  # activation types a pair can stand for


def _per_tensor(array) -> tuple[float, int, np.dtype] | None:
    """(scale, zero point, type) of a per-tensor quantized activation; None otherwise."""
    q = array.quant
    if q is None or q.axis is not None or q.scale.size != 1 or array.dtype not in QUANTIZED:
        return None
    return float(q.scale.reshape(-1)[0]), int(q.zero_point.reshape(-1)[0]), array.dtype


def _loader_name(name: str) -> str:
    """The name the loader gave the array an IR tensor holds (the type and layout suffixes of
    ir.py's derived names are added later, by the quantize and layout steps)."""
    name = without_type_suffix(name)
    while (twin_of := without_layout_suffix(name)) is not None:
        name = twin_of
    return name


@dataclass
class _Pair:
    """The params of an ONNX tensor's pair, and which of its ONNX readers read through it (None:
    all of them)."""

    scale: float
    zero_point: int
    dtype: np.dtype  # int8, or int16 (a 16x8 kernel's activation)
    readers: set[str] | None = None
    imposed: bool = False  # the params are the producer's kernel's (_imposed)
    # The IR tensor is the ONNX one divided per channel by this (equalize_channel_ranges) where
    # _equalize could not make the ONNX graph so: the pair's scale is per channel, along `axis`
    # of the ONNX tensor (onnxruntime computes the same; converting back refuses it).
    channel_scale: np.ndarray | None = None
    axis: int = 1


def activation_params(model: Model, values: set[str], equalized: set[str] = frozenset()):
    """{ONNX tensor: _Pair} for the IR's int8 activations, and {IR tensor by its loader name:
    [min, max]} for the ranges no pair carries: the params' span of an int8 tensor without an ONNX
    counterpart, and the range of a float one (the quantize steps' decisions read those too).

    The first holder of a tensor in execution order is its producer's output. When that is int8,
    the pair takes its params and every reader reads through it (a float reader reads it
    DEQUANTIZEd: the same values). When it is float and some reader has an int8 copy (a QUANTIZE
    to it), only the ONNX nodes of the ops reading a copy read through the pair."""
    pairs: dict[str, _Pair] = {}
    first: dict[str, bool] = {}  # ONNX tensor -> whether its producer's holder is quantized
    ranges: dict[str, list[float]] = {}
    copied: set[str] = set()  # int8 tensors with an int16 copy (or the other way)
    holders: dict[str, object] = {}  # ONNX tensor -> the IR array its pair was made from
    ordered = list(model.inputs) + [o for op in model.operators for o in op.outputs]
    for name in ordered:
        array = model.arrays.get(name)
        if array is None or array.is_constant or array.dtype.kind not in "fi":
            continue
        chosen = _per_tensor(array)
        found = counterpart(name, values, {})
        key = found[0] if found is not None else _loader_name(name)
        if chosen is None:  # float: its range, for the rules that read it
            if array.minmax is not None and array.dtype.kind == "f":
                ranges.setdefault(key, [array.minmax.min, array.minmax.max])
            first.setdefault(key, False)
        elif found is None:
            ranges.setdefault(key, _span(*chosen))
        else:
            producer_quantized = first.setdefault(key, True)
            holders.setdefault(key, array)
            scale = None if key in equalized else array.channel_scale
            pair = pairs.setdefault(key, _Pair(*chosen, None if producer_quantized else set(),
                                               _imposed(array), scale,
                                               1 if len(array.shape) == 4 else len(array.shape) - 1))
            if pair.readers is not None:
                pair.readers.update(op.source for op in model.consumers(name))
            elif chosen[2] != pair.dtype and holders[key].minmax is not None:
                # A copy of the other type (an int16 one of an int8 tensor, for 16x8 readers)
                # takes its params from the tensor's range, which the pair's span only approximates.
                ranges.setdefault(key, [holders[key].minmax.min, holders[key].minmax.max])
                copied.add(key)
    for tensor, pair in list(pairs.items()):
        if pair.readers is not None and not pair.readers:  # no ONNX node reads a copy
            del pairs[tensor]
        elif pair.readers is None and tensor not in copied:
            ranges.pop(tensor, None)  # the pair gives it
        # A float tensor keeps its range in the metadata beside its pair: its copies (int8 and
        # int16 ones may differ) all take their params from that range.
    return pairs, ranges


def _imposed(array) -> bool:
    """Whether an activation's params are its producer's kernel's (TANH, LOGISTIC, SOFTMAX: a
    fixed output range), not its calibrated range's."""
    return array.minmax is not None and array.minmax.source == FIXED_BY_OP


def _span(scale: float, zero_point: int, dtype: np.dtype) -> list[float]:
    """The real range a grid spans, as the importer reads a pair's (int16: symmetric, 32767 steps
    either side, what TFLite's int16 chooser maps back to the scale)."""
    if dtype == np.int16:
        return [-32767 * float(scale), 32767 * float(scale)]
    return [float(scale) * (-128 - zero_point), float(scale) * (127 - zero_point)]


@dataclass(frozen=True)
class Precision:
    """The conversion's precision decisions no pair states, kept in the metadata (PRECISION_KEY,
    ACTIVATIONS_KEY) for the conversion of the fake-quant graph to make them again: the ONNX
    nodes kept float (--keep-float, the planner's float promotions) with why, the nodes to run
    16x8 (the planner's int16 promotions), and --activations (int16: every op with a 16x8 kernel,
    not only those next to an int16 pair)."""

    float_nodes: Mapping[str, str] = field(default_factory=dict)
    int16_nodes: Mapping[str, str] = field(default_factory=dict)
    activations: str = "int8"


def insert_fake_quant(proto: onnx.ModelProto, model: Model, float_weights: FloatWeights,
                      precision: Precision = Precision(), gated: bool = False) -> FakeQuantGraph:
    """Rewrites `proto` (the float ONNX model `model` was converted from, with its weights) in
    place into the fake-quant graph of the quantized IR `model` (see the module docstring), with
    `precision` in its metadata. `gated`: each pair (each weight with its bias) behind a gate, a
    bool graph input choosing between the pair's value and the float one (an If), for measuring
    what each quantization costs (plan/sensitivity.py); the float weights stay beside their
    integers."""
    graph = proto.graph
    names = FreshNames(onnx_names(graph) | {node.name for node in graph.node})  # node names too
    values = {o for node in graph.node for o in node.output} | {i.name for i in graph.input}
    index = GraphIndex(graph, constant_attributes=("value",))
    equalized = _equalize(index, model, values)
    wanted, ranges = activation_params(model, values, equalized)
    result = FakeQuantGraph(proto, ranges_in_metadata=list(ranges))
    _set_metadata(proto, RANGES_KEY, json.dumps(ranges))
    if precision.activations == "int16":
        _set_metadata(proto, ACTIVATIONS_KEY, precision.activations)
    if precision.float_nodes or precision.int16_nodes:
        _set_metadata(proto, PRECISION_KEY, json.dumps(  # sorted: the same bytes every run
            {"float": dict(sorted(precision.float_nodes.items())), "int16": sorted(precision.int16_nodes)}))
    own_names = node_names(proto)  # before any node changes: the IR ops' sources
    gates = _Gates(graph, names, result) if gated else None
    weight_nodes, replaced = _fake_quantize_weights(index, dict(zip(own_names, graph.node)), model,
                                                    float_weights, names, result, gates)
    outputs = {o.name for o in graph.output}
    inputs = [i.name for i in graph.input if i.name in wanted]
    inputs_set = set(inputs)
    pairs: dict[str, list[onnx.NodeProto]] = {}  # tensor -> its Q, DQ nodes
    writes: dict[str, str] = {}  # a graph output -> what its producer writes now
    for tensor in [*inputs, *(o for node in graph.node for o in node.output)]:
        pair = wanted.get(tensor)
        if pair is None or tensor in pairs:
            continue
        source, target = tensor, names.fresh(f"{tensor}_fq")
        if tensor in outputs and pair.readers is None:  # the output itself is int8 in TFLite
            source, target = names.fresh(f"{tensor}_fq_float"), tensor
            writes[tensor] = source
        pairs[tensor] = _pair(graph, names, tensor, source, target, pair, gates)
        result.activations.append(tensor)
    through = {t: pair[-1].output[0] for t, pair in pairs.items() if pair[-1].output[0] != t}
    nodes = weight_nodes + [n for t in inputs for n in pairs[t]]
    for node, node_name in zip(graph.node, own_names):
        if node.op_type == "Constant" and node.output[0] in replaced:
            continue
        read = functools.partial(_read_as, node_name=node_name, through=through, wanted=wanted)
        for k, name in enumerate(node.input):
            node.input[k] = read(name)
        _read_in_bodies(node, read)
        nodes.append(node)
        for k, name in enumerate(node.output):
            if name in writes:
                node.output[k] = writes[name]
            if name in pairs and name not in inputs_set:
                nodes.extend(pairs[name])
    del graph.node[:]
    graph.node.extend(nodes)
    return result


def _read_as(name: str, node_name: str, through: dict[str, str], wanted: dict[str, _Pair]) -> str:
    """What the ONNX node `node_name` reads the tensor `name` as: the output of its pair (`through`)
    where the node reads through it, else the tensor itself."""
    if name in through and (wanted[name].readers is None or node_name in wanted[name].readers):
        return through[name]
    return name


def _read_in_bodies(node: onnx.NodeProto, read) -> None:
    """The If/Loop/Scan bodies of `node` read each outer tensor with a pair through it (as the
    node's own inputs do: `read(name)`, see _read_as), at every depth, by ONNX's scoping rules
    (control_flow.rename_outer: a body defining the name itself keeps its own)."""
    renames = {name: read(name) for name in outer_reads([node])}
    for body in subgraphs(node):
        rename_outer(body, renames)


# --- equalized channels ---------------------------------------------------------------------
def _equalize(index: GraphIndex, model: Model, values: set[str]) -> set[str]:
    """The IR's equalized tensors (ir.Array.channel_scale) made so in the ONNX graph: the last
    weighted node before the tensor divides its output channels by s (a Conv's or Gemm's weights
    and bias, a BatchNormalization's scale and shift; an Add of a constant on the way gets the
    constant over s), and every reader, a Conv, Gemm or MatMul, multiplies its input channels by
    s. Exact in float, like the IR's rewrite; the tensor then takes a per-tensor pair, as the
    int8 model, and converting the fake-quant graph back gives the same weights and params.
    Returns the ONNX tensors made so (a structure it does not know keeps the per-channel pair)."""
    constants = _Constants(index)
    done, outputs = set(), index.outputs
    for name in [o for op in model.operators for o in op.outputs]:
        array = model.arrays.get(name)
        if array is None or array.channel_scale is None:
            continue
        found = counterpart(name, values, {})
        if found is None or found[0] in done:
            continue
        tensor, factor = found[0], array.channel_scale.astype(np.float64)
        if tensor in outputs:
            continue
        edits = _producer_edits(tensor, factor, len(array.shape), index.producers, index.readers,
                                constants, outputs)
        reading = _reader_edits(tensor, factor, index.readers, constants)
        if edits is None or reading is None:
            continue
        for target, value in edits + reading:
            constants.set(target, value)
        done.add(tensor)
    constants.write()
    return done


class _Constants:
    """The graph's constant values (GraphIndex: initializers, and Constant nodes' values, which
    PaddlePaddle's exporter writes) with the values _equalize changes: `set` here, written back
    into their tensors by `write`."""

    def __init__(self, index: GraphIndex):
        self.index = index
        self.changed: dict[str, np.ndarray] = {}

    def get(self, name: str) -> np.ndarray | None:
        return self.changed[name] if name in self.changed else self.index.constant(name)

    def single(self, name: str) -> bool:
        """Whether only one input of one node reads `name`."""
        return len(self.index.readers.get(name, [])) == 1

    def set(self, name: str, value: np.ndarray) -> None:
        self.changed[name] = value

    def write(self) -> None:
        for name, value in self.changed.items():
            self.index.tensor(name).CopyFrom(numpy_helper.from_array(np.asarray(value), name))


def _along(value: np.ndarray, axis: int, factor: np.ndarray) -> np.ndarray | None:
    """`value` multiplied by `factor` along `axis` (repeated when the axis holds a multiple of its
    channels: a depthwise conv's multiplier), in its dtype; None when the sizes do not fit."""
    size = value.shape[axis] if value.ndim > axis else 0
    if size == 0 or size % factor.size:
        return None
    shape = [1] * value.ndim
    shape[axis] = size
    return (value * np.repeat(factor, size // factor.size).reshape(shape)).astype(value.dtype)


def _producer_edits(tensor, factor, rank, producers, readers, constants, outputs):
    """[(constant, new value)] that divide `tensor`'s channels (axis 1, of `rank` axes) by factor
    at the weighted node that makes it, through Relu (positively homogeneous), a Mul by a scalar
    (it commutes) and an Add of a constant (which gets the constant over factor); or None."""
    edits, name = [], tensor
    for _ in range(8):
        node = producers.get(name)
        if node is None or name in outputs or (len(readers.get(name, [])) != 1 and name != tensor):
            return None
        params = [constants.get(i) for i in node.input]
        if node.op_type in ("Conv", "Gemm", "BatchNormalization"):
            if node.op_type == "Gemm" and attribute(node, "transA", 0):
                return None
            axis = 1 if node.op_type == "Gemm" and not attribute(node, "transB", 0) else 0
            for k in (1, 2):  # weights (a BatchNormalization's scale) and bias
                if k >= len(node.input) or not node.input[k]:
                    continue
                value = params[k]
                if value is None or not constants.single(node.input[k]):
                    return None
                new = _along(value, axis if k == 1 else 0, 1.0 / factor)
                if new is None:
                    return None
                edits.append((node.input[k], new))
            return edits
        if node.op_type == "Relu":
            name = node.input[0]
            continue
        if node.op_type in ("Mul", "Add") and len(node.input) == 2:
            k = next((k for k in (0, 1) if params[k] is not None), None)
            if k is None:
                return None
            value = params[k]
            if node.op_type == "Mul":
                if value.size != 1:
                    return None
            else:  # the added constant, per channel over s (axis 1 of an N, C, ... tensor)
                if not constants.single(node.input[k]) or value.size not in (1, factor.size):
                    return None
                per_channel = np.broadcast_to(value.reshape(-1), factor.shape) / factor
                edits.append((node.input[k], per_channel.reshape([1, factor.size] + [1] * (rank - 2))
                              .astype(value.dtype)))
            name = node.input[1 - k]
            continue
        return None
    return None


def _reader_edits(tensor, factor, readers, constants):
    """[(weight, new value)] that multiply every reader's input channels by factor, or None."""
    edits = []
    for node in readers.get(tensor, []):
        if not node.input or node.input[0] != tensor or len(node.input) < 2:
            return None
        weight = constants.get(node.input[1])
        if weight is None or not constants.single(node.input[1]):
            return None
        if node.op_type == "Conv":
            group = attribute(node, "group", 1)
            axis = 1 if group == 1 else (0 if weight.shape[1] == 1 and group == factor.size else None)
        elif node.op_type == "Gemm" and not attribute(node, "transA", 0):
            axis = 1 if attribute(node, "transB", 0) else 0
        elif node.op_type == "MatMul":
            axis = 0 if weight.ndim == 2 else None
        else:
            axis = None
        new = None if axis is None else _along(weight, axis, factor)
        if new is None:
            return None
        edits.append((node.input[1], new))
    return edits


def _set_metadata(proto: onnx.ModelProto, key: str, value: str) -> None:
    kept = [p for p in proto.metadata_props if p.key != key]
    del proto.metadata_props[:]
    proto.metadata_props.extend(kept)
    proto.metadata_props.add(key=key, value=value)


def with_opset(proto: onnx.ModelProto, needed: int) -> onnx.ModelProto:
    """`proto`, or the same model converted to opset `needed` when it imports an older one (per-
    channel DequantizeLinear needs PER_AXIS_OPSET, int16 pairs INT16_OPSET); a ConversionError if
    onnx cannot convert it."""
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), needed)
    if opset >= needed:
        return proto
    try:
        converted = version_converter.convert_version(proto, needed)
    except Exception as e:  # the converter raises bare RuntimeErrors and ValueErrors
        raise ConversionError(f"the model imports ONNX opset {opset}; the fake-quant graph needs opset "
                              f"{needed} (per-channel DequantizeLinear, int16 pairs from 21), and onnx's "
                              f"version converter could not convert it: "
                              f"{str(e).splitlines()[0] if str(e) else repr(e)}") from None
    # The converter keeps the IR version: an opset-9 model's 4 is older than the opset allows.
    converted.ir_version = max(converted.ir_version, helper.find_min_ir_version_for(converted.opset_import))
    return converted


def _initializer(graph: onnx.GraphProto, names: FreshNames, hint: str, value: np.ndarray) -> str:
    name = names.fresh(hint)
    graph.initializer.append(numpy_helper.from_array(value, name))
    return name


class _Gates:
    """The gates of a gated fake-quant graph: bool graph inputs, and the If nodes behind them."""

    def __init__(self, graph: onnx.GraphProto, names: FreshNames, result: FakeQuantGraph):
        self.graph, self.names, self.result = graph, names, result

    def open(self, gate: Gate) -> str:
        """A new gate for what `gate` says: its graph input's name."""
        name = self.names.fresh(f"qconvert_gate_{len(self.result.gates)}")
        self.graph.input.append(helper.make_tensor_value_info(name, onnx.TensorProto.BOOL, []))
        self.result.gates[name] = gate
        return name

    def branch(self, gate: str, quantize: list[onnx.NodeProto], quantized: str, unquantized: str,
               target: str) -> onnx.NodeProto:
        """If(gate): the `quantize` nodes' value `quantized`, else `unquantized`, -> target. An If
        rather than a Where: a closed gate costs nothing (the pair does not run)."""
        out = helper.make_tensor_value_info(quantized, onnx.TensorProto.FLOAT, None)
        passed = self.names.fresh(f"{target}_fq_float")
        then = helper.make_graph(quantize, self.names.fresh(f"{target}_fq_then"), [], [out])
        otherwise = helper.make_graph([helper.make_node("Identity", [unquantized], [passed])],
                                      self.names.fresh(f"{target}_fq_else"), [],
                                      [helper.make_tensor_value_info(passed, onnx.TensorProto.FLOAT, None)])
        return helper.make_node("If", [gate], [target], name=self.names.fresh(f"{target}_fq_gate"),
                                then_branch=then, else_branch=otherwise)


def _pair(graph, names: FreshNames, tensor: str, source: str, target: str, pair: _Pair,
          gates: _Gates | None = None):
    """Q(source) -> DQ -> target with the pair's params, on its type's grid (behind a gate:
    the DQ's value or `source` -> target)."""
    scale, zero_point, attributes = np.array(pair.scale, np.float32), np.array(pair.zero_point, pair.dtype), {}
    if pair.channel_scale is not None:  # per channel of the ONNX tensor (ir.Array.channel_scale)
        scale = (pair.scale * pair.channel_scale).astype(np.float32)
        zero_point = np.full(scale.shape, pair.zero_point, pair.dtype)
        attributes = {"axis": pair.axis}
    s = _initializer(graph, names, f"{tensor}_fq_scale", scale)
    z = _initializer(graph, names, f"{tensor}_fq_zero_point", zero_point)
    quantized = names.fresh(f"{tensor}_fq_{pair.dtype.name}")
    dequantized = target if gates is None else names.fresh(f"{tensor}_fq_value")
    nodes = [helper.make_node("QuantizeLinear", [source, s, z], [quantized],
                              name=names.fresh(f"{tensor}_fq_q"), **attributes),
             helper.make_node("DequantizeLinear", [quantized, s, z], [dequantized],
                              name=names.fresh(f"{tensor}_fq_dq"), **attributes)]
    if gates is not None:
        readers = None if pair.readers is None else frozenset(pair.readers)
        gate = gates.open(Gate("activation", tensor, readers=readers, imposed=pair.imposed))
        nodes = [gates.branch(gate, nodes, dequantized, source, target)]
    return nodes


def _fake_quantize_weights(index: GraphIndex, nodes_by_name: dict[str, onnx.NodeProto], model: Model,
                           float_weights: FloatWeights, names: FreshNames, result: FakeQuantGraph,
                           gates: _Gates | None = None):
    """Each int8 weight (and unchanged bias) of the IR onto its ONNX initializer (or Constant
    node) as integers + DequantizeLinear. Returns the DQ nodes, which read only constants (first
    in the graph), and the names they now write: the initializers are gone, the Constant nodes
    writing them are for the caller to drop. With `gates`, each weight and its bias sit behind
    one gate, their float values kept as initializers of fresh names."""
    graph = index.graph
    weighted = []  # (op, its float weight, its float bias)
    for op in model.operators:
        kept = float_weights.by_op.get((op.source, op.type))
        if kept is not None:
            weighted.append((op, *kept))
    ops_of_node = collections.Counter(op.source for op, _, _ in weighted)

    dequantize, dropped = [], set()
    for op, ir_weight, ir_bias in weighted:
        rule = rule_of(op)
        weight = model.arrays[op.inputs[rule.weight]]
        if weight.dtype != np.int8 or weight.quant is None:
            continue  # the op stayed float
        node = nodes_by_name.get(op.source)
        axis = _WEIGHT_AXIS[node.op_type](node) if node is not None and node.op_type in _WEIGHT_AXIS else None
        init = _own(index, node.input[1]) if axis is not None and len(node.input) > 1 else None
        if init is None or ops_of_node[op.source] != 1:
            result.float_weights.append(op.source)
            continue
        w = numpy_helper.to_array(init)
        ir_axis = rule.weight_axis % ir_weight.ndim
        factor = _channel_factor(w, axis, ir_weight, ir_axis)
        scales = None if factor is None else _onnx_scales(weight.quant, factor)
        if scales is None or weight.data is None or weight.data.shape != ir_weight.shape:
            result.float_weights.append(op.source)
            continue
        q = _onnx_integers(w, axis, factor, ir_weight, weight.data, ir_axis)
        gate = None if gates is None else (gates, gates.open(Gate("weight", node.input[1], op.source)))
        dequantize.extend(_constant_dq(graph, names, node.input[1], (q + 128).astype(np.uint8), scales,
                                       np.uint8(128), axis, gate, init))
        dropped.add(node.input[1])
        result.weights.append(node.input[1])
        # The bias as TFLite's int32, where the IR's is the ONNX one (nothing folded into it).
        bias = _own(index, node.input[2]) if len(node.input) > 2 and node.op_type != "MatMul" else None
        quantized_bias = model.arrays[op.inputs[rule.bias]] if ir_bias is not None else None
        if (bias is not None and quantized_bias is not None and quantized_bias.dtype == np.int32
                and np.all(factor == 1) and np.array_equal(numpy_helper.to_array(bias), ir_bias)):
            dequantize.extend(_constant_dq(graph, names, node.input[2], quantized_bias.data,
                                           quantized_bias.quant.scale.astype(np.float32), np.int32(0), 0,
                                           gate, bias))
            dropped.add(node.input[2])
            result.biases.append(node.input[2])
    kept = [i for i in graph.initializer if i.name not in dropped]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    # Old exporters list the weights among the graph inputs too: a DQ writes them now, and a
    # name both an input and a node's output is two definitions (onnxruntime refuses it).
    inputs = [i for i in graph.input if i.name not in dropped]
    del graph.input[:]
    graph.input.extend(inputs)
    return dequantize, dropped


def _own(index: GraphIndex, name: str) -> onnx.TensorProto | None:
    """The tensor of the constant `name` if only one input of one node reads it (else None)."""
    return index.tensor(name) if len(index.readers.get(name, [])) == 1 else None


def _onnx_scales(quant, factor: np.ndarray) -> np.ndarray | None:
    """The scales that quantize the ONNX weight to the IR's integers: the IR's over |f_c|. Per
    tensor (--per-tensor-fc) only when every channel has the same factor."""
    scales = np.broadcast_to(quant.scale.astype(np.float64), factor.shape) / factor
    if quant.axis is None:
        if not np.allclose(scales, scales[0], rtol=1e-6, atol=0):
            return None
        scales = scales[:1]
    return scales.astype(np.float32)


def _channel_factor(w: np.ndarray, axis: int, ir: np.ndarray, ir_axis: int) -> np.ndarray | None:
    """|f_c| with the IR weight's output channel c = f_c x the ONNX weight's, or None when they
    are not related so (another factor along the input channels, another shape)."""
    channels = w.shape[axis]
    if ir.ndim == 0 or ir.shape[ir_axis] != channels or ir.size != w.size:
        return None
    onnx_abs = np.abs(np.moveaxis(w, axis, 0).reshape(channels, -1)).astype(np.float64)
    ir_abs = np.abs(np.moveaxis(ir, ir_axis, 0).reshape(channels, -1)).astype(np.float64)
    onnx_max, ir_max = onnx_abs.max(1), ir_abs.max(1)
    if np.any((onnx_max == 0) != (ir_max == 0)):
        return None
    factor = np.where(onnx_max > 0, ir_max / np.where(onnx_max > 0, onnx_max, 1), 1.0)
    # The sum of magnitudes scales with the channel too: a factor along another axis breaks it.
    if not np.allclose(ir_abs.sum(1), factor * onnx_abs.sum(1), rtol=1e-4, atol=0):
        return None
    return factor


def _onnx_integers(w: np.ndarray, axis: int, factor: np.ndarray, ir: np.ndarray, ir_q: np.ndarray,
                   ir_axis: int) -> np.ndarray:
    """The IR's integers `ir_q` (of its float weight `ir`) in the layout of the ONNX weight `w`, taken
    from the IR rather than computed again: TFLite's quantizer multiplies by 127 / max|w| in
    float32, and w / s rounds the other way at near-ties (1 weight in 9216 of a test conv).

    Along an output channel c the IR's float weight is the ONNX one rearranged and multiplied by
    f_c (|f_c| = `factor`: folds multiply output channels), so the k-th smallest ONNX value is the
    k-th smallest IR value times sign(f_c), and its integer is sign(f_c) times that value's
    integer. sign(f_c) is the one that lines the sorted values up."""
    channels = w.shape[axis]
    same = _same_order(w, axis, factor, ir, ir_q, ir_axis)
    if same is not None:
        return same
    rows = np.moveaxis(w, axis, 0).reshape(channels, -1).astype(np.float64)
    ir_rows = np.moveaxis(ir, ir_axis, 0).reshape(channels, -1).astype(np.float64)
    ir_q_rows = np.moveaxis(ir_q, ir_axis, 0).reshape(channels, -1).astype(np.int64)
    ranked, ir_ranked = np.sort(rows, 1) * factor[:, None], np.sort(ir_rows, 1)
    sign = np.where(np.abs(ir_ranked + ranked[:, ::-1]).max(1) < np.abs(ir_ranked - ranked).max(1), -1, 1)
    order = np.argsort(ir_rows * sign[:, None], 1, kind="stable")
    q_rows = np.empty_like(ir_q_rows)
    np.put_along_axis(q_rows, np.argsort(rows, 1, kind="stable"),
                      np.take_along_axis(ir_q_rows, order, 1) * sign[:, None], 1)
    return np.moveaxis(q_rows.reshape(np.moveaxis(w, axis, 0).shape), 0, axis)


def _same_order(w: np.ndarray, axis: int, factor: np.ndarray, ir: np.ndarray, ir_q: np.ndarray,
                ir_axis: int) -> np.ndarray | None:
    """_onnx_integers without sorting, where each IR row is the ONNX row times +-f_c in float32
    in the ONNX row's order, or a conv's (in, kh, kw) as (kh, kw, in): the integers moved back the
    same way, times the sign. None when neither holds exactly."""
    onnx_rows = np.moveaxis(w, axis, 0)
    ir_rows = np.moveaxis(ir, ir_axis, 0)
    ir_q_rows = np.moveaxis(ir_q, ir_axis, 0)
    scale = factor.astype(np.float32).reshape((-1,) + (1,) * (onnx_rows.ndim - 1))
    ir_flat = ir_rows.reshape(len(ir_rows), -1)
    orders = [tuple(range(onnx_rows.ndim))]
    if onnx_rows.ndim == 4:
        orders.append((0, 2, 3, 1))  # (out, in, kh, kw) as (out, kh, kw, in)
    for order in orders:
        moved = (onnx_rows * scale).transpose(order)
        if moved.shape[0] != ir_flat.shape[0] or moved.size != ir_flat.size:
            continue
        flat = moved.reshape(ir_flat.shape)
        positive, negative = np.all(flat == ir_flat, 1), np.all(flat == -ir_flat, 1)
        if np.all(positive | negative):
            sign = np.where(positive, 1, -1).reshape((-1,) + (1,) * (ir_q_rows.ndim - 1))
            signed = ir_q_rows.astype(np.int64) * sign
            return np.moveaxis(signed.reshape(onnx_rows.transpose(order).shape).transpose(np.argsort(order)), 0, axis)
    return None


def _constant_dq(graph, names: FreshNames, target: str, values: np.ndarray, scales: np.ndarray,
                 zero_point: np.generic, axis: int, gate: tuple[_Gates, str] | None = None,
                 float_value: onnx.TensorProto | None = None) -> list[onnx.NodeProto]:
    """DequantizeLinear(integer initializer `values`, at `zero_point`) -> `target` (what the readers
    read): per slice along `axis`, or per tensor for a single scale. Behind `gate` (its _Gates and
    input), Where(gate, the DQ's value, `float_value` kept under a fresh name) -> target."""
    zeros = np.full(scales.shape, zero_point, zero_point.dtype)
    per_axis = scales.size > 1
    if not per_axis:
        scales, zeros = scales.reshape(()), zeros.reshape(())
    q = _initializer(graph, names, f"{target}_quantized", values)
    s = _initializer(graph, names, f"{target}_scale", scales)
    z = _initializer(graph, names, f"{target}_zero_point", zeros)
    attributes = {"axis": axis} if per_axis else {}
    dequantized = target if gate is None else names.fresh(f"{target}_fq_value")
    nodes = [helper.make_node("DequantizeLinear", [q, s, z], [dequantized],
                              name=names.fresh(f"{target}_dq"), **attributes)]
    if gate is not None:
        kept = onnx.TensorProto()
        kept.CopyFrom(float_value)
        kept.name = names.fresh(f"{target}_float")
        graph.initializer.append(kept)
        nodes = [gate[0].branch(gate[1], nodes, dequantized, kept.name, target)]
    return nodes
