"""`pip install qconvert` is all a user needs: the wheel built from this tree, installed into a
fresh virtual environment with its dependencies from the package index, runs every documented
mode (float, --quantize, --weight-only, --float16, stdin/stdout, verify, inspect), and the files
it writes run in that environment's LiteRT and match its onnxruntime.

Nothing of the test's own environment leaks in: the commands run the fresh venv's `qconvert`
console script and Python with PYTHONPATH removed, from a temporary folder, so they import the
installed wheel, never this tree. The wheel is built from a copy of the tree, so the build leaves no
build/ or .egg-info here. Without a reachable package index the test skips, saying so.

Every test that runs the installed wheel runs twice: in a venv with the newest dependencies pip
picks, and in one installed with the constraints file floors.txt beside this file, which pins each
dependency at the lower bound pyproject.toml declares (a test checks that the two agree), so the
floors are versions that ran, not a guess.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from PIL import Image

pytestmark = pytest.mark.packaging

ROOT = Path(__file__).resolve().parents[2]
FLOORS = Path(__file__).with_name("floors.txt")
SAMPLES = 16
# numpy's floor (1.24.0) has no wheel for Python 3.12 or newer (nor onnxruntime's, 1.19.0, for
# 3.13): there pip resolves newer versions, and the floors' variant skips.
FLOORS_PYTHONS = ((3, 10), (3, 11))

# What pip prints when it cannot reach the index (offline machine): the test skips on these only;
# any other install failure (a dependency that does not resolve) fails it.
NETWORK_FAILURES = ("Could not fetch URL", "NewConnectionError", "Failed to establish a new connection",
                    "Temporary failure in name resolution", "Network is unreachable",
                    "ConnectTimeoutError", "ReadTimeoutError")

# Runs in the fresh venv: the .tflite in its LiteRT and the ONNX model in its onnxruntime on every
# sample of the .npz; prints the largest difference and the reference's range as JSON.
RUN_AND_COMPARE = r"""
import json, sys
import numpy as np, onnxruntime
from ai_edge_litert.interpreter import Interpreter
onnx_path, tflite_path, data_path = sys.argv[1:]
samples = np.load(data_path)["x"]
session = onnxruntime.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
runner = Interpreter(model_path=tflite_path).get_signature_runner()
refs, errors = [], []
for x in samples:
    ref = session.run(["y"], {"x": x})[0]
    got = runner(x=x.transpose(0, 2, 3, 1))["y"]  # qconvert's default --io-layout nhwc
    refs.append(ref)
    errors.append(np.abs(got.astype(np.float64) - ref))
refs = np.stack(refs)
print(json.dumps({"max_abs_error": float(np.max(errors)), "ref_max_abs": float(np.abs(refs).max()),
                  "ref_range": float(refs.max() - refs.min())}))
"""


def _model() -> onnx.ModelProto:
    """x [1, 3, 8, 8] -> Conv 3x3 (16 channels) -> Relu -> GlobalAveragePool -> Flatten -> Gemm
    -> y [1, 64]. The Gemm's 16 x 64 weights reach --weight-only's 1024-element threshold, so
    every mode changes something."""
    rng = np.random.default_rng(11)
    inits = {"w": rng.standard_normal((16, 3, 3, 3)).astype(np.float32) * 0.3,
             "b": rng.standard_normal(16).astype(np.float32) * 0.1,
             "gw": rng.standard_normal((16, 64)).astype(np.float32) * 0.3,
             "gb": rng.standard_normal(64).astype(np.float32) * 0.1}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["p"], name="pool"),
             helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "gw", "gb"], ["y"], name="gemm")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT,
                                                                         [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _build_wheel(dest: Path) -> Path:
    """Builds the wheel from a copy of the tree's packaging inputs (pyproject.toml, README.md, the
    qconvert package) the way pip builds it for a user: in an isolated build environment with
    pyproject's build requirements (this venv's own setuptools may be older than they ask: a
    fresh venv's bundled 65 cannot read the license field). Skips, like the install, when the
    package index cannot be reached."""
    source = dest / "source"
    source.mkdir()
    shutil.copy(ROOT / "pyproject.toml", source)
    shutil.copy(ROOT / "README.md", source)
    shutil.copytree(ROOT / "qconvert", source / "qconvert",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    run = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(dest / "dist"),
                          str(source)], capture_output=True, text=True)
    _require_pip_success(run, "pip wheel (the build)")
    (wheel,) = (dest / "dist").glob("qconvert-*.whl")
    return wheel


def _make_venv(wheel: Path, dest: Path, variant: str) -> Path:
    """The venv folder: a new venv with the wheel installed, its dependencies the newest pip
    picks ("newest") or pinned at floors.txt ("floors", wheels only: a floor that has no wheel
    for this Python must not start a source build). Raises pytest.skip.Exception when the package
    index cannot be reached."""
    env_dir = dest / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    pins = ["-c", str(FLOORS), "--only-binary=:all:"] if variant == "floors" else []
    # Not -q: pip says "Could not fetch URL" (an unreachable index) on stdout only without it.
    run = subprocess.run([str(env_dir / "bin" / "python"), "-m", "pip", "install", *pins, str(wheel)],
                         capture_output=True, text=True, env=_clean_env(), cwd=dest)
    what = f"pip install {wheel.name} into a fresh venv" + (" at the floors" if pins else "")
    _require_pip_success(run, what)
    return env_dir


def _require_pip_success(run: subprocess.CompletedProcess, what: str) -> None:
    """Fails with pip's output, or skips when it could not reach the package index."""
    if run.returncode != 0:
        output = run.stdout + run.stderr
        if any(marker in output for marker in NETWORK_FAILURES):
            pytest.skip(f"{what}: the package index cannot be reached: "
                        f"{run.stderr.strip().splitlines()[-1]}")
        pytest.fail(f"{what} failed:\n{output}")


def _clean_env() -> dict[str, str]:
    """The environment without PYTHONPATH, so that the fresh venv imports its installed qconvert."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


def _once(tmp_path_factory, name: str, make) -> dict:
    """make(folder) -> a JSON-able dict, run once per test run: under pytest-xdist the workers
    share the run's temporary root and a file lock, so the wheel is built and each venv installed
    once, not once per worker. A skip or a failure is remembered as such for the other workers."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    dest = shared / name
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        outcome = dest / "outcome.json"
        if not outcome.exists():
            dest.mkdir()
            try:
                outcome.write_text(json.dumps(make(dest)))
            except pytest.skip.Exception as e:
                outcome.write_text(json.dumps({"skip": str(e.msg)}))
            except BaseException as e:
                outcome.write_text(json.dumps({"fail": str(e)}))
                raise
        result = json.loads(outcome.read_text())
    if "skip" in result:
        pytest.skip(result["skip"])
    if "fail" in result:
        pytest.fail(f"{name} failed (in another worker): {result['fail']}")
    return result


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel built from the tree, once per test run."""
    return Path(_once(tmp_path_factory, "qconvert-wheel",
                      lambda dest: {"wheel": str(_build_wheel(dest))})["wheel"])


@pytest.fixture(scope="module", params=["newest", "floors"])
def installed(request, tmp_path_factory) -> Path:
    """The folder of a fresh venv with the wheel installed, once per test run and variant: its
    dependencies the newest pip picks, or pinned at their floors (floors.txt)."""
    variant = request.param
    if variant == "floors" and sys.version_info[:2] not in FLOORS_PYTHONS:
        pytest.skip(f"the floors (floors.txt) are for Python 3.10 and 3.11: numpy's has no wheel for "
                    f"Python {sys.version_info[0]}.{sys.version_info[1]}")
    wheel = request.getfixturevalue("wheel")
    return Path(_once(tmp_path_factory, f"qconvert-venv-{variant}",
                      lambda dest: {"venv": str(_make_venv(wheel, dest, variant))})["venv"])


def _floors() -> dict[str, str]:
    """floors.txt's pins: {distribution name: version}."""
    pins = {}
    for line in FLOORS.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            pins[_normalized(name)] = version.strip()
    return pins


def _lower_bounds() -> dict[str, str]:
    """pyproject's base dependencies: {distribution name: the version after >=} (None without
    one). Read with a pattern rather than tomllib, which Python 3.10 lacks."""
    text = (ROOT / "pyproject.toml").read_text()
    block = re.search(r"^dependencies = \[(.*?)^\]", text, re.M | re.S).group(1)
    bounds = {}
    for requirement in re.findall(r'^\s*"([^"]+)"', block, re.M):
        name = re.match(r"[A-Za-z0-9._-]+", requirement).group(0)
        floor = re.search(r">=\s*([^,;\s]+)", requirement)
        bounds[_normalized(name)] = floor.group(1) if floor else None
    return bounds


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """m.onnx and c.npz (SAMPLES samples of x, sample axis first) in a folder of their own."""
    folder = tmp_path_factory.mktemp("wheel_files")
    onnx.save(_model(), folder / "m.onnx")
    x = np.random.default_rng(5).standard_normal((SAMPLES, 1, 3, 8, 8)).astype(np.float32)
    np.savez(folder / "c.npz", x=x)
    (folder / "images").mkdir()
    for k, sample in enumerate(x):  # the same samples as 8x8 RGB pictures
        pixels = np.clip(sample[0].transpose(1, 2, 0) * 64 + 128, 0, 255).astype(np.uint8)
        Image.fromarray(pixels).save(folder / "images" / f"{k:03d}.png")
    return folder


def _run(env_dir: Path, args: list[str], cwd: Path, stdin: bytes | None = None):
    """Runs a command of the fresh venv's bin/ (qconvert, python) there, PYTHONPATH removed."""
    return subprocess.run([str(env_dir / "bin" / args[0]), *args[1:]], cwd=cwd, input=stdin,
                          capture_output=True, env=_clean_env())


def _compare(env_dir: Path, folder: Path, tflite: str) -> dict:
    run = _run(env_dir, ["python", "-c", RUN_AND_COMPARE, "m.onnx", tflite, "c.npz"], folder)
    assert run.returncode == 0, run.stderr.decode()
    return json.loads(run.stdout)


def test_floors_are_pyprojects_lower_bounds():
    """floors.txt pins every base dependency at exactly the lower bound pyproject.toml declares,
    and nothing else: the floors the wheel test installs are the ones a user is promised."""
    bounds = _lower_bounds()
    assert set(bounds) == {"click", "numpy", "flatbuffers", "onnx", "onnxruntime", "ai-edge-litert",
                           "pillow", "ml-dtypes"}, bounds
    assert all(bounds.values()), f"a dependency without a lower bound: {bounds}"
    assert _floors() == bounds, ("floors.txt and pyproject.toml's lower bounds differ",
                                 _floors(), bounds)


def test_wheel_holds_the_package_only(wheel):
    """The wheel carries qconvert's modules and metadata, not the tests, benchmarks or examples,
    and declares onnxruntime and ai-edge-litert as base requirements (not behind an extra)."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        requires = [line.split(":", 1)[1].strip() for line in archive.read(metadata).decode().splitlines()
                    if line.startswith("Requires-Dist:")]
    assert "qconvert/cli.py" in names and "qconvert/tflite/schema_generated.py" in names
    assert all(n.startswith(("qconvert/", "qconvert-")) for n in names), names
    base = [r for r in requires if "extra ==" not in r]
    for dependency in ("onnxruntime", "ai-edge-litert", "onnx", "numpy", "click", "flatbuffers"):
        assert any(r.startswith(dependency) for r in base), (dependency, requires)


def test_base_install_has_the_runtimes_and_not_torch(installed, files, request):
    """A plain install brings onnxruntime and ai-edge-litert (calibration and verification need
    them), and neither torch nor the test extra's packages; qconvert comes from the venv. The
    floors' venv holds exactly the pinned versions."""
    env_dir = installed
    run = _run(env_dir, ["python", "-m", "pip", "list", "--format=json"], files)
    assert run.returncode == 0, run.stderr.decode()
    versions = {_normalized(p["name"]): p["version"] for p in json.loads(run.stdout)}
    packages = set(versions)
    if request.node.callspec.params["installed"] == "floors":
        assert {name: versions.get(name) for name in _floors()} == _floors()
    assert {"qconvert", "onnxruntime", "ai-edge-litert", "onnx", "numpy"} <= packages, packages
    assert not packages & {"torch", "tensorflow", "tflite-micro", "pytest"}, packages
    assert "pillow" in packages  # calibration from a folder of images (calibration/files.py)
    where = _run(env_dir, ["python", "-c", "import qconvert; print(qconvert.__file__)"], files)
    assert Path(where.stdout.decode().strip()).is_relative_to(env_dir), where.stdout


def test_quantize_in_a_fresh_venv(installed, files, tmp_path):
    """The issue's new user: `qconvert m.onnx m.tflite --quantize --calibration c.npz` exits 0
    and the int8 file, run by the venv's LiteRT, stays within 3 output steps (the output's int8
    step: its range over the samples / 255) of the venv's onnxruntime."""
    env_dir = installed
    out = tmp_path / "m8.tflite"
    run = _run(env_dir, ["qconvert", "m.onnx", str(out), "--quantize", "--calibration", "c.npz"], files)
    assert run.returncode == 0, run.stderr.decode()
    assert b"Traceback" not in run.stderr and b"int8:" in run.stderr, run.stderr.decode()
    result = _compare(env_dir, files, str(out))
    step = result["ref_range"] / 255
    assert result["max_abs_error"] <= 3 * step, result


def test_quantize_from_a_folder_of_images_in_a_fresh_venv(installed, files, tmp_path):
    """Calibration from a folder of PNGs works with the Pillow the install brings (the floors'
    venv: the oldest one promised), and the int8 file holds the samples as pictures show them."""
    out = tmp_path / "m8.tflite"
    run = _run(installed, ["qconvert", "m.onnx", str(out), "--quantize", "--calibration", "images",
                           "--mean", "0.5", "--std", "0.25"], files)
    assert run.returncode == 0, run.stderr.decode()
    assert b"Traceback" not in run.stderr and b"int8:" in run.stderr and b"dB" in run.stderr, run.stderr.decode()
    assert out.stat().st_size > 0


@pytest.mark.parametrize("flags, summary, relative_tolerance", [
    ((), "4 ops", 1e-5),                                  # float32: summation order only
    (("--float16",), "float16 weights: 4 tensors", 5e-3),  # weights rounded to float16 (2^-11)
    # the Gemm's weights as int8 per channel, its input quantized on the fly
    (("--weight-only",), "int8 weights: 1 tensors", 2e-2),
], ids=["float", "float16", "weight-only"])
def test_documented_conversion_modes(installed, files, tmp_path, flags, summary, relative_tolerance):
    """Each weight mode converts in the fresh venv (exit 0, a summary line saying what it stored)
    and its file runs in the venv's LiteRT within the mode's error of onnxruntime (relative to the
    output's largest magnitude)."""
    env_dir = installed
    out = tmp_path / "m.tflite"
    run = _run(env_dir, ["qconvert", "m.onnx", str(out), *flags], files)
    assert run.returncode == 0, run.stderr.decode()
    assert run.stderr.decode().startswith("qconvert: m.onnx -> "), run.stderr.decode()
    assert summary in run.stderr.decode() and b"Traceback" not in run.stderr, run.stderr.decode()
    result = _compare(env_dir, files, str(out))
    assert result["max_abs_error"] <= relative_tolerance * result["ref_max_abs"], result


def test_pipe_verify_and_inspect(installed, files, tmp_path):
    """`qconvert - -` converts stdin to stdout, `qconvert verify` compares the file with
    onnxruntime (exit 0, a line for output y) and `qconvert inspect --json` reads it back, all from
    the fresh venv."""
    env_dir = installed
    piped = _run(env_dir, ["qconvert", "-", "-"], files, stdin=(files / "m.onnx").read_bytes())
    assert piped.returncode == 0, piped.stderr.decode()
    out = tmp_path / "m.tflite"
    out.write_bytes(piped.stdout)
    assert _compare(env_dir, files, str(out))["max_abs_error"] <= 1e-4

    verify = _run(env_dir, ["qconvert", "verify", "m.onnx", str(out), "--data", "c.npz"], files)
    assert verify.returncode == 0, verify.stderr.decode()
    assert any(line.split()[:1] == ["y"] for line in verify.stdout.decode().splitlines()), verify.stdout

    inspect = _run(env_dir, ["qconvert", "inspect", str(out), "--json"], files)
    assert inspect.returncode == 0, inspect.stderr.decode()
    ops = [op["op"] for op in json.loads(inspect.stdout)["subgraphs"][0]["operators"]]
    assert "CONV_2D" in ops and "FULLY_CONNECTED" in ops, ops
