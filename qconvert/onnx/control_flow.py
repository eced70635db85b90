"""ONNX control flow (If, Loop, Scan) flattened at load time when its control is constant; the rest
becomes TFLite's IF and WHILE with their bodies as subgraphs (control_flow_import.py).

`flatten` runs in the loader's folding loop (loader._settle): an If whose condition folded to a
constant becomes its chosen branch's nodes; a Loop with a constant trip count whose condition
provably stays true, and a Scan (its length is static), are unrolled when small: at most
MAX_UNROLLED_ITERATIONS iterations and MAX_UNROLLED_NODES body nodes in all. Scan outputs become
a CONCATENATION of the per-iteration values. The rest of the pipeline then sees a flat graph.

A body reads the outer scope implicitly, by name; inlining binds its inputs to outer values and
renames its own values (a suffix per iteration) so that the graph stays in SSA form. Names resolve
by ONNX's scoping rules: a graph nested in the body that defines a name itself (an input, an
initializer, a node output) shadows the outer value there, so renaming stops at it (rename_outer),
and a new name is none such a graph defines. A Loop left in an unrolled body (its trip count known
only at run time) becomes a WHILE in each copy: its outputs are typed from its initial values a
round of shape inference later (untyped_loop_outputs keeps the loader's folding going meanwhile).

The scoping helpers (free_names, graph_names, defined_names) and a loop's iteration count known
before it runs (static_count) serve control_flow_import.py too, which imports the If and Loop
nodes left.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import ConversionError
from ..ops.refused import RANDOM_OPS
from .graph import GraphIndex, producers_of

CONTROL_OPS = ("If", "Loop", "Scan")
# Unrolling bound: a Loop or Scan is unrolled when it runs at most this many iterations and its
# body's nodes (nested ones counted), times the iterations, stay within MAX_UNROLLED_NODES. The
# unrolled graph grows by that many nodes; beyond it a Loop becomes a TFLite WHILE.
MAX_UNROLLED_ITERATIONS = 64
MAX_UNROLLED_NODES = 4096
# A condition computed from counters (tf2onnx's `time < steps`) is run alone for at most this many
# iterations to find the loop's iteration count before it runs.
MAX_SIMULATED_ITERATIONS = 1 << 14


def subgraphs(node: onnx.NodeProto):
    """The graphs `node` holds (an If's branches, a Loop's or Scan's body)."""
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            yield a.g
        elif a.type == onnx.AttributeProto.GRAPHS:
            yield from a.graphs


def _node_count(graph: onnx.GraphProto) -> int:
    return sum(1 + sum(_node_count(g) for g in subgraphs(n)) for n in graph.node)


def defined_names(graph: onnx.GraphProto) -> set[str]:
    """The values `graph` itself defines: its inputs, initializers and node outputs."""
    names = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    names.update(o for n in graph.node for o in n.output)
    names.discard("")
    return names


def free_names(graph: onnx.GraphProto) -> list[str]:
    """The outer-scope values `graph` (and the subgraphs of its nodes) reads, in order of first
    use: what a TFLite subgraph must receive as explicit inputs."""
    defined, found = defined_names(graph), {}
    for node in graph.node:
        for name in node.input:
            if name and name not in defined:
                found.setdefault(name)
        for sub in subgraphs(node):
            for name in free_names(sub):
                if name not in defined:
                    found.setdefault(name)
    for v in graph.output:
        if v.name not in defined:
            found.setdefault(v.name)
    return list(found)


def outer_reads(nodes) -> set[str]:
    """The outer values the subgraphs of `nodes` read (for the loader's set of consumed values)."""
    names: set[str] = set()
    for node in nodes:
        for sub in subgraphs(node):
            names.update(free_names(sub))
    return names


def inlined_names(nodes) -> set[str]:
    """The values `nodes` read and write: with the source model's names, those that flattening
    made (unrolled iterations' copies), which importers must not take."""
    return {name for node in nodes for names in (node.input, node.output) for name in names if name}


def _definitions(graph: onnx.GraphProto) -> set[str]:
    """The values `graph` and the graphs nested in it define."""
    names = defined_names(graph)
    for node in graph.node:
        for sub in subgraphs(node):
            names |= _definitions(sub)
    return names


def graph_names(graph: onnx.GraphProto) -> set[str]:
    """Every value name `graph` and the graphs nested in it define or read."""
    names = _definitions(graph) | {v.name for v in graph.output}
    for node in graph.node:
        names.update(n for n in node.input if n)
        for sub in subgraphs(node):
            names |= graph_names(sub)
    return names


def rename_outer(graph: onnx.GraphProto, renames: dict[str, str]) -> None:
    """Renames (in place) the outer-scope values `graph` and the graphs nested in it read, by
    ONNX's scoping rules: a name a graph defines itself (an input, an initializer, a node output)
    shadows the outer one there and in the graphs nested in it, so its reads keep their name."""
    defined = defined_names(graph)
    renames = {old: new for old, new in renames.items() if old not in defined}
    if not renames:
        return
    for node in graph.node:
        node.input[:] = [renames.get(n, n) for n in node.input]
        for sub in subgraphs(node):
            rename_outer(sub, renames)
    for v in graph.output:
        if v.name in renames:
            v.name = renames[v.name]


class _Inliner:
    """Copies body graphs into the loader's graph (`loader._Graph`), keeping names unique."""

    def __init__(self, graph):
        self.graph = graph
        self.taken = set(graph.shapes) | set(graph.constants)
        for node in graph.nodes:
            self.taken.update(node.input)
            self.taken.update(node.output)

    def fresh(self, name: str, suffix: str, avoid=frozenset()) -> str:
        """A new name from `name` and `suffix`, not taken in the graph nor among `avoid`."""
        candidate, k = name + suffix, 0
        while candidate in self.taken or candidate in avoid:
            candidate, k = f"{name}{suffix}_{k}", k + 1
        self.taken.add(candidate)
        return candidate

    def constant(self, hint: str, value: np.ndarray) -> str:
        return self.store(self.fresh(hint, ""), value)

    def store(self, name: str, value: np.ndarray) -> str:
        self.graph.constants[name] = value
        self.graph.shapes[name] = value.shape
        self.graph.dtypes[name] = value.dtype
        return name

    def node(self, label: str, op_type: str, inputs, outputs, **attrs) -> onnx.NodeProto:
        node = helper.make_node(op_type, list(inputs), list(outputs), name=label, **attrs)
        self.graph.names[id(node)] = label
        return node

    def inline(self, body: onnx.GraphProto, bindings: dict[str, str], suffix: str,
               label: str) -> tuple[list[onnx.NodeProto], list[str]]:
        """The body's nodes with its inputs bound to outer values (`bindings`) and its own values
        renamed (`suffix` appended, unless unused and empty); and the names of its outputs."""
        renames = dict(bindings)
        # A graph nested in the body that defines a new name itself would shadow it there.
        avoid = {name for node in body.node for sub in subgraphs(node) for name in _definitions(sub)}
        for t in body.initializer:
            renames[t.name] = self.store(self.fresh(t.name, suffix, avoid), numpy_helper.to_array(t))
        for node in body.node:
            for name in node.output:
                if name:
                    renames[name] = self.fresh(name, suffix, avoid)
        nodes = []
        for k, node in enumerate(body.node):
            copy = onnx.NodeProto()
            copy.CopyFrom(node)
            copy.input[:] = [renames.get(n, n) for n in node.input]
            copy.output[:] = [renames.get(n, n) for n in node.output]
            for sub in subgraphs(copy):
                rename_outer(sub, renames)
            copy.name = f"{label}/{node.name or f'{node.op_type}_{k}'}"
            self.graph.names[id(copy)] = copy.name
            nodes.append(copy)
        return nodes, [renames.get(v.name, v.name) for v in body.output]


def attribute(node: onnx.NodeProto, name: str, default=None):
    """The value of `node`'s attribute `name` (`default` when it has none)."""
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _stays_true(body: onnx.GraphProto) -> bool:
    """Whether the body's condition output is its condition input (directly, through Identity,
    or a constant true: an initializer or a Constant's `value`): a loop whose condition starts
    true then runs its trip count."""
    index = GraphIndex(body, constant_attributes=("value",))
    name, condition = body.output[0].name, body.input[1].name
    for _ in range(len(body.node) + 1):  # no chain of Identities is longer than the body
        if name == condition:
            return True
        if name in index:
            value = index.constant(name)
            return value is not None and bool(value.all())
        node = index.producers.get(name)
        if node is None or node.op_type != "Identity":
            return False
        name = node.input[0]
    return False


def _control_slice(body: onnx.GraphProto, known) -> tuple[list, list[int]] | None:
    """(nodes, carried) of the part of `body` that computes its condition output: the nodes in
    body order, and the indices of the loop-carried values it reads, whose next values it then
    computes too. None when that part reads anything else than the iteration number, the
    condition, those carried values and constants (`known(name)`: an outer constant), or holds
    control flow itself."""
    producers = producers_of(body.node)
    positions = {v.name: k for k, v in enumerate(body.input)}
    own = {t.name for t in body.initializer}
    needed, carried, pending, seen = set(), set(), [body.output[0].name], set()
    while pending:
        name = pending.pop()
        if not name or name in seen:
            continue
        seen.add(name)
        if name in positions:
            k = positions[name]
            if k >= 2 and k - 2 not in carried:
                carried.add(k - 2)
                pending.append(body.output[k - 1].name)
            continue
        node = producers.get(name)
        if node is None:
            if name in own or known(name):
                continue
            return None
        if node.op_type in CONTROL_OPS or node.op_type in RANDOM_OPS:
            return None
        if id(node) not in needed:
            needed.add(id(node))
            pending.extend(node.input)
    return [node for node in body.node if id(node) in needed], sorted(carried)


def _simulated_count(graph, node: onnx.NodeProto) -> int | None:
    """The iteration count of a Loop whose condition depends on counters only (the iteration
    number, carried values that start constant and evolve from constants: tf2onnx writes every
    Keras RNN so), found by running the body's control slice alone; None otherwise, or beyond
    MAX_SIMULATED_ITERATIONS. `graph` is the loader's _Graph; a count once simulated is kept in
    its `simulated_counts` by node (shape inference and flattening ask again at every round of
    the loader's folding)."""
    body = attribute(node, "body")
    constants = graph.constants
    trip = node.input[0] if node.input else ""
    cond = node.input[1] if len(node.input) > 1 else ""
    if (trip and trip not in constants) or (cond and cond not in constants):
        return None
    found = _control_slice(body, lambda name: name in constants)
    if found is None or any(node.input[2 + k] not in constants for k in found[1]):
        return None
    known = graph.simulated_counts
    if id(node) not in known:
        known[id(node)] = _simulate(graph, node, *found)
    return known[id(node)]


def _simulate(graph, node: onnx.NodeProto, nodes: list, carried: list[int]) -> int | None:
    """Runs the control slice (`nodes`, reading the carried values `carried`) of the Loop `node`,
    all of whose inputs are constants, until its condition is false or its trip count is reached."""
    body = attribute(node, "body")
    constants = graph.constants
    trip = node.input[0] if node.input else ""
    cond = node.input[1] if len(node.input) > 1 else ""
    limit = int(np.ravel(constants[trip])[0]) if trip else None
    running = bool(np.ravel(constants[cond])[0]) if cond else True
    inputs = [body.input[0].name, body.input[1].name] + [body.input[2 + k].name for k in carried]
    outputs = [body.output[0].name] + [body.output[1 + k].name for k in carried]
    outer = {n for nd in nodes for n in nd.input if n and n in constants and n not in inputs}
    from onnx.reference import ReferenceEvaluator

    try:
        g = helper.make_graph(
            nodes, "control", [helper.make_tensor_value_info(n, 0, None) for n in inputs],
            [helper.make_tensor_value_info(n, 0, None) for n in outputs],
            [numpy_helper.from_array(np.asarray(constants[n]), n) for n in sorted(outer)]
            + list(body.initializer))
        evaluator = ReferenceEvaluator(helper.make_model(
            g, opset_imports=list(graph.proto.opset_import), ir_version=graph.proto.ir_version))
        values = [np.asarray(constants[node.input[2 + k]]) for k in carried]
        count = 0
        while running and (limit is None or count < limit):
            if count >= MAX_SIMULATED_ITERATIONS:
                return None
            feeds = dict(zip(inputs, [np.array(count, np.int64), np.array(running)] + values))
            result = evaluator.run(None, feeds)
            running, values = bool(np.ravel(result[0])[0]), list(result[1:])
            count += 1
    except Exception:  # noqa: BLE001  (a slice the evaluator cannot run: the count stays unknown)
        return None
    return count


def _unroll_bound(count: int, body: onnx.GraphProto) -> bool:
    return count <= MAX_UNROLLED_ITERATIONS and count * _node_count(body) <= MAX_UNROLLED_NODES


def _stack(inliner: _Inliner, label: str, values: list[str], axis: int, rank: int | None,
           output: str, opset: int) -> list[onnx.NodeProto]:
    """Nodes making `output` from per-iteration `values` stacked along a new axis `axis`."""
    if axis < 0:
        if rank is None:
            raise ConversionError(f"node {label!r}: a negative scan output axis needs the "
                                  "per-iteration value's rank, which shape inference did not find")
        axis += rank + 1
    nodes, expanded = [], []
    axes = inliner.constant(f"{output}_axes", np.array([axis], dtype=np.int64)) if opset >= 13 else ""
    for k, value in enumerate(values):
        name = inliner.fresh(f"{output}_step{k}", "")
        if opset >= 13:
            nodes.append(inliner.node(f"{label}/stack_{k}", "Unsqueeze", [value, axes], [name]))
        else:
            nodes.append(inliner.node(f"{label}/stack_{k}", "Unsqueeze", [value], [name], axes=[axis]))
        expanded.append(name)
    nodes.append(inliner.node(f"{label}/stack", "Concat", expanded, [output], axis=axis))
    return nodes


def _identities(inliner: _Inliner, label: str, values: list[str], targets) -> list[onnx.NodeProto]:
    """Identity nodes writing a flattened node's final `values` to its outputs `targets` (unnamed
    ones skipped), so that the values the rest of the graph reads keep their names."""
    return [inliner.node(f"{label}/output_{k}", "Identity", [value], [target])
            for k, (value, target) in enumerate(zip(values, targets)) if target]


def _flatten_if(inliner, node, label):
    cond = inliner.graph.constants.get(node.input[0])
    if cond is None:
        return None
    if np.size(cond) != 1:
        raise ConversionError(f"node {label!r} (If): condition {node.input[0]!r} has "
                              f"{np.size(cond)} elements, not one")
    branch = attribute(node, "then_branch" if bool(np.ravel(cond)[0]) else "else_branch")
    nodes, outputs = inliner.inline(branch, {}, "", label)
    return nodes + _identities(inliner, label, outputs, node.output)


def _flatten_loop(inliner, node, label, opset):
    graph = inliner.graph
    body = attribute(node, "body")
    trip = graph.constants.get(node.input[0]) if node.input[0] else None
    cond_name = node.input[1] if len(node.input) > 1 else ""
    cond = graph.constants.get(cond_name) if cond_name else np.array(True)
    if trip is None or cond is None:
        return None
    count = int(np.ravel(trip)[0]) if bool(np.ravel(cond)[0]) else 0
    if count < 0:
        count = 0
    if count and not _stays_true(body):
        count = _simulated_count(graph, node)
        if count is None:
            return None
    if not _unroll_bound(count, body):
        return None
    carried = list(node.input[2:])
    n_carried = len(carried)
    scans: list[list[str]] = [[] for _ in body.output[1 + n_carried:]]
    if count == 0 and scans:
        return None  # empty scan outputs: their element shape is unknown here
    nodes = []
    iter_input, cond_input = body.input[0].name, body.input[1].name
    true = inliner.constant(f"{label}_true", np.ones(_declared_shape(body.input[1]) or (), dtype=np.bool_))
    for k in range(count):
        iteration = inliner.constant(f"{label}_iteration{k}", np.array(k, dtype=np.int64))
        bindings = {iter_input: iteration, cond_input: true}
        bindings.update({v.name: c for v, c in zip(body.input[2:], carried)})
        step, outputs = inliner.inline(body, bindings, f"_iter{k}", f"{label}/iteration{k}")
        nodes.extend(step)
        carried = outputs[1:1 + n_carried]
        for values, value in zip(scans, outputs[1 + n_carried:]):
            values.append(value)
    nodes += _identities(inliner, label, carried, node.output[:n_carried])
    for values, target in zip(scans, node.output[n_carried:]):
        if target:
            nodes.extend(_stack(inliner, label, values, 0, None, target, opset))
    return nodes


def _declared_shape(value: onnx.ValueInfoProto) -> tuple[int, ...] | None:
    tt = value.type.tensor_type
    if not value.type.HasField("tensor_type") or not tt.HasField("shape"):
        return None
    dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tt.shape.dim)
    return dims if all(d >= 0 for d in dims) else None


def _flatten_scan(inliner, node, label, opset):
    """A Scan unrolled: per iteration, each scan input's element GATHERed and the body inlined
    on them and the states; the scan outputs stacked (_stack). Refused beyond the unroll bound
    (a Scan has no TFLite counterpart)."""
    graph = inliner.graph
    if opset < 9:
        raise ConversionError(f"node {label!r} (Scan): Scan of opset 8 (with a batch axis and "
                              "sequence_lens) is not supported")
    body = attribute(node, "body")
    n_scan = attribute(node, "num_scan_inputs")
    n_state = len(node.input) - n_scan
    scan_inputs = list(node.input[n_state:])
    if any(name not in graph.shapes for name in scan_inputs):
        return None
    input_dirs = list(attribute(node, "scan_input_directions", [0] * n_scan))
    n_out = len(body.output) - n_state
    output_axes = list(attribute(node, "scan_output_axes", [0] * n_out))
    output_dirs = list(attribute(node, "scan_output_directions", [0] * n_out))
    count, typed, input_axes = _scan_length(graph, node, label, n_state)
    if not _unroll_bound(count, body):
        raise ConversionError(
            f"node {label!r} (Scan): {count} steps of {_node_count(body)} body nodes is more than "
            f"qconvert unrolls ({MAX_UNROLLED_ITERATIONS} steps, {MAX_UNROLLED_NODES} nodes in all)")
    states = list(node.input[:n_state])
    scans: list[list[str]] = [[] for _ in range(n_out)]
    ranks = [None] * n_out
    if any(axis < 0 for axis in output_axes):  # the per-iteration values' ranks are needed
        ranks = [None if t is None else len(t[1]) for t in _infer_body(graph, body, typed)[n_state:]]
    nodes = []
    for k in range(count):
        bindings = {v.name: s for v, s in zip(body.input[:n_state], states)}
        for j, (value, name) in enumerate(zip(body.input[n_state:], scan_inputs)):
            t = count - 1 - k if input_dirs[j] else k
            index = inliner.constant(f"{label}_index{t}", np.array(t, dtype=np.int64))
            element = inliner.fresh(f"{value.name}_step{t}", "")
            nodes.append(inliner.node(f"{label}/slice{k}_{j}", "Gather", [name, index], [element],
                                      axis=input_axes[j]))
            bindings[value.name] = element
        step, outputs = inliner.inline(body, bindings, f"_iter{k}", f"{label}/iteration{k}")
        nodes.extend(step)
        states = outputs[:n_state]
        for j, value in enumerate(outputs[n_state:]):
            scans[j].append(value)
    nodes += _identities(inliner, label, states, node.output[:n_state])
    for j, target in enumerate(node.output[n_state:]):
        if target:
            values = scans[j][::-1] if output_dirs[j] else scans[j]
            nodes.extend(_stack(inliner, label, values, output_axes[j], ranks[j], target, opset))
    return nodes


def _scan_length(graph, node: onnx.NodeProto, label: str, n_state: int):
    """(iteration count, the body's inputs typed {name: (dtype, shape)} for _infer_body, the
    scan_input_axes made non-negative) of a Scan whose scan inputs all have static shapes;
    refused when the scan inputs' lengths differ."""
    body = attribute(node, "body")
    scan_inputs = list(node.input[n_state:])
    input_axes = list(attribute(node, "scan_input_axes", [0] * len(scan_inputs)))
    lengths = set()
    typed = {v.name: (graph.dtypes[name], graph.shapes[name])
             for v, name in zip(body.input[:n_state], node.input[:n_state]) if name in graph.shapes}
    for k, name in enumerate(scan_inputs):
        shape = graph.shapes[name]
        input_axes[k] = input_axes[k] + len(shape) if input_axes[k] < 0 else input_axes[k]
        lengths.add(shape[input_axes[k]])
        typed[body.input[n_state + k].name] = (graph.dtypes[name],
                                               shape[:input_axes[k]] + shape[input_axes[k] + 1:])
    if len(lengths) != 1:
        raise ConversionError(f"node {label!r} (Scan): scan inputs of different lengths "
                              f"{sorted(lengths)}")
    return lengths.pop(), typed, input_axes


def flatten(graph) -> bool:
    """Replaces every If with a constant condition, and every Loop and Scan that unrolls, by
    their nodes (see the module's docstring). `graph` is the loader's _Graph. Returns whether it
    changed the graph."""
    if not any(node.op_type in CONTROL_OPS and node.domain in ("", "ai.onnx") for node in graph.nodes):
        return False
    inliner = _Inliner(graph)
    kept, changed = [], False
    for node in graph.nodes:
        replacement = None
        if node.domain in ("", "ai.onnx"):
            label = graph.names[id(node)]
            if node.op_type == "If":
                replacement = _flatten_if(inliner, node, label)
            elif node.op_type == "Loop":
                replacement = _flatten_loop(inliner, node, label, graph.opset)
            elif node.op_type == "Scan":
                replacement = _flatten_scan(inliner, node, label, graph.opset)
        if replacement is None:
            kept.append(node)
        else:
            kept.extend(replacement)
            changed = True
    graph.nodes = kept
    return changed


# --- the Loops left (TFLite WHILEs): typed for shape inference ---------------------------------

def static_count(graph, node: onnx.NodeProto) -> int | None:
    """The loop's iteration count when it is known before it runs (a constant trip count, a
    condition that starts and stays true, or one computed from counters only), else None; None
    for 0 too (empty scan outputs). `graph` is the loader's _Graph."""
    constants = graph.constants
    trip = node.input[0] if node.input else ""
    cond = node.input[1] if len(node.input) > 1 else ""
    body = attribute(node, "body")
    if not _stays_true(body):
        return _simulated_count(graph, node) or None
    if not trip or trip not in constants or (cond and cond not in constants):
        return None
    if cond and not bool(np.ravel(constants[cond])[0]):
        return None
    return int(np.ravel(constants[trip])[0]) or None


def loop_output_shapes(graph) -> list[onnx.ValueInfoProto]:
    """The loop-carried outputs of the graph's Loops typed as their initial values, for shape
    inference (which leaves them without a shape, and the nodes reading them too): WHILE keeps
    a loop-carried value's shape (the importer refuses a body that changes it)."""
    shapes = []
    for node in graph.nodes:
        if node.op_type != "Loop" or node.domain not in ("", "ai.onnx"):
            continue
        for initial, output in zip(node.input[2:], node.output):
            if output and initial in graph.shapes and initial in graph.dtypes:
                shapes.append(helper.make_tensor_value_info(
                    output, helper.np_dtype_to_tensor_dtype(graph.dtypes[initial]), graph.shapes[initial]))
        n = len(node.input) - 2
        scans = [name for name in node.output[n:] if name]
        count = static_count(graph, node) if scans else None
        if count:
            for output, value in zip(node.output[n:], _body_output_types(graph, node)[1 + n:]):
                if output and value is not None:
                    shapes.append(helper.make_tensor_value_info(output, value[0], (count,) + value[1]))
    return shapes


def untyped_loop_outputs(graph) -> set[str]:
    """The loop-carried outputs of the graph's Loops that shape inference has not typed yet
    though their initial values are typed: loop_output_shapes types them at the next round of
    inference (a chain of Loops, such as the copies of a loop nested in an unrolled one, takes a
    round per link)."""
    return {output for node in graph.nodes if node.op_type == "Loop" and node.domain in ("", "ai.onnx")
            for initial, output in zip(node.input[2:], node.output)
            if output and output not in graph.shapes and initial in graph.shapes and initial in graph.dtypes}


def _body_output_types(graph, node: onnx.NodeProto) -> list[tuple[int, tuple] | None]:
    """(element type, static shape) of each output of a Loop's body, by ONNX shape inference
    over the body with its inputs typed as the loop gives them (None where not static)."""
    body = attribute(node, "body")
    typed = {v.name: (graph.dtypes[name], graph.shapes[name])
             for v, name in zip(body.input[2:], node.input[2:]) if name in graph.shapes}
    typed[body.input[0].name] = (np.dtype(np.int64), ())
    cond = node.input[1] if len(node.input) > 1 else ""
    typed[body.input[1].name] = (np.dtype(np.bool_), graph.shapes.get(cond, ()))
    return _infer_body(graph, body, typed)


def _infer_body(graph, body: onnx.GraphProto, typed: dict) -> list[tuple[int, tuple] | None]:
    """(element type, static shape) of each output of `body` by ONNX shape inference, its inputs
    typed by `typed` ({name: (dtype, shape)}) and the outer values it reads as the loader's
    graph knows them (None where not static)."""
    typed = dict(typed)
    for name in free_names(body):
        if name in graph.shapes and name in graph.dtypes:
            typed[name] = (graph.dtypes[name], graph.shapes[name])
    inputs = [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(d), s)
              for name, (d, s) in typed.items()]
    g = helper.make_graph(list(body.node), "body", inputs,
                          [helper.make_tensor_value_info(v.name, 0, None) for v in body.output],
                          list(body.initializer))
    proto = graph.proto
    try:
        inferred = onnx.shape_inference.infer_shapes(
            helper.make_model(g, opset_imports=list(proto.opset_import), ir_version=max(proto.ir_version, 4)),
            strict_mode=False)
    except Exception:  # noqa: BLE001  (onnx raises several types; no shape is the answer)
        return [None] * len(body.output)
    known = {v.name: v for v in list(inferred.graph.value_info) + list(inferred.graph.output)
             + list(inferred.graph.input)}
    types = []
    for v in body.output:
        info = known.get(v.name)
        dims = _declared_shape(info) if info is not None else None
        types.append(None if dims is None else (info.type.tensor_type.elem_type, dims))
    return types
