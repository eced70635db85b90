"""center_batch_matmul_operand: an int8 BATCH_MATMUL's second operand gets zero point 0, so that
XNNPACK takes the op (at another zero point it runs in the interpreter); as a graph input, as an
attention's keys and values through the exporter's Reshape and Transpose, and as a constant; the
written model within 2 int8 steps of onnxruntime in LiteRT (the attention within 3.5). Without the step the op is not
delegated (the premise)."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from qconvert.check.inspect_tflite import inspect_file
from tests.harness import assert_int8_matches_onnxruntime, make_model, without_quantize_step

F = TensorProto.FLOAT


def two_inputs():
    model = make_model([helper.make_node("MatMul", ["a", "b"], ["y"])],
                       {"a": (F, (1, 4, 16, 8)), "b": (F, (1, 4, 8, 16))}, {"y": F})
    rng = np.random.default_rng(0)
    return model, {"a": rng.standard_normal((8, 1, 4, 16, 8)).astype(np.float32),
                   "b": (rng.standard_normal((8, 1, 4, 8, 16)) + 1.0).astype(np.float32)}


def attention():
    """x [1, 16, 32] -> q, k, v projections -> 4 heads (Reshape, Transpose) -> softmax(q k^T / 4)
    v -> back to [1, 16, 32]: two BATCH_MATMULs, k^T and v through the exporter's moves."""
    rng = np.random.default_rng(1)
    w = {n: (rng.standard_normal((32, 32)) / 6).astype(np.float32) for n in ("wq", "wk", "wv")}
    heads = np.array([1, 16, 4, 8], np.int64)
    nodes = []
    for n in ("q", "k", "v"):
        nodes += [helper.make_node("MatMul", ["x", f"w{n}"], [f"{n}p"]),
                  helper.make_node("Reshape", [f"{n}p", "heads"], [f"{n}h"])]
    nodes += [helper.make_node("Transpose", ["qh"], ["qt"], perm=[0, 2, 1, 3]),
              helper.make_node("Transpose", ["kh"], ["kt"], perm=[0, 2, 3, 1]),
              helper.make_node("Transpose", ["vh"], ["vt"], perm=[0, 2, 1, 3]),
              helper.make_node("MatMul", ["qt", "kt"], ["s"]),
              helper.make_node("Mul", ["s", "quarter"], ["ss"]),
              helper.make_node("Softmax", ["ss"], ["p"], axis=-1),
              helper.make_node("MatMul", ["p", "vt"], ["o"]),
              helper.make_node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", ["ot", "flat"], ["y"])]
    inits = {**w, "heads": heads, "flat": np.array([1, 16, 32], np.int64), "quarter": np.array(0.25, np.float32)}
    model = make_model(nodes, {"x": (F, (1, 16, 32))}, {"y": F}, inits)
    return model, {"x": rng.standard_normal((8, 1, 16, 32)).astype(np.float32)}


def constant_operand():
    rng = np.random.default_rng(2)
    b = (rng.standard_normal((4, 8, 16)) + 0.5).astype(np.float32)
    model = make_model([helper.make_node("MatMul", ["a", "b"], ["y"])], {"a": (F, (4, 16, 8))}, {"y": F}, {"b": b})
    return model, {"a": rng.standard_normal((8, 4, 16, 8)).astype(np.float32)}


def batch_matmuls(flatbuffer: bytes, tmp_path) -> list:
    """(delegated?, second operand's zero point) of each BATCH_MATMUL of the file."""
    path = tmp_path / "model.tflite"
    path.write_bytes(flatbuffer)
    graph = inspect_file(str(path))["subgraphs"][0]
    found = []
    for op in graph["operators"]:
        if op["op"] == "BATCH_MATMUL":
            quant = graph["tensors"][op["inputs"][1]].get("quantization") or {}
            found.append((op["delegate_partition"] is not None, quant.get("zero_points")))
    return found


@pytest.mark.parametrize("make", [two_inputs, attention, constant_operand], ids=["inputs", "attention", "constant"])
def test_the_second_operand_has_zero_point_0_and_xnnpack_takes_the_op(make, tmp_path):
    model, calibration = make()
    # the attention: four int8 roundings deep (projection, scores, softmax, values): up to 3.05
    # steps over 12 weight seeds, with the step or without it
    steps = 3.5 if make is attention else 2.0
    flatbuffer, _ = assert_int8_matches_onnxruntime(model, tmp_path, calibration=calibration, steps=steps)
    found = batch_matmuls(flatbuffer, tmp_path)
    assert found and all(delegated for delegated, _ in found), found
    assert all(np.all(np.asarray(zp) == 0) for _, zp in found), found


def test_without_the_step_the_op_runs_in_the_interpreter(tmp_path, monkeypatch):
    without_quantize_step(monkeypatch, "center_batch_matmul_operand")
    model, calibration = two_inputs()
    flatbuffer, _ = assert_int8_matches_onnxruntime(model, tmp_path, calibration=calibration, steps=2.0)
    assert batch_matmuls(flatbuffer, tmp_path) == [(False, batch_matmuls(flatbuffer, tmp_path)[0][1])]
