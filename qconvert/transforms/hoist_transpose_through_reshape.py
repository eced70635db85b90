"""hoist_transpose_through_reshape: TRANSPOSE -> RESHAPE -> TRANSPOSE becomes
TRANSPOSE -> TRANSPOSE -> RESHAPE (which then compose into one transpose) when the reshape only
splits or merges axes that the second transpose keeps whole and in order.

The second half of a channel shuffle: [N, C/g, g, H, W] reshaped to NCHW [N, C, H, W] and then
transposed to NHWC by the next conv's layout transpose is the same as transposing to
[N, H, W, C/g, g] first and reshaping to [N, H, W, C]; the first transpose then merges with the
shuffle's own. Only done when the reshape's input is itself a transpose, so that the count of
transposes goes down.
"""

from __future__ import annotations

import numpy as np

from ..ir import Model
from .helpers import add_transpose, axis_groups, inverse, transpose_perm


def hoist_transpose_through_reshape(model: Model) -> bool:
    changed = False
    for op in model.operators:
        if op.type != "TRANSPOSE" or not model.has_operator(op):
            continue
        reshape = model.producer(op.inputs[0])
        if reshape is None or reshape.type != "RESHAPE" or not model.is_discardable(op.inputs[0]):
            continue
        before = model.producer(reshape.inputs[0])
        perm = transpose_perm(model, op)
        if before is None or before.type != "TRANSPOSE" or perm is None:
            continue
        a_shape = model.arrays[reshape.inputs[0]].shape
        b_shape = model.arrays[reshape.outputs[0]].shape
        groups = axis_groups(a_shape, b_shape)
        if not groups:
            continue
        # Where each group's reshaped axes land after the transpose: consecutive, in order.
        where = inverse(perm)
        positions = [[where[b] for b in outs] for _, outs in groups]
        if any(p != list(range(p[0], p[0] + len(p))) for p in positions):
            continue
        order = sorted(range(len(groups)), key=lambda g: positions[g][0])
        a_perm = tuple(a for g in order for a in groups[g][0])
        first = add_transpose(model, reshape.inputs[0], a_perm, source=op.source)
        model.insert_before(reshape, first)
        out_shape = np.array(model.arrays[op.outputs[0]].shape, np.int32)
        model.set_inputs(reshape, [first.outputs[0], model.add_constant("shape", out_shape)])
        model.set_outputs(reshape, [op.outputs[0]])
        model.remove_operator(op)
        changed = True
    return changed
