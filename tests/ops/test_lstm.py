"""ONNX LSTM against onnxruntime: the fused UNIDIRECTIONAL_SEQUENCE_LSTM path and the unrolled one."""

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
    ({"activations": ["HardSigmoid", "Tanh", "Tanh"]}, "HardSigmoid"),
    ({"lens": T - 1}, "sequence_lens"),
])
def test_unsupported(attrs, message):
    with pytest.raises(ConversionError, match=message):
        convert_proto(_model(**attrs))
