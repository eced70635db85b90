"""The onnx package's light models (seeded random weights, tests/models/randomize.py) converted with
--weight-only and with --float16: the file sizes against the float file, which weights the written
bytes hold as int8 / float16, and the outputs in ai-edge-litert against onnxruntime's float model.

Weight-only (measured on the held-out inputs below):
- size: 0.250 (vgg19, alexnet, zfnet512) to 0.2695 (densenet121) of the float file, limit 0.27.
  shufflenet is 0.285: its per-channel scales (4 bytes per output channel of its many small
  weights; the all-zero int64 zero-point vectors are stored once per length by the writer;
  per-tensor depthwise hybrid weights give NaN in LiteRT) are 1.3% of the float file, and without
  them it is 0.272, its graph (292 ops, 774 tensors around 5.5 MB of weights) being a larger share
  of the file than elsewhere. So for it the limit is 0.275 + its quantization-vector bytes / float
  size. For every model the size is also accounted for: the float file, less 3 bytes per int8
  weight element, plus the distinct quantization vectors and the DEQUANTIZE ops (with their
  flatbuffer headers): nothing else grew.
- SQNR on the logits (the final softmax's input, added as an output): 33 to 37 dB, vgg19 29.4 to
  30.1 dB. The floor is 30 dB, 28 dB for vgg19: its int8 weight rounding alone (fake-quantized
  weights run in onnxruntime) already gives 30.9 dB, before the hybrid kernels' run-time input
  quantization. The softmax probabilities are measured but not held to 30 dB: a random-weight
  net's near-tied logits make the softmax sharpen their errors (resnet50 logits 35 dB,
  probabilities 27 to 30.6 dB; vgg19 probabilities 13 to 17 dB).
Float16: 0.500 to 0.513 of the float file (limit 0.52); SQNR 62 to 67 dB on the logits and 51.6 dB
and up on the probabilities. A float16 weight errs by at most 2^-11 of itself (66.2 dB); the floor
46.2 dB allows the rounding of all layers to add up to ten times that.

vgg19, alexnet and zfnet512 take seconds to randomize and convert (three conversions each), so they
get one held-out input; vgg19 runs first so that the slowest test starts first on a worker.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from qconvert.tflite.reader import read as read_tflite
from tests.harness import convert_proto, random_feeds, run_tflite, slow_params
from tests.models.randomize import load_randomized
from tests.models.test_light_models import with_logits_output
from tests.models.test_light_models_int8 import onnxruntime_outputs, sqnr_db

MODELS = {"vgg19": 1, "zfnet512": 1, "alexnet": 1, "resnet50": 2, "densenet121": 2,  # held-out inputs
          "inception_v2": 2, "inception_v1": 2, "shufflenet": 2, "squeezenet": 2}
MIN_ELEMENTS = 1024
WEIGHT_ONLY_RATIO, FLOAT16_RATIO = 0.27, 0.52
SHUFFLENET_RATIO = 0.275  # without its quantization tables, see the module docstring
LOGITS_FLOOR_DB = {"vgg19": 28.0}  # else 30 dB
FLOAT16_FLOOR_DB = 20 * math.log10(2 ** 11) - 20  # 46.2 dB
HELD_OUT_SEED = 10_000
HYBRID_OPS = {"CONV_2D": 0, "DEPTHWISE_CONV_2D": 3, "FULLY_CONNECTED": 0}  # per-channel axis
BIAS_SLOT = {"CONV_2D": 2, "DEPTHWISE_CONV_2D": 2, "FULLY_CONNECTED": 2, "TRANSPOSE_CONV": 3}
# Flatbuffer bytes beyond the scale and zero point elements: of one quantization table (measured
# 31 to 32: the table, its vtable and two vector lengths), and of one DEQUANTIZE op with its float
# output tensor (densenet121's 1024-channel Mul/Add constants, 38 per table in all).
TABLE_OVERHEAD, DEQUANTIZE_OVERHEAD = 40, 96


def elements(tensor) -> int:
    return int(np.prod(tensor.shape, dtype=np.int64))


def quantization_bytes(summary) -> int:
    """The scale (float32) and zero point (int64) vectors of the quantization tables, each
    distinct vector once (the writer stores identical vectors once)."""
    scales = {tuple(t.scales) for t in summary.tensors if t.scales}
    zero_points = {tuple(t.zero_points) for t in summary.tensors if t.scales}
    return 4 * sum(map(len, scales)) + 8 * sum(map(len, zero_points))


def float_weights(summary) -> dict[str, int]:
    """{name: elements} of the float32 constants that ops read at a weight slot (not a bias)."""
    found = {}
    for op in summary.operators:
        for slot, index in enumerate(op.inputs):
            tensor = summary.tensors[index] if index >= 0 else None
            if (tensor is not None and tensor.dtype == "FLOAT32" and tensor.data_offset is not None
                    and slot != BIAS_SLOT.get(op.name)):
                found[tensor.name] = elements(tensor)
    return found


def check_weight_only_file(summary, float_summary) -> None:
    """Every weight of MIN_ELEMENTS or more of the float file is int8 (symmetric, zero points 0):
    read directly, per output channel, by CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED with float
    input and output, else through a DEQUANTIZE; smaller weights and all biases stay float32."""
    large = {n for n, size in float_weights(float_summary).items() if size >= MIN_ELEMENTS}
    producers = {op.outputs[0]: op for op in summary.operators if op.name == "DEQUANTIZE"}
    int8 = set()
    for op in summary.operators:
        for slot, index in enumerate(op.inputs):
            if index < 0 or op.name == "DEQUANTIZE":  # its input is checked at its readers
                continue
            tensor, where = summary.tensors[index], f"{op.name} input {slot}"
            if slot == BIAS_SLOT.get(op.name):
                assert tensor.dtype == "FLOAT32" and tensor.data_offset is not None, (where, tensor)
                continue
            if index in producers:
                tensor = summary.tensors[producers[index].inputs[0]]
            elif tensor.dtype == "INT8":
                axis = HYBRID_OPS[op.name]  # only a hybrid op reads int8 directly
                assert slot == 1 and len(tensor.scales) == tensor.shape[axis], (where, tensor)
                assert tensor.quantized_dimension == axis, (where, tensor)
                io = {summary.tensors[op.inputs[0]].dtype, summary.tensors[op.outputs[0]].dtype}
                assert io == {"FLOAT32"}, (where, io)
            if tensor.data_offset is None or tensor.dtype not in ("INT8", "FLOAT32"):
                continue
            if tensor.dtype == "INT8":
                assert set(tensor.zero_points) == {0} and min(tensor.scales) > 0, (where, tensor)
                int8.add(tensor.name)
            assert (tensor.dtype == "INT8") == (elements(tensor) >= MIN_ELEMENTS), (where, tensor)
    assert int8 == large, (sorted(int8 ^ large))
    assert not [t.name for t in summary.tensors if t.dtype == "INT8" and t.name not in int8]


def check_float16_file(summary) -> None:
    """No float32 constant is left: each is float16, read by its own DEQUANTIZE only."""
    constants = [t for t in summary.tensors if t.data_offset is not None and t.dtype.startswith("FLOAT")]
    assert {t.dtype for t in constants} == {"FLOAT16"}, {t.dtype for t in constants}
    index = {t.name: k for k, t in enumerate(summary.tensors)}
    for tensor in constants:
        readers = [op.name for op in summary.operators if index[tensor.name] in op.inputs]
        assert readers == ["DEQUANTIZE"], (tensor.name, readers)


def sqnr_by_output(expected: list[dict], actual: list[dict]) -> dict[str, float]:
    return {name: sqnr_db([e[name] for e in expected], [a[name].reshape(e[name].shape) for a, e in
                                                         zip(actual, expected)]) for name in expected[0]}


def rounded(sqnr: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 1) for k, v in sqnr.items()}


@pytest.mark.parametrize("name", slow_params(MODELS))
def test_light_model_weight_only_and_float16(name):
    start = time.perf_counter()
    model = with_logits_output(load_randomized(name, seed=1))
    softmax_outputs = {n.output[0] for n in model.graph.node if n.op_type == "Softmax"}
    float_file, _ = convert_proto(model)
    weight_only, weight_only_report = convert_proto(model, weights="int8")
    float16, float16_report = convert_proto(model, weights="float16")
    float_summary, summary = read_tflite(float_file), read_tflite(weight_only)

    check_weight_only_file(summary, float_summary)
    check_float16_file(read_tflite(float16))
    int8_elements = sum(elements(t) for t in summary.tensors if t.dtype == "INT8")
    tables = quantization_bytes(summary)
    overhead = (TABLE_OVERHEAD * sum(1 for t in summary.tensors if t.scales)
                + DEQUANTIZE_OVERHEAD * summary.op_counts.get("DEQUANTIZE", 0))
    accounted = len(float_file) - 3 * int8_elements + tables
    assert accounted <= len(weight_only) <= accounted + overhead, (len(weight_only), accounted, overhead)
    ratio, float16_ratio = len(weight_only) / len(float_file), len(float16) / len(float_file)
    if name == "shufflenet":
        assert ratio <= SHUFFLENET_RATIO + tables / len(float_file), (ratio, tables / len(float_file))
    else:
        assert ratio <= WEIGHT_ONLY_RATIO, ratio
    assert float16_ratio <= FLOAT16_RATIO, float16_ratio

    feeds_list = [random_feeds(model, seed=HELD_OUT_SEED + k) for k in range(MODELS[name])]
    expected = onnxruntime_outputs(model, feeds_list)
    weight_only_sqnr = sqnr_by_output(expected, [run_tflite(weight_only, weight_only_report, f)
                                                 for f in feeds_list])
    float16_sqnr = sqnr_by_output(expected, [run_tflite(float16, float16_report, f) for f in feeds_list])
    print(f"\n{name}: weight-only {ratio:.4f} of the float size (quantization tables "
          f"{tables / len(float_file):.4f}), SQNR dB {rounded(weight_only_sqnr)}; "
          f"float16 {float16_ratio:.4f}, SQNR dB {rounded(float16_sqnr)}; "
          f"{time.perf_counter() - start:.1f} s")
    logits = [o for o in expected[0] if o not in softmax_outputs]
    assert logits, expected[0].keys()
    floor = LOGITS_FLOOR_DB.get(name, 30.0)
    for out in logits:
        assert weight_only_sqnr[out] >= floor, f"{name} {out}: SQNR {weight_only_sqnr[out]:.1f} dB"
    for out, value in float16_sqnr.items():
        assert value >= FLOAT16_FLOOR_DB, f"{name} {out}: float16 SQNR {value:.1f} dB"
