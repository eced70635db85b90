"""The qconvert command line: success output, --json, stdin/stdout, determinism, buffer alignment,
and one-line errors with the documented exit codes for bad input.

Exit-code and no-traceback checks run the installed console script in real subprocesses (launched
concurrently by one module fixture, so the file stays fast); the rest use click's CliRunner.
"""

from __future__ import annotations

import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from qconvert.cli import cli
from qconvert.tflite import schema_generated as S
from tests import processes
from tests.harness import random_feeds, run_onnxruntime, run_tflite

QCONVERT = str(Path(sys.executable).parent / "qconvert")


# --- models ---------------------------------------------------------------------------------------
def _model(nodes, inputs, outputs, inits=(), opsets=(("", 13),)):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets],
                             ir_version=8)


def _f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def conv_gemm_model(batch=1) -> onnx.ModelProto:
    """Conv (5x3x3x5 weights: 900 bytes) + bias (20 bytes) -> Gemm (bias 28 bytes): constants of
    sizes that are not multiples of 16, so a misaligned buffer would show."""
    rng = np.random.default_rng(1)
    nodes = [helper.make_node("Conv", ["x", "W", "b"], ["c"], name="conv"),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Flatten", ["r"], ["flat"]),
             helper.make_node("Gemm", ["flat", "B", "C"], ["y"], name="gemm")]
    inits = [numpy_helper.from_array(_f32(rng, 5, 3, 3, 5), "W"),
             numpy_helper.from_array(_f32(rng, 5), "b"),
             numpy_helper.from_array(_f32(rng, 5 * 8 * 8, 7), "B"),
             numpy_helper.from_array(_f32(rng, 7), "C")]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 10, 12])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)


def shared_constant_model() -> onnx.ModelProto:
    """Two Adds of equal constants (separate initializers) around a Tanh: one buffer expected."""
    k = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    nodes = [helper.make_node("Add", ["x", "k1"], ["a"]), helper.make_node("Tanh", ["a"], ["t"]),
             helper.make_node("Add", ["t", "k2"], ["y"])]
    inits = [numpy_helper.from_array(k, "k1"), numpy_helper.from_array(k.copy(), "k2")]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)


def dynamic_model() -> onnx.ModelProto:
    """A Conv whose input batch is the symbolic 'N' and width 'W', flattened into a Gemm made for
    width 8: the batch alone would default to 1 (tests/test_dynamic_batch.py); the width, at the
    64 a dynamic dimension converts at (tests/onnx/test_dynamic_dims.py), keeps the model from
    converting unpinned."""
    rng = np.random.default_rng(2)
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Flatten", ["c"], ["f"]),
             helper.make_node("Gemm", ["f", "G"], ["y"], transB=1)]
    inits = [numpy_helper.from_array(_f32(rng, 4, 3, 3, 3), "W"),
             numpy_helper.from_array(_f32(rng, 5, 4 * 8 * 8) / 16, "G")]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, "W"])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)


def _unsupported_default_op() -> str:
    from qconvert import ops  # noqa: F401  (registers importers)
    from qconvert.ops.registry import ONNX_IMPORTERS

    return next(op for op in ("Einsum", "Det", "NonMaxSuppression") if op not in ONNX_IMPORTERS)


def unsupported_model() -> onnx.ModelProto:
    """Two different unsupported nodes: a default-domain op qconvert lacks and a custom op."""
    op = _unsupported_default_op()
    attrs = {"equation": "ij->ji"} if op == "Einsum" else {}
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node(op, ["r"], ["e"], name="my_builtin", **attrs),
             helper.make_node("Frobnicate", ["e"], ["y"], name="my_custom", domain="com.example")]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 3])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                  opsets=(("", 13), ("com.example", 1)))


# --- subprocess runs ------------------------------------------------------------------------------
SENTINEL = b"an existing output that a failed run must not touch"

# name: (argv after the program, stdin file or None, expected exit code, message fragments)
# "{m}" is the models directory, "{out}" the case's output path, "{dir}" the case's directory.
BAD_CASES = {
    "random_bytes": (["{m}/random.onnx", "{out}"], None, 1, ["random.onnx", "not a valid ONNX"]),
    "text_file": (["{m}/text.onnx", "{out}"], None, 1, ["text.onnx"]),
    "truncated": (["{m}/truncated.onnx", "{out}"], None, 1, ["truncated.onnx"]),
    "missing_file": (["{dir}/nope.onnx", "{out}"], None, 1, ["nope.onnx", "no such file"]),
    "unsupported_ops": (["{m}/unsupported.onnx", "{out}"], None, 1,
                        ["my_builtin", "my_custom", "com.example.Frobnicate"]),
    "dynamic_dim": (["{m}/dynamic.onnx", "{out}"], None, 1,
                    ["(Gemm)", "with dynamic 'W' set to 64", "--input-shape x:1,3,8,64 pins them"]),
    "unknown_input": (["{m}/dynamic.onnx", "{out}", "--input-shape", "y:2,3,8,8"], None, 1,
                      ["'y'", "not a model input", "inputs: x"]),
    "shape_not_int": (["{m}/conv.onnx", "{out}", "--input-shape", "x:1,a,8,8"], None, 2,
                      ["--input-shape", "x:1,a,8,8"]),
    "shape_no_colon": (["{m}/conv.onnx", "{out}", "--input-shape", "x"], None, 2, ["--input-shape"]),
    "shape_zero": (["{m}/conv.onnx", "{out}", "--input-shape", "x:0,3,8,8"], None, 2,
                   ["--input-shape"]),
    "json_to_stdout": (["{m}/conv.onnx", "-", "--json"], None, 2, ["--json"]),
    "missing_argument": (["{m}/conv.onnx"], None, 2, ["OUT.tflite"]),
    "no_such_directory": (["{m}/conv.onnx", "{dir}/absent/out.tflite"], None, 1,
                          ["absent", "does not exist"]),
}
# Failing runs whose output path already holds a file: it must be left byte-for-byte as it was.
PREEXISTING_OUTPUT = {"unsupported_ops", "dynamic_dim", "truncated", "shape_not_int"}
# More bad input, checked in-process (same contract; the subprocess cases cover the real exit path).
IN_PROCESS_BAD_CASES = {
    "empty_stdin": (["-", "{out}"], b"", 1, ["<stdin>", "not an ONNX model"]),
    "wrong_rank": (["{m}/dynamic.onnx", "{out}", "--input-shape", "x:2,3,8"], None, 1,
                   ["rank 3", "rank 4"]),
    "same_input_twice": (["{m}/dynamic.onnx", "{out}", "--input-shape", "x:1,3,8,8",
                          "--input-shape", "x:2,3,8,8"], None, 2, ["given twice"]),
    "output_is_directory": (["{m}/conv.onnx", "{dir}"], None, 1, ["is a directory"]),
    "output_ends_in_slash": (["{m}/conv.onnx", "{out}/"], None, 1, ["ends in '/'", "OUT names a file"]),
    "unknown_option": (["{m}/conv.onnx", "{out}", "--bogus"], None, 2, ["--bogus"]),
}

GOOD_CASES = {
    "file": ([QCONVERT, "{m}/conv.onnx", "{out}"], None),
    "json": ([QCONVERT, "{m}/conv.onnx", "{out}", "--json"], None),
    "pipe": ([QCONVERT, "-", "-"], "{m}/conv.onnx"),
    "module_help": ([sys.executable, "-m", "qconvert", "--help"], None),
}


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    m = tmp_path_factory.mktemp("models")
    onnx.save(conv_gemm_model(), m / "conv.onnx")
    onnx.save(dynamic_model(), m / "dynamic.onnx")
    onnx.save(unsupported_model(), m / "unsupported.onnx")
    valid = (m / "conv.onnx").read_bytes()
    (m / "truncated.onnx").write_bytes(valid[:len(valid) // 2])
    (m / "random.onnx").write_bytes(np.random.default_rng(3).bytes(777))
    (m / "text.onnx").write_text("this is a README, not a model\nsecond line\n")
    return m


def _run(argv, stdin_path, cwd, seed):
    stdin = Path(stdin_path).read_bytes() if stdin_path else b""
    env = dict(os.environ, PYTHONHASHSEED=str(seed))  # different seeds: order must not matter
    return processes.run(argv, input=stdin, capture_output=True, cwd=cwd, env=env, cpu_seconds=60)


class _Runs:
    """name -> (CompletedProcess, case dir, out path), each case run at most once per process.

    Alone, every case is launched at once (they overlap, so the file stays fast); under
    pytest-xdist each worker launches only the cases its tests ask for, and the workers overlap."""

    def __init__(self, models: Path, tmp_path_factory, pool: ThreadPoolExecutor):
        self.models, self.tmp_path_factory, self.pool = models, tmp_path_factory, pool
        self.jobs = {name: ([QCONVERT] + args, stdin)
                     for name, (args, stdin, _code, _msg) in BAD_CASES.items()}
        self.jobs.update(GOOD_CASES)
        self.started: dict = {}

    def start(self, name: str) -> None:
        if name in self.started:
            return
        argv, stdin = self.jobs[name]
        case_dir = self.tmp_path_factory.mktemp(name)
        out = case_dir / "out.tflite"
        if name in PREEXISTING_OUTPUT:
            out.write_bytes(SENTINEL)
        fmt = dict(m=self.models, out=out, dir=case_dir)
        seed = list(self.jobs).index(name)
        future = self.pool.submit(_run, [a.format(**fmt) for a in argv],
                                  stdin.format(**fmt) if stdin else None, case_dir, seed)
        self.started[name] = (future, case_dir, out)

    def __getitem__(self, name: str):
        self.start(name)
        future, case_dir, out = self.started[name]
        return future.result(), case_dir, out


@pytest.fixture(scope="module")
def runs(models, tmp_path_factory):
    with ThreadPoolExecutor(max_workers=8) as pool:
        result = _Runs(models, tmp_path_factory, pool)
        if "PYTEST_XDIST_WORKER" not in os.environ:
            for name in result.jobs:
                result.start(name)
        yield result


def _report(data: dict) -> SimpleNamespace:
    """The --json report as the attribute object tests/harness.py's run_tflite expects."""
    return SimpleNamespace(inputs=[SimpleNamespace(**i) for i in data["inputs"]],
                           outputs=[SimpleNamespace(**o) for o in data["outputs"]])


# --- success --------------------------------------------------------------------------------------
def test_success_prints_one_summary_line_and_nothing_on_stdout(runs):
    proc, case_dir, out = runs["file"]
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == b""
    lines = proc.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("qconvert: ") and "out.tflite" in lines[0], lines
    assert out.read_bytes()[4:8] == b"TFL3"
    assert sorted(p.name for p in case_dir.iterdir()) == ["out.tflite"]


def test_json_report_is_valid_and_consistent(runs):
    proc, _, out = runs["json"]
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    for key in ("ops", "op_counts", "size_bytes", "inputs", "outputs"):
        assert key in report, key
    assert report["size_bytes"] == out.stat().st_size
    assert sum(report["op_counts"].values()) == report["ops"] > 0
    assert "CONV_2D" in report["op_counts"]
    assert [i["name"] for i in report["inputs"]] == ["x"]
    assert [o["name"] for o in report["outputs"]] == ["y"]
    assert len(proc.stderr.decode().splitlines()) == 1


def test_output_runs_in_litert_and_matches_onnxruntime(runs, models):
    proc, _, out = runs["json"]
    report = _report(json.loads(proc.stdout))
    model = onnx.load(models / "conv.onnx")
    feeds = random_feeds(model)
    actual = run_tflite(out.read_bytes(), report, feeds)
    np.testing.assert_allclose(actual["y"], run_onnxruntime(model, feeds)["y"], rtol=1e-4, atol=1e-4)


def test_stdin_to_stdout_gives_the_same_bytes_as_files(runs):
    proc, case_dir, _ = runs["pipe"]
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stderr.decode().splitlines()) == 1
    assert proc.stdout == runs["file"][2].read_bytes()
    assert list(case_dir.iterdir()) == []


def test_runs_in_separate_processes_are_byte_identical(runs):
    # The three runs used different PYTHONHASHSEEDs, so set/dict-order dependence would show.
    assert runs["file"][2].read_bytes() == runs["json"][2].read_bytes() == runs["pipe"][0].stdout


def test_python_dash_m_help(runs):
    proc = runs["module_help"][0]
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout.decode()
    assert text.startswith("Usage:") and "--input-shape" in text and "--io-layout" in text


# --- file layout ----------------------------------------------------------------------------------
def _buffers(data: bytes) -> list[tuple[int, int]]:
    """(file offset, length) of every buffer's data; (-1, 0) for empty buffers."""
    model = S.Model.GetRootAs(data, 0)
    file_base = np.frombuffer(data, np.uint8).__array_interface__["data"][0]
    result = []
    for i in range(model.BuffersLength()):
        buffer = model.Buffers(i)
        if buffer.DataLength() == 0:
            result.append((-1, 0))
            continue
        offset = buffer._tab.Vector(buffer._tab.Offset(4))  # Buffer.data is field 0
        view = buffer.DataAsNumpy()
        assert view.__array_interface__["data"][0] - file_base == offset  # two ways agree
        assert data[offset:offset + buffer.DataLength()] == view.tobytes()
        result.append((offset, buffer.DataLength()))
    return result


def test_constant_buffers_are_16_byte_aligned(runs):
    data = runs["file"][2].read_bytes()
    buffers = _buffers(data)
    assert buffers[0] == (-1, 0), "buffer 0 must be the empty sentinel"
    sizes = [n for _, n in buffers if n]
    assert {900, 20, 28} <= set(sizes), sizes  # W (any layout), conv bias, Gemm bias
    for offset, n in buffers[1:]:
        assert n and offset % 16 == 0, (offset, n)


def test_identical_constants_are_stored_once(tmp_path):
    onnx.save(shared_constant_model(), tmp_path / "m.onnx")
    result = CliRunner().invoke(cli, [str(tmp_path / "m.onnx"), str(tmp_path / "m.tflite")])
    assert result.exit_code == 0, result.output
    data = (tmp_path / "m.tflite").read_bytes()
    k = (np.arange(12, dtype=np.float32).reshape(3, 4) / 7).tobytes()
    holders = [i for i, (off, n) in enumerate(_buffers(data)) if data[off:off + n] == k and n]
    assert len(holders) == 1, holders
    graph = S.Model.GetRootAs(data, 0).Subgraphs(0)
    adds = [graph.Operators(i) for i in range(graph.OperatorsLength())]
    const_buffers = {graph.Tensors(op.Inputs(j)).Buffer() for op in adds
                     for j in range(op.InputsLength()) if graph.Tensors(op.Inputs(j)).Buffer()}
    assert const_buffers == set(holders)


def test_converting_twice_in_process_is_byte_identical(tmp_path, models):
    for name in ("a.tflite", "b.tflite"):
        result = CliRunner().invoke(cli, [str(models / "conv.onnx"), str(tmp_path / name)])
        assert result.exit_code == 0, result.output
    assert (tmp_path / "a.tflite").read_bytes() == (tmp_path / "b.tflite").read_bytes()


# --- --input-shape --------------------------------------------------------------------------------
@pytest.mark.parametrize("io_layout", ["onnx", "nhwc"])
def test_input_shape_pins_a_dynamic_dimension(tmp_path, models, io_layout):
    out = tmp_path / "pinned.tflite"
    result = CliRunner().invoke(cli, [str(models / "dynamic.onnx"), str(out), "--json",
                                      "--input-shape", "x:2,3,8,8", "--io-layout", io_layout])
    assert result.exit_code == 0, result.stderr
    info = json.loads(result.stdout)["inputs"][0]
    perm = info["layout_permutation"] or [0, 1, 2, 3]
    assert io_layout == "nhwc" or info["layout_permutation"] is None
    from ai_edge_litert.interpreter import Interpreter

    detail = Interpreter(model_content=out.read_bytes()).get_input_details()[0]
    assert list(detail["shape"]) == [[2, 3, 8, 8][p] for p in perm]
    model = onnx.load(models / "dynamic.onnx")
    feeds = {"x": np.random.default_rng(4).standard_normal((2, 3, 8, 8)).astype(np.float32)}
    actual = run_tflite(out.read_bytes(), _report(json.loads(result.stdout)), feeds)
    np.testing.assert_allclose(actual["y"], run_onnxruntime(model, feeds)["y"], rtol=1e-4, atol=1e-4)


def test_declared_negative_dimensions_are_dynamic(tmp_path):
    """Paddle's exports declare a dynamic batch as dim_value -1 on the inputs and the outputs."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 3, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, 3, 4])
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(model, tmp_path / "m.onnx")
    out = tmp_path / "m.tflite"
    result = CliRunner().invoke(cli, [str(tmp_path / "m.onnx"), str(out), "--json", "--input-shape", "x:2,3,4"])
    assert result.exit_code == 0, result.stderr
    feeds = {"x": np.random.default_rng(4).standard_normal((2, 3, 4)).astype(np.float32)}
    actual = run_tflite(out.read_bytes(), _report(json.loads(result.stdout)), feeds)
    np.testing.assert_array_equal(actual["y"], np.maximum(feeds["x"], 0))


# --- bad input ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(BAD_CASES))
def test_bad_input_is_one_line_with_exit_code_and_no_output(runs, name):
    proc, case_dir, out = runs[name]
    _args, _stdin, code, fragments = BAD_CASES[name]
    stderr = proc.stderr.decode()
    assert "Traceback" not in stderr, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("qconvert: error:"), lines
    assert proc.returncode == code, stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    assert proc.stdout == b""
    if name in PREEXISTING_OUTPUT:
        assert out.read_bytes() == SENTINEL
        assert sorted(p.name for p in case_dir.iterdir()) == ["out.tflite"]
    else:
        assert list(case_dir.iterdir()) == [], "no output and no leftover temporary file"


def test_internal_error_is_one_line_exit_3_and_debug_shows_it(tmp_path, models, monkeypatch):
    import qconvert.driver.conversion

    def broken(*args, **kwargs):
        raise RuntimeError("simulated bug\nwith a second line")

    monkeypatch.setattr(qconvert.driver.conversion, "convert", broken)
    argv = [str(models / "conv.onnx"), str(tmp_path / "o.tflite")]
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code == 3
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("qconvert: internal error: RuntimeError"), lines
    debug = CliRunner().invoke(cli, argv + ["--debug"])
    assert debug.exit_code == 3  # --debug adds the traceback, the exit code stays
    assert "Traceback" in debug.stderr and "RuntimeError: simulated bug" in debug.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", list(IN_PROCESS_BAD_CASES))
def test_more_bad_input_in_process(tmp_path, models, name):
    args, stdin, code, fragments = IN_PROCESS_BAD_CASES[name]
    out = tmp_path / "out.tflite"
    argv = [a.format(m=models, out=out, dir=tmp_path) for a in args]
    result = CliRunner().invoke(cli, argv, input=stdin)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("qconvert: error:"), lines
    assert result.exit_code == code, lines
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    assert result.stdout == ""
    assert list(tmp_path.iterdir()) == []
