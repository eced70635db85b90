"""LRN, InstanceNormalization, LayerNormalization and MeanVarianceNormalization against
onnxruntime, on 4-D (after a conv: must stay NHWC, no transposes) and 3-D inputs."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from qconvert.errors import ConversionError
from tests.harness import assert_matches_onnxruntime, convert_proto

RNG = np.random.default_rng(11)


def _model(op_type, x_shape, attrs=None, params=(), conv_before=False, outputs=("y",), opset=17,
           y_shape=None):
    """op_type(x, *params) with constant params; optionally a 1x1 Conv in front of it."""
    inits, nodes, src = [], [], "x"
    if conv_before:
        c = x_shape[1]
        inits.append(numpy_helper.from_array(RNG.standard_normal((c, c, 1, 1)).astype(np.float32), "cw"))
        nodes.append(helper.make_node("Conv", ["x", "cw"], ["c"]))
        src = "c"
    names = [src]
    for k, value in enumerate(params):
        inits.append(numpy_helper.from_array(np.asarray(value, np.float32), f"p{k}"))
        names.append(f"p{k}")
    nodes.append(helper.make_node(op_type, names, list(outputs), **(attrs or {})))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, y_shape if o == "y" else None)
                               for o in outputs],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _feeds(shape):
    return {"x": (RNG.standard_normal(shape) * 3 + 1).astype(np.float32)}


@pytest.mark.parametrize("size", [1, 3, 5])
def test_lrn_after_conv(size):
    model = _model("LRN", [2, 7, 4, 5], {"size": size, "alpha": 0.01, "beta": 0.6, "bias": 1.5},
                   conv_before=True, opset=13)
    _, report = assert_matches_onnxruntime(model, _feeds([2, 7, 4, 5]))
    assert report.op_counts.get("LOCAL_RESPONSE_NORMALIZATION") == 1 and report.transposes == 0


def test_lrn_even_size_is_an_error():
    with pytest.raises(ConversionError, match="even"):
        convert_proto(_model("LRN", [1, 6, 3, 4], {"size": 4}, opset=13))


@pytest.mark.parametrize("shape", [[2, 3, 4, 5], [2, 3, 7]])
def test_instance_norm(shape):
    c = shape[1]
    model = _model("InstanceNormalization", shape, {"epsilon": 1e-3},
                   params=[RNG.standard_normal(c), RNG.standard_normal(c)], conv_before=len(shape) == 4)
    _, report = assert_matches_onnxruntime(model, _feeds(shape))
    assert report.transposes == 0


@pytest.mark.parametrize("shape, axis", [([2, 3, 4, 5], 1), ([2, 3, 4, 5], -1), ([2, 6, 5], -1),
                                         ([2, 6, 5], 1)])
def test_layer_norm(shape, axis):
    normalized = shape[axis % len(shape):]
    model = _model("LayerNormalization", shape, {"axis": axis, "epsilon": 1e-4},
                   params=[RNG.standard_normal(normalized), RNG.standard_normal(normalized)],
                   conv_before=len(shape) == 4)
    _, report = assert_matches_onnxruntime(model, _feeds(shape))
    assert report.transposes == 0


def test_layer_norm_without_bias_with_mean_and_inv_std_outputs():
    model = _model("LayerNormalization", [3, 4, 6], {"axis": -1},
                   params=[RNG.standard_normal(6)], outputs=("y", "mean", "inv_std"))
    _, report = assert_matches_onnxruntime(model, _feeds([3, 4, 6]))
    assert "RSQRT" in report.op_counts


@pytest.mark.parametrize("shape, axis", [([2, 3, 4, 5], 1), ([2, 3, 4, 5], -1), ([2, 6, 5], -1),
                                         ([2, 6, 5], 0), ([3, 8], -2)])
def test_rms_normalization(shape, axis):
    """RMSNormalization (opset 23): after a conv too, where it runs in NHWC like LayerNormalization."""
    normalized = shape[axis % len(shape):]
    model = _model("RMSNormalization", shape, {"axis": axis, "epsilon": 1e-4},
                   params=[RNG.standard_normal(normalized)], conv_before=len(shape) == 4, opset=23)
    _, report = assert_matches_onnxruntime(model, _feeds(shape))
    assert report.transposes == 0 and "RSQRT" in report.op_counts


def test_rms_normalization_with_a_computed_scale_and_unit_scale():
    shape = [2, 3, 6]
    model = _computed_params("RMSNormalization", shape, [RNG.standard_normal(6)], (0,), opset=23)
    assert_matches_onnxruntime(model, _feeds_with_s(shape))
    _, report = assert_matches_onnxruntime(_model("RMSNormalization", shape, opset=23,
                                                  params=[np.ones(6)]), _feeds(shape))
    assert report.op_counts.get("MUL") == 2  # x * x and x * inv_std: no MUL by a scale of ones


def test_rms_normalization_refuses_an_axis_out_of_range():
    with pytest.raises(ConversionError, match="axis 3 is out of range"):
        convert_proto(_model("RMSNormalization", [2, 6, 5], {"axis": 3}, params=[np.ones(5)], opset=23,
                             y_shape=[2, 6, 5]))


def test_mean_variance_normalization():
    # ONNX shape inference does not see through this function op: the output shape is declared.
    model = _model("MeanVarianceNormalization", [2, 3, 4, 5], opset=13, conv_before=True,
                   y_shape=[2, 3, 4, 5])
    assert_matches_onnxruntime(model, _feeds([2, 3, 4, 5]))


# --- parameters computed at run time ------------------------------------------------------------
def _computed_params(op_type, x_shape, params, computed, attrs=None, conv_before=False, opset=17):
    """op_type(x, *params) where the parameters named in `computed` are worked out at run time
    from a second input "s" (shape [1]): param * s + 0.5, so that they are no constants."""
    model = _model(op_type, x_shape, attrs, params, conv_before=conv_before, opset=opset)
    graph, node = model.graph, model.graph.node[-1]
    graph.input.append(helper.make_tensor_value_info("s", TensorProto.FLOAT, [1]))
    graph.initializer.append(numpy_helper.from_array(np.array([0.5], np.float32), "half"))
    for k in computed:
        name = node.input[k + 1]
        graph.node.insert(0, helper.make_node("Mul", [name, "s"], [name + "_s"]))
        graph.node.insert(1, helper.make_node("Add", [name + "_s", "half"], [name + "_c"]))
        node.input[k + 1] = name + "_c"
    return model


def _feeds_with_s(shape):
    return {**_feeds(shape), "s": np.array([1.7], np.float32)}


@pytest.mark.parametrize("computed", [(0,), (1,), (0, 1)])
@pytest.mark.parametrize("shape", [[2, 3, 4, 5], [2, 3, 7]])
def test_instance_norm_with_computed_parameters(shape, computed):
    """A scale or bias computed at run time reaches TFLite's MUL/ADD as a tensor (RESHAPEd to
    one value per channel); after a conv the normalisation still runs in NHWC."""
    c = shape[1]
    model = _computed_params("InstanceNormalization", shape, [RNG.standard_normal(c), RNG.standard_normal(c)],
                             computed, {"epsilon": 1e-3}, conv_before=len(shape) == 4)
    assert_matches_onnxruntime(model, _feeds_with_s(shape))


@pytest.mark.parametrize("computed", [(0,), (1,), (0, 1)])
@pytest.mark.parametrize("axis", [-1, 1])
def test_layer_norm_with_computed_parameters(axis, computed):
    shape = [2, 3, 6]
    normalized = shape[axis:] if axis > 0 else shape[axis:]
    model = _computed_params("LayerNormalization", shape, [RNG.standard_normal(normalized),
                                                           RNG.standard_normal(normalized)],
                             computed, {"axis": axis})
    assert_matches_onnxruntime(model, _feeds_with_s(shape))


@pytest.mark.parametrize("computed", [(0,), (1,), (2,), (3,), (0, 1, 2, 3)])
@pytest.mark.parametrize("shape", [[2, 3, 4, 5], [2, 3, 7]])
def test_batch_norm_with_computed_parameters(shape, computed):
    """scale / sqrt(var + eps) and bias - mean * that are computed per channel by ops when any
    of the four parameters is computed at run time."""
    c = shape[1]
    params = [RNG.standard_normal(c), RNG.standard_normal(c), RNG.standard_normal(c),
              np.abs(RNG.standard_normal(c)) + 0.1]
    model = _computed_params("BatchNormalization", shape, params, computed, {"epsilon": 1e-3},
                             conv_before=len(shape) == 4, opset=15)
    _, report = assert_matches_onnxruntime(model, _feeds_with_s(shape))
    # After a conv one TRANSPOSE stays: sink_transposes moves a transpose through MUL/ADD only
    # when the other input is a constant or transposed too, not a computed [C, 1, 1] tensor.
    assert report.transposes == (1 if len(shape) == 4 else 0)


@pytest.mark.parametrize("conv_before", [False, True])
@pytest.mark.parametrize("opset,per_group", [(18, True), (21, False)])
def test_group_normalization(conv_before, opset, per_group):
    """Opset 18's scale and bias hold one value per group, opset 21's one per channel."""
    shape, groups = [2, 6, 5, 4], 3
    size = groups if per_group else shape[1]
    params = (RNG.uniform(0.5, 2, size), RNG.standard_normal(size))
    model = _model("GroupNormalization", shape, {"num_groups": groups, "epsilon": 1e-3}, params,
                   conv_before, opset=opset)
    assert_matches_onnxruntime(model, _feeds(shape), rtol=1e-4, atol=1e-4)


def test_group_normalization_refuses_groups_that_do_not_divide_the_channels():
    model = _model("GroupNormalization", [1, 6, 4, 4], {"num_groups": 4}, (np.ones(4), np.zeros(4)))
    with pytest.raises(ConversionError, match="num_groups 4 does not divide the 6 channels"):
        convert_proto(model)


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("axis", [1, -1])
def test_lp_normalization(p, axis):
    shape = [2, 5, 7]
    feeds = _feeds(shape)
    feeds["x"][0, :, 0] = 0  # a slice of zeros normalises to zeros
    feeds["x"][1, 0, :] = 0
    assert_matches_onnxruntime(_model("LpNormalization", shape, {"p": p, "axis": axis}), feeds)
