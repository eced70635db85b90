"""Generated models of any size, for measuring how conversion cost grows with the op count.

Two families, both with seeded random weights, built node by node as exporters write them:
- conv_chain(n): Conv + Relu blocks on an 8-channel 16x16 map, a residual Add after every second
  block (5 ONNX nodes per two blocks);
- transformer_encoder(n): pre-norm encoder layers over a [1, 16, 32] sequence, everything in
  primitive ops: LayerNorm as ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add, two-head
  attention with MatMul/Add/Reshape/Transpose/Mul/Softmax, an exact-Gelu MLP (Div/Erf/Add/Mul/Mul).
Each returns an onnx.ModelProto with about `n` nodes (never more, at least one layer or block).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

CONV_CHANNELS, CONV_SIZE = 8, 16
SEQUENCE, WIDTH, HEADS, HIDDEN = 16, 32, 2, 64


class _Graph:
    """Accumulates nodes and initializers with unique names."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def name(self, hint: str) -> str:
        self.count += 1
        return f"{hint}_{self.count}"

    def const(self, hint: str, value) -> str:
        name = self.name(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(self, hint: str, shape, fan_in: int, gain: float = 1.0) -> str:
        value = self.rng.standard_normal(shape) * (gain / np.sqrt(fan_in))
        return self.const(hint, value.astype(np.float32))

    def node(self, op_type: str, inputs: list[str], **attrs) -> str:
        out = self.name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return out

    def model(self, x_shape, x: str, y: str) -> onnx.ModelProto:
        self.nodes[-1].output[0] = y
        graph = helper.make_graph(
            self.nodes, "generated",
            [helper.make_tensor_value_info(x, TensorProto.FLOAT, list(x_shape))],
            [helper.make_tensor_value_info(y, TensorProto.FLOAT, None)], self.inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def conv_chain(n: int, seed: int = 0) -> onnx.ModelProto:
    g = _Graph(seed)
    c = CONV_CHANNELS
    x = residual = "input"
    for pair in range(max(1, n // 5)):
        for _ in range(2):
            w = g.weight("w", (c, c, 3, 3), c * 9, gain=0.05)  # 2,000 residual sums stay finite
            b = g.const("b", (g.rng.standard_normal(c) * 0.1).astype(np.float32))
            x = g.node("Relu", [g.node("Conv", [x, w, b], pads=[1, 1, 1, 1])])
        x = residual = g.node("Add", [x, residual])
    return g.model((1, c, CONV_SIZE, CONV_SIZE), "input", "output")


def _layer_norm(g: _Graph, x: str) -> str:
    mean = g.node("ReduceMean", [x], axes=[-1])
    centred = g.node("Sub", [x, mean])
    square = g.node("Pow", [centred, g.const("two", np.float32(2.0))])
    variance = g.node("ReduceMean", [square], axes=[-1])
    std = g.node("Sqrt", [g.node("Add", [variance, g.const("eps", np.float32(1e-5))])])
    normed = g.node("Div", [centred, std])
    gamma = g.const("gamma", (1 + 0.1 * g.rng.standard_normal(WIDTH)).astype(np.float32))
    beta = g.const("beta", (0.1 * g.rng.standard_normal(WIDTH)).astype(np.float32))
    return g.node("Add", [g.node("Mul", [normed, gamma]), beta])


def _dense(g: _Graph, x: str, n_in: int, n_out: int) -> str:
    w = g.weight("w", (n_in, n_out), n_in)
    b = g.const("b", (0.1 * g.rng.standard_normal(n_out)).astype(np.float32))
    return g.node("Add", [g.node("MatMul", [x, w]), b])


def _heads(g: _Graph, x: str, perm: list[int]) -> str:
    split = g.const("shape", np.array([1, SEQUENCE, HEADS, WIDTH // HEADS], np.int64))
    return g.node("Transpose", [g.node("Reshape", [x, split])], perm=perm)


def _attention(g: _Graph, x: str) -> str:
    q = _heads(g, _dense(g, x, WIDTH, WIDTH), [0, 2, 1, 3])
    k = _heads(g, _dense(g, x, WIDTH, WIDTH), [0, 2, 3, 1])
    v = _heads(g, _dense(g, x, WIDTH, WIDTH), [0, 2, 1, 3])
    scores = g.node("Mul", [g.node("MatMul", [q, k]),
                            g.const("scale", np.float32(1 / np.sqrt(WIDTH // HEADS)))])
    context = g.node("MatMul", [g.node("Softmax", [scores], axis=-1), v])
    merged = g.node("Reshape", [g.node("Transpose", [context], perm=[0, 2, 1, 3]),
                                g.const("shape", np.array([1, SEQUENCE, WIDTH], np.int64))])
    return _dense(g, merged, WIDTH, WIDTH)


def _gelu(g: _Graph, x: str) -> str:
    erf = g.node("Erf", [g.node("Div", [x, g.const("sqrt2", np.float32(np.sqrt(2.0)))])])
    one_plus = g.node("Add", [erf, g.const("one", np.float32(1.0))])
    return g.node("Mul", [g.node("Mul", [x, one_plus]), g.const("half", np.float32(0.5))])


def _encoder_layer(g: _Graph, x: str) -> str:
    x = g.node("Add", [x, _attention(g, _layer_norm(g, x))])
    hidden = _gelu(g, _dense(g, _layer_norm(g, x), WIDTH, HIDDEN))
    return g.node("Add", [x, _dense(g, hidden, HIDDEN, WIDTH)])


def transformer_encoder(n: int, seed: int = 0) -> onnx.ModelProto:
    g = _Graph(seed)
    x = _encoder_layer(g, "input")
    per_layer = len(g.nodes)
    while len(g.nodes) + per_layer <= n:
        x = _encoder_layer(g, x)
    return g.model((1, SEQUENCE, WIDTH), "input", "output")


FAMILIES = {"conv_chain": conv_chain, "transformer": transformer_encoder}
