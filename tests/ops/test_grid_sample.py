"""GridSample (qconvert/ops/grid_sample.py) against onnxruntime: linear, nearest and cubic
sampling, zeros, border and reflection padding, align_corners both ways, grids reaching well
outside the input (so padding decides), 3-D (volumetric) sampling, opset 16's mode names and
opset 20's; one-line refusals of what cannot convert."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.harness import assert_matches_onnxruntime, assert_refused_in_one_line, make_model

RNG = np.random.default_rng(16)
F = TensorProto.FLOAT


def grid_sample_model(x_shape, grid_shape, opset=20, **attrs):
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], **attrs)
    return make_model([node], {"x": (F, x_shape), "grid": (F, grid_shape)}, {"y": F}, opset=opset)


def feeds(x_shape, grid_shape, reach=1.6):
    """Grid positions uniform in [-reach, reach]: some outside the input, where padding decides."""
    return {"x": RNG.standard_normal(x_shape).astype(np.float32),
            "grid": RNG.uniform(-reach, reach, grid_shape).astype(np.float32)}


@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [0, 1])
@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
def test_grid_sample_2d(mode, padding_mode, align_corners):
    x_shape, grid_shape = (2, 3, 5, 7), (2, 4, 6, 2)
    model = grid_sample_model(x_shape, grid_shape, mode=mode, padding_mode=padding_mode,
                              align_corners=align_corners)
    assert_matches_onnxruntime(model, feeds(x_shape, grid_shape, reach=3.5), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("mode", ["linear", "nearest"])
def test_grid_sample_3d(mode, padding_mode):
    x_shape, grid_shape = (1, 2, 3, 4, 5), (1, 2, 3, 4, 3)
    model = grid_sample_model(x_shape, grid_shape, mode=mode, padding_mode=padding_mode)
    assert_matches_onnxruntime(model, feeds(x_shape, grid_shape), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
def test_grid_sample_opset16_mode_names(mode):
    x_shape, grid_shape = (1, 2, 4, 4), (1, 3, 3, 2)
    model = grid_sample_model(x_shape, grid_shape, opset=16, mode=mode)
    assert_matches_onnxruntime(model, feeds(x_shape, grid_shape), rtol=1e-4, atol=1e-4)


def test_nearest_rounds_half_to_even_like_onnxruntime():
    """Positions exactly halfway between pixels: round-half-even picks 0, 2, 2, 4."""
    x_shape, grid_shape = (1, 1, 1, 6), (1, 1, 4, 2)
    model = grid_sample_model(x_shape, grid_shape, mode="nearest", align_corners=1)
    xs = np.array([0.5, 1.5, 2.5, 3.5], np.float32) / 5 * 2 - 1
    grid = np.stack([xs, np.zeros(4, np.float32)], axis=-1).reshape(grid_shape).astype(np.float32)
    assert_matches_onnxruntime(model, {"x": np.arange(6, dtype=np.float32).reshape(x_shape),
                                       "grid": grid}, rtol=0, atol=0)


def test_constant_grid_folds_to_constant_indices_and_weights():
    """A fixed warp (the grid an initializer): only the GATHER, the weighting and the sum remain."""
    from qconvert.tflite import reader

    x_shape, grid_shape = (2, 3, 5, 7), (2, 4, 6, 2)
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], padding_mode="reflection")
    grid = RNG.uniform(-1.5, 1.5, grid_shape).astype(np.float32)
    model = make_model([node], {"x": (F, x_shape)}, {"y": F}, {"grid": grid}, opset=20)
    flatbuffer, _ = assert_matches_onnxruntime(model, rtol=1e-4, atol=1e-4)
    ops = [op.name for op in reader.read(flatbuffer).operators]
    assert not {"FLOOR", "FLOOR_MOD", "CAST", "REDUCE_PROD"} & set(ops), ops


def test_grid_that_does_not_match_the_input_is_refused():
    model = grid_sample_model((1, 2, 4, 4), (1, 3, 3, 3))
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", F, [1, 2, 3, 3]))
    assert_refused_in_one_line(model, "does not sample input")


def test_grid_sample_keeps_a_dynamic_batch_resizable():
    """Its GATHER reads each sample's map with batch_dims 1: the batch stays axis 0, so the
    .tflite resizes to batch 3 and matches onnxruntime there."""
    from tests.test_dynamic_batch import assert_resizes_to_the_feeds_batch

    model = grid_sample_model((1, 2, 5, 6), (1, 4, 3, 2), mode="linear")
    model.graph.input[0].CopyFrom(helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, 5, 6]))
    model.graph.input[1].CopyFrom(helper.make_tensor_value_info("grid", TensorProto.FLOAT, ["N", 4, 3, 2]))
    assert_resizes_to_the_feeds_batch(model, feeds((3, 2, 5, 6), (3, 4, 3, 2)))
