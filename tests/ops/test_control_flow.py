"""ONNX control flow: If, Loop and Scan converted by the real converter, run in LiteRT and
compared with onnxruntime, float and int8.

Constant control (an If whose condition folds, a small Loop with a constant trip count, a Scan)
is flattened at load time: the written model has no IF or WHILE."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from qconvert.errors import ConversionError
from qconvert.onnx import control_flow
from tests.harness import (
    assert_matches_onnxruntime,
    calibration_set,
    convert_proto,
    convert_quantized,
    make_model,
    random_feeds,
    read_tflite,
    run_onnxruntime,
    run_tflite,
)

F, B, I64 = TensorProto.FLOAT, TensorProto.BOOL, TensorProto.INT64


def value(name, elem_type, shape):
    return helper.make_tensor_value_info(name, elem_type, shape)


def graph(nodes, outputs, inputs=(), inits=()):
    return helper.make_graph(nodes, "body", list(inputs), list(outputs), list(inits))


def constant_bool(name, flag):
    return helper.make_node("Constant", [], [name], value=helper.make_tensor(name + "_v", B, [], [flag]))


def branches(shape=(2, 3)):
    """then: Relu(x) * w (a branch initializer); else: Neg(x) + y, both reading outer tensors."""
    w = helper.make_tensor("w", F, [shape[-1]], np.linspace(0.5, 1.5, shape[-1]).astype(np.float32))
    then = graph([helper.make_node("Relu", ["x"], ["t"]), helper.make_node("Mul", ["t", "w"], ["tw"])],
                 [value("tw", F, shape)], inits=[w])
    other = graph([helper.make_node("Neg", ["x"], ["e"]), helper.make_node("Add", ["e", "y"], ["ey"])],
                  [value("ey", F, shape)])
    return then, other


def ops_of(flatbuffer) -> set[str]:
    return {name for name, _ in read_tflite(flatbuffer).ops}


@pytest.mark.parametrize("flag", [True, False])
def test_if_with_constant_condition_becomes_its_branch(flag):
    then, other = branches()
    model = make_model([constant_bool("c", flag),
                        helper.make_node("If", ["c"], ["z"], then_branch=then, else_branch=other)],
                       {"x": (F, [2, 3]), "y": (F, [2, 3])}, {"z": F})
    flatbuffer, _ = assert_matches_onnxruntime(model, io_layout="onnx")
    assert ops_of(flatbuffer) == ({"RELU", "MUL"} if flag else {"NEG", "ADD"})


def test_if_whose_condition_folds_from_shapes():
    """The exporter's case: the condition is computed from static shapes (Shape, Equal)."""
    then, other = branches()
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("ReduceProd", ["s"], ["n"], keepdims=0),
             helper.make_node("Equal", ["n", "six"], ["c"]),
             helper.make_node("If", ["c"], ["z"], then_branch=then, else_branch=other)]
    model = make_model(nodes, {"x": (F, [2, 3]), "y": (F, [2, 3])}, {"z": F},
                       inits={"six": np.array(6, np.int64)})
    flatbuffer, _ = assert_matches_onnxruntime(model, io_layout="onnx")
    assert ops_of(flatbuffer) == {"RELU", "MUL"}


def test_nested_constant_if():
    inner_then, inner_else = branches()
    inner = graph([constant_bool("c2", False),
                   helper.make_node("If", ["c2"], ["r"], then_branch=inner_then, else_branch=inner_else)],
                  [value("r", F, [2, 3])])
    outer_else = graph([helper.make_node("Sigmoid", ["x"], ["q"])], [value("q", F, [2, 3])])
    model = make_model([constant_bool("c", True),
                        helper.make_node("If", ["c"], ["z"], then_branch=inner, else_branch=outer_else)],
                       {"x": (F, [2, 3]), "y": (F, [2, 3])}, {"z": F})
    flatbuffer, _ = assert_matches_onnxruntime(model, io_layout="onnx")
    assert ops_of(flatbuffer) == {"NEG", "ADD"}


def counting_body(shape=(2, 3), cond_out="cond_in"):
    """Loop body: v' = (v + i) * x, scan output v' * 2; the condition passes through."""
    nodes = [helper.make_node("Cast", ["i"], ["fi"], to=F),
             helper.make_node("Add", ["v", "fi"], ["vi"]),
             helper.make_node("Mul", ["vi", "x"], ["v_next"]),
             helper.make_node("Add", ["v_next", "v_next"], ["doubled"])]
    if cond_out == "identity":
        nodes.append(helper.make_node("Identity", ["cond_in"], ["cond_out"]))
        cond_out = "cond_out"
    return graph(nodes,
                 [value(cond_out, B, []), value("v_next", F, list(shape)), value("doubled", F, list(shape))],
                 inputs=[value("i", I64, []), value("cond_in", B, []), value("v", F, list(shape))])


@pytest.mark.parametrize("cond_out", ["cond_in", "identity"])
def test_loop_with_constant_trip_count_is_unrolled(cond_out):
    model = make_model([helper.make_node("Loop", ["M", "", "v0"], ["v_final", "scanned"],
                                         body=counting_body(cond_out=cond_out))],
                       {"x": (F, [2, 3]), "v0": (F, [2, 3])}, {"v_final": F, "scanned": F},
                       inits={"M": np.array(4, np.int64)})
    flatbuffer, _ = assert_matches_onnxruntime(model, io_layout="onnx")
    assert "WHILE" not in ops_of(flatbuffer) and "CONCATENATION" in ops_of(flatbuffer)


def test_scan_is_unrolled_with_axes_and_directions():
    body = graph([helper.make_node("Add", ["s", "e"], ["s2"]),
                  helper.make_node("Mul", ["s2", "e"], ["o"])],
                 [value("s2", F, [3]), value("o", F, None)],  # o's rank: by shape inference
                 inputs=[value("s", F, [3]), value("e", F, [3])])
    model = make_model([helper.make_node("Scan", ["s0", "xs"], ["s_final", "ys"], body=body,
                                         num_scan_inputs=1, scan_input_axes=[1],
                                         scan_input_directions=[1], scan_output_axes=[-1],
                                         scan_output_directions=[1])],
                       {"s0": (F, [3]), "xs": (F, [3, 5])}, {"s_final": F, "ys": F})
    flatbuffer, _ = assert_matches_onnxruntime(model, io_layout="onnx")
    assert "WHILE" not in ops_of(flatbuffer)


def test_scan_beyond_the_unrolling_bound_is_refused():
    body = graph([helper.make_node("Add", ["s", "e"], ["s2"])], [value("s2", F, [3])],
                 inputs=[value("s", F, [3]), value("e", F, [3])])
    steps = control_flow.MAX_UNROLLED_ITERATIONS + 1
    model = make_model([helper.make_node("Scan", ["s0", "xs"], ["s_final"], body=body, num_scan_inputs=1)],
                       {"s0": (F, [3]), "xs": (F, [steps, 3])}, {"s_final": F})
    with pytest.raises(ConversionError, match=r"node 'Scan_0:s_final' \(Scan\): 65 steps"):
        convert_proto(model)


def test_unrolled_loop_int8(tmp_path):
    model = make_model([helper.make_node("Loop", ["M", "", "v0"], ["v_final", "scanned"],
                                         body=counting_body())],
                       {"x": (F, [2, 3]), "v0": (F, [2, 3])}, {"v_final": F, "scanned": F},
                       inits={"M": np.array(3, np.int64)})
    samples = calibration_set(model, scale=0.5)
    flatbuffer, report = convert_quantized(model, samples, tmp_path, io_layout="onnx")
    feeds = {name: values[0] for name, values in samples.items()}
    expected, actual = run_onnxruntime(model, feeds), run_tflite(flatbuffer, report, feeds)
    for name, want in expected.items():
        span = float(np.ptp(want)) or 1.0
        assert np.max(np.abs(actual[name] - want)) < 0.05 * span, name


# --- run-time control: TFLite IF and WHILE ----------------------------------------------------

def computed_if(shape=(2, 3)):
    """z = If(sum(x) > 0, Relu(x) * w, -x + y): the condition is computed, both branches read
    outer tensors (x, y), one has an initializer."""
    then, other = branches(shape)
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["z"], then_branch=then, else_branch=other),
             helper.make_node("Mul", ["z", "x"], ["out"])]
    return make_model(nodes, {"x": (F, list(shape)), "y": (F, list(shape))}, {"out": F},
                      inits={"zero": np.array(0, np.float32)})


def signs_feeds(model, seed):
    """Feeds whose x sums to a positive number for even seeds, a negative one for odd seeds."""
    feeds = random_feeds(model, seed)
    feeds["x"] = np.abs(feeds["x"]) * (1 if seed % 2 == 0 else -1)
    return feeds


def test_if_with_computed_condition_becomes_tflite_if():
    model = computed_if()
    for seed in range(4):
        flatbuffer, _ = assert_matches_onnxruntime(model, feeds=signs_feeds(model, seed), io_layout="onnx")
    summary = read_tflite(flatbuffer)
    assert "IF" in ops_of(flatbuffer)
    assert [(s.name, [name for name, _ in s.ops]) for s in summary.subgraphs[1:]] == [
        ("If_2:z then", ["RELU", "MUL"]), ("If_2:z else", ["NEG", "ADD"])]


def test_if_in_nhwc_model():
    """The main graph's layout (NHWC inputs) stops at the IF; its bodies keep the ONNX one."""
    model = computed_if((1, 2, 3, 3))
    for seed in range(2):
        assert_matches_onnxruntime(model, feeds=signs_feeds(model, seed))


def test_if_branches_of_different_shapes_are_refused():
    then = graph([helper.make_node("Relu", ["x"], ["t"])], [value("t", F, [2, 3])])
    other = graph([helper.make_node("ReduceSum", ["x"], ["e"], keepdims=1, axes=[1])], [value("e", F, [2, 1])])
    model = make_model([helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
                        helper.make_node("Greater", ["s", "zero"], ["c"]),
                        helper.make_node("If", ["c"], ["z"], then_branch=then, else_branch=other)],
                       {"x": (F, [2, 3])}, {"z": F}, inits={"zero": np.array(0, np.float32)}, opset=11)
    with pytest.raises(ConversionError, match=r"^node 'If_2:z' \(If\): its branches give output 0 as "
                                              r"float32\[2, 3\] and float32\[2, 1\]"):
        convert_proto(model)


def while_body(shape=(2, 3)):
    """v' = v * x + 1 while sum(v') < limit (limit and x read from the outer graph)."""
    return graph([helper.make_node("Mul", ["v", "x"], ["vx"]),
                  helper.make_node("Add", ["vx", "one"], ["v_next"]),
                  helper.make_node("ReduceSum", ["v_next"], ["s"], keepdims=0),
                  helper.make_node("Less", ["s", "limit"], ["running"])],
                 [value("running", B, []), value("v_next", F, list(shape))],
                 inputs=[value("i", I64, []), value("cond_in", B, []), value("v", F, list(shape))])


def while_model(trip_count=20, scalar_inputs=True):
    """Without scalar_inputs, the limit is 50 and the condition starts true (constants)."""
    inputs = {"x": (F, [2, 3]), "v_in": (F, [2, 3])}
    inits = {"M": np.array(trip_count, np.int64), "one": np.array(1, np.float32)}
    if scalar_inputs:
        inputs.update(limit=(F, []), c0=(B, []))
    else:
        inits.update(limit=np.array(50, np.float32), c0=np.array(True))
    return make_model([helper.make_node("Add", ["v_in", "x"], ["v0"]),
                       helper.make_node("Loop", ["M", "c0", "v0"], ["v_final"], body=while_body()),
                       helper.make_node("Sigmoid", ["v_final"], ["out"])],
                      inputs, {"out": F}, inits=inits)


def while_feeds(model, seed):
    feeds = random_feeds(model, seed)
    feeds["x"] = np.abs(feeds["x"])
    if "limit" in feeds:
        feeds.update(limit=np.array(10 + 40 * seed, np.float32), c0=np.array(seed != 3))
    return feeds


def test_loop_with_runtime_condition_becomes_while():
    model = while_model()
    for seed in range(4):
        flatbuffer, _ = assert_matches_onnxruntime(model, feeds=while_feeds(model, seed), io_layout="onnx")
    summary = read_tflite(flatbuffer)
    assert ops_of(flatbuffer) == {"ADD", "WHILE", "LOGISTIC"}
    assert [s.name for s in summary.subgraphs] == ["main", "Loop_1:v_final cond", "Loop_1:v_final body"]


def test_loop_with_runtime_trip_count_becomes_while():
    body = counting_body()
    body.output.pop()  # no scan output
    model = make_model([helper.make_node("Loop", ["M", "", "v0"], ["v_final"], body=body)],
                       {"M": (I64, []), "x": (F, [2, 3]), "v0": (F, [2, 3])}, {"v_final": F})
    for count in (0, 1, 5):
        feeds = random_feeds(model)
        feeds["M"] = np.array(count, np.int64)
        flatbuffer, _ = assert_matches_onnxruntime(model, feeds=feeds, io_layout="onnx")
    assert "WHILE" in ops_of(flatbuffer)


def test_scan_output_of_runtime_loop_is_refused():
    model = make_model([helper.make_node("Loop", ["M", "", "v0"], ["v_final", "scanned"], body=counting_body())],
                       {"M": (I64, []), "x": (F, [2, 3]), "v0": (F, [2, 3])}, {"v_final": F, "scanned": F})
    with pytest.raises(ConversionError, match=r"^node 'Loop_0:v_final' \(Loop\): scan output 'scanned' of "
                                              r"a loop whose iteration count is known only at run time"):
        convert_proto(model)


def test_runtime_if_nested_in_a_while():
    """The Loop's body holds an If on a computed condition: WHILE's body holds an IF."""
    then = graph([helper.make_node("Mul", ["v", "x"], ["t"])], [value("t", F, [2, 3])])
    other = graph([helper.make_node("Sub", ["v", "x"], ["e"])], [value("e", F, [2, 3])])
    body = graph([helper.make_node("ReduceSum", ["v"], ["s"], keepdims=0),
                  helper.make_node("Greater", ["s", "zero"], ["positive"]),
                  helper.make_node("If", ["positive"], ["v_next"], then_branch=then, else_branch=other),
                  helper.make_node("Identity", ["cond_in"], ["cond_out"])],
                 [value("cond_out", B, []), value("v_next", F, [2, 3])],
                 inputs=[value("i", I64, []), value("cond_in", B, []), value("v", F, [2, 3])])
    model = make_model([helper.make_node("Loop", ["M", "", "v0"], ["v_final"], body=body)],
                       {"M": (I64, []), "x": (F, [2, 3]), "v0": (F, [2, 3])}, {"v_final": F},
                       inits={"zero": np.array(0, np.float32)})
    for count in (0, 3, 6):
        feeds = random_feeds(model, count)
        feeds["M"] = np.array(count, np.int64)
        flatbuffer, _ = assert_matches_onnxruntime(model, feeds=feeds, io_layout="onnx", rtol=1e-3)
    assert [s.name for s in read_tflite(flatbuffer).subgraphs] == [
        "main", "Loop_0:v_final cond", "Loop_0:v_final body", "If_2:v_next then", "If_2:v_next else"]


def assert_int8_close(model, flatbuffer, report, feeds, tolerance=0.05):
    expected, actual = run_onnxruntime(model, feeds), run_tflite(flatbuffer, report, feeds)
    for name, want in expected.items():
        span = float(np.ptp(want)) or 1.0
        assert np.max(np.abs(actual[name] - want)) <= tolerance * span, name


@pytest.mark.parametrize("make, feeds_of", [(computed_if, signs_feeds), (while_model, while_feeds)],
                         ids=["IF", "WHILE"])
def test_control_flow_int8(make, feeds_of, tmp_path):
    """The op and its bodies run float; the main graph quantizes around it."""
    model = make()
    samples = [feeds_of(model, seed) for seed in range(4)]
    calibration = {name: np.stack([s[name] for s in samples]) for name in samples[0]}
    flatbuffer, report = convert_quantized(model, calibration, tmp_path, io_layout="onnx")
    op = "IF" if "IF" in ops_of(flatbuffer) else "WHILE"
    assert {"QUANTIZE", "DEQUANTIZE", op} <= ops_of(flatbuffer)
    assert any(o.op == op and o.reason == "control flow runs float" for o in report.quantization.float_ops)
    for feeds in samples:
        assert_int8_close(model, flatbuffer, report, feeds)


def test_inspect_lists_the_subgraphs_an_op_runs():
    from qconvert.check.inspect_tflite import read_structure

    flatbuffer, _ = convert_proto(while_model(), io_layout="onnx")
    subgraphs = read_structure(flatbuffer)["subgraphs"]
    assert [g["name"] for g in subgraphs] == ["main", "Loop_1:v_final cond", "Loop_1:v_final body"]
    assert [op["calls"] for op in subgraphs[0]["operators"]] == [None, {"cond": 1, "body": 2}, None]


def test_verification_runs_control_flow():
    """qconvert's own verification (generated samples, a scalar bool input among them) runs a
    model with IF and WHILE against onnxruntime."""
    import qconvert

    for model in (computed_if(), while_model()):
        report = qconvert.convert(model, verify=True).report
        assert report.verify is not None and report.verify.passed


@pytest.mark.parametrize("make", [computed_if, lambda: while_model(scalar_inputs=False)], ids=["IF", "WHILE"])
def test_control_flow_in_tflite_micro(make):
    """TFLite Micro has IF and WHILE kernels and runs the float models (its Python interpreter
    takes no scalar inputs: the WHILE model's limit and condition are constants here)."""
    from tests.quantize.test_ops_int8 import run_micro

    model = make()
    flatbuffer, report = convert_proto(model, io_layout="onnx")
    for seed in range(4):
        feeds = signs_feeds(model, seed) if "y" in random_feeds(model) else while_feeds(model, seed)
        expected, actual = run_onnxruntime(model, feeds), run_micro(flatbuffer, report, feeds)
        for name, want in expected.items():
            np.testing.assert_allclose(actual[name], want, rtol=1e-4, atol=1e-5, err_msg=name)


def test_control_flow_output_is_deterministic_and_copies():
    """The same bytes every time; a copied Model (the precision planner's) copies the bodies."""
    from qconvert.onnx.loader import load
    from qconvert.tflite.writer import serialize
    from qconvert.transforms.pipeline import run_pipeline

    for make in (computed_if, while_model):
        first, _ = convert_proto(make(), io_layout="onnx")
        second, _ = convert_proto(make(), io_layout="onnx")
        assert first == second
        model = load(make())
        run_pipeline(model, io_layout="onnx")
        copy = model.copy()
        op, twin = (next(o for o in m.operators if o.subgraphs) for m in (model, copy))
        assert all(twin.subgraphs[k] is not body for k, body in op.subgraphs.items())
        assert bytes(serialize(copy, "d")) == bytes(serialize(model, "d"))


@pytest.mark.parametrize("weights", ["int8", "float16"])
def test_control_flow_with_stored_weights(weights):
    """--weight-only and --float16 change the main graph's weights; the bodies stay float32."""
    model = computed_if()
    flatbuffer, report = convert_proto(model, io_layout="onnx", weights=weights, weight_only_min_elements=1)
    for seed in range(2):
        feeds = signs_feeds(model, seed)
        expected, actual = run_onnxruntime(model, feeds), run_tflite(flatbuffer, report, feeds)
        np.testing.assert_allclose(actual["out"], expected["out"], rtol=1e-2, atol=1e-2)


def test_bodies_passing_values_through():
    """An IF branch returning an outer tensor (through Identity) or an outer constant, and a
    WHILE body carrying a value unchanged: subgraph outputs that are its inputs."""
    then = graph([helper.make_node("Identity", ["x"], ["t"])], [value("t", F, [2, 3])])
    other = graph([helper.make_node("Identity", ["w"], ["e"])], [value("e", F, [2, 3])])
    model = make_model([helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
                        helper.make_node("Greater", ["s", "zero"], ["c"]),
                        helper.make_node("If", ["c"], ["z"], then_branch=then, else_branch=other)],
                       {"x": (F, [2, 3])}, {"z": F},
                       inits={"zero": np.array(0, np.float32), "w": np.ones((2, 3), np.float32)})
    for seed in range(2):
        assert_matches_onnxruntime(model, feeds=signs_feeds(model, seed), io_layout="onnx")
    body = graph([helper.make_node("Identity", ["cond_in"], ["cond_out"]),
                  helper.make_node("Add", ["a", "x"], ["a_next"])],
                 [value("cond_out", B, []), value("a_next", F, [2, 3]), value("b", F, [2, 3])],
                 inputs=[value("i", I64, []), value("cond_in", B, []), value("a", F, [2, 3]),
                         value("b", F, [2, 3])])
    model = make_model([helper.make_node("Loop", ["M", "", "a0", "b0"], ["a_final", "b_final"], body=body)],
                       {"M": (I64, []), "x": (F, [2, 3]), "a0": (F, [2, 3]), "b0": (F, [2, 3])},
                       {"a_final": F, "b_final": F})
    for count in (0, 3):
        feeds = random_feeds(model)
        feeds["M"] = np.array(count, np.int64)
        assert_matches_onnxruntime(model, feeds=feeds, io_layout="onnx")


@pytest.mark.parametrize("count", [control_flow.MAX_UNROLLED_ITERATIONS + 36, 1])
def test_long_loop_with_scan_outputs_becomes_while(count, monkeypatch):
    """Beyond the unrolling bound, a loop with a constant trip count whose condition stays true
    is a WHILE that writes each iteration's scan output into row i of a [count, ...] loop
    variable (count 1: the bound set to 0 to take this path)."""
    if count == 1:
        monkeypatch.setattr(control_flow, "MAX_UNROLLED_ITERATIONS", 0)
    model = make_model([helper.make_node("Loop", ["M", "", "v0"], ["v_final", "scanned"], body=counting_body()),
                        helper.make_node("Sigmoid", ["scanned"], ["out"])],
                       {"x": (F, [2, 3]), "v0": (F, [2, 3])}, {"v_final": F, "out": F},
                       inits={"M": np.array(count, np.int64)})
    feeds = random_feeds(model)
    feeds["x"] = np.clip(feeds["x"], -1, 1).astype(np.float32)
    flatbuffer, _ = assert_matches_onnxruntime(model, feeds=feeds, io_layout="onnx", rtol=1e-3, atol=1e-4)
    assert {"WHILE", "FILL"} <= ops_of(flatbuffer)


def test_loop_without_trip_count_or_condition_is_refused():
    body = counting_body()
    body.output.pop()
    model = make_model([helper.make_node("Loop", ["", "", "v0"], ["v_final"], body=body)],
                       {"x": (F, [2, 3]), "v0": (F, [2, 3])}, {"v_final": F})
    with pytest.raises(ConversionError, match=r"^node 'Loop_0:v_final' \(Loop\): it has neither a trip "
                                              r"count nor a condition: it never ends$"):
        convert_proto(model)


def test_if_with_convolutions_in_its_branches():
    """Layout-sensitive ops in a body: transposes at the body's edges (its boundary keeps the
    ONNX layout), the main graph's NHWC input stops at the IF."""
    rng = np.random.default_rng(0)
    w = helper.make_tensor("w", F, [4, 4, 3, 3], rng.standard_normal((4, 4, 3, 3)).astype(np.float32).ravel())
    then = graph([helper.make_node("Conv", ["x", "w"], ["t"], pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", ["t"], ["tr"])], [value("tr", F, [1, 4, 5, 5])], inits=[w])
    other = graph([helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])],
                  [value("p", F, [1, 4, 5, 5])])
    model = make_model([helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
                        helper.make_node("Greater", ["s", "zero"], ["c"]),
                        helper.make_node("If", ["c"], ["z"], then_branch=then, else_branch=other),
                        helper.make_node("Add", ["z", "x"], ["out"])],
                       {"x": (F, [1, 4, 5, 5])}, {"out": F}, inits={"zero": np.array(0, np.float32)})
    for seed in range(2):
        assert_matches_onnxruntime(model, feeds=signs_feeds(model, seed), rtol=1e-3, atol=1e-4)


def test_loop_carrying_int64_values():
    """int64 loop variables are int32 inside (a counter the body adds to, one passed on as it
    is): the body's boundary has the narrowed types the WHILE passes."""
    body = graph([helper.make_node("Identity", ["cond_in"], ["cond_out"]),
                  helper.make_node("Add", ["a", "x"], ["a_next"]),
                  helper.make_node("Add", ["k", "one"], ["k_next"])],
                 [value("cond_out", B, []), value("a_next", F, [2, 3]), value("b", I64, [2]),
                  value("k_next", I64, [])],
                 inputs=[value("i", I64, []), value("cond_in", B, []), value("a", F, [2, 3]),
                         value("b", I64, [2]), value("k", I64, [])])
    model = make_model([helper.make_node("Loop", ["M", "", "a0", "b0", "k0"], ["a_final", "b_final", "k_final"],
                                         body=body)],
                       {"M": (I64, []), "x": (F, [2, 3]), "a0": (F, [2, 3]), "b0": (I64, [2]), "k0": (I64, [])},
                       {"a_final": F, "b_final": I64, "k_final": I64}, inits={"one": np.array(1, np.int64)})
    for count in (0, 3):
        feeds = random_feeds(model)
        feeds["M"] = np.array(count, np.int64)
        assert_matches_onnxruntime(model, feeds=feeds, io_layout="onnx")


def counter_loop_model(steps: int, data_condition: bool = False):
    """A Keras RNN as tf2onnx writes it: a Loop with a huge trip count whose body carries a time
    counter t and stops when Cast(iteration) < max_iterations and t + 1 < steps are no longer both
    true; h' = tanh(x[t] @ W + h @ U) is carried and scanned (x [steps, 1, 4], h [1, 3]).
    `data_condition` also ANDs the condition with sum(h') < 100, which depends on the data."""
    rng = np.random.default_rng(5)
    body_nodes = [
        helper.make_node("Add", ["t", "t_one"], ["t_next"]),
        helper.make_node("Gather", ["xs", "t"], ["x_t"], axis=0),
        helper.make_node("MatMul", ["x_t", "W"], ["xw"]),
        helper.make_node("MatMul", ["h", "U"], ["hu"]),
        helper.make_node("Add", ["xw", "hu"], ["pre"]),
        helper.make_node("Tanh", ["pre"], ["h_next"]),
        helper.make_node("Identity", ["h_next"], ["h_scan"]),
        helper.make_node("Cast", ["iter"], ["iter_f"], to=F),
        helper.make_node("Less", ["iter_f", "max_iterations"], ["below_max"]),
        helper.make_node("Cast", ["t_next"], ["t_f"], to=F),
        helper.make_node("Less", ["t_f", "steps_f"], ["below_steps"]),
        helper.make_node("And", ["below_max", "below_steps"], ["running"]),
    ]
    if data_condition:
        body_nodes[-1].output[0] = "counters_running"
        body_nodes += [helper.make_node("ReduceSum", ["h_next"], ["total"], keepdims=0),
                       helper.make_node("Less", ["total", "hundred"], ["small"]),
                       helper.make_node("And", ["counters_running", "small"], ["running"])]
    body = graph(body_nodes,
                 [value("running", B, []), value("t_next", TensorProto.INT32, []),
                  value("h_next", F, [1, 3]), value("h_scan", F, [1, 3])],
                 inputs=[value("iter", I64, []), value("cond_in", B, []),
                         value("t", TensorProto.INT32, []), value("h", F, [1, 3])])
    inits = {"M": np.array(2**31 - 1, np.int64), "c0": np.array(True), "t0": np.array(0, np.int32),
             "h0": np.zeros((1, 3), np.float32), "t_one": np.array(1, np.int32),
             "max_iterations": np.array(steps, np.float32), "steps_f": np.array(steps, np.float32),
             "hundred": np.array(100, np.float32),
             "W": rng.standard_normal((4, 3)).astype(np.float32),
             "U": rng.standard_normal((3, 3)).astype(np.float32) * 0.5}
    return make_model([helper.make_node("Identity", ["x"], ["xs"]),
                       helper.make_node("Loop", ["M", "c0", "t0", "h0"], ["t_end", "h_end", "hs"],
                                        body=body)],
                      {"x": (F, [steps, 1, 4])}, {"h_end": F, "hs": F}, inits=inits)


@pytest.mark.parametrize("steps", [10, 100])
def test_loop_whose_condition_counts_keeps_its_scan_output(steps):
    """The condition depends on counters only: running that part of the body alone gives the
    iteration count before the loop runs, so the scan output has a static shape (10 steps unroll,
    100 run as WHILE)."""
    model = counter_loop_model(steps)
    flatbuffer, _ = assert_matches_onnxruntime(model, rtol=1e-4, atol=1e-5, io_layout="onnx")
    assert ("WHILE" in ops_of(flatbuffer)) == (steps > control_flow.MAX_UNROLLED_ITERATIONS)


def test_loop_whose_condition_reads_data_keeps_refusing_its_scan_output():
    with pytest.raises(ConversionError, match="scan output 'hs' of a loop whose iteration count is "
                                              "known only at run time"):
        convert_proto(counter_loop_model(10, data_condition=True))
