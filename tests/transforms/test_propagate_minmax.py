"""propagate_minmax (quantize phase): every float activation gets a range, and the ranges obey the
int8 kernels' rules: an array without one takes its neighbour's across a single-input same-scale
op; --default-range fills the rest; a same-scale op's output takes the union of its inputs'
ranges, pushed back to the inputs whose producers choose their range freely (unless the output
range is the model's own, from a QDQ pair); a fixed-output op's output gets the range its fixed
int8 params represent.

Shown here, with the step alone on IR carrying calibrated ranges: each of those rules, the
expected ranges worked out by hand (LOGISTIC's params 1/256 and -128 represent [0, 255/256]).
End to end, the Max of two convs converts with --quantize to a MAXIMUM whose inputs are the two
CONV_2D outputs with the MAXIMUM's own params, so that no requantizing QUANTIZE sits between
them; the file matches onnxruntime within 2 output steps."""

import numpy as np
from onnx import TensorProto, helper

from qconvert.ir import MinMax
from qconvert.transforms.quantization import QDQ_SOURCE
from qconvert.tflite.reader import read
from qconvert.transforms.engine import run_once
from qconvert.transforms.propagate_minmax import propagate_minmax
from tests.harness import assert_int8_matches_onnxruntime, grid_weights, make_model
from tests.transforms.builders import Builder

F = TensorProto.FLOAT
S = (2, 3)


def with_ranges(builder, **ranges):
    for name, (lo, hi, *source) in ranges.items():
        builder.model.arrays[name].minmax = MinMax(lo, hi, source[0] if source else "calibration")
    return builder.model


def run(model, default_range=None):
    run_once(model, [("propagate_minmax", lambda m: propagate_minmax(m, default_range=default_range))])


def span(model, name):
    minmax = model.arrays[name].minmax
    return None if minmax is None else (minmax.min, minmax.max)


def test_a_reshapes_missing_range_is_its_inputs():
    b = Builder().input("x", S).const("shape", np.array([3, 2], np.int32))
    b.op("RESHAPE", ["x", "shape"], "r", (3, 2)).op("RELU", ["r"], "y", (3, 2)).output("y")
    model = with_ranges(b, x=(-1.0, 1.0), y=(0.0, 1.0))
    run(model)
    assert span(model, "r") == (-1.0, 1.0)


def test_a_max_pools_output_takes_its_inputs_range():
    b = Builder().input("x", (1, 4, 4, 2))
    b.op("MAX_POOL_2D", ["x"], "y", (1, 2, 2, 2), padding="VALID", stride_h=2, stride_w=2,
         filter_height=2, filter_width=2).output("y")
    model = with_ranges(b, x=(-1.0, 2.0), y=(0.0, 1.5))
    run(model)
    assert span(model, "y") == (-1.0, 2.0)


def concat_of_adds_and_a_logistic(output_range):
    """CONCATENATION(ADD -> a, ADD -> b, LOGISTIC -> s) -> c."""
    b = Builder().input("x", S).input("z", S)
    b.op("ADD", ["x", "z"], "a", S).op("SUB", ["x", "z"], "b", S).op("LOGISTIC", ["x"], "s", S)
    b.op("CONCATENATION", ["a", "b", "s"], "c", (2, 9), axis=1).output("c")
    return with_ranges(b, x=(-1.0, 1.0), z=(-1.0, 1.0), a=(-2.0, 0.5), b=(-0.5, 3.0), s=(0.3, 0.7),
                       c=output_range)


def test_a_concatenation_takes_the_union_and_gives_it_to_its_free_inputs():
    model = concat_of_adds_and_a_logistic((-2.0, 3.0))
    run(model)
    assert span(model, "s") == (0.0, 255 / 256)  # the fixed params' range, not the union
    assert span(model, "a") == span(model, "b") == span(model, "c") == (-2.0, 3.0)


def test_a_concatenations_qdq_range_is_kept_and_given_to_its_free_inputs():
    model = concat_of_adds_and_a_logistic((-1.0, 1.0, QDQ_SOURCE))
    run(model)
    assert span(model, "c") == span(model, "a") == span(model, "b") == (-1.0, 1.0)
    assert span(model, "s") == (0.0, 255 / 256)


def test_default_range_fills_arrays_without_one(caplog):
    b = Builder().input("x", S).op("ADD", ["x", "x"], "a", S).op("RELU", ["a"], "y", S).output("y")
    model = with_ranges(b, x=(-1.0, 1.0))
    with caplog.at_level("WARNING", logger="qconvert"):
        run(model, default_range=(-6.0, 6.0))
    assert span(model, "a") == span(model, "y") == (-6.0, 6.0) and span(model, "x") == (-1.0, 1.0)
    assert "2 tensors without a calibrated range use [-6, 6]" in caplog.text


def max_of_two_convs():
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["x", "w2"], ["c2"]),
             helper.make_node("Max", ["c1", "c2"], ["y"])]
    return make_model(nodes, {"x": (F, (1, 3, 6, 6))}, {"y": F},
                      {"w1": grid_weights((4, 3, 3, 3), seed=1), "w2": grid_weights((4, 3, 1, 1), seed=2)})


def test_onnx_max_of_two_convs_shares_one_set_of_params(tmp_path):
    flatbuffer, report = assert_int8_matches_onnxruntime(max_of_two_convs(), tmp_path)
    assert report.op_counts == {"QUANTIZE": 1, "CONV_2D": 2, "MAXIMUM": 1, "DEQUANTIZE": 1}
    summary = read(flatbuffer)
    maximum = next(op for op in summary.operators if op.name == "MAXIMUM")
    producers = {o: op.name for op in summary.operators for o in op.outputs}
    assert [producers[i] for i in maximum.inputs] == ["CONV_2D", "CONV_2D"]
    params = {(tuple(summary.tensors[i].scales), tuple(summary.tensors[i].zero_points))
              for i in maximum.inputs + maximum.outputs}
    assert len(params) == 1
