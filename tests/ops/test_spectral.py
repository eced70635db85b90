"""DFT and STFT (qconvert/ops/spectral.py) against onnxruntime: forward and inverse, real and
complex signals, one-sided spectra and their real inverse (irfft), dft_length padding and
truncating, every axis, opset 17's attribute axis and opset 20's input, STFT with no window, a
constant window and a window fed at run time; one-line refusals of what cannot convert."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from qconvert.tflite import reader
from tests.harness import assert_matches_onnxruntime, assert_refused_in_one_line, make_model

RNG = np.random.default_rng(17)
F, I64 = TensorProto.FLOAT, TensorProto.INT64


def dft_model(shape, opset=20, axis=None, length=None, **attrs):
    inputs, inits = ["x"], {}
    if length is not None:
        inits["n"] = np.array(length, np.int64)
    inputs.append("n" if length is not None else "")
    if axis is not None and opset >= 20:
        inits["axis"] = np.array(axis, np.int64)
        inputs.append("axis")
    elif axis is not None:
        attrs["axis"] = axis
    node = helper.make_node("DFT", inputs, ["y"], **attrs)
    return make_model([node], {"x": (F, shape)}, {"y": F}, inits, opset=opset)


@pytest.mark.parametrize("shape,axis,length,inverse,onesided", [
    ((2, 16, 1), None, None, 0, 0),  # opset 20's default axis -2
    ((2, 16, 1), 1, None, 0, 1),  # rfft
    ((2, 15, 2), 1, None, 0, 0),  # complex, odd length
    ((2, 15, 2), 1, None, 1, 0),  # inverse
    ((1, 9, 3, 2), 1, None, 1, 1),  # irfft of a one-sided spectrum, even output
    ((1, 8, 3, 2), 1, 15, 1, 1),  # irfft, odd dft_length
    ((1, 5, 3, 2), 1, 15, 1, 1),  # irfft of fewer bins than the length has
    ((1, 5, 7, 1), 2, None, 0, 0),  # inner axis: transposes around the product
    ((1, 5, 7, 1), -3, None, 0, 1),
    ((3, 10, 1), 1, 16, 0, 0),  # zero padded
    ((3, 10, 2), 1, 6, 0, 0),  # truncated
    ((3, 10, 1), 1, 7, 0, 1),
    ((3, 8, 1), 1, None, 1, 0),  # inverse of a real signal
    ((16, 1), None, None, 0, 1),  # rank 2: one signal, no batch
], ids=str)
def test_dft_matches_onnxruntime(shape, axis, length, inverse, onesided):
    model = dft_model(shape, axis=axis, length=length, inverse=inverse, onesided=onesided)
    flatbuffer, _ = assert_matches_onnxruntime(model, rtol=1e-4, atol=1e-4)
    assert "FULLY_CONNECTED" in [op.name for op in reader.read(flatbuffer).operators]


@pytest.mark.parametrize("axis", [1, 2])
def test_dft_opset17_attribute_axis(axis):
    model = dft_model((2, 8, 6, 1), opset=17, axis=axis, onesided=1)
    assert_matches_onnxruntime(model, rtol=1e-4, atol=1e-4)


def stft_model(signal, step, frame_length=None, window=None, window_input=False, onesided=1):
    inits = {"step": np.array(step, np.int64)}
    inputs = {"x": (F, signal)}
    names = ["x", "step", "", ""]
    if window is not None:
        names[2] = "window"
        if window_input:
            inputs["window"] = (F, window.shape)
        else:
            inits["window"] = window
    if frame_length is not None:
        names[3] = "frame_length"
        inits["frame_length"] = np.array(frame_length, np.int64)
    node = helper.make_node("STFT", names, ["y"], onesided=onesided)
    return make_model([node], inputs, {"y": F}, inits, opset=17)


def test_stft_without_window():
    assert_matches_onnxruntime(stft_model((2, 64, 1), 8, frame_length=16), rtol=1e-4, atol=1e-4)


def test_stft_with_constant_hann_window_two_sided():
    window = np.hanning(20).astype(np.float32)
    assert_matches_onnxruntime(stft_model((1, 100, 1), 5, window=window, onesided=0),
                               rtol=1e-4, atol=1e-4)


def test_stft_with_window_fed_at_run_time():
    model = stft_model((1, 50, 2), 4, window=np.ones(12, np.float32), window_input=True, onesided=0)
    feeds = {"x": RNG.standard_normal((1, 50, 2)).astype(np.float32),
             "window": RNG.uniform(0, 1, 12).astype(np.float32)}
    flatbuffer, _ = assert_matches_onnxruntime(model, feeds, rtol=1e-4, atol=1e-4)
    assert "MUL" in [op.name for op in reader.read(flatbuffer).operators]


def test_dft_length_computed_at_run_time_is_refused():
    node = helper.make_node("DFT", ["x", "n"], ["y"])
    model = make_model([node], {"x": (F, (1, 8, 1)), "n": (I64, ())}, {"y": F}, opset=20)
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", F, [1, 8, 2]))
    assert_refused_in_one_line(model, "dft_length .*graph input")


def test_irfft_of_more_bins_than_the_length_has_is_refused():
    assert_refused_in_one_line(dft_model((1, 9, 2), axis=1, length=12, inverse=1, onesided=1),
                               "one-sided inverse of 9 bins to dft_length 12")


def test_dft_too_long_is_refused():
    assert_refused_in_one_line(dft_model((1, 6000, 1)), "6000-point DFT composes a 12000x6000 matrix")


def test_stft_without_onesided_attribute_is_one_sided():
    """onnx 1.23's shape inference reads an absent onesided as 0, the op (and onnxruntime) as 1:
    the loader spells the default out before inference."""
    model = stft_model((1, 64, 1), 8, frame_length=16)
    del model.graph.node[0].attribute[:]
    assert_matches_onnxruntime(model, rtol=1e-4, atol=1e-4)


def test_stft_keeps_a_dynamic_batch_resizable():
    """The frames' GATHER and the product keep the batch on axis 0: the .tflite resizes to
    batch 3 and matches onnxruntime there."""
    from tests.test_dynamic_batch import assert_resizes_to_the_feeds_batch

    model = stft_model((1, 64, 1), 8, frame_length=16)
    model.graph.input[0].CopyFrom(helper.make_tensor_value_info("x", F, ["N", 64, 1]))
    assert_resizes_to_the_feeds_batch(model, {"x": RNG.standard_normal((3, 64, 1)).astype(np.float32)})