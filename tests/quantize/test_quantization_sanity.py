"""Quantization sanity: calibration ranges, --default-range values and weights that would give
scales or requantization multipliers a kernel cannot represent keep the ops they touch float,
named on the summary line with the tensor and its range (a malformed flag is exit 2); a range merely too narrow is stretched to the
smallest scale every kernel handles. Every model written is run by LiteRT in a subprocess, with
and without XNNPACK, so a crash fails the test instead of killing pytest."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from qconvert.cli import cli
from qconvert.driver.reports import ConversionReport, TensorInfo
from qconvert.ir import MinMax
from qconvert.transforms.keep_unrepresentable_float import CANNOT_CARRY
from qconvert.transforms.quantization import params_for_range
from tests.harness import grid_weights, make_model, run_onnxruntime, run_tflite, small_classifier

_RUN = """
import sys
import numpy as np
from ai_edge_litert.interpreter import Interpreter, OpResolverType
for resolver in (OpResolverType.AUTO, OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES):
    interpreter = Interpreter(model_path=sys.argv[1], experimental_op_resolver_type=resolver)
    interpreter.allocate_tensors()
    for d in interpreter.get_input_details():
        interpreter.set_tensor(d["index"], np.ones(d["shape"], d["dtype"]))
    interpreter.invoke()
"""


def assert_runs_in_litert(path) -> None:
    """LiteRT loads, allocates and invokes the model with XNNPACK (AUTO) and without, in a
    subprocess: a SIGSEGV or an abort shows as a negative return code, a refusal as 1."""
    done = subprocess.run([sys.executable, "-c", _RUN, str(path)], capture_output=True, text=True)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])


def _conv_bias():
    """x [1,3,8,8] -> Conv with bias -> y: the kind of model calibration of 1e-42 crashed."""
    return make_model([helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1], name="conv")],
                      {"x": (TensorProto.FLOAT, (1, 3, 8, 8))}, {"y": TensorProto.FLOAT},
                      {"w": grid_weights((4, 3, 3, 3), seed=1),
                       "b": np.array([0.5, -0.2, 0.1, 0.3], np.float32)})


def _add():
    c = np.linspace(-1, 1, 192).reshape(1, 3, 8, 8).astype(np.float32)
    return make_model([helper.make_node("Add", ["x", "c"], ["y"], name="add")],
                      {"x": (TensorProto.FLOAT, (1, 3, 8, 8))}, {"y": TensorProto.FLOAT}, {"c": c})


def _conv_clip():
    """Conv -> Clip(0, 6): the output range stays [0, 6] whatever the input's."""
    return make_model([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
                       helper.make_node("Clip", ["c", "lo", "hi"], ["y"], name="clip")],
                      {"x": (TensorProto.FLOAT, (1, 3, 8, 8))}, {"y": TensorProto.FLOAT},
                      {"w": grid_weights((4, 3, 3, 3), seed=1), "lo": np.array(0, np.float32),
                       "hi": np.array(6, np.float32)})


MODELS = {"classifier": lambda: small_classifier(np.random.default_rng(3)), "conv": _conv_bias,
          "add": _add, "clip": _conv_clip}


def _files(tmp_path, model_name, value):
    model = MODELS[model_name]()
    onnx.save(model, tmp_path / "m.onnx")
    x = np.random.default_rng(0).uniform(-1, 1, (4, 1, 3, 8, 8)).astype(np.float32) * np.float32(value)
    x.reshape(-1)[:2] = -np.float32(value), np.float32(value)  # the range is exactly [-value, value]
    np.savez(tmp_path / "cal.npz", x=x)
    return model, x


def _convert(tmp_path, *flags, model="m.onnx"):
    out = tmp_path / "out.tflite"
    before = (tmp_path / model).read_bytes()
    result = CliRunner().invoke(cli, [str(tmp_path / model), str(out), "--quantize", "--no-verify",
                                      "--json", *flags])
    assert (tmp_path / model).read_bytes() == before
    assert "Traceback" not in result.stderr
    return result, out


def _refused(result, out, code, fragments):
    assert result.exit_code == code, (result.exit_code, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("qconvert: error:"), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    assert not out.exists()


@pytest.mark.parametrize("model_name", list(MODELS))
@pytest.mark.parametrize("value", [1e-42, 1e-38])
def test_tiny_calibration_data_gives_a_model_litert_runs(tmp_path, model_name, value):
    """Data of 1e-42 gave an input scale of 4e-45 (a SIGSEGV in XNNPACK): the range is now
    stretched to the smallest scale, the model runs, and its outputs match onnxruntime's on the
    same tiny inputs (which are 0 to within 1e-42)."""
    model, x = _files(tmp_path, model_name, value)
    result, out = _convert(tmp_path, "--calibration", str(tmp_path / "cal.npz"))
    assert result.exit_code == 0, result.stderr
    assert_runs_in_litert(out)
    report = json.loads(result.stdout)
    info = ConversionReport(**{**report, "inputs": [TensorInfo(**i) for i in report["inputs"]],
                               "outputs": [TensorInfo(**o) for o in report["outputs"]]})
    expected = run_onnxruntime(model, {"x": x[0]})["y"]
    actual = run_tflite(out.read_bytes(), info, {"x": x[0]})["y"]
    assert np.abs(actual - expected).max() <= 0.02 * max(np.abs(expected).max(), 1e-30)


def _kept_float(result, out, fragments) -> dict:
    """The conversion went through (never refused for quantization): LiteRT runs the file, the
    summary line names the ops int8 cannot carry, and one of them says why with `fragments`."""
    assert result.exit_code == 0, result.stderr
    assert_runs_in_litert(out)
    assert "int8 cannot carry" in result.stderr.splitlines()[-1], result.stderr
    report = json.loads(result.stdout)
    reasons = [f["reason"] for f in report["quantization"]["float_ops"]
               if f["reason"].startswith(CANNOT_CARRY)]
    assert any(all(fragment in reason for fragment in fragments) for reason in reasons), reasons
    return report


@pytest.mark.parametrize("model_name, value, fragments", [
    ("classifier", 1e30, ["'x'", "range [-1e+30, 1e+30] from calibration", "[2^-60, 2^60]"]),
    ("conv", 1e30, ["'x'", "range [-1e+30, 1e+30] from calibration", "[2^-60, 2^60]"]),
    ("add", 1e30, ["'x'", "range [-1e+30, 1e+30] from calibration"]),
    ("add", 1e37, ["'x'", "range [-1e+37, 1e+37] from calibration"]),
    ("conv", 1e20, ["'y'", "from calibration", "[2^-60, 2^60]"]),
    # The output range stays [0, 6]: the conv's multiplier would be 1e7, which XNNPACK refuses.
    ("clip", 1e10, ["requantization multiplier", "'x' scale",
                    "range [-1e+10, 1e+10] from calibration", "not below 256"]),
])
def test_values_int8_cannot_carry_stay_float(tmp_path, model_name, value, fragments):
    """Calibration ranges no int8 scale holds keep the ops that touch them float, and the model
    computes what onnxruntime computes on the calibration inputs."""
    model, x = _files(tmp_path, model_name, value)
    result, out = _convert(tmp_path, "--calibration", str(tmp_path / "cal.npz"))
    report = _kept_float(result, out, fragments)
    info = ConversionReport(**{**report, "inputs": [TensorInfo(**i) for i in report["inputs"]],
                               "outputs": [TensorInfo(**o) for o in report["outputs"]]})
    expected = run_onnxruntime(model, {"x": x[0]})["y"]
    actual = run_tflite(out.read_bytes(), info, {"x": x[0]})["y"]
    assert np.abs(actual - expected).max() <= 0.02 * max(np.abs(expected).max(), 1e-30)


@pytest.mark.parametrize("value, fragments", [
    ("", ["--default-range", "''", "MIN,MAX"]),
    ("0,1e-45", ["--default-range", "'0,1e-45'", "[2^-60, 2^60]"]),
    ("-1e30,1e30", ["--default-range", "[2^-60, 2^60]"]),
    ("nan,1", ["--default-range", "finite"]),
    ("0,inf", ["--default-range", "finite"]),
    ("1,1", ["--default-range", "MIN < MAX"]),
    ("1,0", ["--default-range", "MIN < MAX"]),
    ("1,2,3", ["--default-range", "MIN,MAX"]),
])
def test_malformed_default_range_is_exit_2(tmp_path, value, fragments):
    _files(tmp_path, "conv", 1.0)
    result, out = _convert(tmp_path, "--default-range", value)
    _refused(result, out, 2, fragments)


def test_default_range_at_the_edges_of_the_scale_span_runs(tmp_path):
    """The narrowest and widest --default-range accepted still give a model LiteRT runs, or a
    model with the op float where no kernel can add a bias at that scale."""
    _files(tmp_path, "add", 1.0)
    for value in ("0,2.3e-16", "-1e20,1e20"):
        result, out = _convert(tmp_path, f"--default-range={value}")
        assert result.exit_code == 0, result.stderr
        assert_runs_in_litert(out)


def _with_nan(model: onnx.ModelProto, name: str) -> onnx.ModelProto:
    for t in model.graph.initializer:
        if t.name == name:
            data = onnx.numpy_helper.to_array(t).copy()
            data.reshape(-1)[1] = np.nan
            t.CopyFrom(onnx.numpy_helper.from_array(data, name))
    return model


@pytest.mark.parametrize("model_name, tensor, fragments", [
    ("classifier", "gw", ["weights", "NaN"]),
    ("conv", "w", ["weights", "NaN"]),
    ("conv", "b", ["bias", "NaN"]),
    ("add", "c", ["constant 'c'", "NaN"]),
])
@pytest.mark.parametrize("source", ["default-range", "calibration"])
def test_nan_in_weights_or_constants_stays_float(tmp_path, model_name, tensor, fragments, source):
    _files(tmp_path, model_name, 1.0)
    onnx.save(_with_nan(MODELS[model_name](), tensor), tmp_path / "nan.onnx")
    flags = (["--default-range=-1,1"] if source == "default-range"
             else ["--calibration", str(tmp_path / "cal.npz")])
    result, out = _convert(tmp_path, *flags, model="nan.onnx")
    _kept_float(result, out, fragments)


@pytest.mark.parametrize("low, high, scale", [
    (0.0, 1e-30, 2.0**-60),  # too narrow: stretched to the smallest scale
    (-1e-42, 1e-42, 2.0**-60),
    (0.0, 255.0, 1.0),  # the usual chooser, untouched
    (0.0, 2.55e-16, 1e-18),  # narrow but above the floor, untouched
])
def test_activation_scales_never_fall_below_the_floor(low, high, scale):
    params = params_for_range(MinMax(low, high, "test"))
    assert float(params.scale[0]) == pytest.approx(scale, rel=1e-6)
    assert float(params.scale[0]) >= 2.0**-60
