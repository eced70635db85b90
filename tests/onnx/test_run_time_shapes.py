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


def _unless_empty(x: str, y: str) -> list:
    """y = x [count, 4], through torchvision's `if boxes.numel() == 0` (an If on the values, whose
    output is typed a round later than the nodes before it)."""
    empty = helper.make_graph([helper.make_node("Constant", [], [y + "_none"],
                                                value=helper.make_tensor("none", F, [0, 4], []))],
                              "then", [], [helper.make_tensor_value_info(y + "_none", F, [0, 4])])
    same = helper.make_graph([helper.make_node("Identity", [x], [y + "_same"])], "else", [],
                             [helper.make_tensor_value_info(y + "_same", F, None)])
    return [helper.make_node("Size", [x], [x + "_size"]),
            helper.make_node("Constant", [], [x + "_nothing"], value=helper.make_tensor("n", I64, [], [0])),
            helper.make_node("Equal", [x + "_size", x + "_nothing"], [x + "_empty"]),
            helper.make_node("If", [x + "_empty"], [y], then_branch=empty, else_branch=same)]


def _level(k: int) -> list:
    """Faster R-CNN's box_roi_pool at level k: the boxes whose level is k (NonZero), their
    RoiAlign from feature map f, and the rows they go to in the merged result."""
    return [_ints(f"k{k}", [k]), helper.make_node("Equal", ["levels", f"k{k}"], [f"at{k}"]),
            helper.make_node("NonZero", [f"at{k}"], [f"where{k}"]),
            helper.make_node("Reshape", [f"where{k}", "flat"], [f"rows{k}"]),
            helper.make_node("Gather", ["b", f"rows{k}"], [f"picked{k}"], axis=0),
            *_unless_empty(f"picked{k}", f"rois{k}"),
            helper.make_node("Shape", [f"rows{k}"], [f"count{k}"]),
            helper.make_node("ConstantOfShape", [f"count{k}"], [f"batch{k}"],
                             value=helper.make_tensor("zero", I64, [1], [0])),
            helper.make_node("RoiAlign", ["f", f"rois{k}", f"batch{k}"], [f"pooled{k}"],
                             output_height=2, output_width=2, sampling_ratio=2),
            helper.make_node("Reshape", [f"rows{k}", "column"], [f"index{k}"]),
            helper.make_node("Shape", [f"pooled{k}"], [f"pooled_shape{k}"]),
            helper.make_node("Expand", [f"index{k}", f"pooled_shape{k}"], [f"spread{k}"])]


def test_levels_merged_by_scatter_take_each_count_of_its_own():
    """torchvision's _onnx_merge_levels: of the boxes kept (a NonZero), zeros [their count, C, 2,
    2] (ConstantOfShape of a shape whose C, 2, 2 come from level 0's RoiAlign), then each
    level's RoiAlign scattered into its rows: three counts the values decide. Probed at once
    (all 64, then all 96), the scatter's shape took a level's count for the kept one."""
    nodes = [helper.make_node("Constant", [], ["zero"], value=helper.make_tensor("zero", F, [], [0.0])),
             helper.make_node("Greater", ["s", "zero"], ["kept"]),
             helper.make_node("NonZero", ["kept"], ["kept_where"]),
             helper.make_node("Reshape", ["kept_where", "flat"], ["kept_rows"]),
             helper.make_node("Gather", ["s", "kept_rows"], ["x"], axis=0),
             helper.make_node("Gather", ["boxes", "kept_rows"], ["b"], axis=0),
             helper.make_node("Constant", [], ["half"], value=helper.make_tensor("half", F, [], [0.5])),
             helper.make_node("Greater", ["x", "half"], ["high"]),
             helper.make_node("Cast", ["high"], ["levels"], to=I64),
             _ints("flat", [-1]), _ints("column", [-1, 1, 1, 1]), *_level(0), *_level(1),
             helper.make_node("Shape", ["levels"], ["all"]),
             helper.make_node("Shape", ["pooled0"], ["pooled_tail"], start=1),
             helper.make_node("Concat", ["all", "pooled_tail"], ["merged_shape"], axis=0),
             helper.make_node("ConstantOfShape", ["merged_shape"], ["zeros"]),
             helper.make_node("ScatterElements", ["zeros", "spread0", "pooled0"], ["once"], axis=0),
             helper.make_node("ScatterElements", ["once", "spread1", "pooled1"], ["y"], axis=0)]
    model = make_model(nodes, {"s": (F, (N,)), "boxes": (F, (N, 4)), "f": (F, (1, 3, 8, 8))},
                       {"y": F}, opset=16)
    rng = np.random.default_rng(2)
    feeds = []
    for kept, highs in ((N, 3), (10, 9), (7, 0), (5, 5), (0, 0)):
        corner = rng.uniform(0, 4, (N, 2)).astype(np.float32)
        boxes = np.concatenate([corner, corner + rng.uniform(1, 4, (N, 2)).astype(np.float32)], 1)
        s = np.where(np.arange(N) < highs, 0.9, 0.1)
        s = np.where(np.arange(N) < kept, s, -1.0).astype(np.float32)[rng.permutation(N)]
        feeds.append({"s": s, "boxes": boxes, "f": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)})
    flatbuffer, report = convert_proto(model, io_layout="onnx")
    for sample in feeds:
        want = run_onnxruntime(model, sample)["y"]
        got = run_tflite(flatbuffer, report, sample)["y"]
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_the_labels_of_each_class_follow_the_kept_rows():
    """torchvision's postprocess_detections: labels = arange(num_classes) (Range to a Shape of
    the [count, C] scores: known at the loader's sizes, C, not a count of its own) expanded to
    the scores, both flattened, then the entries above a threshold (a second NonZero). In
    Faster R-CNN, where that Range was typed a round before the Shape's value was known, a
    count of its own (64 where C is 91) made the labels' gather reach beyond them."""
    classes = 5
    nodes = [helper.make_node("Constant", [], ["zero"], value=helper.make_tensor("zero", F, [], [0.0])),
             helper.make_node("Constant", [], ["half"], value=helper.make_tensor("half", F, [], [0.5])),
             _ints("first", [0]), _ints("second", [1]), _ints("flat", [-1]), _ints("row", [1, -1]),
             helper.make_node("Gather", ["s", "first"], ["lead"], axis=1),
             helper.make_node("Squeeze", ["lead", "second"], ["lead_score"]),
             helper.make_node("Greater", ["lead_score", "zero"], ["kept"]),
             helper.make_node("NonZero", ["kept"], ["kept_where"]),
             helper.make_node("Reshape", ["kept_where", "flat"], ["rows"]),
             helper.make_node("Gather", ["s", "rows"], ["scores"], axis=0),
             helper.make_node("Shape", ["scores"], ["shape"]),
             helper.make_node("Gather", ["shape", "second"], ["count_1d"], axis=0),
             helper.make_node("Squeeze", ["count_1d", "first"], ["num_classes"]),
             helper.make_node("Constant", [], ["start"], value=helper.make_tensor("start", I64, [], [0])),
             helper.make_node("Constant", [], ["step"], value=helper.make_tensor("step", I64, [], [1])),
             helper.make_node("Range", ["start", "num_classes", "step"], ["classes"]),
             helper.make_node("Reshape", ["classes", "row"], ["class_row"]),
             helper.make_node("Expand", ["class_row", "shape"], ["labels"]),
             helper.make_node("Reshape", ["labels", "flat"], ["labels_flat"]),
             helper.make_node("Reshape", ["scores", "flat"], ["scores_flat"]),
             helper.make_node("Greater", ["scores_flat", "half"], ["high"]),
             helper.make_node("NonZero", ["high"], ["high_where"]),
             helper.make_node("Reshape", ["high_where", "flat"], ["picked"]),
             helper.make_node("Gather", ["labels_flat", "picked"], ["y"], axis=0),
             helper.make_node("Gather", ["scores_flat", "picked"], ["z"], axis=0)]
    model = make_model(nodes, {"s": (F, (N, classes))}, {"y": I64, "z": F}, opset=13)
    rng = np.random.default_rng(3)
    feeds = []
    for kept in (N, 7, 1, 0):
        s = rng.uniform(0, 1, (N, classes)).astype(np.float32)
        s[:, 0] = np.where(np.arange(N) < kept, 0.2, -1.0)[rng.permutation(N)]
        feeds.append({"s": s})
    _matches_at_every_count(model, feeds)
