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
