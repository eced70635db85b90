"""divide_as_multiply: under --quantize a DIV by a constant runs as an int8 MUL by its reciprocal
(TFLite has no int8 DIV); a divisor holding 0 keeps the DIV (float), and the float conversion
keeps a DIV that merges with nothing (x / c and x * (1 / c) can differ in the last bit; one next to
a MUL by a constant merges into it in merge_constant_binary_chains, float too)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from qconvert.tflite.reader import read
from tests.harness import (
    assert_int8_matches_onnxruntime,
    calibration_set,
    convert_proto,
    convert_quantized,
    make_model,
)

F = TensorProto.FLOAT


def divided(divisor):
    """x / divisor, then a MUL by x so that an int8 op reads the quotient (a MUL by a constant
    would merge with the DIV)."""
    nodes = [helper.make_node("Div", ["x", "d"], ["q"]), helper.make_node("Mul", ["q", "x"], ["y"])]
    inits = {"d": np.asarray(divisor, np.float32)}
    return make_model(nodes, {"x": (F, (2, 3, 8))}, {"y": F}, inits)


@pytest.mark.parametrize("divisor", [6.0, np.linspace(0.5, 4, 8)], ids=["scalar", "per-column"])
def test_division_by_a_constant_runs_int8(divisor, tmp_path):
    model = divided(divisor)
    flatbuffer, report = assert_int8_matches_onnxruntime(model, tmp_path, calibration_set(model, scale=3.0))
    counts = read(flatbuffer).op_counts
    assert "DIV" not in counts and counts["MUL"] == 2 and report.quantization.int8_ops == 2


def test_a_zero_in_the_divisor_keeps_the_division(tmp_path):
    model = divided([1.0, 2.0, 0.0, 4.0, 1.0, 1.0, 1.0, 1.0])
    calibration = calibration_set(model)
    flatbuffer, report = convert_quantized(model, calibration, tmp_path)
    assert read(flatbuffer).op_counts["DIV"] == 1
    assert [f.op for f in report.quantization.float_ops] == ["DIV"]


def test_the_float_conversion_keeps_the_division():
    flatbuffer, _ = convert_proto(divided(6.0))
    assert read(flatbuffer).op_counts["DIV"] == 1
