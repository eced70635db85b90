"""Limits before work in the check (issue 40 item 4, qconvert/onnx/can_run.py): the node runs
one sample takes are counted before onnxruntime or LiteRT runs it, a Loop's constant trip count
times its body's nodes (nested Loops multiplied).

At the limit the check runs and passes; one node run below it the file is written unverified, the
summary saying why (both files run in LiteRT here and equal onnxruntime). The issue's Loop of 2^40
trips, which never returned, is one line and exit 0 from the converter, exit 1 from calibration and
from `qconvert verify` (that file is not run here: running it is the hang; its twin of 5 trips is).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from qconvert.onnx.can_run import CheckTooCostly, check_cost
from tests import processes
from tests.check.litert_files import assert_file_matches_onnxruntime

QCONVERT = str(Path(sys.executable).parent / "qconvert")
VARIABLE = "QCONVERT_MAX_CHECK_NODE_RUNS"


def _loop(trips: int, inner: int | None = None) -> onnx.ModelProto:
    """y = x + trips (x [1, 4]) by a Loop of `trips` iterations adding 1 (2 body nodes: Add,
    Identity of the condition); with `inner`, each iteration runs a Loop of `inner` such trips
    and adds 1 more."""
    def body(nodes, name, extra_inits=()):
        return helper.make_graph(
            nodes + [helper.make_node("Identity", ["cond"], ["cond2"])], name,
            [helper.make_tensor_value_info("i", TensorProto.INT64, []),
             helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
             helper.make_tensor_value_info("acc", TensorProto.FLOAT, [1, 4])],
            [helper.make_tensor_value_info("cond2", TensorProto.BOOL, []),
             helper.make_tensor_value_info("acc2", TensorProto.FLOAT, [1, 4])],
            [numpy_helper.from_array(np.ones((1, 4), np.float32), f"one_{name}"), *extra_inits])

    step = helper.make_node("Add", ["acc", "one_leaf"], ["acc2"])
    leaf = body([step], "leaf")
    if inner is not None:
        nested = helper.make_node("Loop", ["m", "t", "acc"], ["inner_acc"], body=leaf, name="inner")
        add = helper.make_node("Add", ["inner_acc", "one_outer"], ["acc2"])
        leaf = body([nested, add], "outer", [numpy_helper.from_array(np.array(inner, np.int64), "m"),
                                              numpy_helper.from_array(np.array(True), "t"),
                                              numpy_helper.from_array(np.ones((1, 4), np.float32),
                                                                      "one_leaf")])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["n", "c", "x"], ["y"], body=leaf, name="trips")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [numpy_helper.from_array(np.array(trips, np.int64), "n"),
         numpy_helper.from_array(np.array(True), "c")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def qconvert(*args, cwd, env=None):
    """The installed command, bounded by its CPU time (a hang is a Hang, not a slow machine)."""
    import os

    return processes.run([QCONVERT, *map(str, args)], capture_output=True, text=True, cwd=cwd,
                         cpu_seconds=120, env={**os.environ, **(env or {})})


def _feeds() -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(0).standard_normal((1, 4)).astype(np.float32)}


def test_the_node_runs_counted_are_trips_times_the_body():
    """5 trips of a 2-node body: 1 + 5 * 2 = 11 node runs (the Loop itself counts once); nested,
    7 outer trips of (1 inner Loop of 3 trips of 2 nodes + Add + Identity): 1 + 7 * (7 + 2) = 64.
    At the count it passes, one below it is refused naming the Loop, its body and its trips."""
    for model, runs, trips, body in ((_loop(5), 11, 5, 2), (_loop(7, inner=3), 64, 7, 9)):
        import os

        os.environ[VARIABLE] = str(runs)
        try:
            check_cost(model)
            os.environ[VARIABLE] = str(runs - 1)
            with pytest.raises(CheckTooCostly) as caught:
                check_cost(model)
        finally:
            del os.environ[VARIABLE]
        message = str(caught.value)
        assert "\n" not in message and f"{runs:,} node runs per sample" in message, message
        assert f"Loop 'trips' runs its {body:,}-node body {trips:,} times" in message
        assert f"limit of {runs - 1:,}" in message and VARIABLE in message


@pytest.mark.parametrize("limit,verified", [(11, True), (10, False)])
def test_a_loop_at_and_over_the_limit_is_checked_or_written_unverified_saying_why(tmp_path, limit, verified):
    """Through the command line: at the limit the check runs ('verify: float' in the summary);
    one below, exit 0 with one line whose summary says 'not verified:' and why, JSON too. Both
    files run in LiteRT equal onnxruntime (x + 5)."""
    onnx.save(_loop(5), tmp_path / "loop.onnx")
    run = qconvert("loop.onnx", "l.tflite", "--io-layout", "onnx", cwd=tmp_path, env={VARIABLE: str(limit)})
    assert run.returncode == 0, run.stderr
    (line,) = run.stderr.splitlines()
    assert ("; verify: float, " in line) == verified and ("; not verified: Loop 'trips'" in line) != verified
    assert_file_matches_onnxruntime(tmp_path / "loop.onnx", tmp_path / "l.tflite", _feeds())
    if not verified:
        report = json.loads(qconvert("loop.onnx", "j.tflite", "--io-layout", "onnx", "--json",
                                     cwd=tmp_path, env={VARIABLE: str(limit)}).stdout)
        assert report["verify"] is None and report["not_verified"].startswith("Loop 'trips' runs")
        assert_file_matches_onnxruntime(tmp_path / "loop.onnx", tmp_path / "j.tflite", _feeds())


def test_a_loop_of_2_to_the_40_trips_is_one_line_not_a_hang(tmp_path):
    """The issue's case: the conversion exits 0 saying 'not verified' (it hung in onnxruntime);
    `qconvert verify` of that file and a --quantize calibration, which run it in onnxruntime
    too, exit 1 in one line naming the Loop, nothing written."""
    onnx.save(_loop(2 ** 40), tmp_path / "loop.onnx")
    np.savez(tmp_path / "cal.npz", x=np.random.default_rng(0).standard_normal((4, 1, 4)).astype(np.float32))
    run = qconvert("loop.onnx", "l.tflite", cwd=tmp_path)
    assert run.returncode == 0 and (tmp_path / "l.tflite").exists(), run.stderr
    (line,) = run.stderr.splitlines()
    assert "; not verified: Loop 'trips' runs its 2-node body 1,099,511,627,776 times" in line
    checked = qconvert("verify", "loop.onnx", "l.tflite", cwd=tmp_path)
    assert checked.returncode == 1 and checked.stdout == ""
    (line,) = checked.stderr.splitlines()
    assert line.startswith("qconvert: error: Loop 'trips' runs") and "for the check" in line
    quantized = qconvert("loop.onnx", "q.tflite", "--quantize", "--calibration", "cal.npz",
                         "--no-verify", cwd=tmp_path)
    assert quantized.returncode == 1 and not (tmp_path / "q.tflite").exists()
    (line,) = quantized.stderr.splitlines()
    assert line.startswith("qconvert: error: Loop 'trips' runs") and "for calibration" in line


def test_nested_loops_multiply_and_the_limit_names_the_variable(tmp_path):
    """1000 outer trips of 1000 inner ones: 1000 * (1 + 1000 * 2 + 2) + 1 node runs, over a limit
    of a million: written unverified; with the variable raised to them the check runs (and the
    file, x + 1000 * 1001, equals onnxruntime's in LiteRT)."""
    onnx.save(_loop(1000, inner=1000), tmp_path / "nested.onnx")
    run = qconvert("nested.onnx", "n.tflite", "--io-layout", "onnx", cwd=tmp_path,
                   env={VARIABLE: "1000000"})
    assert run.returncode == 0, run.stderr
    assert "; not verified: Loop 'trips' runs its 2,003-node body 1,000 times: 2,003,001" in run.stderr
    raised = qconvert("nested.onnx", "r.tflite", "--io-layout", "onnx", cwd=tmp_path,
                      env={VARIABLE: "2003001"})
    assert raised.returncode == 0 and "; verify: float, " in raised.stderr, raised.stderr
    for name in ("n.tflite", "r.tflite"):
        assert_file_matches_onnxruntime(tmp_path / "nested.onnx", tmp_path / name, _feeds(), rtol=1e-6)


def test_a_bad_limit_is_a_usage_error(tmp_path):
    """QCONVERT_MAX_CHECK_NODE_RUNS=0 is exit 2 naming the variable (errors.Limit)."""
    onnx.save(_loop(5), tmp_path / "loop.onnx")
    run = qconvert("loop.onnx", "l.tflite", cwd=tmp_path, env={VARIABLE: "0"})
    assert run.returncode == 2 and VARIABLE in run.stderr and not (tmp_path / "l.tflite").exists()


def test_a_trip_count_from_a_constant_node_is_counted_too(tmp_path):
    """The trip count as a Constant node (value_int, or a one-element value) rather than an
    initializer: 2^40 trips are said the same way, exit 0, not verified."""
    for attribute in ({"value_int": 2 ** 40},
                      {"value": numpy_helper.from_array(np.array([2 ** 40], np.int64))}):
        model = _loop(5)
        del model.graph.initializer[0]  # "n"
        model.graph.node.insert(0, helper.make_node("Constant", [], ["n"], **attribute))
        onnx.save(model, tmp_path / "loop.onnx")
        run = qconvert("loop.onnx", "l.tflite", cwd=tmp_path)
        assert run.returncode == 0, run.stderr
        assert "; not verified: Loop 'trips' runs its 2-node body 1,099,511,627,776 times" in run.stderr
