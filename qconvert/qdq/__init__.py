"""Quantization-aware models: ranges taken from an ONNX model's QuantizeLinear/DequantizeLinear
pairs (QDQ) instead of calibration (importer.py)."""
