"""Resize and Upsample against onnxruntime: nearest and bilinear in the TFLite-expressible modes
(NHWC after a conv, no transpose left), op versions, and clear errors for the other modes."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from qconvert.errors import ConversionError
from qconvert.tflite import schema_generated as S
from tests.harness import assert_matches_onnxruntime, assert_refused_in_one_line, convert_proto

RNG = np.random.default_rng(7)
X_SHAPE = [2, 3, 5, 7]


def _op_versions(flatbuffer: bytes) -> dict[str, int]:
    names = {v: k for k, v in vars(S.BuiltinOperator).items() if not k.startswith("_")}
    model = S.Model.GetRootAs(flatbuffer, 0)
    codes = [model.OperatorCodes(i) for i in range(model.OperatorCodesLength())]
    return {names[max(c.BuiltinCode(), c.DeprecatedBuiltinCode())]: c.Version() for c in codes}


def _resize_model(attrs, scales=None, sizes=None, opset=13, conv=True, x_shape=X_SHAPE):
    """Conv (4 channels) -> Resize with constant scales or sizes."""
    inits, nodes, src = [], [], "x"
    channels = x_shape[1]
    if conv:
        w = RNG.standard_normal((4, channels, 3, 3)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, "w"))
        nodes.append(helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]))
        src, channels = "c", 4
    inits.append(numpy_helper.from_array(np.zeros(0, np.float32), "roi"))
    names = [src, "roi", "", ""]
    if scales is not None:
        inits.append(numpy_helper.from_array(np.array(scales, np.float32), "scales"))
        names[2] = "scales"
    if sizes is not None:
        inits.append(numpy_helper.from_array(np.array(sizes, np.int64), "sizes"))
        names[3] = "sizes"
    if opset < 11:
        names = [src, "scales"]
    nodes.append(helper.make_node("Resize", names, ["y"], **attrs))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _check(model, op_type, version):
    flatbuffer, report = assert_matches_onnxruntime(model)
    assert report.op_counts.get(op_type) == 1
    assert report.transposes == 0
    assert _op_versions(flatbuffer)[op_type] == version
    return flatbuffer


def test_nearest_x2_asymmetric_floor_after_conv():
    model = _resize_model({"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
                           "nearest_mode": "floor"}, scales=[1, 1, 2, 2])
    _check(model, "RESIZE_NEAREST_NEIGHBOR", 1)


def test_nearest_integer_scale_half_pixel_is_plain_floor():
    """For integer upscaling ONNX's default (half_pixel, round_prefer_floor) picks floor(x/s)."""
    model = _resize_model({"mode": "nearest"}, scales=[1, 1, 3, 2])
    _check(model, "RESIZE_NEAREST_NEIGHBOR", 1)


def test_nearest_fractional_scale_half_pixel_needs_half_pixel_centers():
    model = _resize_model({"mode": "nearest"}, sizes=[2, 4, 8, 12])
    _check(model, "RESIZE_NEAREST_NEIGHBOR", 3)


def test_nearest_align_corners_round_prefer_ceil_sizes():
    model = _resize_model({"mode": "nearest", "coordinate_transformation_mode": "align_corners",
                           "nearest_mode": "round_prefer_ceil"}, sizes=[2, 4, 9, 13])
    _check(model, "RESIZE_NEAREST_NEIGHBOR", 3)


def test_bilinear_half_pixel_after_conv():
    model = _resize_model({"mode": "linear"}, scales=[1, 1, 2, 2])
    _check(model, "RESIZE_BILINEAR", 3)


def test_bilinear_align_corners_odd_sizes():
    model = _resize_model({"mode": "linear", "coordinate_transformation_mode": "align_corners"},
                          sizes=[2, 4, 8, 11])
    _check(model, "RESIZE_BILINEAR", 1)


def test_bilinear_asymmetric_downscale():
    model = _resize_model({"mode": "linear", "coordinate_transformation_mode": "asymmetric"},
                          sizes=[2, 4, 3, 4], x_shape=[2, 3, 6, 8])
    _check(model, "RESIZE_BILINEAR", 1)


def test_pytorch_half_pixel_matches_half_pixel_when_no_side_is_one():
    model = _resize_model({"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"},
                          sizes=[2, 4, 10, 9])
    _check(model, "RESIZE_BILINEAR", 3)


def test_resize_opset10_nearest_and_linear():
    nearest = _resize_model({"mode": "nearest"}, scales=[1, 1, 2, 3], opset=10)
    _check(nearest, "RESIZE_NEAREST_NEIGHBOR", 1)
    linear = _resize_model({"mode": "linear"}, scales=[1, 1, 0.5, 0.5], opset=10, x_shape=[1, 3, 6, 8])
    _check(linear, "RESIZE_BILINEAR", 1)


@pytest.mark.parametrize("opset", [7, 9])
def test_upsample_nearest(opset):
    scales = np.array([1, 1, 2, 3], np.float32)
    if opset == 7:
        node = helper.make_node("Upsample", ["x"], ["y"], mode="nearest", scales=scales.tolist())
        inits = []
    else:
        node = helper.make_node("Upsample", ["x", "s"], ["y"], mode="nearest")
        inits = [numpy_helper.from_array(scales, "s")]
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, X_SHAPE)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    flatbuffer, report = assert_matches_onnxruntime(model)
    assert report.op_counts == {"RESIZE_NEAREST_NEIGHBOR": 1}


@pytest.mark.parametrize("attrs, sizes, scales, opset", [
    ({"mode": "cubic"}, [2, 4, 10, 14], None, 13),
    ({"mode": "cubic", "coordinate_transformation_mode": "align_corners"}, None, [1, 1, 2, 2], 13),
    ({"mode": "cubic", "cubic_coeff_a": -0.5, "exclude_outside": 1}, [2, 4, 3, 9], None, 13),
    ({"mode": "cubic", "antialias": 1}, [2, 4, 3, 4], None, 18),
    ({"mode": "linear", "antialias": 1}, None, [1, 1, 0.6, 0.5], 18),
    ({"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"}, [2, 4, 1, 14], None, 13),
    ({"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
      "nearest_mode": "round_prefer_ceil"}, [2, 4, 10, 14], None, 13),
    ({"mode": "nearest"}, [2, 8, 10, 14], None, 13),
])
def test_modes_no_tflite_resize_has_are_sampling_matrices(attrs, sizes, scales, opset):
    """Each resized axis is a FULLY_CONNECTED by ONNX's sampling matrix: cubic, antialiased,
    modes no TFLite flag pair samples like, and a resized channel axis."""
    flatbuffer, report = assert_matches_onnxruntime(
        _resize_model(attrs, sizes=sizes, scales=scales, opset=opset), rtol=1e-4, atol=1e-4)
    assert "FULLY_CONNECTED" in report.op_counts
    assert not {"RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR"} & set(report.op_counts)


@pytest.mark.parametrize("mode", ["linear", "nearest"])
def test_resize_of_a_sequence(mode):
    """A 3-D [N, C, L] resize (1-D audio or feature upsampling) along its last axis."""
    model = _resize_model({"mode": mode}, scales=[1, 1, 2.5], conv=False, x_shape=[1, 3, 8])
    assert_matches_onnxruntime(model, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("op_type,what,inputs,dtype,shape,opset", [
    ("Resize", "Resize scales", ["x", "", "p"], TensorProto.FLOAT, [4], 13),
    ("Resize", "Resize sizes", ["x", "", "", "p"], TensorProto.INT64, [4], 13),
    ("Resize", "Resize scales", ["x", "p"], TensorProto.FLOAT, [4], 10),
    ("Upsample", "Upsample scales", ["x", "p"], TensorProto.FLOAT, [4], 9),
])
def test_computed_scales_or_sizes_are_refused_in_one_line(tmp_path, op_type, what, inputs, dtype,
                                                          shape, opset):
    """Scales or sizes computed at run time (from the input "p"): the output's shape and ONNX's
    sampling positions follow from them. Refused naming the node, the input and what would make
    it convert, when the model declares the output's shape (else the loader refuses first)."""
    from tests.test_validate import _assert_refused, _convert

    graph = helper.make_graph(
        [helper.make_node(op_type, inputs, ["y"], name="resize")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4]),
         helper.make_tensor_value_info("p", dtype, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 8])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    result, source, out = _convert(tmp_path, model)
    _assert_refused(result, source, model.SerializeToString(), out,
                    [f"node 'resize' ({op_type}): {what} (input 'p'): a graph input, fed at run time",
                     "needs it constant", "make it an initializer"])


def test_cubic_align_corners_by_a_scale_the_readings_differ_on_is_refused_up_front():
    """align_corners by scale 1.5 on 5 rows: the spec divides by 5 x 1.5 - 1 = 6.5, onnxruntime by
    the 7 rows it writes - 1 = 6 (27 % apart once cubic): refused naming the node, before any
    conversion, rather than written and failing the check."""
    model = _resize_model({"mode": "cubic", "coordinate_transformation_mode": "align_corners"},
                          scales=[1, 1, 1.5, 1.7])
    assert_refused_in_one_line(model, "align_corners and scale 1.5 .size 5 -> 7.: the ONNX spec and "
                               "onnxruntime sample differently.*give the Resize sizes", node="Resize_1:y")


@pytest.mark.parametrize("sizes", [[2, 4, 7, 11], [2, 4, 3, 4]], ids=str)
def test_cubic_align_corners_by_sizes(sizes):
    assert_matches_onnxruntime(_resize_model({"mode": "cubic", "coordinate_transformation_mode":
                                              "align_corners"}, sizes=sizes), rtol=1e-4, atol=1e-4)


def test_a_scale_whose_float32_product_rounds_up_is_refused_up_front():
    """10 x 0.7f: the spec (and onnx's shape inference and reference) floor 6.99999988 to 6,
    onnxruntime floors the float32 product 7.0 to 7."""
    model = _resize_model({"mode": "linear", "antialias": 1}, scales=[1, 1, 1, 0.7], opset=18,
                          x_shape=[2, 3, 5, 10])
    assert_refused_in_one_line(model, r"scale 0.7 on axis 3 \(size 10\): the ONNX spec's output size "
                               r"is floor\(10 x 0.699999988079071\) = 6, onnxruntime's 7", node="Resize_1:y")


def test_antialias_at_0_7_of_width_10_by_sizes():
    model = _resize_model({"mode": "linear", "antialias": 1}, sizes=[2, 4, 5, 7], opset=18,
                          x_shape=[2, 3, 5, 10])
    flatbuffer, report = assert_matches_onnxruntime(model, rtol=1e-4, atol=1e-4)
    assert "FULLY_CONNECTED" in report.op_counts


def _crop_model(mode, extrapolation, roi, scales, x_shape=(1, 2, 6, 8), opset=13):
    node = helper.make_node("Resize", ["x", "roi", "scales"], ["y"], mode=mode,
                            coordinate_transformation_mode="tf_crop_and_resize",
                            extrapolation_value=extrapolation)
    inits = [numpy_helper.from_array(np.array(roi, np.float32), "roi"),
             numpy_helper.from_array(np.array(scales, np.float32), "scales")]
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


@pytest.mark.parametrize("extrapolation", [0.0, 2.5])
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("roi,scales", [
    ([0, 0, 0.2, -0.1, 1, 1, 0.9, 1.2], [1, 1, 1.5, 1.25]),  # a box past the input's right end
    ([0, 0, 0.25, 0.25, 1, 1, 0.75, 0.75], [1, 1, 1.5, 0.5]),  # the centre, inside
    ([0, 0, 0, 0.1, 1, 1, 1, 0.6], [1, 1, 0.5, 1.0 / 8]),  # to one column (the box's middle)
], ids=str)
def test_tf_crop_and_resize(mode, extrapolation, roi, scales):
    """Each axis a FULLY_CONNECTED by its sampling matrix, a zero row where a sample falls outside
    the input; extrapolation_value then ADDed where any axis's sample is outside."""
    flatbuffer, report = assert_matches_onnxruntime(_crop_model(mode, extrapolation, roi, scales),
                                                    rtol=1e-4, atol=1e-4)
    assert "FULLY_CONNECTED" in report.op_counts


def test_tf_crop_and_resize_of_a_box_on_an_axis_of_scale_1_is_refused():
    """The spec samples the box [0.25, 0.75] of the rows; onnxruntime copies an axis of scale 1."""
    model = _crop_model("linear", 0.0, [0, 0, 0.25, 0, 1, 1, 0.75, 1], [1, 1, 1, 0.5])
    assert_refused_in_one_line(model, r"box \[0.25, 0.75\] on axis 2 of scale 1: the ONNX spec "
                               "samples the box, onnxruntime leaves an axis of scale 1 as it is")


def test_tf_crop_and_resize_with_a_run_time_roi_is_refused():
    node = helper.make_node("Resize", ["x", "roi", "scales"], ["y"], name="crop",
                            coordinate_transformation_mode="tf_crop_and_resize")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 6, 8]),
                                            helper.make_tensor_value_info("roi", TensorProto.FLOAT, [8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 6, 8])],
                              [numpy_helper.from_array(np.ones(4, np.float32), "scales")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    assert_refused_in_one_line(model, "Resize roi .input 'roi'.: a graph input.*make it an initializer",
                               node="crop")
