"""Targets as data (qconvert/targets/): the shipped files load, a user's file is read and its
mistakes are one line naming the file and the field, the plan picks among the forms that hold
the one cheapest on the target, and the integer-only targets write models without float that
LiteRT and TFLite Micro run, or refuse in one line what they cannot compute."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

import qconvert
from qconvert.cli import cli
from qconvert.errors import UsageError
from qconvert.targets import load_target, names, target_text
from qconvert.tflite.reader import read as read_tflite
from tests.harness import run_onnxruntime, run_tflite, small_classifier
from tests.plan.precision_models import layernorm_model, tanh_model
from tests.quantize.test_ops_int8 import run_micro

PACKAGE = Path(load_target("arm64").path).parent


def test_the_package_ships_four_targets_that_load():
    assert names() == ["arm64", "micro", "npu", "x86"]
    for name in names():
        target = load_target(name)
        assert target.name == name and target.precisions[0] == "int8" and target.summary
        assert target.integer_only == (name in ("micro", "npu"))
        assert (target.io_types[0] == "int8") == target.integer_only
    assert load_target(None).name == "arm64"  # the default
    assert load_target("cpu").name == "arm64" and load_target("integer").name == "npu"  # the old names


def test_a_target_file_is_read_from_its_path(tmp_path):
    data = json.loads((PACKAGE / "x86.json").read_text())
    data["name"] = "my-laptop"
    path = tmp_path / "laptop.json"
    path.write_text(target_text(data))
    target = load_target(str(path))
    assert target.name == "my-laptop" and target.ops == load_target("x86").ops


@pytest.mark.parametrize("change, field", [
    (lambda d: d.pop("format"), "format"),
    (lambda d: d.update(precisions=["float", "int8"]), "precisions"),
    (lambda d: d.update(io_types=["int4"]), "io_types"),
    (lambda d: d.update(partition_ns=-1), "partition_ns"),
    (lambda d: d["default"].pop("int16"), "default"),
    (lambda d: d["ops"].update(CONV_2D={"int8": {"delegated": "yes", "ns": 1}}), "ops.CONV_2D.int8"),
    (lambda d: d["ops"].update(CONV_2D={"int4": None}), "ops.CONV_2D"),
])
def test_a_malformed_target_file_is_one_line_naming_the_field(tmp_path, change, field):
    data = json.loads((PACKAGE / "arm64.json").read_text())
    change(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(UsageError) as caught:
        load_target(str(path))
    assert str(caught.value).startswith(f"--target {path}: {field}:") and "\n" not in str(caught.value)


def test_target_errors_on_the_command_line(tmp_path):
    onnx.save(small_classifier(np.random.default_rng(1)), tmp_path / "m.onnx")
    (tmp_path / "broken.json").write_text("{not json")
    cases = [(["--target", "arm64"], "--target only applies with --quantize"),
             (["--quantize", "--default-range", "-1,1", "--target", "tpu"],
              "'tpu' is not one of 'arm64', 'micro', 'npu', 'x86' nor a target file"),
             (["--quantize", "--default-range", "-1,1", "--target", str(tmp_path / "broken.json")],
              "cannot read it as a target file")]
    for flags, message in cases:
        result = CliRunner().invoke(cli, [str(tmp_path / "m.onnx"), str(tmp_path / "o.tflite"), *flags])
        assert result.exit_code == 2 and message in result.stderr, result.stderr
        assert not (tmp_path / "o.tflite").exists()


def _priced(tmp_path, tanh_float_ns: float, tanh_int16_ns: float) -> str:
    """arm64 with TANH's float and 16x8 kernels priced as given, both delegated."""
    data = json.loads((PACKAGE / "arm64.json").read_text())
    data["name"] = "priced"
    data["ops"]["TANH"] = {**data["ops"]["TANH"], "float": {"delegated": True, "ns": tanh_float_ns},
                           "int16": {"delegated": True, "ns": tanh_int16_ns}}
    path = tmp_path / f"priced-{tanh_float_ns}-{tanh_int16_ns}.json"
    path.write_text(target_text(data))
    return str(path)


@pytest.mark.parametrize("float_ns, int16_ns, chosen", [(1.0, 1000.0, "float"), (1000.0, 1.0, "int16")])
def test_the_plan_writes_the_form_cheapest_on_the_target(tmp_path, float_ns, int16_ns, chosen):
    """Both forms of the one-node region hold 30 dB; the target's prices decide which is written,
    and the written file holds the target against onnxruntime (the conversion's verification)."""
    model, calibration = tanh_model()
    result = qconvert.convert(model, quantize=True, calibration=calibration, target_sqnr=30, verify=True,
                              target=_priced(tmp_path, float_ns, int16_ns))
    plan = result.report.quantization.plan
    assert [(p.node, p.to) for p in plan.promotions] == [("tanh", chosen)] and plan.reached
    written = read_tflite(result.tflite)
    tanh = next(op for op in written.operators if op.name == "TANH")
    assert written.tensors[tanh.outputs[0]].dtype == {"float": "FLOAT32", "int16": "INT16"}[chosen]
    assert result.report.verify.worst.sqnr_db >= 30
    assert result.report.quantization.target == "priced"


def test_micro_writes_an_integer_model_tflite_micro_runs():
    """--target micro: int8 inputs and outputs, every op integer; TFLite Micro and LiteRT run it
    and agree with onnxruntime within int8's error."""
    rng = np.random.default_rng(5)
    model = small_classifier(rng)
    x = rng.standard_normal((16, 1, 3, 8, 8)).astype(np.float32)
    result = qconvert.convert(model, quantize=True, calibration={"x": x}, target="micro")
    written = read_tflite(result.tflite)
    assert {written.tensors[i].dtype for i in written.subgraphs[0].inputs + written.subgraphs[0].outputs} == {"INT8"}
    assert all(t.dtype != "FLOAT32" or t.data_offset is not None for t in written.tensors)
    (given,), (taken,) = result.report.inputs, result.report.outputs
    source = written.tensors[written.subgraphs[0].inputs[0]]
    sink = written.tensors[written.subgraphs[0].outputs[0]]
    feed = np.clip(np.round(x[0] / source.scales[0]) + source.zero_points[0], -128, 127).astype(np.int8)
    want = run_onnxruntime(model, {"x": x[0]})["y"]
    for run in (run_tflite, run_micro):
        got = run(result.tflite, result.report, {given.name: feed})[taken.name].astype(np.float64)
        got = (got - sink.zero_points[0]) * sink.scales[0]
        assert np.sum((got - want) ** 2) < np.sum(want ** 2) * 10 ** (-20 / 10), run.__name__


def test_an_integer_target_refuses_what_has_no_integer_kernel_in_one_line():
    """A LayerNorm written out in ops needs SQRT and DIV, which TFLite has in float only: the
    integer-only targets refuse it, naming them (arm64 converts it, keeping them float)."""
    model, calibration = layernorm_model()
    for target in ("npu", "micro"):
        with pytest.raises(qconvert.ConversionError) as caught:
            qconvert.convert(model, quantize=True, calibration=calibration, target=target)
        message = str(caught.value)
        assert "\n" not in message and f"--target {target} cannot run 2 ops" in message
        assert "SQRT 'ln_sqrt'" in message and "DIV 'ln_div'" in message
    qconvert.convert(model, quantize=True, calibration=calibration, target="arm64")
