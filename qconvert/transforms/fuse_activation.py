"""fuse_activation: a RELU, RELU6 or RELU_N1_TO_1 after an op whose kernel can clamp its own
output becomes that op's fused activation (one op instead of two, and in int8 no extra rounding).
The producer's output must have no other reader and not be a graph output."""

from ..ir import Model

ACTIVATIONS = {"RELU": "RELU", "RELU6": "RELU6", "RELU_N1_TO_1": "RELU_N1_TO_1"}
# Kernels that apply fused_activation_function (op_version rules and kernels checked).
FUSABLE = {"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV", "ADD", "SUB",
           "MUL", "DIV", "AVERAGE_POOL_2D", "MAX_POOL_2D"}


def _fusable(op, name, model) -> bool:
    return (op is not None and op.type in FUSABLE and op.fused_activation == "NONE"
            and model.is_discardable(name))


def fuse_activation(model: Model) -> bool:
    """Also through a CONCATENATION whose every input comes from a fusable op (a grouped conv's
    branches): the activation then goes into each branch."""
    changed = False
    for act in model.operators:
        if act.type not in ACTIVATIONS:
            continue
        op = model.producer(act.inputs[0])
        if not model.is_discardable(act.inputs[0]) or op is None:
            continue
        if _fusable(op, act.inputs[0], model):
            targets = [op]
        elif op.type == "CONCATENATION" and op.fused_activation == "NONE" and all(
                _fusable(model.producer(n), n, model) for n in op.inputs):
            targets = [model.producer(n) for n in op.inputs]
        else:
            continue
        for target in targets:
            target.fused_activation = ACTIVATIONS[act.type]
        model.set_output(op, 0, act.outputs[0])
        model.remove_operator(act)
        changed = True
    return changed
