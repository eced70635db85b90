"""keep_normalization_statistics_float: normalizations written out in ops keep their variance
float; measured in LiteRT against onnxruntime (verify's SQNR) on rows with an offset."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from qconvert.check.verify import verify
from tests.harness import convert_quantized, make_model, without_quantize_step

F = TensorProto.FLOAT


def normalization(form: str):
    """(x - mean) / sqrt(var + eps) over the last axis, var computed as `form` says:
    "squares" mean(x^2) - mean(x)^2, "centred" mean((x - mean)^2); "rms": x / sqrt(mean(x^2) + eps)."""
    nodes = [helper.make_node("ReduceMean", ["x"], ["m"], axes=[-1]),
             helper.make_node("Sub", ["x", "m"], ["d"])]
    if form == "squares":
        nodes += [helper.make_node("Mul", ["x", "x"], ["x2"]),
                  helper.make_node("ReduceMean", ["x2"], ["mx2"], axes=[-1]),
                  helper.make_node("Pow", ["m", "two"], ["m2"]),
                  helper.make_node("Sub", ["mx2", "m2"], ["v"])]
    elif form == "centred":
        nodes += [helper.make_node("Mul", ["d", "d"], ["d2"]),
                  helper.make_node("ReduceMean", ["d2"], ["v"], axes=[-1])]
    else:
        nodes = [helper.make_node("Mul", ["x", "x"], ["x2"]),
                 helper.make_node("ReduceMean", ["x2"], ["v"], axes=[-1])]
    nodes += [helper.make_node("Add", ["v", "eps"], ["ve"]), helper.make_node("Sqrt", ["ve"], ["s"]),
              helper.make_node("Div", ["x" if form == "rms" else "d", "s"], ["y"])]
    return make_model(nodes, {"x": (F, (1, 16, 32))}, {"y": F},
                      {"eps": np.array(1e-5, np.float32), "two": np.array(2.0, np.float32)})


def rows(count: int, seed: int) -> np.ndarray:
    """Rows offset by 16 with spreads between 1.5 and 3: x's int8 step (about 0.1) resolves every
    row, but x^2 (up to about 800) takes a step near 3, the size of a row's variance."""
    rng = np.random.default_rng(seed)
    spread = rng.uniform(1.5, 3, (count, 1, 16, 1))
    return (16 + rng.standard_normal((count, 1, 16, 32)) * spread).astype(np.float32)


def worst_sqnr(model, tmp_path) -> tuple[float, object]:
    flatbuffer, report = convert_quantized(model, {"x": rows(32, 0)}, tmp_path)
    path = tmp_path / "model.tflite"
    path.write_bytes(bytes(flatbuffer))
    samples = [{"x": x} for x in rows(8, 1)]
    return verify(model, str(path), samples).worst.sqnr_db, report


@pytest.mark.parametrize("form", ["squares", "centred", "rms"])
def test_variance_stays_float_and_the_output_is_accurate(form, tmp_path):
    sqnr, report = worst_sqnr(normalization(form), tmp_path)
    reasons = [f.reason for f in report.quantization.float_ops if f.op in ("MEAN", "MUL", "SUB", "ADD")]
    assert reasons and all("variance" in r for r in reasons), report.quantization.float_ops
    assert sqnr >= 30, sqnr


def test_without_the_rule_the_variance_of_squares_breaks(tmp_path, monkeypatch):
    """The test's premise: int8 statistics of the offset rows are poor: mean(x^2) - mean(x)^2 of
    int8 squares, whose step is the size of a row's variance, misses the default 20 dB target
    (the rule's 30 dB above), or goes negative before the square root (NaN)."""
    without_quantize_step(monkeypatch, "keep_normalization_statistics_float")
    sqnr, _ = worst_sqnr(normalization("squares"), tmp_path)
    assert sqnr < 20, sqnr
