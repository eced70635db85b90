"""Conv (qconvert/ops/conv.py) whose weights or bias are computed at run time, against
onnxruntime: TFLite's CONV_2D and DEPTHWISE_CONV_2D read them as tensors (TRANSPOSE/SPLIT ops lay
them out); under --quantize such a conv stays float, since its int8 kernel needs constant weights."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.harness import (
    assert_matches_onnxruntime,
    calibration_set,
    convert_quantized,
    make_model,
    run_onnxruntime,
    run_tflite,
)

RNG = np.random.default_rng(21)
F = TensorProto.FLOAT


def _conv_with_computed(parameters, group, cin, cout, one_d=False):
    """Conv(x, w * s[, b * s]) with x [1, cin, 6, 6] (or [1, cin, 9]) and a second input s [1]:
    the parameters named in `parameters` ("w", "b") are computed at run time, the others constant."""
    kernel = (3,) if one_d else (3, 3)
    values = {"w": RNG.standard_normal((cout, cin // group) + kernel).astype(np.float32),
              "b": RNG.standard_normal(cout).astype(np.float32)}
    nodes, inputs = [], ["x"]
    for name in ("w", "b"):
        if name in parameters:
            nodes.append(helper.make_node("Mul", [name, "s"], [name + "_s"]))
            inputs.append(name + "_s")
        else:
            inputs.append(name)
    pads = [1, 1] if one_d else [1, 1, 1, 1]
    nodes.append(helper.make_node("Conv", inputs, ["y"], name="conv", group=group, pads=pads))
    x_shape = (1, cin, 9) if one_d else (1, cin, 6, 6)
    return make_model(nodes, {"x": (F, x_shape), "s": (F, (1,))}, {"y": F}, values)


def _feeds(model):
    x = model.graph.input[0].type.tensor_type.shape
    shape = [d.dim_value for d in x.dim]
    return {"x": RNG.standard_normal(shape).astype(np.float32), "s": np.array([0.75], np.float32)}


KINDS = [(1, 3, 4), (4, 4, 8), (2, 4, 6)]  # (group, in channels, out channels): plain, depthwise, grouped
IDS = ["plain", "depthwise", "grouped"]


@pytest.mark.parametrize("group,cin,cout", KINDS, ids=IDS)
@pytest.mark.parametrize("parameters", ["w", "b", "wb"])
@pytest.mark.parametrize("one_d", [False, True])
def test_conv_with_computed_weights_or_bias(group, cin, cout, parameters, one_d):
    model = _conv_with_computed(parameters, group, cin, cout, one_d)
    _, report = assert_matches_onnxruntime(model, _feeds(model))
    expected = "DEPTHWISE_CONV_2D" if (group, cin) == (4, 4) else "CONV_2D"
    assert report.op_counts.get(expected) == (group if group == 2 else 1)


@pytest.mark.parametrize("group,cin,cout", KINDS, ids=IDS)
def test_conv_with_computed_weights_stays_float_under_quantize(tmp_path, group, cin, cout):
    """int8 convolutions need constant weights (per-channel scales chosen at conversion time):
    the conv stays float with that reason, the rest of the model is quantized."""
    model = _conv_with_computed("w", group, cin, cout)
    calibration = calibration_set(model)
    calibration["s"] = np.abs(calibration["s"]) + 0.5
    flatbuffer, report = convert_quantized(model, calibration, tmp_path)
    reasons = {f.op: f.reason for f in report.quantization.float_ops}
    convs = [op for op in reasons if "CONV_2D" in op]
    assert convs and all("are not a float32 constant" in reasons[op] for op in convs), reasons
    feeds = _feeds(model)
    want, got = run_onnxruntime(model, feeds)["y"], run_tflite(flatbuffer, report, feeds)["y"]
    # The conv reads int8-rounded x and w * s: within a few percent of the output's scale.
    assert np.abs(got - want).max() <= 0.06 * np.abs(want).max()
