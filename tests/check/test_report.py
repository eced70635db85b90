"""The per-tensor report (qconvert/check/report.py): counterparts by name, the op a test breaks on
purpose ranked first, --keep-float on it raising the output's SQNR, and the HTML page rendered in
headless Chromium."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

import qconvert.calibration.calibrate as calibrate
from tests import processes
from tests.harness import convert
from qconvert.ir import MinMax
from qconvert.check.report import build_report, write_report
from qconvert.ir import CHANNELS_LAST, counterpart
from qconvert.transforms.pipeline import QuantizeOptions
from qconvert.check.verify import verify
from tests.harness import small_classifier

TENSOR_KEYS = {"name", "sqnr_db", "dtype", "scale", "zero_point", "range_source"}
OP_KEYS = {"type", "node", "amplification_db", "precision"}


def test_counterparts_by_name():
    names = {"x", "conv", "y"}
    assert counterpart("conv", names, {}) == ("conv", None)
    assert counterpart("conv_nhwc", names, {}) == ("conv", CHANNELS_LAST)
    assert counterpart("conv_nhwc_int8", names, {}) == ("conv", CHANNELS_LAST)
    assert counterpart("y_int8", names, {"y": (0, 2, 1)}) == ("y", (0, 2, 1))
    assert counterpart("conv_nhwc_3", names, {}) is None and counterpart("t_sq", names, {}) is None


def classifier():
    """Conv -> Relu -> GlobalAveragePool -> Flatten -> Gemm (node "gemm", output "logits")."""
    return small_classifier(np.random.default_rng(4), channels=6, output="logits")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    samples = np.random.default_rng(6).standard_normal((12, 1, 3, 8, 8)).astype(np.float32)
    np.savez(root / "cal.npz", x=samples)
    return root, [{"x": s} for s in samples[:6]]


def quantized(model, root, name: str, keep_float=()) -> str:
    flatbuffer, _ = convert("<test>", data=model.SerializeToString(), quantize=QuantizeOptions(),
                            calibration=str(root / "cal.npz"), keep_float=keep_float)
    path = root / name
    path.write_bytes(bytes(flatbuffer))
    return str(path)


@pytest.fixture
def pathological_logits(monkeypatch):
    """Calibration gives the logits a range a thousand times too wide: the FULLY_CONNECTED's int8
    output rounds every logit to a multiple of ~8."""
    calibrate_model = calibrate.calibrate_model

    def widened(model, *args, **kwargs):
        count = calibrate_model(model, *args, **kwargs)
        model.arrays["logits"].minmax = MinMax(-1000.0, 1000.0, "calibration")
        return count

    monkeypatch.setattr(calibrate, "calibrate_model", widened)


def test_the_broken_op_ranks_first_and_keeping_it_float_repairs(data, pathological_logits):
    root, samples = data
    model = classifier()
    broken = quantized(model, root, "broken.tflite")
    report = build_report(model, broken, samples)
    first = report["ops"][0]
    assert (first["type"], first["node"], first["precision"]) == ("FULLY_CONNECTED", "gemm", "int8")
    assert first["amplification_db"] < -20
    assert all(OP_KEYS <= op.keys() for op in report["ops"])
    assert all(TENSOR_KEYS <= t.keys() for t in report["tensors"])

    kept = quantized(model, root, "kept.tflite", keep_float=("gemm",))
    before = verify(model, broken, samples).worst.sqnr_db
    after = verify(model, kept, samples).worst.sqnr_db
    assert before < 10 and after > before + 20
    ops = build_report(model, kept, samples)["ops"]
    (fc,) = [op for op in ops if op["type"] == "FULLY_CONNECTED"]
    assert fc["precision"] == "float" and fc["node"] == "gemm"


def test_conversion_notes_name_ranges_and_reasons(data, tmp_path):
    root, samples = data
    model = classifier()
    flatbuffer, conversion = convert("<test>", data=model.SerializeToString(), quantize=QuantizeOptions(),
                                     calibration=str(root / "cal.npz"), keep_float=("Gemm",))
    path = tmp_path / "m.tflite"
    path.write_bytes(bytes(flatbuffer))
    report = build_report(model, str(path), samples, notes=conversion.notes)
    sources = {t["name"]: t["range_source"] for t in report["tensors"]}
    assert sources["r_nhwc"] == "calibration"
    (fc,) = [op for op in report["ops"] if op["type"] == "FULLY_CONNECTED"]
    assert (fc["node"], fc["float_reason"]) == ("gemm", "kept float by --keep-float")
    write_report(report, str(tmp_path / "r.json"))
    loaded = json.loads((tmp_path / "r.json").read_text())
    assert loaded["ops"][0].keys() == report["ops"][0].keys()


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def test_the_html_page_renders_in_headless_chromium(data, tmp_path, pathological_logits):
    root, samples = data
    model = classifier()
    page = tmp_path / "report.html"
    write_report(build_report(model, quantized(model, root, "b.tflite"), samples), str(page))
    text = page.read_text()
    assert "<svg" in text and "gemm" in text
    assert "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in text and "<script" not in text  # one self-contained page
    browser = chromium()
    if browser is None:
        pytest.skip("Debian's chromium is not installed (make test installs it where apt-get can)")
    drawn = _screenshot_residuals(browser, page.as_uri(), tmp_path / "page")
    blank = _screenshot_residuals(browser, "about:blank", tmp_path / "blank")
    assert drawn > 10 * blank + 1000, (drawn, blank)  # the page draws something


def _screenshot_residuals(browser: str, url: str, where) -> int:
    """A headless Chromium screenshot of `url`: the count of non-zero bytes in its PNG's filtered
    scanlines (what differs from the neighbouring pixels: near 0 for a blank page)."""
    import struct
    import zlib

    shot = where.with_suffix(".png")
    processes.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                   "--no-first-run", "--disable-background-networking", "--disable-component-update",
                   "--disable-sync", f"--user-data-dir={where}-profile", "--window-size=1000,700",
                   f"--screenshot={shot}", url], capture_output=True, cpu_seconds=120, check=True)
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, data = 8, b""
    while pos < len(png):
        length, kind = struct.unpack(">I4s", png[pos:pos + 8])
        if kind == b"IDAT":
            data += png[pos + 8:pos + 8 + length]
        pos += 12 + length
    return int(np.count_nonzero(np.frombuffer(zlib.decompress(data), np.uint8)))
