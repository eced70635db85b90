"""qconvert.qat: quantization-aware training in PyTorch for qconvert's int8 TFLite graph (the
optional extra: `pip install 'qconvert[qat]'`, torch==2.13.0).

    prepared = prepare_qat(model, example_inputs)   # fake-quant where TFLite's int8 graph quantizes
    ... train `prepared` ...
    export(prepared, "model_qdq.onnx", example_inputs)  # QDQ ONNX with the trained params
    # qconvert model_qdq.onnx model_int8.tflite --quantize   (no calibration: the pairs' params)

prepare.py says where the fake-quants go, fused.py how batch norms fold for training,
fake_quant.py how ranges and params are computed, export.py how the QDQ model is written. The base
qconvert package never imports this one (nor torch).
"""

try:
    import torch  # noqa: F401
except ImportError:  # pragma: no cover - the message is the point
    raise ImportError("qconvert.qat needs torch: pip install 'qconvert[qat]' (torch==2.13.0)") from None

from .export import export
from .fake_quant import activation_params
from .prepare import fake_quant_sites, prepare_qat, weight_sites

__all__ = ["activation_params", "export", "fake_quant_sites", "prepare_qat", "weight_sites"]
