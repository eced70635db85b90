"""distribute_binary_over_concatenation: a per-channel MUL/DIV/ADD/SUB by a constant after a
CONCATENATION of conv outputs moves into each concatenated branch.

A grouped convolution imports as SPLIT + one CONV_2D per group + CONCATENATION, so the batch norm
that follows it sits behind the concatenation. Applied per branch, each slice of the constant
then folds into its branch's conv (fuse_binary_into_affine), and the batch norm is gone.
Done only when every branch is such an affine op, so the op count never grows.
"""

from __future__ import annotations

import numpy as np

from ..ir import Model, Operator
from .helpers import AFFINE


def distribute_binary_over_concatenation(model: Model) -> bool:
    changed = False
    for op in model.operators:
        if op.type not in ("MUL", "DIV", "ADD", "SUB") or not model.has_operator(op):
            continue
        concat = model.producer(op.inputs[0])
        value = model.constant(op.inputs[1])
        if concat is None or concat.type != "CONCATENATION" or value is None:
            continue
        out_shape = model.arrays[concat.outputs[0]].shape
        axis = concat.options["axis"] % len(out_shape)
        channels = out_shape[-1]
        if axis != len(out_shape) - 1 or value.size not in (1, channels) or value.ndim > len(out_shape):
            continue
        if value.size == channels and value.shape[-1] != channels:
            continue
        if not model.is_discardable(concat.outputs[0]) or concat.fused_activation != "NONE":
            continue
        branches = [model.producer(n) for n in concat.inputs]
        if any(b is None or b.type not in AFFINE or not model.is_discardable(n)
               for b, n in zip(branches, concat.inputs)):
            continue
        per_channel = np.broadcast_to(value.reshape(-1), (channels,))
        start, new_inputs = 0, []
        for name in concat.inputs:
            width = model.arrays[name].shape[-1]
            piece = per_channel[start:start + width].astype(value.dtype)
            start += width
            result = model.add_array_like(name + "_scaled", model.arrays[name].shape, op.outputs[0])
            model.insert_before(concat, Operator(
                op.type, [name, model.add_constant(op.inputs[1], piece)], [result],
                dict(op.options), op.fused_activation, op.source))
            new_inputs.append(result)
        model.set_inputs(concat, new_inputs)
        model.set_outputs(concat, [op.outputs[0]])
        model.remove_operator(op)
        changed = True
    return changed
