"""Hostile calibration files: each ends in exit 1 with one line naming the file (and the member)
and what is wrong, no traceback and nothing at the output path; none is inflated or allocated
beyond the limits of qconvert/errors.py (checked from the array headers first)."""

from __future__ import annotations

import io
import os
import struct
import zipfile

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

from qconvert.cli import cli
from tests.harness import small_classifier

SAMPLE = (1, 3, 8, 8)  # the model input's shape


def _header(shape, descr="<f4") -> bytes:
    out = io.BytesIO()
    np.lib.format.write_array_header_1_0(out, {"descr": descr, "fortran_order": False, "shape": shape})
    return out.getvalue()


def _member(path, name: str, payload: bytes, compression=zipfile.ZIP_STORED) -> None:
    with zipfile.ZipFile(path, "w", compression=compression) as zf:
        zf.writestr(name, payload)


def _samples(n: int = 4) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((n,) + SAMPLE).astype(np.float32)


def _corrupt_deflate(path) -> None:
    """A compressed archive whose deflate stream is broken in the middle of the data."""
    np.savez_compressed(path, x=_samples(64))
    data = bytearray(path.read_bytes())
    start = 30 + len("x.npy") + 200  # past the local header and the start of the stream
    data[start:start + 64] = bytes(range(64))
    path.write_bytes(bytes(data))


def _encrypted(path) -> None:
    """An archive whose member has the zip 'encrypted' flag set (local and central headers)."""
    np.savez(path, x=_samples())
    data = bytearray(path.read_bytes())
    for signature, flag_at in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        at = data.find(signature)
        flags = struct.unpack_from("<H", data, at + flag_at)[0]
        struct.pack_into("<H", data, at + flag_at, flags | 1)
    path.write_bytes(bytes(data))


def _huge_header(compression):
    def write(path):
        _member(path, "x.npy", _header((2**40,) + SAMPLE) + _samples().tobytes(), compression)
    return write


def _negative_shape(path) -> None:
    _member(path, "x.npy", _header((4,) + SAMPLE).replace(b"(4,", b"(-4,") + _samples().tobytes())


def _short_npy(path) -> None:
    """A directory whose x.npy declares 1,000 samples but holds 4."""
    path.mkdir()
    (path / "x.npy").write_bytes(_header((1000,) + SAMPLE) + _samples().tobytes())


def _pickled(path) -> None:
    array = np.empty((4,) + SAMPLE, dtype=object)
    array[...] = 1.0
    np.savez(path, x=array)


def _saved(**arrays):
    def write(path):
        np.savez(path, **arrays)
    return write


def _with(value):
    data = _samples()
    data[2, 0, 1, 2, 3] = value
    return _saved(x=data)


def _empty_file(path) -> None:
    path.write_bytes(b"")


def _empty_dir(path) -> None:
    path.mkdir()


def _empty_npy_in_dir(path) -> None:
    path.mkdir()
    (path / "x.npy").write_bytes(b"")


def _truncated(path) -> None:
    np.savez(path, x=_samples())
    path.write_bytes(path.read_bytes()[:700])


CASES = {
    # name: (writer, message fragments)
    "corrupt deflate stream": (_corrupt_deflate, ["'x'", "cannot be read"]),
    "encrypted member": (_encrypted, ["'x'", "encrypted"]),
    "header claims 2^40 samples (stored)": (_huge_header(zipfile.ZIP_STORED),
                                            ["'x'", "1099511627776", "member holds"]),
    "header claims 2^40 samples (deflated)": (_huge_header(zipfile.ZIP_DEFLATED),
                                              ["'x'", "1099511627776", "member holds"]),
    "negative shape": (_negative_shape, ["'x'", "cannot be read"]),
    ".npy header lying about its size": (_short_npy, ["x.npy", "not a readable .npy"]),
    "pickled object array": (_pickled, ["'x'", "Python objects"]),
    "complex dtype": (_saved(x=_samples().astype(np.complex64)), ["'x'", "complex64"]),
    "bool dtype": (_saved(x=_samples() > 0), ["'x'", "bool", "normalize"]),
    "string dtype": (_saved(x=np.full((4,) + SAMPLE, "a")), ["'x'", "<U1"]),
    "NaN sample": (_with(np.nan), ["'x'", "sample 2", "NaN"]),
    "Inf sample": (_with(-np.inf), ["'x'", "sample 2", "Inf"]),
    "empty file": (_empty_file, ["not an .npz archive"]),
    "empty directory": (_empty_dir, ["no .npz or .npy files"]),
    "empty .npy in a directory": (_empty_npy_in_dir, ["x.npy", "not a readable .npy"]),
    "truncated archive": (_truncated, ["cal"]),
    "no samples": (_saved(x=np.zeros((0,) + SAMPLE, np.float32)), ["no calibration samples"]),
}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("calib-files") / "m.onnx"
    onnx.save(small_classifier(np.random.default_rng(3)), path)
    return path


def _convert(model, tmp_path, calibration, *flags, env=None):
    out = tmp_path / "out.tflite"
    before = model.read_bytes()
    result = CliRunner().invoke(cli, [str(model), str(out), "--quantize", "--calibration",
                                      str(calibration), *flags], env=env)
    assert model.read_bytes() == before
    return result, out


def _assert_refused(result, out, fragments, code=1):
    assert result.exit_code == code, (result.exit_code, result.stderr, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("qconvert: error:"), result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    assert not out.exists()


@pytest.mark.parametrize("case", list(CASES))
def test_hostile_calibration_file_is_one_line_exit_1(model, tmp_path, case):
    write, fragments = CASES[case]
    calibration = tmp_path / ("cal" if "directory" in case or ".npy" in case else "cal.npz")
    write(calibration)
    result, out = _convert(model, tmp_path, calibration)
    _assert_refused(result, out, [str(calibration)] + fragments)


@pytest.fixture(scope="module")
def zip_bomb(tmp_path_factory):
    """A ~4 MB .npz whose one member inflates to 1 GiB: 1,398,101 samples of zeros."""
    path = tmp_path_factory.mktemp("bomb") / "bomb.npz"
    count = (1 << 30) // (4 * int(np.prod(SAMPLE)))
    chunk = bytes(64 << 20)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        with zf.open("x.npy", "w", force_zip64=True) as f:
            f.write(_header((count,) + SAMPLE))
            left = count * 4 * int(np.prod(SAMPLE))
            while left:
                f.write(chunk[:min(left, len(chunk))])
                left -= min(left, len(chunk))
    assert os.path.getsize(path) < 8 << 20
    return path


def test_zip_bomb_is_refused_by_the_sample_limit(model, tmp_path, zip_bomb):
    result, out = _convert(model, tmp_path, zip_bomb)
    _assert_refused(result, out, [str(zip_bomb), "1,398,101 calibration samples", "100,000",
                                  "QCONVERT_MAX_CALIBRATION_SAMPLES"])


def test_zip_bomb_is_refused_by_the_byte_limit_before_inflating(model, tmp_path, zip_bomb):
    """With few samples asked for, the bytes the member would inflate to still count."""
    result, out = _convert(model, tmp_path, zip_bomb, "--calibration-samples", "10",
                           env={"QCONVERT_MAX_CALIBRATION_BYTES": "100_000_000"})
    _assert_refused(result, out, [str(zip_bomb), "1,073,741,","100,000,000",
                                  "QCONVERT_MAX_CALIBRATION_BYTES"])


def test_raised_limits_let_a_large_file_through(model, tmp_path):
    """The limits stop at their variables' values, not before: 12 samples with a limit of 12
    convert, and the written model runs in LiteRT."""
    from tests.quantize.test_quantization_sanity import assert_runs_in_litert

    calibration = tmp_path / "cal.npz"
    np.savez_compressed(calibration, x=_samples(12))
    nbytes = 12 * 4 * int(np.prod(SAMPLE))
    env = {"QCONVERT_MAX_CALIBRATION_SAMPLES": "12", "QCONVERT_MAX_CALIBRATION_BYTES": str(nbytes)}
    result, out = _convert(model, tmp_path, calibration, "--no-verify", env=env)
    assert result.exit_code == 0, result.stderr
    assert_runs_in_litert(out)
    out.unlink()
    env["QCONVERT_MAX_CALIBRATION_SAMPLES"] = "11"
    result, out = _convert(model, tmp_path, calibration, "--no-verify", env=env)
    _assert_refused(result, out, ["12 calibration samples exceed the limit of 11"])
    env["QCONVERT_MAX_CALIBRATION_SAMPLES"], env["QCONVERT_MAX_CALIBRATION_BYTES"] = "12", str(nbytes - 1)
    result, out = _convert(model, tmp_path, calibration, "--no-verify", env=env)
    _assert_refused(result, out, [f"{nbytes:,} bytes of calibration data exceed"])


def test_a_scalar_input_keeps_its_rank(tmp_path):
    """A rank-0 input (Silero VAD's sample rate) is an .npz array of shape [N]: each sample is a
    scalar, which LiteRT must be given as one (not as [1]), in calibration and verification."""
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Mul", ["x", "s"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 4)),
                               helper.make_tensor_value_info("s", TensorProto.FLOAT, ())],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), model)
    calibration = tmp_path / "d.npz"
    np.savez(calibration, x=np.random.default_rng(0).standard_normal((3, 1, 4)).astype(np.float32),
             s=np.array([1.0, 2.0, 3.0], np.float32))
    result, out = _convert(model, tmp_path, calibration)
    assert result.exit_code == 0 and out.exists(), result.stderr
    plain = CliRunner().invoke(cli, [str(model), str(tmp_path / "f.tflite"), "--verify-data", str(calibration)])
    assert plain.exit_code == 0 and "(3 samples)" in plain.stderr, plain.stderr
