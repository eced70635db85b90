"""quantize_weights_only (--weight-only): float32 constants of at least `min_elements` finite values
are stored as symmetric int8; an op with a hybrid kernel (FULLY_CONNECTED, CONV_2D, ...) reads
them directly, per output channel and with asymmetric_quantize_inputs set, any other reader
through one DEQUANTIZE (one scale); biases, smaller constants and constants holding an infinity
stay float32.

Shown here, with the step alone on IR: each of those cases, the int8 values within half a step of
the float ones. End to end (tests/quantize/test_weight_only.py covers op by op), a Gemm followed
by an Add of a 64-element attention-style mask holding -inf converts with --weight-only (from 64
elements) to a FULLY_CONNECTED reading int8 weights directly and an ADD reading the float32
mask, no DEQUANTIZE; the file matches onnxruntime: -inf where the mask is, elsewhere within the
hybrid kernel's bound (the weights lie on the int8 grid; each input row is quantized at run time
with step (max(0, max x) - min(0, min x)) / 255, half a step per element times |w|).

And a constant that is both a hybrid op's bias and another op's big operand: the bias stays
float32, the other reader gets an int8 copy."""

from functools import partial

import numpy as np
from onnx import TensorProto, helper

from qconvert.tflite.reader import read
from qconvert.transforms.engine import run_once
from qconvert.transforms.quantize_weights_only import quantize_weights_only
from tests.harness import convert_proto, grid_weights, make_model, run_onnxruntime, run_tflite
from tests.transforms.builders import Builder, op_types

F = TensorProto.FLOAT
rng = np.random.default_rng(0)
S = (2, 32)


def mixed_readers():
    """x -> FULLY_CONNECTED(w [4, 32], bias) -> f; x + c (64 values); x * small (32); x + mask (-inf)."""
    mask = np.zeros(S, np.float32)
    mask[:, ::3] = -np.inf
    b = Builder().input("x", S)
    for name, shape in (("w", (4, 32)), ("bias", (4,)), ("c", S), ("small", (1, 32))):
        b.const(name, rng.standard_normal(shape).astype(np.float32))
    b.const("mask", mask)
    b.op("FULLY_CONNECTED", ["x", "w", "bias"], "f", (2, 4)).op("ADD", ["x", "c"], "a", S)
    b.op("MUL", ["x", "small"], "m", S).op("ADD", ["x", "mask"], "k", S).output("f", "a", "m", "k")
    return b.model


def within_half_a_step(array, original):
    scales = array.quant.scale.reshape((-1,) + (1,) * (original.ndim - 1)) if array.quant.axis == 0 \
        else array.quant.scale
    assert np.all(np.abs(array.data * scales - original) <= scales / 2 * (1 + 1e-6))


def test_hybrid_and_other_readers_of_big_constants():
    model = mixed_readers()
    w, c = model.constant("w"), model.constant("c")
    run_once(model, [("quantize_weights_only", partial(quantize_weights_only, min_elements=64))])
    assert op_types(model) == ["FULLY_CONNECTED", "DEQUANTIZE", "ADD", "MUL", "ADD"]
    fc, dequantize, add = model.operators[:3]
    weights = model.arrays[fc.inputs[1]]
    assert fc.inputs[1] == "w" and weights.dtype == np.int8 and weights.narrow_range
    assert weights.quant.axis == 0 and weights.quant.scale.size == 4 and np.abs(weights.data).max() == 127
    within_half_a_step(weights, w)
    assert fc.options["asymmetric_quantize_inputs"] is True
    assert dequantize.inputs == ["c"] and add.inputs == ["x", dequantize.outputs[0]]
    assert model.arrays["c"].dtype == np.int8 and model.arrays["c"].quant.scale.size == 1
    within_half_a_step(model.arrays["c"], c)
    for name in ("bias", "small", "mask"):
        assert model.arrays[name].dtype == np.float32 and model.arrays[name].quant is None, name


def test_a_bias_shared_with_another_reader_stays_float():
    b = Builder().input("x", (1, 4)).input("z", (1, 64))
    b.const("w", rng.standard_normal((64, 4)).astype(np.float32))
    b.const("c", rng.standard_normal(64).astype(np.float32))
    b.op("FULLY_CONNECTED", ["x", "w", "c"], "f", (1, 64)).op("ADD", ["z", "c"], "y", (1, 64)).output("f", "y")
    run_once(b.model, [("quantize_weights_only", partial(quantize_weights_only, min_elements=64))])
    fc = b.model.operators[0]
    assert b.model.arrays[fc.inputs[1]].dtype == np.int8
    assert b.model.arrays[fc.inputs[2]].dtype == np.float32
    np.testing.assert_array_equal(b.model.constant(fc.inputs[2]), b.model.constant("c"))
    add = b.model.consumers("z")[0]
    dequantize = b.model.producer(add.inputs[1])
    assert dequantize.type == "DEQUANTIZE" and b.model.arrays[dequantize.inputs[0]].dtype == np.int8


def gemm_then_mask():
    mask = np.zeros(S, np.float32)
    mask[:, ::3] = -np.inf
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["g"]), helper.make_node("Add", ["g", "mask"], ["y"])]
    weights = grid_weights((64, 32), seed=3, axis=1)  # [K, N]: one int8 step per output column
    inits = {"w": weights, "b": rng.standard_normal(32).astype(np.float32), "mask": mask}
    return make_model(nodes, {"x": (F, (2, 64))}, {"y": F}, inits), weights, mask


def test_onnx_gemm_reads_int8_weights_and_the_mask_stays_float():
    model, weights, mask = gemm_then_mask()
    flatbuffer, report = convert_proto(model, weights="int8", weight_only_min_elements=64)
    summary = read(flatbuffer)
    assert summary.op_counts == {"FULLY_CONNECTED": 1, "ADD": 1}
    fc, add = summary.operators
    assert summary.tensors[fc.inputs[1]].dtype == "INT8" and summary.tensors[fc.inputs[2]].dtype == "FLOAT32"
    assert [summary.tensors[i].dtype for i in add.inputs] == ["FLOAT32", "FLOAT32"]
    x = rng.standard_normal((2, 64)).astype(np.float32)
    actual, expected = run_tflite(flatbuffer, report, {"x": x})["y"], run_onnxruntime(model, {"x": x})["y"]
    masked = np.isneginf(mask)
    assert np.all(np.isneginf(actual[masked])) and np.all(np.isneginf(expected[masked]))
    row_steps = (np.maximum(x.max(axis=1), 0) - np.minimum(x.min(axis=1), 0)) / 255
    bound = row_steps[:, None] / 2 * np.abs(weights).sum(axis=0)[None, :]
    error = np.abs(actual[~masked] - expected[~masked])
    assert np.all(error <= (bound * 1.05 + 1e-5)[~masked]) and error.max() > 0
