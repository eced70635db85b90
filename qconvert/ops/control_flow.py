"""TFLite's control-flow builtins, IF and WHILE: their bodies are Models of their own
(Operator.subgraphs), which the writer numbers and stores as further subgraphs.

The ONNX importers (If, Loop) live in qconvert/onnx/control_flow_import.py: a body is loaded with
the loader's own machinery. Both ops have version 1 (op_version.cc's default); neither has an int8
kernel, so under --quantize the op and its bodies run float (QUANTIZE/DEQUANTIZE around it).
"""

from __future__ import annotations

from .registry import tflite_op

tflite_op("IF", options="IfOptions")
tflite_op("WHILE", options="WhileOptions")
