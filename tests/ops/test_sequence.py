"""ONNX ReverseSequence against onnxruntime: REVERSE_V2 when every sequence is whole, else
REVERSE_SEQUENCE with the lengths as a tensor (constant or fed), both axis orders."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from qconvert.errors import ConversionError
from tests.harness import assert_matches_onnxruntime, convert_proto, run_onnxruntime, run_tflite


def _model(shape, lengths, time=0, batch=1, fed=False):
    node = helper.make_node("ReverseSequence", ["x", "l"], ["y"], time_axis=time, batch_axis=batch)
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)]
    inits = []
    if fed:
        inputs.append(helper.make_tensor_value_info("l", TensorProto.INT64, (len(lengths),)))
    else:
        inits.append(numpy_helper.from_array(np.array(lengths, np.int64), "l"))
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.mark.parametrize("shape,lengths,time,batch,op", [
    ((4, 3, 5), [4, 4, 4], 0, 1, "REVERSE_V2"),  # whole sequences: a reverse of the time axis
    ((3, 4), [4, 4, 4], 1, 0, "REVERSE_V2"),
    ((4, 3, 5), [1, 4, 2], 0, 1, "REVERSE_SEQUENCE"),
    ((3, 4, 2, 2), [3, 0, 4], 1, 0, "REVERSE_SEQUENCE"),
])
def test_reverse_sequence_matches_onnxruntime(shape, lengths, time, batch, op):
    _, report = assert_matches_onnxruntime(_model(shape, lengths, time, batch))
    assert op in report.op_counts, report.op_counts


def test_lengths_fed_at_run_time():
    model = _model((4, 3, 5), [0, 0, 0], fed=True)
    flatbuffer, report = convert_proto(model)
    rng = np.random.default_rng(0)
    for lengths in ([1, 4, 2], [4, 0, 3]):
        feeds = {"x": rng.standard_normal((4, 3, 5)).astype(np.float32), "l": np.array(lengths, np.int64)}
        np.testing.assert_array_equal(run_tflite(flatbuffer, report, feeds)["y"],
                                      run_onnxruntime(model, feeds)["y"])


@pytest.mark.parametrize("lengths,time,message", [
    ([5, 1, 1], 0, "outside 0..4"),
    ([1, 1], 0, "sequence_lens of shape"),
    ([1, 1, 1], 2, "time_axis 2"),
])
def test_refusals_name_the_problem(lengths, time, message):
    with pytest.raises(ConversionError, match=message):
        convert_proto(_model((4, 3, 5), lengths, time=time, batch=1))
