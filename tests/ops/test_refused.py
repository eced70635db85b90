"""The ONNX ops without an importer are refused in one line that says why (qconvert/ops/refused.py):
grouped by op, with a count and the first node names."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

import qconvert.ops  # noqa: F401  (registers every importer)
from qconvert.ops.refused import DATA_DEPENDENT, REFUSED
from qconvert.ops.registry import ONNX_IMPORTERS
from tests.harness import assert_refused_in_one_line, make_model


def test_no_op_is_both_imported_and_refused():
    assert not set(REFUSED) & set(ONNX_IMPORTERS)


def test_unsupported_nodes_are_grouped_by_op_with_the_reason():
    nodes = [helper.make_node("Unique", ["x"], [f"u{k}"], name=f"unique_{k}") for k in range(4)]
    nodes.append(helper.make_node("StringNormalizer", ["s"], ["n"], name="normalizer"))
    model = make_model(nodes, {"x": (TensorProto.FLOAT, [3, 4]), "s": (TensorProto.STRING, [2])},
                       {"u0": TensorProto.FLOAT, "u1": TensorProto.FLOAT, "u2": TensorProto.FLOAT,
                        "u3": TensorProto.FLOAT, "n": TensorProto.STRING})
    message = assert_refused_in_one_line(model, "5 unsupported ONNX nodes")
    assert "Unique x 4 ('unique_0', 'unique_1', 'unique_2', ...): " + DATA_DEPENDENT in message
    assert "; StringNormalizer ('normalizer'): " in message


def test_a_refused_op_on_constants_is_folded():
    """NonZero of a constant is a constant: the loader folds it before its importer is asked."""
    from tests.harness import assert_matches_onnxruntime

    model = make_model([helper.make_node("NonZero", ["c"], ["idx"]),
                        helper.make_node("Cast", ["idx"], ["idx_f"], to=TensorProto.FLOAT),
                        helper.make_node("ReduceSum", ["idx_f"], ["s"], keepdims=1),
                        helper.make_node("Add", ["x", "s"], ["y"])],
                       {"x": (TensorProto.FLOAT, [1, 1])}, {"y": TensorProto.FLOAT},
                       {"c": np.array([[0, 1, 0], [2, 0, 3]], np.float32)})
    assert_matches_onnxruntime(model)


def test_a_tensorflow_op_left_by_the_exporter_is_named_so():
    """tf2onnx leaves StatefulPartitionedCall (a Keras function it could not inline) or Erfc in
    the graph: not ONNX at all, which the refusal says."""
    model = make_model([helper.make_node("StatefulPartitionedCall", ["x"], ["y"], name="call")],
                       {"x": (TensorProto.FLOAT, [2])}, {"y": TensorProto.FLOAT})
    message = assert_refused_in_one_line(model, "1 unsupported ONNX node")
    assert "StatefulPartitionedCall ('call'): not an ONNX operator" in message
