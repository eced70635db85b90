"""A model that arrives quantized (issue 38): by default it converts to int8 with its own QDQ
params, and its check is a gate at the error its own rounding explains (check/rounding_bound.py):
the written file passes above it, a conversion that computes other params fails with exit 4 and
writes nothing; --precision float writes the float file."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from qconvert.check.rounding_bound import perturbed, rounding_bounds
from qconvert.check.runtimes import Reference
from qconvert.cli import cli
from tests.harness import make_model, run_onnxruntime
from tests.qdq.test_qdq_import import SAMPLES, residual_cnn


@pytest.fixture(scope="module")
def qdq_path(tmp_path_factory):
    """onnxruntime's QDQ model (int8, per-channel weights) of the residual CNN, on disk."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.samples = iter({"x": s} for s in SAMPLES[:16])

        def get_next(self):
            return next(self.samples, None)

    folder = tmp_path_factory.mktemp("qdq")
    onnx.save(residual_cnn(), folder / "float.onnx")
    quantize_static(str(folder / "float.onnx"), str(folder / "qdq.onnx"), Reader(),
                    quant_format=QuantFormat.QDQ, per_channel=True, activation_type=QuantType.QInt8,
                    weight_type=QuantType.QInt8)
    return folder / "qdq.onnx"


def _run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def _litert(path, feeds: dict[str, np.ndarray]) -> np.ndarray:
    """The file's one output in LiteRT (XNNPACK), on ONNX-layout feeds (--io-layout onnx)."""
    from ai_edge_litert.interpreter import Interpreter

    runner = Interpreter(model_path=str(path), num_threads=1).get_signature_runner()
    return next(iter(runner(**feeds).values()))


def test_a_qdq_model_converts_to_int8_by_default_above_its_rounding_bound(qdq_path, tmp_path):
    out = tmp_path / "m.tflite"
    run = _run(qdq_path, out, "--json", "--io-layout", "onnx")
    assert run.exit_code == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["quantization"]["from_pairs"] and report["quantization"]["int8_ops"] >= 6
    assert "from the model's QDQ pairs" in run.stderr and "rounding bound" in run.stderr
    (check,) = report["verify"]["outputs"]
    assert check["bound_db"] is not None and float(check["sqnr_db"]) >= check["bound_db"]  # "inf" too
    model = onnx.load(qdq_path)
    step = next(float(numpy_helper.to_array(t)) for t in model.graph.initializer if t.name == "y_scale")
    for sample in SAMPLES[16:20]:  # LiteRT's file against onnxruntime's QDQ run, unoptimized
        want = run_onnxruntime(model, {"x": sample})["y"]
        np.testing.assert_allclose(_litert(out, {"x": sample}), want, rtol=0, atol=2 * step)


def test_precision_float_writes_the_float_file(qdq_path, tmp_path):
    run = _run(qdq_path, tmp_path / "f.tflite", "--precision", "float", "--json")
    assert run.exit_code == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["quantization"] is None and "QUANTIZE" not in report["op_counts"]
    both = _run(qdq_path, tmp_path / "g.tflite", "--quantize", "--precision", "float")
    assert both.exit_code == 2 and "--precision float" in both.stderr
    assert not (tmp_path / "g.tflite").exists()


def test_a_conversion_off_the_model_s_params_fails_the_gate(qdq_path, tmp_path, monkeypatch):
    """Every pair's range narrowed to a quarter (params the model does not have: its values
    clip): the file is further from onnxruntime than the model's rounding explains, exit 4,
    nothing written, the message naming the output and the bound."""
    from qconvert.driver import conversion

    honest = conversion.apply_qdq_ranges

    def narrowed(model, found):
        found.activations = {k: (lo / 4, hi / 4) for k, (lo, hi) in found.activations.items()}
        return honest(model, found)

    monkeypatch.setattr(conversion, "apply_qdq_ranges", narrowed)
    out = tmp_path / "m.tflite"
    run = _run(qdq_path, out)
    assert run.exit_code == 4, run.stderr
    assert "verify: y " in run.stderr and "the model's own rounding explains" in run.stderr
    assert not out.exists()
    written = _run(qdq_path, out, "--no-verify")
    assert written.exit_code == 0 and out.exists()


def test_the_bound_is_the_same_every_run_and_moves_every_pair(qdq_path):
    model = onnx.load(qdq_path)
    activation_pairs = sum(n.op_type == "QuantizeLinear" and n.input[0] not in
                           {t.name for t in model.graph.initializer} for n in model.graph.node)
    moved = perturbed(model)
    assert sum(n.op_type == "RandomUniformLike" for n in moved.graph.node) == activation_pairs > 0
    samples = [{"x": s} for s in SAMPLES[16:20]]
    reference = Reference(model)
    outputs = {"y": [reference.run(s)["y"] for s in samples]}
    first, second = rounding_bounds(model, samples, outputs), rounding_bounds(model, samples, outputs)
    assert first == second and 20 < first["y"] < 80, first


def test_weights_stored_int8_alone_stay_a_float_conversion(tmp_path):
    """DequantizeLinear of constants only (int8 storage, no pair on an activation) is a float
    model: converted float by default, checked exactly."""
    w = np.arange(-8, 8, dtype=np.int8).reshape(4, 4)
    model = make_model([helper.make_node("DequantizeLinear", ["wq", "s"], ["w"]),
                        helper.make_node("MatMul", ["x", "w"], ["y"])],
                       {"x": (TensorProto.FLOAT, (1, 4))}, {"y": TensorProto.FLOAT},
                       {"wq": w, "s": np.float32(0.1)})
    onnx.save(model, tmp_path / "w.onnx")
    run = _run(tmp_path / "w.onnx", tmp_path / "w.tflite", "--json")
    assert run.exit_code == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["quantization"] is None and report["verify"]["check"] == "float"


@pytest.fixture(scope="module")
def dynamic_path(tmp_path_factory):
    """quantize_dynamic's model (int8 weights, DynamicQuantizeLinear activations) of a two-layer
    MLP over 16 positions."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    rng = np.random.default_rng(0)
    inits = {"w1": rng.normal(0, 0.3, (32, 64)).astype(np.float32),
             "w2": rng.normal(0, 0.2, (64, 10)).astype(np.float32)}
    model = make_model([helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
                        helper.make_node("MatMul", ["r", "w2"], ["y"])],
                       {"x": (TensorProto.FLOAT, (1, 16, 32))}, {"y": TensorProto.FLOAT}, inits)
    folder = tmp_path_factory.mktemp("dynamic")
    onnx.save(model, folder / "float.onnx")
    quantize_dynamic(str(folder / "float.onnx"), str(folder / "dynamic.onnx"), weight_type=QuantType.QInt8)
    return folder / "dynamic.onnx"


def test_a_dynamically_quantized_model_is_held_to_its_rounding_bound(dynamic_path, tmp_path):
    """Each DynamicQuantizeLinear is moved on the grid it picks at run time (a copy of it gives
    the step); the hybrid-kernel file stays above the bound."""
    model = onnx.load(dynamic_path)
    moved = perturbed(model)
    dynamic = sum(n.op_type == "DynamicQuantizeLinear" for n in model.graph.node)
    assert sum(n.op_type == "RandomUniformLike" for n in moved.graph.node) == dynamic == 2
    run = _run(dynamic_path, tmp_path / "d.tflite", "--json")
    assert run.exit_code == 0, run.stderr
    (check,) = json.loads(run.stdout)["verify"]["outputs"]
    assert check["bound_db"] is not None and float(check["sqnr_db"]) >= check["bound_db"], check
