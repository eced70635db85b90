"""ONNX op importers and TFLite op definitions; importing this package registers them all."""

from . import (  # noqa: F401
    activations,
    concat,
    conv,
    elementwise,
    gemm,
    normalization,
    pool,
    reduce,
    reshape,
    softmax,
)
