"""A check that cannot run is a failure, not a warning (issue 40 item 6, onnx/can_run.py), and a
check that proves nothing says so.

Through the installed command: an --input-shape contradicting a static dimension is exit 2 up
front naming the input and both shapes; onnxruntime failing on the check's inputs (a file checked
against a model it does not belong to) is exit 1 in one line that keeps onnxruntime's axes and
sizes; a reference that is NaN or Inf fails naming the output; a path with a byte that is not
UTF-8 converts and verifies; an output whose reference is constant on the first generated sample
draws more, one constant on every sample is said in the summary. Every written file runs in
LiteRT against onnxruntime.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from qconvert.onnx.can_run import onnxruntime_message
from tests import processes
from tests.check.litert_files import assert_file_matches_onnxruntime

QCONVERT = str(Path(sys.executable).parent / "qconvert")


def qconvert(*args, cwd):
    return processes.run([QCONVERT, *map(os.fsdecode, args)], capture_output=True, text=True,
                         cwd=cwd, cpu_seconds=120)


def _model(nodes, inputs: dict, inits: dict, output="y") -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _conv(size: int) -> onnx.ModelProto:
    """A 3x3 convolution of a static [1, 3, size, size] input 'image'."""
    weights = np.random.default_rng(0).standard_normal((4, 3, 3, 3))
    return _model([helper.make_node("Conv", ["image", "w"], ["y"], pads=[1, 1, 1, 1])],
                  {"image": [1, 3, size, size]}, {"w": weights})


def _image(size: int) -> dict[str, np.ndarray]:
    return {"image": np.random.default_rng(1).standard_normal((1, 3, size, size)).astype(np.float32)}


def test_an_input_shape_against_a_static_dimension_is_refused_up_front(tmp_path):
    """--input-shape image:1,3,64,64 on a static [1,3,32,32] input: exit 2 naming the input, the
    static and the asked shapes, nothing written (it was written unverified at exit 0 with a
    cut warning); --no-verify converts at the asked shape, which runs in LiteRT as onnxruntime
    runs the model declared at 64."""
    onnx.save(_conv(32), tmp_path / "m.onnx")
    onnx.save(_conv(64), tmp_path / "m64.onnx")
    run = qconvert("m.onnx", "a.tflite", "--input-shape", "image:1,3,64,64", cwd=tmp_path)
    assert run.returncode == 2 and not (tmp_path / "a.tflite").exists()
    (line,) = run.stderr.splitlines()
    assert line.startswith("qconvert: error: --input-shape image:1,3,64,64 contradicts"), line
    assert "static shape [1,3,32,32] of input 'image' (axis 2)" in line and "--no-verify" in line
    unchecked = qconvert("m.onnx", "u.tflite", "--input-shape", "image:1,3,64,64", "--no-verify",
                         "--io-layout", "onnx", cwd=tmp_path)
    assert unchecked.returncode == 0, unchecked.stderr
    assert_file_matches_onnxruntime(tmp_path / "m64.onnx", tmp_path / "u.tflite", _image(64), rtol=1e-4)


def test_verify_of_files_that_do_not_belong_together_keeps_onnxruntimes_reason(tmp_path):
    """`qconvert verify` of the 32x32 model against a (channels-last) file converted at 64:
    exit 1, one line with onnxruntime's axes and sizes (its first line stopped at 'for the
    following indices') and the shape the input was given. A file in the ONNX layout is told
    apart before onnxruntime runs: its shape does not fit the model's."""
    onnx.save(_conv(32), tmp_path / "m.onnx")
    onnx.save(_conv(64), tmp_path / "m64.onnx")
    assert qconvert("m64.onnx", "b.tflite", cwd=tmp_path).returncode == 0
    assert qconvert("m64.onnx", "o.tflite", "--io-layout", "onnx", cwd=tmp_path).returncode == 0
    assert_file_matches_onnxruntime(tmp_path / "m64.onnx", tmp_path / "b.tflite", _image(64),
                                    rtol=1e-4, channels_last=True)
    assert_file_matches_onnxruntime(tmp_path / "m64.onnx", tmp_path / "o.tflite", _image(64), rtol=1e-4)
    lines = {}
    for name in ("b.tflite", "o.tflite"):
        run = qconvert("verify", "m.onnx", name, cwd=tmp_path)
        assert run.returncode == 1 and run.stdout == ""
        (lines[name],) = run.stderr.splitlines()
    assert lines["b.tflite"] == (
        "qconvert: error: onnxruntime cannot run the model on sample 0: Got invalid dimensions "
        "for input: image: axis 2 is 64, the model's 32; axis 3 is 64, the model's 32 (input "
        "'image' given shape [1, 3, 64, 64])"), lines["b.tflite"]
    assert lines["o.tflite"] == ("qconvert: error: input 'image': the .tflite's shape [1, 3, 64, 64] "
                                 "does not fit the ONNX shape [1, 3, 32, 32]")


def test_onnxruntimes_message_is_kept_whole_on_one_line():
    """onnxruntime's own exceptions (a rank, a type), its prefix and 'Please fix' tail dropped."""
    session = ort.InferenceSession(_conv(8).SerializeToString(), providers=["CPUExecutionProvider"])
    said = {}
    for what, value in (("rank", np.zeros((1, 3, 8), np.float32)), ("type", np.zeros((1, 3, 8, 8)))):
        try:
            session.run(None, {"image": value})
        except Exception as e:  # onnxruntime's own exception types
            said[what] = onnxruntime_message(e)
    assert said["rank"] == "Invalid rank for input: image Got: 3 Expected: 4"
    assert said["type"].startswith("Unexpected input data type. Actual: (tensor(double))")
    assert all("\n" not in m and "ONNXRuntimeError" not in m for m in said.values())


def test_a_reference_that_is_not_finite_fails_naming_the_output(tmp_path):
    """y = exp(100 x): onnxruntime overflows to Inf on generated inputs, a check that would say
    'inf dB' whatever the .tflite computes. Exit 1 in one line naming 'y', nothing written;
    --no-verify writes it, and LiteRT overflows where onnxruntime does."""
    model = _model([helper.make_node("Mul", ["x", "k"], ["m"]), helper.make_node("Exp", ["m"], ["y"])],
                   {"x": [1, 64]}, {"k": 100.0})
    onnx.save(model, tmp_path / "exp.onnx")
    run = qconvert("exp.onnx", "e.tflite", cwd=tmp_path)
    assert run.returncode == 1 and not (tmp_path / "e.tflite").exists()
    (line,) = run.stderr.splitlines()
    assert line.startswith("qconvert: error: output 'y': onnxruntime's values are not finite"), line
    assert "are Inf" in line and "--no-verify" in line
    assert qconvert("exp.onnx", "u.tflite", "--no-verify", cwd=tmp_path).returncode == 0
    x = {"x": np.linspace(-2, 2, 64, dtype=np.float32)[None]}
    assert_file_matches_onnxruntime(tmp_path / "exp.onnx", tmp_path / "u.tflite", x, rtol=1e-5)


def test_a_path_that_is_not_utf8_converts_and_verifies(tmp_path):
    """A model and an output named with bytes 0xff and 0xfe: onnxruntime and LiteRT take only
    UTF-8 paths, so the check reads them itself. Exit 0, verified; the file runs in LiteRT."""
    onnx.save(_conv(8), tmp_path / "m.onnx")
    source, out = os.fsdecode(b"m\xff.onnx"), os.fsdecode(b"o\xfe.tflite")
    (tmp_path / "m.onnx").rename(tmp_path / source)
    run = qconvert(source, out, "--io-layout", "onnx", cwd=tmp_path)
    assert run.returncode == 0 and "; verify: float, " in run.stderr, run.stderr
    checked = qconvert("verify", source, out, cwd=tmp_path)
    assert checked.returncode == 0 and "verify: " in checked.stderr, checked.stderr
    onnx.save(_conv(8), tmp_path / "plain.onnx")
    assert_file_matches_onnxruntime(tmp_path / "plain.onnx", tmp_path / out, _image(8), rtol=1e-4)


def _relu_of_negative() -> onnx.ModelProto:
    """y = relu(x @ [[-1, -2]]) of x [1, 1]: zero on the first generated sample (x > 0 there)."""
    return _model([helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])],
                  {"x": [1, 1]}, {"w": [[-1.0, -2.0]]})


def test_a_reference_constant_on_the_first_sample_draws_more(tmp_path):
    """The MatMul+Relu whose one sample gives zeros ('max error 0 of its scale 0'): more seeded
    samples are drawn until the output varies, the summary counting them; the same command
    twice gives the same line (seeded). The file runs in LiteRT against onnxruntime."""
    onnx.save(_relu_of_negative(), tmp_path / "r.onnx")
    first = np.random.default_rng(0).standard_normal((1, 1))
    assert first[0, 0] > 0  # the first generated sample (runtimes.generated_samples, seed 0)
    runs = [qconvert("r.onnx", "r.tflite", "--io-layout", "onnx", cwd=tmp_path) for _ in range(2)]
    assert all(r.returncode == 0 for r in runs)
    (line,) = runs[0].stderr.splitlines()
    assert "; verify: float, " in line and "(1 sample)" not in line and "constant" not in line, line
    timed = re.compile(r", [0-9.]+ s;")  # the summary's seconds aside, the same line twice
    assert "of its scale 0 " not in line and timed.sub("", runs[0].stderr) == timed.sub("", runs[1].stderr)
    for x in (1.5, -1.5):
        assert_file_matches_onnxruntime(tmp_path / "r.onnx", tmp_path / "r.tflite",
                                        {"x": np.array([[x]], np.float32)})


def test_an_output_constant_on_every_sample_is_said(tmp_path):
    """y = relu(x * 0): constant whatever the input, so 8 samples are drawn and the summary says
    the check proved little there; --json lists it. Not a failure: exit 0."""
    model = _model([helper.make_node("Mul", ["x", "z"], ["m"]), helper.make_node("Relu", ["m"], ["y"])],
                   {"x": [1, 4]}, {"z": np.zeros((1, 4))})
    onnx.save(model, tmp_path / "z.onnx")
    run = qconvert("z.onnx", "z.tflite", "--io-layout", "onnx", cwd=tmp_path)
    assert run.returncode == 0
    assert "(8 samples; 'y' constant on every sample: checked little there)" in run.stderr, run.stderr
    assert_file_matches_onnxruntime(tmp_path / "z.onnx", tmp_path / "z.tflite",
                                    {"x": np.arange(4, dtype=np.float32)[None] - 2})


def test_nan_both_runtimes_compute_agrees_but_a_reference_nan_everywhere_fails(tmp_path):
    """y = sqrt(x - s): with s = 0 about half the generated values are NaN in onnxruntime and in
    the .tflite (an undefined value both compute agrees: exit 0, the rest compared); with s = 100
    every value is NaN, which compares nothing: exit 1 naming 'y', nothing written. Both files
    (the second with --no-verify) run in LiteRT as onnxruntime, NaN where it is NaN."""
    x = {"x": np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32)}
    for shift, verified in ((0.0, True), (100.0, False)):
        model = _model([helper.make_node("Sub", ["x", "s"], ["m"]), helper.make_node("Sqrt", ["m"], ["y"])],
                       {"x": [1, 64]}, {"s": shift})
        onnx.save(model, tmp_path / "sqrt.onnx")
        run = qconvert("sqrt.onnx", "s.tflite", cwd=tmp_path)
        assert (run.returncode == 0) == verified and (tmp_path / "s.tflite").exists() == verified
        (line,) = run.stderr.splitlines()
        if verified:
            assert "; verify: float, worst output 'y'" in line, line
        else:
            assert line.startswith("qconvert: error: output 'y': onnxruntime's values are not finite "
                                   "on the check's inputs (64 of 64 are NaN)"), line
            assert qconvert("sqrt.onnx", "s.tflite", "--no-verify", cwd=tmp_path).returncode == 0
        assert_file_matches_onnxruntime(tmp_path / "sqrt.onnx", tmp_path / "s.tflite", x)
        (tmp_path / "s.tflite").unlink()
