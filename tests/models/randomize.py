"""Seeded random weights for the onnx package's "light" model zoo copies.

onnx/backend/test/data/light holds real architectures (ResNet-50, SqueezeNet, ShuffleNet,
Inception v1/v2, DenseNet-121, VGG-19, AlexNet, ZFNet-512) whose big weights are made at run time
by ConstantOfShape nodes: the value 0.02 everywhere, shapes from `*__SHAPE` initializers. Constant
weights make every channel and every kernel tap alike, so a wrong weight layout (OIHW vs OHWI, a
transposed Gemm) still gives the right answer. randomize_light_model swaps each ConstantOfShape
weight for a seeded random initializer whose distribution fits the role of the tensor, found from
the node that consumes it:

- Conv input 1 and Gemm input B: He normal, std sqrt(2 / fan_in) (keeps activations O(1) through
  ReLU stacks); Conv/Gemm biases: normal, std 0.01.
- BatchNormalization: scale U(0.5, 1.5) * 0.92 (so that the average gain scale/sqrt(var) is 1),
  bias normal std 0.01, mean normal std 0.05, variance U(0.5, 1.5) (positive).
- DenseNet/Inception-v2 follow each BatchNormalization with Mul(Unsqueeze(w)) + Add(Unsqueeze(b))
  (Caffe's Scale layer): the Mul factor is drawn like a BN scale, the Add term like a bias, and
  the BN's own scale is 1, as in the original.
- Residual sums: the BN scale of a branch added onto an identity shortcut is shrunk (x0.25), and
  of k BN outputs summed, by 1/sqrt(k); else ResNet-50's logits reach 1e4 (see residual_gain).

The few float initializers that hold real trained values (some BN statistics and biases) are
redrawn by the same rules: paired with random weights they are meaningless, and some are
degenerate (variances of 1e-45). With these rules every model's pre-softmax logits have a std
between about 1.5 and 15 on a standard normal input, and no activation explodes.

The model also gets a modern header: graph inputs are only the real data inputs (the IR-3 models
listed every initializer as an input) and ir_version 8, which onnxruntime loads; the opset is kept.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

LIGHT_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
# Short name -> file stem in LIGHT_DIR.
LIGHT_MODELS = {
    "resnet50": "light_resnet50",
    "squeezenet": "light_squeezenet",
    "shufflenet": "light_shufflenet",
    "inception_v1": "light_inception_v1",
    "inception_v2": "light_inception_v2",
    "densenet121": "light_densenet121",
    "vgg19": "light_vgg19",
    "alexnet": "light_bvlc_alexnet",
    "zfnet512": "light_zfnet512",
}
IR_VERSION = 8
_FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE}
# Ops that only move a tensor around: the role of a weight is decided by what consumes their output.
_PASS_THROUGH = {"Unsqueeze", "Reshape", "Identity", "Squeeze", "Flatten"}
# op type -> input position -> role of a constant found there.
_ROLES = {
    "Conv": {1: "conv_weight", 2: "bias"},
    "ConvTranspose": {1: "conv_weight", 2: "bias"},
    "Gemm": {1: "gemm_weight", 2: "bias"},
    "MatMul": {1: "matmul_weight"},
    "BatchNormalization": {1: "bn_scale", 2: "bias", 3: "bn_mean", 4: "bn_var"},
    "Mul": {0: "scale", 1: "scale"},
    "Add": {0: "bias", 1: "bias"},
    "Sum": {0: "bias", 1: "bias"},
    "Sub": {0: "bias", 1: "bias"},
    "PRelu": {1: "slope"},
}
# Scales are U(0.5, 1.5) times this, so that with variances U(0.5, 1.5) the gain of a normalisation
# is 1 on average: E[g^2] E[1/v] = 13/12 ln 3. Else DenseNet/Inception-v2 logits grow to ~1e2.
_SCALE_GAIN = 1.0 / np.sqrt(13 / 12 * np.log(3))
# Scale factor of a residual branch summed onto an identity shortcut (see residual_gain).
_RESIDUAL_BRANCH_GAIN = 0.25


def light_model_path(name: str) -> Path:
    """Path of a light model, by short name (see LIGHT_MODELS) or file stem."""
    return LIGHT_DIR / (LIGHT_MODELS.get(name, name) + ".onnx")


def load_randomized(name: str, seed: int = 0) -> onnx.ModelProto:
    """Loads a light model by short name and randomizes its weights."""
    return randomize_light_model(onnx.load(str(light_model_path(name))), seed)


class _GraphIndex:
    """Who consumes and who produces each tensor, and which tensors are constant."""

    def __init__(self, graph: onnx.GraphProto):
        self.users: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
        self.producer: dict[str, onnx.NodeProto] = {}
        self.constants = {t.name for t in graph.initializer}
        for node in graph.node:
            for position, name in enumerate(node.input):
                self.users.setdefault(name, []).append((node, position))
            for name in node.output:
                self.producer[name] = node
            if all(name in self.constants for name in node.input if name):
                self.constants.update(node.output)

    def role(self, name: str) -> tuple[str, onnx.NodeProto | None]:
        """(role, consumer) of a weight, following pass-through ops to the real consumer."""
        for node, position in self.users.get(name, []):
            op = node.op_type
            if op in _PASS_THROUGH and position == 0:
                role, consumer = self.role(node.output[0])
                if role != "unknown":
                    return role, consumer
            elif op in _ROLES:
                return _ROLES[op].get(position, "unknown"), node
        return "unknown", None

    def scaled_after(self, bn: onnx.NodeProto) -> bool:
        """Whether a constant Mul follows the BatchNormalization (Caffe's BatchNorm + Scale, as in
        DenseNet and Inception v2): the Mul is then the learnt scale; the BN's own scale is 1."""
        for node, _ in self.users.get(bn.output[0], []):
            if node.op_type == "Mul" and any(n in self.constants for n in node.input):
                return True
        return False

    def residual_gain(self, bn: onnx.NodeProto) -> float:
        """Factor on the scale of a BatchNormalization whose output is summed with activations.

        With random statistics a BatchNormalization does not normalise, so each residual block
        adds its branch on top of the shortcut and activations grow geometrically (x1e4 by the end
        of ResNet-50, softmax saturated). As with zero-init residuals in training, a branch summed
        with an identity shortcut gets a small factor, and k summed BatchNormalization outputs (a
        projection block) get 1/sqrt(k) each, so the variance stays O(1).
        """
        for node, _ in self.users.get(bn.output[0], []):
            if node.op_type not in ("Add", "Sum"):
                continue
            activations = [n for n in node.input if n and n not in self.constants]
            if len(activations) < 2:
                continue
            producers = [self.producer.get(n) for n in activations]
            if all(p is not None and p.op_type == "BatchNormalization" for p in producers):
                return 1.0 / np.sqrt(len(activations))
            return _RESIDUAL_BRANCH_GAIN
        return 1.0


def _attr(node: onnx.NodeProto, name: str, default):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _fan_in(role: str, shape: tuple[int, ...], consumer: onnx.NodeProto | None) -> int:
    """Inputs summed into one output of the consuming matrix product / convolution."""
    if role == "conv_weight":  # Conv: (M, C/group, kH, kW); ConvTranspose: (C, M/group, kH, kW)
        if consumer is not None and consumer.op_type == "ConvTranspose":
            return int(np.prod(shape[2:])) * shape[1] if len(shape) > 1 else 1
        return int(np.prod(shape[1:]))
    # Gemm/MatMul: B is (K, N), or (N, K) with transB; the stored tensor may carry extra unit
    # dimensions that a Reshape drops (Inception v1 keeps its classifier as (1, 1, 1000, 1024)).
    dims = [d for d in shape if d != 1] or [1]
    outputs = dims[0] if role == "gemm_weight" and _attr(consumer, "transB", 0) else dims[-1]
    return int(np.prod(shape)) // outputs


def _sample(role: str, shape: tuple[int, ...], consumer, index: _GraphIndex,
            rng: np.random.Generator) -> np.ndarray:
    """float32 random values of a sensible scale for a tensor of the given role."""
    if role in ("conv_weight", "gemm_weight", "matmul_weight"):
        fan_in = max(_fan_in(role, shape, consumer), 1)
        return rng.standard_normal(shape, dtype=np.float32) * np.float32(np.sqrt(2.0 / fan_in))
    if role == "bn_scale":
        if index.scaled_after(consumer):
            return np.ones(shape, np.float32)
        gain = _SCALE_GAIN * index.residual_gain(consumer)
        return rng.uniform(0.5, 1.5, shape).astype(np.float32) * np.float32(gain)
    if role == "scale":
        return rng.uniform(0.5, 1.5, shape).astype(np.float32) * np.float32(_SCALE_GAIN)
    if role == "bn_var":
        return rng.uniform(0.5, 1.5, shape).astype(np.float32)
    if role == "bn_mean":
        return rng.standard_normal(shape, dtype=np.float32) * np.float32(0.05)
    if role == "slope":
        return rng.uniform(0.05, 0.3, shape).astype(np.float32)
    return rng.standard_normal(shape, dtype=np.float32) * np.float32(0.01)  # biases, unknowns


def _constant_of_shape_dtype(node: onnx.NodeProto) -> np.dtype:
    value = _attr(node, "value", None)
    return numpy_helper.to_array(value).dtype if value is not None else np.dtype(np.float32)


def randomize_light_model(model: onnx.ModelProto, seed: int) -> onnx.ModelProto:
    """A copy of `model` whose weights are seeded random initializers; deterministic per seed.

    Every float ConstantOfShape with a constant shape becomes an initializer; float initializers
    with a recognised role are redrawn (see the module docstring). Graph inputs become the data
    inputs only, the `__SHAPE` initializers go, and ir_version becomes 8 (opset kept).
    """
    model = copy.deepcopy(model)
    graph = model.graph
    rng = np.random.default_rng(seed)
    index = _GraphIndex(graph)
    inits = {t.name: t for t in graph.initializer}
    targets, replaced = [], set()  # (name, shape, dtype) of each tensor to draw, in graph order
    for node in graph.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in inits:
            dtype = _constant_of_shape_dtype(node)
            if dtype.kind == "f":
                shape = tuple(int(d) for d in numpy_helper.to_array(inits[node.input[0]]))
                targets.append((node.output[0], shape, dtype))
                replaced.add(id(node))
    for tensor in graph.initializer:
        if tensor.data_type in _FLOAT_TYPES and index.role(tensor.name)[0] != "unknown":
            dtype = helper.tensor_dtype_to_np_dtype(tensor.data_type)
            targets.append((tensor.name, tuple(tensor.dims), dtype))
    values = {}
    for name, shape, dtype in targets:
        role, consumer = index.role(name)
        values[name] = _sample(role, shape, consumer, index, rng).astype(dtype, copy=False)
    kept_nodes = [n for n in graph.node if id(n) not in replaced]
    del graph.node[:]
    graph.node.extend(kept_nodes)
    _inputs_only_data(graph, set(inits) | set(values))
    _set_initializers(graph, values)
    model.ir_version = IR_VERSION
    return model


def _set_initializers(graph: onnx.GraphProto, values: dict[str, np.ndarray]) -> None:
    """Initializers become `values` plus the old ones still read (the `__SHAPE` tensors go)."""
    used = {name for node in graph.node for name in node.input} | {o.name for o in graph.output}
    kept = [t for t in graph.initializer if t.name in used and t.name not in values]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    for name, value in values.items():  # filled in place: one copy of each (big) tensor
        tensor = graph.initializer.add()
        tensor.name = name
        tensor.data_type = helper.np_dtype_to_tensor_dtype(value.dtype)
        tensor.dims.extend(value.shape)
        tensor.raw_data = np.ascontiguousarray(value, value.dtype.newbyteorder("<")).tobytes()


def _inputs_only_data(graph: onnx.GraphProto, inits: set[str]) -> None:
    """Graph inputs become the real data inputs only (IR >= 4 does not list initializers)."""
    kept = [i for i in graph.input if i.name not in inits]
    del graph.input[:]
    graph.input.extend(kept)
