"""The precision planner (--target-sqnr, --target): a TANH whose input spans +-0.05 loses most of
its precision to its int8 kernel's fixed output step of 1/128 (about 23 dB on the output slices);
promoted to float (--target cpu) or to its 16x8 kernel (--target integer) it keeps its input's
precision, and the plan reaches 30 dB as the conversion's own verification measures it (the written
file in LiteRT against onnxruntime). Promotions are listed in --json; the result is deterministic."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from qconvert.cli import cli
from qconvert.tflite.reader import read as read_tflite
from tests.harness import make_model


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("planner")
    rng = np.random.default_rng(0)
    inits = {"w": (rng.standard_normal((4, 4, 1, 1)) * 0.02).astype(np.float32),
             "w2": (rng.standard_normal((2, 4, 1, 1)) * 0.5).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="small"),
             helper.make_node("Tanh", ["c"], ["t"], name="tanh"),
             helper.make_node("Conv", ["t", "w2"], ["y"], name="out")]
    onnx.save(make_model(nodes, {"x": (TensorProto.FLOAT, (1, 4, 4, 4))}, {"y": TensorProto.FLOAT}, inits),
              root / "tanh.onnx")
    np.savez(root / "cal.npz", x=rng.standard_normal((16, 1, 4, 4, 4)).astype(np.float32))
    return root


def _convert(files, out, *flags):
    result = CliRunner().invoke(cli, [str(files / "tanh.onnx"), str(out), "--quantize", "--calibration",
                                      str(files / "cal.npz"), "--json", *flags])
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def _worst(report) -> float:
    output = report["verify"]["outputs"][0]
    return min(output["sqnr_db"], output["worst_slice_sqnr_db"])


@pytest.mark.parametrize("target, promoted_to, tanh_type", [("cpu", "float", "FLOAT32"),
                                                            ("integer", "int16", "INT16")])
def test_plan_promotes_the_tanh_and_reaches_the_target(files, tmp_path, target, promoted_to, tanh_type):
    plain = _convert(files, tmp_path / "plain.tflite")
    assert _worst(plain) < 25  # the all-int8 plan
    report = _convert(files, tmp_path / "plan.tflite", "--target-sqnr", "30", "--target", target)
    plan = report["quantization"]["plan"]
    assert plan["reached"] and plan["promoted_to"] == promoted_to
    assert [(p["node"], p["op"]) for p in plan["promotions"]] == [("tanh", "TANH")]
    assert f"promoted to {promoted_to}" in plan["promotions"][0]["reason"]
    assert [r["promoted"] for r in plan["rounds"]] == [0, 1]
    assert _worst(report) >= 30
    summary = read_tflite((tmp_path / "plan.tflite").read_bytes())
    tanh = next(op for op in summary.operators if op.name == "TANH")
    assert summary.tensors[tanh.outputs[0]].dtype == tanh_type


def test_plan_is_deterministic(files, tmp_path):
    for name in ("a", "b"):
        _convert(files, tmp_path / f"{name}.tflite", "--target-sqnr", "30")
    assert (tmp_path / "a.tflite").read_bytes() == (tmp_path / "b.tflite").read_bytes()


def test_target_without_target_sqnr_is_a_usage_error(files, tmp_path):
    result = CliRunner().invoke(cli, [str(files / "tanh.onnx"), str(tmp_path / "o.tflite"), "--quantize",
                                      "--calibration", str(files / "cal.npz"), "--target", "integer"])
    assert result.exit_code == 2 and "--target only applies with --target-sqnr" in result.stderr
    assert not (tmp_path / "o.tflite").exists()

