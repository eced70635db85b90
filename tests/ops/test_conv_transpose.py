"""ConvTranspose against onnxruntime: strides, pads (SAME or VALID + crop), output_padding,
output_shape, auto_pad, bias, groups, dilations, 1-D; op versions and the emitted op mix."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from qconvert.errors import ConversionError
from tests.harness import assert_int8_matches_onnxruntime, assert_matches_onnxruntime, convert_proto
from tests.ops.test_resize import _op_versions

RNG = np.random.default_rng(3)


def _model(attrs, x_shape=(2, 4, 5, 6), out_channels=6, kernel=(3, 3), group=1, bias=True,
           conv_before=False):
    cin = x_shape[1]
    inits = [numpy_helper.from_array(
        RNG.standard_normal((cin, out_channels // group) + tuple(kernel)).astype(np.float32), "w")]
    inputs = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(RNG.standard_normal(out_channels).astype(np.float32), "b"))
        inputs.append("b")
    nodes = []
    if conv_before:
        inits.append(numpy_helper.from_array(
            RNG.standard_normal((cin, cin, 1, 1)).astype(np.float32), "cw"))
        nodes.append(helper.make_node("Conv", ["x", "cw"], ["c"]))
        inputs[0] = "c"
    nodes.append(helper.make_node("ConvTranspose", inputs, ["y"], group=group, **attrs))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def test_stride2_pads_output_padding_bias_crops_a_valid_result():
    """PyTorch's k3 s2 p1 op1 upsampler: SAME's pad differs, so VALID then SLICE."""
    model = _model({"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]},
                   conv_before=True)
    flatbuffer, report = assert_matches_onnxruntime(model)
    assert report.op_counts.get("TRANSPOSE_CONV") == 1 and report.op_counts.get("SLICE") == 1
    assert report.transposes == 0
    assert _op_versions(flatbuffer)["TRANSPOSE_CONV"] == 3  # with bias


def test_stride2_kernel4_pad1_is_same_without_crop():
    flatbuffer, report = assert_matches_onnxruntime(_model(
        {"strides": [2, 2], "pads": [1, 1, 1, 1]}, kernel=(4, 4), bias=False))
    assert report.op_counts == {"TRANSPOSE_CONV": 1}
    assert _op_versions(flatbuffer)["TRANSPOSE_CONV"] == 1  # no bias


@pytest.mark.parametrize("attrs", [
    {"strides": [3, 2], "pads": [1, 2, 0, 1]},
    {"strides": [2, 3], "output_padding": [1, 2]},
    {"strides": [2, 2], "auto_pad": "SAME_UPPER"},
    {"strides": [2, 2], "auto_pad": "SAME_LOWER"},
    {"strides": [3, 2], "output_shape": [14, 13]},
    {"strides": [2, 2], "dilations": [2, 3], "pads": [1, 0, 2, 1]},
])
def test_padding_variants(attrs):
    assert_matches_onnxruntime(_model(attrs))


def test_grouped_and_depthwise():
    assert_matches_onnxruntime(_model({"strides": [2, 2], "pads": [1, 1, 1, 1]}, group=2))
    assert_matches_onnxruntime(_model({"strides": [2, 1]}, group=4, out_channels=8))


def test_one_d():
    model = _model({"strides": [2], "pads": [1, 0], "output_padding": [1]}, x_shape=(2, 4, 7),
                   kernel=(3,))
    assert_matches_onnxruntime(model)


def test_three_d_is_an_error():
    with pytest.raises(ConversionError, match="3D transposed convolution"):
        convert_proto(_model({}, x_shape=(1, 4, 3, 4, 5), kernel=(2, 2, 2)))


def test_batch_norm_and_relu_fold_into_the_transpose_conv():
    model = _model({"strides": [2, 2], "pads": [1, 1, 1, 1]}, kernel=(4, 4), bias=False)
    graph = model.graph
    graph.node[-1].output[0] = "t"
    channels = 6
    for name, value in [("s", RNG.random(channels) + 0.5), ("sh", RNG.standard_normal(channels)),
                        ("m", RNG.standard_normal(channels)), ("v", RNG.random(channels) + 0.5)]:
        graph.initializer.append(numpy_helper.from_array(value.astype(np.float32), name))
    graph.node.extend([helper.make_node("BatchNormalization", ["t", "s", "sh", "m", "v"], ["bn"]),
                       helper.make_node("Relu", ["bn"], ["y"])])
    flatbuffer, report = assert_matches_onnxruntime(model)
    assert report.op_counts == {"TRANSPOSE_CONV": 1}
    assert _op_versions(flatbuffer)["TRANSPOSE_CONV"] == 4  # fused activation


# --- kernel = stride, unpadded: CONV_2D 1x1 + DEPTH_TO_SPACE ----------------------------------
@pytest.mark.parametrize("attrs,kwargs,ops", [
    ({"strides": [2, 2]}, {"kernel": (2, 2)}, {"CONV_2D": 1, "DEPTH_TO_SPACE": 1}),
    ({"strides": [3, 3]}, {"kernel": (3, 3), "bias": False}, {"CONV_2D": 1, "DEPTH_TO_SPACE": 1}),
    ({"strides": [4]}, {"x_shape": (2, 4, 7), "kernel": (4,)}, {"CONV_2D": 1, "RESHAPE": 3}),  # 1-D
], ids=["2x2", "3x3_no_bias", "1d"])
def test_a_kernel_equal_to_its_stride_writes_blocks(attrs, kwargs, ops):
    """Each input pixel writes its own block: a 1x1 CONV_2D to kh*kw*O channels laid out by
    DEPTH_TO_SPACE (a unit-height kernel by a RESHAPE), no output-shape constant."""
    flatbuffer, report = assert_matches_onnxruntime(_model(attrs, **kwargs))
    assert {k: v for k, v in report.op_counts.items() if k != "TRANSPOSE"} == ops, report.op_counts


def test_blocks_take_a_relu_and_int8(tmp_path):
    """The block form under a following Relu and --quantize (int8 CONV_2D and DEPTH_TO_SPACE)
    against onnxruntime."""
    model = _model({"strides": [2, 2]}, kernel=(2, 2))
    model.graph.node[-1].output[0] = "t"
    model.graph.node.append(helper.make_node("Relu", ["t"], ["y"]))
    flatbuffer, report = assert_matches_onnxruntime(model)
    assert "TRANSPOSE_CONV" not in report.op_counts
    assert_int8_matches_onnxruntime(model, tmp_path)


# --- weights or bias computed at run time -------------------------------------------------------
def _computed(parameters, attrs, **kwargs):
    """_model's ConvTranspose with the parameters named in `parameters` ("w", "b") computed at
    run time: multiplied by a second input s [1]."""
    model = _model(attrs, **kwargs)
    graph, node = model.graph, model.graph.node[-1]
    node.name = "deconv"
    graph.input.append(helper.make_tensor_value_info("s", TensorProto.FLOAT, [1]))
    for k, name in enumerate(["w", "b"]):
        if name in parameters:
            graph.node.insert(0, helper.make_node("Mul", [name, "s"], [name + "_s"]))
            node.input[k + 1] = name + "_s"
    return model


def _computed_feeds(model):
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    return {"x": RNG.standard_normal(shape).astype(np.float32), "s": np.array([0.8], np.float32)}


COMPUTED = [
    ({"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]}, {}),  # VALID + crop
    ({"strides": [2, 2], "auto_pad": "SAME_UPPER"}, {"conv_before": True}),
    ({"strides": [2, 2]}, {"group": 2}),
    ({"strides": [2]}, {"x_shape": (1, 4, 7), "kernel": (3,)}),  # 1-D
    ({"strides": [2, 1], "dilations": [2, 3]}, {"group": 2}),  # PADs dilate the weights
    ({"dilations": [2]}, {"x_shape": (1, 4, 7), "kernel": (3,)}),
]


@pytest.mark.parametrize("attrs,kwargs", COMPUTED, ids=["crop", "same", "grouped", "1d", "dilated", "dilated-1d"])
@pytest.mark.parametrize("parameters", ["w", "b", "wb"])
def test_computed_weights_or_bias_are_read_as_tensors(attrs, kwargs, parameters):
    """TRANSPOSE_CONV takes weights and a bias computed at run time (a TRANSPOSE lays the weights
    out as [O, kh, kw, I]; a grouped one SPLITs them per group; PADs dilate them)."""
    model = _computed(parameters, attrs, **kwargs)
    _, report = assert_matches_onnxruntime(model, _computed_feeds(model), rtol=1e-4, atol=1e-4)
    assert report.op_counts.get("TRANSPOSE_CONV") == kwargs.get("group", 1), report.op_counts


def test_computed_weights_stay_float_under_quantize(tmp_path):
    """The int8 TRANSPOSE_CONV needs constant weights: the op stays float, saying why."""
    from tests.harness import calibration_set, convert_quantized

    model = _computed("w", {"strides": [2, 2]})
    calibration = calibration_set(model)
    calibration["s"] = abs(calibration["s"]) + 0.5
    _, report = convert_quantized(model, calibration, tmp_path)
    reasons = {f.op: f.reason for f in report.quantization.float_ops}
    assert any("TRANSPOSE_CONV" in op and "are not a float32 constant" in reason
               for op, reason in reasons.items()), reasons
