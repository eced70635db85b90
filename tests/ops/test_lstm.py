"""ONNX LSTM against onnxruntime (the fused UNIDIRECTIONAL_SEQUENCE_LSTM path and the unrolled one),
and the GRU and RNN of the same family (unrolled)."""

from __future__ import annotations

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter
from onnx import TensorProto, helper, numpy_helper

from qconvert.errors import ConversionError
from tests.harness import assert_matches_onnxruntime, convert_proto, run_onnxruntime, run_tflite

T, B, I, H = 4, 3, 5, 7
FUSED = "UNIDIRECTIONAL_SEQUENCE_LSTM"


def _model(outputs=("Y", "Y_h"), direction="forward", layout=0, bias=True, peephole=False,
           initial=None, graph_inputs=(), matmul=False, lens=None, seed=0, **attrs):
    """An LSTM node with random weights; `initial` constant states, `graph_inputs` fed states."""
    rng = np.random.default_rng(seed)
    d = 2 if direction == "bidirectional" else 1
    x_shape = (T, B, I) if layout == 0 else (B, T, I)
    state = (d, B, H) if layout == 0 else (B, d, H)
    inits = {"W": rng.standard_normal((d, 4 * H, I)) * 0.5, "R": rng.standard_normal((d, 4 * H, H)) * 0.5}
    if bias:
        inits["B"] = rng.standard_normal((d, 8 * H))
    if peephole:
        inits["P"] = rng.standard_normal((d, 3 * H))
    if lens is not None:
        inits["lens"] = np.full(B, lens, np.int32)
    for name, value in (initial or {}).items():
        inits[name] = value
    names = ["X", "W", "R", "B" if bias else "", "lens" if lens is not None else "",
             "h0" if "h0" in inits or "h0" in graph_inputs else "",
             "c0" if "c0" in inits or "c0" in graph_inputs else "", "P" if peephole else ""]
    while not names[-1]:
        names.pop()
    nodes, x_in = [], "X"
    if matmul:
        inits["M"] = rng.standard_normal((I + 2, I))
        x_shape = x_shape[:2] + (I + 2,)
        nodes.append(helper.make_node("MatMul", ["X", "M"], ["X1"]))
        names[0] = "X1"
    attrs.setdefault("hidden_size", H)
    lstm_outputs = [o if o in outputs else "" for o in ("Y", "Y_h", "Y_c")]
    while not lstm_outputs[-1]:
        lstm_outputs.pop()
    nodes.append(helper.make_node("LSTM", names, lstm_outputs, direction=direction, layout=layout, **attrs))
    inputs = [helper.make_tensor_value_info(x_in, TensorProto.FLOAT, x_shape)]
    inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, state) for n in graph_inputs]
    graph = helper.make_graph(
        nodes, "lstm", inputs, [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        [numpy_helper.from_array(np.asarray(v, np.int32 if n == "lens" else np.float32), n)
         for n, v in inits.items()])
    return helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", 14)])


def _feeds(model, seed=1):
    rng = np.random.default_rng(seed)
    result = {}
    for value in model.graph.input:
        shape = [dim.dim_value for dim in value.type.tensor_type.shape.dim]
        result[value.name] = rng.standard_normal(shape).astype(np.float32)
    return result


def _check(model, fused: bool):
    _, report = assert_matches_onnxruntime(model, _feeds(model))
    assert (FUSED in report.op_counts) == fused, report.op_counts
    return report


def _check_batch_first(fused: bool, **kw):
    """layout=1 against onnxruntime (which has only layout 0) on the transposed problem."""
    model = _model(layout=1, **kw)
    feeds = _feeds(model)
    flatbuffer, report = convert_proto(model)
    assert (FUSED in report.op_counts) == fused, report.op_counts
    actual = run_tflite(flatbuffer, report, feeds)
    swap = {n: np.swapaxes(v, 0, 1) for n, v in feeds.items()}  # [B, T|D, .] <-> [T|D, B, .]
    expected = run_onnxruntime(_model(layout=0, **kw), swap)
    for name, want in expected.items():
        want = np.transpose(want, (2, 0, 1, 3)) if name == "Y" else np.swapaxes(want, 0, 1)
        np.testing.assert_allclose(actual[name], want, rtol=1e-4, atol=1e-5, err_msg=name)
    return report


@pytest.mark.parametrize("bias", [True, False])
def test_forward_fused(bias):
    _check(_model(bias=bias), fused=True)


def test_peepholes_fused():
    _check(_model(peephole=True), fused=True)


def test_batch_first_layout_fused():
    _check_batch_first(fused=True, peephole=True)


def test_reverse_and_bidirectional_fused():
    _check(_model(direction="reverse"), fused=True)
    report = _check_batch_first(fused=True, direction="bidirectional")
    assert report.op_counts[FUSED] == 2


def test_after_matmul_with_full_sequence_lens():
    _check(_model(matmul=True, lens=T), fused=True)


def test_initial_states_constant_and_fed():
    rng = np.random.default_rng(5)
    constant = {"h0": rng.standard_normal((1, B, H)), "c0": np.full((1, B, H), 0.5)}
    _check(_model(initial=constant), fused=True)
    _check(_model(graph_inputs=("h0", "c0"), direction="bidirectional"), fused=True)


def test_state_does_not_persist_between_invocations():
    """The kernel keeps its state tensors; the converter must reset them on every invoke."""
    for model in (_model(), _model(graph_inputs=("h0", "c0"))):
        feeds = _feeds(model)
        flatbuffer, _ = convert_proto(model)
        runner = Interpreter(model_content=flatbuffer, num_threads=1).get_signature_runner()
        first, second = runner(**feeds), runner(**feeds)
        expected = run_onnxruntime(model, feeds)
        for name in ("Y", "Y_h"):
            np.testing.assert_allclose(second[name], expected[name], rtol=1e-4, atol=1e-5)
            np.testing.assert_array_equal(first[name], second[name])


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_cell_state_output_unrolled(direction):
    _check(_model(outputs=("Y", "Y_h", "Y_c"), direction=direction, peephole=True,
                  graph_inputs=("h0", "c0")), fused=False)


def test_batch_first_unrolled():
    _check_batch_first(fused=False, outputs=("Y", "Y_h", "Y_c"), direction="reverse",
                       graph_inputs=("h0", "c0"))


def test_clip_and_activations_unrolled():
    _check(_model(clip=0.4), fused=False)
    _check(_model(activations=["Sigmoid", "Relu", "Tanh"]), fused=False)


@pytest.mark.parametrize("attrs,message", [
    ({"input_forget": 1}, "input_forget"),
    ({"activations": ["Gelu", "Tanh", "Tanh"]}, "Gelu"),
    ({"activations": ["Sigmoid", "Tanh"]}, "takes 3"),
])
def test_unsupported(attrs, message):
    with pytest.raises(ConversionError, match=message):
        convert_proto(_model(**attrs))


# --- GRU and RNN ------------------------------------------------------------------------------------
def _cell_model(op: str, direction="forward", layout=0, initial=False, bias=True, seed=0, **attrs):
    """A GRU (3 gates) or RNN (1 gate) node with random weights; `initial` a constant initial_h."""
    rng = np.random.default_rng(seed)
    gates, d = (3 if op == "GRU" else 1), (2 if direction == "bidirectional" else 1)
    x_shape = (T, B, I) if layout == 0 else (B, T, I)
    inits = {"W": rng.standard_normal((d, gates * H, I)) * 0.5,
             "R": rng.standard_normal((d, gates * H, H)) * 0.5}
    if bias:
        inits["B"] = rng.standard_normal((d, 2 * gates * H))
    if initial:
        inits["h0"] = rng.standard_normal((d, B, H) if layout == 0 else (B, d, H))
    names = ["X", "W", "R", "B" if bias else ""] + (["", "h0"] if initial else [])
    while not names[-1]:
        names.pop()
    node = helper.make_node(op, names, ["Y", "Y_h"], hidden_size=H, direction=direction,
                            layout=layout, **attrs)
    graph = helper.make_graph(
        [node], op.lower(), [helper.make_tensor_value_info("X", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ("Y", "Y_h")],
        [numpy_helper.from_array(np.asarray(v, np.float32), n) for n, v in inits.items()])
    return helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", 14)])


@pytest.mark.parametrize("op,attrs", [
    ("GRU", {}), ("GRU", {"linear_before_reset": 1}), ("GRU", {"direction": "bidirectional"}),
    ("GRU", {"direction": "reverse", "initial": True, "clip": 0.7}), ("GRU", {"bias": False}),
    ("GRU", {"activations": ["Sigmoid", "Relu"]}),
    ("RNN", {}), ("RNN", {"direction": "bidirectional", "initial": True}),
    ("RNN", {"activations": ["Relu"]}), ("RNN", {"clip": 0.5, "bias": False}),
    ("GRU", {"activations": ["HardSigmoid", "Relu"], "activation_alpha": [0.3], "activation_beta": [0.4]}),
    ("GRU", {"activation_alpha": [0.5, 0.5]}),  # Sigmoid and Tanh take none: ignored, as onnxruntime
])
def test_gru_and_rnn_unrolled(op, attrs):
    _, report = assert_matches_onnxruntime(_cell_model(op, **attrs), _feeds(_cell_model(op, **attrs)))
    assert "FULLY_CONNECTED" in report.op_counts and FUSED not in report.op_counts


@pytest.mark.parametrize("op", ["GRU", "RNN"])
def test_gru_and_rnn_batch_first(op):
    """layout=1 against onnxruntime (which has only layout 0) on the transposed problem."""
    model = _cell_model(op, layout=1, initial=True, direction="bidirectional")
    reference = _cell_model(op, layout=0, initial=True, direction="bidirectional")
    for value in reference.graph.initializer:  # the same weights, the state batch-major there
        if value.name == "h0":
            h0 = numpy_helper.to_array(next(i for i in model.graph.initializer if i.name == "h0"))
            value.CopyFrom(numpy_helper.from_array(np.swapaxes(h0, 0, 1).copy(), "h0"))
    feeds = _feeds(model)
    flatbuffer, report = convert_proto(model)
    actual = run_tflite(flatbuffer, report, feeds)
    expected = run_onnxruntime(reference, {"X": np.swapaxes(feeds["X"], 0, 1).copy()})
    np.testing.assert_allclose(actual["Y"], np.transpose(expected["Y"], (2, 0, 1, 3)), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(actual["Y_h"], np.swapaxes(expected["Y_h"], 0, 1), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op", ["GRU", "RNN"])
def test_gru_and_rnn_int8(op, tmp_path):
    """Quantized: every op of the unrolled cell runs int8 (but the last activation, a model output,
    which stays float by design: quantize_activations.py); the rounding of 4 steps of recurrence
    adds up, so the outputs are judged by SQNR against onnxruntime on held-out inputs."""
    from qconvert.check.metrics import sqnr_db
    from tests.harness import calibration_set, convert_quantized

    model = _cell_model(op)
    flatbuffer, report = convert_quantized(model, calibration_set(model, 32), tmp_path)
    assert {f.op for f in report.quantization.float_ops} <= {"TANH"}, report.quantization.float_ops
    assert report.quantization.int8_ops >= 10
    for seed in (100, 101):
        feeds = _feeds(model, seed)
        expected, actual = run_onnxruntime(model, feeds), run_tflite(flatbuffer, report, feeds)
        for name in ("Y", "Y_h"):
            assert sqnr_db(expected[name], actual[name]) > 25, (name, sqnr_db(expected[name], actual[name]))


@pytest.mark.parametrize("attrs,message", [
    ({"activations": ["Mish", "Tanh"]}, "Mish"),
    ({"activations": ["HardSigmoid", "Tanh", "Tanh"]}, "takes 2"),
])
def test_gru_unsupported(attrs, message):
    with pytest.raises(ConversionError, match=message):
        convert_proto(_cell_model("GRU", **attrs))
