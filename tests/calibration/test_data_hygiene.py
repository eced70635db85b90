"""Calibration data hygiene (issue 40 item 5, qconvert/calibration/files.py and data.py).

Deep images are scaled by their own depth: a 16-bit grayscale PNG (Pillow's I;16) is v / 65535,
not clipped at 255 (the issue's folder was 98 % white); 48-bit RGB PNGs, which Pillow reads at
their high byte, are not clipped either. Every sample is finite: --std or --mean that overflow
float32 are exit 2 before any file is decoded, naming the folder and the flag, with no numpy
warning; NaN or Inf in an .npz for --calibration or --verify-data is exit 1 naming the file and
the sample; NaN the model itself computes on the calibration data is one warning line, however
many tensors it reaches. Each written file runs in LiteRT against onnxruntime.
"""

from __future__ import annotations

import os
import struct
import sys
import zlib
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from PIL import Image

from qconvert.calibration.data import load_calibration, model_input_specs
from qconvert.calibration.files import FileDecoding
from tests import processes
from tests.check.litert_files import assert_file_matches_onnxruntime

QCONVERT = str(Path(sys.executable).parent / "qconvert")
H, W = 6, 8


def qconvert(*args, cwd):
    return processes.run([QCONVERT, *map(str, args)], capture_output=True, text=True, cwd=cwd,
                         cpu_seconds=120)


def _png16(path: Path, values: np.ndarray, color: int) -> None:
    """A 16-bit PNG written byte by byte (Pillow writes no 48-bit RGB): `values` uint16 [H, W, C],
    `color` 0 (gray) or 2 (RGB)."""
    height, width = values.shape[:2]
    raw = b"".join(b"\0" + values[y].astype(">u2").tobytes() for y in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    header = struct.pack(">IIBBBBB", width, height, 16, color, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw))
                     + chunk(b"IEND", b""))


def _conv(channels: int, dtype=TensorProto.FLOAT) -> onnx.ModelProto:
    """x [1, channels, H, W] (uint8 through a Cast) -> Conv 3x3 to 2 channels."""
    weight = np.random.default_rng(1).standard_normal((2, channels, 3, 3)).astype(np.float32)
    nodes, name = [], "x"
    if dtype != TensorProto.FLOAT:
        nodes, name = [helper.make_node("Cast", ["x"], ["xf"], to=TensorProto.FLOAT)], "xf"
    nodes.append(helper.make_node("Conv", [name, "w"], ["y"], pads=[1, 1, 1, 1]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", dtype, [1, channels, H, W])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(weight, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _gray16(folder: Path, count: int = 4) -> list[np.ndarray]:
    """`count` 16-bit grayscale PNGs of H x W (no resize), most pixels above 255; their values."""
    folder.mkdir()
    rng = np.random.default_rng(0)
    values = [rng.integers(0, 65536, (H, W, 1), dtype=np.uint16) for _ in range(count)]
    for k, v in enumerate(values):
        _png16(folder / f"{k}.png", v, 0)
    return values


def _samples(model: onnx.ModelProto, folder: Path, **decoding) -> np.ndarray:
    data = load_calibration(str(folder), model_input_specs(model), decoding=FileDecoding(**decoding))
    return np.stack([sample["x"] for sample in data])


def test_a_16_bit_grayscale_png_is_scaled_by_65535(tmp_path):
    """Pillow opens them as I;16; a float input takes v / 65535 (one channel, or it repeated for
    three), --mean and --std after; a uint8 input v / 257 rounded. An 8-bit conversion gave 255
    for every value above 255."""
    values = _gray16(tmp_path / "gray")
    assert Image.open(tmp_path / "gray" / "0.png").mode == "I;16"
    unit = np.stack([v.transpose(2, 0, 1)[None].astype(np.float64) / 65535 for v in values])
    np.testing.assert_allclose(_samples(_conv(1), tmp_path / "gray"), unit, rtol=0, atol=1e-7)
    np.testing.assert_allclose(_samples(_conv(3), tmp_path / "gray"), np.repeat(unit, 3, axis=2),
                               rtol=0, atol=1e-7)
    normalized = _samples(_conv(1), tmp_path / "gray", mean=(0.5,), std=(0.25,))
    np.testing.assert_allclose(normalized, (unit - 0.5) / 0.25, rtol=0, atol=1e-6)
    as_uint8 = _samples(_conv(1, TensorProto.UINT8), tmp_path / "gray")
    assert as_uint8.dtype == np.uint8
    np.testing.assert_array_equal(as_uint8, np.round(unit * 65535 / 257).astype(np.uint8))
    assert np.mean(as_uint8 == 255) < 0.05  # not the 98 % white


def test_a_48_bit_rgb_png_is_not_clipped(tmp_path):
    """Pillow reads a 48-bit RGB PNG at each value's high byte: v / 65535 to within 1/255, never
    the 255 that clipping gives."""
    folder = tmp_path / "rgb"
    folder.mkdir()
    values = np.random.default_rng(2).integers(0, 65536, (H, W, 3), dtype=np.uint16)
    _png16(folder / "0.png", values, 2)
    got = _samples(_conv(3), folder)[0, 0]
    np.testing.assert_allclose(got, values.transpose(2, 0, 1) / 65535, rtol=0, atol=1 / 255)


def test_a_folder_of_16_bit_images_quantizes_and_runs_in_litert(tmp_path):
    """The issue's case through the command line: exit 0, and the int8 file in LiteRT is within
    a few steps of onnxruntime on those images (clipped calibration ranges would saturate)."""
    values = _gray16(tmp_path / "gray")
    onnx.save(_conv(1), tmp_path / "m.onnx")
    run = qconvert("m.onnx", "q.tflite", "--quantize", "--calibration", "gray", "--io-layout", "onnx",
                   cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    (line,) = run.stderr.splitlines()
    assert "calibration: 4 images as [0, 1]" in line and "verify: " in line
    feeds = {"x": (values[0].transpose(2, 0, 1)[None] / np.float32(65535)).astype(np.float32)}
    scale = float(np.abs(onnx_output(tmp_path / "m.onnx", feeds)).max())
    assert_file_matches_onnxruntime(tmp_path / "m.onnx", tmp_path / "q.tflite", feeds, rtol=0,
                                    atol=0.05 * scale)


def onnx_output(path: Path, feeds: dict) -> np.ndarray:
    from tests.harness import run_onnxruntime

    return run_onnxruntime(onnx.load(str(path)), feeds)["y"]


@pytest.mark.parametrize("flag,value", [("--std", "1e-40"), ("--mean", "1e39"), ("--std", "1e-39")])
def test_flags_that_overflow_float32_are_one_usage_line(tmp_path, flag, value):
    """--std 1e-40 takes pixels to 1e40, --mean 1e39 is no float32: exit 2 in one line naming the
    folder and the flag, before any file is decoded: no numpy warning, no 'NaN values,
    skipped' lines, nothing written (it was exit 0 claiming 'inf dB')."""
    _gray16(tmp_path / "gray")
    onnx.save(_conv(1), tmp_path / "m.onnx")
    run = qconvert("m.onnx", "q.tflite", "--quantize", "--calibration", "gray", flag, value, cwd=tmp_path)
    assert run.returncode == 2 and not (tmp_path / "q.tflite").exists()
    (line,) = run.stderr.splitlines()
    assert line.startswith(f"qconvert: error: gray: {flag} ") and "beyond float32's range" in line, line


def test_audio_flags_that_overflow_are_the_same_line(tmp_path):
    """A folder of .wav files with --std 1e-40: the same one line, exit 2."""
    import wave

    folder = tmp_path / "wavs"
    folder.mkdir()
    with wave.open(str(folder / "a.wav"), "wb") as f:
        f.setnchannels(1), f.setsampwidth(2), f.setframerate(16000)
        f.writeframes(np.arange(-32, 32, dtype="<i2").tobytes())
    weight = np.random.default_rng(0).standard_normal((64, 2)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(weight, "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8),
              tmp_path / "a.onnx")
    run = qconvert("a.onnx", "q.tflite", "--quantize", "--calibration", "wavs", "--std", "1e-40",
                   cwd=tmp_path)
    assert run.returncode == 2 and not (tmp_path / "q.tflite").exists()
    (line,) = run.stderr.splitlines()
    assert "wavs: --std 1e-40 takes input 'x''s samples in [-1, 1]" in line, line


def test_a_mean_whose_samples_overflow_the_model_is_one_line(tmp_path):
    """--mean 1e38 keeps the pixels finite (-1e38) but the convolution overflows: one line naming
    the output whose reference is not finite, exit 1, no numpy warning, nothing written."""
    _gray16(tmp_path / "gray")
    onnx.save(_conv(1), tmp_path / "m.onnx")
    run = qconvert("m.onnx", "q.tflite", "--quantize", "--calibration", "gray", "--mean", "1e38",
                   cwd=tmp_path)
    assert run.returncode == 1 and not (tmp_path / "q.tflite").exists()
    (line,) = [ln for ln in run.stderr.splitlines() if "error" in ln]
    assert line.startswith("qconvert: error: output 'y': onnxruntime's values are not finite"), line
    assert "Warning" not in run.stderr and len(run.stderr.splitlines()) <= 2, run.stderr


@pytest.mark.parametrize("flag", ["--calibration", "--verify-data"])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_arrays_are_refused_the_same_way(tmp_path, flag, bad):
    """NaN or Inf in an .npz, for calibration or for the check: exit 1 naming the file and the
    sample, nothing written."""
    onnx.save(_conv(1), tmp_path / "m.onnx")
    data = np.random.default_rng(0).random((3, 1, 1, H, W)).astype(np.float32)
    data[2, 0, 0, 1, 1] = bad
    np.savez(tmp_path / "d.npz", x=data)
    extra = ["--quantize"] if flag == "--calibration" else []
    run = qconvert("m.onnx", "q.tflite", *extra, flag, "d.npz", cwd=tmp_path)
    assert run.returncode == 1 and not (tmp_path / "q.tflite").exists()
    (line,) = run.stderr.splitlines()
    what = "NaN" if np.isnan(bad) else "Inf"
    assert f"d.npz: input 'x': sample 2 contains {what}; calibration data must be finite" in line, line


def test_nan_the_model_computes_is_one_warning_line(tmp_path):
    """Sqrt of each of 3 outputs of a convolution computes NaN on negative values in calibration:
    one warning line naming the first tensor and counting the others (one line each before);
    --no-verify, since the check's reference would be NaN. The file runs in LiteRT on inputs
    where the model is defined."""
    weight = np.abs(np.random.default_rng(1).standard_normal((2, 1, 3, 3))).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Sub", ["c", "half"], ["s"])]
    nodes += [helper.make_node("Sqrt", ["s"], [f"r{k}"]) for k in range(3)]
    nodes += [helper.make_node("Sum", ["r0", "r1", "r2"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, H, W])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(weight, "w"),
                               numpy_helper.from_array(np.array(0.5, np.float32), "half")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8),
              tmp_path / "m.onnx")
    np.savez(tmp_path / "c.npz", x=np.random.default_rng(0).random((4, 1, 1, H, W)).astype(np.float32))
    run = qconvert("m.onnx", "q.tflite", "--quantize", "--calibration", "c.npz", "--no-verify",
                   "--io-layout", "onnx", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    nan_lines = [ln for ln in run.stderr.splitlines() if "NaN" in ln]
    assert len(nan_lines) == 1 and "the model computes NaN on the calibration data" in nan_lines[0]
    assert "more tensor" in nan_lines[0], nan_lines
    feeds = {"x": np.full((1, 1, H, W), 0.9, np.float32)}
    scale = float(np.abs(onnx_output(tmp_path / "m.onnx", feeds)).max())
    assert_file_matches_onnxruntime(tmp_path / "m.onnx", tmp_path / "q.tflite", feeds, rtol=0,
                                    atol=0.1 * scale)
