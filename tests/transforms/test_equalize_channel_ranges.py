"""equalize_channel_ranges: between two weighted ops, with no activation or a ReLU between them, the
channels are rescaled so one int8 scale fits them all; exact in float.

Shown on a 1x1 conv writing 8 channels whose ranges run over 100x (0.1 to 10), read by a 3x3
depthwise conv that brings every channel back to the same size, and on the same pair with a ReLU
between and a 1x1 conv reading: the equalized float model (what the quantize steps start from)
matches onnxruntime to float rounding; in int8 (LiteRT against onnxruntime) the output's SQNR is
more than 10 dB above the unequalized conversion's (--no-equalization). The report compares the
equalized tensor with the ONNX one through the scales the conversion records (its notes: the
file does not carry them)."""

import json

import numpy as np
import pytest
from onnx import TensorProto, helper

from qconvert.driver import conversion
from qconvert.tflite.writer import serialize
from tests.harness import convert_quantized, make_model, options_of, run_onnxruntime, run_tflite

F = TensorProto.FLOAT
C = 8
SPREAD = np.logspace(-1, 1, C).astype(np.float32)  # channel c's range, 0.1 .. 10


def pair(second: str = "depthwise", relu: bool = False):
    rng = np.random.default_rng(0)
    w1 = (rng.standard_normal((C, C, 1, 1)) / np.sqrt(C)).astype(np.float32) * SPREAD.reshape(C, 1, 1, 1)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["h"])]
    inits = {"w1": w1, "b1": (0.1 * SPREAD).astype(np.float32)}
    middle = "h"
    if relu:
        nodes.append(helper.make_node("Relu", ["h"], ["r"]))
        middle = "r"
    if second == "depthwise":
        w2 = (rng.standard_normal((C, 1, 3, 3)) / 3).astype(np.float32) / SPREAD.reshape(C, 1, 1, 1)
        nodes.append(helper.make_node("Conv", [middle, "w2", "b2"], ["y"], group=C, pads=[1, 1, 1, 1]))
    else:
        w2 = (rng.standard_normal((C, C, 1, 1)) / np.sqrt(C)).astype(np.float32) / SPREAD.reshape(1, C, 1, 1)
        nodes.append(helper.make_node("Conv", [middle, "w2", "b2"], ["y"]))
    inits.update(w2=w2, b2=np.zeros(C, np.float32))
    model = make_model(nodes, {"x": (F, (1, C, 6, 6))}, {"y": F}, inits)
    return model, {"x": rng.standard_normal((16, 1, C, 6, 6)).astype(np.float32)}


def _sqnr(model, calibration, tmp_path, **options):
    flatbuffer, report = convert_quantized(model, calibration, tmp_path, **options)
    signal = noise = 0.0
    for k in range(8):
        feeds = {"x": calibration["x"][k]}
        want = run_onnxruntime(model, feeds)["y"]
        got = run_tflite(flatbuffer, report, feeds)["y"]
        signal, noise = signal + np.sum(want ** 2), noise + np.sum((got - want) ** 2)
    return 10 * np.log10(signal / noise)


CASES = [("depthwise", False), ("depthwise", True), ("conv", False)]


@pytest.mark.parametrize("second,relu", CASES)
def test_int8_gains_more_than_10_db(second, relu, tmp_path):
    model, calibration = pair(second, relu)
    equalized = _sqnr(model, calibration, tmp_path)
    plain = _sqnr(model, calibration, tmp_path, equalize=False)
    assert equalized > plain + 10, (plain, equalized)


@pytest.mark.parametrize("second,relu", CASES)
def test_the_equalized_float_model_is_the_same_model(second, relu, tmp_path):
    from qconvert.transforms.pipeline import QuantizeOptions

    model, calibration = pair(second, relu)
    path = tmp_path / "calibration.npz"
    np.savez(path, **calibration)
    source = tmp_path / "model.onnx"
    source.write_bytes(model.SerializeToString())
    kept = []
    options = options_of(quantize=QuantizeOptions(), calibration=str(path))
    state = conversion.build(str(source), options, before_quantizing=lambda m: kept.append(m.copy()))
    equalized = [a for a in kept[0].arrays.values() if a.channel_scale is not None]
    assert len(equalized) == 1 and np.ptp(np.log10(equalized[0].channel_scale)) > 1
    flatbuffer = bytes(serialize(kept[0], "test"))
    feeds = {"x": calibration["x"][0]}
    np.testing.assert_allclose(run_tflite(flatbuffer, state_report(state), feeds)["y"],
                               run_onnxruntime(model, feeds)["y"], rtol=1e-4, atol=1e-4)


def state_report(state):
    """A report of the state's model with the I/O facts run_tflite needs."""
    return conversion.serialize_model(state, "")[1]


def test_the_report_compares_the_equalized_tensor_through_its_scales(tmp_path):
    from qconvert.check.report import build_report

    model, calibration = pair()
    flatbuffer, converted = convert_quantized(model, calibration, tmp_path)
    path = tmp_path / "model.tflite"
    path.write_bytes(flatbuffer)
    # The conversion's report (--report): the scales are in its notes, not in the file.
    content = build_report(model, str(path), [{"x": calibration["x"][k]} for k in range(4)], 4,
                           converted.notes)
    middle = [t for t in content["tensors"] if t["onnx_name"] == "h" and t["dtype"] == "int8"]
    assert middle and middle[0]["sqnr_db"] > 30, json.dumps(middle)
