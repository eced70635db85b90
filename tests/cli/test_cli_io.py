"""The command line's files and streams (issue 11): OUT that is IN, special files at IN and OUT,
closed or full stdin/stdout, nothing at OUT unless the exit code is 0, --debug keeping exit codes,
--input-shape beyond int32, and QCONVERT_* environment variables for every option.

Where the real exit path matters (closed file descriptors, /dev/full, a FIFO that could block)
the installed console script runs in a subprocess; the rest uses click's CliRunner.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto

from qconvert.cli import cli, inspect_cli, verify_cli
from tests import processes
from tests.harness import make_model, run_onnxruntime, run_tflite, small_classifier

QCONVERT = str(Path(sys.executable).parent / "qconvert")


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    """m.onnx (a small classifier, x [1,3,8,8] -> y [1,5]), cal.npz (8 samples for it), and
    two.onnx (x, z of shape [N,4] -> Add -> y: two inputs with a dynamic first axis)."""
    root = tmp_path_factory.mktemp("io")
    model = small_classifier(np.random.default_rng(5))
    onnx.save(model, root / "m.onnx")
    x = np.random.default_rng(6).standard_normal((8, 1, 3, 8, 8)).astype(np.float32)
    np.savez(root / "cal.npz", x=x)
    two = make_model([onnx.helper.make_node("Add", ["x", "z"], ["y"])],
                     {"x": (TensorProto.FLOAT, ("N", 4)), "z": (TensorProto.FLOAT, ("N", 4))},
                     {"y": TensorProto.FLOAT})
    onnx.save(two, root / "two.onnx")
    return root


def _work_dir(files: Path, tmp_path: Path) -> Path:
    """tmp_path with a copy of m.onnx: a test may try to overwrite it."""
    (tmp_path / "m.onnx").write_bytes((files / "m.onnx").read_bytes())
    return tmp_path


def _one_error(stderr: str) -> str:
    """The single `qconvert: error:` line of a failed run (no traceback, nothing else)."""
    assert "Traceback" not in stderr, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("qconvert: error:"), lines
    return lines[0]


def _report(data: dict) -> SimpleNamespace:
    return SimpleNamespace(inputs=[SimpleNamespace(**i) for i in data["inputs"]],
                           outputs=[SimpleNamespace(**o) for o in data["outputs"]])


def _assert_runs_like_onnxruntime(tflite: bytes, report: dict, model_path: Path, atol: float) -> None:
    """LiteRT runs `tflite` on the first calibration sample and matches onnxruntime within atol."""
    x = np.load(model_path.parent / "cal.npz")["x"][0]
    expected = run_onnxruntime(onnx.load(model_path), {"x": x})["y"]
    actual = run_tflite(tflite, _report(report), {"x": x})["y"]
    np.testing.assert_allclose(actual, expected, atol=atol)


def _shell(command: str, cwd: Path, **env) -> subprocess.CompletedProcess:
    """`command` in sh (for its redirections: `>&-`, `<&-`, `> /dev/full`), stderr as text; a
    hang (a minute of CPU, or blocked past the load-scaled backstop) fails with processes.Hang."""
    return processes.run(command, shell=True, cwd=cwd, capture_output=True, text=True,
                         cpu_seconds=60, env=dict(os.environ, **env))


# --- OUT that is IN -------------------------------------------------------------------------------
def _same_name(d: Path) -> str:
    return "m.onnx"


def _dot_dot(d: Path) -> str:
    return "./sub/../m.onnx"


def _hard_link(d: Path) -> str:
    os.link(d / "m.onnx", d / "hard.tflite")
    return "hard.tflite"


def _symlink(d: Path) -> str:
    (d / "link.tflite").symlink_to("m.onnx")
    return "link.tflite"


@pytest.mark.parametrize("make_out", [_same_name, _dot_dot, _hard_link, _symlink])
def test_out_that_is_in_is_a_usage_error_and_the_input_stays(files, tmp_path, monkeypatch, make_out):
    d = _work_dir(files, tmp_path)
    monkeypatch.chdir(d)
    before = (d / "m.onnx").read_bytes()
    out = make_out(d)
    result = CliRunner().invoke(cli, ["m.onnx", out])
    line = _one_error(result.stderr)
    assert result.exit_code == 2
    assert f"OUT.tflite '{out}'" in line and "IN.onnx 'm.onnx'" in line, line
    assert (d / "m.onnx").read_bytes() == before


def test_report_that_is_an_input_is_a_usage_error(files, tmp_path, monkeypatch):
    d = _work_dir(files, tmp_path)
    monkeypatch.chdir(d)
    (d / "cal.json").write_bytes(b"calibration notes")
    result = CliRunner().invoke(cli, ["m.onnx", "out.tflite", "--report", "cal.json",
                                      "--verify", "--verify-data", "cal.json"])
    line = _one_error(result.stderr)
    assert result.exit_code == 2 and "--report 'cal.json' is --verify-data 'cal.json'" in line
    assert (d / "cal.json").read_bytes() == b"calibration notes" and not (d / "out.tflite").exists()


# --- nothing at OUT unless exit 0 -----------------------------------------------------------------
def test_json_to_a_full_stdout_is_one_line_and_leaves_no_output(files, tmp_path):
    d = _work_dir(files, tmp_path)
    proc = _shell(f"{QCONVERT} m.onnx out.tflite --json > /dev/full", d)
    assert proc.returncode == 1
    line = _one_error(proc.stderr)
    assert "cannot write standard output: No space left" in line
    assert sorted(p.name for p in d.iterdir()) == ["m.onnx"]


def test_json_failure_removes_the_report_too(files, tmp_path):
    d = _work_dir(files, tmp_path)
    proc = _shell(f"{QCONVERT} m.onnx out.tflite --verify --report r.json --json > /dev/full", d)
    assert proc.returncode == 1 and "standard output" in _one_error(proc.stderr)
    assert sorted(p.name for p in d.iterdir()) == ["m.onnx"]


def test_report_in_a_missing_directory_fails_before_converting(files, tmp_path):
    d = _work_dir(files, tmp_path)
    result = CliRunner().invoke(cli, [str(d / "m.onnx"), str(d / "out.tflite"), "--report",
                                      str(d / "absent" / "r.html")])
    assert result.exit_code == 1 and "does not exist" in _one_error(result.stderr)
    assert sorted(p.name for p in d.iterdir()) == ["m.onnx"]


# --- closed standard streams ----------------------------------------------------------------------
@pytest.mark.parametrize("command, message", [
    ("{q} m.onnx - >&-", "standard output is closed"),
    ("{q} m.onnx out.tflite --json >&-", "standard output is closed"),
    ("{q} - out.tflite <&-", "standard input is closed"),
    ("{q} verify - m.tflite <&-", "standard input is closed"),
])
def test_closed_standard_streams_are_one_line_errors(files, tmp_path, command, message):
    d = _work_dir(files, tmp_path)
    (d / "m.tflite").write_bytes(b"unused: the error comes first")
    proc = _shell(command.format(q=QCONVERT), d)
    assert proc.returncode == 1 and message in _one_error(proc.stderr)
    assert not (d / "out.tflite").exists()


def test_stdin_is_read_up_to_the_model_size_limit(files, tmp_path):
    data = (files / "m.onnx").read_bytes()
    out = tmp_path / "out.tflite"
    result = CliRunner().invoke(cli, ["-", str(out)], input=data,
                                env={"QCONVERT_MAX_MODEL_BYTES": str(len(data) - 1)})
    line = _one_error(result.stderr)
    assert result.exit_code == 1 and "QCONVERT_MAX_MODEL_BYTES" in line and "<stdin>" in line
    assert not out.exists()
    result = CliRunner().invoke(cli, ["-", str(out), "--json"], input=data,
                                env={"QCONVERT_MAX_MODEL_BYTES": str(len(data))})
    assert result.exit_code == 0, result.stderr
    _assert_runs_like_onnxruntime(out.read_bytes(), json.loads(result.stdout), files / "m.onnx", 1e-4)


# --- special files at IN --------------------------------------------------------------------------
def test_a_fifo_as_input_is_refused_without_blocking(files, tmp_path):
    os.mkfifo(tmp_path / "in.onnx")
    for command in (f"{QCONVERT} in.onnx out.tflite", f"{QCONVERT} inspect in.onnx",
                    f"{QCONVERT} verify {files / 'm.onnx'} in.onnx"):
        proc = _shell(command, tmp_path)  # a hang fails with processes.Hang
        assert proc.returncode == 1 and "in.onnx: a FIFO" in _one_error(proc.stderr), command
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.onnx"]


def test_a_device_as_input_is_refused(tmp_path):
    result = CliRunner().invoke(cli, ["/dev/zero", str(tmp_path / "out.tflite")])
    assert result.exit_code == 1 and "/dev/zero: a character device" in _one_error(result.stderr)
    assert list(tmp_path.iterdir()) == []


# --- special files at OUT -------------------------------------------------------------------------
def test_a_symlink_at_out_replaces_its_target_and_stays_a_link(files, tmp_path):
    (tmp_path / "target.tflite").write_bytes(b"old model")
    (tmp_path / "out.tflite").symlink_to("target.tflite")
    (tmp_path / "dangling.tflite").symlink_to("new.tflite")
    for name, target in (("out.tflite", "target.tflite"), ("dangling.tflite", "new.tflite")):
        result = CliRunner().invoke(cli, [str(files / "m.onnx"), str(tmp_path / name), "--json"])
        assert result.exit_code == 0, result.stderr
        assert (tmp_path / name).is_symlink() and os.readlink(tmp_path / name) == target
        _assert_runs_like_onnxruntime((tmp_path / target).read_bytes(), json.loads(result.stdout),
                                      files / "m.onnx", 1e-4)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dangling.tflite", "new.tflite",
                                                          "out.tflite", "target.tflite"]


def test_a_fifo_at_out_is_written_through_to_its_reader(files, tmp_path):
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader before the model is written
    try:
        result = CliRunner().invoke(cli, [str(files / "m.onnx"), str(fifo), "--json"])
        chunks = []
        while chunk := os.read(reader, 1 << 16):  # the model fits in the pipe's buffer
            chunks.append(chunk)
    finally:
        os.close(reader)
    assert result.exit_code == 0, result.stderr
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    file_result = CliRunner().invoke(cli, [str(files / "m.onnx"), str(tmp_path / "file.tflite")])
    assert file_result.exit_code == 0, file_result.stderr
    assert b"".join(chunks) == (tmp_path / "file.tflite").read_bytes()
    _assert_runs_like_onnxruntime(b"".join(chunks), json.loads(result.stdout), files / "m.onnx", 1e-4)


def test_a_fifo_at_out_without_a_reader_is_refused_without_blocking(files, tmp_path):
    os.mkfifo(tmp_path / "out.fifo")
    proc = _shell(f"{QCONVERT} {files / 'm.onnx'} out.fifo", tmp_path)
    assert proc.returncode == 1 and "without a reader" in _one_error(proc.stderr)
    assert stat.S_ISFIFO(os.stat(tmp_path / "out.fifo").st_mode)


def _character_device(path: Path, minor: int) -> Path:
    """A node of the memory devices (major 1: minor 3 null, 7 full) in the test's directory, never
    the system's /dev/null: a regression that replaces OUT with a file must not break the machine."""
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, minor))
    except OSError as e:
        pytest.skip(f"cannot make a device node here: {e.strerror}")
    return path


def test_character_devices_at_out_are_written_through(files, tmp_path):
    null = _character_device(tmp_path / "null", 3)
    full = _character_device(tmp_path / "full", 7)
    result = CliRunner().invoke(cli, [str(files / "m.onnx"), str(null)])
    assert result.exit_code == 0, result.stderr
    result = CliRunner().invoke(cli, [str(files / "m.onnx"), str(full)])
    assert result.exit_code == 1 and "full: cannot write: No space left" in _one_error(result.stderr)
    assert stat.S_ISCHR(os.stat(null).st_mode) and stat.S_ISCHR(os.stat(full).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["full", "null"]


def test_a_terminal_at_out_is_refused(files):
    leader, follower = os.openpty()
    try:
        result = CliRunner().invoke(cli, [str(files / "m.onnx"), os.ttyname(follower)])
    finally:
        os.close(leader)
        os.close(follower)
    assert result.exit_code == 1 and "to a terminal" in _one_error(result.stderr)


def test_a_socket_at_out_is_refused(files, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a short relative name: socket paths are limited to 108 bytes
    with socket.socket(socket.AF_UNIX) as s:
        s.bind("out.sock")
        result = CliRunner().invoke(cli, [str(files / "m.onnx"), "out.sock"])
        assert result.exit_code == 1 and "out.sock: a socket" in _one_error(result.stderr)
        assert stat.S_ISSOCK(os.stat("out.sock").st_mode)


# --- --debug and --input-shape ------------------------------------------------------------------
@pytest.mark.parametrize("argv, code", [
    (["{d}/absent.onnx", "{d}/out.tflite"], 1),
    (["{d}/m.onnx", "{d}/m.onnx"], 2),
    (["{d}/m.onnx", "{d}/out.tflite", "--quantize", "--calibration", "{f}/cal.npz",
      "--min-sqnr", "300"], 4),
])
def test_debug_keeps_the_exit_code_and_a_users_error_on_one_line(files, tmp_path, argv, code):
    """(An internal error's traceback under --debug: tests/cli/test_cli.py.)"""
    d = _work_dir(files, tmp_path)
    result = CliRunner().invoke(cli, [a.format(d=d, f=files) for a in argv] + ["--debug"])
    assert result.exit_code == code, result.stderr
    assert "Traceback" not in result.stderr  # (--debug's log lines come before the error line)
    assert result.stderr.splitlines()[-1].startswith("qconvert: error:")
    assert not (d / "out.tflite").exists()


@pytest.mark.parametrize("value", ["x:1,3,8,2147483648", "x:1,3,8,99999999999999999999999",
                                   "x:1," + "9" * 5000])
def test_input_shape_beyond_int32_is_a_usage_error(files, tmp_path, value):
    result = CliRunner().invoke(cli, [str(files / "m.onnx"), str(tmp_path / "o.tflite"),
                                      "--input-shape", value])
    line = _one_error(result.stderr)
    assert result.exit_code == 2 and "--input-shape" in line and "2147483647" in line
    assert list(tmp_path.iterdir()) == []


# --- QCONVERT_* environment variables -----------------------------------------------------------
def test_environment_variables_give_options(files, tmp_path):
    out = tmp_path / "int8.tflite"
    result = CliRunner().invoke(cli, [str(files / "m.onnx"), str(out)], env={
        "QCONVERT_QUANTIZE": "1", "QCONVERT_CALIBRATION": str(files / "cal.npz"),
        "QCONVERT_CALIBRATION_SAMPLES": "4", "QCONVERT_JSON": "true"})
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["quantization"]["calibration_samples"] == 4 and report["quantization"]["int8_ops"] > 0
    _assert_runs_like_onnxruntime(out.read_bytes(), report, files / "m.onnx", 0.1)


def test_a_repeatable_option_takes_space_separated_values_and_flags_win(files, tmp_path):
    out = tmp_path / "two.tflite"
    env = {"QCONVERT_INPUT_SHAPE": "x:3,4 z:3,4", "QCONVERT_IO_LAYOUT": "bogus", "QCONVERT_JSON": "1"}
    result = CliRunner().invoke(cli, [str(files / "two.onnx"), str(out), "--io-layout", "onnx"], env=env)
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert [i["shape"] for i in report["inputs"]] == [[3, 4], [3, 4]]
    feeds = {n: np.random.default_rng(k).standard_normal((3, 4)).astype(np.float32)
             for k, n in enumerate("xz")}
    actual = run_tflite(out.read_bytes(), _report(report), feeds)["y"]
    np.testing.assert_allclose(actual, feeds["x"] + feeds["z"], rtol=1e-6)


@pytest.mark.parametrize("env, fragment", [
    ({"QCONVERT_CALIBRATION_SAMPLES": "0"}, "--calibration-samples"),
    ({"QCONVERT_CALIBRATION": "cal.npz"}, "--calibration only applies with --quantize"),
    ({"QCONVERT_QUANTIZE": "maybe"}, "--quantize"),
])
def test_usage_errors_name_the_variables_used(files, tmp_path, env, fragment):
    result = CliRunner().invoke(cli, [str(files / "m.onnx"), str(tmp_path / "o.tflite")], env=env)
    line = _one_error(result.stderr)
    assert result.exit_code == 2 and fragment in line
    assert f"set in the environment: {next(iter(env))}" in line
    assert list(tmp_path.iterdir()) == []


def test_subcommands_read_their_own_prefix(files, tmp_path):
    out = tmp_path / "m.tflite"
    assert CliRunner().invoke(cli, [str(files / "m.onnx"), str(out)]).exit_code == 0
    verify = CliRunner().invoke(verify_cli, [str(files / "m.onnx"), str(out)],
                                env={"QCONVERT_VERIFY_SAMPLES": "2", "QCONVERT_VERIFY_JSON": "1"})
    assert verify.exit_code == 0, verify.stderr
    results = json.loads(verify.stdout)  # LiteRT ran the written file against onnxruntime
    assert results["samples"] == 2 and results["passed"] and results["outputs"][0]["sqnr_db"] > 60
    inspect = CliRunner().invoke(inspect_cli, [str(out)], env={"QCONVERT_INSPECT_JSON": "yes"})
    assert inspect.exit_code == 0 and json.loads(inspect.stdout)["size"] == out.stat().st_size


def test_help_names_the_variables():
    for command, names in ((cli, ["QCONVERT_INPUT_SHAPE", "QCONVERT_QUANTIZE", "QCONVERT_JSON"]),
                           (verify_cli, ["QCONVERT_VERIFY_DATA", "QCONVERT_VERIFY_MIN_SQNR"]),
                           (inspect_cli, ["QCONVERT_INSPECT_JSON"])):
        text = " ".join(CliRunner().invoke(command, ["--help"], terminal_width=200).stdout.split())
        for name in names:
            assert name in text, name
