"""The fuzz harness's seed models: small real models that qconvert converts cleanly, float and
int8, and that every mutation in cases.py starts from.

* convnet: Conv -> Relu -> MaxPool -> depthwise Conv -> residual Add -> GlobalAveragePool ->
  Flatten -> Gemm (input "x" [1, 3, 8, 8], output "y" [1, 5]);
* dense: Gemm -> Sigmoid -> Reshape -> Concat -> Mul (broadcast) -> Transpose -> Reshape (input
  "x" [1, 12], outputs "y" [1, 24] and "s" [1, 16]);
* external: the convnet with every initializer in the external data file "weights.bin".
"""

from __future__ import annotations

import functools

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SEED_MODELS = ("convnet", "dense", "external")
EXTERNAL_DATA = "weights.bin"  # the external model's data file, beside the .onnx


def _model(nodes, inputs, outputs, inits) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "fuzz",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def convnet() -> onnx.ModelProto:
    rng = np.random.default_rng(11)
    f32 = lambda *s: (rng.standard_normal(s) * 0.5).astype(np.float32)  # noqa: E731
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", kernel_shape=[3, 3],
                         pads=[1, 1, 1, 1], strides=[1, 1], dilations=[1, 1], group=1),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], name="dwconv", kernel_shape=[3, 3],
                         pads=[1, 1, 1, 1], group=4),
        helper.make_node("Add", ["c2", "p1"], ["a1"], name="residual"),
        helper.make_node("GlobalAveragePool", ["a1"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten", axis=1),
        helper.make_node("Gemm", ["f", "wg", "bg"], ["y"], name="fc", transB=1),
    ]
    inits = {"w1": f32(4, 3, 3, 3), "b1": f32(4), "w2": f32(4, 1, 3, 3), "b2": f32(4),
             "wg": f32(5, 4), "bg": f32(5)}
    return _model(nodes, {"x": [1, 3, 8, 8]}, ["y"], inits)


def dense() -> onnx.ModelProto:
    rng = np.random.default_rng(12)
    f32 = lambda *s: (rng.standard_normal(s) * 0.5).astype(np.float32)  # noqa: E731
    nodes = [
        helper.make_node("Gemm", ["x", "wd", "bd"], ["h"], name="gemm"),
        helper.make_node("Sigmoid", ["h"], ["s"], name="sigmoid"),
        helper.make_node("Reshape", ["s", "shape3"], ["r"], name="reshape3"),
        helper.make_node("Concat", ["r", "k"], ["c"], name="concat", axis=1),
        helper.make_node("Mul", ["c", "m"], ["mm"], name="scale"),
        helper.make_node("Transpose", ["mm"], ["t"], name="transpose", perm=[0, 2, 1]),
        helper.make_node("Reshape", ["t", "shape2"], ["y"], name="reshape2"),
    ]
    inits = {"wd": f32(12, 16), "bd": f32(16), "shape3": np.array([1, 4, 4], np.int64),
             "k": f32(1, 2, 4), "m": f32(4), "shape2": np.array([1, 24], np.int64)}
    return _model(nodes, {"x": [1, 12]}, ["y", "s"], inits)


@functools.lru_cache(maxsize=None)
def _seed_bytes(name: str) -> bytes:
    return (dense() if name == "dense" else convnet()).SerializeToString()


def seed_model(name: str) -> onnx.ModelProto:
    """A fresh copy of a seed model (the external one in memory, data still inline)."""
    return onnx.ModelProto.FromString(_seed_bytes(name))


def input_shape(name: str) -> tuple[int, ...]:
    return (1, 12) if name == "dense" else (1, 3, 8, 8)


def calibration_arrays(name: str, samples: int = 4, seed: int = 0) -> dict[str, np.ndarray]:
    """Valid calibration data for a seed model: `samples` rows of standard normal input."""
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((samples,) + input_shape(name)[1:]).astype(np.float32)}


def save_external(model: onnx.ModelProto, path: str) -> None:
    """Saves `model` at `path` with every initializer in EXTERNAL_DATA beside it."""
    onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location=EXTERNAL_DATA, size_threshold=0)
