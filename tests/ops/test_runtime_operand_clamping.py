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


# --- Gather, GatherElements, GatherND, ScatterND, ScatterElements: negative indices at run time --
def _every_index(dim: int, count: int, seed: int) -> np.ndarray:
    """`count` indices covering [-dim, dim - 1] (each value once before any repeats), shuffled."""
    values = np.resize(np.arange(-dim, dim), count)
    return np.random.default_rng(seed).permutation(values)


def _index_inputs(indices: np.ndarray, index_type, computed: bool):
    """(nodes, inputs, inits, feed, name): the indices fed as "i" of `index_type`, or computed
    from the fed value minus 1 plus 1 (Sub, Add) when `computed`."""
    np_index = helper.tensor_dtype_to_np_dtype(index_type)
    inputs, inits, nodes = {"i": (index_type, indices.shape)}, {}, []
    name = "i"
    if computed:
        inits["one"] = np.array(1, np_index)
        nodes = [helper.make_node("Sub", ["i", "one"], ["i_minus"]),
                 helper.make_node("Add", ["i_minus", "one"], ["i_back"])]
        name = "i_back"
    return nodes, inputs, inits, indices.astype(np_index), name


FORMS = [(TensorProto.INT64, TensorProto.FLOAT, False), (TensorProto.INT32, TensorProto.INT32, False),
         (TensorProto.INT64, TensorProto.FLOAT, True)]
FORM_IDS = ["int64-fed-float", "int32-fed-int32", "int64-computed-float"]
# GatherND and ScatterND take int64 indices only.
ND_FORMS = [(TensorProto.INT64, TensorProto.FLOAT, False), (TensorProto.INT64, TensorProto.INT32, False),
            (TensorProto.INT64, TensorProto.FLOAT, True)]
ND_FORM_IDS = ["int64-fed-float", "int64-fed-int32", "int64-computed-float"]


def _gather_case(op_type, x, indices, index_type, computed, **attrs):
    nodes, inputs, inits, feed, name = _index_inputs(indices, index_type, computed)
    data_type = helper.np_dtype_to_tensor_dtype(x.dtype)
    nodes.append(helper.make_node(op_type, ["x", name], ["y"], name="op", **attrs))
    model = make_model(nodes, {"x": (data_type, x.shape), **inputs}, {"y": data_type}, inits)
    assert_matches_onnxruntime(model, {"x": x, "i": feed}, rtol=0, atol=0)


def _data(shape, data_type):
    return (np.arange(np.prod(shape)) - 7).reshape(shape).astype(helper.tensor_dtype_to_np_dtype(data_type))


@pytest.mark.parametrize("index_type,data_type,computed", FORMS, ids=FORM_IDS)
@pytest.mark.parametrize("axis", [0, -1])
def test_gather_every_index_in_range(index_type, data_type, computed, axis):
    x = _data((4, 6), data_type)
    dim = x.shape[axis]
    _gather_case("Gather", x, _every_index(dim, 2 * dim, 1).reshape(2, dim), index_type, computed, axis=axis)


@pytest.mark.parametrize("index_type,data_type,computed", FORMS, ids=FORM_IDS)
@pytest.mark.parametrize("axis", [1, -3])
def test_gather_elements_every_index_in_range(index_type, data_type, computed, axis):
    x = _data((3, 4, 5), data_type)
    shape = list(x.shape)
    shape[axis] = 8
    indices = _every_index(x.shape[axis], int(np.prod(shape)), 2).reshape(shape)
    _gather_case("GatherElements", x, indices, index_type, computed, axis=axis)


@pytest.mark.parametrize("index_type,data_type,computed", ND_FORMS, ids=ND_FORM_IDS)
@pytest.mark.parametrize("batch_dims", [0, 1])
def test_gather_nd_every_index_in_range(index_type, data_type, computed, batch_dims):
    x = _data((3, 4, 5), data_type)
    dims = x.shape[batch_dims:batch_dims + 2]
    columns = [_every_index(d, 3 * 8, 3 + k) for k, d in enumerate(dims)]
    indices = np.stack(columns, axis=-1).reshape(3, 8, 2)
    _gather_case("GatherND", x, indices, index_type, computed, batch_dims=batch_dims)


@pytest.mark.parametrize("index_type,data_type,computed", ND_FORMS, ids=ND_FORM_IDS)
@pytest.mark.parametrize("reduction", ["none", "add", "max"])
def test_scatter_nd_negative_indices(index_type, data_type, computed, reduction):
    """Rows named once each (reduction none leaves repeats undefined), half of them negative."""
    x = _data((6, 3), data_type)
    indices = np.array([[-6], [1], [-1], [3], [-4]])
    nodes, inputs, inits, feed, name = _index_inputs(indices, index_type, computed)
    nodes.append(helper.make_node("ScatterND", ["x", name, "u"], ["y"], reduction=reduction))
    updates = _data((5, 3), data_type) * 3
    model = make_model(nodes, {"x": (helper.np_dtype_to_tensor_dtype(x.dtype), x.shape), **inputs},
                       {"y": helper.np_dtype_to_tensor_dtype(x.dtype)}, {**inits, "u": updates}, opset=18)
    assert_matches_onnxruntime(model, {"x": x, "i": feed}, rtol=0, atol=0)


@pytest.mark.parametrize("index_type,data_type,computed", FORMS, ids=FORM_IDS)
@pytest.mark.parametrize("axis", [0, -1])
def test_scatter_elements_negative_indices(index_type, data_type, computed, axis):
    """Each column (axis 0) or row (axis -1) a permutation of [-dim, -1] mixed with [0, dim - 1]."""
    x = _data((4, 4), data_type)
    dim = 4
    rows = [np.where(np.arange(dim) % 2, p - dim, p) for p in
            (np.random.default_rng(k).permutation(dim) for k in range(dim))]
    indices = np.stack(rows, axis=1 if axis == 0 else 0)
    nodes, inputs, inits, feed, name = _index_inputs(indices, index_type, computed)
    nodes.append(helper.make_node("ScatterElements", ["x", name, "u"], ["y"], axis=axis))
    model = make_model(nodes, {"x": (helper.np_dtype_to_tensor_dtype(x.dtype), x.shape), **inputs},
                       {"y": helper.np_dtype_to_tensor_dtype(x.dtype)}, {**inits, "u": _data((4, 4), data_type) * 5},
                       opset=18)
    assert_matches_onnxruntime(model, {"x": x, "i": feed}, rtol=0, atol=0)


# --- Pad: pads of every sign, fed or constant ----------------------------------------------------
PADS = [[1, 2, 0, 3], [-1, 0, 2, -2], [0, -3, -1, 2], [2, -2, -2, 2], [-1, -1, -1, -1], [0, 0, 0, 0],
        [-4, 0, 4, 0], [9, 0, 0, -5]]


def _pad_model(pads, data_type, computed: bool, value: bool, axes=None, mode="constant"):
    """Pad(x [4, 5], p, v, axes) -> y; p fed (int64, or computed from the fed value by Sub and
    Add when `computed`), v a constant 7 when `value`; y's shape declared."""
    shape = [4, 5]
    named = axes or [0, 1]
    out = list(shape)
    for i, axis in enumerate(named):
        out[axis] += pads[i] + pads[i + len(named)]
    nodes, inputs, inits, _, name = _index_inputs(np.array(pads), TensorProto.INT64, computed)
    if value:
        inits["v"] = np.array(7, helper.tensor_dtype_to_np_dtype(data_type))
    if axes:
        inits["axes"] = np.array(axes, np.int64)
    args = ["x", name, "v" if value else ""] + (["axes"] if axes else [])
    nodes.append(helper.make_node("Pad", args, ["y"], mode=mode, name="pad"))
    model = make_model(nodes, {"x": (data_type, shape), **inputs}, {"y": data_type}, inits, opset=18)
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", data_type, out))
    return model


@pytest.mark.parametrize("pads", PADS)
@pytest.mark.parametrize("data_type,computed,value", [(TensorProto.FLOAT, False, False),
                                                      (TensorProto.INT32, False, True),
                                                      (TensorProto.FLOAT, True, True)],
                         ids=["fed-float", "fed-int32-value", "computed-float-value"])
def test_fed_constant_mode_pads_of_every_sign(pads, data_type, computed, value):
    """Negative pads crop, positive ones pad, both on one axis too: a margin, then SLICE."""
    model = _pad_model(pads, data_type, computed, value)
    x = _data((4, 5), data_type)
    assert_matches_onnxruntime(model, {"x": x, "i": np.array(pads, np.int64)}, rtol=0, atol=0)


@pytest.mark.parametrize("pads", [[2, -3], [-1, 4], [0, 0]])
def test_fed_pads_of_named_negative_axes(pads):
    model = _pad_model(pads, TensorProto.FLOAT, False, True, axes=[-1])
    assert_matches_onnxruntime(model, {"x": _data((4, 5), TensorProto.FLOAT), "i": np.array(pads, np.int64)})


@pytest.mark.parametrize("mode", ["reflect", "edge", "wrap"])
def test_fed_pads_of_other_modes_are_refused_in_one_line(mode):
    """Reflect, edge and wrap with computed pads would need a SLICE of computed size."""
    assert_refused_in_one_line(_pad_model([1, 0, 0, 1], TensorProto.FLOAT, False, False, mode=mode),
                               f"{mode} padding with pads \\(input 'i'\\) computed at run time.*"
                               "TFLite's tensors need static shapes; make the pads an initializer",
                               node="pad")


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads", [[-1, 0, 2, -2], [0, -3, -1, 2], [2, -2, -2, 2], [-1, -1, 1, 1]])
def test_constant_pads_of_every_sign(mode, pads):
    """The same signs as constants, every mode; reflect pads as wide as the cropped axis are
    refused in one line (MIRROR_PAD reflects less than the axis)."""
    model = make_model([helper.make_node("Pad", ["x", "p"], ["y"], mode=mode, name="pad")],
                       {"x": (TensorProto.FLOAT, (4, 5))}, {"y": TensorProto.FLOAT},
                       {"p": np.array(pads, np.int64)}, opset=18)
    cropped = np.array([4, 5]) + np.minimum(pads[:2], 0) + np.minimum(pads[2:], 0)
    if mode == "reflect" and np.any(np.maximum(pads[:2], pads[2:]) >= cropped):
        assert_refused_in_one_line(model, "each must be smaller than the dimension", node="pad")
        return
    assert_matches_onnxruntime(model, {"x": _data((4, 5), TensorProto.FLOAT)})


# --- TopK with a computed K, Tile with computed repeats -------------------------------------------
@pytest.mark.parametrize("k", [1, 3, 6])
@pytest.mark.parametrize("axis,largest,data_type,computed", [
    (-1, 1, TensorProto.FLOAT, False), (0, 0, TensorProto.INT32, False), (-2, 1, TensorProto.FLOAT, True)],
    ids=["last-largest-float-fed", "first-smallest-int32-fed", "negative-axis-float-computed"])
def test_computed_k_is_read_by_topk(k, axis, largest, data_type, computed):
    """K fed (or computed from a fed value) with the outputs' shape declared: TOPK_V2 reads it."""
    x = np.random.default_rng(k).permutation(36).reshape(6, 6).astype(helper.tensor_dtype_to_np_dtype(data_type))
    nodes, inputs, inits, feed, name = _index_inputs(np.array([k]), TensorProto.INT64, computed)
    nodes.append(helper.make_node("TopK", ["x", name], ["v", "i_out"], axis=axis, largest=largest, name="topk"))
    model = make_model(nodes, {"x": (data_type, (6, 6)), **inputs},
                       {"v": data_type, "i_out": TensorProto.INT64}, inits)
    shape = [6, 6]
    shape[axis] = k
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("v", data_type, shape))
    model.graph.output[1].CopyFrom(helper.make_tensor_value_info("i_out", TensorProto.INT64, shape))
    _, report = assert_matches_onnxruntime(model, {"x": x, "i": feed}, rtol=0, atol=0)
    assert report.op_counts.get("TOPK_V2") == 1, report.op_counts


@pytest.mark.parametrize("repeats", [[1, 1], [2, 3], [3, 1], [0, 2]])
@pytest.mark.parametrize("data_type,computed", [(TensorProto.FLOAT, False), (TensorProto.INT32, False),
                                                (TensorProto.FLOAT, True)],
                         ids=["fed-float", "fed-int32", "computed-float"])
def test_computed_repeats_are_read_by_tile(repeats, data_type, computed):
    """Repeats fed (or computed) with the output's shape declared: TILE reads them. y is the
    tiled tensor over one row of 7s (Concat), so that 0 repeats' empty output is read too
    (LiteRT's Python binding cannot read an empty tensor a kernel resized)."""
    np_data = helper.tensor_dtype_to_np_dtype(data_type)
    nodes, inputs, inits, feed, name = _index_inputs(np.array(repeats), TensorProto.INT64, computed)
    width = 3 * repeats[1]
    inits["row"] = np.full((1, width), 7, np_data)
    nodes += [helper.make_node("Tile", ["x", name], ["tiled"], name="tile"),
              helper.make_node("Concat", ["row", "tiled"], ["y"], axis=0)]
    model = make_model(nodes, {"x": (data_type, (2, 3)), **inputs}, {"y": data_type, "tiled": data_type}, inits)
    model.graph.output[1].CopyFrom(helper.make_tensor_value_info("tiled", data_type, [2 * repeats[0], width]))
    flatbuffer, _ = convert_proto(model)
    feeds = {"x": _data((2, 3), data_type), "i": feed}
    np.testing.assert_array_equal(_run_y(flatbuffer, feeds), run_onnxruntime(model, feeds)["y"])
