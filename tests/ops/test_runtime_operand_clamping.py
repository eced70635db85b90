"""Slice, Pad, Gather, Scatter, TopK and Tile whose index operands are computed at run time (fed
as graph inputs, or computed from one) follow ONNX's clamping at every sign and magnitude, or are
refused in one line: starts and ends below -dim, past dim and at the INT64 sentinels exporters
write, steps of both signs and any size, negative axes, negative indices, negative pads; the
constant-operand forms too. Every case is compared with onnxruntime (issue 32, item 4)."""

import itertools

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter
from onnx import TensorProto, helper

from tests.harness import (assert_matches_onnxruntime, assert_refused_in_one_line, convert_proto,
                           make_model, run_onnxruntime)

D = 5  # the sliced axis
I64, I32 = np.iinfo(np.int64), np.iinfo(np.int32)
STEPS = [-100, -2, -1, 1, 2, 100]
INDICES = [-100, -D - 1, -D, -D + 1, -1, 0, 1, D - 1, D, D + 1, 100]
# Sentinels (and, for int64, values past int32 that are not sentinels).
SENTINELS = {np.int64: [int(I64.max), int(I64.min), int(I32.max), 2**40, -2**40],
             np.int32: [int(I32.max), int(I32.min)]}


def onnx_slice_length(start: int, end: int, step: int, dim: int) -> int:
    """Elements ONNX's Slice spec takes (negative indices + dim once, then starts clamped to
    [0, dim] ([0, dim - 1] for a negative step), ends to [0, dim] ([-1, dim - 1])); an end of
    INT_MAX with a negative step runs through index 0, as onnxruntime reads it."""
    if step < 0 and end in (I32.max, I64.max):  # 2**40 is not one
        end = -dim - 1
    start, end = (v + dim if v < 0 else v for v in (start, end))
    high = dim - 1 if step < 0 else dim
    start, end = min(max(start, 0), high), min(max(end, -1 if step < 0 else 0), high)
    return len(range(start, end, step))


def _triples(values, steps):
    """{length: [(start, end, step)]}: the triples grouped by the length ONNX gives them."""
    groups = {}
    for start, end, step in itertools.product(values, values, steps):
        groups.setdefault(onnx_slice_length(start, end, step, D), []).append((start, end, step))
    return groups


def _runtime_slice_model(length: int, index_type, data_type, computed: bool):
    """cut = Slice(x, s, e, [-1], st), y = Concat(cut, x) along axis 1: s, e, st fed (of
    `index_type`), or s computed from the fed value (Sub then Add of 1) when `computed`; the
    graph output cut declares its shape [2, length] (shape inference cannot know it). y is what
    the test reads: LiteRT's Python binding cannot read an empty tensor a kernel resized."""
    np_index = helper.tensor_dtype_to_np_dtype(index_type)
    inputs = {"x": (data_type, (2, D)), **{n: (index_type, (1,)) for n in ("s", "e", "st")}}
    inits, nodes, start = {"axes": np.array([-1], np_index)}, [], "s"
    if computed:
        inits["one"] = np.array([1], np_index)
        nodes += [helper.make_node("Sub", ["s", "one"], ["s_minus"]),
                  helper.make_node("Add", ["s_minus", "one"], ["s_back"])]
        start = "s_back"
    nodes += [helper.make_node("Slice", ["x", start, "e", "axes", "st"], ["cut"], name="slice"),
              helper.make_node("Concat", ["cut", "x"], ["y"], axis=1)]
    model = make_model(nodes, inputs, {"y": data_type, "cut": data_type}, inits)
    model.graph.output[1].CopyFrom(helper.make_tensor_value_info("cut", data_type, [2, length]))
    return model


def _run_y(flatbuffer: bytes, feeds: dict) -> np.ndarray:
    """Output y of the .tflite for `feeds` (by input name; plain 2-D and 1-D inputs)."""
    interpreter = Interpreter(model_content=flatbuffer, num_threads=1)
    interpreter.allocate_tensors()
    for detail in interpreter.get_input_details():
        interpreter.set_tensor(detail["index"], feeds[detail["name"]].astype(detail["dtype"]))
    interpreter.invoke()
    output = next(d for d in interpreter.get_output_details() if d["name"] == "y")
    return interpreter.get_tensor(output["index"])


def _check_runtime_slices(index_type, data_type, values, computed=False) -> int:
    """Every (start, end, step) over `values` x STEPS through one conversion per output length,
    compared with onnxruntime; returns the number of cases."""
    np_index = helper.tensor_dtype_to_np_dtype(index_type)
    x = (np.arange(2 * D) - 3).reshape(2, D).astype(helper.tensor_dtype_to_np_dtype(data_type))
    cases = 0
    for length, triples in sorted(_triples(values, STEPS).items()):
        model = _runtime_slice_model(length, index_type, data_type, computed)
        flatbuffer, _ = convert_proto(model)
        for start, end, step in triples:
            feeds = {"x": x, **{k: np.array([v], np_index) for k, v in zip(("s", "e", "st"), (start, end, step))}}
            want = run_onnxruntime(model, feeds)["y"]
            got = _run_y(flatbuffer, feeds)
            assert got.shape == want.shape and np.array_equal(got, want), (start, end, step, got, want)
            cases += 1
    return cases


@pytest.mark.parametrize("index_type,data_type", [(TensorProto.INT64, TensorProto.FLOAT),
                                                  (TensorProto.INT32, TensorProto.INT32)],
                         ids=["int64-indices-float-data", "int32-indices-int32-data"])
def test_fed_starts_ends_steps_at_every_sign_and_magnitude(index_type, data_type):
    """Fed starts/ends below -dim, past dim and at the sentinels (INT64_MAX: PyTorch's "to the
    end"), with steps of both signs up to 100: ONNX's element counts and values, never TFLite's
    (its kernel takes nothing for a negative step starting below -dim)."""
    values = INDICES + SENTINELS[helper.tensor_dtype_to_np_dtype(index_type).type]
    assert _check_runtime_slices(index_type, data_type, values) == len(values) ** 2 * len(STEPS)


def test_computed_starts_at_every_sign_and_magnitude():
    """Starts computed in the graph (Sub, then Add) rather than fed."""
    assert _check_runtime_slices(TensorProto.INT64, TensorProto.FLOAT, INDICES, computed=True) > 0


@pytest.mark.parametrize("step", STEPS)
def test_constant_starts_and_ends_at_every_sign_and_magnitude(step):
    """The same values as constants, one Slice node per (start, end) in one model: the issue's
    "computed output shape (2, 0) differs from the inferred (2, 1)" is gone (a negative step
    starting below -dim takes index 0). An end of INT64_MAX with a negative step: see
    test_constant_end_sentinel_with_negative_step_is_refused_in_one_line."""
    values = INDICES + [int(I64.max), int(I64.min)]
    pairs = [(s, e) for s, e in itertools.product(values, values) if step > 0 or e != I64.max]
    nodes, inits, outputs = [], {"axes": np.array([1], np.int64), "st": np.array([step], np.int64)}, {}
    for k, (start, end) in enumerate(pairs):
        inits[f"s{k}"], inits[f"e{k}"] = np.array([start], np.int64), np.array([end], np.int64)
        nodes.append(helper.make_node("Slice", ["x", f"s{k}", f"e{k}", "axes", "st"], [f"y{k}"]))
        outputs[f"y{k}"] = TensorProto.FLOAT
    model = make_model(nodes, {"x": (TensorProto.FLOAT, (2, D))}, outputs, inits)
    assert_matches_onnxruntime(model, {"x": np.arange(2 * D, dtype=np.float32).reshape(2, D)})


@pytest.mark.parametrize("steps", [[-1, -2], [3, -1], [1, 1]])
def test_fed_two_axis_slice_with_negative_axes(steps):
    """Two axes given negative and out of order, each with its own clamping; steps fed too."""
    model = make_model([helper.make_node("Slice", ["x", "s", "e", "axes", "st"], ["y"], name="slice")],
                       {"x": (TensorProto.FLOAT, (4, 3, 6)), "s": (TensorProto.INT64, (2,)),
                        "e": (TensorProto.INT64, (2,)), "st": (TensorProto.INT64, (2,))},
                       {"y": TensorProto.FLOAT}, {"axes": np.array([-1, -3], np.int64)})
    x = np.random.default_rng(0).standard_normal((4, 3, 6)).astype(np.float32)
    for starts, ends in [([-100, 100], [100, -100]), ([I64.max, -5], [I64.min, I64.max]),
                         ([-7, 3], [-1, -5])]:
        shape = [onnx_slice_length(starts[1], ends[1], steps[1], 4), 3,
                 onnx_slice_length(starts[0], ends[0], steps[0], 6)]
        if 0 in shape:
            continue
        model.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", TensorProto.FLOAT, shape))
        feeds = {"x": x, "s": np.array(starts), "e": np.array(ends), "st": np.array(steps)}
        assert_matches_onnxruntime(model, feeds)


@pytest.mark.parametrize("start", [-1, 2, -100])
def test_constant_end_sentinel_with_negative_step_is_refused_in_one_line(start):
    """x[start:INT64_MAX:-1]: onnxruntime slices through index 0, ONNX's spec and shape
    inference stop at dim - 1: the model means two things, refused in one line saying how to
    write each."""
    model = make_model([helper.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"], name="rev")],
                       {"x": (TensorProto.FLOAT, (2, D))}, {"y": TensorProto.FLOAT},
                       {"s": np.array([start]), "e": np.array([I64.max]), "a": np.array([1]),
                        "st": np.array([-1])})
    assert_refused_in_one_line(model, "onnxruntime slices through index 0, ONNX's Slice spec and "
                               "shape inference stop at index 4.*INT64_MIN", node="rev")
