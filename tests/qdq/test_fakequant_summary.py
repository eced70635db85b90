"""A fake-quant file's round trip says what the written file holds (issue 40 item 7): fakequant
records the plan's every non-int16 promotion in its metadata as a node kept float, a hybrid one
with the plan's "kept hybrid" reason too; no pair can say hybrid, so the conversion back keeps the
node float, float32 weights and all, and its summary says "kept float", never "kept hybrid"."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

from qconvert.tflite.reader import read
from tests.harness import grid_weights, make_model

PRECISION_KEY = "qconvert.fakequant.precision"


def _pad_conv_conv() -> onnx.ModelProto:
    nodes = [helper.make_node("Pad", ["x", "pads"], ["p"]),
             helper.make_node("Conv", ["p", "w1", "b1"], ["c1"]),
             helper.make_node("Relu", ["c1"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["y"], pads=[1, 1, 1, 1])]
    return make_model(nodes, {"x": (TensorProto.FLOAT, (1, 3, 16, 16))}, {"y": TensorProto.FLOAT},
                      {"pads": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "w1": grid_weights((8, 3, 3, 3)),
                       "b1": np.zeros(8, np.float32), "w2": grid_weights((4, 8, 3, 3), seed=2)})


def _qconvert(*args: str) -> subprocess.CompletedProcess:
    run = subprocess.run([sys.executable, "-m", "qconvert", *args], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return run


def test_a_hybrid_promotion_comes_back_float_and_says_so(tmp_path):
    source, fake = tmp_path / "float.onnx", tmp_path / "fq.onnx"
    onnx.save(_pad_conv_conv(), source)
    np.savez(tmp_path / "cal.npz", x=np.random.default_rng(0).standard_normal((8, 1, 3, 16, 16))
             .astype(np.float32))
    _qconvert("fakequant", str(source), str(fake), "--calibration", str(tmp_path / "cal.npz"))
    model = onnx.load(fake)
    # the metadata fakequant writes when its plan made the first conv hybrid (and its pad with it)
    reason = "kept hybrid: quantizing 'p' alone gives 30.1 dB at the outputs"
    del model.metadata_props[:]  # ranges from the pairs alone; the precision as a hybrid plan's
    model.metadata_props.add(key=PRECISION_KEY, value=json.dumps(
        {"float": {"Pad_0:p": reason, "Conv_1:c1": reason}, "int16": []}))
    onnx.save(model, fake)
    out = tmp_path / "fq.tflite"
    run = _qconvert(str(fake), str(out), "--quantize", "--verify")  # LiteRT against onnxruntime
    summary = run.stderr.strip().splitlines()[-1]
    assert "stayed float: CONV_2D, PAD" in summary and "kept hybrid" not in summary, summary
    assert "(kept float (hybrid in fakequant's plan))" in summary, summary
    assert "verify:" in summary, summary
    written = read(out.read_bytes())
    kernels = sorted(written.tensors[op.inputs[1]].dtype for op in written.operators if op.name == "CONV_2D")
    assert kernels == ["FLOAT32", "INT8"], kernels  # the hybrid-planned conv float32, the other int8
