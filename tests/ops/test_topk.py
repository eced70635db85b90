"""TopK (qconvert/ops/topk.py) against onnxruntime: every axis (TRANSPOSE around TOPK_V2), largest=0
(NEG for floats, -1 - x for integers), ties (ONNX and TOPK_V2 both take the lower index first),
sorted=0, K equal to the axis, TopK-1's `k` attribute, unread outputs, an int8 model around it;
and one-line refusals of what cannot convert."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from qconvert.ops.registry import TFLITE_OPS
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
from tests.ops.test_versions import _ir_op

RNG = np.random.default_rng(21)
F, I32, I64 = TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64


def topk_model(shape, k, elem=F, opset=11, outputs=("v", "i"), k_input=True, **attrs):
    inits = {"k": np.array([k], np.int64)} if k_input else {}
    if not k_input:
        attrs["k"] = k
    node = helper.make_node("TopK", ["x", "k"] if k_input else ["x"], list(outputs), **attrs)
    return make_model([node], {"x": (elem, shape)}, {o: elem if o == "v" else I64 for o in outputs if o},
                      inits, opset=opset)


def ties(shape, dtype=np.float32):
    """Small integers: many equal values, so the tie order shows."""
    return RNG.integers(-2, 3, shape).astype(dtype)


@pytest.mark.parametrize("shape,axis,k", [((4, 7), -1, 3), ((4, 7), 0, 2), ((2, 3, 4, 5), 1, 3),
                                          ((2, 3, 4, 5), -2, 4), ((6,), 0, 6), ((2, 3, 4, 5), 3, 5)],
                         ids=str)
@pytest.mark.parametrize("largest", [1, 0])
def test_topk_float_with_ties(shape, axis, k, largest):
    model = topk_model(shape, k, axis=axis, largest=largest)
    assert_matches_onnxruntime(model, {"x": ties(shape)}, rtol=0, atol=0)


@pytest.mark.parametrize("elem,dtype", [(I64, np.int64), (I32, np.int32)])
@pytest.mark.parametrize("largest", [1, 0])
def test_topk_integers_including_extremes(elem, dtype, largest):
    """-1 - x reverses the int32 order without overflow: the minimum and maximum rank right."""
    x = ties((3, 6), dtype)
    info = np.iinfo(np.int32)
    x[0, :3] = [info.min, info.max, info.min]
    model = topk_model((3, 6), 4, elem=elem, axis=1, largest=largest)
    assert_matches_onnxruntime(model, {"x": x}, rtol=0, atol=0)


def test_tie_order_is_the_lower_index_first():
    """All values equal: ONNX (onnxruntime) and TOPK_V2 both give indices 0, 1, 2, ..."""
    model = topk_model((2, 5), 3, axis=1)
    x = np.ones((2, 5), np.float32)
    expected = run_onnxruntime(model, {"x": x})["i"]
    np.testing.assert_array_equal(expected, [[0, 1, 2], [0, 1, 2]])
    assert_matches_onnxruntime(model, {"x": x}, rtol=0, atol=0)


def test_sorted_0_returns_the_sorted_order():
    model = topk_model((3, 8), 4, axis=1, sorted=0)
    x = RNG.permuted(np.tile(np.arange(8, dtype=np.float32), (3, 1)), axis=1)
    flatbuffer, report = convert_proto(model)
    got = run_tflite(flatbuffer, report, {"x": x})
    np.testing.assert_array_equal(got["v"], np.sort(x, axis=1)[:, ::-1][:, :4])


@pytest.mark.parametrize("read", ["v", "i"])
@pytest.mark.parametrize("axis", [0, 1])
def test_one_output_read(read, axis):
    """TOPK_V2 writes both outputs even when the graph reads one."""
    model = topk_model((3, 5), 2, axis=axis)
    kept = [o for o in model.graph.output if o.name == read]
    del model.graph.output[:]
    model.graph.output.extend(kept)
    assert_matches_onnxruntime(model, {"x": ties((3, 5))}, rtol=0, atol=0)


def test_topk_1_k_attribute_in_opset_9():
    model = topk_model((3, 5), 2, opset=9, k_input=False, axis=1)
    assert_matches_onnxruntime(model, {"x": ties((3, 5))}, rtol=0, atol=0)


def test_topk_after_conv_over_channels():
    """A 4-D activation in NHWC inside the graph: TopK over the ONNX channel axis."""
    w = RNG.standard_normal((6, 3, 3, 3)).astype(np.float32)
    model = make_model([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                        helper.make_node("TopK", ["c", "k"], ["v", "i"], axis=1)],
                       {"x": (F, (1, 3, 5, 5))}, {"v": F, "i": I64},
                       {"w": w, "k": np.array([2], np.int64)}, opset=11)
    assert_matches_onnxruntime(model, {"x": RNG.standard_normal((1, 3, 5, 5)).astype(np.float32)},
                               rtol=1e-4, atol=1e-4)


def test_written_version_and_op():
    flatbuffer, _ = convert_proto(topk_model((3, 5), 2, axis=1))
    assert ("TOPK_V2", 1) in reader.read(flatbuffer).ops


@pytest.mark.parametrize("inputs,outputs,expected", [
    ([(np.int8, (2, 5)), (np.int32, (1,))], [(np.int8, (2, 2)), (np.int32, (2, 2))], 2),
    ([(np.int16, (2, 5)), (np.int32, (1,))], [(np.int16, (2, 2)), (np.int32, (2, 2))], 3),
    ([(np.float32, (2, 5)), (np.int32, (1,))], [(np.float32, (2, 2)), (np.int16, (2, 2))], 3),
    ([(np.float32, (2, 5)), (np.int32, (1,))], [(np.float32, (2, 2)), (np.int32, (2, 2))], 1),
])
def test_version_function_follows_op_version_cc(inputs, outputs, expected):
    op, model = _ir_op("TOPK_V2", inputs, outputs)
    assert TFLITE_OPS["TOPK_V2"].version(op, model) == expected


def test_int8_model_runs_topk_int8(tmp_path):
    """Under --quantize TOPK_V2 runs int8 (values with its input's params, indices int32) behind
    an int8 MatMul, and ranks like onnxruntime."""
    w = RNG.standard_normal((8, 6)).astype(np.float32)
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["h"]),
                        helper.make_node("TopK", ["h", "k"], ["v", "i"], axis=-1)],
                       {"x": (F, (4, 8))}, {"v": F, "i": I64},
                       {"w": w, "k": np.array([3], np.int64)}, opset=11)
    calibration = calibration_set(model)
    flatbuffer, report = convert_quantized(model, calibration, tmp_path)
    assert "TOPK_V2" not in [f.op for f in report.quantization.float_ops]
    feeds = {"x": calibration["x"][0]}
    got, want = run_tflite(flatbuffer, report, feeds), run_onnxruntime(model, feeds)
    np.testing.assert_allclose(got["v"], want["v"], atol=0.15 * np.abs(want["v"]).max())


refused = assert_refused_in_one_line


@pytest.mark.parametrize("declared", [False, True])
def test_runtime_k(declared):
    """Without declared output shapes the loader finds no static shape and refuses in one line;
    with them (taken where inference finds none) TOPK_V2 reads the run-time K."""
    model = make_model([helper.make_node("TopK", ["x", "k"], ["v", "i"], name="top")],
                       {"x": (F, (3, 5)), "k": (I64, (1,))}, {"v": F, "i": I64}, opset=11)
    if not declared:
        assert "'top'" in refused(model, "run time")
        return
    for output in model.graph.output:
        output.CopyFrom(helper.make_tensor_value_info(output.name, output.type.tensor_type.elem_type,
                                                      [3, 2]))
    feeds = {"x": np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32),
             "k": np.array([2], np.int64)}
    assert_matches_onnxruntime(model, feeds)


@pytest.mark.parametrize("k,match", [(np.array([[2]], np.int64), "K input must be a one-dimensional"),
                                     (np.array([0], np.int64), r"K = 0 is outside \[1, 5\]"),
                                     (np.array([6], np.int64), "less than the requested k")],
                         ids=["rank-2", "zero", "beyond-axis"])
def test_bad_k_is_refused_in_one_line(k, match):
    model = make_model([helper.make_node("TopK", ["x", "k"], ["v", "i"], name="top", axis=1)],
                       {"x": (F, (3, 5))}, {"v": F, "i": I64}, {"k": k}, opset=11)
    assert "'top'" in refused(model, match)


def test_bad_axis_is_refused_in_one_line():
    model = make_model([helper.make_node("TopK", ["x", "k"], ["v", "i"], name="top", axis=2)],
                       {"x": (F, (3, 5))}, {"v": F, "i": I64}, {"k": np.array([1], np.int64)}, opset=11)
    refused(model, "axis 2|ONNX shape inference")
