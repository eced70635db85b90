"""merge_reshapes: RESHAPE of a RESHAPE reads the first one's input; a RESHAPE to the shape it
already has disappears (ONNX Flatten/Squeeze/Unsqueeze chains, reshapes made by other steps)."""

from ..ir import Model


def merge_reshapes(model: Model) -> bool:
    changed = False
    for op in model.operators:
        if op.type != "RESHAPE":
            continue
        source = op.inputs[0]
        before = model.producer(source)
        if before is not None and before.type == "RESHAPE":
            model.set_input(op, 0, before.inputs[0])
            changed = True
        elif model.arrays[source].shape == model.arrays[op.outputs[0]].shape:
            changed |= model.bypass(op)
    return changed
