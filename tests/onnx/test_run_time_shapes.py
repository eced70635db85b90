"""Shapes the values decide, computed when the model runs (qconvert/onnx/loader.py's
run_time_shaped): the shape arithmetic behind a NonZero that torchvision's detection
postprocesses write, each converted once and run at counts below and above the constants it
meets (a TopK's k of min(K, count), a Slice to K), and at a count of zero, against onnxruntime.
Folded at the count the loader sizes them at (64), every one of these was right below K only."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.harness import convert_proto, make_model, run_onnxruntime, run_tflite

F, I64 = TensorProto.FLOAT, TensorProto.INT64
N, K = 12, 5


def _ints(name: str, values) -> tuple:
    return helper.make_node("Constant", [], [name], value=helper.make_tensor(name, I64, [len(values)], values))


def _selected() -> list:
    """scores = the positive entries of x [N] (NonZero, Transpose, GatherND): count of them."""
    return [helper.make_node("Constant", [], ["zero"], value=helper.make_tensor("zero", F, [], [0.0])),
            helper.make_node("Greater", ["x", "zero"], ["mask"]),
            helper.make_node("NonZero", ["mask"], ["where"]),
            helper.make_node("Transpose", ["where"], ["coordinates"], perm=[1, 0]),
            helper.make_node("GatherND", ["x", "coordinates"], ["scores"])]


def _count(style: str) -> list:
    """count [1] int64 of the scores: Shape then Gather (torchvision), Size, or Shape sliced."""
    if style == "size":
        return [helper.make_node("Size", ["scores"], ["size"]), _ints("one", [1]),
                helper.make_node("Reshape", ["size", "one"], ["count"])]
    if style == "shape-slice":
        return [helper.make_node("Shape", ["scores"], ["count"], start=0, end=1)]
    return [helper.make_node("Shape", ["scores"], ["shape"]), _ints("first", [0]),
            helper.make_node("Gather", ["shape", "first"], ["count"], axis=0)]


def _feeds(counts=(3, 9, N, 0)) -> list[dict[str, np.ndarray]]:
    """x with exactly `count` positive entries, for each count (none: every entry negative)."""
    rng = np.random.default_rng(0)
    feeds = []
    for count in counts:
        x = -rng.uniform(0.5, 1.0, N).astype(np.float32)
        x[rng.permutation(N)[:count]] = rng.uniform(0.1, 1.0, count).astype(np.float32)
        feeds.append({"x": x})
    return feeds


def _matches_at_every_count(model, feeds=None) -> None:
    flatbuffer, report = convert_proto(model, io_layout="onnx")
    for sample in feeds or _feeds():
        expected = run_onnxruntime(model, sample)
        actual = run_tflite(flatbuffer, report, sample)
        for name, want in expected.items():
            assert actual[name].shape == want.shape, (name, sample)
            np.testing.assert_array_equal(actual[name], want, err_msg=name)


@pytest.mark.parametrize("count_style", ["gather", "size", "shape-slice"])
@pytest.mark.parametrize("min_style", ["concat-reducemin", "min"])
def test_a_topk_of_at_most_k_follows_the_count(count_style, min_style):
    """torchvision's _topk_min: k = min(K, count) (Concat + ReduceMin, or Min), then TopK."""
    if min_style == "min":
        least = [_ints("k_max", [K]), helper.make_node("Min", ["k_max", "count"], ["k"])]
    else:
        least = [_ints("k_max", [K]), helper.make_node("Concat", ["k_max", "count"], ["both"], axis=0),
                 helper.make_node("ReduceMin", ["both"], ["k"], keepdims=1)]
    nodes = [*_selected(), *_count(count_style), *least,
             helper.make_node("TopK", ["scores", "k"], ["top", "top_index"])]
    model = make_model(nodes, {"x": (F, (N,))}, {"top": F, "top_index": I64}, opset=15)
    _matches_at_every_count(model)


@pytest.mark.parametrize("starts,ends,steps", [([0], [K], [1]), ([1], [-1], [1]), ([0], [100], [2])])
def test_a_slice_of_the_scores_is_cut_when_the_model_runs(starts, ends, steps):
    """detections_per_img: scores[:K], and two variants (from the end, a step)."""
    nodes = [*_selected(), _ints("starts", starts), _ints("ends", ends), _ints("axes", [0]),
             _ints("steps", steps), helper.make_node("Slice", ["scores", "starts", "ends", "axes", "steps"], ["y"])]
    _matches_at_every_count(make_model(nodes, {"x": (F, (N,))}, {"y": F}))


@pytest.mark.parametrize("value_type,value", [(I64, 7), (F, 2.5)])
def test_a_constant_as_long_as_the_scores_is_filled(value_type, value):
    """full_like(scores, label): ConstantOfShape of the scores' Shape is FILL."""
    filled = helper.make_tensor("v", value_type, [1], [value])
    nodes = [*_selected(), helper.make_node("Shape", ["scores"], ["shape"]),
             helper.make_node("ConstantOfShape", ["shape"], ["labels"], value=filled)]
    _matches_at_every_count(make_model(nodes, {"x": (F, (N,))}, {"labels": value_type}))


def test_a_reshape_to_the_count_by_four_keeps_its_four():
    """RetinaNet's clipped boxes: a [count, 2, 2] stack reshaped to the Shape of the [count, 4]
    boxes (Gather 0 and 1 of it): inference tells the 4, the count stays the values'."""
    nodes = [helper.make_node("Constant", [], ["zero"], value=helper.make_tensor("zero", F, [], [0.0])),
             _ints("column", [0]), helper.make_node("Gather", ["b", "column"], ["first"], axis=1),
             helper.make_node("Squeeze", ["first", "sq"], ["x"]),
             helper.make_node("Greater", ["x", "zero"], ["mask"]),
             helper.make_node("NonZero", ["mask"], ["where"]),
             helper.make_node("Transpose", ["where"], ["coordinates"], perm=[1, 0]),
             helper.make_node("GatherND", ["b", "coordinates"], ["boxes"]),
             _ints("pairs", [-1, 2, 2]), helper.make_node("Reshape", ["boxes", "pairs"], ["stacked"]),
             helper.make_node("Shape", ["boxes"], ["shape"]),
             _ints("i0", [0]), _ints("i1", [1]),
             helper.make_node("Gather", ["shape", "i0"], ["rows"], axis=0),
             helper.make_node("Gather", ["shape", "i1"], ["cols"], axis=0),
             helper.make_node("Concat", ["rows", "cols"], ["target"], axis=0),
             helper.make_node("Reshape", ["stacked", "target"], ["y"])]
    model = make_model(nodes, {"b": (F, (N, 4))}, {"y": F}, {"sq": np.array([1], np.int64)})
    feeds = [{"b": np.stack([f["x"], *np.random.default_rng(1).random((3, N), dtype=np.float32)], 1)}
             for f in _feeds()]
    _matches_at_every_count(model, feeds)


def _branch(name: str, nodes, output: str, shape) -> object:
    return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(output, I64, shape)])


def test_an_if_on_an_empty_selection_stays_an_if_with_a_dynamic_output():
    """torchvision's batched_nms: `if boxes.numel() == 0` an empty int64 [0], else the work (here
    the order of the scores, ArgMax-free: TopK of all of them). The condition is the values':
    an IF whose output the branch it runs sizes."""
    empty = _branch("then", [helper.make_node("Constant", [], ["none"],
                                              value=helper.make_tensor("none", I64, [0], []))], "none", [0])
    work = _branch("else", [helper.make_node("Shape", ["scores"], ["all"]),
                            helper.make_node("TopK", ["scores", "all"], ["sorted", "order"])], "order", ["n"])
    nodes = [*_selected(), helper.make_node("Size", ["scores"], ["size"]),
             helper.make_node("Constant", [], ["nothing"], value=helper.make_tensor("nothing", I64, [], [0])),
             helper.make_node("Equal", ["size", "nothing"], ["is_empty"]),
             helper.make_node("If", ["is_empty"], ["kept"], then_branch=empty, else_branch=work)]
    _matches_at_every_count(make_model(nodes, {"x": (F, (N,))}, {"kept": I64}))
