"""The ONNX ops qconvert has no importer for, each with the reason: what TFLite lacks, or the
path that does convert them. The loader's refusal of an unsupported node says it, and docs/ops.md
(`python -m tests.ops.conformance --ops docs/ops.md`) lists it. An op that gets an importer leaves
this table (tests/ops/test_refused.py checks that no op is in both).
"""

from __future__ import annotations

DATA_DEPENDENT = ("its output's shape depends on the values it reads, which a static TFLite graph "
                  "cannot hold")
# The random ops, whose value is not a function of their inputs, convert (ops/random.py); named
# here for the loader and control flow, which never fold or hoist them.
from .random import RANDOM_OPS  # noqa: E402,F401
STRINGS = "it computes on strings, which TFLite's builtin kernels do not"
SEQUENCES = "ONNX sequences have no TFLite counterpart (TFLite has tensors only)"
TRAINING = "a training loss: qconvert converts inference graphs"
FOLDED = ("converted when its inputs are constants (the loader folds it); a size computed at run "
          "time makes its output's shape data-dependent, which a static TFLite graph cannot hold")
QOPERATOR = ("onnxruntime's QOperator format: export with quant_format=QDQ (QuantizeLinear/"
             "DequantizeLinear pairs), which qconvert imports as int8")

NOT_ONNX = ("not an ONNX operator: the exporter left a TensorFlow op in the graph (tf2onnx could "
            "not convert it; onnxruntime cannot run the file either)")

REFUSED: dict[str, str] = {
    "Erfc": NOT_ONNX, "StatefulPartitionedCall": NOT_ONNX, "PartitionedCall": NOT_ONNX,
    "Unique": DATA_DEPENDENT,
    "RegexFullMatch": STRINGS, "StringConcat": STRINGS, "StringNormalizer": STRINGS,
    "StringSplit": STRINGS, "TfIdfVectorizer": STRINGS,
    "ImageDecoder": "it decodes encoded image bytes; TFLite has no image decoding kernel",
    "ConcatFromSequence": SEQUENCES, "SequenceAt": SEQUENCES, "SequenceConstruct": SEQUENCES,
    "SequenceEmpty": SEQUENCES, "SequenceErase": SEQUENCES, "SequenceInsert": SEQUENCES,
    "SequenceLength": SEQUENCES, "SequenceMap": SEQUENCES, "SplitToSequence": SEQUENCES,
    "Optional": "optional values: a TFLite tensor is never absent",
    "OptionalGetElement": "optional values: a TFLite tensor is never absent",
    "OptionalHasElement": "optional values: a TFLite tensor is never absent",
    "NegativeLogLikelihoodLoss": TRAINING, "SoftmaxCrossEntropyLoss": TRAINING,
    "BlackmanWindow": FOLDED, "HammingWindow": FOLDED, "HannWindow": FOLDED,
    "MelWeightMatrix": FOLDED,
    "QLinearConv": QOPERATOR, "QLinearMatMul": QOPERATOR,
    "QuantizeLinear": "converted as part of a Q/DQ pair (QDQ import, --quantize); alone, its "
                      "integer output has no float TFLite graph",
    "DequantizeLinear": "converted as part of a Q/DQ pair (QDQ import) or on a constant (folded); "
                        "alone, its integer input has no float TFLite graph",
    "DynamicQuantizeLinear": "converted as onnxruntime's quantize_dynamic pattern only (read by "
                             "MatMulInteger/ConvInteger, their sums cast to float)",
    "MatMulInteger": "converted as onnxruntime's quantize_dynamic pattern only",
    "ConvInteger": "converted as onnxruntime's quantize_dynamic pattern only",
    "BitCast": "TFLite's BITCAST reinterprets bytes of the same width only; not converted yet",
    "CumProd": "TFLite has no cumulative product (exp of a cumulative sum of logs is not exact)",
    "Det": "TFLite has no determinant kernel",
    "DeformConv": "TFLite has no deformable convolution (its sampling offsets are data)",
    "ai.onnx.ml.CategoryMapper": STRINGS,
    "ai.onnx.ml.DictVectorizer": "its input is a map, which a TFLite tensor cannot hold",
    "ai.onnx.ml.CastMap": "its input is a map, which a TFLite tensor cannot hold",
    "ai.onnx.ml.ZipMap": ("its output is a sequence of maps, which a TFLite tensor cannot hold: export "
                          "without it (skl2onnx: options={'zipmap': False}; onnxmltools: "
                          "zipmap=False) for the probabilities as a [N, classes] tensor"),
    "MaxRoiPool": "TFLite has no ROI pooling kernel (its boxes are data)",
}


def refusal(op_type: str) -> str | None:
    """Why TFLite cannot run `op_type` (a key of ONNX_IMPORTERS' form), or None if not known."""
    return REFUSED.get(op_type)
