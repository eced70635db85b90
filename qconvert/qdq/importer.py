"""QDQ import: the quantization params a model carries in its QuantizeLinear/DequantizeLinear pairs.

onnxruntime's quantize_static (QDQ format), PyTorch QAT/PT2E exports, NVIDIA ModelOpt and AMD Quark
write a fake-quant as a QuantizeLinear -> DequantizeLinear pair around each tensor the int8 graph
quantizes, and weights as an int8 initializer -> DequantizeLinear (or float -> Q -> DQ), biases as
int32 -> DequantizeLinear. TOCO read its ranges from FakeQuant nodes the same way.

`strip_qdq` rewrites the ONNX graph, before it is loaded, into the float graph the pairs describe:
- an activation pair Q(x) -> DQ is removed, its readers read x, and x's range is recorded as the
  span of the pair's integer grid: [(qmin - zp) * scale, (qmax - zp) * scale]. The quantize steps
  choose params from a range with the same formula, so they give back exactly this scale and zero
  point (a uint8 grid's range gives the int8 zero point zp - 128 at the same scale, TFLite's
  shift);
- a constant under DQ (or under Q -> DQ) becomes the float initializer it dequantizes to, the
  values the model computes with. Weights quantized symmetric per channel onto [-127, 127] (what
  onnxruntime, PyTorch and TFLite write) requantize to the same integers and scales; a bias
  requantizes to the same int32 at input scale x weight scale. But an int8 or uint8 embedding
  table with one scale and zero point, gathered then dequantized (or dequantized, then read by
  Gathers only), keeps its DQ: the loader keeps the table integer (onnx/dynamic_quant.py).
An int16 pair gives its range the same way (symmetric: a zero point is widened away, with a
warning), and the nodes writing and reading the tensor run their 16x8 kernels where TFLite has one
(int16_nodes).
Per-axis activation params and DequantizeLinear of a graph input are refused, naming
the node (not built yet). The graph stays valid ONNX throughout: a DQ output that is a graph output
becomes an Identity of x. Ranges `qconvert fakequant` keeps in the metadata (RANGES_KEY) for
intermediate tensors the loader creates are read back too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import ConversionError
from ..ir import MinMax, Model, counterpart
from ..onnx.graph import GraphIndex
from ..onnx.loader import node_names, onnx_names
from ..ops.dynamic_quant import table_dequantization
from ..transforms.quantization import QDQ_SOURCE, params_for_range, set_loaded_ranges
from .names import FreshNames

# Metadata `qconvert fakequant` writes (qdq/fakequant.py): {IR array name: [min, max]} for the int8
# tensors that have no ONNX tensor to carry a pair (a decomposition's intermediates).
RANGES_KEY = "qconvert.fakequant.ranges"
# ... and "int16" when it was written for --activations int16 (every op with a 16x8 kernel), and
# {"float": {node: why}, "int16": [node]}: the nodes the conversion kept float or ran 16x8 by
# request (--keep-float, the precision planner), which no pair says.
ACTIVATIONS_KEY = "qconvert.fakequant.activations"
PRECISION_KEY = "qconvert.fakequant.precision"
# zero point dtype -> the integer grid (qmin, qmax)
_GRIDS = {np.dtype(np.int8): (-128, 127), np.dtype(np.uint8): (0, 255)}


@dataclass
class QdqRanges:
    """What strip_qdq found: activation ranges by ONNX tensor name, and the constants it turned
    into float (weights, biases) with their integer dtype."""

    activations: dict[str, tuple[float, float]] = field(default_factory=dict)
    constants: dict[str, str] = field(default_factory=dict)
    # What TFLite makes the importer change, one line each: a bias not at input scale x weight
    # scale (requantized to it), an int16 pair with a zero point (made symmetric).
    warnings: list[str] = field(default_factory=list)
    # Nodes that write a tensor with an int16 pair or read one: their 16x8 kernels.
    int16_nodes: list[str] = field(default_factory=list)
    activations_type: str = "int8"  # "int16": a fake-quant graph of --activations int16 (metadata)
    float_nodes: dict[str, str] = field(default_factory=dict)  # node -> why it stays float (metadata)

    def __bool__(self) -> bool:
        return bool(self.activations or self.constants)


def _label(node: onnx.NodeProto) -> str:
    return f"node {node.name!r} ({node.op_type})" if node.name else f"a {node.op_type} node"


def _params(g: GraphIndex, node: onnx.NodeProto, finite: bool = True) -> tuple[np.ndarray, np.ndarray, int]:
    """(scale, zero point, axis) of a Q or DQ node; both constant, the zero point's dtype naming
    the grid (int8 when absent, as ONNX says); the scale finite and positive unless not `finite`
    (the caller decides: an activation pair without a usable scale stays float)."""
    scale = g.constant(node.input[1]) if len(node.input) > 1 else None
    if scale is None:
        raise ConversionError(f"{_label(node)}: its scale {node.input[1] if len(node.input) > 1 else ''!r} "
                              "is not a constant")
    zero = g.constant(node.input[2]) if len(node.input) > 2 and node.input[2] else np.zeros((), np.int8)
    if zero is None:
        raise ConversionError(f"{_label(node)}: its zero point {node.input[2]!r} is not a constant")
    axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
    if scale.ndim > 1 or (zero.ndim > 0 and zero.shape != scale.shape):
        raise ConversionError(f"{_label(node)}: scale of shape {list(scale.shape)} and zero point of "
                              f"shape {list(zero.shape)}: ONNX wants one shape, a scalar or a vector")
    if finite and not _usable(scale):
        raise ConversionError(f"{_label(node)}: scale {scale.tolist() if scale.size < 9 else scale.shape} "
                              "must be finite and positive")
    return scale.astype(np.float32), zero, axis


def _usable(scale: np.ndarray) -> bool:
    return bool(np.all(np.isfinite(scale)) and np.all(scale > 0))


def _along(values: np.ndarray, rank: int, axis: int) -> np.ndarray:
    """A per-axis vector shaped to broadcast along `axis` of a rank-`rank` array."""
    if values.ndim == 0 or values.size == 1:
        return values.reshape(())
    if values.ndim != 1 or not -rank <= axis < rank:
        raise ValueError(f"params of shape {list(values.shape)} along axis {axis} of a rank-{rank} tensor")
    shape = [1] * rank
    shape[axis % rank] = values.size
    return values.reshape(shape)


def _checked(node: onnx.NodeProto, x: str, shape, compute, *args):
    """compute(*args), its shape errors (params that do not fit the tensor) as one line naming
    `node`."""
    try:
        return compute(*args)
    except ValueError as e:
        raise ConversionError(f"{_label(node)}: its scale and zero point do not fit {x!r} of shape "
                              f"{list(shape)}: {e}") from None


def _dequantized(q: np.ndarray, scale, zero, axis: int) -> np.ndarray:
    rank = q.ndim
    return ((q.astype(np.float64) - _along(zero, rank, axis).astype(np.float64))
            * _along(scale, rank, axis).astype(np.float64)).astype(np.float32)


def _fake_quantized(x: np.ndarray, scale, zero, axis: int, node) -> np.ndarray:
    """DQ(Q(x)) of a float constant (ONNX QuantizeLinear rounds half to even and saturates)."""
    if zero.dtype not in _GRIDS:
        raise ConversionError(f"{_label(node)}: a {zero.dtype} grid is not supported (int8, uint8)")
    low, high = _GRIDS[zero.dtype]
    rank = x.ndim
    q = np.clip(np.rint(x / _along(scale, rank, axis)) + _along(zero, rank, axis).astype(np.float64),
                low, high)
    return _dequantized(q, scale, zero, axis)


def strip_qdq(proto: onnx.ModelProto, clip: bool = False) -> QdqRanges:
    """Rewrites `proto` in place (see the module docstring); its initializers must hold their
    data (OnnxFile.restore_weights). Returns what it found.

    With `clip` (a float conversion, no --quantize), an activation pair becomes a Clip to its
    range instead of nothing: quantizers drop a Relu whose clipping the pair's grid does (a
    uint8 grid starting at 0), and the float model must still clip. Only the rounding is lost."""
    g = GraphIndex(proto.graph, constant_attributes=("value",))
    rewrite = _Rewrite(proto, g, QdqRanges(warnings=_bias_scale_warnings(g)),
                       FreshNames(onnx_names(proto.graph)), clip)
    for node in list(proto.graph.node):
        if node.op_type == "DequantizeLinear" and node.domain in ("", "ai.onnx"):
            rewrite.dequantize(node)
    leftover = next((n for n in proto.graph.node
                     if n.op_type == "QuantizeLinear" and id(n) not in rewrite.removed), None)
    if leftover is not None:
        raise ConversionError(f"{_label(leftover)}: a QuantizeLinear without a DequantizeLinear after "
                              "it (an integer graph output) is not supported yet")
    found = rewrite.found
    found.int16_nodes = rewrite.finish()
    _read_metadata(proto, found)
    return found


@dataclass
class _Rewrite:
    """One strip_qdq: what it found so far, the nodes it removes (by id) and what takes their
    place."""

    proto: onnx.ModelProto
    g: GraphIndex
    found: QdqRanges
    names: FreshNames  # for the float copies of moved integer tables
    clip: bool
    removed: set[int] = field(default_factory=set)
    int16_nodes: list[onnx.NodeProto] = field(default_factory=list)  # to run 16x8 kernels: around int16 pairs
    # a removed DQ's replacement where the DQ was: its Clip, or the data movement redone in float
    in_place: dict[int, onnx.NodeProto | list[onnx.NodeProto]] = field(default_factory=dict)
    appended: list[onnx.NodeProto] = field(default_factory=list)  # Identity nodes, last (their sources come before)

    def dequantize(self, node: onnx.NodeProto) -> None:
        """Takes the DequantizeLinear `node` out (or keeps it: an integer embedding table)."""
        g, found, x, y = self.g, self.found, node.input[0], node.output[0]
        dynamic = _dynamically_quantized(g, node)
        if dynamic is not None:
            # quantize_dynamic's activation moved in int8 (a Transpose) and dequantized at its
            # run-time scale: the same movement in float (the rounding dropped, judged by SQNR)
            source, moved = dynamic
            self.in_place[id(node)] = _moves_redone(self.names, node, moved, source)
            _drop_unread_moves(g, node, moved, self.removed)
            self.removed.add(id(node))
            return
        scale, zero, axis = _params(g, node, finite=False)
        value = g.constant(x)
        quantize = g.producers.get(x)
        if not _usable(scale) and value is None and quantize is not None \
                and quantize.op_type == "QuantizeLinear" and g.constant(quantize.input[0]) is None:
            _unusable_pair(g, node, quantize, scale, found, self.removed, self.appended)
            return
        if not _usable(scale):
            _params(g, node)  # refused in one line naming the node
        if table_dequantization(node, g.constant, g.producers.get, g.uses, g.outputs):
            # An integer embedding table gathered: the loader keeps it integer (TFLite's GATHER
            # reads it, a DEQUANTIZE makes the rows float; onnx/dynamic_quant.py): the DQ stays.
            table = value if value is not None else g.constant(quantize.input[0])
            found.constants[y] = str(table.dtype)
            return
        if value is not None:  # an integer initializer: a weight or a bias
            _replace_by_constant(g, node, _checked(node, x, value.shape, _dequantized, value, scale,
                                                   zero, axis))
            found.constants[y] = str(value.dtype)
        elif quantize is not None and quantize.op_type == "QuantizeLinear":
            self._pair(node, quantize, scale, zero)
            return
        elif scale.size == 1 and zero.size == 1 and (moved := _moved_constant(g, quantize)):
            # An int8 table gathered (an embedding), reshaped or transposed before its DQ: with one
            # scale and zero point the DQ commutes with the data movement, so the table is
            # dequantized once and the movement repeated on it in float, in the DQ's place.
            self.in_place[id(node)] = _dequantized_moves(g, self.names, node, moved, scale, zero, axis)
            found.constants[y] = str(g.constant(moved[-1].input[0]).dtype)
            _drop_unread_moves(g, node, moved, self.removed)
        else:
            raise ConversionError(f"{_label(node)}: dequantizes {x!r}, which is neither a constant, a "
                                  "constant moved by Gather/Reshape/Transpose/Squeeze/Unsqueeze/"
                                  "Flatten/Slice, nor a QuantizeLinear's output (an int8 graph input "
                                  "is not supported yet)")
        self.removed.add(id(node))

    def _pair(self, node: onnx.NodeProto, quantize: onnx.NodeProto, scale: np.ndarray,
              zero: np.ndarray) -> None:
        """A Q `quantize` -> DQ `node` pair goes: on a float constant, the constant becomes the
        values it fake-quantizes to; on an activation, its range is recorded (_activation). The
        Q goes too once nothing else reads it."""
        g, source = self.g, quantize.input[0]
        q_scale, q_zero, q_axis = _params(g, quantize)
        source_value = g.constant(source)
        if source_value is not None:  # a float weight with its fake-quant
            _replace_by_constant(g, node, _checked(quantize, source, source_value.shape, _fake_quantized,
                                                   source_value, q_scale, q_zero, q_axis, quantize))
            self.found.constants[node.output[0]] = str(q_zero.dtype)
        else:
            self._activation(node, source, scale, zero)
        self.removed.add(id(node))
        if not any(id(r) not in self.removed for r in g.readers.get(quantize.output[0], [])):
            self.removed.add(id(quantize))

    def _activation(self, node: onnx.NodeProto, source: str, scale: np.ndarray, zero: np.ndarray) -> None:
        """The activation `source`'s pair, DQ `node`: its range recorded, its readers reading
        `source` (through a Clip to the grid with `clip`, or when the range is wider)."""
        y = node.output[0]
        if scale.size != 1 or zero.size != 1:
            raise ConversionError(f"{_label(node)}: per-axis params on activation {source!r} "
                                  "are not supported (TFLite quantizes activations per tensor)")
        grid, span = self._grid(node, source, float(scale.reshape(())), int(zero.reshape(())), zero.dtype)
        self.found.activations.setdefault(source, span)
        # A wider range than the grid (int16 made symmetric) loses the grid's clipping,
        # which may stand for a dropped Relu: a Clip keeps it, as in a float conversion.
        if self.clip or grid != span:  # before the DQ output's readers, as the DQ was
            self.in_place[id(node)] = _clip(self.proto, source, y, grid)
            self.found.activations.setdefault(y, span)
            if zero.dtype == np.int16:
                self.int16_nodes.append(self.in_place[id(node)])
        else:
            if y in self.g.outputs:  # kept as Identity(source): the same values
                self.found.activations.setdefault(y, span)
            _bypass(self.g, node, source, self.appended)

    def _grid(self, node: onnx.NodeProto, source: str, s: float, z: int, dtype: np.dtype):
        """(the pair's grid, the range recorded for `source`) of scale `s` and zero point `z` on
        a `dtype` grid. An int16 pair's range is symmetric (with a warning when `z` is not 0),
        and the nodes around it run 16x8."""
        if dtype == np.int16:
            # What TFLite's symmetric int16 chooser maps back to s (zero point 0); a
            # symmetric pair's -32768 is not a value the kernels use.
            grid = ((-32768 - z) * s, (32767 - z) * s) if z else (-32767 * s, 32767 * s)
            bound = max(-grid[0], grid[1])
            if z != 0:
                self.found.warnings.append(
                    f"tensor {source!r}: its int16 QDQ pair has zero point {z}; TFLite's 16x8 "
                    f"kernels take zero point 0, so it is written symmetric over the pair's "
                    f"range: step {s:.3g} -> {bound / 32767:.3g}")
            self.int16_nodes.extend(self.g.readers.get(node.output[0], []))
            if source in self.g.producers:
                self.int16_nodes.append(self.g.producers[source])
            return grid, (-bound, bound)
        if dtype in _GRIDS:
            low, high = _GRIDS[dtype]
            grid = ((low - z) * s, (high - z) * s)
            return grid, grid
        raise ConversionError(f"{_label(node)}: a {dtype} grid on {source!r} is not "
                              "supported (int8, uint8 and int16 are)")

    def finish(self) -> list[str]:
        """Puts each removed node's replacement (one node, or several) where it was, the
        appended nodes last; returns the names (as the loader will name them) of the nodes to
        run 16x8."""
        graph, final = self.proto.graph, []
        for n in graph.node:
            if id(n) in self.in_place:
                replacement = self.in_place[id(n)]
                final.extend(replacement if isinstance(replacement, list) else [replacement])
            elif id(n) not in self.removed:
                final.append(n)
        final += self.appended
        marked = {id(n) for n in self.int16_nodes}
        places = [k for k, n in enumerate(final) if id(n) in marked]
        del graph.node[:]
        graph.node.extend(final)  # copies
        names = node_names(self.proto)
        return [names[k] for k in places]


def _read_metadata(proto: onnx.ModelProto, found: QdqRanges) -> None:
    """qconvert's own fake-quant graph: its metadata's ranges are the conversion's own (they win
    over a pair's grid, which they contain), and its metadata says which nodes run 16x8 and
    which stay float."""
    metadata = {p.key: p.value for p in reversed(proto.metadata_props)}  # a key given twice: the first
    found.activations.update(_metadata_ranges(metadata))
    mode = metadata.get(ACTIVATIONS_KEY, "int8")
    if mode not in ("int8", "int16"):
        raise ConversionError(f"metadata {ACTIVATIONS_KEY!r}: {mode[:40]!r}, expected int8 or int16")
    found.activations_type = mode
    found.float_nodes, int16 = _metadata_precision(metadata)
    if RANGES_KEY in metadata:  # written by fakequant
        found.int16_nodes = int16


def _metadata_json(metadata: dict[str, str], key: str, absent):
    """The JSON value of metadata `key`: `absent` when the model has none, None when it is not
    JSON (the caller's check names the key)."""
    if key not in metadata:
        return absent
    try:
        return json.loads(metadata[key])
    except ValueError:
        return None


def _metadata_precision(metadata: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """The float and int16 nodes `qconvert fakequant` left in the metadata (PRECISION_KEY);
    malformed ones are a ConversionError naming the key."""
    precision = _metadata_json(metadata, PRECISION_KEY, {})
    float_nodes = precision.get("float", {}) if isinstance(precision, dict) else None
    int16 = precision.get("int16", []) if isinstance(precision, dict) else None
    if not (isinstance(float_nodes, dict) and all(isinstance(v, str) for v in float_nodes.values())
            and isinstance(int16, list) and all(isinstance(n, str) for n in int16)):
        raise ConversionError(f"metadata {PRECISION_KEY!r}: expected {{\"float\": {{node: reason}}, "
                              "\"int16\": [node]}")
    return float_nodes, int16


def _metadata_ranges(metadata: dict[str, str]) -> dict[str, tuple[float, float]]:
    """The ranges `qconvert fakequant` left in the metadata (RANGES_KEY); malformed ones are a
    ConversionError naming the key."""
    ranges = _metadata_json(metadata, RANGES_KEY, {})
    if not isinstance(ranges, dict):
        raise ConversionError(f"metadata {RANGES_KEY!r}: expected a JSON object of tensor: [min, max]")
    spans = {}
    for name, span in ranges.items():
        if not (isinstance(span, list) and len(span) == 2
                and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in span)
                and np.isfinite(span).all() and span[0] <= span[1]):
            raise ConversionError(f"metadata {RANGES_KEY!r}: tensor {name!r} has {span!r}, not a "
                                  "finite [min, max] range")
        spans[name] = (float(span[0]), float(span[1]))
    return spans


def _dq_scale(g: GraphIndex, name: str, constant: bool) -> np.ndarray | None:
    """The scale of the DequantizeLinear writing `name`: one of a constant (`constant`) or of a
    Q -> DQ pair on an activation; None otherwise."""
    dq = g.producers.get(name)
    if dq is None or dq.op_type != "DequantizeLinear":
        return None
    source = g.producers.get(dq.input[0])
    if constant != (g.constant(dq.input[0]) is not None) or (
            not constant and (source is None or source.op_type != "QuantizeLinear")):
        return None
    return _params(g, dq)[0].reshape(-1)


def _bias_scale_warnings(g: GraphIndex) -> list[str]:
    """A Conv's or Gemm's int32 bias under DequantizeLinear must be at input scale x weight scale
    (per output channel), the scale TFLite's kernels read it at; one warning for each that is not
    (it is requantized to that scale: the error is at most half the new step)."""
    warnings = []
    for node in g.graph.node:
        if node.op_type not in ("Conv", "Gemm") or len(node.input) < 3 or not node.input[2]:
            continue
        bias_scale = _dq_scale(g, node.input[2], constant=True)
        input_scale = _dq_scale(g, node.input[0], constant=False)
        weight_scale = _dq_scale(g, node.input[1], constant=True)
        if bias_scale is None or input_scale is None or weight_scale is None:
            continue
        if input_scale.size != 1 or bias_scale.size not in (1, weight_scale.size):
            continue  # params that fit no tensor: the rewrite refuses them, naming the node
        expected = (input_scale * weight_scale).astype(np.float32)
        if bias_scale.shape != np.broadcast_shapes(bias_scale.shape, expected.shape) or not np.allclose(
                bias_scale, expected, rtol=1e-5, atol=0):
            warnings.append(f"{_label(node)}: its bias {node.input[2]!r} is quantized at scale "
                            f"{bias_scale[0]:.6g}, not input scale x weight scale ({expected[0]:.6g}, "
                            "TFLite's int32 bias): requantized to that scale")
    return warnings


def _clip(proto: onnx.ModelProto, source: str, y: str, span: tuple[float, float]) -> onnx.NodeProto:
    """Clip(source) to `span`, writing the DQ's output `y` (bounds as inputs from opset 11 on)."""
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 11)
    if opset < 11:
        return helper.make_node("Clip", [source], [y], min=span[0], max=span[1], name=f"{y}_qdq_clip")
    bounds = [f"{y}_qdq_min", f"{y}_qdq_max"]
    for name, value in zip(bounds, span):
        proto.graph.initializer.append(numpy_helper.from_array(np.array(value, np.float32), name))
    return helper.make_node("Clip", [source, *bounds], [y], name=f"{y}_qdq_clip")


# Ops that move an input's values without computing new ones (input 0: the data).
_DATA_MOVEMENT = ("Gather", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Slice")


def _moved_constant(g: GraphIndex, node: onnx.NodeProto | None) -> list[onnx.NodeProto] | None:
    """The data-movement ops that carry an integer constant to `node`'s output (`node` first,
    the one reading the constant last), or None."""
    chain = []
    while node is not None and node.op_type in _DATA_MOVEMENT and node.domain in ("", "ai.onnx"):
        chain.append(node)
        value = g.constant(node.input[0])
        if value is not None:
            return chain if np.issubdtype(value.dtype, np.integer) else None
        node = g.producers.get(node.input[0])
    return None


def _unusable_pair(g: GraphIndex, node: onnx.NodeProto, quantize: onnx.NodeProto, scale: np.ndarray,
                   found: QdqRanges, removed: set, appended: list) -> None:
    """quantize_static's pair (Q `quantize`, DQ `node`) on a tensor no int8 grid spans (an
    attention mask at the float minimum: scale inf) goes: the tensor stays float, as if it had no
    pair, with a warning naming the node."""
    found.warnings.append(f"{_label(node)}: scale {scale.reshape(-1)[0]:.3g} quantizes "
                          f"{quantize.input[0]!r} to nothing usable; it stays float")
    _bypass(g, node, quantize.input[0], appended)
    removed.add(id(node))
    if not any(id(r) not in removed for r in g.readers.get(quantize.output[0], [])):
        removed.add(id(quantize))


def _dynamically_quantized(g: GraphIndex, node: onnx.NodeProto) -> tuple[str, list] | None:
    """(the float activation, the data-movement ops from it) when the DQ `node` dequantizes a
    DynamicQuantizeLinear's output, moved by those ops, at that DynamicQuantizeLinear's own
    run-time scale and zero point; else None."""
    moved, producer = [], g.producers.get(node.input[0])
    while producer is not None and producer.op_type in _DATA_MOVEMENT and producer.domain in ("", "ai.onnx"):
        moved.append(producer)
        producer = g.producers.get(producer.input[0])
    if producer is None or producer.op_type != "DynamicQuantizeLinear" or \
            list(node.input[1:3]) != list(producer.output[1:1 + len(node.input[1:3])]):
        return None
    return producer.input[0], moved


def _drop_unread_moves(g: GraphIndex, node: onnx.NodeProto, moved: list[onnx.NodeProto], removed: set) -> None:
    """The integer data-movement ops `moved` (the DQ `node`'s first) go once nothing else reads
    them."""
    for mover in moved:
        readers = g.readers.get(mover.output[0], [])
        if mover.output[0] in g.outputs or any(r is not node and id(r) not in removed for r in readers):
            break
        removed.add(id(mover))


def _moves_redone(names: FreshNames, node: onnx.NodeProto, moved: list[onnx.NodeProto],
                  source: str) -> list[onnx.NodeProto]:
    """Copies of the data-movement ops `moved` (the DQ `node`'s first) reading the float `source`,
    the last one writing the DQ's output (an Identity when there are none)."""
    if not moved:
        return [helper.make_node("Identity", [source], [node.output[0]], name=f"{node.output[0]}_float")]
    copies = []
    for k, mover in enumerate(reversed(moved)):
        copy = onnx.NodeProto()
        copy.CopyFrom(mover)
        copy.input[0] = source
        source = node.output[0] if k == len(moved) - 1 else names.fresh(f"{mover.output[0]}_dequantized")
        copy.output[0] = source
        copy.name = f"{mover.name}_for_{node.output[0]}" if mover.name else ""  # one per DQ
        copies.append(copy)
    return copies


def _dequantized_moves(g: GraphIndex, names: FreshNames, node: onnx.NodeProto, moved: list[onnx.NodeProto],
                       scale, zero, axis: int) -> list[onnx.NodeProto]:
    """Copies of the data-movement ops `moved` reading the dequantized constant, the last one
    writing the DQ `node`'s output; the integer originals stay for any other reader (or go as
    unused)."""
    first = moved[-1]
    table = g.constant(first.input[0])
    source = names.fresh(f"{first.input[0]}_dequantized")
    g.add_initializer(numpy_helper.from_array(_checked(
        node, first.input[0], table.shape, _dequantized, table, scale, zero, axis), source))
    return _moves_redone(names, node, moved, source)


def _replace_by_constant(g: GraphIndex, node: onnx.NodeProto, value: np.ndarray) -> None:
    """The DQ's output becomes a float initializer."""
    g.graph.initializer.append(numpy_helper.from_array(value, node.output[0]))


def _bypass(g: GraphIndex, node: onnx.NodeProto, source: str, appended: list) -> None:
    """The readers of the DQ's output read `source`; a graph output keeps its name (Identity)."""
    y = node.output[0]
    for reader in g.readers.get(y, []):
        for k, name in enumerate(reader.input):
            if name == y:
                reader.input[k] = source
        g.readers.setdefault(source, []).append(reader)
    if y in g.outputs:
        appended.append(helper.make_node("Identity", [source], [y], name=f"{y}_qdq_identity"))


def with_model_precision(options, found: QdqRanges):
    """The QuantizeOptions with the precision the model states beyond its ranges: the nodes its
    int16 pairs (or its metadata) ask to run 16x8, --activations int16 and the nodes kept float
    from `qconvert fakequant`'s metadata. The command line's own choices win."""
    if found.int16_nodes:
        options = replace(options, int16_nodes={
            **dict.fromkeys(found.int16_nodes, "its QDQ pairs are int16"), **options.int16_nodes})
    if found.activations_type == "int16":
        options = replace(options, activations="int16")
    if found.float_nodes:
        kept = {node: _as_float(reason) for node, reason in found.float_nodes.items()}
        options = replace(options, keep_float={**kept, **options.keep_float})
    return options


def _as_float(reason: str) -> str:
    """A metadata node's reason as this conversion keeps it: float. fakequant records the plan's
    every non-int16 promotion there, a hybrid one ("kept hybrid: why") too, and the fake-quant
    file cannot say hybrid (no pair does), so the written op is float, with float32 weights:
    the summary must say so."""
    head, colon, why = reason.partition(": ")
    if colon and head.startswith("kept ") and head != "kept float":
        return f"kept float ({head.removeprefix('kept ')} in fakequant's plan): {why}"
    return reason


def apply_qdq_ranges(model: Model, found: QdqRanges) -> int:
    """Sets the recorded ranges on the IR arrays named after their ONNX tensors (the IR fresh
    from the loader, as calibration sets its own); returns how many it set."""
    return set_loaded_ranges(model, found.activations, QDQ_SOURCE)


def changed_params(model: Model, found: QdqRanges) -> list[str]:
    """One warning per tensor whose written int8 params are not its QDQ pair's: TFLite fixes some
    params (a same-scale op's output, MAX_POOL_2D or CONCATENATION, takes its input's; LOGISTIC
    and SOFTMAX outputs are 1/256), and a model's pairs may say otherwise. Each names the tensor,
    both params, and the error the change adds: the range it cuts off or the step it coarsens."""
    warnings = []
    for name, array in model.arrays.items():
        q = array.quant
        if q is None or q.axis is not None or array.is_constant or array.dtype != np.int8:
            continue
        match = counterpart(name, found.activations.keys(), {})
        if match is None:
            continue
        wanted = params_for_range(MinMax(*found.activations[match[0]]))
        scale, zero = float(q.scale.reshape(-1)[0]), int(q.zero_point.reshape(-1)[0])
        want_scale, want_zero = float(wanted.scale.reshape(-1)[0]), int(wanted.zero_point.reshape(-1)[0])
        if np.float32(scale) == np.float32(want_scale) and zero == want_zero:
            continue
        low, high = found.activations[match[0]]
        new_low, new_high = (-128 - zero) * scale, (127 - zero) * scale
        producer = model.producer(name)
        if producer is not None and producer.type == "QUANTIZE":
            continue  # a copy requantized for a reader (a concatenation's): the tensor keeps its own
        why = f" as TFLite's {producer.type} requires" if producer is not None else ""
        warnings.append(f"tensor {match[0]!r}: the model's QDQ params (scale {want_scale:.6g}, zero "
                        f"point {want_zero}) are written as (scale {scale:.6g}, zero point {zero})"
                        f"{why}: its range [{low:.6g}, {high:.6g}] becomes [{new_low:.6g}, "
                        f"{new_high:.6g}], its step {want_scale:.3g} -> {scale:.3g}")
    return warnings


def unusable_pairs_bypassed(proto: onnx.ModelProto) -> int:
    """Takes out of `proto` (the reference onnxruntime runs) the activation pairs that the import
    keeps float for want of a usable scale (_unusable_pair: onnxruntime's quantizer gives a
    causal mask at the float minimum a scale of inf), their readers reading the unrounded tensor:
    onnxruntime computes NaN or zeros through such a pair, and the .tflite computes the tensor in
    float, so the reference must too. Returns how many pairs went."""
    g = GraphIndex(proto.graph)
    renamed: dict[str, str] = {}
    for node in proto.graph.node:
        if node.op_type != "DequantizeLinear" or node.domain not in ("", "ai.onnx"):
            continue
        quantize = g.producers.get(node.input[0])
        if quantize is None or quantize.op_type != "QuantizeLinear" or g.constant(quantize.input[0]) is not None:
            continue
        scale = g.constant(node.input[1]) if len(node.input) > 1 else None
        if scale is not None and not _usable(scale):
            renamed[node.output[0]] = quantize.input[0]
    if not renamed:
        return 0
    outputs = {o.name for o in proto.graph.output}
    for node in proto.graph.node:
        node.input[:] = [renamed.get(n, n) if n not in outputs else n for n in node.input]
        if node.op_type == "DequantizeLinear" and node.output[0] in renamed:
            if node.output[0] in outputs:  # a graph output keeps its name: Identity of the float tensor
                node.op_type, node.input[:] = "Identity", [renamed[node.output[0]]]
                del node.attribute[:]
    kept = [n for n in proto.graph.node if not (n.op_type == "DequantizeLinear" and n.output[0] in renamed)]
    del proto.graph.node[:]
    proto.graph.node.extend(kept)
    return len(renamed)
