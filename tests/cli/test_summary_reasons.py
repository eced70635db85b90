"""The summary line (qconvert/driver/reports.py): the float ops grouped by reason, a group's reason
with what differs between its ops elided, and the count of groups not shown; the inputs made
channels-last, with the shape the .tflite takes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from ai_edge_litert.interpreter import Interpreter

from qconvert.driver.reports import SHOWN_FLOAT_GROUPS, FloatOp, _float_groups
from tests.harness import small_classifier


def test_ops_whose_reasons_differ_in_a_name_share_a_group_with_the_name_elided():
    ops = [FloatOp("ADD", "a", "tensor 'Add:0' has no calibrated range"),
           FloatOp("MUL", "m", "tensor 'pow:0' has no calibrated range"),
           FloatOp("SOFTMAX", "s", "its output is a model output: in float it keeps ...")]
    assert _float_groups(ops) == ("ADD, MUL (tensor '...' has no calibrated range); "
                                  "SOFTMAX (its output is a model output)")


def test_the_same_reason_is_shown_as_it_is_and_counted_by_op():
    ops = [FloatOp("CONV_2D", f"c{k}", "kept float by --keep-float") for k in range(3)]
    assert _float_groups(ops) == "3 CONV_2D (kept float by --keep-float)"


def test_groups_beyond_the_shown_are_counted():
    ops = [FloatOp("ADD", str(k), f"reason number {'x' * k}") for k in range(SHOWN_FLOAT_GROUPS + 1)]
    assert _float_groups(ops).endswith("; 1 more reason (--json lists each op's)")
    ops.append(FloatOp("ADD", "y", "yet another"))
    assert _float_groups(ops).endswith("; 2 more reasons (--json lists each op's)")


@pytest.mark.parametrize("layout", ["nhwc", "onnx"])
def test_the_summary_says_when_an_input_became_channels_last(tmp_path: Path, layout):
    onnx.save(small_classifier(np.random.default_rng(1)), tmp_path / "m.onnx")
    run = subprocess.run([sys.executable, "-m", "qconvert", "m.onnx", "m.tflite", "--io-layout", layout],
                         cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    (written,) = Interpreter(model_path=str(tmp_path / "m.tflite")).get_input_details()
    shape = list(written["shape"])
    assert shape == ([1, 8, 8, 3] if layout == "nhwc" else [1, 3, 8, 8])
    said = "channels-last input (--io-layout onnx keeps ONNX's): 'x' [1, 8, 8, 3]"
    assert (said in run.stderr) == (layout == "nhwc"), run.stderr
