"""The precision planner (on by default with --quantize --calibration; --target-sqnr, --target,
--precision): a TANH whose input spans +-0.05 loses most of its precision to its int8 kernel's
fixed output step of 1/128 (about 23 dB on the output slices); kept float (--target cpu) or on its
16x8 kernel (--target integer) it keeps its input's precision, and the plan reaches 30 dB as the
conversion's own verification measures it (the written file in LiteRT against onnxruntime). Only
the TANH goes: its output's params are its kernel's, so the conv reading it keeps int8 (its input
quantized to the range it has). Promotions are listed in --json; the result is deterministic;
--precision int8 is the all-int8 model, and so is the plan of a model that holds the target."""

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
    assert [(p["node"], p["op"]) for p in plan["promotions"]] == [("tanh", "Tanh")]
    assert plan["promotions"][0]["reason"].startswith(f"kept {promoted_to}: quantizing t alone gives")
    assert plan["costs"][0]["tensors"] == ["t"] and plan["costs"][0]["kept_float"]
    # all int8 (weights rounded for the output, biases corrected), all int8 with TOCO's arithmetic,
    # then the plan
    assert [r["promoted"] for r in plan["rounds"]] == [0, 0, 1]
    assert _worst(report) >= 30
    summary = read_tflite((tmp_path / "plan.tflite").read_bytes())
    tanh = next(op for op in summary.operators if op.name == "TANH")
    assert summary.tensors[tanh.outputs[0]].dtype == tanh_type


def test_the_plan_measures_the_arithmetic_and_keeps_the_better(files, tmp_path, monkeypatch):
    """When all int8 misses the target, the all-int8 model with weights rounded to nearest and
    biases as they are is measured too; rounding for the output made worse here on purpose (every
    integer's sign flipped), the plan starts from round-to-nearest and says so."""
    from qconvert.quantize import rounding
    from qconvert.transforms import quantize_weights

    report = _convert(files, tmp_path / "plan.tflite", "--target-sqnr", "30")
    assert report["quantization"]["plan"]["arithmetic"] == ""
    honest = rounding.round_for_output
    monkeypatch.setattr(quantize_weights, "round_for_output", lambda *a, **k: -honest(*a, **k))
    report = _convert(files, tmp_path / "plan.tflite", "--target-sqnr", "30")
    plan = report["quantization"]["plan"]
    assert plan["arithmetic"] == "nearest, no bias correction" and plan["reached"], plan


def test_plan_is_deterministic(files, tmp_path):
    for name in ("a", "b"):
        _convert(files, tmp_path / f"{name}.tflite", "--target-sqnr", "30")
    assert (tmp_path / "a.tflite").read_bytes() == (tmp_path / "b.tflite").read_bytes()


def test_the_plan_is_on_by_default_and_all_int8_when_the_model_holds_the_target(files, tmp_path):
    """The tanh model's all-int8 file reaches 20 dB (the default target): the default plan is it,
    byte for byte, measured once; --precision int8 and --target-sqnr 0 write the same bytes."""
    report = _convert(files, tmp_path / "default.tflite")
    plan = report["quantization"]["plan"]
    assert plan["reached"] and plan["target_sqnr_db"] == 20 and not plan["promotions"]
    assert len(plan["rounds"]) == 1 and plan["sensitivity_runs"] == 0
    assert report["quantization"]["int8_ops"] == 3
    int8 = _convert(files, tmp_path / "int8.tflite", "--precision", "int8")
    assert int8["quantization"]["plan"] is None
    _convert(files, tmp_path / "zero.tflite", "--target-sqnr", "0")
    written = {(tmp_path / f"{name}.tflite").read_bytes() for name in ("default", "int8", "zero")}
    assert len(written) == 1


@pytest.mark.parametrize("flags, message", [
    (["--precision", "int8", "--target", "integer"], "--target plans precision: it does not apply"),
    (["--target-sqnr", "0", "--target", "cpu"], "--target plans precision: it does not apply"),
    (["--precision", "int8", "--target-sqnr", "30"], "--target-sqnr plans precision"),
    (["--target-sqnr", "-3"], "Invalid value for --target-sqnr: -3 is not in 0..200 dB"),
    (["--target-sqnr", "1e308"], "Invalid value for --target-sqnr: 1e+308 is not in 0..200 dB"),
])
def test_plan_flags_that_contradict_are_usage_errors(files, tmp_path, flags, message):
    result = CliRunner().invoke(cli, [str(files / "tanh.onnx"), str(tmp_path / "o.tflite"), "--quantize",
                                      "--calibration", str(files / "cal.npz"), *flags])
    assert result.exit_code == 2 and message in result.stderr, result.stderr
    assert not (tmp_path / "o.tflite").exists()


def test_precision_without_quantize_is_a_usage_error(files, tmp_path):
    result = CliRunner().invoke(cli, [str(files / "tanh.onnx"), str(tmp_path / "o.tflite"),
                                      "--precision", "int8"])
    assert result.exit_code == 2 and "--precision only applies with --quantize" in result.stderr

