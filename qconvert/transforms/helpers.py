"""Helpers the transformation steps share (graph edits no one step owns); a step imports
them from here, never from a sibling step."""

from __future__ import annotations

import numpy as np

from ..ir import Model, Operator, dequantized_name
from .quantization import FLOAT32


# --- transposes -----------------------------------------------------------------------------------

def transpose_perm(model: Model, op: Operator) -> tuple[int, ...] | None:
    """The permutation of a TRANSPOSE op (None if it is not a constant)."""
    perm = model.constant(op.inputs[1])
    return None if perm is None else tuple(int(p) for p in perm)


def inverse(perm: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argsort(perm))


def permuted(shape: tuple[int, ...], perm: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(shape[p] for p in perm)


def add_transpose(model: Model, x: str, perm: tuple[int, ...], y: str | None = None,
                  source: str = "") -> Operator:
    """A TRANSPOSE op reading x (not yet placed in model.operators); creates y if not given."""
    shape = model.arrays[x].shape
    if y is None:
        y = model.add_array_like(x + "_transposed", permuted(shape, perm), x)
    perm_name = model.add_constant("perm", np.array(perm, dtype=np.int32))
    return Operator("TRANSPOSE", [x, perm_name], [y], source=source)


# --- reshapes -------------------------------------------------------------------------------------

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


# --- constants shared by several ops --------------------------------------------------------------

def single_use_constants(model: Model) -> set[str]:
    """The constants that exactly one op input reads (none a graph output): taken as a step
    starts, for own_constant."""
    return {n for n, a in model.arrays.items() if a.is_constant and model.is_discardable(n)}


def own_constant(model: Model, op, index: int, single_use: set[str]) -> str:
    """The name of a constant input that only `op` reads: the input itself when it is in
    `single_use`, else a fresh copy. So each reader of a constant that was shared as the step
    started gets a copy of its own, and the original goes unused."""
    name = op.inputs[index]
    if name in single_use:
        return name
    array = model.arrays[name]
    copy = model.add_array(name, array.shape, array.dtype, array.data)
    model.set_input(op, index, copy)
    return copy


# --- affine ops (weights and bias) ----------------------------------------------------------------

# op type -> (weights input, bias input, output-channel axis of the weights)
AFFINE = {
    "CONV_2D": (1, 2, 0),
    "DEPTHWISE_CONV_2D": (1, 2, 3),
    "TRANSPOSE_CONV": (1, 3, 0),
    "FULLY_CONNECTED": (1, 2, 0),
}


def per_channel_vector(value: np.ndarray, channels: int, out_rank: int) -> np.ndarray | None:
    """The constant as a [channels] vector if it only varies along the last output axis."""
    if value.ndim > out_rank:
        return None
    if value.size == 1:
        return np.full(channels, value.reshape(()), dtype=np.float32)
    if value.shape[-1] == channels and value.size == channels:
        return value.reshape(channels).astype(np.float32)
    return None


# --- binary ops by a constant ---------------------------------------------------------------------

def split_constant_binary(op: Operator, model: Model) -> tuple[int, np.ndarray] | None:
    """(activation input index, constant) of a MUL/ADD by a float constant that keeps the shape."""
    if op.type not in ("MUL", "ADD") or len(op.inputs) != 2:
        return None
    values = [model.constant(n) for n in op.inputs]
    if (values[0] is None) == (values[1] is None):
        return None
    index = 0 if values[1] is not None else 1
    constant = values[1 - index]
    x, y = model.arrays[op.inputs[index]], model.arrays[op.outputs[0]]
    if constant.dtype != np.float32 or x.dtype != np.float32 or x.shape != y.shape:
        return None
    return index, constant


# --- stored weights -------------------------------------------------------------------------------

def dequantize_for(model: Model, name: str, uses: list[tuple[Operator, int]]) -> str:
    """Makes the given (op, input index) uses of the stored constant `name`, in execution order,
    read it through one DEQUANTIZE to float32, placed before the first of those ops; returns the
    float tensor."""
    array = model.arrays[name]
    result = model.add_array(dequantized_name(name), array.shape, FLOAT32)
    model.insert_before(uses[0][0], Operator("DEQUANTIZE", [name], [result], source=uses[0][0].source))
    for op, index in uses:
        model.set_input(op, index, result)
    return result
