"""LSTM, GRU and RNN with sequence_lens (issue 39, item 4): the lengths a graph input, computed
from another input (a padding mask's sum, as a diacritizer's packed sequences) or a constant
shorter than the sequence; forward, reverse and bidirectional, layout 0 and 1, initial states
given or not. One conversion each, run at several value sets of the lengths (whole, mixed, 1,
0) against onnxruntime, which defines an empty sequence's Y, Y_h and Y_c as zeros."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnxruntime.quantization import quantize_dynamic

from qconvert.check.metrics import sqnr_db
from qconvert.tflite.reader import read as read_tflite
from tests.harness import (assert_int8_matches_onnxruntime, assert_matches_onnxruntime,
                           assert_refused_in_one_line, calibration_set, convert_proto,
                           make_model, run_onnxruntime, run_tflite)

T, B, I, H = 4, 3, 3, 5
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
DIRECTIONS = ["forward", "reverse", "bidirectional"]
# every sequence whole, mixed, all of length 1, one empty, all empty
LENGTH_SETS = [[T] * B, [T, 2, 3], [1] * B, [2, 0, T], [0] * B]
FUSED = "UNIDIRECTIONAL_SEQUENCE_LSTM"


def _model(op, direction="forward", layout=0, states=False, lengths="input", cell_output=False, seed=0):
    """An `op` node with random weights on X; sequence_lens "L" a graph input ("input"), computed
    from the padding of token ids "ids" ("mask": Cast(ids != 0) summed over time), or the constant
    list `lengths`; initial states graph inputs when `states`; Y_c an output when `cell_output`."""
    rng = np.random.default_rng(seed)
    d, gates = (2 if direction == "bidirectional" else 1), GATES[op]
    state = (d, B, H) if layout == 0 else (B, d, H)
    inits = {"W": rng.standard_normal((d, gates * H, I)) * 0.6,
             "R": rng.standard_normal((d, gates * H, H)) * 0.6,
             "B": rng.standard_normal((d, 2 * gates * H)) * 0.5}
    inits = {n: v.astype(np.float32) for n, v in inits.items()}
    inputs = {"X": (TensorProto.FLOAT, (T, B, I) if layout == 0 else (B, T, I))}
    nodes = []
    if lengths == "input":
        inputs["L"] = (TensorProto.INT32, (B,))
    elif lengths == "mask":
        inputs["ids"] = (TensorProto.INT64, (B, T))
        inits["pad"], inits["time"] = np.array(0, np.int64), np.array([1], np.int64)
        nodes += [helper.make_node("Equal", ["ids", "pad"], ["is_pad"]),
                  helper.make_node("Not", ["is_pad"], ["is_token"]),
                  helper.make_node("Cast", ["is_token"], ["tokens"], to=TensorProto.INT32),
                  helper.make_node("ReduceSum", ["tokens", "time"], ["L"], keepdims=0)]
    else:
        inits["L"] = np.array(lengths, np.int32)
    names = ["X", "W", "R", "B", "L"]
    if states:
        state_names = ["h0", "c0"] if op == "LSTM" else ["h0"]
        names += state_names
        inputs |= {n: (TensorProto.FLOAT, state) for n in state_names}
    outputs = ["Y", "Y_h"] + (["Y_c"] if cell_output else [])
    nodes.append(helper.make_node(op, names, outputs, hidden_size=H, direction=direction, layout=layout))
    return make_model(nodes, inputs, dict.fromkeys(outputs, TensorProto.FLOAT), inits, opset=14)


def _feeds(model, lengths, seed=1):
    """Random floats for X and the states; `lengths` as L, or as the padding of "ids" (token ids
    1..9 within each sequence's length, 0 after it)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for value in model.graph.input:
        shape = [dim.dim_value for dim in value.type.tensor_type.shape.dim]
        if value.name == "L":
            feeds["L"] = np.array(lengths, np.int32)
        elif value.name == "ids":
            feeds["ids"] = np.where(np.arange(T) < np.array(lengths)[:, None],
                                    rng.integers(1, 10, (B, T)), 0).astype(np.int64)
        else:
            feeds[value.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def _time_major(model):
    """The layout-0 counterpart of a layout-1 model (onnxruntime runs only layout 0): the same
    weights, X and the states' inputs declared time-major."""
    reference = onnx.ModelProto()
    reference.CopyFrom(model)
    for node in reference.graph.node:
        for attr in node.attribute:
            if attr.name == "layout":
                attr.i = 0
    for value in reference.graph.input:
        dims = value.type.tensor_type.shape.dim
        if value.name in ("X", "h0", "c0"):
            dims[0].dim_value, dims[1].dim_value = dims[1].dim_value, dims[0].dim_value
    return reference


def _expected(model, feeds, layout):
    """onnxruntime's outputs, for layout 1 computed on the transposed problem and transposed back."""
    if layout == 0:
        return run_onnxruntime(model, feeds)
    swapped = {n: np.swapaxes(v, 0, 1).copy() if n in ("X", "h0", "c0") else v for n, v in feeds.items()}
    return {n: np.transpose(v, (2, 0, 1, 3)) if n == "Y" else np.swapaxes(v, 0, 1)
            for n, v in run_onnxruntime(_time_major(model), swapped).items()}


def _assert_at_lengths(model, layout=0, length_sets=LENGTH_SETS):
    """One conversion of `model` matching onnxruntime at every value set of the lengths (layout 0:
    the first set through assert_matches_onnxruntime); returns the report."""
    flatbuffer = report = None
    for k, lengths in enumerate(length_sets):
        feeds = _feeds(model, lengths, seed=k + 1)
        if flatbuffer is None and layout == 0:
            flatbuffer, report = assert_matches_onnxruntime(model, feeds)
            continue
        if flatbuffer is None:
            flatbuffer, report = convert_proto(model)
        actual = run_tflite(flatbuffer, report, feeds)
        for name, want in _expected(model, feeds, layout).items():
            np.testing.assert_allclose(actual[name], want, rtol=1e-4, atol=1e-5,
                                       err_msg=f"{name} at lengths {lengths}")
    return report


@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_lengths_fed(op, direction, layout):
    """Lengths a graph input: each step masked by LESS(step, lengths) and SELECT_V2; the LSTM
    unrolled (the fused kernel cannot mask), no REVERSE_SEQUENCE for the reverse direction."""
    report = _assert_at_lengths(_model(op, direction, layout), layout)
    assert {"LESS", "SELECT_V2"} <= set(report.op_counts), report.op_counts
    assert FUSED not in report.op_counts and "REVERSE_SEQUENCE" not in report.op_counts


@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_lengths_fed_with_initial_states(op, direction, layout):
    """Initial states fed too (and the LSTM's Y_c read): an empty sequence's final states are 0,
    as onnxruntime gives them, not the initial states the masked steps hold."""
    _assert_at_lengths(_model(op, direction, layout, states=True, cell_output=op == "LSTM"), layout)


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_lengths_computed_from_padding(op, direction):
    """The diacritizer's case: lengths computed from another input (the count of non-padding
    token ids, Cast to int32 and ReduceSum), not a constant."""
    report = _assert_at_lengths(_model(op, direction, lengths="mask", states=True))
    assert "SELECT_V2" in report.op_counts, report.op_counts


@pytest.mark.parametrize("lengths", [[T, 2, 3], [1, 0, 2], [0, 0, 0]])
@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_constant_lengths_short_of_the_sequence(op, lengths):
    """Constant lengths shorter than the sequence: the masks are constants, and the steps no
    sequence reaches are not emitted (all empty: no cell at all)."""
    for direction in DIRECTIONS:
        for layout in (0, 1):
            model = _model(op, direction, layout, states=True, lengths=lengths, cell_output=op == "LSTM")
            report = _assert_at_lengths(model, layout, [lengths])
            assert "LESS" not in report.op_counts and FUSED not in report.op_counts, report.op_counts
            # per direction, the input projection and per step reached 1 recurrent product (2 in GRU)
            dirs, per_step = (2 if direction == "bidirectional" else 1), (2 if op == "GRU" else 1)
            products = report.op_counts.get("FULLY_CONNECTED", 0)
            assert dirs * per_step * max(lengths) <= products <= dirs * (1 + per_step * max(lengths))


def test_full_constant_lengths_keep_the_fused_kernel():
    model = _model("LSTM", "bidirectional", lengths=[T] * B)
    report = _assert_at_lengths(model, 0, [[T] * B])
    assert report.op_counts.get(FUSED) == 2 and "SELECT_V2" not in report.op_counts, report.op_counts


@pytest.mark.parametrize("lengths,message", [
    ([T + 1, 1, 1], r"sequence_lens \[5, 1, 1\] outside 0..4"),
    ([-1, 1, 1], r"outside 0..4"),
    ([1, 1], r"sequence_lens has shape \[2\]; for a batch of 3"),
])
def test_constant_lengths_refused(lengths, message):
    assert_refused_in_one_line(_model("GRU", lengths=lengths), message)


@pytest.mark.parametrize("op", ["GRU", "LSTM"])
def test_int8_masked(op, tmp_path):
    """Quantized: the masks compare int32 lengths and SELECT_V2 runs int8 (the same scale on
    both sides), so every op but the last activation (a model output, float by design) is int8;
    at mixed lengths, an empty sequence among them, within 4 steps of onnxruntime's (the rounding
    of 4 recurrent steps adds up: 3 seen), the padding exactly 0."""
    model = _model(op, "bidirectional")
    calibration = calibration_set(model, 24)
    calibration["L"] = np.stack([np.array(LENGTH_SETS[k % len(LENGTH_SETS)], np.int32) for k in range(24)])
    feeds = {"X": calibration["X"][3], "L": np.array([2, 0, T], np.int32)}
    flatbuffer, report = assert_int8_matches_onnxruntime(model, tmp_path, calibration, feeds,
                                                         steps=4.0, allow_float=("TANH",))
    assert report.quantization.int8_ops >= 20 and "SELECT_V2" in report.op_counts
    y = run_tflite(flatbuffer, report, feeds)["Y"]  # [T, D, B, H]
    assert not y[2:, :, 0].any() and not y[:, :, 1].any()


def test_dynamic_quantize_lstm(tmp_path):
    """onnxruntime's quantize_dynamic LSTM (com.microsoft DynamicQuantizeLSTM) with lengths fed:
    the float LSTM of its weights, masked like any, its products hybrid FULLY_CONNECTED with int8
    weights; judged by SQNR against onnxruntime running the quantized model."""
    onnx.save(_model("LSTM", "bidirectional"), tmp_path / "float.onnx")
    quantize_dynamic(str(tmp_path / "float.onnx"), str(tmp_path / "dynamic.onnx"),
                     op_types_to_quantize=["LSTM"], reduce_range=True)
    quantized = onnx.load(tmp_path / "dynamic.onnx")
    assert [n.op_type for n in quantized.graph.node] == ["DynamicQuantizeLSTM"]
    flatbuffer, report = convert_proto(quantized)
    assert "SELECT_V2" in report.op_counts and FUSED not in report.op_counts, report.op_counts
    tensors = read_tflite(flatbuffer).tensors
    assert sum(t.dtype == "INT8" and t.data_offset is not None for t in tensors) == 4  # W, R per direction
    for k, lengths in enumerate(LENGTH_SETS):
        feeds = _feeds(quantized, lengths, seed=k + 1)
        got, want = run_tflite(flatbuffer, report, feeds), run_onnxruntime(quantized, feeds)
        for name, value in want.items():
            if value.any():
                assert sqnr_db(value, got[name]) > 40, (name, lengths, sqnr_db(value, got[name]))
            else:
                np.testing.assert_array_equal(got[name], value, err_msg=f"{name} at {lengths}")


def _packed_module(torch, kind: str):
    """PyTorch's packed sequences, as a tagger exports them: token ids [B, T] (0 pads), lengths
    the count of non-padding ids, pack_padded_sequence (unsorted: the export sorts by TopK and
    scatters back), a bidirectional batch-first `kind` (GRU, LSTM, RNN), pad_packed_sequence."""
    from torch import nn
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    class Tagger(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = nn.Embedding(10, I)
            self.rnn = getattr(nn, kind)(I, H, batch_first=True, bidirectional=True)

        def forward(self, ids):
            lengths = (ids != 0).sum(1)
            packed = pack_padded_sequence(self.embedding(ids), lengths, batch_first=True,
                                          enforce_sorted=False)
            out, _ = self.rnn(packed)
            return pad_packed_sequence(out, batch_first=True, total_length=T)[0]

    torch.manual_seed(0)
    return Tagger().eval()


@pytest.mark.parametrize("kind", ["GRU", "LSTM", "RNN"])
def test_pytorch_packed_sequences(kind, tmp_path):
    """The issue's case end to end: a torch.onnx export of packed sequences, whose `kind` node
    reads sequence_lens computed from the ids (Equal, Not, Cast, ReduceSum, sorted by TopK),
    converted once and matching onnxruntime at every value set of the lengths."""
    torch = pytest.importorskip("torch", reason="torch is the qat extra: pip install -e '.[qat]'")
    path = tmp_path / "tagger.onnx"
    example = torch.tensor([[1, 2, 3, 4], [5, 6, 0, 0], [7, 0, 0, 0]])
    torch.onnx.export(_packed_module(torch, kind), (example,), str(path), input_names=["ids"],
                      output_names=["Y"], opset_version=14, dynamo=False)
    model = onnx.load(path)
    node = next(n for n in model.graph.node if n.op_type == kind)
    assert len(node.input) > 4 and node.input[4] not in {i.name for i in model.graph.initializer}
    report = _assert_at_lengths(model, length_sets=LENGTH_SETS + [[1, T, 3]])
    assert "SELECT_V2" in report.op_counts and FUSED not in report.op_counts, report.op_counts
