"""ONNX control flow left after flattening (control_flow.py), If and Loop, imported as TFLite's IF
and WHILE with their bodies as subgraphs.

`import_control` (the loader's hook for the If and Loop nodes left) makes them run-time
control: an If becomes IF (inputs: the condition, then the outer values its branches read), a
Loop WHILE (loop variables: the iteration counter, the trip count, the condition, the carried
values, the outer values the body reads, and the scan outputs of a loop whose iteration count is
static). Each body is loaded by the loader itself into a Model of its own (Operator.subgraphs),
with the outer constants it reads copied in and the outer activations as explicit inputs: a TFLite
subgraph sees only its inputs. Static shapes everywhere: both branches give the same shapes, a
loop-carried value keeps its shape, and a scan output needs an iteration count known before the
loop runs; the rest is refused in one line naming the node.

It is apart from control_flow.py because it runs at another time and makes another thing: the
flattening rewrites the ONNX graph in the loader's folding loop, this builds IR (TFLite ops and
subgraphs) when the loader imports the nodes. It reads a body's names by the same scoping rules,
with control_flow.py's helpers, and a loop's iteration count from there (static_count).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import ConversionError
from ..ir import Model, Operator
from .control_flow import attribute, defined_names, free_names, graph_names, static_count
from .file import OnnxFile


def is_runtime_control(node: onnx.NodeProto) -> bool:
    """An If or Loop that flattening left: it becomes a TFLite IF or WHILE."""
    return node.op_type in ("If", "Loop") and node.domain in ("", "ai.onnx")


class _Outer:
    """What the importer of a control-flow node needs from the loader: its graph (`_Graph`),
    the model being built, ensure_array, the aliases of narrowed graph inputs, and `load`
    itself for the bodies (passed in: this module may not import the loader, which imports it)."""

    def __init__(self, graph, model, ensure_array, aliases, load, node, label):
        self.graph, self.model, self.ensure_array, self.aliases = graph, model, ensure_array, aliases
        self.load, self.node, self.label = load, node, label

    def error(self, message: str) -> ConversionError:
        return ConversionError(f"node {self.label!r} ({self.node.op_type}): {message}")

    def array(self, name: str) -> str:
        """The model's array holding outer value `name` (created if needed)."""
        self.ensure_array(name, f"input of node {self.label!r} ({self.node.op_type})")
        return self.aliases.get(name, name)

    def captured(self, bodies) -> tuple[list[str], dict[str, np.ndarray]]:
        """The outer values the bodies read: activations (explicit subgraph inputs, in order) and
        constants (copied into the bodies)."""
        activations, constants = [], {}
        for body in bodies:
            for name in free_names(body):
                if name in self.graph.constants:
                    constants[name] = self.graph.constants[name]
                elif name not in activations:
                    activations.append(name)
        return activations, constants

    def load_body(self, body: onnx.GraphProto, inputs: list[tuple[str, int, tuple]],
                  constants: dict[str, np.ndarray], outputs) -> Model:
        """`body` as a Model of its own, loaded by the loader: `inputs` (name, ONNX element type,
        shape) are its inputs, `constants` the outer constants it reads, `outputs` its outputs
        (ValueInfos). The Model's inputs and outputs are in the graph's internal dtypes (int32 for
        int64...), as the outer tensors that the control-flow op passes are."""
        for v in outputs:
            kind = (v.type.WhichOneof("value") or "tensor_type").removesuffix("_type")
            if kind != "tensor":
                raise self.error(f"its body {body.name!r} gives {v.name!r} as "
                                 f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}; qconvert "
                                 "converts tensors only")
        inputs, constants = _unshadowed(body, inputs, constants)
        # A body output that is one of its inputs (a value carried unchanged) gets an Identity:
        # the loader gives a graph's inputs and outputs tensors of their own.
        given, nodes, names = {name for name, _, _ in inputs}, list(body.node), []
        taken = given | defined_names(body) | set(constants)
        for v in outputs:
            name = v.name
            if name in given:
                while name in taken:
                    name += "_out"
                taken.add(name)
                nodes.append(helper.make_node("Identity", [v.name], [name]))
            names.append(name)
        graph = helper.make_graph(
            nodes, body.name or "body",
            [helper.make_tensor_value_info(name, elem, list(shape)) for name, elem, shape in inputs],
            [helper.make_tensor_value_info(name, 0, None) for name in names],
            [numpy_helper.from_array(np.asarray(value), name) for name, value in constants.items()]
            + list(body.initializer))
        proto = self.graph.proto
        model = helper.make_model(graph, opset_imports=list(proto.opset_import),
                                  ir_version=max(proto.ir_version, 4))
        model.functions.extend(proto.functions)
        try:
            # Checked with the outer model (validate.check_model reads every subgraph).
            loaded = self.load(OnnxFile(model, checked=True), {name: tuple(shape) for name, _, shape in inputs},
                               outer=(self.graph, self.label))
        except ConversionError as e:
            raise self.error(f"in its body {body.name!r}: {e}") from None
        return _internal_boundary(loaded)

    def elem_type(self, name: str) -> int:
        return helper.np_dtype_to_tensor_dtype(self.graph.dtypes[name])


def _unshadowed(body: onnx.GraphProto, inputs: list[tuple[str, int, tuple]],
                constants: dict[str, np.ndarray]):
    """`inputs` and `constants` for `body` by ONNX's scoping rules: an outer value that the body
    defines itself (an If's branch holding an initializer named like a value the other branch
    reads) is shadowed there, so the body gets no copy of that constant, and that input (the
    op passes it to both branches) a new name nothing in the body reads."""
    own = defined_names(body) - {v.name for v in body.input}
    if not own & ({name for name, _, _ in inputs} | set(constants)):
        return inputs, constants
    taken, renamed = graph_names(body) | {name for name, _, _ in inputs} | set(constants), []
    for name, elem, shape in inputs:
        if name in own:
            while name in taken:
                name += "_outer"
            taken.add(name)
        renamed.append((name, elem, shape))
    return renamed, {name: value for name, value in constants.items() if name not in own}


_WIDE = {np.dtype(np.int64): np.dtype(np.int32), np.dtype(np.float64): np.dtype(np.float32)}


def _internal_boundary(model: Model) -> Model:
    """Drops the CASTs the loader puts at a graph's inputs and outputs (int64 <-> int32): a
    body's boundary tensors are the outer graph's, which are narrowed already."""
    for k, name in enumerate(model.inputs):
        for op in model.consumers(name):
            if op.type == "CAST" and op.source == f"input {name}":
                model.remove_operator(op)
                model.inputs[k] = op.outputs[0]
                del model.arrays[name]
        array = model.arrays[model.inputs[k]]
        if array.dtype in _WIDE:  # an unused input (its CAST went): the op passes it narrowed
            array.dtype = _WIDE[array.dtype]
    for k, name in enumerate(model.outputs):
        op = model.producer(name)
        if op is not None and op.type == "CAST" and op.source == f"output {name}":
            inner = op.inputs[0]
            if model.arrays[inner].is_constant:  # a constant output keeps its CAST, narrowed
                array = model.arrays[name]
                array.dtype = model.arrays[inner].dtype
                op.options = {"in_data_type": array.dtype, "out_data_type": array.dtype}
                continue
            model.remove_operator(op)
            model.outputs[k] = inner
            del model.arrays[name]
    model.remove_unused()
    return model


def import_control(node: onnx.NodeProto, label: str, graph, model: Model, ensure_array,
                   aliases: dict[str, str], load) -> None:
    """An If as a TFLite IF, a Loop as a TFLite WHILE (see _import_if, _import_loop); `load` is
    loader.load, for the bodies."""
    outer = _Outer(graph, model, ensure_array, aliases, load, node, label)
    if node.op_type == "If":
        _import_if(outer)
    else:
        _import_loop(outer)


def _output_array(outer: _Outer, name: str, shape, dtype) -> None:
    """The op's output `name`, shaped as its body makes it (shape inference may not know it)."""
    model = outer.model
    if name in model.arrays:
        if model.arrays[name].shape != tuple(shape):
            raise outer.error(f"output {name!r} has shape {list(model.arrays[name].shape)} by ONNX "
                              f"shape inference and {list(shape)} by its body")
        return
    model.add_named_array(name, shape, dtype)


def _import_if(outer: _Outer) -> None:
    node = outer.node
    cond = outer.array(node.input[0])
    if outer.model.arrays[cond].dtype != np.bool_ or int(np.prod(outer.model.arrays[cond].shape)) != 1:
        raise outer.error(f"condition {node.input[0]!r} is not one bool")
    branches = [attribute(node, "then_branch"), attribute(node, "else_branch")]
    captured, constants = outer.captured(branches)
    arrays = [outer.array(name) for name in captured]
    inputs = [(name, outer.elem_type(name), outer.model.arrays[a].shape) for name, a in zip(captured, arrays)]
    bodies = [outer.load_body(branch, inputs, constants, branch.output) for branch in branches]
    then, other = bodies
    outputs = []
    varying = outer.graph.reads_run_time_shaped(node)
    for k, name in enumerate(node.output):
        a, b = then.arrays[then.outputs[k]], other.arrays[other.outputs[k]]
        if a.dtype != b.dtype or len(a.shape) != len(b.shape) or (a.shape != b.shape and not varying):
            raise outer.error(f"its branches give output {k} as {a.dtype}{list(a.shape)} and "
                              f"{b.dtype}{list(b.shape)}; TFLite's IF needs one static shape and type")
        shape = max(a.shape, b.shape, key=lambda s: int(np.prod(s)))
        if not name:
            name = outer.model.add_array(f"{outer.label}_unused", shape, a.dtype)
        if a.shape != b.shape:
            # sizes the values decide (an empty branch, another's count): the interpreter
            # resizes the output to the branch it runs, and so the axes that differ are dynamic
            outer.model.arrays.pop(name, None)
            outer.model.dynamic_axes[name] = frozenset(i for i, (m, n) in enumerate(zip(a.shape, b.shape)) if m != n)
        _output_array(outer, name, shape, a.dtype)
        outputs.append(name)
    outer.model.add_operator(Operator(
        "IF", [cond] + arrays, outputs, source=outer.label, float_reason=FLOAT_REASON,
        subgraphs={"then_subgraph_index": then, "else_subgraph_index": other}))


FLOAT_REASON = "control flow runs float"


def _stack_in_place(step: Model, i: str, scanned: list[str], count: int | None,
                    label: str) -> tuple[list[str], list[str]]:
    """For each per-iteration value in `scanned`, a loop variable [count, *shape] in the WHILE
    body whose row i the iteration writes (SELECT_V2 where an iota equals i: exact, static), and
    its next value; the loop's scan output is its final value."""
    stacks_in, stacks_out = [], []
    for value in scanned:
        array = step.arrays[value]
        shape = (count,) + array.shape
        stack = step.add_array(f"{value}_stacked", shape, array.dtype)
        rows = step.add_constant("rows", np.arange(count, dtype=np.int32).reshape(
            (count,) + (1,) * len(array.shape)))
        here = step.add_array("this_row", (count,) + (1,) * len(array.shape), np.bool_)
        step.add_operator(Operator("EQUAL", [rows, i], [here], source=label))
        row_shape = step.add_constant("row_shape", np.array((1,) + array.shape, dtype=np.int32))
        row = step.add_array(f"{value}_row", (1,) + array.shape, array.dtype)
        step.add_operator(Operator("RESHAPE", [value, row_shape], [row], source=label))
        updated = step.add_array(f"{value}_stacked_next", shape, array.dtype)
        step.add_operator(Operator("SELECT_V2", [here, row, stack], [updated], source=label))
        stacks_in.append(stack)
        stacks_out.append(updated)
    return stacks_in, stacks_out


def _import_loop(outer: _Outer) -> None:
    """A Loop as a TFLite WHILE: the body loaded as a subgraph of its own and rewired as WHILE
    runs it (_while_body), a condition subgraph (_while_cond), the scan outputs' starting zeros
    (_scan_starts), and the op, whose outputs for the carried values and scan outputs are the
    node's."""
    node, model = outer.node, outer.model
    body = attribute(node, "body")
    trip = node.input[0] if node.input else ""
    cond = node.input[1] if len(node.input) > 1 else ""
    initial = list(node.input[2:])
    n = len(initial)
    if not trip and not cond:
        raise outer.error("it has neither a trip count nor a condition: it never ends")
    scans = list(node.output[n:])
    count = _scan_count(outer, scans)
    captured, constants = outer.captured([body])
    carried = [outer.array(name) for name in initial]
    arrays = [outer.array(name) for name in captured]
    # Loop variables: [i, M, cond, v..., captured...]; M and cond are there when the node has them.
    counter = model.add_constant(f"{outer.label}_iteration", np.array(0, dtype=np.int32))
    trip_array = outer.array(trip) if trip else None
    cond_array = outer.array(cond) if cond else model.add_constant(f"{outer.label}_cond",
                                                                    np.array(True))
    for name, a in (("trip count", trip_array), ("condition", cond_array)):
        if a is not None and int(np.prod(model.arrays[a].shape)) != 1:
            raise outer.error(f"its {name} {a!r} has shape {list(model.arrays[a].shape)}, not one value")
    cond_shape = model.arrays[cond_array].shape
    trip_shape = model.arrays[trip_array].shape if trip else None
    inputs = [(body.input[0].name, onnx.TensorProto.INT64, ()),
              (body.input[1].name, onnx.TensorProto.BOOL, cond_shape)]
    inputs += [(v.name, outer.elem_type(name), model.arrays[a].shape)
               for v, name, a in zip(body.input[2:], initial, carried)]
    inputs += [(name, outer.elem_type(name), model.arrays[a].shape) for name, a in zip(captured, arrays)]
    step = outer.load_body(body, inputs, constants, body.output[:1 + n + (len(scans) if count else 0)])
    stacks_in = _while_body(outer, step, initial, cond_shape, trip_shape, count)
    check = _while_cond(step, trip_shape, bool(cond), cond_shape, outer.label)
    stacks = _scan_starts(outer, step, stacks_in)
    op_inputs = [counter] + ([trip_array] if trip else []) + [cond_array] + carried + arrays + stacks
    targets = {len(op_inputs) - len(stacks) - len(arrays) - n + k: name
               for k, name in enumerate(node.output[:n])}
    targets.update({len(op_inputs) - len(stacks) + k: name for k, name in enumerate(scans[:len(stacks)])})
    op_outputs = [_while_output(outer, a, targets.get(k, "")) for k, a in enumerate(op_inputs)]
    model.add_operator(Operator(
        "WHILE", op_inputs, op_outputs, source=outer.label, float_reason=FLOAT_REASON,
        subgraphs={"cond_subgraph_index": check, "body_subgraph_index": step}))


def _scan_count(outer: _Outer, scans: list[str]) -> int | None:
    """The loop's iteration count when it has scan outputs (None without): refused when it is
    known only at run time, since a scan output's shape holds it."""
    count = static_count(outer.graph, outer.node) if any(scans) else None
    for name in scans:
        if name and not count:
            raise outer.error(
                f"scan output {name!r} of a loop whose iteration count is known only at run time "
                "has a data-dependent shape, which a static TFLite graph cannot hold (a loop keeps "
                "its scan outputs when its trip count is constant and its condition stays true or "
                "is computed from counters only)")
    return count


def _while_body(outer: _Outer, step: Model, initial: list[str], cond_shape, trip_shape,
                count: int | None) -> list[str]:
    """Rewires the loaded ONNX body `step` as WHILE runs it, loop variables [i, M, cond,
    carried..., captured..., scan stacks...]: i + 1, M and the captured values passed on, the
    condition (reshaped to its initial shape) and the carried values from the ONNX body, the
    scan outputs written in place (_stack_in_place). Refuses a carried value whose shape or type
    changes (WHILE's are static). Returns the scan stacks' loop variables."""
    n = len(initial)
    i_in, cond_in = step.inputs[0], step.inputs[1]
    carried_in, captured_in = step.inputs[2:2 + n], step.inputs[2 + n:]
    cond_out, carried_out, scanned = step.outputs[0], step.outputs[1:1 + n], step.outputs[1 + n:]
    for k, (a, b) in enumerate(zip(carried_in, carried_out)):
        if step.arrays[a].shape != step.arrays[b].shape or step.arrays[a].dtype != step.arrays[b].dtype:
            raise outer.error(
                f"loop-carried value {initial[k]!r} is {step.arrays[a].dtype}"
                f"{list(step.arrays[a].shape)} before an iteration and {step.arrays[b].dtype}"
                f"{list(step.arrays[b].shape)} after; TFLite's WHILE needs static shapes")
    if step.arrays[cond_out].shape != cond_shape:
        shaped = step.add_array("cond_reshaped", cond_shape, np.bool_)
        shape = step.add_constant("cond_shape", np.array(cond_shape, dtype=np.int32))
        step.add_operator(Operator("RESHAPE", [cond_out, shape], [shaped], source=outer.label))
        cond_out = shaped
    one = step.add_constant("one", np.array(1, dtype=np.int32))
    i_next = step.add_array("iteration_next", (), np.int32)
    step.add_operator(Operator("ADD", [i_in, one], [i_next], source=outer.label))
    trip_in = [step.add_array("trip_count", trip_shape, np.int32)] if trip_shape is not None else []
    stacks_in, stacks_out = _stack_in_place(step, i_in, scanned, count, outer.label)
    step.inputs = [i_in] + trip_in + [cond_in] + carried_in + captured_in + stacks_in
    step.outputs = [i_next] + trip_in + [cond_out] + carried_out + captured_in + stacks_out
    return stacks_in


def _while_cond(step: Model, trip_shape, has_cond: bool, cond_shape, label: str) -> Model:
    """WHILE's condition subgraph: it takes every loop variable of the rewired body `step` and
    returns the ONNX condition, i < M when the Loop has a trip count (M of `trip_shape`), or
    both when it has both."""
    check = Model()
    loop_vars = [check.add_array("iteration", (), np.int32)]
    if trip_shape is not None:
        loop_vars.append(check.add_array("trip_count", trip_shape, np.int32))
    loop_vars.append(check.add_array("cond", cond_shape, np.bool_))
    for a in step.inputs[len(loop_vars):]:  # the carried, captured and scan values
        loop_vars.append(check.add_array(a, step.arrays[a].shape, step.arrays[a].dtype))
    check.inputs = list(loop_vars)
    result = loop_vars[1 if trip_shape is None else 2]
    if trip_shape is not None:
        below = check.add_array("below_trip_count", trip_shape, np.bool_)
        check.add_operator(Operator("LESS", [loop_vars[0], loop_vars[1]], [below], source=label))
        result = below
        if has_cond:
            both = check.add_array("running", np.broadcast_shapes(trip_shape, cond_shape), np.bool_)
            check.add_operator(Operator("LOGICAL_AND", [below, loop_vars[2]], [both], source=label))
            result = both
    check.outputs = [result]
    return check


def _scan_starts(outer: _Outer, step: Model, stacks_in: list[str]) -> list[str]:
    """The scan stacks' initial values in the outer model: zeros FILLed at run time (not
    stored in the file)."""
    model, stacks = outer.model, []
    for a in stacks_in:
        array = step.arrays[a]
        dims = model.add_constant(f"{outer.label}_scan_shape", np.array(array.shape, dtype=np.int32))
        zero = model.add_constant(f"{outer.label}_zero", np.zeros((), dtype=array.dtype))
        stacks.append(model.add_array(f"{outer.label}_scan_start", array.shape, array.dtype))
        model.add_operator(Operator("FILL", [dims, zero], [stacks[-1]], source=outer.label))
    return stacks


def _while_output(outer: _Outer, value: str, target: str) -> str:
    """WHILE's output for loop variable `value`: the node's output `target` when there is one,
    else a new array nothing reads (WHILE gives one output per loop variable)."""
    array = outer.model.arrays[value]
    if target:
        _output_array(outer, target, array.shape, array.dtype)
        return target
    return outer.model.add_array(f"{outer.label}_state", array.shape, array.dtype)
