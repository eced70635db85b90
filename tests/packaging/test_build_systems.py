"""The user guide's build-system examples (examples/build/, shown in docs/guide.md) run for real:
the Make and the CMake one convert a model in a build, a second build converts nothing, and
touching an input converts exactly what depends on it. The Bazel example is documentation only (no
Bazel here); the guide shows each example file verbatim, which a test checks.

The examples call `qconvert` from PATH: the tests put this environment's bin/ first on PATH and
this tree on PYTHONPATH, so the code tested is this tree's. Each conversion prints one summary
line, `qconvert: IN -> OUT: ...`, which make and cmake pass through: counting those lines says
which outputs a build converted.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from ai_edge_litert.interpreter import Interpreter

from tests.harness import calibration_set, run_onnxruntime, small_classifier

pytestmark = pytest.mark.packaging

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "build"
BIN = Path(sys.executable).parent
OUTPUTS = ("model.tflite", "model_int8.tflite")
SUMMARY = re.compile(r"^qconvert: \S+ -> (\S+): ", re.M)


def _env() -> dict[str, str]:
    """This environment's bin/ first on PATH, this tree on PYTHONPATH; no make variables of an
    outer make (`make test`), C messages."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    env.update(PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", PYTHONPATH=str(ROOT), LC_ALL="C")
    return env


def _cmake() -> str:
    """The test extra's cmake (PyPI), else one on PATH (Debian's); skips when there is none."""
    found = shutil.which("cmake", path=_env()["PATH"])
    if found is None:
        pytest.skip("cmake is not installed (pip install -e '.[test]' installs it)")
    return found


def _build(command: list[str], cwd: Path) -> set[str]:
    """Runs a build command; returns the names of the outputs it converted."""
    run = subprocess.run(command, cwd=cwd, capture_output=True, text=True, env=_env())
    output = run.stdout + run.stderr
    assert run.returncode == 0, output
    assert "Traceback" not in output, output
    return {Path(name).name for name in SUMMARY.findall(output)}


def _touch(path: Path, outputs: list[Path]) -> None:
    """Makes `path` newer than every output (by a second more when the file system's clock is too
    coarse to tell them apart)."""
    os.utime(path)
    newest = max(p.stat().st_mtime_ns for p in outputs)
    if path.stat().st_mtime_ns <= newest:
        os.utime(path, ns=(newest + 10**9, newest + 10**9))


def _mtimes(outputs: list[Path]) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in outputs}


def _check_runs(folder: Path, model: onnx.ModelProto, samples: np.ndarray) -> None:
    """Both outputs run in LiteRT: the float one within float error of onnxruntime, the int8 one
    within 3 output steps (the output's range over the samples / 255)."""
    reference = np.stack([run_onnxruntime(model, {"x": x})["y"] for x in samples])
    step = (reference.max() - reference.min()) / 255
    for name, tolerance in (("model.tflite", 1e-4), ("model_int8.tflite", 3 * step)):
        runner = Interpreter(model_path=str(folder / name)).get_signature_runner()
        got = np.stack([runner(x=x.transpose(0, 2, 3, 1))["y"] for x in samples])  # --io-layout nhwc
        np.testing.assert_allclose(got, reference, rtol=0, atol=tolerance, err_msg=name)


@pytest.fixture
def sources(tmp_path):
    """(folder, model, samples): model.onnx and calibration.npz (16 samples) in a new folder,
    dated an hour back so that every output a build writes is newer."""
    model = small_classifier(np.random.default_rng(3))
    samples = calibration_set(model)["x"]
    onnx.save(model, tmp_path / "model.onnx")
    np.savez(tmp_path / "calibration.npz", x=samples)
    past = time.time() - 3600
    for name in ("model.onnx", "calibration.npz"):
        os.utime(tmp_path / name, (past, past))
    return tmp_path, model, samples


def test_make_example_converts_once(sources):
    folder, model, samples = sources
    shutil.copy(EXAMPLES / "Makefile", folder)
    outputs = [folder / name for name in OUTPUTS]

    assert _build(["make"], folder) == set(OUTPUTS)
    _check_runs(folder, model, samples)

    before = _mtimes(outputs)
    assert subprocess.run(["make", "-q"], cwd=folder, env=_env()).returncode == 0  # up to date
    run = subprocess.run(["make"], cwd=folder, capture_output=True, text=True, env=_env())
    assert run.returncode == 0 and "Nothing to be done" in run.stdout, run.stdout + run.stderr
    assert not SUMMARY.search(run.stdout + run.stderr) and _mtimes(outputs) == before

    _touch(folder / "calibration.npz", outputs)
    assert _build(["make"], folder) == {"model_int8.tflite"}
    _touch(folder / "model.onnx", outputs)
    assert subprocess.run(["make", "-q"], cwd=folder, env=_env()).returncode == 1  # out of date
    assert _build(["make"], folder) == set(OUTPUTS)
    _check_runs(folder, model, samples)


def test_cmake_example_converts_once(sources):
    cmake = _cmake()
    folder, model, samples = sources
    shutil.copy(EXAMPLES / "CMakeLists.txt", folder)
    build = folder / "build"
    outputs = [build / name for name in OUTPUTS]
    configure = subprocess.run([cmake, "-S", str(folder), "-B", str(build)], capture_output=True,
                               text=True, env=_env())
    assert configure.returncode == 0, configure.stdout + configure.stderr
    command = [cmake, "--build", str(build)]

    assert _build(command, folder) == set(OUTPUTS)
    _check_runs(build, model, samples)

    before = _mtimes(outputs)
    run = subprocess.run(command, cwd=folder, capture_output=True, text=True, env=_env())
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Converting" not in run.stdout and not SUMMARY.search(run.stdout + run.stderr), run.stdout
    assert _mtimes(outputs) == before

    _touch(folder / "calibration.npz", outputs)
    assert _build(command, folder) == {"model_int8.tflite"}
    _touch(folder / "model.onnx", outputs)
    assert _build(command, folder) == set(OUTPUTS)
    _check_runs(build, model, samples)


@pytest.mark.parametrize("name", ["Makefile", "CMakeLists.txt", "BUILD.bazel"])
def test_readme_shows_each_example_verbatim(name):
    """The guide's build-system section (docs/guide.md) holds each file of examples/build/ as an
    indented block, unchanged, so the text a user copies is the one the tests run."""
    text = (EXAMPLES / name).read_text()
    block = "".join(f"    {line}" if line.strip() else line for line in text.splitlines(keepends=True))
    assert block in (ROOT / "docs" / "guide.md").read_text(), f"docs/guide.md does not show examples/build/{name}"
