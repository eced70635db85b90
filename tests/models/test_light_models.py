"""The real architectures the onnx package ships (onnx/backend/test/data/light) convert, and the
interpreter's logits and probabilities match onnxruntime's on the same random input.

The shipped weights are all 0.02, which hides channel-order and layout bugs, so they are replaced
by seeded random weights of sensible scale first (tests/models/randomize.py)."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest

from qconvert.check.verify import verify
from tests.harness import convert_proto, random_feeds, run_onnxruntime, run_tflite, slow_params
from tests.models.randomize import randomize_light_model

LIGHT_DIR = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
MODELS = ["resnet50", "squeezenet", "shufflenet", "inception_v1", "inception_v2", "densenet121",
          "vgg19", "bvlc_alexnet", "zfnet512"]
NO_TRANSPOSE = {"resnet50", "squeezenet", "densenet121"}


def with_logits_output(model: onnx.ModelProto) -> onnx.ModelProto:
    """Also outputs the input of the final Softmax (the logits), whose errors softmax hides."""
    softmax = [n for n in model.graph.node if n.op_type == "Softmax"]
    if softmax:
        model.graph.output.append(onnx.helper.make_tensor_value_info(
            softmax[-1].input[0], onnx.TensorProto.FLOAT, None))
    return model


@pytest.mark.parametrize("name", slow_params(MODELS))
def test_light_model_matches_onnxruntime(name):
    model = onnx.load(os.path.join(LIGHT_DIR, f"light_{name}.onnx"))
    model = with_logits_output(randomize_light_model(model, seed=1))
    feeds = random_feeds(model, seed=2)
    flatbuffer, report = convert_proto(model)
    expected = run_onnxruntime(model, feeds)
    actual = run_tflite(flatbuffer, report, feeds)
    for out_name, want in expected.items():
        got = actual[out_name].reshape(want.shape)
        scale = float(np.abs(want).max())
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4 * scale, err_msg=out_name)
    if name in NO_TRANSPOSE:
        assert report.transposes == 0, report.op_counts


@pytest.mark.parametrize("name", slow_params(MODELS))
def test_light_model_verifies_above_60_db(name, tmp_path):
    """qconvert.check.verify on the float conversion: every output and every slice at 60 dB or more."""
    model = with_logits_output(randomize_light_model(
        onnx.load(os.path.join(LIGHT_DIR, f"light_{name}.onnx")), seed=1))
    flatbuffer, _ = convert_proto(model)
    path = tmp_path / f"{name}.tflite"
    path.write_bytes(flatbuffer)
    result = verify(model, str(path), count=2, min_sqnr=60)
    assert result.passed, result.below(60)
    assert len(result.outputs) == len(model.graph.output)
