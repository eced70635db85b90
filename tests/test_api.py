"""The Python API, qconvert.convert: a model as path, bytes or ModelProto; calibration as path,
dict of arrays or iterable of samples; the same bytes as the command line; errors as exceptions
with the command line's messages; a light `import qconvert`; and the README's example, run."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

import qconvert
from qconvert.cli import cli
from tests.harness import run_onnxruntime, run_tflite, small_classifier

README = Path(__file__).resolve().parent.parent / "README.md"


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    """m.onnx (x [1,3,8,8] -> y [1,5]) and cal.npz (8 samples for it)."""
    root = tmp_path_factory.mktemp("api")
    onnx.save(small_classifier(np.random.default_rng(7)), root / "m.onnx")
    x = np.random.default_rng(8).standard_normal((8, 1, 3, 8, 8)).astype(np.float32)
    np.savez(root / "cal.npz", x=x)
    return root


def _cli_bytes(files: Path, tmp_path: Path, *flags: str) -> bytes:
    out = tmp_path / "cli.tflite"
    result = CliRunner().invoke(cli, [str(files / "m.onnx"), str(out), "--no-verify", *flags])
    assert result.exit_code == 0, result.stderr
    return out.read_bytes()


def _assert_runs_like_onnxruntime(tflite: bytes, report, files: Path, atol: float) -> None:
    x = np.load(files / "cal.npz")["x"][:3]
    model = onnx.load(files / "m.onnx")
    for sample in x:
        expected = run_onnxruntime(model, {"x": sample})["y"]
        np.testing.assert_allclose(run_tflite(tflite, report, {"x": sample})["y"], expected, atol=atol)


def test_import_is_light():
    code = ("import sys, qconvert; heavy = [m for m in ('onnx', 'onnxruntime', 'ai_edge_litert', "
            "'qconvert.driver.conversion') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parent.parent)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("kind", ["path", "pathlike", "bytes", "proto"])
def test_model_as_path_bytes_or_proto_gives_the_cli_bytes(files, tmp_path, kind):
    proto = onnx.load(files / "m.onnx")
    serialized = proto.SerializeToString()
    model = {"path": str(files / "m.onnx"), "pathlike": files / "m.onnx",
             "bytes": (files / "m.onnx").read_bytes(), "proto": proto}[kind]
    tflite, report = qconvert.convert(model)
    assert tflite == _cli_bytes(files, tmp_path)
    assert proto.SerializeToString() == serialized  # the caller's model is left as it was
    _assert_runs_like_onnxruntime(tflite, report, files, 1e-4)


def _samples(files: Path):
    return [{"x": sample} for sample in np.load(files / "cal.npz")["x"]]


@pytest.mark.parametrize("kind", ["dict", "list", "generator", "function"])
def test_calibration_in_memory_gives_the_cli_bytes(files, tmp_path, kind):
    calibration = {"dict": lambda: dict(np.load(files / "cal.npz")),
                   "list": lambda: _samples(files),
                   "generator": lambda: iter(_samples(files)),
                   "function": lambda: lambda: iter(_samples(files))}[kind]()
    tflite, report = qconvert.convert(files / "m.onnx", quantize=True, calibration=calibration,
                                      io_type="int8")
    assert report.quantization.calibration_samples == 8 and report.quantization.io_type == "int8"
    assert tflite == _cli_bytes(files, tmp_path, "--quantize", "--calibration", str(files / "cal.npz"),
                                "--io-type", "int8")
    path_tflite, _ = qconvert.convert(files / "m.onnx", quantize=True, calibration=files / "cal.npz",
                                      io_type="int8")
    assert tflite == path_tflite


def test_int8_runs_like_onnxruntime(files):
    tflite, report = qconvert.convert(files / "m.onnx", quantize=True, calibration=_samples(files))
    _assert_runs_like_onnxruntime(tflite, report, files, 0.1)


def test_an_endless_generator_stops_at_calibration_samples_or_the_limit(files, monkeypatch):
    def endless():
        rng = np.random.default_rng(0)
        while True:
            yield {"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)}

    tflite, report = qconvert.convert(files / "m.onnx", quantize=True, calibration=endless(),
                                      calibration_samples=3)
    assert report.quantization.calibration_samples == 3
    _assert_runs_like_onnxruntime(tflite, report, files, 0.15)
    monkeypatch.setenv("QCONVERT_MAX_CALIBRATION_SAMPLES", "5")
    with pytest.raises(qconvert.ConversionError, match="QCONVERT_MAX_CALIBRATION_SAMPLES"):
        qconvert.convert(files / "m.onnx", quantize=True, calibration=endless())


@pytest.mark.parametrize("calibration, message", [
    ([{"x": np.zeros((1, 3, 8, 8), np.float32)}, {"z": np.zeros((1, 3, 8, 8), np.float32)}],
     "sample 1 has inputs ['z'], sample 0 has ['x']"),
    ([{"x": np.zeros((1, 3, 8, 8), np.float32)}, {"x": np.zeros((1, 3, 8, 7), np.float32)}],
     "input 'x' has shape [1, 3, 8, 7] in sample 1"),
    ([np.zeros((1, 3, 8, 8), np.float32)], "sample 0 is a ndarray"),
    ({"x": np.zeros((4, 1, 3, 8, 8), np.int64)}, "integer data for a float input"),
    ({"x": np.zeros((4, 1, 3, 8, 5), np.float32)}, "input 'x' has shape [4,1,3,8,5]"),
    ({"x": np.full((4, 1, 3, 8, 8), np.nan, np.float32)}, "contains NaN"),
    ({}, "no data for model input 'x'"),
])
def test_bad_calibration_in_memory_is_a_conversion_error(files, calibration, message):
    with pytest.raises(qconvert.ConversionError) as e:
        qconvert.convert(files / "m.onnx", quantize=True, calibration=calibration)
    assert message in str(e.value)


# (keywords, the same request as flags)
SAME_MESSAGES = [
    (dict(quantize=True), ["--quantize"]),
    (dict(quantize=True, default_range=(0, 1), io_type="int4"),
     ["--quantize", "--default-range", "0.0,1.0", "--io-type", "int4"]),
    (dict(input_shapes={"x": (1, 3, 8, 2**31)}), ["--input-shape", "x:1,3,8,2147483648"]),
    (dict(weight_only=True, float16=True), ["--weight-only", "--float16"]),
    (dict(quantize=True, default_range=(1, 0)), ["--quantize", "--default-range", "1.0,0.0"]),
    (dict(quantize=True, calibration="{f}/cal.npz", calibration_samples=0),
     ["--quantize", "--calibration", "{f}/cal.npz", "--calibration-samples", "0"]),
    (dict(keep_float="Relu"), ["--keep-float", "Relu"]),
    (dict(quantize=True, calibration="{f}/absent.npz"), ["--quantize", "--calibration", "{f}/absent.npz"]),
]


@pytest.mark.parametrize("keywords, flags", SAME_MESSAGES)
def test_errors_carry_the_command_lines_messages(files, tmp_path, keywords, flags):
    keywords = {k: v.format(f=files) if isinstance(v, str) else v for k, v in keywords.items()}
    with pytest.raises((qconvert.UsageError, qconvert.ConversionError)) as e:
        qconvert.convert(files / "m.onnx", **keywords)
    result = CliRunner().invoke(cli, [str(files / "m.onnx"), str(tmp_path / "o.tflite")]
                                + [f.format(f=files) for f in flags])
    code = 2 if isinstance(e.value, qconvert.UsageError) else 1
    assert result.exit_code == code, result.stderr
    assert result.stderr.startswith(f"qconvert: error: {e.value}"), (str(e.value), result.stderr)


@pytest.mark.parametrize("model", [42, None, ["m.onnx"]])
def test_a_model_of_another_type_is_a_usage_error(model):
    with pytest.raises(qconvert.UsageError, match="expected a path, bytes or an onnx.ModelProto"):
        qconvert.convert(model)


def test_the_readme_example_runs(files, tmp_path, monkeypatch):
    text = README.read_text()
    section = text[text.index("\n## Python API\n"):]
    section = section[:section.index("\n## ", 1)]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1
    (tmp_path / "model.onnx").write_bytes((files / "m.onnx").read_bytes())
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(blocks[0], "README.md", "exec"), namespace)
    written = (tmp_path / "model_int8.tflite").read_bytes()
    assert written == namespace["tflite"] and namespace["report"].quantization.int8_ops > 0
    _assert_runs_like_onnxruntime(written, namespace["report"], files, 0.1)


def test_conversion_unpacks_and_names_its_fields(files):
    result = qconvert.convert(str(files / "m.onnx"))
    tflite, report = result
    assert result.tflite is tflite and result.report is report and report.output == "<bytes>"


def test_verify_checks_as_the_command_line_does(files, tmp_path):
    """verify=True runs the command line's verification: a float conversion's float check, one
    generated sample; a quantized one on the calibration data's first 8, --report written."""
    _, report = qconvert.convert(files / "m.onnx", verify=True)
    assert report.verify.check == "float" and report.verify.passed and report.verify.samples == 1
    assert qconvert.convert(files / "m.onnx").report.verify is None  # the API's default: no check
    page = tmp_path / "r.json"
    tflite, report = qconvert.convert(files / "m.onnx", quantize=True,
                                      calibration=files / "cal.npz", report=page)
    assert report.verify.samples == 8 and report.verify.outputs[0].sqnr_db > 20 and page.exists()
    assert tflite == _cli_bytes(files, tmp_path, "--quantize", "--calibration",
                                str(files / "cal.npz"))


def test_a_verification_below_min_sqnr_raises_below_threshold(files):
    with pytest.raises(qconvert.BelowThreshold, match=r"below --min-sqnr 200 dB"):
        qconvert.convert(files / "m.onnx", quantize=True, calibration=files / "cal.npz",
                         min_sqnr=200)


def test_options_are_one_frozen_object():
    import dataclasses

    from qconvert.driver.options import options_from_flags

    options = options_from_flags(quantize=True, calibration="cal.npz", keep_float="Relu",
                                 weight_only_min_elements=None, target_sqnr=30)
    assert options.quantize.keep_float == ("Relu",) and options.plan.target_sqnr == 30.0
    assert options.verify.enabled and options.verify.samples == 8 and options.verify.data == "cal.npz"
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.quantize = None
