"""Regenerates examples/tiny_cnn.onnx, the small model `make demo` converts.

A PyTorch-style CNN built with onnx.helper and seeded numpy weights: Conv+BatchNorm+Relu blocks,
a residual Add, max pooling, global average pooling, Flatten, Gemm and Softmax, on a
1x3x32x32 image. Run: .venv/bin/python examples/make_example.py
"""

import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(2026)
nodes, inits = [], []


def const(name, value):
    inits.append(numpy_helper.from_array(np.asarray(value, dtype=np.float32), name))
    return name


def conv_bn_relu(x, name, cin, cout, stride=1):
    w = rng.standard_normal((cout, cin, 3, 3)) * np.sqrt(2 / (cin * 9))
    nodes.append(helper.make_node("Conv", [x, const(f"{name}.w", w)], [f"{name}.conv"],
                                  kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[stride, stride]))
    nodes.append(helper.make_node(
        "BatchNormalization",
        [f"{name}.conv", const(f"{name}.gamma", rng.uniform(0.5, 1.5, cout)),
         const(f"{name}.beta", rng.normal(0, 0.1, cout)), const(f"{name}.mean", rng.normal(0, 0.1, cout)),
         const(f"{name}.var", rng.uniform(0.5, 1.5, cout))], [f"{name}.bn"]))
    nodes.append(helper.make_node("Relu", [f"{name}.bn"], [f"{name}.out"]))
    return f"{name}.out"


x = conv_bn_relu("image", "stem", 3, 16)
y = conv_bn_relu(x, "block1", 16, 16)
nodes.append(helper.make_node("Add", [x, y], ["residual"]))
nodes.append(helper.make_node("MaxPool", ["residual"], ["pooled"], kernel_shape=[2, 2], strides=[2, 2]))
z = conv_bn_relu("pooled", "block2", 16, 32, stride=2)
nodes.append(helper.make_node("GlobalAveragePool", [z], ["gap"]))
nodes.append(helper.make_node("Flatten", ["gap"], ["features"]))
nodes.append(helper.make_node("Gemm", ["features", const("fc.w", rng.standard_normal((10, 32)) * 0.25),
                                        const("fc.b", rng.normal(0, 0.1, 10))], ["logits"], transB=1))
nodes.append(helper.make_node("Softmax", ["logits"], ["probabilities"], axis=1))
graph = helper.make_graph(nodes, "tiny_cnn",
                          [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 32, 32])],
                          [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, [1, 10])],
                          inits)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8,
                          producer_name="qconvert examples/make_example.py")
onnx.checker.check_model(model)
onnx.save(model, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny_cnn.onnx"))
