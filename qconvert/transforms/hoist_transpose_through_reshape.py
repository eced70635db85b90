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
from .sink_transpose_through_reshape import axis_groups
from .sink_transposes import add_transpose, inverse, transpose_perm


def hoist_transpose_through_reshape(model: Model) -> bool:
    changed = False
    producers, consumers = model.producers(), model.consumers()
    for op in list(model.operators):
        if op.type != "TRANSPOSE" or op not in model.operators:
            continue
        reshape = producers.get(op.inputs[0])
        if reshape is None or reshape.type != "RESHAPE" or not model.is_discardable(op.inputs[0], consumers):
            continue
        before = producers.get(reshape.inputs[0])
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
        index = model.operators.index(reshape)
        first = add_transpose(model, reshape.inputs[0], a_perm, source=op.source)
        model.operators.insert(index, first)
        out_shape = model.arrays[op.outputs[0]].shape
        reshape.inputs = [first.outputs[0], model.add_constant("shape", np.array(out_shape, np.int32))]
        reshape.outputs = [op.outputs[0]]
        model.operators.remove(op)
        producers, consumers = model.producers(), model.consumers()
        changed = True
    return changed
