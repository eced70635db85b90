"""Slice -> SLICE / STRIDED_SLICE: index resolution (negative, out of range, INT64 extremes,
negative steps), both opset forms, and transposes moving through slices of NCHW feature maps."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from qconvert.ir import Operator
from qconvert.ops.registry import TFLITE_OPS
from tests.harness import assert_matches_onnxruntime, conv_in_front

INT64_MAX, INT64_MIN = np.iinfo(np.int64).max, np.iinfo(np.int64).min


def _model(nodes, x_shape, inits=(), opset=13, conv_channels=None):
    """x -> [Conv 3x3 pad 1 to conv_channels] -> nodes -> y (the last node writes "y")."""
    inits = list(inits)
    if conv_channels:
        conv, weights = conv_in_front(x_shape, conv_channels)
        inits.append(weights)
        nodes = [conv] + nodes
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _slice(data, starts, ends, axes=None, steps=None):
    """A Slice node (opset 10+) reading `data` and its constant parameter initializers."""
    names, inits = [data], []
    for name, value in (("starts", starts), ("ends", ends), ("axes", axes), ("steps", steps)):
        if value is None:
            names.append("")
            continue
        inits.append(numpy_helper.from_array(np.array(value, np.int64), name))
        names.append(name)
    while names[-1] == "":
        names.pop()
    return helper.make_node("Slice", names, ["y"]), inits


def _feeds(shape):
    return {"x": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}


def test_channel_and_strided_slice_of_conv_output_leaves_no_transpose():
    node, inits = _slice("fm", [1, 1, -1], [4, 6, 0], [1, 2, 3], [1, 2, -2])
    model = _model([node], [1, 3, 7, 9], inits, conv_channels=5)
    _, report = assert_matches_onnxruntime(model, _feeds([1, 3, 7, 9]))
    assert report.op_counts.get("STRIDED_SLICE") == 1
    assert "TRANSPOSE" not in report.op_counts, report.op_counts


def test_unit_step_slice_of_conv_output_is_slice_without_transpose():
    node, inits = _slice("fm", [2, 1], [100, -1], [1, -1])
    model = _model([node], [1, 3, 6, 8], inits, conv_channels=6)
    _, report = assert_matches_onnxruntime(model, _feeds([1, 3, 6, 8]))
    assert report.op_counts.get("SLICE") == 1 and "STRIDED_SLICE" not in report.op_counts
    assert "TRANSPOSE" not in report.op_counts, report.op_counts


def test_negative_and_out_of_range_indices():
    node, inits = _slice("x", [-3, -100, 1], [1000, -1, 2], [0, 1, 2])
    assert_matches_onnxruntime(_model([node], [5, 6, 4], inits), _feeds([5, 6, 4]))


def test_int64_extreme_ends_as_pytorch_exports_them():
    """x[1:, ::-1] from PyTorch: ends INT64_MAX / INT64_MIN (needs the loader to saturate them)."""
    node, inits = _slice("x", [1, -1], [INT64_MAX, INT64_MIN], [0, 1], [1, -1])
    assert_matches_onnxruntime(_model([node], [5, 6, 4], inits), _feeds([5, 6, 4]))


@pytest.mark.parametrize("starts,ends,steps", [
    ([-1], [-1000], [-1]),    # full reverse: the end runs past index 0 (end_mask)
    ([4], [0], [-2]),         # stops before index 0
    ([100], [1], [-3]),       # start beyond the end clamps to the last index
    ([-100], [0], [-1]),      # starts before index 0: empty
])
def test_negative_steps(starts, ends, steps):
    node, inits = _slice("x", starts, ends, [1], steps)
    assert_matches_onnxruntime(_model([node], [3, 7, 2], inits), _feeds([3, 7, 2]))


def test_opset9_attributes():
    node = helper.make_node("Slice", ["x"], ["y"], starts=[1, -3], ends=[3, 100], axes=[0, 2])
    model = _model([node], [4, 3, 5], opset=9)
    _, report = assert_matches_onnxruntime(model, _feeds([4, 3, 5]))
    assert report.op_counts.get("SLICE") == 1


def test_whole_tensor_slice_is_removed():
    node, inits = _slice("x", [0], [2**31 - 1], [1])
    model = _model([node, helper.make_node("Relu", ["y"], ["z"])], [2, 3], inits)
    model.graph.output[0].name = "z"
    _, report = assert_matches_onnxruntime(model, _feeds([2, 3]))
    assert "SLICE" not in report.op_counts and "STRIDED_SLICE" not in report.op_counts


def test_strided_slice_evaluate_follows_tf_masks():
    x = np.arange(60).reshape(3, 4, 5)
    op = Operator("STRIDED_SLICE", [], [], {"begin_mask": 0b001, "end_mask": 0b100, "shrink_axis_mask": 0b010})
    inputs = [x, np.array([2, 1, 3]), np.array([3, 0, 0]), np.array([1, 1, -1])]
    [got] = TFLITE_OPS["STRIDED_SLICE"].evaluate(inputs, op)
    np.testing.assert_array_equal(got, x[:, 1, 3::-1])


def test_slice_evaluate_size_minus_one_runs_to_the_end():
    x = np.arange(24).reshape(4, 6)
    [got] = TFLITE_OPS["SLICE"].evaluate([x, np.array([1, 2]), np.array([2, -1])], Operator("SLICE", [], []))
    np.testing.assert_array_equal(got, x[1:3, 2:])


def test_versions_follow_rank_and_dtype():
    from qconvert.ir import Model

    model = Model()
    five = model.add_array("x5", (2, 3, 4, 5, 6), np.float32)
    four = model.add_array("x4", (2, 3, 4, 5), np.bool_)
    assert TFLITE_OPS["SLICE"].version(Operator("SLICE", [five, "", ""], []), model) == 5
    assert TFLITE_OPS["STRIDED_SLICE"].version(Operator("STRIDED_SLICE", [five], []), model) == 4
    assert TFLITE_OPS["STRIDED_SLICE"].version(Operator("STRIDED_SLICE", [four], []), model) == 3
    assert TFLITE_OPS["SLICE"].version(Operator("SLICE", [four], []), model) == 1



# --- starts, ends or steps computed at run time -------------------------------------------------
def _computed(x_shape, y_shape, axes, computed, starts, ends, steps=None, conv_channels=None):
    """Slice of x whose parameters named in `computed` ("starts", "ends", "steps") come from int64
    graph inputs of those names (the others are the given constants); `y_shape` declares the
    output's shape, which shape inference cannot know from computed values."""
    node, inits = _slice("fm" if conv_channels else "x", starts, ends, axes, steps)
    node.name = "slice"
    inits = [t for t in inits if t.name not in computed]
    model = _model([node], x_shape, inits, conv_channels=conv_channels)
    for name in computed:
        model.graph.input.append(helper.make_tensor_value_info(name, TensorProto.INT64, [len(starts)]))
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape))
    values = {"starts": starts, "ends": ends, "steps": steps}
    feeds = {"x": np.random.default_rng(0).standard_normal(x_shape).astype(np.float32),
             **{name: np.array(values[name], np.int64) for name in computed}}
    return model, feeds


@pytest.mark.parametrize("x_shape,y_shape,axes,starts,ends,steps", [
    ([1, 16], [1, 4], [1], [3], [7], None),  # x[:, s:s + 4] with s computed
    ([1, 16], [1, 4], [-1], [-6], [-2], None),  # negative indices count from the end
    ([1, 16], [1, 3], None, [0, 13], [1, 99], None),  # an end past the axis clamps
    ([2, 5, 6], [2, 3, 2], [2, 1], [1, 4], [5, -100], [2, -1]),  # axes out of order, a negative step
    ([3, 8], [2, 8], [0], [2], [-100], [-1]),  # a negative step through index 0
])
@pytest.mark.parametrize("computed", [("starts",), ("starts", "ends"), ("starts", "ends", "steps")])
def test_computed_parameters_are_read_by_strided_slice(x_shape, y_shape, axes, starts, ends, steps,
                                                       computed):
    """Starts, ends and steps computed at run time reach STRIDED_SLICE as tensors (GATHERed to one
    entry per axis when only some axes are cut); its kernel resolves them as ONNX does."""
    if steps is None:
        computed = tuple(c for c in computed if c != "steps")
    model, feeds = _computed(x_shape, y_shape, axes, computed, starts, ends, steps)
    _, report = assert_matches_onnxruntime(model, feeds)
    assert report.op_counts.get("STRIDED_SLICE") == 1, report.op_counts


def test_computed_starts_of_conv_output():
    """A computed slice of an NCHW feature map: the transposes stay (their axes are not known
    when the begins are computed) and the values match."""
    model, feeds = _computed([1, 3, 6, 7], [1, 4, 2, 7], [2], ("starts", "ends"), [1], [3],
                             conv_channels=4)
    assert_matches_onnxruntime(model, feeds)


def test_computed_starts_without_a_known_output_shape_are_refused(tmp_path):
    """Without a declared output shape, shape inference cannot know what computed starts cut:
    the loader refuses in one line naming the output and the node."""
    from tests.test_validate import _assert_refused, _convert

    model, _ = _computed([1, 16], [1, 4], [1], ("starts", "ends"), [3], [7])
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", TensorProto.FLOAT, None))
    result, source, out = _convert(tmp_path, model)
    _assert_refused(result, source, model.SerializeToString(), out,
                    ["tensor 'y' (output of node 'slice' (Slice)) has no static shape"])


def test_computed_axes_are_refused_in_one_line(tmp_path):
    from tests.test_validate import _assert_refused, _convert

    model, _ = _computed([1, 16], [1, 4], [1], ("starts",), [3], [7])
    model.graph.input.append(helper.make_tensor_value_info("a", TensorProto.INT64, [1]))
    model.graph.node[0].input[3] = "a"
    result, source, out = _convert(tmp_path, model)
    _assert_refused(result, source, model.SerializeToString(), out,
                    ["node 'slice' (Slice): Slice axes (input 'a'): a graph input, fed at run time",
                     "make them an initializer"])
