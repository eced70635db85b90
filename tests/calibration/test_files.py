"""Calibration and verification data from a folder of images or of .wav files
(qconvert/calibration/files.py): the samples equal a reference computed here from Pillow's own
resize and the integers written to the .wav files, laid out as the input (NCHW or NHWC), and a
folder converts to the same bytes as an .npz of those arrays; the real command line quantizes
with them, LiteRT runs the result, and every refusal is one line naming the file."""

from __future__ import annotations

import io
import json
import sys
import wave
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper
from PIL import Image

from qconvert.calibration.data import load_calibration, model_input_specs
from qconvert.calibration.files import FileDecoding
from qconvert.cli import cli, fakequant_cli, verify_cli
from qconvert.errors import ConversionError, UsageError
from tests.harness import run_onnxruntime, run_tflite

H, W = 12, 16  # the image models' height and width
N = 64  # the audio model's samples
RATE = 16000
# The images written, in the order the folder's sorted names give ("B" sorts before "a").
IMAGES = ["B.JPG", "a.png", "c.bmp", "d.webp", "e.png"]
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def _model(inputs: dict, nodes: list, weights: dict, output_shape) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, (t, s) in inputs.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, output_shape)],
        [numpy_helper.from_array(a, n) for n, a in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _conv_model(shape, channels_first: bool = True, dtype=TensorProto.FLOAT) -> onnx.ModelProto:
    """x `shape` (NCHW, or NHWC through a Transpose; a uint8 input through a Cast) -> Conv 3x3."""
    channels = shape[1] if channels_first else shape[3]
    weight = np.random.default_rng(1).standard_normal((4, channels, 3, 3)).astype(np.float32)
    nodes, name = [], "x"
    if dtype != TensorProto.FLOAT:
        nodes.append(helper.make_node("Cast", [name], ["xf"], to=TensorProto.FLOAT))
        name = "xf"
    if not channels_first:
        nodes.append(helper.make_node("Transpose", [name], ["t"], perm=[0, 3, 1, 2]))
        name = "t"
    nodes.append(helper.make_node("Conv", [name, "w"], ["y"], pads=[1, 1, 1, 1]))
    return _model({"x": (dtype, shape)}, nodes, {"w": weight}, None)


def _audio_model() -> onnx.ModelProto:
    weight = np.random.default_rng(2).standard_normal((N, 8)).astype(np.float32)
    return _model({"x": (TensorProto.FLOAT, [1, N])}, [helper.make_node("MatMul", ["x", "w"], ["y"])],
                  {"w": weight}, [1, 8])


def _write_images(folder: Path) -> None:
    """Five images of several sizes and formats, and files the folder's reading ignores."""
    folder.mkdir()
    rng = np.random.default_rng(0)
    pixels = lambda h, w, c=3: rng.integers(0, 256, (h, w, c), dtype=np.uint8)  # noqa: E731
    Image.fromarray(pixels(40, 25)).save(folder / "B.JPG", "JPEG", quality=90)
    Image.fromarray(pixels(20, 30)).save(folder / "a.png")
    Image.fromarray(pixels(H, W)).save(folder / "c.bmp")
    Image.fromarray(pixels(7, 9)).save(folder / "d.webp", "WEBP", lossless=True)
    Image.fromarray(pixels(15, 15, 4), "RGBA").save(folder / "e.png")
    (folder / ".hidden.png").write_bytes(b"not an image")
    (folder / "notes.txt").write_text("ignored")


def _write_wav(path: Path, ints: np.ndarray, width: int, channels: int = 1, rate: int = RATE) -> None:
    """`ints` ([frames] or [frames, channels]) as `width`-byte PCM; 8-bit is stored unsigned."""
    if width == 1:
        data = (ints.astype(np.int32) + 128).astype(np.uint8).tobytes()
    elif width == 3:
        data = ints.astype("<i4").reshape(-1, 1).view(np.uint8)[:, :3].tobytes()
    else:
        data = ints.astype(f"<i{width}").tobytes()
    with wave.open(str(path), "wb") as f:
        f.setnchannels(channels)
        f.setsampwidth(width)
        f.setframerate(rate)
        f.writeframes(data)


# Each .wav file: (name, sample width, channels, frames); their expected samples in _wav_reference.
WAVS = [("a16.wav", 2, 1, 100), ("b8.wav", 1, 1, 40), ("c24.wav", 3, 2, N), ("d32.wav", 4, 1, 70)]


def _wav_ints(width: int, channels: int, frames: int, seed: int) -> np.ndarray:
    high = 2 ** (8 * width - 1)
    return np.random.default_rng(seed).integers(-high, high, (frames, channels), dtype=np.int64)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("files")
    _write_images(root / "images")
    (root / "wavs").mkdir()
    for seed, (name, width, channels, frames) in enumerate(WAVS):
        _write_wav(root / "wavs" / name, _wav_ints(width, channels, frames, seed), width, channels)
    onnx.save(_conv_model([1, 3, H, W]), root / "nchw.onnx")
    onnx.save(_conv_model([1, H, W, 3], channels_first=False), root / "nhwc.onnx")
    onnx.save(_audio_model(), root / "audio.onnx")
    return root


def _image_reference(folder: Path, mode: str, mean=None, std=None, channels_first=True,
                     names=IMAGES) -> np.ndarray:
    """[files, 1, ...] float32: each image of `names` resized by Pillow here, normalized by hand."""
    samples = []
    for name in names:
        with Image.open(folder / name) as image:
            resized = image.convert(mode).resize((W, H), Image.BILINEAR)
        x = np.asarray(resized, dtype=np.float32).reshape(H, W, -1) / np.float32(255)
        if mean is not None:
            x = (x - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)
        samples.append((x.transpose(2, 0, 1) if channels_first else x)[None])
    return np.stack(samples)


def _wav_reference() -> np.ndarray:
    """[files, 1, N]: each file's integers over 2^(bits-1) in float64, channels averaged, cut or
    zero-padded to N."""
    out = np.zeros((len(WAVS), 1, N))
    for seed, (_, width, channels, frames) in enumerate(WAVS):
        values = _wav_ints(width, channels, frames, seed).mean(axis=1) / 2 ** (8 * width - 1)
        out[seed, 0, :min(frames, N)] = values[:N]
    return out


def _samples(path: Path, model: onnx.ModelProto, **decoding) -> np.ndarray:
    data = load_calibration(str(path), model_input_specs(model), None, FileDecoding(**decoding))
    return np.stack([sample["x"] for sample in data])


def _invoke(command, *args):
    """The command run in-process, as tests/cli does: exit code, stdout and stderr apart."""
    return CliRunner().invoke(command, [str(a) for a in args])


def _report(data: dict) -> SimpleNamespace:
    return SimpleNamespace(inputs=[SimpleNamespace(**i) for i in data["inputs"]],
                           outputs=[SimpleNamespace(**o) for o in data["outputs"]])


def _one_line_error(result, code: int, *words: str) -> str:
    assert result.exit_code == code, (result.exit_code, result.stderr)
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("qconvert: error:"), result.stderr
    assert "Traceback" not in result.stderr
    for word in words:
        assert word in result.stderr, (word, result.stderr)
    return result.stderr


# --- the samples ---------------------------------------------------------------------------------

@pytest.mark.parametrize("channels_first", [True, False], ids=["nchw", "nhwc"])
def test_image_samples_equal_pillows_resize_normalized_by_hand(files, channels_first):
    model = onnx.load(files / ("nchw.onnx" if channels_first else "nhwc.onnx"))
    plain = _samples(files / "images", model)
    assert plain.shape == (5, 1, 3, H, W) if channels_first else (5, 1, H, W, 3)
    assert np.array_equal(plain, _image_reference(files / "images", "RGB", channels_first=channels_first))
    normalized = _samples(files / "images", model, mean=MEAN, std=STD)
    assert np.array_equal(normalized, _image_reference(files / "images", "RGB", MEAN, STD, channels_first))
    one_value = _samples(files / "images", model, mean=(0.5,), std=(0.25,))
    assert np.array_equal(one_value, (plain - np.float32(0.5)) / np.float32(0.25))


def test_grayscale_and_integer_inputs(files, tmp_path):
    gray = _samples(files / "images", _conv_model([1, 1, H, W]), mean=(0.5,), std=(0.5,))
    assert np.array_equal(gray, _image_reference(files / "images", "L", (0.5,), (0.5,)))
    uint8 = _conv_model([1, H, W, 3], channels_first=False, dtype=TensorProto.UINT8)
    pixels = _samples(files / "images", uint8)
    assert pixels.dtype == np.uint8
    assert np.array_equal(pixels, np.round(_image_reference(files / "images", "RGB", channels_first=False) * 255))
    with pytest.raises(UsageError, match="--mean and --std normalize images for a float input"):
        _samples(files / "images", uint8, mean=(0.5,))
    with pytest.raises(ConversionError, match="int8, which cannot hold pixel values"):
        _samples(files / "images", _conv_model([1, 3, H, W], dtype=TensorProto.INT8))


def test_layout_rule_and_shapes(files):
    # [1,3,4,3]: dimension 1 is 3, so NCHW (3 channels of 4x3 pixels).
    square = _model({"x": (TensorProto.FLOAT, [1, 3, 4, 3])}, [helper.make_node("Relu", ["x"], ["y"])],
                    {}, None)
    assert _samples(files / "images", square).shape == (5, 1, 3, 4, 3)
    dynamic = _conv_model([1, 3, "h", "w"])
    with pytest.raises(ConversionError, match=r"dynamic height or width, and the images have "
                                              r"several sizes \(.*B.JPG is 25x40, .*a.png 30x20\).*--input-shape x:1,3,H,W"):
        _samples(files / "images", dynamic)
    assert _samples(files / "images", dynamic, shapes={"x": (1, 3, 6, 5)}).shape == (5, 1, 3, 6, 5)
    with pytest.raises(ConversionError, match=r"not an image input .*give its data as an .npz"):
        _samples(files / "images", _audio_model())
    with pytest.raises(UsageError, match="--std has 2 values; input 'x' has 3 channels"):
        _samples(files / "images", onnx.load(files / "nchw.onnx"), std=(0.5, 0.5))


def test_a_dynamic_height_and_width_take_the_images_one_size(tmp_path):
    """Images all of one size feed a [1, 3, h, w] input at that size (the model is converted at
    it, its height and width still resizable), as an .npz's samples do; nothing is resized."""
    folder = tmp_path / "same"
    folder.mkdir()
    rng = np.random.default_rng(1)
    pixels = rng.integers(0, 256, (3, 20, 30, 3), dtype=np.uint8)
    for k in range(3):
        Image.fromarray(pixels[k]).save(folder / f"{k}.png")
    samples = _samples(folder, _conv_model([1, 3, "h", "w"]))
    assert samples.shape == (3, 1, 3, 20, 30)
    assert np.array_equal(samples[:, 0], pixels.transpose(0, 3, 1, 2).astype(np.float32) / np.float32(255))
    assert _samples(folder, _conv_model([1, 3, 10, "w"])).shape == (3, 1, 3, 10, 30)
    path, out = tmp_path / "dynamic.onnx", tmp_path / "dynamic.tflite"
    model = _conv_model([1, 3, "h", "w"])
    onnx.save(model, path)
    result = _invoke(cli, path, out, "--quantize", "--calibration", folder, "--io-layout", "onnx",
                     "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["inputs"][0]["shape"] == [1, 3, 20, 30]  # written at the images' size
    for size in ((20, 30), (12, 40)):  # and resizable
        x = rng.random((1, 3, *size), dtype=np.float32)
        expected = run_onnxruntime(model, {"x": x})["y"]
        actual = run_tflite(out.read_bytes(), _report(report), {"x": x})["y"]
        assert actual.shape == expected.shape
        error = np.sqrt(np.mean((actual - expected) ** 2) / np.mean(expected ** 2))
        assert error < 0.05, error  # int8 rounding only


def test_wav_samples_cut_padded_and_channels_averaged(files):
    samples = _samples(files / "wavs", onnx.load(files / "audio.onnx"))
    assert samples.shape == (4, 1, N) and samples.dtype == np.float32
    np.testing.assert_allclose(samples, _wav_reference(), rtol=1e-6, atol=1e-9)
    assert not samples[1, 0, 40:].any()  # 40 frames zero-padded to N


def test_wav_mean_and_std_scale_the_samples(files, tmp_path):
    audio = onnx.load(files / "audio.onnx")
    scaled = _samples(files / "wavs", audio, mean=(0.25,), std=(0.5,))
    np.testing.assert_allclose(scaled, (_wav_reference() - 0.25) / 0.5, rtol=1e-6, atol=1e-8)
    # --std 1/32768: int16-valued floats (openWakeWord's melspectrogram takes them); calibrated on
    # them, the int8 model computes a16.wav's int16 values (without --std, they would saturate).
    out = tmp_path / "a.tflite"
    result = _invoke(cli, files / "audio.onnx", out, "--quantize", "--calibration", files / "wavs",
                     "--std", "3.0517578125e-05", "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["quantization"]["calibration_source"] == {
        "kind": "wav", "files": 4, "mean": [0.0], "std": [3.0517578125e-05], "mean_std_given": True}
    x = (_wav_reference()[0] * 32768).astype(np.float32)
    assert np.array_equal(x, _wav_ints(2, 1, 100, 0)[:N, 0].reshape(1, N))
    expected = run_onnxruntime(audio, {"x": x})["y"]
    actual = run_tflite(out.read_bytes(), _report(report), {"x": x})["y"]
    assert np.abs(actual - expected).max() < 0.05 * np.abs(expected).max()


def test_class_subfolders_are_read_in_path_order(files, tmp_path):
    photos = tmp_path / "photos"
    # {path under photos: the image of files/images it copies}; sorted folder name by folder name.
    layout = {"a.png": "a.png", "cat/B.JPG": "B.JPG", "cat/e.png": "e.png", "cat-d.webp": "d.webp",
              "dog/sub/c.bmp": "c.bmp"}
    for path, name in layout.items():
        (photos / path).parent.mkdir(parents=True, exist_ok=True)
        (photos / path).write_bytes((files / "images" / name).read_bytes())
    for ignored in (".cache/x.png", "dog/.y.png"):  # hidden: never opened
        (photos / ignored).parent.mkdir(exist_ok=True)
        (photos / ignored).write_bytes(b"not an image")
    (photos / "dog" / "notes.txt").write_text("ignored")
    model = onnx.load(files / "nchw.onnx")
    assert np.array_equal(_samples(photos, model),
                          _image_reference(files / "images", "RGB", names=list(layout.values())))
    result = _invoke(cli, files / "nchw.onnx", tmp_path / "m.tflite", "--quantize", "--calibration",
                     photos, "--mean", "0.5", "--std", "0.25", "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["quantization"]["calibration_samples"] == 5 and report["verify"]["passed"]
    # Arrays are read from the folder itself only; hidden folders are skipped.
    for folder, file in (("arrays", "sub/x.npy"), ("hidden", ".cache/a.png")):
        (tmp_path / folder / file).parent.mkdir(parents=True)
        (tmp_path / folder / file).write_bytes((photos / "a.png").read_bytes())
        _one_line_error(_convert(files, tmp_path, "nchw.onnx", tmp_path / folder), 1,
                        "holds no .npz or .npy files, and neither it nor its subfolders hold images")


def test_a_damaged_image_is_refused_when_the_data_is_loaded(files, tmp_path):
    folder = tmp_path / "photos"
    folder.mkdir()
    for name in ("a.png", "c.bmp"):
        (folder / name).write_bytes((files / "images" / name).read_bytes())
    jpeg = (files / "images" / "B.JPG").read_bytes()
    (folder / "z.jpg").write_bytes(jpeg[:len(jpeg) // 2])  # its header opens; its pixels are cut
    with pytest.raises(ConversionError, match="image file is truncated"):
        load_calibration(str(folder), model_input_specs(onnx.load(files / "nchw.onnx")))
    _one_line_error(_convert(files, tmp_path, "nchw.onnx", folder), 1,
                    f"cannot decode {folder / 'z.jpg'} (image file is truncated",
                    "): the file is damaged or not an image; re-save or remove it")


def test_summary_and_json_say_what_the_samples_were_read_from(files, tmp_path):
    np.savez(tmp_path / "cal.npz", x=_image_reference(files / "images", "RGB"))

    def convert(data, *flags):
        result = _invoke(cli, files / "nchw.onnx", tmp_path / "m.tflite", "--quantize",
                         "--calibration", data, "--json", *flags)
        assert result.exit_code == 0, result.stderr
        return result.stderr, json.loads(result.stdout)

    images = {"kind": "images", "files": 5, "mean": [0.0], "std": [1.0], "mean_std_given": False}
    summary, report = convert(files / "images")
    assert "s; calibration: 5 images as [0, 1] (no --mean/--std); int8: " in summary
    assert report["quantization"]["calibration_source"] == images
    assert report["verify"]["data_source"] == images and "verify data:" not in summary
    summary, report = convert(files / "images", "--mean", "0.5")
    assert "calibration:" not in summary
    assert report["quantization"]["calibration_source"] == {**images, "mean": [0.5], "mean_std_given": True}
    # Arrays: nothing on the summary line; the verification's images, without --mean/--std, are.
    summary, report = convert(tmp_path / "cal.npz", "--verify-data", files / "images")
    assert "calibration:" not in summary
    assert "; verify data: 5 images as [0, 1] (no --mean/--std); verify: " in summary
    assert report["quantization"]["calibration_source"] == {
        "kind": "arrays", "files": 1, "mean": None, "std": None, "mean_std_given": False}
    assert report["verify"]["data_source"] == images
    summary, report = convert(tmp_path / "cal.npz", "--verify-data", files / "images", "--mean", "0")
    assert "verify data:" not in summary and report["verify"]["data_source"]["mean_std_given"]


def test_progress_line_only_on_a_terminal(files, monkeypatch):
    class Tty(io.StringIO):
        def isatty(self):
            return True
    tty = Tty()
    monkeypatch.setattr(sys, "stderr", tty)
    load_calibration(str(files / "wavs"), model_input_specs(_audio_model()), progress=True)
    assert tty.getvalue().endswith("\rreading calibration files: 4/4\n")
    pipe = io.StringIO()
    monkeypatch.setattr(sys, "stderr", pipe)
    load_calibration(str(files / "wavs"), model_input_specs(_audio_model()), progress=True)
    assert pipe.getvalue() == ""


# --- the command line ----------------------------------------------------------------------------

def test_quantize_with_an_image_folder_runs_in_litert_and_verifies(files, tmp_path):
    out = tmp_path / "m.tflite"
    result = _invoke(cli, files / "nchw.onnx", out, "--quantize", "--calibration", files / "images",
                     "--mean", ",".join(map(str, MEAN)), "--std", ",".join(map(str, STD)), "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["quantization"]["calibration_samples"] == 5
    assert report["verify"]["passed"] and report["verify"]["samples"] == 5
    assert report["verify"]["outputs"][0]["sqnr_db"] > 25
    x = _image_reference(files / "images", "RGB", MEAN, STD)[0]
    expected = run_onnxruntime(onnx.load(files / "nchw.onnx"), {"x": x})["y"]
    actual = run_tflite(out.read_bytes(), _report(report), {"x": x})["y"]
    assert np.abs(actual - expected).max() < 0.05 * np.abs(expected).max()


def test_a_folder_and_an_npz_of_its_samples_give_the_same_bytes(files, tmp_path):
    np.savez(tmp_path / "same.npz", x=_image_reference(files / "images", "RGB", MEAN, STD, False))
    normalize = ("--mean", ",".join(map(str, MEAN)), "--std", ",".join(map(str, STD)))
    written = []
    for data, flags in ((files / "images", normalize), (tmp_path / "same.npz", ())):
        out = tmp_path / f"{len(written)}.tflite"
        result = _invoke(cli, files / "nhwc.onnx", out, "--quantize", "--calibration", data,
                         *flags, "--no-verify")
        assert result.exit_code == 0, result.stderr
        written.append(out.read_bytes())
    assert written[0] == written[1]


def test_quantize_with_a_wav_folder(files, tmp_path):
    result = _invoke(cli, files / "audio.onnx", tmp_path / "a.tflite", "--quantize", "--calibration",
                     files / "wavs", "--sample-rate", RATE, "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["verify"]["passed"] and report["quantization"]["calibration_samples"] == 4


def test_calibration_samples_reads_only_the_first_files(files, tmp_path):
    folder = tmp_path / "images"
    folder.mkdir()
    for name in IMAGES[:3]:
        (folder / name).write_bytes((files / "images" / name).read_bytes())
    (folder / "z.png").write_bytes(b"\x89PNG garbage")  # sorted last: never read
    # The plan and the verification read their own counts of the data: neither here.
    result = _invoke(cli, files / "nchw.onnx", tmp_path / "m.tflite", "--quantize", "--calibration",
                     folder, "--calibration-samples", 2, "--precision", "int8", "--no-verify", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["quantization"]["calibration_samples"] == 2
    _one_line_error(_invoke(cli, files / "nchw.onnx", tmp_path / "n.tflite", "--quantize",
                            "--calibration", folder), 1, f"cannot decode {folder / 'z.png'}")
    assert not (tmp_path / "n.tflite").exists()


def test_verify_data_and_verify_command_take_a_folder(files, tmp_path):
    np.savez(tmp_path / "cal.npz", x=_image_reference(files / "images", "RGB", channels_first=False))
    out = tmp_path / "m.tflite"
    result = _invoke(cli, files / "nhwc.onnx", out, "--quantize", "--calibration", tmp_path / "cal.npz",
                     "--verify-data", files / "images", "--verify-samples", 3, "--json")
    assert result.exit_code == 0, result.stderr
    verification = json.loads(result.stdout)["verify"]
    assert verification["data"] == str(files / "images") and verification["samples"] == 3
    result = _invoke(verify_cli, files / "nhwc.onnx", out, "--data", files / "images", "--mean", "0",
                     "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["samples"] == 5
    assert "as [0, 1]" not in result.stderr  # --mean given: the user chose
    result = _invoke(verify_cli, files / "nhwc.onnx", out, "--data", files / "images")
    assert result.exit_code == 0, result.stderr
    assert result.stderr.startswith("qconvert: data: 5 images as [0, 1] (no --mean/--std); verify: ")
    _one_line_error(_invoke(verify_cli, files / "nhwc.onnx", out, "--mean", "0.5"), 2,
                    "--mean applies to a folder of images or .wav files given by --data")


def test_fakequant_takes_an_image_folder(files, tmp_path):
    result = _invoke(fakequant_cli, files / "nchw.onnx", tmp_path / "fq.onnx", "--calibration",
                     files / "images", "--mean", "0.5", "--std", "0.25")
    assert result.exit_code == 0, result.stderr
    assert any(n.op_type == "QuantizeLinear" for n in onnx.load(tmp_path / "fq.onnx").graph.node)


# --- refusals, one line each ---------------------------------------------------------------------

def _convert(files, tmp_path, model: str, data, *flags):
    return _invoke(cli, files / model, tmp_path / "out.tflite", "--quantize", "--calibration", data, *flags)


def test_sample_rate_mismatch_names_the_file_and_both_rates(files, tmp_path):
    folder = tmp_path / "wavs"
    folder.mkdir()
    _write_wav(folder / "a.wav", _wav_ints(2, 1, N, 0), 2)
    _write_wav(folder / "b.wav", _wav_ints(2, 1, N, 1), 2, rate=8000)
    _one_line_error(_convert(files, tmp_path, "audio.onnx", folder, "--sample-rate", RATE), 1,
                    "b.wav", "8000 Hz", "16000 Hz")
    # Without --sample-rate, files of two rates: the first file's and the first other one's.
    _write_wav(folder / "c.wav", _wav_ints(2, 1, N, 2), 2, rate=11025)
    _one_line_error(_convert(files, tmp_path, "audio.onnx", folder), 1,
                    f"{folder / 'a.wav'} is sampled at 16000 Hz, {folder / 'b.wav'} at 8000 Hz; "
                    "resample them, or pass --sample-rate to say which rate the model takes")
    assert not (tmp_path / "out.tflite").exists()


def test_a_model_with_two_inputs_needs_an_npz(files, tmp_path):
    model = _model({"a": (TensorProto.FLOAT, [1, 3, H, W]), "b": (TensorProto.FLOAT, [1, 3, H, W])},
                   [helper.make_node("Add", ["a", "b"], ["y"])], {}, None)
    onnx.save(model, tmp_path / "two.onnx")
    _one_line_error(_invoke(cli, tmp_path / "two.onnx", tmp_path / "out.tflite", "--quantize",
                            "--calibration", files / "images"), 1, "2 (a, b)", ".npz")


def test_undecodable_mixed_and_empty_folders(files, tmp_path):
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "x.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    _one_line_error(_convert(files, tmp_path, "nchw.onnx", tmp_path / "bad"), 1,
                    f"cannot decode {tmp_path / 'bad' / 'x.png'} (cannot identify image file): the "
                    "file is damaged or not an image; re-save or remove it")
    (tmp_path / "mixed").mkdir()
    (tmp_path / "mixed" / "a.png").write_bytes((files / "images" / "a.png").read_bytes())
    np.save(tmp_path / "mixed" / "x.npy", np.zeros((1, 1, 3, H, W), np.float32))
    _one_line_error(_convert(files, tmp_path, "nchw.onnx", tmp_path / "mixed"), 1,
                    ".npz/.npy arrays (x.npy...) and images (a.png...)", "one kind")
    (tmp_path / "sounds").mkdir()
    (tmp_path / "sounds" / "a.png").write_bytes((files / "images" / "a.png").read_bytes())
    _write_wav(tmp_path / "sounds" / "b.wav", _wav_ints(2, 1, N, 0), 2)
    _one_line_error(_convert(files, tmp_path, "nchw.onnx", tmp_path / "sounds"), 1, "images", ".wav files")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("")
    _one_line_error(_convert(files, tmp_path, "nchw.onnx", tmp_path / "empty"), 1,
                    "neither it nor its subfolders hold images (.png .jpg .jpeg .bmp .webp) or .wav")


def test_usage_errors(files, tmp_path):
    _one_line_error(_convert(files, tmp_path, "nchw.onnx", files / "images", "--mean", "0.1,0.2"), 2,
                    "--mean has 2 values; input 'x' has 3 channels")
    _one_line_error(_convert(files, tmp_path, "nchw.onnx", files / "images", "--std", "0"), 2,
                    "--std", "each above 0")
    _one_line_error(_invoke(cli, files / "nchw.onnx", tmp_path / "o.tflite", "--mean", "0.5"), 2,
                    "--mean applies to a folder")


def test_flags_the_data_would_not_use_are_usage_errors(files, tmp_path):
    npz = tmp_path / "cal.npz"
    np.savez(npz, x=_image_reference(files / "images", "RGB"))
    (tmp_path / "arrays").mkdir()
    np.save(tmp_path / "arrays" / "x.npy", _image_reference(files / "images", "RGB"))
    for data, flag in ((npz, "--mean"), (tmp_path / "arrays", "--std")):
        _one_line_error(_convert(files, tmp_path, "nchw.onnx", data, flag, "0.5"), 2,
                        f"{flag} applies to a folder of images or .wav files; '{data}' holds arrays: "
                        "normalize them before saving")
    _one_line_error(_invoke(verify_cli, files / "nchw.onnx", tmp_path / "m.tflite", "--data", npz,
                            "--mean", "0.5"), 2, f"'{npz}' holds arrays")
    for data, held in ((files / "images", "images"), (npz, "arrays")):
        _one_line_error(_convert(files, tmp_path, "nchw.onnx", data, "--sample-rate", RATE), 2,
                        f"--sample-rate applies to a folder of .wav files; '{data}' holds {held}")
    _one_line_error(_convert(files, tmp_path, "audio.onnx", files / "wavs", "--mean", "0,0"), 2,
                    "--mean has 2 values; a folder of .wav files takes one")
    assert not (tmp_path / "out.tflite").exists()


def test_decompression_bomb_is_one_line(files, tmp_path, monkeypatch):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 200)  # the images hold 63 to 1000 pixels
    _one_line_error(_convert(files, tmp_path, "nchw.onnx", files / "images"), 1,
                    "B.JPG", "decompression bombs")
