"""fuse_binary_into_following_affine (and merge_constant_binary_chains' DIV next to a MUL): the
elementwise scale and shift in front of a conv fold into it where that is exact, end to end
against onnxruntime."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.harness import assert_int8_matches_onnxruntime, assert_matches_onnxruntime, make_model

rng = np.random.default_rng(0)
C = 4


def _conv(name, x, y, kernel, group=1, channels=C, pads=None):
    w = rng.standard_normal((channels, C // group, kernel, kernel)).astype(np.float32) * 0.5
    attrs = {"kernel_shape": [kernel, kernel], "group": group}
    if pads is not None:
        attrs["pads"] = pads
    return helper.make_node("Conv", [x, name + "_w", name + "_b"], [y], **attrs), {
        name + "_w": w, name + "_b": rng.standard_normal(channels).astype(np.float32)}


def _model(before_conv, conv_kernel=1, group=1, pads=None):
    """x -> Conv 3x3 -> HardSwish written out (x * clip(x + 3, 0, 6) / 6) -> `before_conv`
    (a list of (op, constant)) -> the conv under test -> y."""
    nodes, inits = [], {"three": np.float32(3), "zero": np.float32(0), "six": np.float32(6)}
    first, weights = _conv("c0", "x", "h", 3, pads=[1, 1, 1, 1])
    nodes.append(first)
    inits.update(weights)
    nodes += [helper.make_node("Add", ["h", "three"], ["h3"]),
              helper.make_node("Clip", ["h3", "zero", "six"], ["gate"]),
              helper.make_node("Mul", ["h", "gate"], ["hg"]),
              helper.make_node("Div", ["hg", "six"], ["t0"])]
    for k, (op, constant) in enumerate(before_conv):
        inits[f"k{k}"] = constant
        nodes.append(helper.make_node(op, [f"t{k}", f"k{k}"], [f"t{k + 1}"]))
    last, weights = _conv("c1", f"t{len(before_conv)}", "y", conv_kernel, group=group, pads=pads)
    nodes.append(last)
    inits.update(weights)
    return make_model(nodes, {"x": (TensorProto.FLOAT, (1, C, 8, 8))}, {"y": TensorProto.FLOAT}, inits)


def scalar(value):
    return np.array(value, np.float32)


def per_channel():
    return rng.uniform(0.5, 2, (C, 1, 1)).astype(np.float32)


# name: (ops in front of the conv, conv kernel, group, pads, float op counts)
CASES = {
    # PP-LCNet: HardSwish, a learned scalar scale and shift, a 1x1 conv: all of it folds but the
    # gate (the / 6 merges into the scale first).
    "scale_shift_before_1x1": ([("Mul", scalar(0.17)), ("Add", scalar(-0.2))], 1, 1, None,
                               {"CONV_2D": 2, "ADD": 1, "MUL": 1}),
    # (what is left of the HardSwish in front is one, identify_activations)
    "sub_and_div_before_1x1": ([("Sub", scalar(0.5)), ("Div", scalar(4.0))], 1, 1, None,
                               {"CONV_2D": 2, "HARD_SWISH": 1}),
    # A shift before a padded conv would turn its zero padding into the shift: it stays. The
    # scale cannot reach the conv past it, but merges with the / 6.
    "shift_before_padded_3x3": ([("Mul", scalar(0.17)), ("Add", scalar(-0.2))], 3, 1, [1, 1, 1, 1],
                                {"CONV_2D": 2, "ADD": 2, "MUL": 2}),
    # A scale alone folds into a padded conv (a padded zero stays zero) ...
    "scale_before_padded_3x3": ([("Mul", scalar(0.17))], 3, 1, [1, 1, 1, 1],
                                {"CONV_2D": 2, "ADD": 1, "MUL": 1}),
    # ... and a shift into a VALID one.
    "shift_before_valid_3x3": ([("Add", scalar(0.3))], 3, 1, None,
                               {"CONV_2D": 2, "HARD_SWISH": 1}),
    # Per channel: into a depthwise conv (its input channel is its output channel), even padded
    # for the scale; never into a CONV_2D's weights (it would mix magnitudes in one int8 channel).
    "per_channel_before_depthwise": ([("Mul", per_channel()), ("Add", per_channel())], 1, C, None,
                                     {"CONV_2D": 1, "DEPTHWISE_CONV_2D": 1, "ADD": 1, "MUL": 1}),
    "per_channel_before_conv": ([("Mul", per_channel())], 1, 1, None,
                                {"CONV_2D": 2, "ADD": 1, "MUL": 2}),
}


@pytest.mark.parametrize("name", CASES)
def test_float(name):
    ops, kernel, group, pads, counts = CASES[name]
    _, report = assert_matches_onnxruntime(_model(ops, kernel, group, pads), rtol=1e-4, atol=1e-4)
    assert report.op_counts == counts


@pytest.mark.parametrize("name", ["scale_shift_before_1x1", "per_channel_before_depthwise"])
def test_int8(name, tmp_path):
    ops, kernel, group, pads, counts = CASES[name]
    _, report = assert_int8_matches_onnxruntime(_model(ops, kernel, group, pads), tmp_path, steps=3)
    quantized = {k: v for k, v in report.op_counts.items() if k not in ("QUANTIZE", "DEQUANTIZE")}
    assert quantized == counts
