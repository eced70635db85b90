"""int64 narrowed to int32 inside the graph only where the values allow it (issue 32).

qconvert computes int64 as int32 inside the TFLite graph (qconvert/onnx/loader.py). A constant
that int32 cannot hold keeps its op in int64 where TFLite has an int64 kernel (ADD, SUB, MUL,
FLOOR_MOD, MAXIMUM, MINIMUM) and the op's output leaves the graph as int64; is saturated where
the reader computes the same (a Max bound below int32, a Min bound above it, Slice's ends); and
is otherwise refused in one line naming it, its value and the node. Before, it was saturated
everywhere, and Mod(x, 2^62) computed mod 2147483647 with exit 0. Every case is compared with
onnxruntime on inputs whose int32-computed results int32 holds (the .tflite's contract for int64
inputs and results), or asserted refused in one line.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper

from qconvert.check.runtimes import prepare
from tests.harness import assert_matches_onnxruntime, assert_refused_in_one_line, convert_proto, make_model

BIG = [2**31 - 1, 2**31, 2**62, -(2**31) - 1]
# Inputs per op whose results with a constant int32 holds fit int32 too.
FEEDS = {"Mod": [-7, 0, 5, 2**31 - 2], "Add": [-3, -1, 0], "Sub": [-1, 0, 3], "Mul": [-1, 0, 1],
         "Div": [-7, 0, 5, 2**31 - 2], "Max": [-7, 0, 2**31 - 2], "Min": [-(2**31) + 2, 0, 5]}
# TFLite's DIV has no int64 kernel.
NO_INT64_KERNEL = {"Div"}


def _binary(op: str, c: int):
    return make_model([helper.make_node(op, ["x", "c"], ["y"], name="n")], {"x": (T.INT64, [4])},
                      {"y": T.INT64}, {"c": np.array(c, np.int64)})


@pytest.mark.parametrize("c", BIG)
@pytest.mark.parametrize("op", sorted(FEEDS))
def test_binary_op_with_a_big_int64_constant(op, c):
    """Exact (in int32 where the constant fits, else in int64 or saturated where exact); DIV,
    which has no int64 kernel, refused in one line naming the constant, its value and the node."""
    model = _binary(op, c)
    feeds = {"x": np.resize(np.array(FEEDS[op], np.int64), 4)}
    if -(2**31) <= c < 2**31 or op not in NO_INT64_KERNEL:
        assert_matches_onnxruntime(model, feeds)
    else:
        message = assert_refused_in_one_line(model, "which int32 cannot hold", node="n")
        assert f"'c' holds {c}," in message and "no int64 kernel" in message


@pytest.mark.parametrize("c", [2**62, -(2**40) - 3])
def test_int64_op_takes_values_beyond_int32_from_its_input_too(c):
    """The op kept in int64 computes on the whole int64 range: it reads the int64 input itself,
    so x beyond int32 times or modulo a big constant is exact too."""
    feeds = {"x": np.array([2**31 - 1, -(2**31), -(2**31) - 5, 2**31 + 3], np.int64)}
    for op in ("Mul", "Mod", "Add", "Sub"):
        model = _binary(op, c if op != "Mul" else 2**31)
        assert_matches_onnxruntime(model, feeds)


@pytest.mark.parametrize("fmod", [0, 1])
def test_mod_in_int64_with_both_fmods_and_broadcast_beyond_rank_4(fmod):
    """Mod's integer fmod chain (FLOOR_MOD, LESS, NOT_EQUAL, SUB, SELECT_V2) in int64, and its
    broadcast to rank 5 (FLOOR_MOD broadcasts up to rank 4)."""
    c = np.array([[2**62], [-(2**33) - 1]], np.int64).reshape(1, 1, 2, 1, 1)
    model = make_model([helper.make_node("Mod", ["x", "c"], ["y"], fmod=fmod)],
                       {"x": (T.INT64, [1, 2, 1, 3, 2])}, {"y": T.INT64}, {"c": c})
    x = np.array([-7, 0, 5, 2**31 - 1, -(2**31) + 1, 12], np.int64).reshape(1, 2, 1, 3, 1)
    assert_matches_onnxruntime(model, {"x": np.concatenate([x, -x], axis=-1)})


@pytest.mark.parametrize("op", ["Max", "Min"])
def test_max_min_of_three_with_big_constants(op):
    """n-ary Max/Min in int64, the constant holding values on both sides of int32's range."""
    model = make_model([helper.make_node(op, ["x", "c", "z"], ["y"])],
                       {"x": (T.INT64, [3]), "z": (T.INT64, [3])}, {"y": T.INT64},
                       {"c": np.array([2**40, -(2**50), 7], np.int64)})
    feeds = {"x": np.array([1, -2, 3], np.int64), "z": np.array([2**31 - 1, 0, -(2**31)], np.int64)}
    assert_matches_onnxruntime(model, feeds)


def test_big_constant_op_feeding_another_node_is_refused():
    """Kept in int64 only where its output leaves the graph: inside, int64 is int32."""
    nodes = [helper.make_node("Mod", ["x", "c"], ["m"], name="mod"),
             helper.make_node("Add", ["m", "one"], ["y"])]
    model = make_model(nodes, {"x": (T.INT64, [3])}, {"y": T.INT64},
                       {"c": np.array(2**62, np.int64), "one": np.array(1, np.int64)})
    message = assert_refused_in_one_line(model, "'c' holds 4611686018427387904", node="mod")
    assert "graph output declared int64" in message


def test_mod_by_2_to_the_62_is_exact():
    """The issue's case: before, it converted with exit 0 and computed mod 2147483647."""
    feeds = {"x": np.array([-10, 7, -(2**31), 2**31 - 1], np.int64)}
    assert_matches_onnxruntime(_binary("Mod", 2**62), feeds)


def _range_plus_x(start: int, minus: int, then_neg: bool = False):
    """x + (Range(start, start + 4, 1) - minus) [negated]: Range and Sub folded at load time."""
    nodes = [helper.make_node("Range", ["s", "l", "d"], ["r"]),
             helper.make_node("Sub", ["r", "m"], ["rm"]),
             helper.make_node("Add", ["x", "rm"], ["sum" if then_neg else "y"], name="add")]
    if then_neg:
        nodes.append(helper.make_node("Neg", ["sum"], ["y"]))
    inits = {"s": np.array(start, np.int64), "l": np.array(start + 4, np.int64),
             "d": np.array(1, np.int64), "m": np.array(minus, np.int64)}
    return make_model(nodes, {"x": (T.INT64, [4])}, {"y": T.INT64}, inits, opset=13)


@pytest.mark.parametrize("start", [2**40, 2**62, -(2**31) - 10])
@pytest.mark.parametrize("minus", ["start", 0])
def test_range_beyond_int32(start, minus):
    """Range bounds beyond int32, folded in int64 (counted exactly: in float64 Range(2^62,
    2^62 + 4) had no element): a result int32 holds is narrowed, one it does not keeps the Add
    that reads it in int64."""
    feeds = {"x": np.array([-5, 0, 7, 100], np.int64)}
    assert_matches_onnxruntime(_range_plus_x(start, start if minus == "start" else 0), feeds)


@pytest.mark.parametrize("start", [2**40, -(2**31) - 10])
def test_range_beyond_int32_inside_the_graph_is_refused(start):
    """Read by an Add whose output feeds another node: int32 inside, refused."""
    model = _range_plus_x(start, 0, then_neg=True)
    assert_refused_in_one_line(model, f"'rm' holds {start},.*int32 cannot hold", node="add")


@pytest.mark.parametrize("values", [[2**32 + 5, 2**31, -(2**31) - 1, 7], [-(2**40), 2**63 - 1, 3, -3]])
def test_cast_int64_input_to_int32_wraps_like_onnx(values):
    """ONNX's Cast wraps modulo 2^32 (onnxruntime does); the input's narrowing CAST does too."""
    model = make_model([helper.make_node("Cast", ["x"], ["y"], to=T.INT32)], {"x": (T.INT64, [4])},
                       {"y": T.INT32})
    assert_matches_onnxruntime(model, {"x": np.array(values, np.int64)})


def test_cast_of_a_big_constant_folds_with_wrapping():
    nodes = [helper.make_node("Cast", ["c"], ["c32"], to=T.INT32),
             helper.make_node("Add", ["x", "c32"], ["y"])]
    model = make_model(nodes, {"x": (T.INT32, [3])}, {"y": T.INT32},
                       {"c": np.array([2**32 + 5, 2**40 - 1, -(2**33) + 9], np.int64)})
    assert_matches_onnxruntime(model, {"x": np.array([1, -2, 3], np.int32)})


def _shape_times(k: int, then: str):
    """Shape(x) * k, then Div by k into a Reshape (then="reshape"), added to an input and
    returned (then="add"), or added and negated (then="neg"): the shape arithmetic is folded."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Mul", ["s", "k"], ["sk"])]
    inits = {"k": np.array(k, np.int64)}
    if then == "reshape":
        nodes += [helper.make_node("Div", ["sk", "k"], ["shape"]),
                  helper.make_node("Reshape", ["x", "shape"], ["y"])]
        return make_model(nodes, {"x": (T.FLOAT, [2, 3])}, {"y": T.FLOAT}, inits)
    nodes.append(helper.make_node("Add", ["i", "sk"], ["y" if then == "add" else "sum"], name="add"))
    if then == "neg":
        nodes.append(helper.make_node("Neg", ["sum"], ["y"]))
    return make_model(nodes, {"x": (T.FLOAT, [2, 3]), "i": (T.INT64, [2])}, {"y": T.INT64}, inits)


@pytest.mark.parametrize("then", ["reshape", "add"])
@pytest.mark.parametrize("k", [2**31, 2**40, -(2**35)])
def test_shape_arithmetic_beyond_int32_converts_exactly(k, then):
    assert_matches_onnxruntime(_shape_times(k, then))


@pytest.mark.parametrize("k", [2**31, -(2**35)])
def test_shape_arithmetic_beyond_int32_inside_the_graph_is_refused(k):
    assert_refused_in_one_line(_shape_times(k, "neg"), "'sk' holds .*int32 cannot hold", node="add")


def test_slice_with_int64_max_ends_still_converts():
    """PyTorch's "to the end" sentinel: Slice clamps ends to the dimension, so saturating it is
    exact (the one place saturation was meant for)."""
    model = make_model([helper.make_node("Slice", ["x", "s", "e"], ["y"])], {"x": (T.FLOAT, [2, 5])},
                       {"y": T.FLOAT}, {"s": np.array([1], np.int64), "e": np.array([2**63 - 1], np.int64)})
    assert_matches_onnxruntime(model)


def _mod_input_model():
    nodes = [helper.make_node("Mod", ["x", "c"], ["y"]),
             helper.make_node("Gather", ["table", "ids"], ["z"])]
    return make_model(nodes, {"x": (T.INT64, [64]), "ids": (T.INT64, [64])},
                      {"y": T.INT64, "z": T.FLOAT},
                      {"c": np.array(2**31 - 1, np.int64), "table": np.ones((10, 2), np.float32)})


def test_large_int64_input_through_mod():
    """Inputs up to int32's limits (what the .tflite takes for an int64 input) through Mod."""
    x = np.array([2**31 - 2, -(2**31) + 1, 2**30 + 7, -5] * 16, np.int64)
    assert_matches_onnxruntime(_mod_input_model(), {"x": x, "ids": np.arange(64, dtype=np.int64) % 10})


def test_default_check_draws_arithmetic_inputs_wide_and_ids_small(tmp_path):
    """The check's generated samples: the Mod operand spans both signs and magnitudes past 2^16
    (so a narrowed constant shows); the Gather ids stay below the 10-row table."""
    flatbuffer, _ = convert_proto(_mod_input_model())
    path = tmp_path / "m.tflite"
    path.write_bytes(flatbuffer)
    _, samples = prepare(_mod_input_model(), str(path), None, 1)
    sample = samples[0]
    assert sample["x"].min() < -(2**16) and sample["x"].max() > 2**16
    assert np.abs(sample["x"]).max() < 2**31
    assert 0 <= sample["ids"].min() and sample["ids"].max() < 10


def _bounded_then_neg(op: str, bounds: list[int]):
    """Neg(op(x, bounds...)): the bound is read inside the graph, where int64 is int32."""
    names = [f"b{i}" for i in range(len(bounds))]
    nodes = [helper.make_node(op, ["x", *names], ["m"], name="bound"), helper.make_node("Neg", ["m"], ["y"])]
    inits = {n: np.array(b, np.int64) for n, b in zip(names, bounds)}
    return make_model(nodes, {"x": (T.INT64, [4])}, {"y": T.INT64}, inits)


@pytest.mark.parametrize("op, bounds", [("Max", [-(2**40)]), ("Min", [2**62]), ("Clip", [-(2**40), 2**40]),
                                        ("Clip", [0, 2**35]), ("Clip", [-(2**35), 5])])
def test_bound_beyond_int32_on_the_far_side_is_saturated_exactly(op, bounds):
    """A lower bound below int32 or an upper bound above it leaves every int32 value as it is."""
    feeds = {"x": np.array([-(2**31) + 1, -3, 7, 2**31 - 1], np.int64)}
    assert_matches_onnxruntime(_bounded_then_neg(op, bounds), feeds)


@pytest.mark.parametrize("op, bounds", [("Max", [2**40]), ("Min", [-(2**62)]), ("Clip", [2**40, 2**41]),
                                        ("Clip", [-(2**41), -(2**40)])])
def test_bound_beyond_int32_on_the_near_side_is_refused(op, bounds):
    assert_refused_in_one_line(_bounded_then_neg(op, bounds), "'b[01]' holds .*int32 cannot hold",
                               node="bound")


def test_ids_read_inside_a_subgraph_stay_small():
    """An input a body reads (an If branch's Gather) is an index there: never drawn wide."""
    from qconvert.check.input_ranges import value_inputs

    body = helper.make_graph([helper.make_node("Gather", ["table", "ids"], ["o"])], "b", [],
                             [helper.make_tensor_value_info("o", T.FLOAT, None)])
    model = make_model([helper.make_node("If", ["c"], ["z"], then_branch=body, else_branch=body),
                        helper.make_node("Mod", ["x", "k"], ["y"])],
                       {"x": (T.INT64, [3]), "ids": (T.INT64, [3]), "c": (T.BOOL, [])},
                       {"z": T.FLOAT, "y": T.INT64},
                       {"table": np.zeros((10, 2), np.float32), "k": np.array(7, np.int64)})
    assert value_inputs(model.graph) == {"x"}
