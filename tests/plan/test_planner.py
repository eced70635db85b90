"""The precision planner (on by default with --quantize --calibration; --target-sqnr, --target,
--precision): a TANH whose input spans +-0.05 loses most of its precision to its int8 kernel's
fixed output step of 1/128 (about 23 dB on the output slices); kept float (--target arm64) or on its
16x8 kernel (--target npu) it keeps its input's precision, and the plan reaches 30 dB as the
conversion's own verification measures it (the written file in LiteRT against onnxruntime). Only
the TANH goes: its output's params are its kernel's, so the conv reading it keeps int8 (its input
quantized to the range it has). Promotions are listed in --json; the result is deterministic;
--precision int8 is the all-int8 model, and so is the plan of a model that holds the target."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from qconvert.cli import cli
from qconvert.tflite.reader import read as read_tflite
from tests.harness import make_model
from tests.plan.precision_models import tanh_model


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("planner")
    model, calibration = tanh_model()
    onnx.save(model, root / "tanh.onnx")
    np.savez(root / "cal.npz", **calibration)
    return root


def _convert(files, out, *flags):
    result = CliRunner().invoke(cli, [str(files / "tanh.onnx"), str(out), "--quantize", "--calibration",
                                      str(files / "cal.npz"), "--json", *flags])
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def _worst(report) -> float:
    output = report["verify"]["outputs"][0]
    return min(output["sqnr_db"], output["worst_slice_sqnr_db"])


@pytest.mark.parametrize("target, promoted_to, tanh_type", [("arm64", "float", "FLOAT32"),
                                                            ("npu", "int16", "INT16")])
def test_plan_promotes_the_tanh_and_reaches_the_target(files, tmp_path, target, promoted_to, tanh_type):
    plain = _convert(files, tmp_path / "plain.tflite")
    assert _worst(plain) < 25  # the all-int8 plan
    report = _convert(files, tmp_path / "plan.tflite", "--target-sqnr", "30", "--target", target)
    plan = report["quantization"]["plan"]
    assert plan["reached"] and plan["target"] == target
    assert [(p["node"], p["op"], p["to"]) for p in plan["promotions"]] == [("tanh", "Tanh", promoted_to)]
    assert plan["promotions"][0]["reason"].startswith(f"kept {promoted_to}: quantizing 't' alone gives")
    assert plan["costs"][0]["tensors"] == ["t"] and plan["costs"][0]["kept_float"]
    if target == "arm64":  # the op's own reason says the plan kept it
        (kept,) = report["quantization"]["float_ops"]
        assert kept["op"] == "TANH"
        assert kept["reason"].startswith("the precision plan keeps it out of int8: quantizing 't' alone")
    # all int8 (weights rounded for the output, biases corrected), all int8 with TOCO's
    # arithmetic, then the plan: its cheapest form on the target held (float on arm64, where
    # XNNPACK runs float and no int16; 16x8 on the integer-only npu, which has no float)
    assert [r["promoted"] for r in plan["rounds"]] == [0, 0, 1], plan["rounds"]
    assert plan["chosen_round"] == 2 and plan["rounds"][2]["cost_ns"] > plan["rounds"][0]["cost_ns"]
    assert _worst(report) >= 30
    summary = read_tflite((tmp_path / "plan.tflite").read_bytes())
    tanh = next(op for op in summary.operators if op.name == "TANH")
    assert summary.tensors[tanh.outputs[0]].dtype == tanh_type


def test_the_plan_measures_the_arithmetic_and_keeps_the_better(files, tmp_path, monkeypatch):
    """When all int8 misses the target, the all-int8 model with weights rounded to nearest and
    biases as they are is measured too; rounding for the output made worse here on purpose (every
    integer's sign flipped), the plan starts from round-to-nearest and says so."""
    from qconvert.quantize import rounding

    report = _convert(files, tmp_path / "plan.tflite", "--target-sqnr", "30")
    assert report["quantization"]["plan"]["arithmetic"] == ""
    honest = rounding.round_for_output
    monkeypatch.setattr(rounding, "round_for_output", lambda *a, **k: -honest(*a, **k))
    report = _convert(files, tmp_path / "plan.tflite", "--target-sqnr", "30")
    plan = report["quantization"]["plan"]
    assert plan["arithmetic"] == "nearest, no bias correction" and plan["reached"], plan


def test_a_target_the_float_model_misses_is_not_searched(files, tmp_path, caplog):
    """At 200 dB even the float file misses (float32 rounding differs from onnxruntime's, about
    140 dB): the plan measures the float model once, runs no sensitivity and says the float model
    misses it too, with the float file's SQNR (verify's, in LiteRT); it writes the integer model
    the user asked for, the closer to onnxruntime of the two arithmetics, never the float one."""
    result = CliRunner().invoke(cli, [str(files / "tanh.onnx"), str(tmp_path / "plan.tflite"), "--quantize",
                                      "--calibration", str(files / "cal.npz"), "--target-sqnr", "200",
                                      "--json"])
    report = json.loads(result.stdout)
    plan = report["quantization"]["plan"]
    assert not plan["reached"] and plan["float_misses"] and plan["sensitivity_runs"] == 0, plan
    assert len(plan["rounds"]) == 2  # all int8 and TOCO's arithmetic; the float probe is no plan
    assert report["quantization"]["int8_ops"] > 0
    chosen = plan["rounds"][plan["chosen_round"]]["worst_sqnr_db"]
    assert chosen == max(r["worst_sqnr_db"] for r in plan["rounds"])
    float_db = plan["float_round"]["worst_sqnr_db"]
    assert float_db > report["verify"]["outputs"][0]["sqnr_db"] + 20
    float_report = json.loads(CliRunner().invoke(cli, [str(files / "tanh.onnx"), str(tmp_path / "f.tflite"),
                                                       "--json"]).stdout)
    assert float_db == pytest.approx(float_report["verify"]["outputs"][0]["sqnr_db"], abs=3)  # both float32
    assert f"the float model misses it too ({float_db:.1f} dB)" in result.stderr
    assert "warning: the float model misses the target too" in caplog.text


def test_plan_is_deterministic(files, tmp_path):
    for name in ("a", "b"):
        _convert(files, tmp_path / f"{name}.tflite", "--target-sqnr", "30")
    assert (tmp_path / "a.tflite").read_bytes() == (tmp_path / "b.tflite").read_bytes()


def test_the_plan_is_on_by_default_and_all_int8_when_the_model_holds_the_target(files, tmp_path):
    """The tanh model's all-int8 file reaches 20 dB (the default target): the default plan is it,
    byte for byte, measured once; --precision int8 and --target-sqnr 0 write the same bytes."""
    report = _convert(files, tmp_path / "default.tflite")
    plan = report["quantization"]["plan"]
    assert plan["reached"] and plan["target_sqnr_db"] == 20 and not plan["promotions"]
    # measured once, nothing else: no plan is timed
    assert len(plan["rounds"]) == 1 and plan["sensitivity_runs"] == 0 and plan["chosen_round"] == 0
    assert report["quantization"]["int8_ops"] == 3
    int8 = _convert(files, tmp_path / "int8.tflite", "--precision", "int8")
    assert int8["quantization"]["plan"] is None
    _convert(files, tmp_path / "zero.tflite", "--target-sqnr", "0")
    written = {(tmp_path / f"{name}.tflite").read_bytes() for name in ("default", "int8", "zero")}
    assert len(written) == 1


@pytest.mark.parametrize("flags, message", [
    (["--target", "phone"], "Invalid value for '--target': 'phone' is not one of 'arm64', 'micro', 'npu', 'x86'"),
    (["--target", "npu", "--io-type", "float"], "--target npu takes int8 inputs and outputs, not --io-type float"),
    (["--precision", "int8", "--target-sqnr", "30"], "--target-sqnr plans precision"),
    (["--target-sqnr", "-3"], "Invalid value for --target-sqnr: -3 is not in 0..200 dB"),
    (["--target-sqnr", "1e308"], "Invalid value for --target-sqnr: 1e+308 is not in 0..200 dB"),
])
def test_plan_flags_that_contradict_are_usage_errors(files, tmp_path, flags, message):
    result = CliRunner().invoke(cli, [str(files / "tanh.onnx"), str(tmp_path / "o.tflite"), "--quantize",
                                      "--calibration", str(files / "cal.npz"), *flags])
    assert result.exit_code == 2 and message in result.stderr, result.stderr
    assert not (tmp_path / "o.tflite").exists()


def test_precision_without_quantize_is_a_usage_error(files, tmp_path):
    result = CliRunner().invoke(cli, [str(files / "tanh.onnx"), str(tmp_path / "o.tflite"),
                                      "--precision", "int8"])
    assert result.exit_code == 2 and "--precision only applies with --quantize" in result.stderr



def _dense_chain():
    """x [1, 8, 32] -> MatMul w1 -> Relu -> MatMul w2 -> Softmax: two FULLY_CONNECTED ops with
    weights of 1024 elements, the size hybrid kernels start at."""
    rng = np.random.default_rng(4)
    inits = {"w1": (rng.standard_normal((32, 32)) * 0.2).astype(np.float32),
             "w2": (rng.standard_normal((32, 32)) * 0.2).astype(np.float32)}
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="first"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w2"], ["z"], name="second"),
             helper.make_node("Softmax", ["z"], ["y"], name="softmax")]
    model = make_model(nodes, {"x": (TensorProto.FLOAT, (1, 8, 32))}, {"y": TensorProto.FLOAT}, inits)
    return model, rng.standard_normal((16, 1, 8, 32)).astype(np.float32)


def test_hybrid_nodes_run_float_with_int8_weights_next_to_int8_ops(tmp_path):
    """A plan's hybrid region (QuantizeOptions.hybrid_nodes, kept float too): its FULLY_CONNECTED
    reads int8 weights directly with a float input (TFLite's hybrid kernel, asymmetric inputs),
    the others run int8, and LiteRT's output follows onnxruntime's within int8's error."""
    from qconvert.transforms.pipeline import QuantizeOptions
    from tests.harness import convert_proto, run_onnxruntime, run_tflite

    model, x = _dense_chain()
    np.savez(tmp_path / "cal.npz", x=x)
    options = QuantizeOptions(keep_float={"second": "test"}, hybrid_nodes=frozenset({"second"}))
    flatbuffer, report = convert_proto(model, quantize=options, calibration=str(tmp_path / "cal.npz"))
    written = read_tflite(flatbuffer)
    dense = [op for op in written.operators if op.name == "FULLY_CONNECTED"]
    types = [(written.tensors[op.inputs[0]].dtype, written.tensors[op.inputs[1]].dtype) for op in dense]
    assert types == [("INT8", "INT8"), ("FLOAT32", "INT8")], types
    feeds = {"x": x[0]}
    want, got = run_onnxruntime(model, feeds)["y"], run_tflite(flatbuffer, report, feeds)["y"]
    assert np.sum((got - want) ** 2) / np.sum(want ** 2) < 10 ** (-25 / 10)
    assert report.quantization.int8_ops >= 1


def test_decisions_kept_count_float_s_clear_decisions_only():
    """Three positions: two clear decisions and a near tie. Flipping the near tie keeps every
    decision; flipping a clear one loses a half of them. The same for probabilities read against
    0.5."""
    from qconvert.plan.planner import decision_agreement

    reference = {"y": np.array([[[5.0, 0.0, 0.0], [0.0, 5.0, 0.0], [1.0, 1.001, 0.0]]])}
    tie_flipped = {"y": np.array([[[5.0, 0.0, 0.0], [0.0, 5.0, 0.0], [1.001, 1.0, 0.0]]])}
    clear_flipped = {"y": np.array([[[0.0, 5.0, 0.0], [0.0, 5.0, 0.0], [1.0, 1.001, 0.0]]])}
    assert decision_agreement(tie_flipped, reference, ["y"], [], 20.0) == 1.0
    assert decision_agreement(clear_flipped, reference, ["y"], [], 20.0) == 0.5
    assert decision_agreement(clear_flipped, reference, [], [], 20.0) is None
    probabilities = {"p": np.array([[0.9], [0.1], [0.5001]])}
    flipped = {"p": np.array([[0.9], [0.6], [0.4999]])}
    assert decision_agreement(flipped, probabilities, [], ["p"], 20.0) == 0.5


def test_an_output_read_by_argmax_is_held_to_float_s_decisions():
    """A softmax output is read by argmax: the plan measures how many of float's clear decisions
    each plan keeps (near ties do not count) and the all-int8 round says it."""
    import qconvert

    model, x = _dense_chain()
    result = qconvert.convert(model, quantize=True, calibration={"x": x})
    plan = result.report.quantization.plan
    assert plan.argmax_outputs == ["y"]
    assert plan.rounds[0].argmax_agreement is not None and 0 <= plan.rounds[0].argmax_agreement <= 1
    chosen = plan.rounds[plan.chosen_round]
    assert chosen.argmax_agreement in (None, 1.0) or chosen.argmax_agreement >= 0.99


def test_a_dense_head_whose_top_index_never_changes_is_no_decision():
    """A FULLY_CONNECTED output is read by argmax only when float's top class differs between
    the samples (a classifier's logits); a scorer's head ([1, 3] quality scores whose first is
    always the largest, the walk-through's DNSMOS) is judged by SQNR alone. A softmax's
    probabilities are a decision whatever they hold."""
    import qconvert
    from qconvert.plan.planner import read_by_argmax

    rng = np.random.default_rng(6)
    for offset, expected in ((np.array([50.0, 0, 0], np.float32), []),
                             (np.zeros(3, np.float32), ["y"])):
        inits = {"w": rng.standard_normal((16, 3)).astype(np.float32), "b": offset}
        nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["y"], name="head")]
        model = make_model(nodes, {"x": (TensorProto.FLOAT, (1, 16))}, {"y": TensorProto.FLOAT}, inits)
        x = rng.standard_normal((16, 1, 16)).astype(np.float32)
        result = qconvert.convert(model, quantize=True, calibration={"x": x})
        assert result.report.quantization.plan.argmax_outputs == expected
    constant = {"p": np.tile([0.9, 0.1], (4, 1))}
    assert read_by_argmax(constant, ["p"], {"p"}) == ["p"]
    assert read_by_argmax(constant, ["p"], set()) == []


def test_big_outputs_are_checked_on_fewer_samples(files, tmp_path):
    """The tanh model's 64 output values a sample: every plan checked on the 8 samples; a conv
    whose output holds 65536 values a sample (a segmenter's map): on 2, the CHECK_VALUES rule
    (2^17 values), and the plan still holds the target it holds."""
    assert _convert(files, tmp_path / "small.tflite")["quantization"]["plan"]["samples"] == 8
    rng = np.random.default_rng(0)
    w = rng.normal(0, 0.3, (4, 4, 3, 3)).astype(np.float32)
    model = make_model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
                       {"x": (TensorProto.FLOAT, (1, 4, 128, 128))}, {"y": TensorProto.FLOAT}, {"w": w})
    onnx.save(model, tmp_path / "big.onnx")
    np.savez(tmp_path / "big.npz", x=rng.normal(size=(8, 1, 4, 128, 128)).astype(np.float32))
    result = CliRunner().invoke(cli, [str(tmp_path / "big.onnx"), str(tmp_path / "big.tflite"), "--quantize",
                                      "--calibration", str(tmp_path / "big.npz"), "--json"])
    assert result.exit_code == 0, result.stderr
    plan = json.loads(result.stdout)["quantization"]["plan"]
    assert plan["samples"] == 2 and plan["reached"], plan
