"""numpy folding for the ops onnx's reference evaluator computes wrong, slowly or not at all.

The loader folds a node whose inputs are all known (loader._Graph._evaluate). It asks
`fold(node, inputs)` first: a node whose op is in `_FOLDERS` is computed here with numpy, as
onnxruntime computes it; any other goes to onnx's reference evaluator. Each entry says why it is
here. The ops that make a big constant from a small one (ConstantOfShape, Expand, Range, EyeLike,
OneHot) compute in their output's dtype with one allocation of the output's size, which the
loader has checked against errors.FOLDED_BYTES before (onnx/folding.py, _fold_sizes).
tests/onnx/test_fold.py folds a hundred ops (float32, float16, integer) in graphs of
initializers and compares the .tflite's constants with onnxruntime's outputs, so that a new gap
of the reference evaluator shows there and its fix is one entry below.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import onnx
from onnx import helper, numpy_helper


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


def _constant_of_shape(node, shape):
    """One allocation in the value's own dtype (float32 0 by default); the loader has sized it
    against errors.FOLDED_BYTES before."""
    value = _attrs(node).get("value")
    value = np.zeros(1, np.float32) if value is None else numpy_helper.to_array(value)
    dims = tuple(int(d) for d in np.ravel(shape))
    if any(d < 0 for d in dims):
        raise ValueError(f"negative dimension in shape {list(dims)}")
    return [np.full(dims, value.reshape(-1)[0], dtype=value.dtype)]


def _expand(node, data, shape):
    """The evaluator multiplies by an array of ones: a second full-size array. One copy here."""
    dims = np.broadcast_shapes(data.shape, tuple(int(d) for d in np.ravel(shape)))
    return [np.array(np.broadcast_to(data, dims))]


def _range(node, start, limit, delta):
    """In the inputs' dtype, as onnxruntime computes it: integers start + k * delta; floats by
    adding delta to the previous value in that dtype (a float32 cumulative sum, onnxruntime's
    loop). The evaluator computes a float range in float64 (twice the memory) and so differs
    from onnxruntime in the last bits of a long float32 range."""
    dtype = np.asarray(start).dtype
    start, limit, delta = (np.asarray(v, dtype).reshape(-1)[0] for v in (start, limit, delta))
    if delta == 0:
        raise ValueError("Range's delta is 0")
    if dtype.kind != "f":  # counted exactly (in float64, 2^62 + 4 - 2^62 would be 0)
        count = max(-((int(start) - int(limit)) // int(delta)), 0)
        return [start + np.arange(count, dtype=dtype) * delta]
    count = max(math.ceil((float(limit) - float(start)) / float(delta)), 0)
    values = np.full(count, delta, dtype)
    if count:
        values[0] = start
    return [np.cumsum(values, dtype=dtype, out=values)]


def _eye_like(node, x):
    """In the `dtype` attribute's type (else the input's)."""
    attrs = _attrs(node)
    dtype = x.dtype if "dtype" not in attrs else helper.tensor_dtype_to_np_dtype(attrs["dtype"])
    rows, cols = x.shape
    return [np.eye(rows, cols, k=attrs.get("k", 0), dtype=dtype)]


def _one_hot(node, indices, depth, values):
    """In the values' dtype, one output-sized allocation (the evaluator makes three): indices in
    [-depth, depth) are on (negative ones count from the end), others leave the row off."""
    depth = int(np.ravel(depth)[0])
    axis = _attrs(node).get("axis", -1)
    axis = axis + indices.ndim + 1 if axis < 0 else axis
    indices = np.asarray(indices).astype(np.int64)
    indices = np.where(indices < 0, indices + depth, indices)
    positions = np.arange(depth).reshape((1,) * axis + (depth,) + (1,) * (indices.ndim - axis))
    off, on = np.ravel(values)[:2]
    return [np.where(np.expand_dims(indices, axis) == positions, on, off).astype(values.dtype)]


# op_type -> function(node, *inputs) -> list of outputs (ONNX domain only).
_FOLDERS: dict[str, Callable] = {
    "BatchNormalization": _batch_normalization,
    "ConstantOfShape": _constant_of_shape,
    "Expand": _expand,
    "EyeLike": _eye_like,
    "GatherElements": _gather_elements,
    "Identity": _identity,
    "OneHot": _one_hot,
    "Range": _range,
}


def fold(node: onnx.NodeProto, inputs: list) -> list[np.ndarray] | None:
    """The node's outputs computed with numpy, or None when the reference evaluator is to be used.
    `inputs` are the node's input values in order (None for an omitted optional input)."""
    folder = _FOLDERS.get(node.op_type)
    return None if folder is None else folder(node, *inputs)
