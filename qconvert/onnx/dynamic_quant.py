"""onnxruntime's dynamic quantization made float at load time (see qconvert/ops/dynamic_quant.py
for the ops and why): before shape inference, each DynamicQuantizeLinear, MatMulInteger,
ConvInteger and com.microsoft DynamicQuantizeLSTM node of the loader's graph is replaced by the
float nodes it stands for. Only onnxruntime's quantize_dynamic pattern converts: a run-time
quantized activation read by integer products only (its scale by Mul), their int32 sums read by a
Cast to float; anything else is refused in one line naming the node. A model without these ops is
left untouched.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from ..errors import ConversionError
from ..ops.dynamic_quant import (DYNAMIC_QUANTIZE, FAMILY, INTEGER_PRODUCTS, QUANTIZED_LSTM,
                                 float_cast, float_lstm, float_product, key, levels)


def dequantize(graph) -> None:
    """Rewrites the family's nodes of `graph` (loader._Graph, before shape inference) into float
    nodes; their new constants join graph.constants, the nodes keep their names in messages."""
    if not any(key(node) in FAMILY for node in graph.nodes):
        return
    readers: dict[str, list] = {}
    for node in graph.nodes:
        for index, name in enumerate(node.input):
            if name:
                readers.setdefault(name, []).append((node, index))
    graph_outputs = {o.name for o in graph.graph.output}
    taken = set(graph.constants) | set(readers) | graph_outputs | _names(graph.graph)
    taken |= {o for node in graph.nodes for o in node.output}

    def fresh(hint: str) -> str:
        name, k = hint, 1
        while name in taken:
            name, k = f"{hint}_{k}", k + 1
        taken.add(name)
        return name

    def add_constant(name: str, value: np.ndarray) -> None:
        graph.constants[name] = value
        graph.shapes[name] = value.shape
        graph.dtypes[name] = value.dtype

    def label(node) -> str:
        return f"{graph.names[id(node)]!r} ({node.op_type})"

    dropped = _check_scales(graph, readers, graph_outputs, label)
    quantized: dict[str, str] = {}  # a rewritten activation -> its zero point's name
    nodes = []
    for node in graph.nodes:
        kind = key(node)
        if kind == DYNAMIC_QUANTIZE:
            new = _float_quantize(node, label(node), readers, graph_outputs, label)
            quantized[node.output[0]] = node.output[2] if len(node.output) > 2 else ""
            if len(node.output) > 1 and node.output[1]:
                add_constant(node.output[1], np.ones((), np.float32))  # x_s := 1
        elif kind in INTEGER_PRODUCTS:
            operands = []
            for (operand, zero_index), axis in INTEGER_PRODUCTS[kind]:
                operands.append(_float_operand(node, label(node), operand, zero_index, axis,
                                               graph.constants, quantized, fresh, add_constant))
            new = float_product(node, operands)
        elif id(node) in dropped:  # a bias's rounding to the sum's grid: kept in float
            new = helper.make_node("Identity", [node.input[0]], [node.output[0]], name=node.name)
        elif kind == QUANTIZED_LSTM:
            new, weights = float_lstm(node, label(node), graph.constants, fresh)
            for name, value in weights.items():
                add_constant(name, value)
        else:
            nodes.append(node)
            continue
        graph.names[id(new)] = graph.names[id(node)]
        nodes.append(new)
    graph.nodes = nodes


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
    that only integer products read y, paired with this zero point (_check_scales checks what
    reads y_scale, which becomes the constant 1)."""
    outputs = list(node.output) + [""] * (3 - len(node.output))
    y, scale, zero = outputs
    if y in graph_outputs or scale in graph_outputs or zero in graph_outputs:
        raise ConversionError(f"node {text}: an output is a graph output; qconvert converts run-time "
                              "quantization that MatMulInteger or ConvInteger read")
    for reader, index in readers.get(y, []):
        pairs = dict(pair for pair, _ in INTEGER_PRODUCTS.get(key(reader), ()))
        paired = reader.input[pairs[index]] if index in pairs and len(reader.input) > pairs[index] else ""
        if index not in pairs or paired != zero:
            raise ConversionError(
                f"node {text}: output {y!r} is read by node {label(reader)}; qconvert converts "
                "run-time quantization read by MatMulInteger or ConvInteger with its zero point")
    for reader, index in readers.get(zero, []):
        pairs = dict(pair for pair, _ in INTEGER_PRODUCTS.get(key(reader), ()))
        if index not in pairs.values():
            raise ConversionError(f"node {text}: zero point {zero!r} is read by node {label(reader)}, "
                                  "not as the zero point of an integer product")
    return helper.make_node("Identity", [node.input[0]], [y], name=node.name)


def _float_operand(node, text: str, operand: int, zero_index: int, axis: int, constants: dict,
                   quantized: dict, fresh, add_constant) -> str:
    """The float operand of an integer product: the activation a rewritten DynamicQuantizeLinear
    passes on, or a new constant q - z."""
    name = node.input[operand] if len(node.input) > operand else ""
    zero = node.input[zero_index] if len(node.input) > zero_index else ""
    if name in quantized:
        if zero != quantized[name]:
            raise ConversionError(f"node {text}: input {name!r} is read with zero point {zero!r}, "
                                  f"not the one its DynamicQuantizeLinear computes")
        return name
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
    return new


def _check_scales(graph, readers: dict, graph_outputs: set, label) -> set[int]:
    """The float rewrite sets each run-time scale to 1 and each integer sum to the float product
    of the activations themselves. That is exact where, as in quantize_dynamic's pattern, a sum
    is read by a Cast to float that only a Mul by the product of its operands' scales (times
    constants) reads, and those scales reach nothing else; refused otherwise, naming the node.
    Older quantizers add a bias to the int32 sum, rounded to its grid at run time (Div by the
    scales, Floor, Cast to int32, Reshape): returns the ids of those Floor and Cast nodes, which
    become Identity (the bias then stays float, its rounding dropped)."""
    producer = {o: n for n in graph.nodes for o in n.output if o}
    scales = {n.output[1] for n in graph.nodes if key(n) == DYNAMIC_QUANTIZE and len(n.output) > 1}
    activations = {n.output[0]: n.output[1] if len(n.output) > 1 else "" for n in graph.nodes
                   if key(n) == DYNAMIC_QUANTIZE}
    memo: dict[str, frozenset | None] = {}

    def scaled(name: str) -> frozenset | None:
        """The run-time scales `name` is a product of (with constants); None: not such a product."""
        if name not in memo:
            memo[name] = None
            node = producer.get(name)
            if name in scales:
                memo[name] = frozenset([name])
            elif name in graph.constants:
                memo[name] = frozenset()
            elif node is not None and key(node) == "Mul":
                parts = [scaled(i) for i in node.input]
                memo[name] = None if None in parts else frozenset().union(*parts)
        return memo[name]

    def product_scales(node) -> frozenset:
        return frozenset(activations[i] for i in node.input[:2] if i in activations)

    def bias(add, index: int):
        """(Div, [Floor, Cast]) when input `index` of `add` is a constant bias rounded to a sum's
        grid at run time: Cast(int)(Floor(Div(constant, scales))), through Reshape/Unsqueeze."""
        name = add.input[index]
        node = producer.get(name)
        while node is not None and key(node) in ("Reshape", "Unsqueeze") and len(readers.get(name, [])) == 1:
            name = node.input[0]
            node = producer.get(name)
        chain = []
        for op in ("Cast", "Floor"):
            if node is None or key(node) != op or len(readers.get(node.output[0], [])) != 1:
                return None
            chain.append(node)
            node = producer.get(node.input[0])
        if node is None or key(node) != "Div" or node.input[0] not in graph.constants:
            return None
        return node, chain

    sums: dict[str, frozenset] = {}  # an integer sum (maybe with a bias) -> its operands' scales
    divisions: dict[int, frozenset] = {}  # a bias's Div -> the scales it must divide by
    dropped: set[int] = set()
    for node in graph.nodes:
        if key(node) in INTEGER_PRODUCTS:
            sums[node.output[0]] = product_scales(node)
        elif key(node) == "Add" and len(node.input) == 2:
            for index in (0, 1):
                found = bias(node, index) if node.input[1 - index] in sums else None
                if found is not None and len(readers.get(node.input[1 - index], [])) == 1:
                    division, chain = found
                    expected = sums.pop(node.input[1 - index])
                    divisions[id(division)] = expected
                    dropped.update(id(n) for n in chain)
                    sums[node.output[0]] = expected
                    break
    for node in graph.nodes:
        if id(node) in divisions and scaled(node.input[1]) != divisions[id(node)]:
            raise ConversionError(f"node {label(node)}: it rounds a bias to the grid of other scales "
                                  "than the sum's; qconvert converts quantize_dynamic's pattern")
        for value in node.output:
            if value in sums:
                _check_sum(node, value, sums[value], readers, graph_outputs, scaled, label)
            factors = scaled(value) if value and key(node) in ("Mul", DYNAMIC_QUANTIZE) else None
            if not factors or (key(node) == DYNAMIC_QUANTIZE and value != node.output[1]):
                continue
            if value in graph_outputs:
                raise ConversionError(f"node {label(node)}: the run-time scale {value!r} is a graph "
                                      "output; qconvert converts a scale that multiplies a sum")
            for reader, index in readers.get(value, []):
                if key(reader) == "Mul" and scaled(reader.output[0]) is not None:
                    continue  # a further product of scales, checked in turn
                if id(reader) in divisions and index == 1:
                    continue  # a bias rounded to the sum's grid, checked above
                other = reader.input[1 - index] if key(reader) == "Mul" and len(reader.input) == 2 else ""
                cast = producer.get(other)
                summed = cast.input[0] if cast is not None and float_cast(cast) else None
                if summed not in sums or sums[summed] != factors:
                    raise ConversionError(
                        f"node {label(node)}: the run-time scale {value!r} is read by node "
                        f"{label(reader)}, which does not scale an integer sum by it; qconvert "
                        "converts quantize_dynamic's pattern")
    return dropped


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
            other = mul.input[1 - index] if key(mul) == "Mul" and len(mul.input) == 2 else ""
            if scaled(other) != expected:
                raise ConversionError(
                    f"node {label(node)}: its sum reaches node {label(mul)} without being "
                    "multiplied by its activation's scale; qconvert converts it scaled "
                    "(quantize_dynamic's pattern)")
