"""`qconvert verify` and the conversion's own verification, through the installed console script:
exit codes (0, 2, 4), one-line messages, no file left behind below --min-sqnr, the JSON keys."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from qconvert.tflite.reader import read
from tests.harness import small_classifier

QCONVERT = str(Path(sys.executable).parent / "qconvert")
KEYS = {"name", "sqnr_db", "worst_slice_sqnr_db", "max_abs_error", "mean_abs_error", "cosine",
        "top1_agreement"}


def qconvert(*args, cwd):
    return subprocess.run([QCONVERT, *map(str, args)], capture_output=True, text=True, cwd=cwd,
                          timeout=120)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """m.onnx (Conv -> Relu -> GlobalAveragePool -> Gemm, 5 classes), its float .tflite, one with
    a corrupted weight buffer, and calibration data."""
    root = tmp_path_factory.mktemp("verify-cli")
    rng = np.random.default_rng(3)
    onnx.save(small_classifier(rng), root / "m.onnx")
    np.savez(root / "cal.npz", x=rng.standard_normal((10, 1, 3, 8, 8)).astype(np.float32))
    np.savez(root / "tiny.npz", x=rng.standard_normal((10, 1, 3, 8, 8)).astype(np.float32) * 1e-3)
    assert qconvert("m.onnx", "good.tflite", cwd=root).returncode == 0
    data = bytearray((root / "good.tflite").read_bytes())
    conv_weights = max((t for t in read(bytes(data)).tensors if t.data_offset is not None),
                       key=lambda t: int(np.prod(t.shape)))
    size = int(np.prod(conv_weights.shape)) * 4
    noise = rng.standard_normal(size // 4).astype(np.float32)
    data[conv_weights.data_offset:conv_weights.data_offset + size] = noise.tobytes()
    (root / "bad.tflite").write_bytes(bytes(data))
    return root


def test_verify_a_good_file(files):
    run = qconvert("verify", "m.onnx", "good.tflite", "--min-sqnr", "60", cwd=files)
    assert run.returncode == 0, run.stderr
    header, row = run.stdout.splitlines()
    assert header.split()[:2] == ["output", "SQNR"] and row.split()[0] == "y"
    assert run.stderr.count("\n") == 1 and run.stderr.startswith("qconvert: verify: worst output 'y'")


def test_verify_a_corrupted_file(files):
    run = qconvert("verify", "m.onnx", "bad.tflite", "--json", cwd=files)
    assert run.returncode == 0  # no threshold: a report, not a failure
    report = json.loads(run.stdout)
    (output,) = report["outputs"]
    assert KEYS <= output.keys() and report["samples"] == 8 and report["passed"]
    assert output["sqnr_db"] < 20
    failed = qconvert("verify", "m.onnx", "bad.tflite", "--min-sqnr", "40", cwd=files)
    assert failed.returncode == 4
    assert failed.stderr.splitlines()[0].startswith("qconvert: error: verify: y ")
    assert "below --min-sqnr 40 dB" in failed.stderr and "Traceback" not in failed.stderr


def test_verify_with_data_and_errors(files):
    run = qconvert("verify", "m.onnx", "good.tflite", "--data", "cal.npz", "--samples", "3",
                   "--json", cwd=files)
    assert run.returncode == 0 and json.loads(run.stdout)["samples"] == 3
    assert json.loads(run.stdout)["data"] == "cal.npz"
    missing = qconvert("verify", "m.onnx", "nothing.tflite", cwd=files)
    assert missing.returncode == 1 and missing.stderr.count("\n") == 1
    assert qconvert("verify", "m.onnx", cwd=files).returncode == 2


def test_conversion_below_min_sqnr_leaves_no_file(files):
    run = qconvert("m.onnx", "q.tflite", "--quantize", "--calibration", "cal.npz",
                   "--min-sqnr", "200", cwd=files)
    assert run.returncode == 4 and not (files / "q.tflite").exists()
    assert run.stderr.count("\n") == 1 and "below --min-sqnr 200 dB" in run.stderr
    assert not list(files.glob(".qconvert-*"))  # no temporary file either


def test_conversion_verifies_itself_and_reports_it(files):
    run = qconvert("m.onnx", "q.tflite", "--quantize", "--calibration", "cal.npz", "--json",
                   "--min-sqnr", "20", cwd=files)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert KEYS <= report["verify"]["outputs"][0].keys() and report["verify"]["data"] == "cal.npz"
    assert "; verify: worst output 'y'" in run.stderr and run.stderr.count("\n") == 1
    float_run = qconvert("m.onnx", "f.tflite", "--verify", "--json", cwd=files)
    sqnr = json.loads(float_run.stdout)["verify"]["outputs"][0]["sqnr_db"]
    assert sqnr == "inf" or sqnr > 60
    plain = qconvert("m.onnx", "f.tflite", "--json", cwd=files)
    assert json.loads(plain.stdout)["verify"] is None and "verify" not in plain.stderr
    skipped = qconvert("m.onnx", "q.tflite", "--quantize", "--calibration", "cal.npz", "--no-verify",
                       cwd=files)
    assert skipped.returncode == 0 and "verify" not in skipped.stderr


def test_a_poor_conversion_warns(files):
    """Calibrated on inputs a thousand times smaller than the verification's: int8 saturates."""
    run = qconvert("m.onnx", "q.tflite", "--quantize", "--calibration", "tiny.npz",
                   "--verify-data", "cal.npz", cwd=files)
    assert run.returncode == 0
    warning, summary = run.stderr.splitlines()
    assert warning.startswith("qconvert: warning: y ") and "--report" in warning
    assert summary.startswith("qconvert: m.onnx -> q.tflite")


@pytest.mark.parametrize("args", [["--min-sqnr", "30"], ["--verify", "--no-verify"],
                                  ["--verify-samples", "3"],
                                  ["--quantize", "--default-range", "-1,1", "--min-sqnr", "3"]])
def test_contradictory_verification_flags(files, args):
    run = qconvert("m.onnx", "u.tflite", *args, cwd=files)
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and not (files / "u.tflite").exists()


def test_reports_from_conversion_and_verify(files):
    run = qconvert("m.onnx", "q.tflite", "--quantize", "--calibration", "cal.npz", "--report",
                   "r.html", cwd=files)
    assert run.returncode == 0 and (files / "r.html").read_text().startswith("<!DOCTYPE html>")
    failed = qconvert("verify", "m.onnx", "bad.tflite", "--min-sqnr", "40", "--report", "bad.json",
                      cwd=files)
    assert failed.returncode == 4  # the report is still written: it shows why
    report = json.loads((files / "bad.json").read_text())
    assert {"tensors", "ops", "samples"} <= report.keys()
    assert report["ops"][0]["type"] == "CONV_2D"  # the op whose weights the fixture corrupted


def test_keep_float(files):
    run = qconvert("m.onnx", "k.tflite", "--quantize", "--calibration", "cal.npz", "--keep-float",
                   "Gemm", "--json", cwd=files)
    assert run.returncode == 0, run.stderr
    (kept,) = json.loads(run.stdout)["quantization"]["float_ops"]
    assert (kept["op"], kept["reason"]) == ("FULLY_CONNECTED", "kept float by --keep-float")
    assert "stayed float: FULLY_CONNECTED" in run.stderr


@pytest.mark.parametrize("args, code", [
    (["--quantize", "--calibration", "cal.npz", "--keep-float", "nosuch"], 1),
    (["--quantize", "--calibration", "cal.npz", "--keep-float", "("], 2),
    (["--keep-float", "Gemm"], 2),
    (["--quantize", "--calibration", "cal.npz", "--no-verify", "--report", "x.json"], 2),
    (["--verify", "--report", "x.txt"], 2)])
def test_bad_report_and_keep_float_flags(files, args, code):
    run = qconvert("m.onnx", "u.tflite", *args, cwd=files)
    assert run.returncode == code and run.stderr.count("\n") == 1, run.stderr
    assert not (files / "u.tflite").exists()


def test_verify_of_a_file_that_crashes_litert_is_one_line_exit_1(tmp_path, monkeypatch):
    """`qconvert verify` takes any tool's .tflite: LiteRT tries it in a child process first, so a
    file it crashes on is an error naming the file and the signal, not a dead qconvert."""
    from tests.harness import crashing_tflite

    model, path = crashing_tflite(tmp_path, monkeypatch)
    onnx.save(model, tmp_path / "m.onnx")
    result = qconvert("verify", "m.onnx", path, cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "crashes.tflite: LiteRT crashed running the file (SIG" in lines[0], lines
