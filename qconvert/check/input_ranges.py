"""The values a graph input can take, read from the graph: what the default check's generated
inputs are drawn from (runtimes.generated_samples), so that it feeds inputs the model can see.

- An integer input that indexes a table (a Gather's indices, through ops that only move or cast
  them) is an id: below the table's size along the gathered axis (a vocabulary, an embedding's
  rows), the smallest such size when it indexes several. A check on ids 0..9 of a 32000-token
  encoder passed what in-range ids fail (issue 38).
- A float input read by a QuantizeLinear (a model that arrives quantized) takes the span of its
  pair's integer grid: the values it was calibrated on, which the pair clips to anyway.
- An integer length compared with the positions of a dimension (`Range(0, S) < length`, a
  sequence mask) is drawn in [1, S] (length_bounds).
- An integer input that only meets arithmetic (value_inputs) takes any value: drawn wide.
- Other integer inputs that meet an index, a shape, a count or a divisor (a length, a step) are
  guesses (guessed_inputs): drawn small, and the check's summary names them.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..onnx.graph import uses_of

# Ops through which an id stays the same id (its values moved, cast or copied), by input slot.
_MOVING = {"Cast": 0, "Identity": 0, "Reshape": 0, "Unsqueeze": 0, "Squeeze": 0, "Flatten": 0,
           "Split": 0, "Transpose": 0, "Expand": 0, "Concat": None}


# (op type, input slot) pairs, or op types (every slot), through which an integer input is a
# value, never an index, a shape, a count or a divisor: such an input takes any value.
_VALUE_OPS = {"Add", "Sub", "Mul", "Max", "Min", "Sum", "Abs", "Neg", "Sign", "Equal", "Less",
              "Greater", "LessOrEqual", "GreaterOrEqual", "Cast", "CastLike", "Identity",
              "Concat", "Transpose", "Flatten", "BitwiseAnd", "BitwiseOr", "BitwiseXor",
              "BitwiseNot", "ArgMax", "ArgMin"}
_VALUE_SLOTS = {("Mod", 0), ("Div", 0), ("Where", 1), ("Where", 2), ("Clip", 0), ("Reshape", 0),
                ("Squeeze", 0), ("Unsqueeze", 0), ("ReduceSum", 0), ("ReduceMax", 0),
                ("ReduceMin", 0), ("CumSum", 0), ("Expand", 0), ("Tile", 0), ("Slice", 0),
                ("Gather", 0), ("Pad", 0)}


def value_inputs(graph: onnx.GraphProto) -> set[str]:
    """The graph inputs whose values reach only value slots (_VALUE_OPS, _VALUE_SLOTS): followed
    forward through every node that reads them, an input is left out as soon as one read is an
    index, shape, count or divisor, or of an op not listed (control flow included)."""
    from ..onnx.control_flow import outer_reads  # the op registry: only when inputs are drawn

    readers = uses_of(graph.node)
    for node in graph.node:
        for name in outer_reads([node]):  # slot -1: no value slot, like control flow's
            readers.setdefault(name, []).append((node, -1))
    values = set()
    for value in graph.input:
        reached, pending, fine = {value.name}, [value.name], True
        while pending and fine:
            for node, slot in readers.get(pending.pop(), []):
                fine = node.op_type in _VALUE_OPS or (node.op_type, slot) in _VALUE_SLOTS
                if not fine:
                    break
                fresh = [o for o in node.output if o and o not in reached]
                reached.update(fresh)
                pending.extend(fresh)
        if fine:
            values.add(value.name)
    return values


def _constant_tensors(graph: onnx.GraphProto) -> dict[str, onnx.TensorProto]:
    """The initializers and the Constant nodes' tensors, by name."""
    tensors = {t.name: t for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            tensors[node.output[0]] = node.attribute[0].t
    return tensors


def _constant_shapes(graph: onnx.GraphProto) -> dict[str, list[int]]:
    """Shapes of the initializers, the Constant nodes' values and the DequantizeLinear outputs of
    either (an int8 table)."""
    shapes = {name: list(t.dims) for name, t in _constant_tensors(graph).items()}
    for node in graph.node:
        if node.op_type == "DequantizeLinear" and node.input[0] in shapes:
            shapes[node.output[0]] = shapes[node.input[0]]
    return shapes


def _reads(readers: dict, name: str):
    """The (node, slot) reads of `name`'s values, followed through the ops that only move them
    (_MOVING), those ops left out."""
    pending, seen = [name], {name}
    while pending:
        for node, slot in readers.get(pending.pop(), []):
            if node.op_type in _MOVING and _MOVING[node.op_type] in (None, slot):
                fresh = [o for o in node.output if o and o not in seen]
                seen.update(fresh)
                pending.extend(fresh)
            else:
                yield node, slot


def id_bounds(graph: onnx.GraphProto) -> dict[str, int]:
    """{integer graph input: the size of the smallest table it indexes}; a RoiAlign's
    batch_indices index its image's batch (its static size, else the 1 a dynamic batch is set to)."""
    shapes = _constant_shapes(graph)
    readers = uses_of(graph.node)
    bounds = {}
    for value in graph.input:
        sizes = []
        for node, slot in _reads(readers, value.name):
            if node.op_type == "Gather" and slot == 1 and node.input[0] in shapes:
                axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
                table = shapes[node.input[0]]
                if -len(table) <= axis < len(table) and table[axis] > 0:
                    sizes.append(table[axis])
            elif node.op_type == "RoiAlign" and slot == 2:
                sizes.append(_batch_of(graph, node.input[0]))
        if sizes:
            bounds[value.name] = min(sizes)
    return bounds


def _batch_of(graph: onnx.GraphProto, name: str) -> int:
    """Axis 0's static size of the graph input or typed value `name`, else 1."""
    for value in list(graph.input) + list(graph.value_info):
        dims = value.type.tensor_type.shape.dim if value.name == name else ()
        if dims and dims[0].HasField("dim_value") and dims[0].dim_value > 0:
            return dims[0].dim_value
    return 1


_COMPARISONS = ("Less", "LessOrEqual", "Greater", "GreaterOrEqual")


def length_bounds(graph: onnx.GraphProto, shapes: dict[str, tuple[int, ...]]) -> dict[str, int]:
    """{integer graph input compared with the positions of a dimension, or read as a recurrent
    node's sequence_lens: that dimension's size, its X's time steps}.
    The positions are a Range whose limit is a dimension of a graph input (Gather of its Shape,
    through casts and reshapes), whose size `shapes` (the inputs' static shapes) gives: a length
    that masks a sequence (`Range(0, S) < length`) is drawn in [1, S], where a wide draw would
    never mask anything."""
    producers = {o: n for n in graph.node for o in n.output if o}
    readers = uses_of(graph.node)
    bounds = {}
    for value in graph.input:
        for node, slot in _reads(readers, value.name):
            size = None
            if node.op_type in _COMPARISONS and len(node.input) == 2:
                size = _range_size(producers, node.input[1 - slot], shapes)
            elif node.op_type in _RECURRENT and slot == 4:
                size = _time_steps(node, shapes)
            if size:
                bounds[value.name] = min(bounds.get(value.name, size), size)
    return bounds


_RECURRENT = ("LSTM", "GRU", "RNN")


def _time_steps(node: onnx.NodeProto, shapes: dict) -> int | None:
    """The time steps of a recurrent node's X when it is a graph input (its sequence_lens are
    drawn within them: onnxruntime refuses a longer one)."""
    layout = next((a.i for a in node.attribute if a.name == "layout"), 0)
    dims = shapes.get(node.input[0])
    return int(dims[layout]) if dims and len(dims) == 3 and int(dims[layout]) > 0 else None


def _range_size(producers: dict, name: str, shapes: dict) -> int | None:
    """The size of the dimension whose positions `name` holds (a Range up to Gather(Shape(x), k)
    through moving ops), or None."""
    node = producers.get(name)
    while node is not None and node.op_type in _MOVING:
        node = producers.get(node.input[0])
    if node is None or node.op_type != "Range" or len(node.input) < 2:
        return None
    limit = producers.get(node.input[1])
    while limit is not None and limit.op_type in ("Cast", "Squeeze", "Unsqueeze", "Reshape", "Identity"):
        limit = producers.get(limit.input[0])
    if limit is None or limit.op_type != "Gather":
        return None
    shape, index = producers.get(limit.input[0]), producers.get(limit.input[1])
    if shape is None or shape.op_type != "Shape" or shape.input[0] not in shapes:
        return None
    if index is None or index.op_type != "Constant" or not index.attribute:
        return None
    k = int(numpy_helper.to_array(index.attribute[0].t).reshape(-1)[0])
    dims = shapes[shape.input[0]]
    return int(dims[k]) if -len(dims) <= k < len(dims) and int(dims[k]) > 0 else None


def box_spans(graph: onnx.GraphProto) -> dict[str, tuple[float, float]]:
    """{float graph input read as NonMaxSuppression's boxes: [0, 1]}: boxes of a positive size
    in either of its formats (a standard normal draw gives center-format boxes negative widths,
    on which onnxruntime's and TFLite's IoU differ: no detector makes them)."""
    readers = uses_of(graph.node)
    return {value.name: (0.0, 1.0) for value in graph.input
            if any(node.op_type == "NonMaxSuppression" and slot == 0
                   for node, slot in _reads(readers, value.name))}


def pair_spans(graph: onnx.GraphProto) -> dict[str, tuple[float, float]]:
    """{float graph input read by a QuantizeLinear with one constant scale and zero point: the span
    of its integer grid, [(qmin - zp) * scale, (qmax - zp) * scale]}."""
    constants = {t.name: t for t in graph.initializer}
    inputs = {v.name for v in graph.input}
    spans = {}
    for node in graph.node:
        if (node.op_type != "QuantizeLinear" or node.input[0] not in inputs or len(node.input) < 3
                or node.input[1] not in constants or node.input[2] not in constants):
            continue
        scale = numpy_helper.to_array(constants[node.input[1]])
        zero = numpy_helper.to_array(constants[node.input[2]])
        if scale.size != 1 or zero.size != 1 or zero.dtype.kind not in "iu" or not np.isfinite(scale).all() \
                or float(scale) <= 0:
            continue
        grid = np.iinfo(zero.dtype)
        span = ((grid.min - int(zero)) * float(scale), (grid.max - int(zero)) * float(scale))
        previous = spans.get(node.input[0], span)
        spans[node.input[0]] = (max(span[0], previous[0]), min(span[1], previous[1]))
    return spans


def normalized_spans(graph: onnx.GraphProto) -> dict[str, tuple[float, float]]:
    """{float graph input that the graph normalizes, (x - mean) / std with constant mean and std
    (a torchvision detector's transform): the span the values take for the normalized ones to
    lie within two standard deviations, [min(mean - 2 std), max(mean + 2 std)]}. A standard
    normal draw is not what such a model sees (pixels in 0..1), and on it a detector saturates:
    every score 1.0, every box degenerate, a check of tie-breaks only."""
    constants = _constant_values(graph)
    readers = uses_of(graph.node)
    spans = {}
    for value in graph.input:
        reads = list(_reads(readers, value.name))
        found = [_normalization(node, readers, constants) if slot == 0 else None
                 for node, slot in reads]
        if reads and all(f is not None for f in found):
            low = min(float(np.min(mean - 2 * std)) for mean, std in found)
            high = max(float(np.max(mean + 2 * std)) for mean, std in found)
            spans[value.name] = (low, high)
    return spans


def _normalization(sub: onnx.NodeProto, readers: dict, constants: dict):
    """(mean, std) of a Sub of a constant mean whose only reader divides by (or multiplies by the
    inverse of) a positive constant std; None otherwise."""
    if sub.op_type != "Sub" or len(sub.input) != 2 or sub.input[1] not in constants:
        return None
    scale = readers.get(sub.output[0], [])
    if len(scale) != 1 or scale[0][1] != 0 or scale[0][0].op_type not in ("Div", "Mul"):
        return None
    node = scale[0][0]
    factor = constants.get(node.input[1]) if len(node.input) == 2 else None
    if factor is None or not np.all(np.isfinite(factor)) or not np.all(factor > 0):
        return None
    std = factor if node.op_type == "Div" else 1.0 / factor
    return np.asarray(constants[sub.input[1]], np.float64), np.asarray(std, np.float64)


def _constant_values(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    """The values of the small float initializers and Constant nodes' tensors (a mean, a std:
    at most _SMALL entries, read from the message: no weight is copied), by name."""
    return {name: numpy_helper.to_array(t) for name, t in _constant_tensors(graph).items()
            if np.prod(t.dims) <= _SMALL and t.data_location != onnx.TensorProto.EXTERNAL
            and t.data_type in _FLOATS
            and (t.raw_data or t.float_data or t.double_data or t.int32_data)}


_SMALL = 64
_FLOATS = (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16)


def guessed_inputs(graph: onnx.GraphProto, shapes: dict[str, tuple[int, ...]]) -> set[str]:
    """The integer graph inputs whose valid values the graph does not say: neither ids of a table
    (id_bounds), lengths of a dimension (length_bounds: `shapes`, the inputs' static shapes) nor
    values that only meet arithmetic (value_inputs)."""
    integers = {v.name for v in graph.input if v.type.tensor_type.elem_type
                and helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type).kind in "iu"}
    return (integers - set(id_bounds(graph)) - set(length_bounds(graph, shapes))
            - value_inputs(graph))
