"""onnxruntime as the reference: how qconvert runs an ONNX model to calibrate it and to check a
written model against it, the same on every CPU."""

from __future__ import annotations

import onnx

QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")


def has_qdq(proto: onnx.ModelProto) -> bool:
    """Whether the graph holds QuantizeLinear or DequantizeLinear nodes (of the default domain)."""
    return any(node.op_type in QDQ_OPS and node.domain in ("", "ai.onnx") for node in proto.graph.node)


def quantizes_activations(graph: onnx.GraphProto) -> bool:
    """Whether the graph rounds a computed tensor: a QuantizeLinear of something other than a
    constant (a pair on an activation). The constants are the initializers and the outputs of
    Constant nodes of any domain (onnxruntime makes another domain's Constant a constant too).
    Weights stored as int8 under a DequantizeLinear alone are a float model's storage."""
    constants = {t.name for t in graph.initializer}
    constants |= {o for n in graph.node if n.op_type == "Constant" for o in n.output}
    return any(n.op_type == "QuantizeLinear" and n.domain in ("", "ai.onnx") and n.input
               and n.input[0] not in constants for n in graph.node)


def session_options(model: onnx.ModelProto, float_level=None):
    """onnxruntime's SessionOptions for running `model` as a reference: quiet (errors only), and
    with graph optimizations off (ORT_DISABLE_ALL) when the graph holds QuantizeLinear or
    DequantizeLinear (has_qdq); a float graph gets `float_level` (an
    ort.GraphOptimizationLevel; None: onnxruntime's default).

    Why: from the extended level on, onnxruntime fuses Q/DQ around Conv, Gemm and MatMul into
    integer kernels (QLinearConv, QGemm, QLinearMatMul) whose x86 u8 x s8 path (VPMADDUBSW)
    saturates 16-bit sums on CPUs without VNNI: the reference would depend on the CPU (20 output
    steps off on a QDQ test CNN). The basic level does not fuse them, but its WeightBiasQuantization
    requantizes a float weight read by a Conv or Gemm behind a DequantizeLinear per tensor. Unfused,
    Q and DQ are float ops computing exactly what the pairs say, on every CPU."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    if has_qdq(model):
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    elif float_level is not None:
        options.graph_optimization_level = float_level
    return options


def _integer_product(node: onnx.NodeProto) -> bool:
    return node.op_type in ("MatMulInteger", "ConvInteger") and node.domain in ("", "ai.onnx")


def _quantized_lstm(node: onnx.NodeProto) -> bool:
    return node.op_type == "DynamicQuantizeLSTM" and node.domain == "com.microsoft"


def cpu_dependent_ops(graph: onnx.GraphProto) -> bool:
    """Whether the graph holds MatMulInteger, ConvInteger or com.microsoft's DynamicQuantizeLSTM
    (see reproducible_reference)."""
    return any(_integer_product(n) or _quantized_lstm(n) for n in graph.node)


def reproducible_reference(proto: onnx.ModelProto) -> onnx.ModelProto | None:
    """A copy of the model whose MatMulInteger and ConvInteger compute in float (float64 for
    MatMul, float32 for Conv; integer sums exact below 2^53 and 2^24) and whose
    DynamicQuantizeLSTM is the float LSTM of its dequantized weights; None when it has none.

    Why: onnxruntime's x86 u8 x s8 kernels for these ops (VPMADDUBSW) saturate pairs of products
    at 16 bits on CPUs without VNNI, so a dynamically quantized model's reference depended on the
    CPU (a transformer encoder: 37 dB from the .tflite with VNNI, 25 dB without), and so did its
    calibrated ranges (a BiLSTM's bytes differed on AVX2). The integer products compute the sums
    the ops define; the fused LSTM rounds inside itself, so it computes what its weights mean."""
    from onnx import helper, numpy_helper

    if not cpu_dependent_ops(proto.graph):
        return None
    model = onnx.ModelProto()
    model.CopyFrom(proto)
    graph = model.graph
    constants = {t.name: t for t in graph.initializer}
    nodes = []
    for node in graph.node:
        if _quantized_lstm(node):
            nodes.append(_float_lstm(node, graph, constants))
            continue
        if not _integer_product(node):
            nodes.append(node)
            continue
        kind = onnx.TensorProto.DOUBLE if node.op_type == "MatMulInteger" else onnx.TensorProto.FLOAT
        dtype = "float64" if kind == onnx.TensorProto.DOUBLE else "float32"
        operands = []
        for k in (0, 1):
            value = node.input[k]
            zero = node.input[k + 2] if len(node.input) > k + 2 else ""
            tag = f"{node.output[0]}__exact{k}"
            if value in constants and (not zero or zero in constants):
                levels = numpy_helper.to_array(constants[value]).astype(dtype)
                if zero:
                    z = numpy_helper.to_array(constants[zero]).astype(dtype)
                    # a per-channel zero point is along the weights' output axis (0 for Conv, last for MatMul)
                    shape = [-1] + [1] * (levels.ndim - 1) if node.op_type == "ConvInteger" else [-1]
                    levels = levels - (z.reshape(shape) if z.ndim else z)
                graph.initializer.append(numpy_helper.from_array(levels, tag))
                operands.append(tag)
                continue
            nodes.append(helper.make_node("Cast", [value], [tag + "_cast"], to=kind))
            if zero:
                nodes.append(helper.make_node("Cast", [zero], [tag + "_zero"], to=kind))
                nodes.append(helper.make_node("Sub", [tag + "_cast", tag + "_zero"], [tag]))
            else:
                nodes.append(helper.make_node("Identity", [tag + "_cast"], [tag]))
            operands.append(tag)
        op = "MatMul" if node.op_type == "MatMulInteger" else "Conv"
        nodes.append(helper.make_node(op, operands, [node.output[0] + "__exact"], **{
            a.name: helper.get_attribute_value(a) for a in node.attribute}))
        nodes.append(helper.make_node("Cast", [node.output[0] + "__exact"], [node.output[0]],
                                      to=onnx.TensorProto.INT32))
    del graph.node[:]
    graph.node.extend(nodes)
    return model


def _float_lstm(node: onnx.NodeProto, graph: onnx.GraphProto, constants: dict) -> onnx.NodeProto:
    """The ONNX LSTM a DynamicQuantizeLSTM stands for (ops/dynamic_quant.float_lstm), its
    dequantized weights added to `graph`."""
    from onnx import numpy_helper

    from ..ops.dynamic_quant import float_lstm

    arrays = {name: numpy_helper.to_array(t) for name, t in constants.items() if name in node.input}
    taken = {t.name for t in graph.initializer} | {o for n in graph.node for o in n.output}

    def fresh(hint: str) -> str:
        name, k = hint, 1
        while name in taken:
            name, k = f"{hint}_{k}", k + 1
        taken.add(name)
        return name

    lstm, weights, _, _ = float_lstm(node, repr(node.name), arrays, fresh)
    graph.initializer.extend(numpy_helper.from_array(value, name) for name, value in weights.items())
    return lstm
