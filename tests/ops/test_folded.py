"""The ops the loader folds (qconvert/ops/folded.py), where it cannot: a Range of operands
computed at run time is TFLite's RANGE, its length set when the model runs, compared with
onnxruntime at several lengths (empty, negative steps, float steps) and feeding a Gather."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.harness import assert_matches_onnxruntime, make_model

I64, F = TensorProto.INT64, TensorProto.FLOAT


def _range_model(dtype, after=()):
    """y = Range(start, limit, delta) of three scalar graph inputs, then `after`."""
    nodes = [helper.make_node("Range", ["start", "limit", "delta"], ["y"]), *(n for n, _ in after)]
    return make_model(nodes, {n: (dtype, ()) for n in ("start", "limit", "delta")},
                      {"y": dtype, **{n.output[0]: t for n, t in after}}, opset=13)


@pytest.mark.parametrize("dtype,values", [
    (I64, [(0, 5, 1), (3, 3, 1), (10, 2, -3), (-4, 7, 2), (0, 1, 5)]),
    # (an empty float Range as a graph output: LiteRT's RANGE leaves it without data, which
    # its Python API cannot read; an empty one read by another op, as the int64 path's CAST, runs)
    (F, [(0.5, 2.0, 0.25), (1.0, -1.0, -0.5), (-2.0, 3.5, 1.5)]),
])
def test_range_of_run_time_operands_matches_at_every_length(dtype, values):
    model = _range_model(dtype)
    np_type = np.int64 if dtype == I64 else np.float32
    for start, limit, delta in values:
        feeds = {"start": np.array(start, np_type), "limit": np.array(limit, np_type),
                 "delta": np.array(delta, np_type)}
        assert_matches_onnxruntime(model, feeds, rtol=0, atol=0)


def test_range_positions_gather_a_table():
    """Positions 0..n-1 of a run-time n gather rows of a table: what follows resizes with n."""
    table = helper.make_tensor("table", F, [16, 3], np.arange(48, dtype=np.float32).tolist())
    model = _range_model(I64, [(helper.make_node("Gather", ["table", "y"], ["rows"], axis=0), F)])
    model.graph.initializer.append(table)
    for n in (1, 7, 16):
        feeds = {"start": np.array(0, np.int64), "limit": np.array(n, np.int64),
                 "delta": np.array(1, np.int64)}
        assert_matches_onnxruntime(model, feeds, rtol=0, atol=0)
