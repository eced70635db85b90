"""fold_transpose_into_fully_connected: TRANSPOSE -> RESHAPE(flatten) -> FULLY_CONNECTED reads the
untransposed tensor and permutes the weight columns instead.

A classifier head flattens an NCHW feature map (VGG, AlexNet); in NHWC the same flatten visits the
values in another order. Permuting the constant weights once at conversion time removes the
transpose from the graph. The flattened tensor then holds the values in that other order, so it
takes a name of its own (`<name>_reordered`): a tensor keeps an ONNX name only while it holds that
tensor's values in the ONNX order (the per-tensor report relies on it).
"""

import numpy as np

from ..ir import Model
from .helpers import inverse, transpose_perm


# Rows permuted per block: a big weight (VGG's first dense layer is 411 MB) is rewritten in place
# when nothing else reads it, with one block as scratch.
_BLOCK_BYTES = 16 << 20


def _permute_columns(weights: np.ndarray, out: np.ndarray, inner_shape: tuple[int, ...],
                     axes: tuple[int, ...]) -> None:
    """out[r] = weights[r] viewed as inner_shape and transposed by axes (axes[0] is the row);
    `out` may be `weights` itself."""
    rows = weights.shape[0]
    step = max(1, _BLOCK_BYTES // max(1, weights[:1].nbytes))
    for start in range(0, rows, step):
        block = weights[start:start + step]
        out[start:start + step] = np.transpose(block.reshape((len(block),) + inner_shape), axes).reshape(
            block.shape)


def fold_transpose_into_fully_connected(model: Model) -> bool:
    changed = False
    for fc in model.operators:
        if fc.type != "FULLY_CONNECTED":
            continue
        reshape = model.producer(fc.inputs[0])
        if reshape is None or reshape.type != "RESHAPE" or not model.arrays[fc.inputs[1]].is_constant:
            continue
        transpose = model.producer(reshape.inputs[0])
        if transpose is None or transpose.type != "TRANSPOSE":
            continue
        if not model.is_discardable(fc.inputs[0]):
            continue
        perm = transpose_perm(model, transpose)
        t_shape = model.arrays[transpose.outputs[0]].shape
        flat = model.arrays[reshape.outputs[0]].shape
        if perm is None or perm[0] != 0 or len(flat) != 2 or flat[0] != t_shape[0]:
            continue
        inv = inverse(perm)
        axes = (0,) + tuple(inv[k] for k in range(1, len(perm)))
        permuted = model.data_to_change_in_place(fc.inputs[1])  # before anything else holds it
        weights = model.constant(fc.inputs[1])
        if permuted is None:
            permuted = np.empty_like(weights)
        _permute_columns(weights, permuted, t_shape[1:], axes)
        model.set_input(fc, 1, model.add_constant(fc.inputs[1], permuted))
        del permuted, weights
        model.set_input(reshape, 0, transpose.inputs[0])
        model.rename_tensor(reshape.outputs[0], model.unique_name(reshape.outputs[0] + "_reordered"))
        changed = True
    return changed
