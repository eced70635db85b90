"""The onnx package's `pytorch-converted` and `pytorch-operator` models (exported from PyTorch
layers and operators) convert, and the interpreter reproduces their stored outputs; the ones that
cannot, by a limit of TFLite, are listed with the reason and must keep failing."""

from __future__ import annotations

import glob
import os

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from tests.harness import convert_proto, run_tflite

DATA = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
CASES = sorted(glob.glob(os.path.join(DATA, "pytorch-converted", "test_*")) +
               glob.glob(os.path.join(DATA, "pytorch-operator", "test_*")))

THREE_D = "3-D convolution/pooling: TFLite's CONV_2D and pool kernels are 2-D"
EXPECTED_FAILURES = {
    "test_AvgPool3d": THREE_D, "test_AvgPool3d_stride": THREE_D,
    "test_AvgPool3d_stride1_pad0_gpu_input": THREE_D, "test_Conv3d": THREE_D,
    "test_Conv3d_dilated": THREE_D, "test_Conv3d_dilated_strided": THREE_D,
    "test_Conv3d_groups": THREE_D, "test_Conv3d_no_bias": THREE_D, "test_Conv3d_stride": THREE_D,
    "test_Conv3d_stride_padding": THREE_D, "test_MaxPool3d": THREE_D, "test_MaxPool3d_stride": THREE_D,
    "test_MaxPool3d_stride_padding": THREE_D,
}
# These store uninitialised float64 memory (values like 1e223) as test data; qconvert computes
# float64 models in float32, where such values overflow to inf.
for _case in ("test_operator_add_broadcast", "test_operator_addconstant",
              "test_operator_add_size1_right_broadcast", "test_operator_add_size1_singleton_broadcast"):
    EXPECTED_FAILURES[_case] = "float64 test data beyond float32's range (computed in float32)"


def read_tensors(directory: str, prefix: str) -> list[np.ndarray]:
    files = sorted(glob.glob(os.path.join(directory, f"{prefix}_*.pb")),
                   key=lambda f: int(f.rsplit("_", 1)[1].split(".")[0]))
    tensors = []
    for path in files:
        t = onnx.TensorProto()
        with open(path, "rb") as f:
            t.ParseFromString(f.read())
        tensors.append(numpy_helper.to_array(t))
    return tensors


def run_case(directory: str) -> None:
    model = onnx.load(os.path.join(directory, "model.onnx"))
    flatbuffer, report = convert_proto(model)
    initializers = {t.name for t in model.graph.initializer}
    inputs = [i.name for i in model.graph.input if i.name not in initializers]
    outputs = [o.name for o in model.graph.output]
    for data_set in sorted(glob.glob(os.path.join(directory, "test_data_set_*"))):
        feeds = dict(zip(inputs, read_tensors(data_set, "input")))
        actual = run_tflite(flatbuffer, report, feeds)
        for name, want in zip(outputs, read_tensors(data_set, "output")):
            np.testing.assert_allclose(actual[name].reshape(want.shape), want, rtol=1e-3, atol=1e-5,
                                       err_msg=name)


@pytest.mark.parametrize("directory", CASES, ids=[os.path.basename(c) for c in CASES])
def test_pytorch_case(directory):
    name = os.path.basename(directory)
    if name in EXPECTED_FAILURES:
        with pytest.raises(Exception):
            run_case(directory)
        pytest.xfail(EXPECTED_FAILURES[name])
    run_case(directory)
