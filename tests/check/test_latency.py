"""The written model timed next to its float model (qconvert/check/latency.py): with --latency,
in the --json report and the summary line of a verified quantized or weight-stored conversion;
never by default (a timing is a report on this machine, and costs a second), never for a float
one; a warning with its reasons when the quantized model is slower."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

import qconvert
from qconvert.check import latency
from tests.harness import small_classifier


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("latency")
    onnx.save(small_classifier(np.random.default_rng(7)), root / "m.onnx")
    np.savez(root / "cal.npz", x=np.random.default_rng(8).standard_normal((8, 1, 3, 8, 8)).astype(np.float32))
    return root


def _qconvert(files: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "qconvert", "m.onnx", *args, "--json"], cwd=files,
                          capture_output=True, text=True)


@pytest.mark.parametrize("flags,kind", [(["--quantize", "--calibration", "cal.npz"], "int8"),
                                        (["--weight-only", "--weight-only-min-elements", "8"], "int8"),
                                        (["--float16"], "float16")])
def test_a_verified_quantized_conversion_is_timed(files, flags, kind):
    run = _qconvert(files, "q.tflite", *flags, "--latency")
    assert run.returncode == 0, run.stderr
    timed = json.loads(run.stdout)["latency"]
    assert timed["rounds"] >= latency.MIN_ROUNDS and timed["threads"] == 1
    assert timed["model_ms"] > 0 and timed["float_ms"] > 0
    assert timed["ratio"] == pytest.approx(timed["model_ms"] / timed["float_ms"], rel=0.005)
    assert timed["cpu"] == latency.cpu_description()
    ratio = timed["ratio"]
    factor = 1 / ratio if ratio < 1 else ratio
    shown = f"{factor:.1f}x" if factor >= 2 else f"{factor:.2f}x"
    speed = f"{shown} faster than" if ratio < 1 else f"{shown} slower than" if ratio > 1 else "as fast as"
    assert f"{kind} {speed} float (" in run.stderr.splitlines()[-1]


def test_conversions_are_not_timed_by_default(files):
    for args in (["f.tflite"], ["n.tflite", "--quantize", "--calibration", "cal.npz"]):
        run = _qconvert(files, *args)
        assert run.returncode == 0 and json.loads(run.stdout)["latency"] is None, run.stderr
        assert "faster than" not in run.stderr and "slower than" not in run.stderr


@pytest.mark.parametrize("args, message", [
    (["f.tflite", "--latency"], "--latency times a verified quantized or weight-stored model"),
    (["n.tflite", "--quantize", "--calibration", "cal.npz", "--latency", "--no-verify"],
     "it cannot with --no-verify"),
])
def test_latency_where_nothing_is_timed_is_a_usage_error(files, args, message):
    run = _qconvert(files, *args)
    assert run.returncode == 2 and message in run.stderr, run.stderr


@pytest.mark.parametrize("ms,shown", [(0.00112, "1.12 µs"), (0.5, "500 µs"), (1.36, "1.36 ms"),
                                      (999.4, "999 ms"), (2310.0, "2.31 s")])
def test_durations_are_shown_in_the_unit_that_fits(ms, shown):
    assert latency.duration(ms) == shown


def test_the_same_model_times_alike(files, tmp_path):
    tflite, _ = qconvert.convert(files / "m.onnx")
    (tmp_path / "a.tflite").write_bytes(tflite)
    timed = latency.measure(str(tmp_path / "a.tflite"), str(tmp_path / "a.tflite"), budget_s=0.3)
    assert 1 / 3 < timed.ratio < 3 and timed.rounds >= latency.MIN_ROUNDS


def test_a_slower_quantized_model_warns_with_its_reasons(files, monkeypatch, caplog):
    """The timing is LiteRT's; here it is replaced by a slower one to reach the warning."""
    slower = latency.Latency(3.0, 2.0, 1.5, 10, 1, "Some CPU: AVX2, no VNNI")
    monkeypatch.setattr(latency, "measure", lambda *args, **kwargs: slower)
    with caplog.at_level("WARNING", logger="qconvert"):
        _, report = qconvert.convert(files / "m.onnx", quantize=True, calibration=files / "cal.npz",
                                     verify=True, precision="int8", latency=True)
    assert report.latency == slower
    (warning,) = [r.getMessage() for r in caplog.records if "float model's time" in r.getMessage()]
    assert "1.50x" in warning and "no VNNI or dot-product instructions" in warning


def test_the_cpu_is_named_with_its_int8_extensions():
    text = latency.cpu_description()
    assert ":" in text and ("VNNI" in text or "dot product" in text or "no SIMD" in text)
