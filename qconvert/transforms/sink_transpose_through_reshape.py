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
from .sink_transposes import add_transpose, transpose_perm


def axis_groups(before: tuple[int, ...], after: tuple[int, ...]):
    """[(input axes, output axes)] pairing equal-size runs of axes, or None if it cannot."""
    groups, i, j = [], 0, 0
    while i < len(before) and j < len(after):
        ins, outs = [i], [j]
        size_in, size_out = before[i], after[j]
        i, j = i + 1, j + 1
        while size_in != size_out:
            if size_in < size_out and i < len(before):
                ins.append(i)
                size_in *= before[i]
                i += 1
            elif size_out < size_in and j < len(after):
                outs.append(j)
                size_out *= after[j]
                j += 1
            else:
                return None
        groups.append((ins, outs))
    if i != len(before) or j != len(after):
        return None
    if any(len(ins) > 1 and len(outs) > 1 for ins, outs in groups):
        return None  # a reshuffle of several axes into several: not a split or a merge
    return groups


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
