"""keep_requested_float: the ops of the source nodes the user (--keep-float) or the precision
planner asked to keep float get that reason as their float_reason, before any other quantize step.

First, so that every later step sees the decision: propagate_minmax must not give a kept TANH or
LOGISTIC the range of its int8 kernel's fixed params (its float output is then quantized for its
readers from its own calibrated range, which is the point of keeping it float), and the rules
that pick ops to keep float leave these alone.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..ir import Model
from ..ops.unary import ERF_MARK
from .quantization import BOUNDARY_OPS, handles_float

KEPT_FLOAT = "kept float by --keep-float"


def keep_requested_float(model: Model, keep_float: Mapping[str, str]) -> bool:
    """`keep_float`: source node (Operator.source) -> the reason its ops stay float."""
    changed = False
    if not keep_float:
        return changed
    for op in model.operators:
        reason = keep_float.get(op.source.removesuffix(ERF_MARK))
        if reason and not op.float_reason and op.type not in BOUNDARY_OPS and handles_float(op, model):
            op.float_reason = reason
            changed = True
    return changed
