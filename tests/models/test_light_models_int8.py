"""The onnx package's light models (tests/models/randomize.py gives them seeded random weights)
quantized with --quantize: the written bytes hold int8 CONV_2D / DEPTHWISE_CONV_2D /
FULLY_CONNECTED ops by the TFLite int8 spec, and the int8 model's logits in ai-edge-litert stay
close to the float model's in onnxruntime on held-out inputs.

One test per model does both checks on one conversion: the big models take seconds to randomize,
calibrate and quantize, and with pytest-xdist's default scheduling a cache shared by two tests
would not be shared across workers.

Accuracy floors (measured with the calibration and held-out counts below, SQNR of the int8 output
against onnxruntime's float output, all held-out samples pooled):
- logits: 29.8 dB (vgg19) to 34.6 dB (squeezenet); the floor is 25 dB. Dozens of int8 layers each
  add rounding noise some 40 dB under their signal, which sums to roughly 30 dB at the logits; a
  layout, per-channel scale or bias-scale bug drops the SQNR to about 0 dB (max-pool padding
  that widened a range to the lowest float gave 0.1 to 0.6 dB on resnet50/shufflenet/densenet).
- softmax probabilities: 15.9 dB (vgg19, whose near-tied logits the softmax sharpens) to 29.5 dB;
  the floor is 12 dB. squeezenet's softmax is int8 (a RESHAPE follows it, so it does not write the
  model output) and its fixed step of 1/256 is coarse next to 1000 probabilities of ~1e-3: 24 dB.
Top-1: random-weight classifiers have near ties (top-2 logit gap down to 0.001 std), so the test
asks that the class the int8 model picks has a float logit within 4 rms errors of the float maximum.
"""

from __future__ import annotations

import collections
import math
import time

import numpy as np
import onnxruntime as ort
import pytest

from qconvert.onnx.runtime import session_options
from qconvert.tflite.reader import buffer_data
from qconvert.tflite.reader import read as read_tflite
from tests.harness import calibration_set, convert_quantized, random_feeds, run_tflite, slow_params
from tests.models.randomize import load_randomized
from tests.models.test_light_models import with_logits_output

# name -> (calibration samples, held-out samples); the big ones use fewer to keep the module fast.
MODELS = {
    "vgg19": (4, 2),  # first: the slowest test starts first on one worker
    "zfnet512": (8, 2),
    "alexnet": (8, 2),
    "densenet121": (16, 4),
    "resnet50": (16, 4),
    "inception_v2": (16, 4),
    "inception_v1": (16, 4),
    "shufflenet": (16, 4),
    "squeezenet": (16, 4),
}
# TFLite has no int8 LOCAL_RESPONSE_NORMALIZATION kernel: these stay float. With float model outputs
# a final SOFTMAX that writes a model output may also run in float (its int8 output step of 1/256
# would round most of 1000 probabilities to 0); no other op may stay float.
LRN_COUNTS = {"inception_v1": 2, "alexnet": 2, "zfnet512": 2}
WEIGHT_OPS = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED")
BOUNDARY = ("QUANTIZE", "DEQUANTIZE")
LOGITS_FLOOR_DB = 25.0
PROBS_FLOOR_DB = 12.0
CALIBRATION_SEED = 100
HELD_OUT_SEED = 10_000  # far from the calibration seeds 100..115


def check_weight_op(summary, flatbuffer: bytes, op) -> None:
    """The int8 spec for a CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED, read from the file."""
    x, w, y = (summary.tensors[op.inputs[0]], summary.tensors[op.inputs[1]],
               summary.tensors[op.outputs[0]])
    where = f"{op.name} -> {y.name}"
    assert (x.dtype, w.dtype, y.dtype) == ("INT8", "INT8", "INT8"), where
    assert len(x.scales) == 1 and len(y.scales) == 1, where
    axis = 3 if op.name == "DEPTHWISE_CONV_2D" else 0
    assert w.quantized_dimension == axis, where
    assert len(w.scales) == w.shape[axis] and w.zero_points == [0] * w.shape[axis], where
    assert min(w.scales) > 0, where
    assert buffer_data(flatbuffer, w.buffer).view(np.int8).min() >= -127, f"{where}: not narrow range"
    assert len(op.inputs) > 2 and op.inputs[2] >= 0, f"{where}: no bias"
    b = summary.tensors[op.inputs[2]]
    assert b.dtype == "INT32" and b.quantized_dimension == 0, where
    assert b.zero_points == [0] * len(w.scales), where
    np.testing.assert_allclose(b.scales, np.float64(x.scales[0]) * np.asarray(w.scales), rtol=1e-6,
                               err_msg=f"{where}: bias scale != input scale * weight scale")


def op_kinds(summary) -> tuple[collections.Counter, collections.Counter]:
    """(int8 ops, float ops) by name, QUANTIZE/DEQUANTIZE left out: an op is float when its first
    output is FLOAT32."""
    int8, floats = collections.Counter(), collections.Counter()
    for op in summary.operators:
        if op.name not in BOUNDARY:
            dtype = summary.tensors[op.outputs[0]].dtype
            (floats if dtype == "FLOAT32" else int8)[op.name] += 1
    return int8, floats


def sqnr_db(want: list[np.ndarray], got: list[np.ndarray]) -> float:
    """10 log10(signal energy / error energy) over all samples."""
    signal = sum(float(np.sum(np.square(w, dtype=np.float64))) for w in want)
    noise = sum(float(np.sum(np.square(g.astype(np.float64) - w))) for w, g in zip(want, got))
    return math.inf if noise == 0 else 10 * math.log10(signal / noise)


def onnxruntime_outputs(model, feeds_list) -> list[dict[str, np.ndarray]]:
    """The float model's outputs per sample, from one session (serializing VGG-19 takes seconds)."""
    session = ort.InferenceSession(model.SerializeToString(), session_options(model),
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return [dict(zip(names, session.run(names, feeds))) for feeds in feeds_list]


@pytest.mark.parametrize("name", slow_params(MODELS))
def test_light_model_int8(name, tmp_path):
    start = time.perf_counter()
    calibration_count, held_out = MODELS[name]
    model = with_logits_output(load_randomized(name, seed=1))
    softmax_outputs = {n.output[0] for n in model.graph.node if n.op_type == "Softmax"}
    calibration = calibration_set(model, calibration_count, seed=CALIBRATION_SEED)
    flatbuffer, report = convert_quantized(model, calibration, tmp_path)

    summary = read_tflite(flatbuffer)
    weight_ops = [op for op in summary.operators if op.name in WEIGHT_OPS]
    assert weight_ops
    for op in weight_ops:
        check_weight_op(summary, flatbuffer, op)
    int8_ops, float_ops = op_kinds(summary)
    reported = collections.Counter(f.op for f in report.quantization.float_ops)
    assert float_ops == reported, (float_ops, report.quantization.float_ops)
    assert float_ops["LOCAL_RESPONSE_NORMALIZATION"] == LRN_COUNTS.get(name, 0), float_ops
    # A final SOFTMAX stays float with float outputs, with the RESHAPE that may follow it (squeezenet).
    assert set(float_ops) <= {"LOCAL_RESPONSE_NORMALIZATION", "SOFTMAX", "RESHAPE"}, float_ops
    readers = {i: op for op in summary.operators for i in op.inputs}
    for op in summary.operators:
        if op.name in ("SOFTMAX", "RESHAPE") and summary.tensors[op.outputs[0]].dtype == "FLOAT32":
            out = op.outputs[0]
            while out in readers and readers[out].name == "RESHAPE":
                out = readers[out].outputs[0]
            assert summary.tensors[out].name in summary.signature_outputs, f"float inner {op.name}"
    for f in report.quantization.float_ops:
        assert ("no int8" if f.op == "LOCAL_RESPONSE_NORMALIZATION" else "model output") in f.reason, f
    assert report.quantization.int8_ops == sum(int8_ops.values())

    feeds_list = [random_feeds(model, seed=HELD_OUT_SEED + k) for k in range(held_out)]
    expected = onnxruntime_outputs(model, feeds_list)
    actual = [run_tflite(flatbuffer, report, feeds) for feeds in feeds_list]
    sqnr = {}
    for out in expected[0]:
        want = [e[out] for e in expected]
        got = [a[out].reshape(e[out].shape) for a, e in zip(actual, expected)]
        sqnr[out] = sqnr_db(want, got)
    logits = [o for o in expected[0] if o not in softmax_outputs][-1]
    agree = 0
    for e, a in zip(expected, actual):
        want, got = e[logits].ravel(), a[logits].ravel()
        rms = float(np.sqrt(np.mean(np.square(got.astype(np.float64) - want))))
        assert want[got.argmax()] >= want.max() - 4 * rms, (name, "int8 top-1 is not a float near-tie")
        agree += int(got.argmax() == want.argmax())
    print(f"\n{name}: int8 ops {sum(int8_ops.values())}, float ops {dict(float_ops)}, "
          f"weight ops {len(weight_ops)}, SQNR dB {({k: round(v, 1) for k, v in sqnr.items()})}, "
          f"top-1 {agree}/{held_out}, calibration {calibration_count}, {time.perf_counter() - start:.1f} s")
    for out, value in sqnr.items():
        floor = PROBS_FLOOR_DB if out in softmax_outputs else LOGITS_FLOOR_DB
        assert value >= floor, f"{name} {out}: SQNR {value:.1f} dB < {floor} dB"
