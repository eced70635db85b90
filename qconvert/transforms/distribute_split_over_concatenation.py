"""distribute_split_over_concatenation: a SPLIT or SPLIT_V that takes apart what a concatenation
put together moves up to the concatenation's inputs, one op per pass of the fixed point:

- through a CONCATENATION on another axis: each of its inputs is split, and each part's pieces
  are concatenated (the detector head's levels: concat(level_i) then split(box, class));
- through a RESHAPE that keeps the split axis as an axis of its own, and a TRANSPOSE: the input
  is split, each part reshaped (transposed);
- into a CONCATENATION on the split axis whose boundaries the split's fall on: each part is the
  inputs it covers (one input as it is, several concatenated), and the split goes.

Why: int8 gives a concatenation one scale for all its inputs. YOLOv8's head concatenates each
level's 64 box-distribution logits (about +-15) with its class logits (about -20..0), then the
three levels, then splits box from class: in int8 the class logits take the box logits' scale
and the SPLIT hands it on. Distributed, the class logits never meet the box logits: each keeps
the params of the conv that made it. Exact in float (the same values, moved).

Only where each tensor on the way is read by that one op alone (nothing else needs the whole).
A part that is a model output keeps its name (the op that made the part writes it).
"""

from __future__ import annotations

import numpy as np

from ..ir import Model, Operator
from .helpers import axis_groups

MAX_DEPTH = 16  # ops a split looks up through for the concatenation it undoes


def distribute_split_over_concatenation(model: Model) -> bool:
    changed = False
    for op in model.operators:
        if not model.has_operator(op) or op.type not in ("SPLIT", "SPLIT_V"):
            continue
        found = _split(model, op)
        if found is None:
            continue
        x, axis, sizes = found
        if op.fused_activation != "NONE" or not _undoes(model, x, axis, sizes):
            continue
        producer = model.producer(x)
        if producer.type == "CONCATENATION":
            if producer.options.get("axis", 0) % len(model.arrays[x].shape) == axis:
                changed |= _cancel(model, op, producer, axis, sizes)
            else:
                changed |= _through_concatenation(model, op, producer, axis, sizes)
        elif producer.type == "RESHAPE":
            changed |= _through_reshape(model, op, producer, axis, sizes)
        elif producer.type == "TRANSPOSE":
            changed |= _through_transpose(model, op, producer, axis, sizes)
    return changed


def _undoes(model: Model, x: str, axis: int, sizes: list[int], depth: int = 0) -> bool:
    """Whether splitting x along `axis` into `sizes` moves up, through ops read by nothing else,
    to concatenations whose boundaries it falls on (on every path): only then it moves at all."""
    producer = model.producer(x)
    if (producer is None or depth > MAX_DEPTH or not model.is_discardable(x)
            or producer.fused_activation != "NONE"):
        return False
    if producer.type == "CONCATENATION":
        if producer.options.get("axis", 0) % len(model.arrays[x].shape) == axis:
            return _covered(model, producer, axis, sizes) is not None
        return all(_undoes(model, i, axis, sizes, depth + 1) for i in producer.inputs)
    if producer.type == "RESHAPE":
        mapped = _reshaped_axis(model, producer, axis)
        return mapped is not None and _undoes(model, producer.inputs[0], mapped, sizes, depth + 1)
    if producer.type == "TRANSPOSE":
        perm = model.constant(producer.inputs[1])
        return perm is not None and _undoes(model, producer.inputs[0], int(perm[axis]), sizes, depth + 1)
    return False


def _covered(model: Model, concat: Operator, axis: int, sizes: list[int]) -> list[list[str]] | None:
    """For each part of the split, the concatenation's inputs it covers; None when a part's
    boundary falls inside an input."""
    starts = np.concatenate([[0], np.cumsum([model.arrays[i].shape[axis] for i in concat.inputs])])
    index = {int(s): k for k, s in enumerate(starts)}
    bounds = np.concatenate([[0], np.cumsum(sizes)]).tolist()
    if any(b not in index for b in bounds):
        return None
    return [concat.inputs[index[lo]:index[hi]] for lo, hi in zip(bounds, bounds[1:])]


def _reshaped_axis(model: Model, reshape: Operator, axis: int) -> int | None:
    """The reshape input's axis that is the output's `axis` alone, else None."""
    before, after = model.arrays[reshape.inputs[0]].shape, model.arrays[reshape.outputs[0]].shape
    group = next((g for g in axis_groups(tuple(before), tuple(after)) or [] if g[1] == [axis]), None)
    return group[0][0] if group is not None and len(group[0]) == 1 else None


def _split(model: Model, op: Operator) -> tuple[str, int, list[int]] | None:
    """(input, axis, part sizes) of a SPLIT / SPLIT_V with constant operands."""
    if op.type == "SPLIT":
        axis, x = model.constant(op.inputs[0]), op.inputs[1]
        if axis is None:
            return None
        rank = len(model.arrays[x].shape)
        axis = int(axis.reshape(())) % rank
        n = len(op.outputs)
        return x, axis, [model.arrays[x].shape[axis] // n] * n
    x, sizes, axis = op.inputs[0], model.constant(op.inputs[1]), model.constant(op.inputs[2])
    if sizes is None or axis is None:
        return None
    axis = int(axis.reshape(())) % len(model.arrays[x].shape)
    return x, axis, [model.arrays[o].shape[axis] for o in op.outputs]


def _new_split(model: Model, x: str, axis: int, sizes: list[int], anchor: Operator) -> list[str]:
    """A SPLIT_V of x along `axis` into `sizes` before `anchor`; returns its outputs (with x's
    range)."""
    shape = model.arrays[x].shape
    outputs = []
    for k, size in enumerate(sizes):
        part = model.add_array_like(f"{x}_part{k}", shape[:axis] + (size,) + shape[axis + 1:], x)
        model.arrays[part].minmax = model.arrays[x].minmax
        outputs.append(part)
    inputs = [x, model.add_constant("sizes", np.array(sizes, np.int32)),
              model.add_constant("axis", np.array(axis, np.int32))]
    model.insert_before(anchor, Operator("SPLIT_V", inputs, outputs, {"num_splits": len(sizes)},
                                         source=anchor.source))
    return outputs


def _cancel(model: Model, split: Operator, concat: Operator, axis: int, sizes: list[int]) -> bool:
    """Each part is the concatenation's inputs it covers (the boundaries line up: _undoes)."""
    parts = _covered(model, concat, axis, sizes)
    for output, covered in zip(split.outputs, parts):
        # A model output keeps its name: the input's producer writes it (not possible for a
        # model input or output, or a constant).
        if (len(covered) == 1 and output in model.outputs
                and (model.producer(covered[0]) is None or covered[0] in model.outputs)):
            return False
    for output, covered in zip(split.outputs, parts):
        if len(covered) > 1:
            model.insert_before(split, Operator("CONCATENATION", list(covered), [output], {"axis": axis},
                                                source=concat.source))
    # A part the loader made (a grouped conv's) has no range of its own: the whole's it was in.
    whole = model.arrays[concat.outputs[0]].minmax
    for output, covered in zip(split.outputs, parts):
        for name in (output, *covered):
            if model.arrays[name].minmax is None:
                model.arrays[name].minmax = model.arrays[output].minmax or whole
    model.remove_operator(split)
    for output, covered in zip(split.outputs, parts):
        if len(covered) == 1:
            if output in model.outputs:
                model.rename_tensor(covered[0], output)
            else:
                model.rename_uses(output, covered[0])
    return True


def _through_concatenation(model: Model, split: Operator, concat: Operator, axis: int,
                           sizes: list[int]) -> bool:
    pieces = [_new_split(model, x, axis, sizes, split) for x in concat.inputs]
    for k, output in enumerate(split.outputs):
        model.insert_before(split, Operator("CONCATENATION", [p[k] for p in pieces], [output],
                                            dict(concat.options), source=concat.source))
    model.remove_operator(split)
    return True


def _through_reshape(model: Model, split: Operator, reshape: Operator, axis: int, sizes: list[int]) -> bool:
    parts = _new_split(model, reshape.inputs[0], _reshaped_axis(model, reshape, axis), sizes, split)
    for part, output in zip(parts, split.outputs):
        shape = model.add_constant("shape", np.array(model.arrays[output].shape, np.int32))
        model.insert_before(split, Operator("RESHAPE", [part, shape], [output], source=reshape.source))
    model.remove_operator(split)
    return True


def _through_transpose(model: Model, split: Operator, transpose: Operator, axis: int, sizes: list[int]) -> bool:
    perm = model.constant(transpose.inputs[1])
    if perm is None:
        return False
    parts = _new_split(model, transpose.inputs[0], int(perm[axis]), sizes, split)
    for part, output in zip(parts, split.outputs):
        model.insert_before(split, Operator("TRANSPOSE", [part, transpose.inputs[1]], [output],
                                            source=transpose.source))
    model.remove_operator(split)
    return True
