"""The command line's quantization flags: success output and report, determinism, the int8 file
running in LiteRT, and one-line errors with exit codes for contradictory flags and bad
calibration data (checked before any work, leaving no output file)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

from qconvert.cli import cli
from qconvert.driver.reports import ConversionReport, TensorInfo
from tests.harness import run_onnxruntime, run_tflite, small_classifier

QCONVERT = str(Path(sys.executable).parent / "qconvert")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """conv.onnx (Conv -> Relu -> GlobalAveragePool -> Gemm) and calibration data for it."""
    root = tmp_path_factory.mktemp("quant-cli")
    rng = np.random.default_rng(3)
    onnx.save(small_classifier(rng), root / "conv.onnx")
    x = rng.standard_normal((10, 1, 3, 8, 8)).astype(np.float32)
    np.savez(root / "cal.npz", x=x)
    np.savez(root / "wrong_name.npz", image=x)
    np.savez(root / "wrong_shape.npz", x=x[:, :, :2])
    bad = x.copy()
    bad[3, 0, 0, 0, 0] = np.nan
    np.savez(root / "nan.npz", x=bad)
    return root


def _invoke(files, tmp_path, *flags):
    out = tmp_path / "out.tflite"
    result = CliRunner().invoke(cli, [str(files / "conv.onnx"), str(out), *flags])
    return result, out


def test_quantize_summary_json_and_litert_run(files, tmp_path):
    result, out = _invoke(files, tmp_path, "--quantize", "--calibration", str(files / "cal.npz"), "--json")
    assert result.exit_code == 0, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "int8: 4 ops" in lines[0], lines  # CONV_2D, MEAN, RESHAPE, FC
    report = json.loads(result.stdout)
    q = report["quantization"]
    assert q["int8_ops"] == 4 and q["float_ops"] == [] and q["calibration_samples"] == 10
    assert q["weights_bytes"] < q["weights_bytes_float"] / 3
    assert report["op_counts"]["QUANTIZE"] == report["op_counts"]["DEQUANTIZE"] == 1
    info = ConversionReport(**{**report, "inputs": [TensorInfo(**i) for i in report["inputs"]],
                               "outputs": [TensorInfo(**o) for o in report["outputs"]]})
    x = np.load(files / "cal.npz")["x"][0]
    model = onnx.load(files / "conv.onnx")
    actual = run_tflite(out.read_bytes(), info, {"x": x})["y"]
    expected = run_onnxruntime(model, {"x": x})["y"]
    assert np.abs(actual - expected).max() < 0.05 * np.abs(expected).max()


def test_quantized_output_is_byte_identical_across_runs_and_sample_limit_applies(files, tmp_path):
    flags = ("--quantize", "--calibration", str(files / "cal.npz"))
    first, out = _invoke(files, tmp_path, *flags)
    data = out.read_bytes()
    second, out = _invoke(files, tmp_path, *flags)
    assert first.exit_code == second.exit_code == 0
    assert out.read_bytes() == data
    limited, out = _invoke(files, tmp_path, *flags, "--calibration-samples", "3", "--json")
    assert json.loads(limited.stdout)["quantization"]["calibration_samples"] == 3


@pytest.mark.parametrize("flags, code, fragments", [
    (["--calibration", "{f}/cal.npz"], 2, ["--calibration", "--quantize"]),
    (["--io-type", "int8"], 2, ["--io-type", "--quantize"]),
    (["--quantize"], 2, ["--quantize needs --calibration"]),
    (["--quantize", "--default-range", "1,a"], 2, ["--default-range", "MIN,MAX"]),
    (["--quantize", "--default-range", "3,-3"], 2, ["--default-range"]),
    (["--quantize", "--calibration", "{f}/cal.npz", "--calibration-samples", "0"], 2,
     ["--calibration-samples"]),
    (["--quantize", "--default-range", "-1,1", "--calibration-samples", "4"], 2,
     ["--calibration-samples needs --calibration"]),
    (["--quantize", "--calibration", "{f}/missing.npz"], 1, ["missing.npz", "no such file"]),
    (["--quantize", "--calibration", "{f}/wrong_name.npz"], 1, ["'x'", "image"]),
    (["--quantize", "--calibration", "{f}/wrong_shape.npz"], 1, ["wrong_shape.npz", "'x'"]),
    (["--quantize", "--calibration", "{f}/nan.npz"], 1, ["nan.npz", "sample 3"]),
    (["--activations", "int16"], 2, ["--activations", "--quantize"]),
    (["--quantize", "--default-range", "-1,1", "--calibration-method", "mse"], 2,
     ["--calibration-method", "--calibration"]),
    (["--quantize", "--calibration", "{f}/cal.npz", "--calibration-method", "percentile:40"], 2,
     ["--calibration-method", "50 < P <= 100"]),
    (["--quantize", "--calibration", "{f}/cal.npz", "--activations", "int16", "--io-type", "uint8"], 2,
     ["--activations int16", "float or int8"]),
], ids=["calibration-without-quantize", "io-type-without-quantize", "quantize-without-data",
        "default-range-not-numbers", "default-range-reversed", "zero-samples",
        "samples-without-calibration", "missing-file", "wrong-input-name", "wrong-shape", "nan",
        "activations-without-quantize", "int16-with-uint8-io", "method-without-calibration",
        "bad-percentile"])
def test_bad_quantization_flags_and_data(files, tmp_path, flags, code, fragments):
    result, out = _invoke(files, tmp_path, *[f.format(f=files) for f in flags])
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("qconvert: error:"), lines
    assert result.exit_code == code, lines
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    assert not out.exists()


def test_int16_activations_summary_and_json(files, tmp_path):
    """--activations int16: the summary line and --json count the 16x8 ops; the file's activations
    are int16 and it runs in LiteRT close to onnxruntime (its own verification says how close)."""
    result, out = _invoke(files, tmp_path, "--quantize", "--calibration", str(files / "cal.npz"),
                          "--activations", "int16", "--json")
    assert result.exit_code == 0, result.stderr
    assert "int8: 0 ops, int16: 4 ops" in result.stderr
    q = json.loads(result.stdout)["quantization"]
    assert q["int16_ops"] == 4 and q["int8_ops"] == 0
    verify = json.loads(result.stdout)["verify"]
    assert min(o["sqnr_db"] for o in verify["outputs"]) > 40


@pytest.mark.parametrize("method", ["mse", "percentile:99.9"])
def test_calibration_method_is_reported(files, tmp_path, method):
    result, out = _invoke(files, tmp_path, "--quantize", "--calibration", str(files / "cal.npz"),
                          "--calibration-method", method, "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["quantization"]["calibration_method"] == method


def test_default_range_warns_once(files, tmp_path):
    """In a real process (the warning goes through logging to the process's stderr)."""
    out = tmp_path / "out.tflite"
    proc = subprocess.run([QCONVERT, str(files / "conv.onnx"), str(out), "--quantize",
                           "--default-range", "-4,4"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 2 and "accuracy is meaningless" in lines[0], lines
    assert out.exists()


@pytest.mark.parametrize("flags, fragments", [
    (["--weight-only", "--quantize", "--calibration", "{f}/cal.npz"], ["--weight-only", "--quantize"]),
    (["--weight-only", "--calibration", "{f}/cal.npz"], ["--weight-only", "--calibration"]),
    (["--float16", "--quantize", "--default-range", "-1,1"], ["--float16", "--quantize"]),
    (["--float16", "--weight-only"], ["--weight-only and --float16"]),
    (["--weight-only-min-elements", "10"], ["--weight-only-min-elements", "--weight-only"]),
    (["--weight-only", "--weight-only-min-elements", "0"], ["--weight-only-min-elements"]),
], ids=["weight-only-and-quantize", "weight-only-and-calibration", "float16-and-quantize",
        "both-storage-modes", "min-elements-alone", "min-elements-zero"])
def test_weight_storage_flags_that_contradict(files, tmp_path, flags, fragments):
    result, out = _invoke(files, tmp_path, *[f.format(f=files) for f in flags])
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("qconvert: error:"), lines
    assert result.exit_code == 2, lines
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    assert not out.exists()


@pytest.mark.parametrize("flags, mode, dtype", [
    (["--weight-only", "--weight-only-min-elements", "16"], "int8", "INT8"),
    (["--float16"], "float16", "FLOAT16")])
def test_weight_storage_report_lists_the_stored_tensors(files, tmp_path, flags, mode, dtype):
    from qconvert.tflite.reader import read

    result, out = _invoke(files, tmp_path, *flags, "--json")
    assert result.exit_code == 0, result.stderr
    weights = json.loads(result.stdout)["weights"]
    assert weights["mode"] == mode and weights["weights_bytes"] < weights["weights_bytes_float"]
    stored = sorted(t.name for t in read(out.read_bytes()).tensors if t.dtype == dtype)
    assert stored == weights["tensors"] and stored
    assert f"{mode} weights: {len(stored)} tensors" in result.stderr
