"""onnxruntime's dynamic quantization made float at load time, its weights' scales recorded (see
qconvert/ops/dynamic_quant.py for the ops, the hybrid kernels they become and why): before shape
inference, each DynamicQuantizeLinear, MatMulInteger, ConvInteger and com.microsoft
DynamicQuantizeLSTM, DynamicQuantizeMatMul and MatMulIntegerToFloat node of the loader's graph is
replaced by the float nodes it stands for, and one INTEGER_WEIGHTS node (a private domain, no
outputs) per node with integer weights carries the scales they were stored with (and their
largest integers) to the IR, where transforms/store_integer_weights.py writes the weights back as
those integers. Only onnxruntime's pattern converts: a run-time quantized activation read by
integer products only (its scale by Mul, or by MatMulIntegerToFloat with the activation), their
int32 sums read by a Cast to float; anything else is refused in one line naming the node. A model
without these ops is left untouched. Integer embedding tables (quantize_dynamic's Gather, a QDQ
model's gathered constant) become float tables the same way, noted for the Gather so that the
table is written back 8-bit (_integer_tables).
"""
from __future__ import annotations

import logging

import numpy as np
import onnx
from onnx import helper

from ..errors import ConversionError
from ..ops.dynamic_quant import (DEQUANTIZE_LINEAR, DYNAMIC_QUANTIZE, FAMILY, GATHER,
                                 INTEGER_PRODUCTS, INTEGER_TO_FLOAT, INTEGER_WEIGHTS,
                                 QUANTIZED_LSTM, QUANTIZED_MATMUL, TABLE_DTYPES, beyond_int8,
                                 float_cast, float_fused_matmul, float_lstm, float_product,
                                 largest, levels, table_dequantization, table_params)
from ..ops.registry import op_key
from .graph import producers_of, uses_of

log = logging.getLogger("qconvert")
# Which input of an op reading a DynamicQuantizeLinear's output may take it, with the input that
# must be its zero point (and, for MatMulIntegerToFloat, its scale).
_ACTIVATION_READERS = {**{kind: dict(pair for pair, _ in operands)
                          for kind, operands in INTEGER_PRODUCTS.items()},
                       INTEGER_TO_FLOAT: {0: 4}}


# Ops that move a run-time quantized activation between its DynamicQuantizeLinear and the integer
# product reading it (quantize_dynamic quantizes x once for x @ W and x^T @ W2): they move the float
# activation the same way once the DynamicQuantizeLinear passes x on.
_MOVERS = ("Transpose", "Reshape", "Squeeze", "Unsqueeze", "Flatten")


def _moved(nodes, activations: dict) -> dict:
    """`activations` (a DynamicQuantizeLinear output -> what it maps to) with the outputs of the
    data-movement ops reading them, in graph order, mapped as their input is."""
    moved = dict(activations)
    for node in nodes:
        if op_key(node) in _MOVERS and node.input and node.input[0] in moved:
            moved[node.output[0]] = moved[node.input[0]]
    return moved


class _Additions:
    """New value names (none of the graph's) and new constants of the loader's graph."""

    def __init__(self, graph, readers: dict):
        self.graph = graph
        self.taken = set(graph.constants) | set(readers) | {o.name for o in graph.graph.output}
        self.taken |= _names(graph.graph) | {o for node in graph.nodes for o in node.output}

    def fresh(self, hint: str) -> str:
        name, k = hint, 1
        while name in self.taken:
            name, k = f"{hint}_{k}", k + 1
        self.taken.add(name)
        return name

    def add_constant(self, name: str, value: np.ndarray) -> None:
        self.graph.constants[name] = value
        self.graph.shapes[name] = value.shape
        self.graph.dtypes[name] = value.dtype


def dequantize(graph) -> None:
    """Rewrites the family's nodes of `graph` (loader._Graph, before shape inference) into float
    nodes, and its integer embedding tables into float ones (_integer_tables); their new
    constants join graph.constants, the nodes keep their names in messages."""
    tables = _integer_tables(graph)
    if not any(op_key(node) in FAMILY for node in graph.nodes):
        return
    # the maps of the node list _integer_tables left (it indexed the list before its rewrite),
    # for the scale check and the loop below, which builds a new list from this one
    readers, producer = uses_of(graph.nodes), producers_of(graph.nodes)
    graph_outputs = {o.name for o in graph.graph.output}
    additions = _Additions(graph, readers)

    def label(node) -> str:
        return f"{graph.names[id(node)]!r} ({node.op_type})"

    dropped = _check_scales(graph, readers, producer, graph_outputs, label)
    scales = {n.output[1] for n in graph.nodes if op_key(n) == DYNAMIC_QUANTIZE and len(n.output) > 1}

    def product_scales(node) -> list[np.ndarray]:
        """The constant factors of the integer product `node`'s sum (_product_scales)."""
        return _product_scales(node, graph, readers, producer, scales)

    # a rewritten activation -> its zero point, scale (a gathered table's levels: no scale)
    quantized: dict[str, tuple[str, str]] = {name: (zero, "") for name, zero in tables.items()}
    records: dict[str, tuple[list, str]] = {}  # node -> its weights' scales, why not int8 on them
    nodes = []
    for node in graph.nodes:
        kind, name = op_key(node), graph.names[id(node)]
        if kind == DYNAMIC_QUANTIZE:
            new = [_float_quantize(node, label(node), readers, graph_outputs, label)]
            outputs = list(node.output) + [""] * 2
            quantized[node.output[0]] = (outputs[2], outputs[1])
            if outputs[1]:
                additions.add_constant(outputs[1], np.ones((), np.float32))  # x_s := 1
        elif kind in INTEGER_PRODUCTS:
            new, records[name] = _float_integer_product(node, label(node), graph.constants, quantized,
                                                        additions, product_scales)
        elif id(node) in dropped:  # a bias's rounding to the sum's grid: kept in float
            new = [helper.make_node("Identity", [node.input[0]], [node.output[0]], name=node.name)]
        elif kind in (QUANTIZED_LSTM, QUANTIZED_MATMUL, INTEGER_TO_FLOAT):
            new, records[name] = _float_fused(node, label(node), graph.constants, quantized, additions)
        else:
            if op_key(node) in _MOVERS and node.input and node.input[0] in quantized:
                quantized[node.output[0]] = quantized[node.input[0]]  # moves the float activation
            nodes.append(node)
            continue
        for n in new:
            graph.names[id(n)] = name
        nodes.extend(new)
    graph.nodes = nodes + _markers(records, graph, label, additions.fresh, additions.add_constant)


def _float_integer_product(node, text: str, constants: dict, quantized: dict, additions: _Additions,
                           product_scales) -> tuple[list, tuple[list, str]]:
    """A MatMulInteger or ConvInteger as its float product of float operands (_float_operand);
    and its record: (scale, largest integer) of its constant weight per scale its sum is
    multiplied by (`product_scales(node)`), and why the weight is not int8 ("" when it is)."""
    operands, why, weight = [], "", None
    for (operand, zero_index), axis in INTEGER_PRODUCTS[op_key(node)]:
        operand, value = _float_operand(node, text, operand, zero_index, axis, constants, quantized,
                                        additions.fresh, additions.add_constant)
        operands.append(operand)
        why = why or ("" if value is None else beyond_int8(value))
        weight = (value, axis) if value is not None else weight
    new = [float_product(node, operands)]
    grids = []
    for scale in product_scales(node) if weight else ():
        values, axis = weight
        grids.append((scale, largest(values, axis if np.size(scale) > 1 else None)))
    return new, (grids, why)


def _float_fused(node, text: str, constants: dict, quantized: dict,
                 additions: _Additions) -> tuple[list, tuple[list, str]]:
    """A DynamicQuantizeLSTM, DynamicQuantizeMatMul or MatMulIntegerToFloat as its float nodes,
    their dequantized weights added as constants; and its record: the weights' stored scales and
    why they are not int8 ("" when they are)."""
    if op_key(node) == QUANTIZED_LSTM:
        lstm, weights, stored, why = float_lstm(node, text, constants, additions.fresh)
        new = [lstm]
    else:
        if op_key(node) == INTEGER_TO_FLOAT:
            _check_integer_to_float(node, text, quantized, constants)
        new, weights, stored, why = float_fused_matmul(node, text, constants, additions.fresh)
    for value_name, value in weights.items():
        additions.add_constant(value_name, value)
    return new, (stored, why)


def _markers(records: dict, graph, label, fresh, add_constant) -> list:
    """One INTEGER_WEIGHTS node per node whose weights were integers: the importers record the
    scales in the IR model, and the weights go back to int8 after the float steps
    (transforms/store_integer_weights.py). A weight that is not int8 on one scale per tensor or
    per output channel (uint8 levels beyond int8's range, an LSTM's per-row scales) is requantized
    there, as --weight-only does: said here."""
    markers = []
    for name, (scales, why) in records.items():
        if why:
            log.warning("warning: node %r: %s; dequantized, then requantized to TFLite's int8 "
                        "weights as --weight-only does", name, why)
        markers.append(_marker(graph, name, [] if why else scales,
                               ("weight_scale", "weight_largest"), fresh, add_constant))
    return markers


def _marker(graph, source: str, pairs: list, hints: tuple[str, str], fresh, add_constant):
    """The INTEGER_WEIGHTS node of node `source` with its (value, value) `pairs` as constants."""
    domain, op_type = INTEGER_WEIGHTS.split(".")
    if domain not in graph.opsets:  # shape inference wants the domain declared
        graph.proto.opset_import.append(helper.make_opsetid(domain, 1))
        graph.opsets[domain] = 1
    inputs = []
    for pair in pairs:
        for hint, value in zip(hints, pair):
            inputs.append(fresh(f"{source}_{hint}"))
            add_constant(inputs[-1], np.asarray(value, np.float32))
    marker = helper.make_node(op_type, inputs, [], domain=domain, source=source)
    graph.names[id(marker)] = f"{source} (integer weights)"
    return marker


def _integer_tables(graph) -> dict[str, str]:
    """The integer embedding tables of `graph` (ops/dynamic_quant.py, DEQUANTIZE_LINEAR) as float
    ones, each Gather of one noted (an INTEGER_WEIGHTS node: the table's scale and zero point)
    so that the table is written back as its integers:
    - DequantizeLinear(Gather(table, indices)): a copy of the Gather reads the dequantized table
      (q - z) * s, the very floats DequantizeLinear gives, and writes the DQ's output;
    - Gather(DequantizeLinear(table), indices): the DQ's output becomes that constant;
    - quantize_dynamic's Gather read by MatMulInteger as A (with one zero point z): the Gather
      reads the levels q - z, which the float MatMul takes as the activation, and the table is
      noted at scale 1; a DequantizeLinear of its rows with that zero point becomes a Mul of the
      levels by its scale (the same floats: one table). Returns {such a Gather's output: the zero
      point's name}.
    A Gather whose integer output something else reads stays, for that reader."""
    if not any(op_key(n) == DEQUANTIZE_LINEAR
               or (op_key(n) == GATHER and _integer_constant(graph, n.input[0])) for n in graph.nodes):
        return {}  # a float model: nothing to index
    readers, producer = uses_of(graph.nodes), producers_of(graph.nodes)
    outputs = {o.name for o in graph.graph.output}
    kinds = {id(n): table_dequantization(n, graph.constants.get, producer.get,
                                         lambda name: readers.get(name, []), outputs)
             for n in graph.nodes if op_key(n) == DEQUANTIZE_LINEAR}
    dequantized = {k for k, kind in kinds.items() if kind == "gathered"}  # read as levels too
    levels_read = [n for n in graph.nodes
                   if op_key(n) == GATHER and _integer_constant(graph, n.input[0])
                   and _levels_zero(n, readers, outputs, graph.constants, dequantized) is not None]
    if not any(kinds.values()) and not levels_read:
        return {}
    tables = _Tables(graph, _Additions(graph, readers))
    levels, level_zeros = _tables_as_levels(tables, levels_read, readers, outputs, dequantized)
    for node in graph.nodes:
        kind = kinds.get(id(node), "")
        if kind == "gathered":
            _gathered_dequantization(tables, node, producer[node.input[0]], level_zeros, kinds,
                                     readers, outputs)
        elif kind == "gathers":
            scale, zero = table_params(node, graph.constants.get)
            table = tables.float_table(node.input[0], scale, zero)
            tables.additions.add_constant(node.output[0], graph.constants[table])
            tables.replaced[id(node)] = None
            for gather, _ in readers[node.output[0]]:
                tables.note(gather, scale, zero)
    nodes = [tables.replaced.get(id(n), n) for n in graph.nodes]
    graph.nodes = [n for n in nodes if n is not None] + [
        _marker(graph, name, pairs, ("table_scale", "table_zero_point"), tables.additions.fresh,
                tables.additions.add_constant) for name, pairs in tables.records.items()]
    return levels


class _Tables:
    """_integer_tables' rewrite so far: the float copies of integer tables, each made once, the
    (scale, zero point) noted per Gather, and the nodes' replacements."""

    def __init__(self, graph, additions: _Additions):
        self.graph, self.additions = graph, additions
        self.records: dict[str, list] = {}  # a Gather's name -> its tables' (scale, zero point)
        self.copies: dict[tuple, str] = {}  # (table, scale, zero point) -> its float copy
        self.replaced: dict[int, object] = {}  # id(node) -> its replacement (None: dropped)

    def float_table(self, table: str, scale: np.ndarray, zero: np.ndarray) -> str:
        """The constant (q - z) * s of integer table `table` (made once per scale and zero)."""
        index = (table, float(scale), int(zero))
        if index not in self.copies:
            q = self.graph.constants[table]
            value = ((q.astype(np.float64) - float(zero)) * float(scale)).astype(np.float32)
            self.copies[index] = self.additions.fresh(
                f"{table}_{'levels' if scale == 1 else 'dequantized'}")
            self.additions.add_constant(self.copies[index], value)
        return self.copies[index]

    def gather_copy(self, gather, table: str, output: str):
        """A copy of `gather` reading `table` and writing `output`, named as `gather` in messages."""
        copy = onnx.NodeProto()
        copy.CopyFrom(gather)
        copy.input[0], copy.output[0] = table, output
        self.graph.names[id(copy)] = self.graph.names[id(gather)]
        return copy

    def note(self, gather, scale, zero) -> None:
        """Notes that `gather` reads a table stored as integers with `scale` and `zero` point."""
        self.records.setdefault(self.graph.names[id(gather)], []).append((scale, zero))


def _tables_as_levels(tables: _Tables, levels_read: list, readers: dict, outputs: set,
                      dequantized: set) -> tuple[dict[str, str], dict[int, int]]:
    """Each Gather whose output MatMulIntegers read as A (`levels_read`) rewired to the table's
    levels q - z, noted at scale 1. Returns ({its output: the zero point's name}, {id(Gather):
    the zero point of its levels})."""
    graph = tables.graph
    levels: dict[str, str] = {}
    level_zeros: dict[int, int] = {}
    for gather in levels_read:
        zero_name = _levels_zero(gather, readers, outputs, graph.constants, dequantized)
        zero = (np.asarray(graph.constants[zero_name]).reshape(()) if zero_name
                else np.zeros((), graph.constants[gather.input[0]].dtype))
        one = np.float32(1)
        tables.replaced[id(gather)] = tables.gather_copy(
            gather, tables.float_table(gather.input[0], one, zero), gather.output[0])
        tables.note(gather, one, zero)
        levels[gather.output[0]] = zero_name
        level_zeros[id(gather)] = int(zero)
    return levels, level_zeros


def _gathered_dequantization(tables: _Tables, node, gather, level_zeros: dict, kinds: dict,
                             readers: dict, outputs: set) -> None:
    """DequantizeLinear `node` of `gather`'s integer rows: a Mul of the levels by the scale when
    the Gather reads the levels with this zero point already, else a copy of the Gather reading
    the dequantized table, the original Gather dropped once no other reader needs it."""
    graph = tables.graph
    scale, zero = table_params(node, graph.constants.get, gather.input[0])
    if level_zeros.get(id(gather)) == int(zero):  # (q - z) * s from the levels q - z
        tables.replaced[id(node)] = helper.make_node("Mul", [node.input[0], node.input[1]],
                                                     [node.output[0]], name=node.name)
        graph.names[id(tables.replaced[id(node)])] = graph.names[id(node)]
        return
    copy = tables.gather_copy(gather, tables.float_table(gather.input[0], scale, zero), node.output[0])
    tables.replaced[id(node)] = copy
    tables.note(gather, scale, zero)
    if node.input[0] not in outputs and all(kinds.get(id(r)) == "gathered"
                                            for r, _ in readers[node.input[0]]):
        tables.replaced[id(gather)] = None


def _integer_constant(graph, name: str) -> bool:
    value = graph.constants.get(name)
    return value is not None and np.asarray(value).dtype in TABLE_DTYPES


def _levels_zero(gather, readers: dict, outputs: set, constants: dict, ignored: set) -> str | None:
    """The zero point's name ("" when omitted) with which MatMulIntegers read `gather`'s output,
    as A, all with that one scalar constant, and nothing else but the `ignored` nodes; None when
    not so read."""
    output = gather.output[0] if gather.output else ""
    uses = [(r, i) for r, i in readers.get(output, []) if id(r) not in ignored]
    if not uses or output in outputs or any(op_key(r) != "MatMulInteger" or i != 0 for r, i in uses):
        return None
    zeros = {r.input[2] if len(r.input) > 2 else "" for r, _ in uses}
    zero = zeros.pop() if len(zeros) == 1 else None
    if zero is None or (zero and (zero not in constants or np.size(constants[zero]) != 1)):
        return None
    return zero


def _product_scales(node, graph, readers: dict, producer: dict, scales: set) -> list[np.ndarray]:
    """The constant factors that multiply the int32 sum of integer product `node`, the run-time
    scales taken as 1 (as the rewrite makes them): in quantize_dynamic's Mul(Cast(sum),
    Mul(x_s, w_s)), w_s, the scale its weight is stored with. Through a bias Add (older
    quantizers) too."""
    def factor(name: str):
        if name in scales:
            return np.float32(1)
        if name in graph.constants:
            return np.asarray(graph.constants[name], np.float32)
        mul = producer.get(name)
        if mul is None or op_key(mul) != "Mul" or len(mul.input) != 2:
            return None
        a, b = factor(mul.input[0]), factor(mul.input[1])
        return None if a is None or b is None else a * b

    sums = [node.output[0]] + [add.output[0] for add, _ in readers.get(node.output[0], [])
                               if op_key(add) == "Add"]
    found = []
    for value in sums:
        for cast, _ in readers.get(value, []):
            if float_cast(cast):
                for mul, index in readers.get(cast.output[0], []):
                    if op_key(mul) == "Mul" and len(mul.input) == 2:
                        constant = factor(mul.input[1 - index])
                        if constant is not None and all(constant is not f for f in found):
                            found.append(constant)
    return found


def _check_integer_to_float(node, text: str, quantized: dict, constants: dict) -> None:
    """MatMulIntegerToFloat's A is a DynamicQuantizeLinear's output, read with its zero point and
    its scale (which the rewrite makes 1)."""
    inputs = list(node.input) + [""] * (7 - len(node.input))
    if inputs[0] not in quantized or quantized[inputs[0]] != (inputs[4], inputs[2]):
        raise ConversionError(f"node {text}: input A {inputs[0]!r} is not a DynamicQuantizeLinear "
                              "output read with its own scale and zero point; qconvert converts "
                              "onnxruntime's pattern")


def _names(graph: onnx.GraphProto) -> set[str]:
    """Every value name of `graph` and of its nodes' subgraphs (If, Loop and Scan bodies, which
    the loader may inline later): new constants take none of them."""
    names = {v.name for v in list(graph.input) + list(graph.output) + list(graph.value_info)}
    names |= {t.name for t in graph.initializer}
    for node in graph.node:
        names.update(node.input)
        names.update(node.output)
        for a in node.attribute:
            for sub in [a.g] * (a.type == onnx.AttributeProto.GRAPH) + list(a.graphs):
                names |= _names(sub)
    return names


def _float_quantize(node, text: str, readers: dict, graph_outputs: set, label):
    """DynamicQuantizeLinear(x) -> y, y_scale, y_zero_point as y := x (an Identity): checked
    that only integer products read y (directly or through data-movement ops), paired with this
    zero point (_check_scales checks what reads y_scale, which becomes the constant 1)."""
    outputs = list(node.output) + [""] * (3 - len(node.output))
    y, scale, zero = outputs
    if y in graph_outputs or scale in graph_outputs or zero in graph_outputs:
        raise ConversionError(f"node {text}: an output is a graph output; qconvert converts run-time "
                              "quantization that MatMulInteger or ConvInteger read")
    moved = [y]
    for name in moved:  # y and the data-movement ops' outputs carrying it to the products
        for reader, index in readers.get(name, []):
            if op_key(reader) in _MOVERS and index == 0 and reader.output[0] not in graph_outputs:
                moved.append(reader.output[0])
    for reader, index in (pair for name in moved for pair in readers.get(name, [])):
        if op_key(reader) in _MOVERS and index == 0:
            continue
        pairs = _ACTIVATION_READERS.get(op_key(reader), {})
        paired = reader.input[pairs[index]] if index in pairs and len(reader.input) > pairs[index] else ""
        if index not in pairs or paired != zero:
            raise ConversionError(
                f"node {text}: output {y!r} is read by node {label(reader)}; qconvert converts "
                "run-time quantization read by MatMulInteger or ConvInteger with its zero point")
    for reader, index in readers.get(zero, []):
        pairs = _ACTIVATION_READERS.get(op_key(reader), {})
        if index not in pairs.values():
            raise ConversionError(f"node {text}: zero point {zero!r} is read by node {label(reader)}, "
                                  "not as the zero point of an integer product")
    return helper.make_node("Identity", [node.input[0]], [y], name=node.name)


def _float_operand(node, text: str, operand: int, zero_index: int, axis: int, constants: dict,
                   quantized: dict, fresh, add_constant) -> tuple[str, np.ndarray | None]:
    """The float operand of an integer product: the activation a rewritten DynamicQuantizeLinear
    passes on, or a new constant q - z (then also returned)."""
    name = node.input[operand] if len(node.input) > operand else ""
    zero = node.input[zero_index] if len(node.input) > zero_index else ""
    if name in quantized:
        if zero != quantized[name][0]:
            raise ConversionError(f"node {text}: input {name!r} is read with zero point {zero!r}, "
                                  f"not the one its DynamicQuantizeLinear computes")
        return name, None
    if name not in constants:
        raise ConversionError(f"node {text}: input {name!r} is neither a constant nor a "
                              "DynamicQuantizeLinear output (onnxruntime's quantize_dynamic pattern)")
    if zero and zero not in constants:
        raise ConversionError(f"node {text}: zero point {zero!r} is computed at run time; qconvert "
                              "takes a constant one for a constant operand")
    what = f"input {name!r}"
    value = levels(text, what, constants[name], constants.get(zero) if zero else None, axis)
    new = fresh(f"{name}_levels")
    add_constant(new, value)
    return new, value


def _check_scales(graph, readers: dict, producer: dict, graph_outputs: set, label) -> set[int]:
    """The float rewrite sets each run-time scale to 1 and each integer sum to the float product
    of the activations themselves. That is exact where, as in quantize_dynamic's pattern, a sum
    is read by a Cast to float that only a Mul by the product of its operands' scales (times
    constants) reads, and those scales reach nothing else; refused otherwise, naming the node.
    Older quantizers add a bias to the int32 sum, rounded to its grid at run time (Div by the
    scales, Floor, Cast to int32, Reshape): returns the ids of those Floor and Cast nodes, which
    become Identity (the bias then stays float, its rounding dropped)."""
    check = _ScaleCheck(graph, readers, producer, graph_outputs, label)
    sums, divisions, dropped = check.sums()
    for node in graph.nodes:
        if id(node) in divisions and check.scaled(node.input[1]) != divisions[id(node)]:
            raise ConversionError(f"node {label(node)}: it rounds a bias to the grid of other scales "
                                  "than the sum's; qconvert converts quantize_dynamic's pattern")
        for value in node.output:
            if value in sums:
                _check_sum(node, value, sums[value], readers, graph_outputs, check.scaled, label)
            factors = check.scaled(value) if value and op_key(node) in ("Mul", DYNAMIC_QUANTIZE) else None
            if not factors or (op_key(node) == DYNAMIC_QUANTIZE and value != node.output[1]):
                continue
            check.scale_readers(node, value, factors, sums, divisions)
    return dropped


class _ScaleCheck:
    """What _check_scales asks of the graph: the run-time scales a value is a product of, the
    integer sums with the scales they must be multiplied by, and the biases rounded to a sum's
    grid; and the check of a scale's readers."""

    def __init__(self, graph, readers: dict, producer: dict, graph_outputs: set, label):
        self.graph, self.readers, self.graph_outputs, self.label = graph, readers, graph_outputs, label
        self.producer = producer
        self.scales = {n.output[1] for n in graph.nodes
                       if op_key(n) == DYNAMIC_QUANTIZE and len(n.output) > 1}
        self.activations = _moved(graph.nodes, {n.output[0]: n.output[1] if len(n.output) > 1 else ""
                                                for n in graph.nodes if op_key(n) == DYNAMIC_QUANTIZE})
        self.memo: dict[str, frozenset | None] = {}

    def scaled(self, name: str) -> frozenset | None:
        """The run-time scales `name` is a product of (with constants); None: not such a product."""
        memo, node = self.memo, self.producer.get(name)
        if name not in memo:
            memo[name] = None
            if name in self.scales:
                memo[name] = frozenset([name])
            elif name in self.graph.constants:
                memo[name] = frozenset()
            elif node is not None and op_key(node) == "Mul":
                parts = [self.scaled(i) for i in node.input]
                memo[name] = None if None in parts else frozenset().union(*parts)
        return memo[name]

    def product_scales(self, node) -> frozenset:
        """The run-time scales of the activations integer product `node` reads."""
        return frozenset(self.activations[i] for i in node.input[:2] if i in self.activations)

    def rounded_bias(self, add, index: int):
        """(Div, [Floor, Cast]) when input `index` of `add` is a constant bias rounded to a sum's
        grid at run time: Cast(int)(Floor(Div(constant, scales))), through Reshape/Unsqueeze."""
        producer, readers = self.producer, self.readers
        name = add.input[index]
        node = producer.get(name)
        while node is not None and op_key(node) in ("Reshape", "Unsqueeze") and len(readers.get(name, [])) == 1:
            name = node.input[0]
            node = producer.get(name)
        chain = []
        for op in ("Cast", "Floor"):
            if node is None or op_key(node) != op or len(readers.get(node.output[0], [])) != 1:
                return None
            chain.append(node)
            node = producer.get(node.input[0])
        if node is None or op_key(node) != "Div" or node.input[0] not in self.graph.constants:
            return None
        return node, chain

    def sums(self) -> tuple[dict[str, frozenset], dict[int, frozenset], set[int]]:
        """({an integer sum, or the Add of a rounded bias to it: its operands' scales}, {id(a
        bias's Div): the scales it must divide by}, the ids of the rounding's Floor and Cast)."""
        sums: dict[str, frozenset] = {}
        divisions: dict[int, frozenset] = {}
        dropped: set[int] = set()
        for node in self.graph.nodes:
            if op_key(node) in INTEGER_PRODUCTS:
                sums[node.output[0]] = self.product_scales(node)
            elif op_key(node) == "Add" and len(node.input) == 2:
                for index in (0, 1):
                    found = self.rounded_bias(node, index) if node.input[1 - index] in sums else None
                    if found is not None and len(self.readers.get(node.input[1 - index], [])) == 1:
                        division, chain = found
                        expected = sums.pop(node.input[1 - index])
                        divisions[id(division)] = expected
                        dropped.update(id(n) for n in chain)
                        sums[node.output[0]] = expected
                        break
        return sums, divisions, dropped

    def scale_readers(self, node, value: str, factors: frozenset, sums: dict, divisions: dict) -> None:
        """Refuses the run-time scale product `value` (of `node`) as a graph output or read by
        anything but further scale products, rounded biases, MatMulIntegerToFloat's A scale, or
        a Mul of a float-cast integer sum of exactly those scales."""
        label = self.label
        if value in self.graph_outputs:
            raise ConversionError(f"node {label(node)}: the run-time scale {value!r} is a graph "
                                  "output; qconvert converts a scale that multiplies a sum")
        for reader, index in self.readers.get(value, []):
            if op_key(reader) == "Mul" and self.scaled(reader.output[0]) is not None:
                continue  # a further product of scales, checked in turn
            if id(reader) in divisions and index == 1:
                continue  # a bias rounded to the sum's grid, checked above
            if op_key(reader) == INTEGER_TO_FLOAT and index == 2:
                continue  # its A's scale: checked with A (_check_integer_to_float)
            other = reader.input[1 - index] if op_key(reader) == "Mul" and len(reader.input) == 2 else ""
            cast = self.producer.get(other)
            summed = cast.input[0] if cast is not None and float_cast(cast) else None
            if summed not in sums or sums[summed] != factors:
                raise ConversionError(
                    f"node {label(node)}: the run-time scale {value!r} is read by node "
                    f"{label(reader)}, which does not scale an integer sum by it; qconvert "
                    "converts quantize_dynamic's pattern")


def _check_sum(node, value: str, expected: frozenset, readers: dict, graph_outputs: set, scaled,
               label) -> None:
    """An integer sum `value` (of `node`) is read by Casts to float, each read by Muls by the
    product of the sum's activation scales (`expected`; any reader for a sum of constants)."""
    if value in graph_outputs:
        raise ConversionError(f"node {label(node)}: its int32 sum is a graph output; qconvert "
                              "converts it when a Cast to float reads it")
    for cast, _ in readers.get(value, []):
        if not float_cast(cast):
            raise ConversionError(f"node {label(node)}: its int32 sum is read by node {label(cast)}; "
                                  "qconvert converts it when a Cast to float reads it "
                                  "(quantize_dynamic's pattern)")
        if not expected:
            continue
        if cast.output[0] in graph_outputs:
            raise ConversionError(f"node {label(node)}: its sum is a graph output without the "
                                  "activation's scale; qconvert converts it scaled")
        for mul, index in readers.get(cast.output[0], []):
            other = mul.input[1 - index] if op_key(mul) == "Mul" and len(mul.input) == 2 else ""
            if scaled(other) != expected:
                raise ConversionError(
                    f"node {label(node)}: its sum reaches node {label(mul)} without being "
                    "multiplied by its activation's scale; qconvert converts it scaled "
                    "(quantize_dynamic's pattern)")
