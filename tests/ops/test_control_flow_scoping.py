"""Names in nested control-flow bodies resolve by scope (ONNX's rule: a body input, a node output or
an initializer of an inner graph shadows an outer value of the same name), whether the bodies are
unrolled (a constant trip count, a Scan, an If on a constant) or run as TFLite WHILE/IF (a trip
count or a condition computed at run time); and a loop whose trip count is known only at run time
nested in a loop that is unrolled runs as a WHILE in each unrolled copy (issue 32).

Each case nests two or three constructs (If in Loop, Loop in Scan, Loop in Loop, Scan in Loop, If in
If, Loop in Loop in Loop, If in Loop in Scan), every construct in each form it has, and names one
kind of value alike at every depth:
- "none": every name distinct (the nesting alone);
- "body_input": the iteration number of a Loop and the element of a Scan are all "i";
- "carried": the carried values are all "v";
- "initializer": each body's initializer is "w", and the main graph's too;
- "capture": a body reads its parent's values "t" and "v" (outer-scope captures) and defines
  values named as unrolling names the parent's copies ("t0_iter0", ...), which must not capture
  those reads.
Node outputs are not shadowed: ONNX requires a node output to differ from every name visible
in its scope (onnx.checker refuses it). Every case is compared with onnxruntime; an initializer
shadowing an outer one in a model whose If has a constant condition with onnxruntime's graph
optimizations off: its If constant folding (onnxruntime PR 18105) inlines the branch and then
reads the outer initializer of the same name (the reference evaluator errs too, another way).
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.harness import (
    assert_matches_onnxruntime,
    assert_refused_in_one_line,
    convert_proto,
    make_model,
    random_feeds,
    read_tflite,
    run_onnxruntime,
    run_tflite,
)

F, B, I64 = TensorProto.FLOAT, TensorProto.BOOL, TensorProto.INT64
KINDS = ("none", "body_input", "carried", "initializer", "capture")
TRIPS = (3, 2, 2)  # the static trip count of a Loop at depth 0, 1, 2


def value(name, elem_type, shape):
    return helper.make_tensor_value_info(name, elem_type, shape)


def node(op, inputs, outputs, **attrs):
    return helper.make_node(op, inputs, outputs, **attrs)


class Names:
    """The names of the values of the body at `depth` under shadowing `kind`: iteration number
    or scan element i, condition c, carried v, node output t, initializer w (alike at every depth
    for the kind that shadows them), the other node outputs named by depth."""

    def __init__(self, kind: str, depth: int, parent: Names | None):
        self.depth, self.parent = depth, parent
        same = {"body_input": "ic", "carried": "v", "initializer": "w"}.get(kind, "")
        for key in "icvw":
            setattr(self, key, key if key in same else f"{key}{depth}")
        self.t = f"t{depth}"
        if kind == "capture" and parent is not None:  # what unrolling names the parent's copies
            self.t, self.v = f"{parent.t}_iter0", f"{parent.v}_iter1"

    def own(self, name: str) -> str:
        return f"{name}{self.depth}"


def body_nodes(names: Names, inner, first: str) -> list:
    """The body's computation from `first` (its carried value or, in an If, the parent's value):
    f = Cast(i) (a loop), t = first + f (+ the parent's t, captured), u = t * w, the inner
    construct on u (or u itself), next = tanh(r + x)."""
    nodes, t_in = [], first
    if names.i is not None:
        nodes.append(node("Cast", [names.i], [names.own("f")], to=F))
        nodes.append(node("Add", [first, names.own("f")], [names.own("a")]))
        t_in = names.own("a")
    parent = names.parent
    nodes.append(node("Add", [t_in, parent.t if parent else "x"], [names.t]))
    if parent is not None and parent.v is not None:
        nodes.append(node("Add", [names.t, parent.v], [names.own("tv")]))
    else:
        nodes.append(node("Identity", [names.t], [names.own("tv")]))
    nodes.append(node("Mul", [names.own("tv"), names.w], [names.own("u")]))
    if inner is None:
        nodes.append(node("Identity", [names.own("u")], [names.own("r")]))
    else:
        nodes += inner(names, names.own("u"), names.own("r"))
    nodes.append(node("Add", [names.own("r"), "x"], [names.own("s")]))
    nodes.append(node("Tanh", [names.own("s")], [names.own("next")]))
    return nodes


def weights(names: Names, salt: int = 0):
    return numpy_helper.from_array(np.linspace(0.5, 1.2, 3).astype(np.float32) + 0.1 * (names.depth + salt), names.w)


def loop(form: str, kind: str, depth: int, inner=None):
    """A Loop construct: (parent names, initial value, result) -> nodes in the parent's scope.
    `form` "static": a constant trip count (unrolled); "runtime": the graph input K (WHILE)."""
    def make(parent: Names | None, initial: str, result: str) -> list:
        names = Names(kind, depth, parent)
        body = helper.make_graph(
            body_nodes(names, inner and inner(depth + 1), names.v)
            + [node("Identity", [names.c], [names.own("c_out")])], f"loop{depth}",
            [value(names.i, I64, []), value(names.c, B, []), value(names.v, F, [2, 3])],
            [value(names.own("c_out"), B, []), value(names.own("next"), F, [2, 3])], [weights(names)])
        nodes, trip = [], "K"
        if form == "static":
            trip = f"M{depth}"
            nodes.append(node("Constant", [], [trip], value=numpy_helper.from_array(np.array(TRIPS[depth], np.int64))))
        return nodes + [node("Loop", [trip, "", initial], [result], body=body)]
    return make


def scan(kind: str, depth: int, inner=None):
    """A Scan construct over the graph input xs [3, 3] (always unrolled)."""
    def make(parent: Names | None, initial: str, result: str) -> list:
        names = Names(kind, depth, parent)
        body = helper.make_graph(
            body_nodes(names, inner and inner(depth + 1), names.v), f"scan{depth}",
            [value(names.v, F, [2, 3]), value(names.i, F, [3])],
            [value(names.own("next"), F, [2, 3])], [weights(names)])
        return [node("Scan", [initial, "xs"], [result], body=body, num_scan_inputs=1)]
    return make


def branch(names: Names, inner, initial: str, salt: int, name: str):
    nodes = body_nodes(names, inner, initial)
    return helper.make_graph(nodes, name, [], [value(names.own("next"), F, [2, 3])], [weights(names, salt)])


def if_(form: str, kind: str, depth: int, inner=None):
    """An If construct: "static", a constant condition (flattened); "runtime", sum(initial) > 0
    (TFLite IF). Both branches run the body's computation, with different weights."""
    def make(parent: Names | None, initial: str, result: str) -> list:
        names = Names(kind, depth, parent)
        names.i = None  # an If's branches have no inputs
        names.v = parent.v if parent else None
        cond, nodes = f"cond{depth}", []
        if form == "static":
            nodes.append(node("Constant", [], [cond], value=numpy_helper.from_array(np.array(depth % 2 == 0))))
        else:
            nodes += [node("ReduceSum", [initial], [f"sum{depth}"], keepdims=0),
                      node("Greater", [f"sum{depth}", "zero"], [cond])]
        sub = inner and inner(depth + 1)
        then = branch(names, sub, initial, 0, f"then{depth}")
        other = branch(names, sub, initial, 1, f"else{depth}")
        return nodes + [node("If", [cond], [result], then_branch=then, else_branch=other)]
    return make


def nested(*makers):
    """The constructs nested outermost first: each maker(depth, inner) is a construct factory."""
    def at(level: int):
        return makers[level](level, at if level + 1 < len(makers) else None)
    return at(0)


def model_of(construct, kind: str):
    nodes = construct(None, "x_in", "y")
    inits = {"zero": np.array(0, np.float32)}
    if kind == "initializer":  # the main graph's "w" too, which every body shadows
        inits["w"] = np.full(3, 9, np.float32)
    return make_model(nodes + [node("Add", ["y", "w"] if kind == "initializer" else ["y", "zero"], ["out"])],
                      {"x_in": (F, [2, 3]), "x": (F, [2, 3]), "xs": (F, [3, 3]), "K": (I64, [])},
                      {"out": F}, inits=inits)


def feeds_of(model, seed: int, trips: int):
    feeds = random_feeds(model, seed)
    feeds["K"] = np.array(trips, np.int64)
    return feeds


def assert_matches_unoptimized(model, feeds):
    """Converts, runs the .tflite and onnxruntime without its graph optimizations, asserts every
    output matches; returns the flatbuffer."""
    flatbuffer, report = convert_proto(model, io_layout="onnx")
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    actual = run_tflite(flatbuffer, report, feeds)
    for output, want in zip(session.get_outputs(), session.run(None, feeds)):
        np.testing.assert_allclose(actual[output.name], want, rtol=1e-4, atol=1e-5, err_msg=output.name)
    return flatbuffer


# (name, [construct factory per depth: (form, kind) -> maker(depth, inner)])
LOOP = {"static": lambda kind: lambda d, inner: loop("static", kind, d, inner),
        "runtime": lambda kind: lambda d, inner: loop("runtime", kind, d, inner)}
IF = {"static": lambda kind: lambda d, inner: if_("static", kind, d, inner),
      "runtime": lambda kind: lambda d, inner: if_("runtime", kind, d, inner)}
SCAN = {"static": lambda kind: lambda d, inner: scan(kind, d, inner)}
NESTINGS = {
    "if_in_loop": (LOOP, IF), "loop_in_scan": (SCAN, LOOP), "loop_in_loop": (LOOP, LOOP),
    "scan_in_loop": (LOOP, SCAN), "if_in_if": (IF, IF),
    "loop_in_loop_in_loop": (LOOP, LOOP, LOOP), "if_in_loop_in_scan": (SCAN, LOOP, IF),
}


def cases():
    """Every nesting, every form of each of its constructs, every kind of shadowed name (If in If
    has no body inputs or carried values to shadow); a three-deep nesting in all-static and
    all-runtime forms only."""
    for name, constructs in NESTINGS.items():
        forms = [()]
        for options in constructs:
            forms = [f + (form,) for f in forms for form in options]
        if len(constructs) > 2:
            forms = [f for f in forms if len(set(f) - {"static"}) == 0 or "static" not in f[1:]]
        for form in forms:
            for kind in KINDS:
                if name == "if_in_if" and kind in ("body_input", "carried"):
                    continue
                yield pytest.param(name, form, kind, id=f"{name}-{'-'.join(form)}-{kind}")


@pytest.mark.parametrize("nesting, forms, kind", list(cases()))
def test_nested_names_resolve_by_scope(nesting, forms, kind):
    makers = [options[form](kind) for options, form in zip(NESTINGS[nesting], forms)]
    model = model_of(nested(*makers), kind)
    trips = (0, 2) if "runtime" in forms and "loop" in nesting else (2,)
    ort_inlines = kind == "initializer" and any(
        c is IF and f == "static" for c, f in zip(NESTINGS[nesting], forms))
    for seed, count in enumerate(trips):
        feeds = feeds_of(model, seed, count)
        if ort_inlines:
            flatbuffer = assert_matches_unoptimized(model, feeds)
        else:
            flatbuffer, _ = assert_matches_onnxruntime(model, feeds=feeds, io_layout="onnx")
    ops = {name for sub in read_tflite(flatbuffer).subgraphs for name, _ in sub.ops}
    runtime_loop = any(c is LOOP and f == "runtime" for c, f in zip(NESTINGS[nesting], forms))
    assert ("WHILE" in ops) == runtime_loop, ops


def unrolled_outer(inner_body, inner_outputs, outer_outputs):
    """A Loop of 3 constant iterations whose body (carried "v" [2, 3], iteration "i") runs a Loop
    of K (a graph input) iterations over `inner_body`, named alike."""
    body = helper.make_graph(
        [node("Loop", ["K", "", "v"], inner_outputs, body=inner_body),
         node("Identity", ["c"], ["c_out"])], "outer",
        [value("i", I64, []), value("c", B, []), value("v", F, [2, 3])],
        [value("c_out", B, []), value(inner_outputs[0], F, [2, 3])])
    return make_model([node("Loop", ["M", "", "x"], outer_outputs, body=body)],
                      {"x": (F, [2, 3]), "K": (I64, [])}, {outer_outputs[0]: F},
                      inits={"M": np.array(3, np.int64)})


def test_runtime_loop_with_a_scan_output_in_an_unrolled_loop_is_refused():
    """A scan output of a loop whose iteration count is known only at run time has no static
    shape: refused in one line naming the inner loop's copy."""
    inner = helper.make_graph(
        [node("Add", ["v", "x"], ["v_next"]), node("Identity", ["v_next"], ["row"]),
         node("Identity", ["c"], ["c_out"])], "inner",
        [value("i", I64, []), value("c", B, []), value("v", F, [2, 3])],
        [value("c_out", B, []), value("v_next", F, [2, 3]), value("row", F, [2, 3])])
    model = unrolled_outer(inner, ["acc_out", "rows"], ["out"])
    message = assert_refused_in_one_line(model, r"scan output 'rows_iter0' of a loop whose iteration "
                                                r"count is known only at run time")
    assert "iteration0" in message, message


def test_runtime_loop_growing_its_carried_value_in_an_unrolled_loop_is_refused():
    """A carried value whose shape changes from one iteration to the next: WHILE's are static."""
    inner = helper.make_graph(
        [node("Concat", ["v", "x"], ["v_next"], axis=0), node("Identity", ["c"], ["c_out"])], "inner",
        [value("i", I64, []), value("c", B, []), value("v", F, [2, 3])],
        [value("c_out", B, []), value("v_next", F, [4, 3])])
    model = unrolled_outer(inner, ["acc_out"], ["out"])
    assert_refused_in_one_line(model, r"loop-carried value .* TFLite's WHILE needs static shapes")


@pytest.mark.parametrize("count", [0, 1, 4])
def test_runtime_loop_carrying_int64_in_an_unrolled_loop(count):
    """Another dtype: the inner loop carries an int64 counter (named like the outer iteration
    number, "i") beside the float value; both loops read the counter."""
    inner = helper.make_graph(
        [node("Add", ["n", "step"], ["n_next"]), node("Cast", ["n_next"], ["nf"], to=F),
         node("Cast", ["i"], ["jf"], to=F), node("Add", ["nf", "jf"], ["k"]),
         node("Mul", ["v", "x"], ["vx"]), node("Add", ["vx", "k"], ["v_sum"]),
         node("Tanh", ["v_sum"], ["v_next"]), node("Identity", ["c"], ["c_out"])], "inner",
        [value("i", I64, []), value("c", B, []), value("v", F, [2, 3]), value("n", I64, [])],
        [value("c_out", B, []), value("v_next", F, [2, 3]), value("n_next", I64, [])])
    body = helper.make_graph(
        [node("Loop", ["K", "", "v", "i"], ["acc_out", "n_out"], body=inner),
         node("Cast", ["n_out"], ["n_f"], to=F), node("Add", ["acc_out", "n_f"], ["v_next"]),
         node("Identity", ["c"], ["c_out"])], "outer",
        [value("i", I64, []), value("c", B, []), value("v", F, [2, 3])],
        [value("c_out", B, []), value("v_next", F, [2, 3]), value("n_out", I64, [])])
    model = make_model([node("Loop", ["M", "", "x"], ["out", "counts"], body=body)],
                       {"x": (F, [2, 3]), "K": (I64, [])}, {"out": F, "counts": I64},
                       inits={"M": np.array(3, np.int64), "step": np.array(2, np.int64)})
    feeds = feeds_of(model, count, count)
    flatbuffer, _ = assert_matches_onnxruntime(model, feeds=feeds, io_layout="onnx")
    ops = {name for sub in read_tflite(flatbuffer).subgraphs for name, _ in sub.ops}
    assert "WHILE" in ops and "CONCATENATION" in ops, ops


def branch_shadowing_model(flag, own: str):
    """An If whose else branch holds initializers named `own` + "x" and `own` + "c" and adds them;
    the then branch reads the graph input "x" and the outer constant "c". `flag`: the condition,
    "runtime" for sum(y) > 0."""
    then = helper.make_graph([node("Mul", ["x", "c"], ["t"])], "then", [], [value("t", F, [2, 3])])
    other = helper.make_graph(
        [node("Add", [own + "x", own + "c"], ["e"])], "else", [], [value("e", F, [2, 3])],
        [numpy_helper.from_array(np.full((2, 3), 5, np.float32), own + "x"),
         numpy_helper.from_array(np.array(-3, np.float32), own + "c")])
    nodes = [node("ReduceSum", ["y"], ["s"], keepdims=0), node("Greater", ["s", "zero"], ["p"])]
    if flag != "runtime":
        nodes = [node("Constant", [], ["p"], value=numpy_helper.from_array(np.array(flag)))]
    return make_model(nodes + [node("If", ["p"], ["z"], then_branch=then, else_branch=other)],
                      {"x": (F, [2, 3]), "y": (F, [2, 3])}, {"z": F},
                      inits={"zero": np.array(0, np.float32), "c": np.array(2, np.float32)})


@pytest.mark.parametrize("flag", ["runtime", True, False])
def test_if_branch_initializer_named_like_what_the_other_branch_reads(flag):
    """The else branch's initializers "x" and "c" shadow the graph input "x" and the constant "c"
    that the then branch reads: TFLite's IF passes both branches the same inputs, so the else
    branch gets the outer "x" under a name it does not read, and no copy of "c". Expected: the
    same model with the else branch's names made distinct, in onnxruntime (which, given the names
    alike, feeds the values an If's branches capture to both, over the else branch's own)."""
    model = branch_shadowing_model(flag, "")
    twin = branch_shadowing_model(flag, "own_")
    for seed in range(3 if flag == "runtime" else 1):
        feeds = random_feeds(model, seed)
        if seed == 1:
            feeds["y"] = -np.abs(feeds["y"])  # the else branch
        flatbuffer, report = convert_proto(model, io_layout="onnx")
        expected = run_onnxruntime(twin, feeds)["z"]
        np.testing.assert_allclose(run_tflite(flatbuffer, report, feeds)["z"], expected, rtol=1e-6)
