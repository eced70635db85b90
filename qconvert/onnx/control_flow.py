"""ONNX control flow (If, Loop, Scan): flattened at load time when its control is constant,
else TFLite's IF and WHILE with their bodies as subgraphs.

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

`import_control` (the loader's hook for the If and Loop nodes left) makes the rest run-time
control: an If becomes IF (inputs: the condition, then the outer values its branches read), a
Loop WHILE (loop variables: the iteration counter, the trip count, the condition, the carried
values, the outer values the body reads, and the scan outputs of a loop whose iteration count is
static). Each body is loaded by the loader itself into a Model of its own (Operator.subgraphs),
with the outer constants it reads copied in and the outer activations as explicit inputs: a TFLite
subgraph sees only its inputs. Static shapes everywhere: both branches give the same shapes, a
loop-carried value keeps its shape, and a scan output needs an iteration count known before the
loop runs; the rest is refused in one line naming the node.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import ConversionError
from ..ir import Model, Operator
from ..ops.refused import RANDOM_OPS
from .file import OnnxFile
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


def _defined(graph: onnx.GraphProto) -> set[str]:
    """The values `graph` itself defines: its inputs, initializers and node outputs."""
    names = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    names.update(o for n in graph.node for o in n.output)
    names.discard("")
    return names


def free_names(graph: onnx.GraphProto) -> list[str]:
    """The outer-scope values `graph` (and the subgraphs of its nodes) reads, in order of first
    use: what a TFLite subgraph must receive as explicit inputs."""
    defined, found = _defined(graph), {}
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
    names = _defined(graph)
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
    defined = _defined(graph)
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


def _attr(node: onnx.NodeProto, name: str, default=None):
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
    body = _attr(node, "body")
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
    body = _attr(node, "body")
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
    branch = _attr(node, "then_branch" if bool(np.ravel(cond)[0]) else "else_branch")
    nodes, outputs = inliner.inline(branch, {}, "", label)
    return nodes + _identities(inliner, label, outputs, node.output)


def _flatten_loop(inliner, node, label, opset):
    graph = inliner.graph
    body = _attr(node, "body")
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
    body = _attr(node, "body")
    n_scan = _attr(node, "num_scan_inputs")
    n_state = len(node.input) - n_scan
    scan_inputs = list(node.input[n_state:])
    if any(name not in graph.shapes for name in scan_inputs):
        return None
    input_dirs = list(_attr(node, "scan_input_directions", [0] * n_scan))
    n_out = len(body.output) - n_state
    output_axes = list(_attr(node, "scan_output_axes", [0] * n_out))
    output_dirs = list(_attr(node, "scan_output_directions", [0] * n_out))
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
    body = _attr(node, "body")
    scan_inputs = list(node.input[n_state:])
    input_axes = list(_attr(node, "scan_input_axes", [0] * len(scan_inputs)))
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


# --- run-time control flow: TFLite IF and WHILE ------------------------------------------------

def is_runtime_control(node: onnx.NodeProto) -> bool:
    """An If or Loop that flattening left: it becomes a TFLite IF or WHILE."""
    return node.op_type in ("If", "Loop") and node.domain in ("", "ai.onnx")


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
        count = _static_count(graph, node) if scans else None
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
    body = _attr(node, "body")
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
        taken = given | _defined(body) | set(constants)
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
    own = _defined(body) - {v.name for v in body.input}
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
    branches = [_attr(node, "then_branch"), _attr(node, "else_branch")]
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


def _static_count(graph, node: onnx.NodeProto) -> int | None:
    """The loop's iteration count when it is known before it runs (a constant trip count, a
    condition that starts and stays true, or one computed from counters only), else None; None
    for 0 too (empty scan outputs). `graph` is the loader's _Graph."""
    constants = graph.constants
    trip = node.input[0] if node.input else ""
    cond = node.input[1] if len(node.input) > 1 else ""
    body = _attr(node, "body")
    if not _stays_true(body):
        return _simulated_count(graph, node) or None
    if not trip or trip not in constants or (cond and cond not in constants):
        return None
    if cond and not bool(np.ravel(constants[cond])[0]):
        return None
    return int(np.ravel(constants[trip])[0]) or None


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
    body = _attr(node, "body")
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
    count = _static_count(outer.graph, outer.node) if any(scans) else None
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
