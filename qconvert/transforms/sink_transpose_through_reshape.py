"""sink_transpose_through_reshape: TRANSPOSE -> RESHAPE becomes RESHAPE -> TRANSPOSE when the
reshape only splits or merges axes that stay whole under the transpose.

A channel shuffle (ShuffleNet) reshapes an NCHW tensor [N, C, H, W] to [N, g, C/g, H, W],
transposes g and C/g, and reshapes back. After the layout pass the NCHW tensor is a transpose of
an NHWC one; splitting C in NHWC ([N, H, W, g, C/g]) and moving the transpose behind the reshape
lets it meet the shuffle's own transpose and compose with it. Only done when the reshape's
readers are transposes, so that every rewrite lowers the number of transposes.

Works on axis groups: the reshape maps consecutive groups of input axes onto consecutive groups of
output axes with equal sizes (one axis split into several, several merged into one, or one to
one). Merged axes must be consecutive and in order before the transpose too.
"""

from __future__ import annotations

import numpy as np

from ..ir import Model
from .helpers import add_transpose, axis_groups, transpose_perm


def sink_transpose_through_reshape(model: Model) -> bool:
    changed = False
    for op in model.operators:
        if op.type != "RESHAPE" or not model.has_operator(op):
            continue
        transpose = model.producer(op.inputs[0])
        if transpose is None or transpose.type != "TRANSPOSE":
            continue
        # Only when the moved transpose meets another one and merges with it (fewer transposes).
        readers = model.consumers(op.outputs[0])
        if op.outputs[0] in model.outputs or not readers or any(r.type != "TRANSPOSE" for r in readers):
            continue
        perm = transpose_perm(model, transpose)
        source = transpose.inputs[0]
        before = model.arrays[op.inputs[0]].shape
        after = model.arrays[op.outputs[0]].shape
        groups = axis_groups(before, after) if perm is not None else None
        if not groups:
            continue
        # Each group of transposed axes must be consecutive, in order, in the source tensor.
        source_axes = [[perm[a] for a in ins] for ins, _ in groups]
        if any(axes != list(range(axes[0], axes[0] + len(axes))) for axes in source_axes):
            continue
        order = sorted(range(len(groups)), key=lambda g: source_axes[g][0])
        new_shape, position = [], {}
        for g in order:
            for k in groups[g][1]:
                position[k] = len(new_shape)
                new_shape.append(after[k])
        out_perm = tuple(position[k] for k in range(len(after)))
        reshaped = model.add_array_like(op.outputs[0] + "_pre", new_shape, op.outputs[0])
        model.set_inputs(op, [source, model.add_constant("shape", np.array(new_shape, np.int32))])
        final = op.outputs[0]
        model.set_outputs(op, [reshaped])
        model.insert_after(op, add_transpose(model, reshaped, out_perm, final, op.source))
        changed = True
    return changed
