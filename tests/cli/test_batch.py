"""`qconvert batch JOBS` (qconvert/driver/batch.py): many conversions in one process, each file
byte-identical to its own `qconvert IN OUT [flags]` run, each job with its own lines and exit
code, a bad line failing alone; examples/build/batch.mk, which builds with it; and `qconvert worker
--persistent_worker`, Bazel's JSON worker protocol over the same jobs.

Every command runs the installed console script in a real subprocess (CPU-bounded: tests/
processes.py); every file a batch writes is run in LiteRT and compared with onnxruntime.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests import processes
from tests.harness import random_feeds, run_onnxruntime, run_tflite

QCONVERT = str(Path(sys.executable).parent / "qconvert")
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "build" / "batch.mk"


def _model(seed: int) -> onnx.ModelProto:
    """MatMul (16x8, seeded weights) + Relu + Add: a small float model, each seed its own."""
    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["a"]), helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Add", ["r", "b"], ["y"])]
    inits = [numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """m0..m3.onnx and c.npz (16 calibration samples of x) in a folder of their own."""
    where = tmp_path_factory.mktemp("batch")
    for k in range(4):
        onnx.save(_model(k), where / f"m{k}.onnx")
    x = np.random.default_rng(9).standard_normal((16, 2, 16)).astype(np.float32)
    np.savez(where / "c.npz", x=x)
    return where


def _qconvert(args, cwd: Path, stdin: bytes | None = None):
    return processes.run([QCONVERT, *args], input=stdin, capture_output=True, cwd=cwd, cpu_seconds=120)


def _check_in_litert(path: Path, model: onnx.ModelProto, report: dict, min_db: float | None = None) -> None:
    """The written file against onnxruntime on seeded inputs: a float file within 1e-5 of the
    output's scale, a file of stored or int8 weights at `min_db` dB SQNR or better (a wrong file
    is near 0 dB)."""
    shown = SimpleNamespace(**{k: [SimpleNamespace(**io) for io in report[k]] for k in ("inputs", "outputs")})
    feeds = random_feeds(model, seed=3)
    got = run_tflite(path.read_bytes(), shown, feeds)["y"]
    want = run_onnxruntime(model, feeds)["y"]
    if min_db is None:
        assert np.max(np.abs(got - want)) <= 1e-5 * np.max(np.abs(want)), path.name
    else:
        sqnr = 10 * np.log10(np.sum(want ** 2) / np.sum((got - want) ** 2))
        assert sqnr > min_db, (path.name, sqnr)


# The jobs and the SQNR their file must reach (None: float, exact; int8 at 16 calibration samples
# of a Relu's output gives about 17 dB, float16 and int8 weights about 50).
JOBS = [["m0.onnx", "f.tflite"],
        ["m1.onnx", "q.tflite", "--quantize", "--calibration", "c.npz"],
        ["m2.onnx", "h.tflite", "--float16"],
        ["m3.onnx", "w.tflite", "--weight-only", "--weight-only-min-elements", "16"]]
MIN_DB = [None, 12, 35, 25]


def test_each_file_is_the_one_its_own_run_writes(folder):
    """Four jobs of four kinds (float, int8 with calibration, float16, weight-only) between
    comments and blank lines: each file byte-identical to its separate run's, each correct in
    LiteRT, one JSON line per job, one summary line per job naming its line, and a total."""
    text = "# models of this folder\n\n" + "".join(
        " ".join(job) + ("  # a trailing comment" if k == 1 else "") + "\n" for k, job in enumerate(JOBS))
    (folder / "jobs.txt").write_text(text + "\n   \n# the end\n")
    run = _qconvert(["batch", "jobs.txt", "--json"], folder)
    assert run.returncode == 0, run.stderr.decode()
    results = [json.loads(line) for line in run.stdout.decode().splitlines()]
    assert [r["job"] for r in results] == ["jobs.txt:3", "jobs.txt:4", "jobs.txt:5", "jobs.txt:6"]
    assert [r["args"] for r in results] == JOBS and all(r["exit"] == 0 for r in results)
    lines = run.stderr.decode().splitlines()
    for where, job in zip(("jobs.txt:3", "jobs.txt:4", "jobs.txt:5", "jobs.txt:6"), JOBS):
        assert any(line.startswith(f"qconvert: {where}: {job[0]} -> {job[1]}: ") for line in lines), lines
    assert lines[-1] == "qconvert: batch jobs.txt: 4 jobs, 4 converted"
    for job, result, min_db in zip(JOBS, results, MIN_DB):
        separate = folder / f"separate-{job[1]}"
        alone = _qconvert([job[0], separate.name, *job[2:]], folder)
        assert alone.returncode == 0, alone.stderr.decode()
        assert (folder / job[1]).read_bytes() == separate.read_bytes(), job
        _check_in_litert(folder / job[1], onnx.load(folder / job[0]), result["report"], min_db)


def test_a_bad_line_fails_alone(folder):
    """A missing model, a malformed flag, an unclosed quote, a '-' output and a job's --json each
    give their own one line and exit code; the jobs around them convert; the batch exits with the
    first failure's code; a --verbose job's logging does not leak into the next job."""
    lines = ["m0.onnx bad0.tflite --verbose", "missing.onnx bad1.tflite",
             "m1.onnx bad2.tflite --input-shape x:1,a", 'm1.onnx "bad3.tflite', "m2.onnx -",
             "m2.onnx bad5.tflite --json", "m3.onnx good.tflite"]
    (folder / "bad.txt").write_text("\n".join(lines) + "\n")
    run = _qconvert(["batch", "bad.txt", "--json"], folder)
    err = run.stderr.decode()
    assert run.returncode == 1, err
    assert "Traceback" not in err
    codes = {r["job"]: r["exit"] for r in map(json.loads, run.stdout.decode().splitlines())}
    assert codes == {"bad.txt:1": 0, "bad.txt:2": 1, "bad.txt:3": 2, "bad.txt:4": 2, "bad.txt:5": 2,
                     "bad.txt:6": 2, "bad.txt:7": 0}
    errors = [line for line in err.splitlines() if ": error: " in line]
    assert [line.split(": error: ")[0] for line in errors] == [f"qconvert: bad.txt:{n}" for n in range(2, 7)]
    assert "missing.onnx" in errors[0] and "--input-shape" in errors[1] and "quotation" in errors[2]
    seventh = [line for line in err.splitlines() if line.startswith("qconvert: bad.txt:7: ")]
    assert len(seventh) == 1, seventh  # its summary only: no --verbose lines from job 1
    assert len([line for line in err.splitlines() if line.startswith("qconvert: bad.txt:1: ")]) > 1
    assert err.splitlines()[-1].startswith("qconvert: batch bad.txt: 7 jobs, 2 converted, 5 failed "
                                           "(bad.txt:2 exit 1, bad.txt:3 exit 2,")
    assert not any((folder / f"bad{k}.tflite").exists() for k in range(1, 6))
    report = json.loads(_qconvert(["m3.onnx", "alone.tflite", "--json"], folder).stdout)
    assert (folder / "good.tflite").read_bytes() == (folder / "alone.tflite").read_bytes()
    _check_in_litert(folder / "good.tflite", onnx.load(folder / "m3.onnx"), report)


def test_jobs_from_standard_input(folder):
    """JOBS '-' reads the jobs from standard input; their lines name <stdin>:LINE."""
    run = _qconvert(["batch", "-"], folder, stdin=b"# one job\nm0.onnx stdin.tflite\n")
    err = run.stderr.decode()
    assert run.returncode == 0, err
    assert err.splitlines()[0].startswith("qconvert: <stdin>:2: m0.onnx -> stdin.tflite: "), err
    report = json.loads(_qconvert(["m0.onnx", "stdin-alone.tflite", "--json"], folder).stdout)
    assert (folder / "stdin.tflite").read_bytes() == (folder / "stdin-alone.tflite").read_bytes()
    _check_in_litert(folder / "stdin.tflite", onnx.load(folder / "m0.onnx"), report)


def test_unreadable_jobs_is_one_line(folder):
    """A JOBS file that does not exist: one line naming it, exit 1."""
    run = _qconvert(["batch", "no-such-jobs.txt"], folder)
    err = run.stderr.decode()
    assert run.returncode == 1 and len(err.splitlines()) == 1 and "no-such-jobs.txt" in err, err


def test_the_make_example_converts_what_is_out_of_date(folder, tmp_path):
    """examples/build/batch.mk: one batch for every model, then nothing, then only the model
    touched; its files are the separate runs'."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    (tmp_path / "models").mkdir()
    for k in (0, 2):
        shutil.copy(folder / f"m{k}.onnx", tmp_path / "models" / f"m{k}.onnx")
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    env.pop("MAKEFLAGS", None)
    env.pop("MFLAGS", None)
    make = ["make", "-s", "-f", str(EXAMPLE)]

    def build() -> str:
        done = processes.run(make, capture_output=True, cwd=tmp_path, env=env, cpu_seconds=120)
        assert done.returncode == 0, done.stderr.decode()
        return done.stderr.decode()

    assert build().splitlines()[-1] == "qconvert: batch out/jobs.txt: 2 jobs, 2 converted"
    assert build() == ""
    earlier = os.stat(tmp_path / "models" / "m2.onnx").st_mtime - 10  # m2.onnx newer than its file
    os.utime(tmp_path / "out" / "m2.tflite", (earlier, earlier))
    assert build().splitlines()[-1] == "qconvert: batch out/jobs.txt: 1 job, 1 converted"
    for k in (0, 2):
        report = json.loads(_qconvert([f"m{k}.onnx", f"make-alone{k}.tflite", "--json"], folder).stdout)
        assert (tmp_path / "out" / f"m{k}.tflite").read_bytes() == (folder / f"make-alone{k}.tflite").read_bytes()
        _check_in_litert(tmp_path / "out" / f"m{k}.tflite", onnx.load(folder / f"m{k}.onnx"), report)


def test_the_bazel_worker_answers_each_request(folder):
    """`qconvert worker --persistent_worker`: Bazel's JSON protocol, a request over several lines
    and a flag file included; one response line per request with its id, exit code and output;
    nothing else on stdout; files byte-identical to separate runs and right in LiteRT."""
    (folder / "flags.txt").write_text("m2.onnx\nworker-h.tflite\n--float16\n")
    requests = (b'{"arguments": ["m0.onnx", "worker-f.tflite"], "requestId": 7}\n'
                b'{\n  "arguments": ["missing.onnx", "worker-x.tflite"],\n  "requestId": 8\n}\n'
                b'{"arguments": ["@flags.txt"], "requestId": 9}\n')
    run = _qconvert(["worker", "--persistent_worker"], folder, stdin=requests)
    assert run.returncode == 0, run.stderr.decode()
    responses = [json.loads(line) for line in run.stdout.decode().splitlines()]
    assert [(r["requestId"], r["exitCode"]) for r in responses] == [(7, 0), (8, 1), (9, 0)]
    assert responses[0]["output"].startswith("qconvert: m0.onnx -> worker-f.tflite: ")
    assert responses[1]["output"] == "qconvert: error: missing.onnx: no such file\n"
    assert not (folder / "worker-x.tflite").exists()
    for source, name, flags, min_db in (("m0.onnx", "worker-f.tflite", [], None),
                                        ("m2.onnx", "worker-h.tflite", ["--float16"], 35)):
        report = json.loads(_qconvert([source, f"alone-{name}", "--json", *flags], folder).stdout)
        assert (folder / name).read_bytes() == (folder / f"alone-{name}").read_bytes()
        _check_in_litert(folder / name, onnx.load(folder / source), report, min_db)
    one_shot = _qconvert(["worker", "@flags.txt"], folder)  # workers off: one action, its code
    assert one_shot.returncode == 0 and one_shot.stdout == b"", one_shot.stderr.decode()
