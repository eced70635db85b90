"""Models that arrive quantized, made here (bench/quantized_family.py): a CNN and a transformer
encoder trained on their synthetic tasks, quantized by onnxruntime's quantize_static (QDQ: int8
and uint8 activations, per-channel and per-tensor weights, symmetric activations) and
quantize_dynamic (int8 and uint8 weights), each converted with default flags and verified by
qconvert itself (LiteRT against onnxruntime, graph optimizations off, on held-out samples): it
converts to the model's own quantization, stays above its rounding bound where it has one, keeps
the task's decisions, and is no bigger than 1.1x the ONNX file."""

from __future__ import annotations

import pytest

from bench import quantized_family as family

CASES = [("cnn", f) for f in family.FORMATS] + [("transformer", f) for f in family.FORMATS
                                                 if f.name in ("qdq s8 pc", "qdq u8 pc", "dynamic s8")]


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("family")


@pytest.mark.parametrize("name, fmt", CASES, ids=[f"{n}-{f.name}" for n, f in CASES])
def test_a_model_quantized_by_onnxruntime_converts_to_its_own_quantization(work, name, fmt):
    folder = work / name
    folder.mkdir(exist_ok=True)
    model, data = family.trained(name, folder, steps=200)
    quantized = family.quantized(model, fmt, data["calibration"], folder)
    sub = folder / fmt.name.replace(" ", "_")
    sub.mkdir(exist_ok=True)
    row = family.converted(quantized, data["held"], sub)
    assert row["exit"] == 0, row["stderr"]
    if fmt.dynamic:
        assert row["mix"]["hybrid"] > 0 and row["mix"]["int8"] == 0, row
    else:
        assert row["from_pairs"] and row["mix"]["int8"] > 0 and row["mix"]["float"] <= row["mix"]["int8"], row
    if fmt.weights == "s8":  # uint8 dynamic weights are requantized: judged by SQNR alone
        assert row["bound"] is not None and row["sqnr"] >= row["bound"] - 3, row
    assert row["agreement"] >= 0.875, row
    assert row["size"] <= 1.1, row
