"""transpose_to_reshape: a TRANSPOSE that only moves size-1 axes becomes a RESHAPE.

Such a transpose keeps the bytes in memory order (e.g. [1,1,1,C] NHWC to [1,C,1,1] NCHW after a
global pool), so a reshape does the same for free, and reshapes then merge with their neighbours.
"""

import numpy as np

from ..ir import Model
from .helpers import transpose_perm


def transpose_to_reshape(model: Model) -> bool:
    changed = False
    for op in model.operators:
        if op.type != "TRANSPOSE":
            continue
        perm = transpose_perm(model, op)
        if perm is None:
            continue
        shape = model.arrays[op.inputs[0]].shape
        moved = [p for p in perm if shape[p] != 1]
        if moved != sorted(moved):
            continue
        out_shape = model.arrays[op.outputs[0]].shape
        op.type = "RESHAPE"
        model.set_inputs(op, [op.inputs[0], model.add_constant("shape", np.array(out_shape, dtype=np.int32))])
        changed = True
    return changed
