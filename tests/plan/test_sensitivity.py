"""Sensitivity measured (plan/sensitivity.py) and the plan made from it (plan/planner.py), on
graphs where the answer is known (tests/plan/precision_models.py):

- one bad tensor among many: the Tanh output whose int8 kernel's fixed step holds a few steps of
  its signal ranks first by its cost alone, far ahead of every other; the plan keeps only the Tanh
  float and the written file reaches the target in LiteRT;
- a poisoning LayerNorm early in a graph: quantizing the input row mean (or x) alone ruins the
  outputs, while each tensor after the centering costs little alone; all int8, every tensor after
  it is wrong (the poisoned case: the per-tensor report of the all-int8 file shows it). The plan
  keeps the mean and the centering float and reaches the target;
- the gated graph with every gate closed is the float model, with every gate open the fake-quant
  graph's error; the API's metric hook plans against a user's metric; plans are deterministic.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import qconvert
from qconvert.driver import conversion
from qconvert.plan.planner import allowed_error
from qconvert.plan.sensitivity import GatedGraph, measure, sqnr_db
from qconvert.qdq.fakequant import FloatWeights
from qconvert.transforms.pipeline import QuantizeOptions
from tests.harness import make_model, options_of, run_onnxruntime, run_tflite
from tests.plan.precision_models import layernorm_model, one_bad_tensor_model


def _sensitivity(model, calibration, tmp_path):
    """The gated graph of the all-int8 model, and its measured sensitivity (target 20 dB)."""
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    cal = tmp_path / "cal.npz"
    np.savez(cal, **calibration)
    float_weights = FloatWeights()
    state = conversion.build(str(path), options_of(quantize=QuantizeOptions(), calibration=str(cal)),
                             before_quantizing=float_weights, reference=True)
    state.reference.restore_weights()
    samples = [{name: values[k] for name, values in calibration.items()} for k in range(4)]
    graph = GatedGraph(state.reference.proto, state.model, float_weights, samples)
    return graph, measure(graph, allowed_error(graph.slices, 20.0))


def _ranked(sensitivity, graph):
    outputs = ~graph.slices
    return sorted(((sqnr_db(u.alone[outputs]), u.tensors) for u in sensitivity.units), key=lambda c: c[0])


def test_one_bad_tensor_among_many_ranks_first(tmp_path):
    graph, sensitivity = _sensitivity(*one_bad_tensor_model(), tmp_path)
    ranked = _ranked(sensitivity, graph)
    (worst, tensors), (second, _) = ranked[0], ranked[1]
    assert tensors == ["t4"] and worst < 10 and second > worst + 25, ranked[:3]
    # Everything quantized costs about what the bad tensor costs alone.
    assert abs(sqnr_db(sensitivity.all_int8[~graph.slices]) - worst) < 3
    assert sensitivity.runs <= 40  # bisection, not one run per tensor


def _decoded(model, how: str):
    """The model with its float output replaced by integer ids selected from it: ArgMax over the
    channels; ArgMax then Cast to int32 and Reshape (as exporters decode); TopK's indices."""
    graph = model.graph
    logits = graph.output[0].name
    shape = helper.make_tensor("flat", TensorProto.INT64, [2], [1, -1])
    if how == "argmax":
        nodes = [helper.make_node("ArgMax", [logits], ["ids"], axis=1, keepdims=0)]
    elif how == "argmax-cast-reshape":
        nodes = [helper.make_node("ArgMax", [logits], ["am"], axis=1, keepdims=0),
                 helper.make_node("Cast", ["am"], ["am32"], to=TensorProto.INT32),
                 helper.make_node("Reshape", ["am32", "flat"], ["ids"])]
        graph.initializer.append(shape)
    elif how == "selected":  # a detector's kept values: their count the values'
        graph.initializer.append(helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0]))
        nodes = [helper.make_node("Greater", [logits, "zero"], ["positive"]),
                 helper.make_node("NonZero", ["positive"], ["where"]),
                 helper.make_node("Transpose", ["where"], ["at"], perm=[1, 0]),
                 helper.make_node("GatherND", [logits, "at"], ["kept"])]
    else:
        k = helper.make_tensor("k", TensorProto.INT64, [1], [2])
        graph.initializer.append(k)
        nodes = [helper.make_node("TopK", [logits, "k"], ["top", "ids"], axis=1)]
    graph.node.extend(nodes)
    kind = TensorProto.INT32 if how == "argmax-cast-reshape" else TensorProto.INT64
    del graph.output[:]
    if how == "selected":
        graph.output.append(helper.make_tensor_value_info("kept", TensorProto.FLOAT, None))
        graph.output.append(helper.make_tensor_value_info("at", TensorProto.INT64, None))
    else:
        graph.output.append(helper.make_tensor_value_info("ids", kind, None))
    return model


@pytest.mark.parametrize("how", ["argmax", "argmax-cast-reshape", "topk", "selected"])
def test_ids_selected_from_floats_are_measured_at_the_floats(how, tmp_path):
    """A model whose only output is integer ids (a recognizer's decoded argmax) has no error
    energy of its own: the costs are measured at the values the ids are selected from, and rank
    the bad tensor first as at the float output. So for values a NonZero selects (a detector's
    kept boxes), whose count quantizing may change: the compared values are the ones the
    selection reads."""
    model, calibration = one_bad_tensor_model()
    graph, sensitivity = _sensitivity(_decoded(model, how), calibration, tmp_path)
    assert len(graph.outputs) == 1 and graph.outputs[0] not in ("ids", "kept")
    (worst, tensors), (second, _) = _ranked(sensitivity, graph)[:2]
    assert tensors == ["t4"] and worst < 10 and second > worst + 25


def test_a_poisoning_layernorm_is_found_by_its_cost_alone(tmp_path):
    graph, sensitivity = _sensitivity(*layernorm_model(), tmp_path)
    ranked = _ranked(sensitivity, graph)
    first_two = {tuple(t) for _, t in ranked[:2]}
    assert first_two == {("x",), ("mean",)} and all(db < 10 for db, _ in ranked[:2]), ranked[:4]
    # Each tensor after the centering costs little alone ...
    assert all(db > 30 for db, _ in ranked[2:]), ranked
    # ... but the whole model quantized is ruined: the poisoned case.
    assert sqnr_db(sensitivity.all_int8[~graph.slices]) < 5
    poisoned = [u for u in sensitivity.units if u.poisoned is not None and u.tensors == ["mean"]]
    assert poisoned and sqnr_db(poisoned[0].poisoned[1][~graph.slices]) < 5


def test_closed_gates_are_the_float_model_and_open_ones_quantize(tmp_path):
    model, calibration = one_bad_tensor_model()
    graph, _ = _sensitivity(model, calibration, tmp_path)
    assert np.all(graph.error([]) == 0)
    sample = {"x": calibration["x"][0]}
    float_output = run_onnxruntime(model, sample)
    name = next(iter(float_output))
    np.testing.assert_allclose(graph.reference[0][0], float_output[name], rtol=1e-5, atol=1e-5)
    assert np.all(graph.error(list(graph.gates)) > 0)


@pytest.mark.parametrize("make, kept", [(one_bad_tensor_model, {"tanh"}),
                                        (layernorm_model, {"ln_mean", "ln_sub"})])
def test_the_default_plan_keeps_the_bad_part_float_and_reaches_the_target(make, kept):
    model, calibration = make()
    int8 = qconvert.convert(model, quantize=True, calibration=calibration, precision="int8",
                            verify=True)
    assert int8.report.verify.worst.sqnr_db < 10
    planned = qconvert.convert(model, quantize=True, calibration=calibration, verify=True)
    plan = planned.report.quantization.plan
    assert plan.reached and {p.node for p in plan.promotions} == kept
    assert planned.report.verify.worst.sqnr_db >= 20
    # The written file, run by LiteRT, against onnxruntime on a sample it never saw.
    feeds = {"x": calibration["x"][-1]}
    expected = run_onnxruntime(model, feeds)
    got = run_tflite(planned.tflite, planned.report, feeds)
    for name, value in expected.items():
        error = np.sum((got[name] - value) ** 2) / np.sum(value ** 2)
        assert -10 * np.log10(error) > 15, name
    again = qconvert.convert(model, quantize=True, calibration=calibration, verify=True)
    assert again.tflite == planned.tflite  # deterministic


def test_the_metric_hook_plans_against_the_users_metric():
    """evaluate gets the outputs of the plan's samples stacked; the plan keeps the fewest ops
    float whose score is within max_drop of the float model's."""
    model, calibration = layernorm_model()
    seen = []

    def agreement(outputs):  # top-1 agreement with the float model's classes, per row
        seen.append(outputs["y"].shape)
        return float(np.mean(outputs["y"].argmax(-1) == labels))

    reference = np.stack([run_onnxruntime(model, {"x": x})["y"] for x in calibration["x"][:8]])
    labels = reference.argmax(-1)
    result = qconvert.convert(model, quantize=True, calibration=calibration, evaluate=agreement,
                              max_drop=0.05)
    plan = result.report.quantization.plan
    assert seen[0] == (8, 1, 8, 4)
    assert plan.metric["float"] == 1.0 and plan.metric["score"] >= 0.95 and plan.reached
    assert plan.promotions and plan.metric["scores"][0] < 0.9  # all int8 missed it


@pytest.mark.parametrize("keywords, message", [
    ({"evaluate": len}, "evaluate and max_drop go together"),
    ({"evaluate": 3, "max_drop": 0.1}, "evaluate must be a function"),
    ({"evaluate": len, "max_drop": -1}, "max_drop must be 0 or more"),
    ({"evaluate": len, "max_drop": 0.1, "precision": "int8"}, "evaluate plans precision"),
])
def test_metric_hook_arguments_are_checked(keywords, message):
    model, calibration = layernorm_model()
    with pytest.raises(qconvert.UsageError, match=message):
        qconvert.convert(model, quantize=True, calibration=calibration, **keywords)


def test_a_model_the_gated_graph_cannot_run_gets_the_weight_only_plan(monkeypatch, caplog):
    """onnxruntime refusing the gated graph (here: made to) is no failed conversion: without int8
    regions to offer, the plan chooses between all int8 (which misses the target here), the
    weight-only plan and the float model; the plan says why, and a warning says so."""
    from qconvert.plan import sensitivity
    from qconvert.errors import ReferenceFailed

    def refuse(*args, **kwargs):
        raise ReferenceFailed("onnxruntime cannot load the model: refused for the test")

    monkeypatch.setattr(sensitivity.GatedGraph, "__init__", refuse)
    model, calibration = one_bad_tensor_model()
    result = qconvert.convert(model, quantize=True, calibration=calibration)
    int8 = qconvert.convert(model, quantize=True, calibration=calibration, precision="int8")
    plan = result.report.quantization.plan
    assert result.tflite != int8.tflite and plan.rounds[0].worst_sqnr_db < 20
    assert all(p.reason.startswith(("kept hybrid: the weight-only plan", "kept float: the")) for p in plan.promotions)
    assert result.report.verify is None or result.report.verify.worst.sqnr_db >= 20
    assert plan.note == "sensitivity not measured: onnxruntime cannot load the model: refused for the test"
    assert "no int8 regions to offer" in caplog.text and plan.note in plan.summary()


def test_omitted_optional_inputs_and_outputs_link_no_nodes(tmp_path):
    """A Clip without its min ("") and a Dropout without its mask output (""): the empty name is
    no tensor, so neither is the other's neighbour (once it made every node with an omitted input
    a reader of every node with an omitted output, and regions grew across the graph)."""
    rng = np.random.default_rng(3)
    nodes = [helper.make_node("Clip", ["x", "", "high"], ["c"], name="clip"),
             helper.make_node("Dropout", ["c"], ["d", ""], name="dropout"),
             helper.make_node("Relu", ["d"], ["y"], name="relu")]
    model = make_model(nodes, {"x": (TensorProto.FLOAT, (1, 8))}, {"y": TensorProto.FLOAT},
                       {"high": np.array(1.0, np.float32)})
    graph, _ = _sensitivity(model, {"x": rng.standard_normal((4, 1, 8)).astype(np.float32)}, tmp_path)
    assert "" not in graph.readers and "" not in graph.producer
    assert graph.readers["c"] == ["dropout"] and graph.producer["d"] == "dropout"
