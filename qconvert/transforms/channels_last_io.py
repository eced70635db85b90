"""channels_last_io: graph inputs and outputs that only meet layout transposes become NHWC.

After sink_transposes, an NCHW image input feeds nothing but TRANSPOSE(NCHW->NHWC) ops, and an
NCHW output is made by a TRANSPOSE(NHWC->NCHW). Making the model's input/output itself
channels-last removes those transposes (what TFLite users expect of an image model). The
permutation from the ONNX axes is recorded in model.io_permutation for the report. Not run with
--io-layout onnx.

Only where every transpose can go: an input whose transpose is itself a graph output keeps its
layout (that transpose would stay and transpose the NHWC input again), and so does an output that
other ops also read (they read its NCHW values).
"""

from ..ir import Model
from .helpers import inverse, permuted, transpose_perm


def channels_last_perm(rank: int) -> tuple[int, ...]:
    return (0,) + tuple(range(2, rank)) + (1,)


def channels_last_io(model: Model) -> bool:
    changed = False
    for name in model.inputs:
        array = model.arrays[name]
        rank = len(array.shape)
        readers = model.consumers(name)
        if rank < 3 or name in model.io_permutation or name in model.outputs or not readers:
            continue
        perm = channels_last_perm(rank)
        if not all(op.type == "TRANSPOSE" and op.inputs[0] == name and
                   transpose_perm(model, op) == perm and op.outputs[0] not in model.outputs
                   for op in readers):
            continue
        array.shape = permuted(array.shape, perm)
        model.io_permutation[name] = perm
        for op in readers:
            model.bypass(op)
        changed = True
    for k, name in enumerate(model.outputs):
        op = model.producer(name)
        rank = len(model.arrays[name].shape)
        if (rank < 3 or name in model.io_permutation or op is None or op.type != "TRANSPOSE"
                or model.consumers(name)):
            continue
        perm = channels_last_perm(rank)
        if transpose_perm(model, op) != inverse(perm):
            continue
        shape = model.arrays[op.inputs[0]].shape
        # The output tensor then carries the NHWC value the transpose read.
        if not model.bypass(op):
            continue
        model.arrays[name].shape = shape
        model.io_permutation[name] = perm
        changed = True
    return changed
