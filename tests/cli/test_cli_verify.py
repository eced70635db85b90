"""`qconvert verify` and the conversion's own verification, through the installed console script:
exit codes (0, 2, 4), one-line messages, no file left behind below --min-sqnr, the JSON keys."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from qconvert.tflite.reader import read
from qconvert.check.float_check import FLOAT_TOLERANCE
from tests import processes
from tests.harness import small_classifier

QCONVERT = str(Path(sys.executable).parent / "qconvert")
KEYS = {"name", "sqnr_db", "worst_slice_sqnr_db", "max_abs_error", "mean_abs_error", "cosine",
        "top1_agreement"}
FLOAT_KEYS = {"scale", "bounded_by", "relative_error", "ulps", "mismatches", "near_ties"}


def qconvert(*args, cwd):
    return processes.run([QCONVERT, *map(str, args)], capture_output=True, text=True, cwd=cwd,
                         cpu_seconds=120)


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
    skipped = qconvert("m.onnx", "q.tflite", "--quantize", "--calibration", "cal.npz", "--no-verify",
                       cwd=files)
    assert skipped.returncode == 0 and "verify" not in skipped.stderr


def test_a_float_conversion_verifies_itself_on_one_sample(files):
    """The float check: every output's largest error over its scale, within FLOAT_TOLERANCE."""
    run = qconvert("m.onnx", "f.tflite", "--json", cwd=files)
    assert run.returncode == 0, run.stderr
    verified = json.loads(run.stdout)["verify"]
    assert (verified["check"], verified["samples"], verified["passed"]) == ("float", 1, True)
    assert verified["tolerance"] == FLOAT_TOLERANCE and verified["data"] == "generated"
    (output,) = verified["outputs"]
    assert KEYS | FLOAT_KEYS <= output.keys()
    assert output["relative_error"] <= FLOAT_TOLERANCE and output["mismatches"] is None
    assert output["ulps"] == pytest.approx(output["relative_error"] / 2 ** -23)
    assert output["scale"] > 0 and output["bounded_by"] is None  # a Gemm: its own magnitude
    (line,) = run.stderr.splitlines()
    assert "; verify: float, worst output 'y' max error " in line and " (1 sample)" in line
    more = qconvert("m.onnx", "f.tflite", "--json", "--verify-samples", "3", cwd=files)
    assert json.loads(more.stdout)["verify"]["samples"] == 3
    data = qconvert("m.onnx", "f.tflite", "--json", "--verify-data", "cal.npz", cwd=files)
    assert json.loads(data.stdout)["verify"]["samples"] == 8  # a data file: its first 8


def test_no_verify_skips_the_float_check(files):
    run = qconvert("m.onnx", "n.tflite", "--json", "--no-verify", cwd=files)
    assert run.returncode == 0 and json.loads(run.stdout)["verify"] is None
    assert "verify" not in run.stderr and (files / "n.tflite").exists()


def test_a_poor_conversion_warns(files):
    """Calibrated on inputs a thousand times smaller than the verification's: int8 saturates."""
    run = qconvert("m.onnx", "q.tflite", "--quantize", "--calibration", "tiny.npz",
                   "--verify-data", "cal.npz", cwd=files)
    assert run.returncode == 0
    warning, summary = run.stderr.splitlines()
    assert warning.startswith("qconvert: warning: y ") and "--report" in warning
    assert summary.startswith("qconvert: m.onnx -> q.tflite")


@pytest.mark.parametrize("args", [["--no-verify", "--min-sqnr", "30"], ["--verify", "--no-verify"],
                                  ["--verify-samples", "3", "--no-verify"],
                                  ["--no-verify", "--verify-data", "cal.npz"],
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
    assert "stayed float: FULLY_CONNECTED (kept float by --keep-float)" in run.stderr


def test_every_float_op_has_its_reason_in_the_summary(files, tmp_path):
    """A softmax classifier under --default-range (issue 31: "stayed float: SOFTMAX" said no why);
    two ops kept by --keep-float share one reason and one group."""
    model = small_classifier(np.random.default_rng(3))
    model.graph.node.append(onnx.helper.make_node("Softmax", ["y"], ["p"], axis=-1, name="softmax"))
    model.graph.output[0].name = "p"
    onnx.save(model, tmp_path / "s.onnx")
    run = qconvert("s.onnx", "s.tflite", "--quantize", "--default-range", "-6,6", "--keep-float",
                   "Relu", "--keep-float", "Gemm", "--json", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    reasons = {f["op"]: f["reason"] for f in json.loads(run.stdout)["quantization"]["float_ops"]}
    assert reasons["SOFTMAX"].startswith("its output is a model output: ")
    summary = run.stderr.splitlines()[-1]
    assert "stayed float: " in summary
    groups = summary.split("stayed float: ")[1].split("; ")
    assert "SOFTMAX (its output is a model output)" in groups, summary
    assert sum("(kept float by --keep-float)" in g for g in groups) == 1, summary


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


# --- the float check ---------------------------------------------------------------------------
def _invoke(*args):
    """The command in this process (CliRunner): a test can then change a converter step."""
    from click.testing import CliRunner

    from qconvert.cli import cli

    return CliRunner().invoke(cli, [str(a) for a in args])


def _corrupting_serialize(monkeypatch):
    """converter.serialize, but one weight of the written model negated first: the largest
    magnitude of the largest float constant. The .tflite then differs from the ONNX model."""
    import qconvert.driver.conversion as converter

    real = converter.serialize

    def corrupting(model, *args, **kwargs):
        weights = max((a for a in model.arrays.values() if a.is_constant and a.dtype.kind == "f"),
                      key=lambda a: a.data.size)
        data = weights.data.copy()
        k = int(np.abs(data).argmax())
        data.flat[k] = -data.flat[k]
        weights.data = data
        return real(model, *args, **kwargs)

    monkeypatch.setattr(converter, "serialize", corrupting)


def test_a_wrong_float_conversion_exits_4_and_writes_nothing(files, monkeypatch):
    _corrupting_serialize(monkeypatch)
    out = files / "wrong.tflite"
    result = _invoke(files / "m.onnx", out, "--json")
    assert result.exit_code == 4, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith("qconvert: error: verify: float conversion does not match onnxruntime: "
                           "output 'y' max error "), line
    assert "of its scale" in line and "above the float tolerance" in line
    assert result.stdout == "" and not out.exists() and not list(files.glob(".qconvert-*"))
    skipped = _invoke(files / "m.onnx", out, "--no-verify")  # the same wrong file, unchecked
    assert skipped.exit_code == 0 and out.exists()
    out.unlink()


def saturated_sigmoid(bias: float) -> onnx.ModelProto:
    """x [1, 16] -> MatMul (small weights) -> Add bias -> Sigmoid: pre-activations about `bias`,
    so every output is about sigmoid(bias) (5e-7 at -14.5), where LiteRT's logistic is accurate
    to a float32 step of 1, not of the value (a text detector's background map)."""
    from onnx import TensorProto, helper

    from tests.harness import make_model

    rng = np.random.default_rng(0)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["p"]),
             helper.make_node("Sigmoid", ["p"], ["s"]),
             helper.make_node("Reshape", ["s", "shape"], ["y"])]  # the range carries through
    inits = {"w": (rng.standard_normal((16, 8)) * 0.02).astype(np.float32),
             "b": np.full(8, bias, np.float32), "shape": np.array([1, 2, 4], np.int64)}
    return make_model(nodes, {"x": (TensorProto.FLOAT, (1, 16))}, {"y": TensorProto.FLOAT}, inits)


@pytest.mark.parametrize("bias", [-14.5, -15.5])
def test_a_saturated_sigmoid_passes_without_a_warning(tmp_path, bias):
    onnx.save(saturated_sigmoid(bias), tmp_path / "s.onnx")
    run = qconvert("s.onnx", "s.tflite", "--json", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert len(run.stderr.splitlines()) == 1 and "warning" not in run.stderr
    (output,) = json.loads(run.stdout)["verify"]["outputs"]
    assert (output["scale"], output["bounded_by"]) == (1.0, "Sigmoid")
    assert output["max_abs_error"] < 2 ** -20 and output["relative_error"] < 2 ** -20
    if bias == -15.5:  # as SQNR, LiteRT's exact logistic looks like a loss
        assert output["sqnr_db"] < 20


def test_the_float_check_runs_one_session_and_reads_no_weights(files, monkeypatch):
    """onnxruntime reads the model file itself, once; qconvert parses the ONNX file once (the
    verification gets the graph the conversion read, without its big weights) and never joins
    the weights into a message (OnnxFile.restore_weights)."""
    import onnxruntime

    import qconvert.driver.conversion as driver

    sessions, reads = [], []
    real_session, real_read = onnxruntime.InferenceSession, driver.read_onnx

    def session(model, *args, **kwargs):
        sessions.append(model)
        return real_session(model, *args, **kwargs)

    def restore_weights(*args, **kwargs):
        raise AssertionError("restore_weights called")

    def read(*args, **kwargs):
        reads.append(args[0])
        return real_read(*args, **kwargs)

    monkeypatch.setattr(onnxruntime, "InferenceSession", session)
    monkeypatch.setattr(driver.OnnxFile, "restore_weights", restore_weights)
    monkeypatch.setattr(driver, "read_onnx", read)
    result = _invoke(files / "m.onnx", files / "one.tflite", "--verify-samples", "3")
    assert result.exit_code == 0, result.stderr
    assert sessions == [str(files / "m.onnx")] and reads == [str(files / "m.onnx")]


def test_a_float_conversion_of_qdq_pairs_is_judged_by_sqnr(tmp_path):
    """A float conversion (--precision float: by default the pairs make it int8) drops the
    rounding of pairs on activations (onnxruntime keeps it): no float check, SQNR as for a
    quantized conversion."""
    from onnx import TensorProto, helper

    from tests.harness import make_model

    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"]),
             helper.make_node("Relu", ["d"], ["y"])]
    model = make_model(nodes, {"x": (TensorProto.FLOAT, (1, 8))}, {"y": TensorProto.FLOAT},
                       {"s": np.float32(0.05), "z": np.int8(0)})
    onnx.save(model, tmp_path / "qdq.onnx")
    run = qconvert("qdq.onnx", "f.tflite", "--json", "--precision", "float", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    verified = json.loads(run.stdout)["verify"]
    assert verified["check"] == "sqnr" and verified["samples"] == 1 and verified["tolerance"] is None
    assert 20 < verified["outputs"][0]["sqnr_db"] < 60  # the rounding, 0.05 steps
    assert "; verify: worst output 'y' " in run.stderr


def test_a_model_onnxruntime_refuses_is_an_error_unless_no_verify(tmp_path):
    """A batchwise LSTM (layout 1) converts, but onnxruntime has no kernel for it: the default
    float check cannot run, which is exit 1 in one line with nothing written (issue 40: a check
    that cannot run is a failure), asked for or not; --no-verify writes it unchecked."""
    from onnx import TensorProto, helper

    from tests.harness import make_model

    rng = np.random.default_rng(0)
    node = helper.make_node("LSTM", ["x", "w", "r"], ["y"], hidden_size=2, layout=1)
    model = make_model([node], {"x": (TensorProto.FLOAT, (1, 3, 4))}, {"y": TensorProto.FLOAT},
                       {"w": rng.standard_normal((1, 8, 4)).astype(np.float32),
                        "r": rng.standard_normal((1, 8, 2)).astype(np.float32)}, opset=14)
    onnx.save(model, tmp_path / "lstm.onnx")
    for flags in ((), ("--verify-samples", "2")):
        run = qconvert("lstm.onnx", "a.tflite", *flags, cwd=tmp_path)
        assert run.returncode == 1 and not (tmp_path / "a.tflite").exists()
        (line,) = run.stderr.splitlines()
        assert line.startswith("qconvert: error: onnxruntime cannot load") and "--no-verify" in line
    unchecked = qconvert("lstm.onnx", "l.tflite", "--no-verify", cwd=tmp_path)
    assert unchecked.returncode == 0 and (tmp_path / "l.tflite").exists()


def test_a_written_file_litert_cannot_load_is_named_as_out_not_as_the_temporary_file(tmp_path, monkeypatch):
    """The conversion's own check loads the written file from a temporary name beside OUT; when
    LiteRT refuses it, the one-line error names OUT (not written), never the temporary file."""
    from click.testing import CliRunner

    import qconvert.driver.conversion
    from qconvert.cli import cli

    source, out = tmp_path / "m.onnx", tmp_path / "m.tflite"
    onnx.save(small_classifier(np.random.default_rng(0)), source)
    monkeypatch.setattr(qconvert.driver.conversion, "serialize", lambda *args, **kwargs: b"\0" * 64)
    result = CliRunner().invoke(cli, [str(source), str(out)])
    assert result.exit_code == 1, result.output
    message = result.stderr.strip()
    assert message.startswith(f"qconvert: error: {out} (not written): LiteRT cannot load it"), message
    assert ".qconvert-" not in message and not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]
