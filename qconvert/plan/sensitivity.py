"""What each quantization costs at the model's outputs, measured.

The int8 model's fake-quant graph (qdq/fakequant.py) with every pair behind a gate (a bool graph
input: the pair's value, or the float one) runs in onnxruntime at its basic optimization level:
each pair sits inside an If, so no integer kernel fusion can take it (the concern of
onnx/runtime.py session_options): the arithmetic is the unfused pairs', the same on every CPU. A *unit* is one gate: an activation's pair, or a
weight with its bias. Opening a set of gates gives the outputs of the model with only those
quantized; the error is measured at each float output and at each slice along its feature axis
(check/metrics.py, feature_axis) as the energy of the error over the energy of the reference:
10^(-SQNR/10).

- **Alone**: the cost of a unit when only it is quantized. For small independent errors the costs
  add (the errors' cross terms average out), so the units are found by bisection over the graph's
  order: a block of units is measured with its gates open; a block that costs nothing worth
  keeping float (below FINE of the allowed error) is done, its units sharing what it cost; any
  other is split in two and both halves measured, down to single units. A few bad units among
  many take a few dozen runs; loss spread everywhere takes up to about two runs per unit, capped
  at MAX_RUNS (fewer for a model whose runs are long: run_budget), the costliest blocks split
  first (blocks left unsplit stay one unit, a connected region). Each run takes the first
  SAMPLES samples (one if its outputs are large). A gate is an If: a closed one costs
  nothing, so a run costs the float model plus the pairs it opens.
- **Poisoned**: what a unit adds when everything before it in the graph is quantized already (the
  all-int8 model up to it), for the units that cost the most alone: the difference between the
  prefix ending before it and the prefix ending with it.

Everything depends on the model, the samples and the params only, in a fixed order: the same
numbers every run on a machine (onnxruntime's thread count can move float sums in their last
bits, which a plan decision would follow only at an exact tie).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

import numpy as np
import onnx

from ..check.metrics import feature_axis
from ..errors import ReferenceFailed, first_line
from ..ir import Model
from ..onnx.loader import node_names
from ..onnx.runtime import has_qdq
from ..qdq.fakequant import PER_AXIS_OPSET, FloatWeights, insert_fake_quant, with_opset
from ..qdq.importer import strip_qdq

FINE = 0.1  # a block costing below this share of the allowed error is not split further
MAX_RUNS = 24  # onnxruntime runs of the gated graph for the alone costs (each on every sample)
SAMPLES = 2  # the samples each run takes (the first of the plan's) ...
# ... but one where a sample's float outputs hold this many values (a detector's or a segmenter's
# maps): their errors are averages over that many values already, and the gated runs are most of
# such a plan's time.
ONE_SAMPLE_VALUES = 16384
POISONED_UNITS = 6  # units whose poisoned cost is measured (the costliest alone)
# The model's work (targets.work's units) the alone and poisoned runs may take together, each
# sample of a run counted: a model that costs seconds a run (DNSMOS: 2e10 a sample) gets fewer
# runs, at least MIN_RUNS, so that planning stays within a few conversions' time.
GATED_WORK = 3e11
MIN_RUNS = 5


@dataclass
class Unit:
    """One gate, or a block of neighbouring gates the bisection did not split."""

    gates: list[str]  # the gate inputs' names
    tensors: list[str]  # what they quantize: ONNX activations, weights' initializers
    kinds: list[str]  # "activation" / "weight", per tensor
    nodes: frozenset[str]  # the ONNX nodes that must stay float for none of it to be quantized
    alone: np.ndarray  # the error at each target when only this is quantized
    # The error with everything before it quantized, and with it too (None: not measured).
    poisoned: tuple[np.ndarray, np.ndarray] | None = None


@dataclass
class Sensitivity:
    """The measured units, in graph order, and what the errors are measured at."""

    targets: list[str]  # "output" or "output[axis a, index k]" per error entry
    slices: np.ndarray  # bool per target: a slice (judged against the slice target)
    units: list[Unit] = field(default_factory=list)
    all_int8: np.ndarray | None = None  # the error with every gate open
    runs: int = 0


class GatedGraph:
    """The gated fake-quant graph of the quantized IR `model` in onnxruntime, with the float
    reference of `samples` (dicts of ONNX inputs by name)."""

    def __init__(self, proto: onnx.ModelProto, model: Model, float_weights: FloatWeights, samples: list):
        from ..calibration.calibrate import CalibrationRun

        work = onnx.ModelProto()
        work.CopyFrom(proto)
        self.nodes = node_names(work)  # before the pairs: the IR ops' sources
        self.outputs = _scored_outputs(work.graph)  # before the fake-quant rewrite, too
        readers: dict[str, list[str]] = {}
        self.producer: dict[str, str] = {}
        self.position: dict[str, int] = {}
        for k, (node, name) in enumerate(zip(work.graph.node, self.nodes)):
            self.position[name] = k
            for i in node.input:  # an omitted optional input ("") links no two nodes
                if i:
                    readers.setdefault(i, []).append(name)
            for o in node.output:
                if o:
                    self.producer[o] = name
        self.readers = readers
        self.types = [node.op_type for node in work.graph.node]
        self.node_inputs = [list(node.input) for node in work.graph.node]
        self.node_outputs = [list(node.output) for node in work.graph.node]
        if has_qdq(work):
            strip_qdq(work)
        work = with_opset(work, PER_AXIS_OPSET)
        graph = insert_fake_quant(work, model, float_weights, gated=True)
        self.gates = graph.gates
        initializers = {t.name for t in work.graph.initializer}
        if not self.outputs:  # no error energy to measure costs by
            raise ReferenceFailed("the model has no float output to measure each quantization's cost at")
        self.runner = CalibrationRun(work, self.outputs)
        del work
        self.inputs = [i.name for i in self.runner.session.get_inputs() if i.name not in self.gates
                       and i.name not in initializers]
        self.samples = [{n: s[n] for n in self.inputs} for s in samples[:SAMPLES]]
        closed = {g: np.array(False) for g in self.gates}
        self.reference = [self._run(sample, closed) for sample in self.samples[:1]]
        if sum(v.size for v in self.reference[0]) >= ONE_SAMPLE_VALUES:
            self.samples = self.samples[:1]
        self.reference += [self._run(sample, closed) for sample in self.samples[1:]]
        self._targets()

    def _run(self, sample: dict, gates: dict) -> list[np.ndarray]:
        try:
            values = self.runner.session.run(self.outputs, {**sample, **gates})
        except Exception as e:  # onnxruntime raises its own exception types
            raise ReferenceFailed(f"onnxruntime failed on the gated fake-quant graph: {first_line(e)}") from None
        return [np.asarray(v, np.float64) for v in values]

    def _targets(self) -> None:
        """The error entries: each output whole, then its slices along its feature axis (those
        whose reference is not all zero); the reference energy of each."""
        self.targets, slices, energies, self.axes = [], [], [], []
        for k, name in enumerate(self.outputs):
            ref = np.stack([r[k] for r in self.reference])
            finite = np.where(np.isfinite(ref), ref, 0.0)
            self.targets.append(name)
            slices.append(False)
            energies.append(float(np.sum(finite ** 2)))
            axis = feature_axis(ref.shape[1:])
            self.axes.append(axis)
            if axis is not None:
                per_slice = np.sum(np.moveaxis(finite, axis + 1, 0).reshape(ref.shape[axis + 1], -1) ** 2, 1)
                for index, energy in enumerate(per_slice):
                    self.targets.append(f"{name}[axis {axis}, index {index}]")
                    slices.append(True)
                    energies.append(float(energy))
        self.slices = np.array(slices)
        self.energy = np.array(energies)

    def error(self, open_gates) -> np.ndarray:
        """The error energy over the reference energy at each target with `open_gates` quantized
        (inf where a value is not finite or the reference is zero and the value is not)."""
        opened = set(open_gates)
        gates = {g: np.array(g in opened) for g in self.gates}
        noise = np.zeros(len(self.targets))
        for sample, reference in zip(self.samples, self.reference):
            values = self._run(sample, gates)
            t = 0
            for k, (ref, got) in enumerate(zip(reference, values)):
                known = np.isfinite(ref)
                diff = np.where(known, np.where(np.isfinite(got), got - ref, np.inf), 0.0)
                squared = diff ** 2
                noise[t] += float(np.sum(squared))
                t += 1
                axis = self.axes[k]
                if axis is not None:
                    per_slice = np.sum(np.moveaxis(squared, axis, 0).reshape(ref.shape[axis], -1), 1)
                    noise[t:t + len(per_slice)] += per_slice
                    t += len(per_slice)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(self.energy > 0, noise / np.where(self.energy > 0, self.energy, 1),
                            np.where(noise > 0, np.inf, 0.0))

    def nodes_of(self, gate: str) -> frozenset[str]:
        """The ONNX nodes that keep the gate's quantization away when they all stay float: an
        activation's producer and its readers through the pair (only the producer when its
        kernel imposes the params: a float producer's output is quantized to its calibrated
        range instead, which holds it); a weight's node."""
        g = self.gates[gate]
        if g.kind == "weight":
            return frozenset([g.node])
        producer = self.producer.get(g.tensor)
        if g.imposed and producer and g.readers is None:
            return frozenset([producer])
        readers = g.readers if g.readers is not None else self.readers.get(g.tensor, [])
        return frozenset(readers) | (frozenset([producer]) if producer and g.readers is None else frozenset())

    def order(self) -> list[str]:
        """The gates in graph order: by the first node each concerns."""
        def place(gate: str) -> tuple[int, int]:
            nodes = self.nodes_of(gate)
            return (min((self.position[n] for n in nodes if n in self.position), default=-1),
                    0 if self.gates[gate].kind == "weight" else 1)
        return sorted(self.gates, key=lambda g: (*place(g), int(g.rsplit("_", 1)[-1])))


def run_budget(graph: GatedGraph, work: float) -> tuple[int, int]:
    """(alone runs, poisoned units) for a model of `work` per sample: MAX_RUNS and POISONED_UNITS
    while they fit in GATED_WORK, else two thirds of the runs it buys to the alone costs (at least
    MIN_RUNS) and a unit's two prefixes from the rest."""
    runs = int(GATED_WORK / max(work * len(graph.samples), 1.0))
    if runs >= MAX_RUNS + 2 * POISONED_UNITS:
        return MAX_RUNS, POISONED_UNITS
    alone = max(MIN_RUNS, 2 * runs // 3)
    return alone, max(0, (runs - alone) // 2)


FLOATS = (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16)
SELECTORS = ("ArgMax", "ArgMin", "TopK")  # an integer output made by one selects from floats
PASSING = ("Cast", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Transpose", "Identity")


def _scored_outputs(graph: onnx.GraphProto) -> list[str]:
    """The tensors the errors are measured at: the float outputs, and for an integer output that
    a selection makes (decoded ids: ArgMax, ArgMin or TopK, through ops that only move or cast
    values), the values it selects from (a recognizer's logits), once each. An output whose
    shape the values decide (a detector's kept boxes) is scored at the tensors its selection
    reads instead (value_sized_selection)."""
    producer = {o: node for node in graph.node for o in node.output}
    sized, selection = value_sized_selection(graph)
    scored = [o.name for o in graph.output if o.type.tensor_type.elem_type in FLOATS
              and o.name not in sized]
    scored += [t for t in selection if t not in scored]
    for output in graph.output:
        if output.type.tensor_type.elem_type in FLOATS or output.name in sized:
            continue
        node = producer.get(output.name)
        while node is not None and node.op_type in PASSING:
            node = producer.get(node.input[0])
        if node is not None and node.op_type in SELECTORS and node.input[0] not in scored:
            scored.append(node.input[0])
    return scored


def value_sized_selection(graph: onnx.GraphProto) -> tuple[set[str], list[str]]:
    """(the graph outputs whose shape the values decide, the tensors their selection reads).
    Such an output (a detector's kept boxes) cannot be compared entry by entry when quantizing
    changes what is kept; the tensors its selection reads (_selected_from: NMS's boxes and
    scores) can. Both empty when no output's shape is decided by the values."""
    producer = {o: node for node in graph.node for o in node.output}
    constants = {t.name for t in graph.initializer}
    constants |= {o for node in graph.node if node.op_type == "Constant" for o in node.output}
    deciding = [node for node in graph.node if _decides_size(node, constants)]
    sized = _value_sized(graph, deciding)
    outputs = {o.name for o in graph.output if o.name in sized}
    if not outputs:
        return set(), []
    return outputs, _selected_from(deciding, producer, sized, constants)


# Ops whose output's size the values decide, and the inputs whose values decide it.
_SIZING = {"NonMaxSuppression": (0, 1), "NonZero": (0,), "Compress": (1,), "TopK": (0,)}
_COMPARISONS = ("Greater", "Less", "GreaterOrEqual", "LessOrEqual", "Equal", "Not", "And", "Or")


def _decides_size(node: onnx.NodeProto, constants: set[str]) -> bool:
    """Whether the values decide the size of `node`'s output: a NonZero, NonMaxSuppression or
    Compress, a TopK of a computed k."""
    return node.op_type in _SIZING and (node.op_type != "TopK" or node.input[1] not in constants)


def _value_sized(graph: onnx.GraphProto, deciding: list[onnx.NodeProto]) -> set[str]:
    """The tensors whose shape the values may decide: the `deciding` nodes' outputs, and
    whatever an op reading one writes."""
    sized: set[str] = {o for node in deciding for o in node.output if o}
    for node in graph.node:
        if any(i in sized for i in node.input):
            sized.update(o for o in node.output if o)
    return sized


def _selected_from(deciding: list[onnx.NodeProto], producer: dict, sized: set[str],
                   constants: set[str]) -> list[str]:
    """The tensors the `deciding` nodes read their decision from, where their own shape is
    static: NMS's boxes and scores, a TopK's values, the operands of the comparison a NonZero
    or Compress takes its mask from (through ops that only move values)."""
    found: list[str] = []
    for node in deciding:
        for slot in _SIZING[node.op_type]:
            name = node.input[slot] if slot < len(node.input) else ""
            source = producer.get(name)
            while source is not None and source.op_type in PASSING:
                source = producer.get(source.input[0])
            names = ([i for i in source.input if i] if source is not None
                     and source.op_type in _COMPARISONS else [name])
            found += [n for n in names if n and n not in sized and n not in constants
                      and n not in found and n in producer]
    return found


def measure(graph: GatedGraph, allowed: np.ndarray, max_runs: int = MAX_RUNS,
            poisoned_units: int = POISONED_UNITS) -> Sensitivity:
    """The units' alone costs by bisection (see the module docstring) in at most `max_runs`
    runs, and the poisoned costs of the `poisoned_units` costliest; `allowed` is the error
    allowed at each target."""
    order = graph.order()
    result = Sensitivity(graph.targets, graph.slices)
    if not order:
        result.all_int8 = np.zeros(len(graph.targets))
        return result

    def weight(error: np.ndarray) -> float:
        return float(np.max(error / allowed))

    def cost(lo: int, hi: int) -> np.ndarray:
        result.runs += 1
        return graph.error(order[lo:hi])

    total = cost(0, len(order))
    result.all_int8 = total
    heap = [(-weight(total), 0, len(order), total)]
    done: list[tuple[int, int, np.ndarray]] = []
    while heap:
        w, lo, hi, error = heapq.heappop(heap)
        if -w < FINE or hi - lo == 1 or result.runs + 2 > max_runs:
            done.append((lo, hi, error))
            continue
        mid = (lo + hi) // 2
        for a, b in ((lo, mid), (mid, hi)):
            part = cost(a, b)
            heapq.heappush(heap, (-weight(part), a, b, part))
    for lo, hi, error in sorted(done, key=lambda d: d[0]):
        gates = order[lo:hi]
        if weight(error) < FINE and hi - lo > 1:  # a quiet block: its units share what it cost
            for gate in gates:
                result.units.append(_unit(graph, [gate], error / (hi - lo)))
        else:
            result.units.append(_unit(graph, gates, error))
    _poisoned(graph, order, result, allowed, poisoned_units)
    return result


def _unit(graph: GatedGraph, gates: list[str], alone: np.ndarray) -> Unit:
    found = [graph.gates[g] for g in gates]
    return Unit(gates, [g.tensor for g in found], [g.kind for g in found],
                frozenset().union(*(graph.nodes_of(g) for g in gates)), alone)


def _poisoned(graph: GatedGraph, order: list[str], result: Sensitivity, allowed: np.ndarray,
              count: int) -> None:
    """Each of the costliest units' poisoned cost: error(prefix with it) - error(prefix before it),
    the prefixes in graph order; neighbouring prefixes are measured once."""
    place = {g: k for k, g in enumerate(order)}
    ranked = sorted(range(len(result.units)),
                    key=lambda k: (-float(np.max(result.units[k].alone / allowed)), k))[:count]
    prefixes: dict[int, np.ndarray] = {}

    def prefix(end: int) -> np.ndarray:
        if end not in prefixes:
            result.runs += 1
            prefixes[end] = graph.error(order[:end]) if end else np.zeros(len(graph.targets))
        return prefixes[end]

    for k in sorted(ranked, key=lambda k: place[result.units[k].gates[0]]):
        unit = result.units[k]
        start, end = place[unit.gates[0]], place[unit.gates[-1]] + 1
        unit.poisoned = (prefix(start), prefix(end))


def sqnr_db(error: np.ndarray | float) -> float:
    """The SQNR of a normalized error energy (the worst of several): -10 log10(error)."""
    error = float(np.max(error)) if np.size(error) else 0.0
    if error <= 0:
        return math.inf
    return -10 * math.log10(error) if math.isfinite(error) else -math.inf
