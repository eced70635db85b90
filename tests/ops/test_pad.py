"""Pad -> PAD / PADV2 / MIRROR_PAD (and compositions for edge and wrap): every mode, cropping,
both opset forms, axes, and transposes moving through pads of NCHW feature maps."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from qconvert.errors import ConversionError
from qconvert.ir import Model, Operator
from qconvert.ops.registry import TFLITE_OPS
from tests.harness import assert_matches_onnxruntime, conv_in_front, convert_proto


def _model(x_shape, pads, mode="constant", value=None, axes=None, opset=18, conv_channels=None,
           dtype=TensorProto.FLOAT):
    """x -> [Conv 3x3 pad 1] -> Pad(pads, value, axes) -> y."""
    inits, nodes, data = [], [], "x"
    if conv_channels:
        conv, weights = conv_in_front(x_shape, conv_channels)
        nodes.append(conv)
        inits.append(weights)
        data = "fm"
    if opset < 11:
        nodes.append(helper.make_node("Pad", [data], ["y"], mode=mode, pads=pads, value=value or 0.0))
    else:
        names = [data, "pads"]
        inits.append(numpy_helper.from_array(np.array(pads, np.int64), "pads"))
        if value is not None or axes is not None:
            names.append("value" if value is not None else "")
            if value is not None:
                np_dtype = helper.tensor_dtype_to_np_dtype(dtype)
                inits.append(numpy_helper.from_array(np.array(value, np_dtype), "value"))
        if axes is not None:
            names.append("axes")
            inits.append(numpy_helper.from_array(np.array(axes, np.int64), "axes"))
        nodes.append(helper.make_node("Pad", names, ["y"], mode=mode))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", dtype, x_shape)],
                              [helper.make_tensor_value_info("y", dtype, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _feeds(shape, dtype=np.float32):
    rng = np.random.default_rng(0)
    return {"x": (rng.standard_normal(shape) * 10).astype(dtype)}


@pytest.mark.parametrize("mode,value,op", [("constant", None, "PAD"), ("constant", 1.5, "PADV2"),
                                           ("reflect", None, "MIRROR_PAD")])
def test_pad_of_conv_output_leaves_no_transpose(mode, value, op):
    model = _model([1, 3, 6, 7], [0, 1, 2, 1, 0, 2, 1, 2], mode, value, conv_channels=4)
    _, report = assert_matches_onnxruntime(model, _feeds([1, 3, 6, 7]))
    assert report.op_counts.get(op) == 1, report.op_counts
    assert "TRANSPOSE" not in report.op_counts, report.op_counts


@pytest.mark.parametrize("mode", ["edge", "wrap"])
def test_composed_modes_of_conv_output_leave_no_transpose(mode):
    model = _model([1, 3, 5, 6], [0, 0, 2, 1, 0, 0, 1, 3], mode, conv_channels=4)
    _, report = assert_matches_onnxruntime(model, _feeds([1, 3, 5, 6]))
    assert "TRANSPOSE" not in report.op_counts, report.op_counts


@pytest.mark.parametrize("pads", [[2, 0, 1, 1, 3, 2], [0, 3, 0, 0, 2, 1]])
def test_reflect_pad_plain_tensor(pads):
    _, report = assert_matches_onnxruntime(_model([3, 4, 5], pads, "reflect"), _feeds([3, 4, 5]))
    assert report.op_counts == {"MIRROR_PAD": 1}


def test_reflect_pad_as_wide_as_allowed():
    assert_matches_onnxruntime(_model([2, 5], [0, 4, 1, 4], "reflect"), _feeds([2, 5]))


def test_reflect_pad_wider_than_the_axis_is_rejected():
    with pytest.raises(ConversionError, match="reflect"):
        convert_proto(_model([2, 5], [0, 5, 0, 0], "reflect", opset=13))


@pytest.mark.parametrize("pads", [[1, 0, 3, 2], [4, 2, 9, 7]])
def test_edge_and_wrap_plain_tensor_with_pads_wider_than_the_axis(pads):
    for mode in ("edge", "wrap"):
        assert_matches_onnxruntime(_model([3, 4], pads, mode, opset=19), _feeds([3, 4]))


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_negative_pads_crop_first(mode):
    pads = [0, -1, 2, 1, -1, 3, -1, 1]
    assert_matches_onnxruntime(_model([2, 5, 7, 4], pads, mode, opset=19), _feeds([2, 5, 7, 4]))


def test_only_negative_pads_is_a_slice():
    _, report = assert_matches_onnxruntime(_model([4, 6], [-1, 0, -2, -3]), _feeds([4, 6]))
    assert report.op_counts == {"SLICE": 1}


def test_opset2_attributes_with_value():
    model = _model([2, 3, 4], [0, 1, 2, 1, 0, 1], value=-2.5, opset=2)
    _, report = assert_matches_onnxruntime(model, _feeds([2, 3, 4]))
    assert report.op_counts == {"PADV2": 1}


def test_axes_input_pads_only_those_axes():
    model = _model([2, 3, 4, 5], [1, 2, 3, 0], axes=[-1, 1], value=0.0)
    _, report = assert_matches_onnxruntime(model, _feeds([2, 3, 4, 5]))
    assert report.op_counts == {"PAD": 1}


def test_int64_tensor_with_value():
    model = _model([3, 4], [1, 0, 0, 2], value=7, dtype=TensorProto.INT64, opset=13)
    assert_matches_onnxruntime(model, _feeds([3, 4], np.int64))


def test_zero_pads_are_removed():
    _, report = convert_proto(_model([3, 4], [0, 0, 0, 0]))
    assert "PAD" not in report.op_counts


def test_versions_and_evaluate():
    model = Model()
    x5 = model.add_array("x5", (1, 2, 3, 4, 5), np.float32)
    x4 = model.add_array("x4", (1, 2, 3, 4), np.float32)
    assert TFLITE_OPS["PAD"].version(Operator("PAD", [x5, ""], []), model) == 4
    assert TFLITE_OPS["PADV2"].version(Operator("PADV2", [x4, "", ""], []), model) == 1
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    paddings = np.array([[1, 0], [0, 2]], np.int32)
    [got] = TFLITE_OPS["PADV2"].evaluate([x, paddings, np.array(9, np.float32)], Operator("PADV2", [], []))
    np.testing.assert_array_equal(got, np.pad(x, paddings, constant_values=9))
    [got] = TFLITE_OPS["MIRROR_PAD"].evaluate([x, paddings], Operator("MIRROR_PAD", [], [], {"mode": "REFLECT"}))
    np.testing.assert_array_equal(got, np.pad(x, paddings, mode="reflect"))


# --- inputs computed at run time ----------------------------------------------------------------
def _computed(x_shape, pads, mode="constant", conv_channels=None, computed=("value",), y_shape=None):
    """Pad whose inputs named in `computed` ("value", "pads") are worked out at run time from x:
    the value is ReduceMin(x), the pads `pads` + Cast(0 * ReduceMin(x)) (so `pads` at run time);
    `y_shape` declares the output's shape (shape inference cannot know it from computed pads)."""
    model = _model(x_shape, pads, mode, value=0.0, conv_channels=conv_channels)
    graph, pad = model.graph, model.graph.node[-1]
    data = pad.input[0]
    extra = [helper.make_node("ReduceMin", [data], ["lowest"], keepdims=0)]
    if "value" in computed:
        pad.input[2] = "lowest"
    if "pads" in computed:
        extra += [helper.make_node("Mul", ["lowest", "zero"], ["nothing"]),
                  helper.make_node("Cast", ["nothing"], ["nothing64"], to=TensorProto.INT64),
                  helper.make_node("Add", ["pads", "nothing64"], ["pads_computed"])]
        graph.initializer.append(numpy_helper.from_array(np.array(0, np.float32), "zero"))
        pad.input[1] = "pads_computed"
    pad.name = "pad"
    for node in extra:  # in order, in front of the Pad
        graph.node.insert(len(graph.node) - 1, node)
    if y_shape is not None:
        graph.output[0].CopyFrom(helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape))
    return model


@pytest.mark.parametrize("conv_channels", [None, 4])
def test_computed_constant_value_is_read_by_padv2(conv_channels):
    """A pad value computed at run time (here the input's minimum) is the tensor PADV2 reads;
    after a conv the pad still runs in NHWC."""
    model = _computed([1, 3, 5, 6], [0, 0, 2, 1, 0, 0, 1, 3], conv_channels=conv_channels)
    _, report = assert_matches_onnxruntime(model, _feeds([1, 3, 5, 6]))
    assert report.op_counts.get("PADV2") == 1, report.op_counts
    assert "TRANSPOSE" not in report.op_counts, report.op_counts


def test_computed_constant_value_is_not_needed_by_reflect():
    model = _computed([1, 3, 5, 6], [0, 0, 2, 1, 0, 0, 1, 3], mode="reflect")
    _, report = assert_matches_onnxruntime(model, _feeds([1, 3, 5, 6]))
    assert report.op_counts.get("MIRROR_PAD") == 1, report.op_counts


def test_computed_constant_value_runs_int8(tmp_path):
    """PADV2 is a same-scale op: x and the computed value share the output's params."""
    from tests.harness import assert_int8_matches_onnxruntime

    model = _computed([1, 3, 5, 6], [0, 0, 2, 1, 0, 0, 1, 3], conv_channels=4)
    _, report = assert_int8_matches_onnxruntime(model, tmp_path)
    assert report.op_counts.get("PADV2") == 1, report.op_counts


@pytest.mark.parametrize("mode", ["constant", "reflect"])
def test_computed_pads_without_a_declared_shape_are_refused_in_one_line(tmp_path, mode):
    """Pads computed at run time give the output a shape only they know: without a declared
    output shape the loader refuses, naming the output and the node."""
    from tests.test_validate import _assert_refused, _convert

    model = _computed([1, 3, 5, 6], [0, 0, 2, 1, 0, 0, 1, 3], mode=mode, computed=("pads",))
    result, source, out = _convert(tmp_path, model)
    _assert_refused(result, source, model.SerializeToString(), out,
                    ["tensor 'y' (output of node 'pad' (Pad)) has no static shape"])


def test_computed_pads_with_a_declared_shape_pad_then_slice():
    """Constant-mode pads computed at run time (the output's shape declared): a constant margin,
    then SLICE at the computed begin (tests/ops/test_runtime_operand_clamping.py: every sign)."""
    model = _computed([1, 3, 5, 6], [0, 0, 2, 1, 0, 0, 1, 3], computed=("pads",), y_shape=[1, 3, 8, 10])
    _, report = assert_matches_onnxruntime(model, _feeds([1, 3, 5, 6]))
    assert report.op_counts.get("SLICE") == 1 and report.op_counts.get("PAD") == 1, report.op_counts


def test_computed_reflect_pads_are_refused_in_one_line(tmp_path):
    """Reflect pads computed at run time: negative ones would crop with a SLICE of computed
    size; refused by the importer, naming the node, the input and what would make it convert."""
    from tests.test_validate import _assert_refused, _convert

    model = _computed([1, 3, 5, 6], [0, 0, 2, 1, 0, 0, 1, 3], mode="reflect", computed=("pads",),
                      y_shape=[1, 3, 8, 10])
    result, source, out = _convert(tmp_path, model)
    _assert_refused(result, source, model.SerializeToString(), out,
                    ["node 'pad' (Pad)", "reflect padding with pads (input 'pads_computed') computed "
                     "at run time", "TFLite's tensors need static shapes", "make the pads an initializer"])
