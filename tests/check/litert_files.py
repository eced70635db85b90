"""A .tflite the command line wrote, run in LiteRT and compared with onnxruntime on given inputs
(the tests of onnx/can_run.py and calibration hygiene: every file they write is run)."""

from __future__ import annotations

import numpy as np
import onnx
from ai_edge_litert.interpreter import Interpreter

from tests.harness import run_onnxruntime


def assert_file_matches_onnxruntime(onnx_path, tflite_path, feeds: dict[str, np.ndarray],
                                    rtol: float = 1e-5, atol: float = 1e-5,
                                    channels_last: bool = False) -> None:
    """The file at `tflite_path` on `feeds` equals onnxruntime's outputs of the model at
    `onnx_path`: written with --io-layout onnx (its inputs and outputs in the ONNX layout), or
    `channels_last` (qconvert's default: 4-D inputs and outputs NHWC)."""
    model = onnx.load(str(onnx_path))
    interpreter = Interpreter(model_content=open(tflite_path, "rb").read(), num_threads=1)
    runner = interpreter.get_signature_runner()
    nhwc = (lambda v: v.transpose(0, 2, 3, 1) if channels_last and v.ndim == 4 else v)
    actual = runner(**{name: np.ascontiguousarray(nhwc(value)) for name, value in feeds.items()})
    for name, want in run_onnxruntime(model, feeds).items():
        np.testing.assert_allclose(actual[name], nhwc(want), rtol=rtol, atol=atol, err_msg=name)
