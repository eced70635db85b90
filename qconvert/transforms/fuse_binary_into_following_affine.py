"""fuse_binary_into_following_affine: folds a MUL/DIV/ADD/SUB by a constant into the CONV_2D,
DEPTHWISE_CONV_2D or FULLY_CONNECTED that reads its result (TOCO's FuseBinaryIntoFollowingAffine).

conv(x * c) is conv(x) with the weights scaled by c along their input channels, and conv(x + c)
is conv(x) with sum(w * c) over the window added to the bias. The second holds only where no
padding enters the window (a padded zero would have been c), so ADD/SUB fold into VALID or 1x1
convs and FULLY_CONNECTED only. PP-LCNet (PP-OCR) scales every HardSwish by a learned `x * a + b`
right before its next conv: two elementwise ops per block in float, and in int8 two more
requantizations, that this removes.

The constant is a scalar, or per channel for a depthwise conv (whose input channels are its
output channels): a per-input-channel scale folded into a CONV_2D or FULLY_CONNECTED would spread
one output channel's int8 weights over very different magnitudes. Folding happens nearest the
affine first, so a chain `x / 6 * a + b -> conv` folds op by op as the fixed point repeats.
"""

from __future__ import annotations

import numpy as np

from ..ir import Model, Operator

# op type -> (weights input, bias input); weights are OHWI ([O, I] for FULLY_CONNECTED) or, for
# depthwise, [1, H, W, I * multiplier].
AFFINE = {"CONV_2D": (1, 2), "DEPTHWISE_CONV_2D": (1, 2), "FULLY_CONNECTED": (1, 2)}


def _input_channel_constant(affine: Operator, value: np.ndarray, weights: np.ndarray,
                           channels: int) -> np.ndarray | None:
    """The constant, broadcastable along the weights' last axis: a float32 scalar, or for a
    depthwise conv a per-channel vector repeated for each channel's multiplier; None otherwise."""
    if value.size == 1:
        return np.float32(value.reshape(()))
    if affine.type == "DEPTHWISE_CONV_2D" and value.size == channels and value.shape[-1] == channels:
        # Output channel o reads input channel o // multiplier.
        return np.repeat(value.reshape(channels).astype(np.float32), weights.shape[3] // channels)
    return None


def _no_padding(affine: Operator, weights: np.ndarray) -> bool:
    """True when no padded value enters any window of the affine."""
    if affine.type == "FULLY_CONNECTED":
        return True
    return affine.options.get("padding") == "VALID" or weights.shape[1:3] == (1, 1)


def _fold(affine: Operator, kind: str, weights: np.ndarray, bias: np.ndarray, c):
    """(weights, bias) of the affine after absorbing `x * c` (kind "MUL") or `x + c` ("ADD")."""
    if kind == "MUL":
        return weights * c, bias
    if affine.type == "DEPTHWISE_CONV_2D":
        return weights, bias + (weights * c).sum(axis=(0, 1, 2))
    return weights, bias + (weights * c).reshape(weights.shape[0], -1).sum(axis=1)


def fuse_binary_into_following_affine(model: Model) -> bool:
    changed = False
    for op in model.operators:
        if op.type not in ("MUL", "DIV", "ADD", "SUB") or not model.has_operator(op):
            continue
        if op.fused_activation != "NONE" or len(op.inputs) != 2:
            continue
        y = op.outputs[0]
        if not model.is_discardable(y):  # one reader, not a graph output
            continue
        affine = model.consumers(y)[0]
        if affine.type not in AFFINE or affine.inputs[0] != y:
            continue
        for side in (0, 1):
            x, value = op.inputs[side], model.constant(op.inputs[1 - side])
            if value is None or model.constant(x) is not None:
                continue
            if op.type in ("SUB", "DIV") and side == 1:  # c - x, c / x: not affine in x
                continue
            if model.arrays[x].shape != model.arrays[y].shape or model.arrays[y].dtype != np.float32:
                continue
            w_index, b_index = AFFINE[affine.type]
            weights = model.constant(affine.inputs[w_index])
            channels = model.arrays[y].shape[-1]
            if weights is None or weights.dtype != np.float32:
                continue
            c = _input_channel_constant(affine, value, weights, channels)
            if c is None:
                continue
            kind = "MUL" if op.type in ("MUL", "DIV") else "ADD"
            if kind == "ADD" and not _no_padding(affine, weights):
                continue
            bias_name = affine.inputs[b_index] if b_index < len(affine.inputs) else ""
            bias = model.constant(bias_name)
            if bias_name and bias is None:
                continue
            out_channels = weights.shape[3 if affine.type == "DEPTHWISE_CONV_2D" else 0]
            bias = np.zeros(out_channels, np.float32) if bias is None else bias.astype(np.float32)
            if op.type == "DIV":
                if not np.all(c):
                    continue
                c = np.float32(1) / c
            elif op.type == "SUB":
                c = -c
            weights, bias = _fold(affine, kind, weights, bias, c)
            inputs = affine.inputs + [""] * (b_index + 1 - len(affine.inputs))
            inputs[0] = x
            inputs[w_index] = model.add_constant(affine.inputs[w_index], weights.astype(np.float32))
            inputs[b_index] = model.add_constant(bias_name or affine.outputs[0] + "_bias",
                                                 bias.astype(np.float32))
            model.set_inputs(affine, inputs)
            model.remove_operator(op)
            changed = True
            break
    return changed
