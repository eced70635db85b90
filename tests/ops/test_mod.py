"""Mod (qconvert/ops/elementwise.py) against onnxruntime, bit for bit: fmod=0 as FLOOR_MOD on
integers, fmod=1 as C's fmod (sign(x) * FLOOR_MOD(|x|, |y|) on floats, FLOOR_MOD corrected where
the signs differ on integers), with negative operands, divisors that divide the dividend, int32
extremes, float edge values and broadcasting beyond FLOOR_MOD's rank 4; float fmod=0 (opset 28)
against numpy; an int8 model around it; one-line refusals."""

import functools

import numpy as np
import pytest
from onnx import TensorProto, helper

from qconvert.tflite import reader
from tests.harness import (
    assert_refused_in_one_line,
    assert_matches_onnxruntime,
    calibration_set,
    convert_proto,
    convert_quantized,
    make_model,
    run_onnxruntime,
    run_tflite,
)

RNG = np.random.default_rng(4)
F, I32, I64 = TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64
ELEM = {np.float32: F, np.int32: I32, np.int64: I64}


def mod_model(a_shape, b_shape, dtype, fmod, opset=13, divisor=None):
    inputs = {"a": (ELEM[dtype], a_shape)}
    inits = {}
    if divisor is None:
        inputs["b"] = (ELEM[dtype], b_shape)
    else:
        inits["b"] = divisor
    return make_model([helper.make_node("Mod", ["a", "b"], ["y"], name="mod", fmod=fmod)], inputs,
                      {"y": ELEM[dtype]}, inits, opset=opset)


def signed_ints(shape, dtype, low=1, high=9):
    """Non-zero integers of both signs."""
    return (RNG.integers(low, high, shape) * RNG.choice([-1, 1], shape)).astype(dtype)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("fmod", [0, 1])
@pytest.mark.parametrize("a_shape,b_shape", [((4, 6), (4, 6)), ((2, 3, 6), (6,)), ((3, 1), (1, 5))],
                         ids=str)
def test_integer_mod(dtype, fmod, a_shape, b_shape):
    b = signed_ints(b_shape, dtype)
    a = signed_ints(a_shape, dtype, 0, 40)
    a.flat[: min(a.size, b.size)] = (b.flat[: min(a.size, b.size)] * -3)  # y divides x: remainder 0
    model = mod_model(a_shape, b_shape, dtype, fmod)
    assert_matches_onnxruntime(model, {"a": a, "b": b}, rtol=0, atol=0)


@pytest.mark.parametrize("fmod", [0, 1])
def test_int32_extremes(fmod):
    """The int32 minimum and maximum as dividends: the correction never overflows, and the
    minimum modulo -1 (which traps in C's %) is 0."""
    info = np.iinfo(np.int32)
    a = np.array([info.min, info.max, info.min, info.max, info.min + 1, -7, 7, 0], np.int32)
    b = np.array([7, -7, -1, 1, -3, info.min, info.max, -5], np.int32)
    assert_matches_onnxruntime(mod_model(a.shape, b.shape, np.int32, fmod), {"a": a, "b": b},
                               rtol=0, atol=0)


@pytest.mark.parametrize("a_shape,b_shape", [((3, 8), (3, 8)), ((2, 1, 8), (4, 1)),
                                             ((2, 3, 1, 2, 2, 5), (3, 4, 1, 1, 5))], ids=str)
def test_float_fmod(a_shape, b_shape):
    a = (RNG.standard_normal(a_shape) * 10).astype(np.float32)
    b = (RNG.standard_normal(b_shape) * 3).astype(np.float32)
    count = min(a.size, b.size)
    a.flat[:count] = b.flat[:count] * RNG.integers(-4, 5, count)  # y divides x
    a.flat[-1] = -0.0
    assert_matches_onnxruntime(mod_model(a_shape, b_shape, np.float32, 1), {"a": a, "b": b},
                               rtol=0, atol=0)


def test_float_fmod_edge_values():
    """Infinities, zeros and NaN as ONNX's fmod=1 specifies them (onnxruntime's values)."""
    inf, nan = np.inf, np.nan
    a = np.array([5.5, -5.5, 1e-8, -1e-8, inf, -inf, 3.0, -3.0, 0.0, nan, 2.0, 1e30], np.float32)
    b = np.array([inf, -inf, 3.0, 3.0, 2.0, 2.0, 0.0, -0.0, -2.0, 1.0, nan, 7.0], np.float32)
    model = mod_model(a.shape, b.shape, np.float32, 1)
    flatbuffer, report = convert_proto(model)
    got = run_tflite(flatbuffer, report, {"a": a, "b": b})["y"]
    want = run_onnxruntime(model, {"a": a, "b": b})["y"]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype,fmod", [(np.float32, 1), (np.int32, 0), (np.int32, 1)])
def test_constant_divisor(dtype, fmod):
    b = np.array([3.0, -2.5, 0.75], np.float32) if dtype == np.float32 else np.array([3, -1, -4], dtype)
    a = (RNG.standard_normal((4, 3)) * 10).astype(dtype)
    a[0, 1] = np.iinfo(np.int32).min if dtype == np.int32 else a[0, 1]
    model = mod_model(a.shape, None, dtype, fmod, divisor=b)
    flatbuffer, _ = assert_matches_onnxruntime(model, {"a": a}, rtol=0, atol=0)
    assert "FLOOR_MOD" in reader.read(flatbuffer).op_counts


def test_float_floor_mod_in_opset_28_matches_numpy():
    """fmod=0 on floats is ONNX's since opset 28: FLOOR_MOD computes what numpy's np.mod does."""
    a = np.array([-4.3, 7.2, 5.0, 4.3, -7.2, 8.0, 0.0, -3.0, 1.0, np.inf], np.float32)
    b = np.array([2.1, -3.4, 8.0, -2.1, 3.4, 5.0, -2.0, np.inf, -np.inf, 2.0], np.float32)
    flatbuffer, report = convert_proto(mod_model(a.shape, b.shape, np.float32, 0, opset=28))
    got = run_tflite(flatbuffer, report, {"a": a, "b": b})["y"]
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(got, np.mod(a, b))


def test_int8_model_keeps_mod_float(tmp_path):
    """FLOOR_MOD has no QuantRule: under --quantize the Mod ops stay float between int8 ones."""
    w = RNG.standard_normal((8, 6)).astype(np.float32)
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["h"]),
                        helper.make_node("Mod", ["h", "d"], ["y"], fmod=1)],
                       {"x": (F, (4, 8))}, {"y": F}, {"w": w, "d": np.float32(1.5)})
    calibration = calibration_set(model)
    flatbuffer, report = convert_quantized(model, calibration, tmp_path)
    assert "FLOOR_MOD" in [f.op for f in report.quantization.float_ops]
    run_tflite(flatbuffer, report, {"x": calibration["x"][0]})


refused = functools.partial(assert_refused_in_one_line, node='mod')


def test_float_fmod_0_before_opset_28_is_refused():
    refused(mod_model((3,), (3,), np.float32, 0), "fmod=0 with float inputs is invalid before opset 28")


def test_constant_integer_divisor_with_a_zero_is_refused():
    refused(mod_model((3,), None, np.int32, 0, divisor=np.array([2, 0, 1], np.int32)),
            "holds a 0")
