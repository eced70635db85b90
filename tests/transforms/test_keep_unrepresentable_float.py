"""keep_unrepresentable_float: an op whose QDQ params its int8 kernel cannot take (an ADD whose
output scale is far finer than its inputs': requantization multiplier 256 or more) stays float
between a DEQUANTIZE and a QUANTIZE, and the model runs like onnxruntime; without the step the
conversion is refused, as calibrated ranges that break a kernel still are."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from qconvert.errors import ConversionError
from qconvert.transforms.pipeline import QuantizeOptions
from tests.harness import convert_proto, make_model, run_onnxruntime, run_tflite, without_quantize_step

F = TensorProto.FLOAT


def cancelling_sum(out_scale: float):
    """y = (x1 + x2) as [8, 1], with the inputs' pairs at scale 1/16 and the sum's (and y's) at
    `out_scale` (x2 is about -x1: the sum is small)."""
    def pair(name, out):
        return [helper.make_node("QuantizeLinear", [name, f"s_{name}", "z"], [f"{name}_q"]),
                helper.make_node("DequantizeLinear", [f"{name}_q", f"s_{name}", "z"], [out])]
    nodes = pair("x1", "x1_dq") + pair("x2", "x2_dq")
    nodes.append(helper.make_node("Add", ["x1_dq", "x2_dq"], ["s"]))
    nodes += pair("s", "s_dq")
    nodes.append(helper.make_node("Reshape", ["s_dq", "shape"], ["n"]))
    nodes += pair("n", "y")
    inits = {"s_x1": np.array(1 / 16, np.float32), "s_x2": np.array(1 / 16, np.float32),
             "s_s": np.array(out_scale, np.float32), "s_n": np.array(out_scale, np.float32),
             "z": np.array(0, np.int8), "shape": np.array([8, 1], np.int64)}
    return make_model(nodes, {"x1": (F, (1, 8)), "x2": (F, (1, 8))}, {"y": F}, inits)


def test_an_add_the_kernel_cannot_requantize_stays_float():
    model = cancelling_sum(2.0**-32)  # multiplier 2 * (1/16) / (2^20 * 2^-32) = 512
    flatbuffer, report = convert_proto(model, quantize=QuantizeOptions())
    (kept,) = report.quantization.float_ops
    assert kept.op == "ADD" and "QDQ pairs" in kept.reason and "multiplier" in kept.reason
    rng = np.random.default_rng(0)
    x1 = rng.integers(-100, 100, (1, 8)).astype(np.float32) / 16
    feeds = {"x1": x1, "x2": -x1 + rng.integers(-1, 2, (1, 8)).astype(np.float32) / 16}
    np.testing.assert_allclose(run_tflite(flatbuffer, report, feeds)["y"],
                               run_onnxruntime(model, feeds)["y"], rtol=0, atol=2.0**-32)


def test_a_representable_add_stays_int8():
    _, report = convert_proto(cancelling_sum(1 / 16), quantize=QuantizeOptions())
    assert not report.quantization.float_ops and report.quantization.int8_ops == 2


def test_without_the_step_the_conversion_is_refused(monkeypatch):
    without_quantize_step(monkeypatch, "keep_unrepresentable_float")
    with pytest.raises(ConversionError, match="requantization multiplier"):
        convert_proto(cancelling_sum(2.0**-32), quantize=QuantizeOptions())
