"""NonMaxSuppression: refused, in one line naming TFLite's limit.

ONNX's NonMaxSuppression returns [num_selected, 3] (batch, class, box) rows, num_selected known
only at run time. TFLite's NON_MAX_SUPPRESSION_V4/V5 take one batch and one class and write a
fixed max_output_size of indices padded after a valid count, so no static TFLite graph returns
ONNX's output: not its shape, and not its values in the padded rows. ONNX shape inference leaves
the output without a static shape, and the loader refuses it as data-dependent before this
importer runs; the importer is reached when the model declares a static output shape, which the
op's result need not have.
"""

from __future__ import annotations

from .registry import onnx_op


@onnx_op("NonMaxSuppression")
def import_non_max_suppression(node, ctx):
    raise ctx.error(
        "selects a run-time number of boxes ([num_selected, 3]); TFLite's NON_MAX_SUPPRESSION_V4/V5 "
        "(one batch, one class) pad a fixed max_output_size of indices after a valid count, so "
        "no static TFLite graph returns ONNX's output: keep box selection outside the model")
