"""remove_identity: drops IDENTITY ops (ONNX Identity, Dropout in inference, no-op Casts).

IDENTITY is an import-only op with no TFLite code: its readers read its input instead. If it
cannot go (it copies a graph input straight to a graph output), it becomes a RESHAPE to its own
shape, which every runtime has.
"""

import numpy as np

from ..ir import Model


def remove_identity(model: Model) -> bool:
    changed = False
    for op in [op for op in model.operators if op.type == "IDENTITY"]:
        if not model.bypass(op):
            shape = model.arrays[op.outputs[0]].shape
            op.type = "RESHAPE"
            model.set_inputs(op, [op.inputs[0], model.add_constant("shape", np.array(shape, np.int32))])
        changed = True
    return changed
