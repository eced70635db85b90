"""fuse_binary_into_affine: folds a per-channel MUL/DIV/ADD/SUB by a constant into the preceding
CONV_2D, DEPTHWISE_CONV_2D, TRANSPOSE_CONV or FULLY_CONNECTED weights and bias.

This is batch-norm folding: BatchNormalization imports as MUL + ADD by per-channel constants, and
once the layout transposes are gone they directly follow the conv. A constant that varies along any
axis but the output channel cannot fold and the binary op stays (standalone batch norm).
"""

import numpy as np

from ..ir import Model
from .helpers import AFFINE, per_channel_vector


def fuse_binary_into_affine(model: Model) -> bool:
    changed = False
    for op in model.operators:
        if op.type not in ("MUL", "DIV", "ADD", "SUB") or not model.has_operator(op):
            continue
        for side in (0, 1):
            affine = model.producer(op.inputs[side])
            value = model.constant(op.inputs[1 - side])
            if affine is None or value is None or affine.type not in AFFINE:
                continue
            if (op.type in ("SUB", "DIV") and side == 1) or affine.fused_activation != "NONE":
                continue
            y = affine.outputs[0]
            if not model.is_discardable(y) or model.arrays[y].dtype != np.float32:
                continue
            if model.arrays[op.outputs[0]].shape != model.arrays[y].shape:
                continue
            w_index, b_index, axis = AFFINE[affine.type]
            weights = model.constant(affine.inputs[w_index])
            channels = model.arrays[y].shape[-1]
            c = per_channel_vector(value, channels, len(model.arrays[y].shape))
            if weights is None or c is None or weights.shape[axis] != channels:
                continue
            bias_name = affine.inputs[b_index] if b_index < len(affine.inputs) else ""
            bias = model.constant(bias_name)
            if bias_name and bias is None:
                continue
            bias = np.zeros(channels, np.float32) if bias is None else bias.astype(np.float32)
            if op.type in ("MUL", "DIV"):
                c = c if op.type == "MUL" else 1.0 / c
                shape = [1] * weights.ndim
                shape[axis] = channels
                weights = weights * c.reshape(shape)
                bias = bias * c
                model.set_input(affine, w_index,
                                model.add_constant(affine.inputs[w_index], weights.astype(np.float32)))
            else:
                bias = bias + c if op.type == "ADD" else bias - c
            inputs = affine.inputs + [""] * (b_index + 1 - len(affine.inputs))
            inputs[b_index] = model.add_constant(bias_name or y + "_bias", bias.astype(np.float32))
            model.set_inputs(affine, inputs)
            model.set_output(affine, 0, op.outputs[0])
            affine.fused_activation = op.fused_activation
            model.remove_operator(op)
            changed = True
            break
    return changed
