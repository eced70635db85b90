"""numpy folding for the ops onnx's reference evaluator computes wrong, slowly or not at all.

The loader folds a node whose inputs are all known (loader._Graph._evaluate). It asks
`fold(node, inputs)` first: a node whose op is in `_FOLDERS` is computed here with numpy, as
onnxruntime computes it; any other goes to onnx's reference evaluator. Each entry says why it is
here. tests/onnx/test_fold.py folds a hundred ops (float32, float16, integer) in graphs of
initializers and compares the .tflite's constants with onnxruntime's outputs, so that a new gap
of the reference evaluator shows there and its fix is one entry below.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import onnx
from onnx import helper


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _gather_elements(node, data, indices):
    """onnx 1.23's evaluator uses np.choose, which takes at most 32 (or 64) choices and then
    falls back to a wrong path ("cannot reshape array of size 1 into shape (1,32)"): BERT's
    position ids, gathered along an axis of 512. Indices may be smaller than the data on the
    other axes (ONNX allows it); negative indices count from the end."""
    axis = _attrs(node).get("axis", 0) % data.ndim
    region = tuple(slice(None) if k == axis else slice(0, n) for k, n in enumerate(indices.shape))
    indices = np.asarray(indices, dtype=np.int64)
    indices = np.where(indices < 0, indices + data.shape[axis], indices)
    return [np.take_along_axis(data[region], indices, axis=axis)]


def _identity(node, x):
    """The evaluator copies its input; an Identity of a weight (tied embeddings) would copy
    megabytes for nothing. The value is shared, never written."""
    return [x]


def _batch_normalization(node, x, scale, bias, mean, var):
    """In training mode (training_mode 1, or before opset 14 its extra outputs) the evaluator
    gives fewer outputs than the node has ("Unable to find output name"): timm's weight
    standardization (NF-ResNet) normalises each constant weight so. Training mode normalises by
    the input's own statistics over every axis but the channels, and writes the running ones."""
    attrs = _attrs(node)
    epsilon = attrs.get("epsilon", 1e-5)
    training = bool(attrs.get("training_mode", 0)) or sum(bool(o) for o in node.output) > 1
    axes = tuple(k for k in range(x.ndim) if k != 1)
    wide = x.astype(np.float64)
    channels = (1, -1) + (1,) * (x.ndim - 2)
    if training:
        batch_mean, batch_var = wide.mean(axis=axes), wide.var(axis=axes)
    else:
        batch_mean, batch_var = mean.astype(np.float64), var.astype(np.float64)
    y = ((wide - batch_mean.reshape(channels)) / np.sqrt(batch_var.reshape(channels) + epsilon)
         * scale.astype(np.float64).reshape(channels) + bias.astype(np.float64).reshape(channels))
    outputs = [y.astype(x.dtype)]
    if training:
        momentum = attrs.get("momentum", 0.9)
        running = [mean * momentum + batch_mean * (1 - momentum),
                   var * momentum + batch_var * (1 - momentum), batch_mean, batch_var]
        outputs += [np.asarray(v).astype(x.dtype) for v in running]
    return outputs[:len(node.output)]


# op_type -> function(node, *inputs) -> list of outputs (ONNX domain only).
_FOLDERS: dict[str, Callable] = {
    "BatchNormalization": _batch_normalization,
    "GatherElements": _gather_elements,
    "Identity": _identity,
}


def fold(node: onnx.NodeProto, inputs: list) -> list[np.ndarray] | None:
    """The node's outputs computed with numpy, or None when the reference evaluator is to be used.
    `inputs` are the node's input values in order (None for an omitted optional input)."""
    folder = _FOLDERS.get(node.op_type)
    return None if folder is None else folder(node, *inputs)
