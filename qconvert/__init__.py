"""qconvert: convert float ONNX models to TFLite flatbuffers, float32 or quantized."""

__version__ = "0.1.0"
