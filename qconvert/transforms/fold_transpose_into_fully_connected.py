"""fold_transpose_into_fully_connected: TRANSPOSE -> RESHAPE(flatten) -> FULLY_CONNECTED reads the
untransposed tensor and permutes the weight columns instead.

A classifier head flattens an NCHW feature map (VGG, AlexNet); in NHWC the same flatten visits the
values in another order. Permuting the constant weights once at conversion time removes the
transpose from the graph.
"""

import numpy as np

from ..ir import Model
from .sink_transposes import inverse, transpose_perm


def fold_transpose_into_fully_connected(model: Model) -> bool:
    changed = False
    for fc in model.operators:
        if fc.type != "FULLY_CONNECTED":
            continue
        reshape = model.producer(fc.inputs[0])
        weights = model.constant(fc.inputs[1])
        if reshape is None or reshape.type != "RESHAPE" or weights is None:
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
        out_channels = weights.shape[0]
        w = weights.reshape((out_channels,) + t_shape[1:])
        w = np.transpose(w, (0,) + tuple(inv[k] for k in range(1, len(perm))))
        model.set_input(fc, 1, model.add_constant(fc.inputs[1], np.ascontiguousarray(w.reshape(out_channels, -1))))
        model.set_input(reshape, 0, transpose.inputs[0])
        changed = True
    return changed
