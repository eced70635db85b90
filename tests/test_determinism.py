"""The same bytes every time: what qconvert writes depends on the model, the flags, the data and
its version only (docs/guide.md, "The same bytes on every machine").

- Each kind of conversion (float; --quantize with a plan that mixes int8 and float; --weight-only;
  fakequant with the plan's decisions) run three times, in fresh processes as a build system runs
  them, while other processes keep every core busy, writes identical bytes: nothing decides by a
  clock or by the load.
- The float results the conversion measures (onnxruntime's calibration outputs, LiteRT's layer
  inputs for weight rounding, bias correction and equalization) moved by one ulp, up or down,
  give identical bytes: those last bits are what differs between CPUs whose kernels sum in
  another order, and the ranges and factors derived from them sit on grids
  (quantize/params.py, snapped_range) that an ulp does not leave.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

import qconvert
from qconvert.calibration import calibrate
from qconvert.plan import layer_inputs
from tests.plan.precision_models import one_bad_tensor_model

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
DIGITS = EXAMPLES / "digits" / "digits_cnn.onnx"
RUNS = 3


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    """The one-bad-tensor model (a TANH int8 cannot hold: the default plan keeps it float and
    the rest int8) and its calibration data."""
    root = tmp_path_factory.mktemp("determinism")
    model, calibration = one_bad_tensor_model()
    onnx.save(model, root / "mixed.onnx")
    np.savez(root / "mixed.npz", **calibration)
    return root


@contextlib.contextmanager
def every_core_busy():
    """A busy loop on every core while the block runs."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def _qconvert(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    run = subprocess.run([sys.executable, "-m", "qconvert", *args], cwd=cwd, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return run


CONVERSIONS = {
    "float": ["{digits}", "out.tflite"],
    "mixed plan": ["mixed.onnx", "out.tflite", "--quantize", "--calibration", "mixed.npz", "--json"],
    "weight-only": ["{digits}", "out.tflite", "--weight-only", "--weight-only-min-elements", "64"],
    "fakequant": ["fakequant", "mixed.onnx", "out.onnx", "--calibration", "mixed.npz"],
}


@pytest.mark.parametrize("kind", list(CONVERSIONS))
def test_three_runs_on_a_busy_machine_write_the_same_bytes(files, kind):
    args = [a.format(digits=DIGITS) for a in CONVERSIONS[kind]]
    written = set()
    with every_core_busy():
        for _ in range(RUNS):
            run = _qconvert(*args, cwd=files)
            written.add((files / args[-1 if kind == "fakequant" else 1]).read_bytes())
    assert len(written) == 1
    if kind == "mixed plan":  # the plan mixes precisions: int8 ops and a float region
        mix = json.loads(run.stdout)["quantization"]["plan"]["mix"]
        assert mix["int8"] > 0 and mix["float"] > 0, mix


def _moved_by_one_ulp(values, direction):
    if isinstance(values, list):
        return [_moved_by_one_ulp(v, direction) for v in values]
    if isinstance(values, np.ndarray) and values.dtype.kind == "f":
        return np.nextafter(values, direction).astype(values.dtype)
    return values


def _perturbed(monkeypatch, where: str, direction: float) -> None:
    """onnxruntime's calibration outputs, or LiteRT's layer inputs, moved one ulp."""
    if where == "calibration":
        ranges = calibrate.CalibrationRun.ranges

        def moved_ranges(self, *args, **kwargs):
            session_run = self.session.run
            monkeypatch.setattr(self.session, "run", lambda *a, **k: _moved_by_one_ulp(session_run(*a, **k), direction))
            return ranges(self, *args, **kwargs)

        monkeypatch.setattr(calibrate.CalibrationRun, "ranges", moved_ranges)
        return
    run = layer_inputs.TFLiteModel.run

    def moved_run(self, sample):
        result = run(self, sample)
        if not hasattr(self, "_moved"):
            get = self.interpreter.get_tensor
            monkeypatch.setattr(self.interpreter, "get_tensor", lambda i: _moved_by_one_ulp(get(i), direction))
            self._moved = True
        return result

    monkeypatch.setattr(layer_inputs.TFLiteModel, "run", moved_run)


@pytest.mark.parametrize("where", ["calibration", "layer inputs"])
@pytest.mark.parametrize("direction", [np.inf, -np.inf], ids=["up", "down"])
@pytest.mark.parametrize("model", ["mixed", "digits"])
def test_float_results_one_ulp_off_give_the_same_bytes(files, monkeypatch, model, where, direction):
    if model == "mixed":
        source, calibration = files / "mixed.onnx", files / "mixed.npz"
    else:
        source, calibration = DIGITS, EXAMPLES / "digits" / "images"
    expected = qconvert.convert(source, quantize=True, calibration=calibration).tflite
    _perturbed(monkeypatch, where, direction)
    assert qconvert.convert(source, quantize=True, calibration=calibration).tflite == expected
