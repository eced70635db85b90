"""The precision planner, on by default with --quantize --calibration: every op computes in int8
but the regions int8 is measured not to hold, and those go to the target's other precisions
(16x8 kernels with int16 activations, hybrid kernels with int8 weights and float activations,
float), in the order the target allows, at the least cost on the target. The target is data
(targets/: which kernels a device has, which its delegate runs, what each costs); nothing here
reads a clock, so the same model, data, flags and version give the same plan and the same bytes
on any machine, whatever its load.

1. The all-int8 model is written and run in LiteRT on the plan's samples (the first 8 of the
   calibration data). It holds the target when every output reaches --target-sqnr, every output
   slice the target less SLICE_MARGIN_DB, and every output read by a decision (decisions.py)
   keeps float's clear decisions at DECISIONS_KEPT of its positions. Then it is the plan. When it
   misses, the float model (every int8 node out) is measured: when it misses too, no plan can
   hold the target, nothing more is measured and the better of the two is written (a float model
   that holds is forgotten: it is a probe, not a plan). When it holds and the weights were
   rounded for the output and biases corrected (quantize/rounding.py), the all-int8 model with
   weights rounded to nearest and biases as they are is measured too, and the better of the two
   arithmetics is the starting point (Plan's `arithmetic` says when that is round-to-nearest).
2. When it misses, each quantization's cost is measured in the gated fake-quant graph
   (sensitivity.py): alone (only it quantized) and poisoned (after everything before it).
3. The candidate plans take out of int8 the units that cost the most alone, the first 1, 2, 3,
   4, 6, ... of them (plan_size), with no cap: until one is within HEADROOM * MARGIN of the
   allowed error in the gated graph, or no int8 is left. A unit leaves int8 only when all the
   ONNX nodes around it (an activation's producer and readers, only the producer when its kernel
   fixes the params; a weight's node) do, so what leaves grows as connected regions; an int8 op
   with no weight whose every neighbour is out joins them (it would cost a QUANTIZE and a
   DEQUANTIZE to save nothing). Each candidate is measured whole in the gated graph (costs do not
   add up once errors are large).
4. Each candidate has a form per promotion the target allows (`_assigned`): int16 (nodes whose
   ops all have a 16x8 kernel there), hybrid (a node out for its activations runs its hybrid
   kernel where it has one: CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED, BATCH_MATMUL, the
   sequence LSTM), float; a node a form cannot take goes to the next the target allows (one out
   for its weights' cost, which 16x8 and hybrid keep int8, to float), or stays int8. The forms
   of the candidates within HEADROOM are written and run in LiteRT cheapest first by their
   estimated cost on the target, then the closest others, up to MAX_ROUNDS, until one holds.
5. When no region held, every node out of int8 in each integer form the target allows, cheapest
   first (_everything_out: never all float). Of the measured plans that hold, the cheapest on
   the target (targets.cost of the written model) is written. When none holds, the one that
   missed by the least, and the plan says that int8 cannot hold the target (the conversion warns, naming what would trade size or speed for
   accuracy).

With a metric (the API's `evaluate` and `max_drop`), steps 1 and 4 judge by the metric's drop from
the float model's score instead, and the smallest candidate that holds it (in its cheapest form)
is found by bisection.
"""

from __future__ import annotations

import logging
import math
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
import onnx

from ..errors import ConversionError, ReferenceFailed, first_line
from ..ir import Model
from ..onnx.loader import node_names
from ..ops.registry import TFLITE_OPS
from ..targets import CONVERSIONS, Target, cost, precision_of, work
from ..transforms.pipeline import QuantizeOptions, run_quantize_pipeline
from .decisions import (
    ARGMAX_PRODUCERS,
    PROBABILITY_PRODUCERS,
    THRESHOLD_PRODUCERS,
    decision_agreement,
    decision_outputs,
    decisions_per_sample,
    read_by_argmax,
)
from .exposed import Exposure

log = logging.getLogger("qconvert")

SLICE_MARGIN_DB = 10.0  # an output's slices are held to the target less this
HEADROOM = 0.8  # a plan measured in the gated graph aims at this share of the allowed error
MARGIN = 0.5  # plans keep growing (measured) until this share of HEADROOM, for LiteRT's misses
MAX_ROUNDS = 5  # plans written and measured in LiteRT after the all-int8 one
SHOWN_UNITS = 12  # the plan lists the costliest units
SHOWN_REGIONS = 3  # the summary names the first regions out of int8 (--json has them all)
DECISIONS_KEPT = 0.99  # an output read by a decision keeps float's clear ones at this share
# Outputs read by a decision are checked on as many samples as bring MIN_DECISIONS decisions (a
# classifier's 8 cannot show a 1.5 % loss; a segmenter's 8 masks hold thousands), up to
# DECISION_SAMPLES, while that many take under DECISION_WORK units of the model's work
# (targets.work: multiply-accumulates, elements): bounds on the model, not a clock.
MIN_DECISIONS = 256
DECISION_SAMPLES = 32
DECISION_WORK = 2e10
# A model whose outputs hold many values a sample (a detector's or a segmenter's maps) is checked
# on as many samples as hold CHECK_VALUES output values, at least MIN_CHECK_SAMPLES: SQNR over
# 2^17 values is as steady as over 8 samples of a 16384-value output, and each LiteRT run of a
# big float or hybrid candidate costs a second (an 800x608 layout detector: 90 runs, 76 CPU s).
CHECK_VALUES = 2**17
MIN_CHECK_SAMPLES = 2
# The float_reason of the ops the plan keeps out of int8 starts so: the summary groups them by it.
PLAN_KEEPS = "the precision plan keeps it out of int8"
HYBRID = "hybrid"  # a promoted node that runs TFLite's hybrid kernels (Promotion.to)


def plan_size(count: int) -> bool:
    """The plans measured in the gated graph take out the costliest 1, 2, 3, 4, 6, 8, 12, ...
    units: powers of two and three times powers of two."""
    while count % 2 == 0:
        count //= 2
    return count in (1, 3)


@dataclass
class Promotion:
    node: str
    op: str  # the ONNX op type
    reason: str
    to: str = "float"  # "float", HYBRID or "int16"


@dataclass
class Round:
    promoted: int  # nodes out of int8 in this round's plan
    worst_sqnr_db: float  # the lowest output SQNR
    worst_slice_sqnr_db: float | None = None
    argmax_agreement: float | None = None  # the lowest over the outputs read by a decision
    cost_ns: float | None = None  # the plan's estimated time on the target (targets.cost)


@dataclass
class TensorCost:
    """What quantizing one unit costs at the worst output or slice, in SQNR there."""

    tensors: list[str]
    kind: str  # "activation", "weight", or "region" (a block of several)
    alone_db: float  # the worst output's SQNR with only it quantized
    poisoned_db: float | None  # ... with it and everything before it in the graph quantized
    poisoned_loss_db: float | None  # what it takes off that SQNR (None: nothing before it)
    kept_float: bool


NEAREST = "nearest, no bias correction"


@dataclass
class Plan:
    target_sqnr_db: float
    reached: bool
    target: str = ""  # the target's name (targets/)
    promotions: list[Promotion] = field(default_factory=list)
    rounds: list[Round] = field(default_factory=list)
    costs: list[TensorCost] = field(default_factory=list)  # the costliest units, measured
    sensitivity_runs: int = 0
    seconds: float = 0.0
    metric: dict | None = None  # with a metric: float, score (the chosen plan's), max_drop, scores
    note: str = ""  # why the plan could not measure
    float_misses: bool = False  # the float model misses the target too: no plan was searched
    float_round: Round | None = None  # the float model's measure, when it misses
    samples: int = 0  # the samples every plan was checked on
    # NEAREST: the plan's int8 weights round to nearest, biases uncorrected (that measured better
    # than rounding for the output with bias correction); "": as the options say
    arithmetic: str = ""
    mix: dict[str, int] = field(default_factory=dict)  # the written ops by precision: int8, hybrid, ...
    chosen_round: int = 0  # the rounds' index of the written plan
    float_cost_ns: float | None = None  # the float model's estimated time on the target
    argmax_outputs: list[str] = field(default_factory=list)  # held to DECISIONS_KEPT
    threshold_outputs: list[str] = field(default_factory=list)  # likewise, against 0.5

    def float_measure(self) -> str:
        """What the float model reached, when it misses the target."""
        if self.metric is None:
            return f"{self.float_round.worst_sqnr_db:.1f} dB"
        return f"a metric of {self.metric['float_file']:.4g}"

    def summary(self) -> str:
        chosen = self.rounds[self.chosen_round] if self.rounds else None
        if not self.promotions and self.reached:
            return "plan: all int8"
        text = "plan: " + ", ".join(f"{n} {kind}" for kind, n in self.mix.items() if n) + " ops"
        if chosen is not None and self.metric is None and math.isfinite(chosen.worst_sqnr_db):
            text += f", {chosen.worst_sqnr_db:.1f} dB"
        if self.metric is not None:
            text += f", metric {self.metric['score']:.4g} (float {self.metric['float']:.4g})"
        if not self.reached:
            text += (f", target {self.target_sqnr_db:g} dB not reached" if self.metric is None
                     else f", drop above {self.metric['max_drop']:g}")
            text += f": the float model misses it too ({self.float_measure()})" if self.float_misses \
                else ": int8 cannot hold it"
        if self.promotions and self.rounds:
            first = self.rounds[0]
            text += f" (all int8: {first.worst_sqnr_db:.1f} dB"
            if first.argmax_agreement is not None:
                text += f", decisions {100 * first.argmax_agreement:.1f} % kept"
            text += ")"
        if self.promotions:
            text += "; out of int8: " + regions_text(self.promotions)
        if self.note:
            text += f" ({self.note})"
        return text


def regions_text(promotions: list[Promotion]) -> str:
    """The regions out of int8, the first SHOWN_REGIONS of them: each the nodes that left for one
    reason (one measured unit and what joined it), where they went and why."""
    regions: dict[tuple[str, str], list[str]] = {}
    for p in promotions:
        why = p.reason.split(": ", 1)[-1]
        regions.setdefault((p.to, why), []).append(p.node)
    shown = []
    for (to, why), nodes in list(regions.items())[:SHOWN_REGIONS]:
        more = f" and {len(nodes) - 1} more" if len(nodes) > 1 else ""
        shown.append(f"{nodes[0]!r}{more} {to} ({why})")
    extra = len(regions) - SHOWN_REGIONS
    return "; ".join(shown) + (f"; {extra} more regions (--json has them)" if extra > 0 else "")


@dataclass(frozen=True)
class Metric:
    """The API's metric hook: evaluate({output name: [samples, ...]}) -> score (higher is
    better), and the drop from the float model's score that is tolerated."""

    evaluate: Callable
    max_drop: float


def allowed_error(slices: np.ndarray, target_db: float) -> np.ndarray:
    """The error energy allowed at each output (target) and slice (target less SLICE_MARGIN_DB)."""
    return np.where(slices, 10.0 ** (-(target_db - SLICE_MARGIN_DB) / 10), 10.0 ** (-target_db / 10))


def _worst(verification) -> tuple[float, float | None]:
    """The worst output's SQNR and the worst slice's (None: no output has slices)."""
    worst_slice = verification.worst_slice
    return verification.worst.sqnr_db, worst_slice.worst_slice_sqnr_db if worst_slice else None


def _judged(verification, exposure: Exposure | None):
    """The verification without the outputs the values size, when the candidates expose what
    decides them (exposed.py)."""
    if exposure is None:
        return verification
    return replace(verification, outputs=[o for o in verification.outputs if o.name not in exposure.sized])


def _margin(verification, target_db: float) -> float:
    """How many times over the allowed error the worst output or slice is (<= 1: within)."""
    worst = 0.0
    for o in verification.outputs:
        worst = max(worst, 10 ** ((target_db - o.sqnr_db) / 10))
        if o.worst_slice_sqnr_db is not None:
            worst = max(worst, 10 ** ((target_db - SLICE_MARGIN_DB - o.worst_slice_sqnr_db) / 10))
    return worst


def _quantized(model: Model, options: QuantizeOptions, promoted: dict[str, tuple[str, str]],
               exposure: Exposure | None = None) -> Model:
    """The model with `promoted` nodes ({node: (precision, reason)}) out of int8: to int16, to
    float, or hybrid (float, running hybrid kernels where the node has one); the `exposure`'s
    tensors written as outputs too (exposed.py)."""
    candidate = model.copy()
    if exposure is not None:
        candidate.outputs += [t for t in exposure.tensors if t not in candidate.outputs]
    int16 = {node: reason for node, (to, reason) in promoted.items() if to == "int16"}
    floating = {node: f"{PLAN_KEEPS}: {reason}" for node, (to, reason) in promoted.items() if to != "int16"}
    hybrid = frozenset(node for node, (to, _) in promoted.items() if to == HYBRID)
    options = replace(options, int16_nodes={**int16, **options.int16_nodes},
                      keep_float={**floating, **options.keep_float},
                      hybrid_nodes=options.hybrid_nodes | hybrid)
    run_quantize_pipeline(candidate, options)
    return candidate


def precision_mix(model: Model) -> dict[str, int]:
    """The written ops by how they compute: int8, int16, hybrid (float activations, int8
    weights read directly) and float (QUANTIZE and DEQUANTIZE, and ops that compute on no float
    tensor, not counted)."""
    mix = {"int8": 0, "int16": 0, HYBRID: 0, "float": 0}
    for op in model.operators:
        if op.type in CONVERSIONS:
            continue
        precision = precision_of(op, model)
        if precision in ("int8", "int16") and op.quantized != precision:
            continue  # an op on integers only (shapes, indices)
        mix[precision] += 1
    return mix


def float_nodes(model: Model) -> set[str]:
    """The ONNX nodes that run float: some op computes for them, none of theirs is quantized (a
    node whose only ops are QUANTIZE or DEQUANTIZE, a graph input's conversion that takes the
    node's name, is not: its tensor is quantized)."""
    quantized = {op.source for op in model.operators if op.quantized in ("int8", "int16")}
    return {op.source for op in model.operators
            if op.type not in CONVERSIONS and op.source not in quantized}


class _Regions:
    """The ONNX graph's neighbourhoods (the gated graph's), for growing regions out of int8, and
    which promotions each node can take on the target."""

    def __init__(self, graph, candidate: Model, target: Target):
        self.graph = graph  # None: no neighbourhoods (the gated graph could not run)
        self.target = target
        self.float_already = float_nodes(candidate)
        self.weighted = {g.node for g in graph.gates.values() if g.kind == "weight"} if graph else set()
        ir_types: dict[str, set[str]] = {}
        for op in candidate.operators:
            ir_types.setdefault(op.source, set()).add(op.type)
        self.ir_types = ir_types
        position = graph.position if graph else {}
        self.int8_nodes = sorted({op.source for op in candidate.operators if op.quantized == "int8"},
                                 key=lambda n: (position.get(n, -1), n))

    def takes(self, node: str, precision: str, for_weights: bool = False) -> bool:
        """Whether the node can go to `precision` on the target: int16 when every op of it has a
        16x8 kernel there; hybrid or float when the target allows them. A node out for its
        weights' cost goes to float only (16x8 and hybrid kernels keep the weights int8)."""
        if precision not in self.target.promotions or (for_weights and precision != "float"):
            return False
        if precision != "int16":
            return True
        return all(getattr(TFLITE_OPS[t].quant, "int16", False) and self.target.kernel(t, "int16")
                   for t in self.ir_types.get(node, ()) if t not in CONVERSIONS)

    def promotable(self, node: str) -> bool:
        return any(self.takes(node, p) for p in self.target.promotions)

    def neighbours(self, node: str) -> list[str]:
        k = self.graph.position.get(node)
        if k is None:
            return []
        found = [self.graph.producer[i] for i in self.graph.node_inputs[k] if i in self.graph.producer]
        for o in self.graph.node_outputs[k]:
            found += self.graph.readers.get(o, [])
        return found

    def bridged(self, kept: set[str]) -> list[str]:
        """The int8 nodes with no weight whose every neighbour is out of int8 (kept, or float
        already)."""
        joined = []
        for node in self.int8_nodes:
            if node in kept or node in self.weighted or not self.promotable(node):
                continue
            around = self.neighbours(node)
            if around and all(n in kept or n in self.float_already for n in around):
                joined.append(node)
        return joined


@dataclass
class _Candidate:
    """A plan measured in the gated graph: the nodes out of int8 with why, those of them out
    for their weights' cost, and its error there over the allowed one (the worst output or
    slice)."""

    kept: dict[str, str]
    off: float
    for_weights: frozenset[str] = frozenset()


def _candidates(sensitivity, graph, regions: _Regions, allowed: np.ndarray) -> list[_Candidate]:
    """The plans taking out of int8 the units that cost the most alone, the first 1, 2, 3, 4, 6,
    8, 12, ... of them (plan_size), each measured in the gated graph with the gates of every unit
    left without an int8 neighbour closed, but the weights of the nodes out for their
    activations (16x8 and hybrid kernels keep them int8; the costs do not add up once errors are
    large: a unit's cost depends on what else is quantized, so each plan is measured whole).
    Stops at the first within HEADROOM * MARGIN of the allowed error (the larger plans within
    HEADROOM are there for LiteRT, whose kernels round their own way, when the smallest misses),
    or when every unit is out."""
    from .sensitivity import sqnr_db

    units = sensitivity.units
    ranked = sorted(range(len(units)), key=lambda k: (-float(np.max(units[k].alone / allowed)), k))
    every = [g for unit in units for g in unit.gates]
    kept: dict[str, str] = {}
    for_weights: set[str] = set()
    found: list[_Candidate] = []
    for count, k in enumerate(ranked, 1):
        unit = units[k]
        promoted = {n for n in unit.nodes if regions.promotable(n)}
        if not promoted:
            continue
        what = repr(unit.tensors[0]) if len(unit.tensors) == 1 else f"{len(unit.tensors)} tensors from {unit.tensors[0]!r}"
        reason = f"quantizing {what} alone gives {sqnr_db(unit.alone[~graph.slices]):.1f} dB at the outputs"
        if graph.slices.any():
            reason += f", {sqnr_db(unit.alone[graph.slices]):.1f} dB at the worst slice"
        if all(kind == "weight" for kind in unit.kinds):
            for_weights |= promoted
        for node in sorted(promoted - kept.keys() - regions.float_already):
            kept[node] = reason
        if not plan_size(count) and count < len(ranked):
            continue
        plan = dict(kept)
        for node in regions.bridged(set(plan)):
            plan[node] = "joins the float ops around it (saves a QUANTIZE and a DEQUANTIZE)"
        weights_out = frozenset(for_weights & plan.keys())
        floating = plan.keys() | regions.float_already
        kept_weights = plan.keys() - weights_out  # out for their activations: weights stay int8
        closed = {g for u in units if u.nodes <= floating for g in u.gates
                  if not (graph.gates[g].kind == "weight" and graph.gates[g].node in kept_weights)}
        sensitivity.runs += 1
        error = graph.error([g for g in every if g not in closed])
        found.append(_Candidate(plan, float(np.max(error / allowed)), weights_out))
        if found[-1].off <= HEADROOM * MARGIN:
            break
    return found


def _assigned(candidate: _Candidate, form: str, regions: _Regions) -> dict[str, tuple[str, str]]:
    """The candidate in one form: {node: (precision, reason)}, each node to `form` when it can
    take it, else to the next promotion the target allows that it can; a node none takes stays
    int8 (left out)."""
    order = regions.target.promotions
    chain = order[order.index(form):]
    assigned = {}
    for node, reason in candidate.kept.items():
        to = next((p for p in chain if regions.takes(node, p, node in candidate.for_weights)), None)
        if to is not None:
            assigned[node] = (to, reason)
    return assigned


@dataclass
class _Attempt:
    off: float  # how many times over the allowed error, or the tolerated drop (<= 1: it holds)
    model: Model
    promoted: dict[str, tuple[str, str]]  # node -> (precision, reason)
    cost_ns: float = 0.0  # on the target (targets.cost)
    score: float | None = None
    round: int = 0  # its index in Plan.rounds


def plan_precision(model: Model, options: QuantizeOptions, proto: onnx.ModelProto, samples: list,
                   target_db: float, target: Target, write, check, metric: Metric | None = None,
                   count: int = 8, exposure: Exposure | None = None) -> tuple[Model, Plan]:
    """The quantized model of the chosen plan, and the plan. `model` is the calibrated float model
    after the float pipeline (left as it is); `proto` the ONNX model with its weights; `samples`
    the plan's inputs, of which the first `count` are checked (more, up to DECISION_SAMPLES, for
    outputs read by a decision when the model's work allows); `target_db` the --target-sqnr;
    `target` the device (targets/); write(model, path) writes a quantized model as a .tflite;
    check(path, n) runs it in LiteRT next to onnxruntime on the first n samples: (its
    Verification, LiteRT's outputs, onnxruntime's outputs, each {output name: [samples, ...]});
    with an `exposure` (exposed.py), the candidates write its tensors, which check compares too,
    and are judged without its value-sized outputs; the model returned has its own outputs."""
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="qconvert-plan-") as folder:
        planner = _Planner(model, options, write, check, folder, target, target_db, metric, count,
                           len(samples), exposure)
        chosen = planner.run(proto, samples)
    if exposure is not None:
        chosen = replace(chosen, model=_quantized(model, planner.options, chosen.promoted))
    plan = planner.plan
    plan.chosen_round = chosen.round
    plan.mix = precision_mix(chosen.model)
    plan.float_cost_ns = round(cost(model, target).ns, 1)
    if metric is not None:
        plan.metric["score"] = chosen.score
    plan.promotions = _promotions(proto, chosen)
    if planner.sensitivity is not None:
        graph = planner.graph
        floating = set(chosen.promoted) | float_nodes(chosen.model)
        plan.costs = _costs(planner.sensitivity, graph, floating, allowed_error(graph.slices, target_db))
    plan.seconds = round(time.perf_counter() - started, 3)
    return chosen.model, plan


class _Planner:
    """One planning: the plans written and measured (`tried`), and what the choice needs."""

    def __init__(self, model: Model, options: QuantizeOptions, write, check, folder: str,
                 target: Target, target_db: float, metric: Metric | None, count: int, available: int,
                 exposure: Exposure | None = None):
        from ..qdq.fakequant import FloatWeights

        self.model, self.options, self.write, self.check = model, options, write, check
        self.folder, self.target, self.target_db, self.metric = folder, target, target_db, metric
        self.exposure = exposure
        self.plan = Plan(target_db, False, target.name,
                         argmax_outputs=decision_outputs(model, ARGMAX_PRODUCERS, 2),
                         threshold_outputs=decision_outputs(model, THRESHOLD_PRODUCERS))
        self.probabilities = set(decision_outputs(model, PROBABILITY_PRODUCERS, 2))
        self.float_weights = FloatWeights()
        self.float_weights(model)
        self.tried: list[_Attempt] = []
        self.graph = self.sensitivity = None
        self.count, self.available = _check_count(model, count), available  # checked, of those given
        self.plan.samples = self.count
        self.work = sum(work(op, model) for op in model.operators)  # the model's, per sample

    def run(self, proto: onnx.ModelProto, samples: list) -> _Attempt:
        """Steps 1 to 5 of the module docstring; the chosen attempt."""
        self.attempt({})  # the all-int8 model
        if self.tried[0].off > 1:
            holds = self._float_holds()
            self._arithmetic()
            if holds and self.tried[0].off > 1:
                self._regions(proto, samples)
            if self.graph is not None and all(a.off > 1 for a in self.tried):
                self._everything_out("no region of int8 measured held the target")
        holding = [a for a in self.tried if a.off <= 1]
        self.plan.reached = bool(holding)
        if holding:
            return min(holding, key=lambda a: (a.cost_ns, a.round))
        return min(self.tried, key=lambda a: (a.off, a.round))

    def written(self, candidate: Model) -> str:
        """The candidate's .tflite, named by the round it is about to be."""
        path = os.path.join(self.folder, f"plan-{len(self.plan.rounds)}.tflite")
        self.write(candidate, path)
        return path

    def measured(self, candidate: Model, promoted: dict[str, tuple[str, str]]) -> _Attempt:
        """The `candidate` written and run in LiteRT: how far off it is (<= 1: it holds)."""
        plan, metric = self.plan, self.metric
        verification, outputs, reference = self._checked(self.written(candidate))
        verification = _judged(verification, self.exposure)
        agreement = decision_agreement(outputs, reference, plan.argmax_outputs, plan.threshold_outputs,
                                       self.target_db)
        spent = round(cost(candidate, self.target).ns, 1)
        plan.rounds.append(Round(len(promoted), *_worst(verification), agreement, spent))
        found = _Attempt(0.0, candidate, promoted, spent, round=len(plan.rounds) - 1)
        if metric is None:
            found.off = _margin(verification, self.target_db)
            if agreement is not None and agreement < DECISIONS_KEPT:
                found.off = max(found.off, (1 - agreement) / (1 - DECISIONS_KEPT))
            return found
        if plan.metric is None:
            plan.metric = {"float": float(metric.evaluate(reference)), "max_drop": metric.max_drop,
                           "scores": []}
        found.score = float(metric.evaluate(outputs))
        plan.metric["scores"].append(found.score)  # per round
        drop = plan.metric["float"] - found.score
        off = drop / metric.max_drop if metric.max_drop > 0 else (0.0 if drop <= 0 else math.inf)
        found.off = max(off, 0.0)
        return found

    def _checked(self, path: str):
        """check(path) on the plan's samples. The first time, when the model has outputs read by
        a decision and its samples bring fewer than MIN_DECISIONS, the count grows to bring them
        (up to DECISION_SAMPLES, within DECISION_WORK of the model's work) and the check runs
        again: every plan is judged on the same samples."""
        found = self.check(path, self.count)
        if not self.plan.rounds:
            self.plan.argmax_outputs = read_by_argmax(found[2], self.plan.argmax_outputs, self.probabilities)
        if self.plan.rounds or self.metric is not None or self.count >= self.available:
            return found
        if decision_agreement(found[1], found[2], self.plan.argmax_outputs, self.plan.threshold_outputs,
                              self.target_db) is None:
            return found
        per_sample = decisions_per_sample(found[2], self.plan.argmax_outputs, self.plan.threshold_outputs)
        wanted = min(self.available, DECISION_SAMPLES, int(DECISION_WORK / max(self.work, 1.0)),
                     math.ceil(MIN_DECISIONS / max(per_sample, 1)))
        if wanted > self.count:
            self.count = self.plan.samples = wanted
            found = self.check(path, self.count)
        return found

    def attempt(self, promoted: dict[str, tuple[str, str]]) -> float:
        """Writes and measures the plan with `promoted` out of int8 (once); how far off it is."""
        for earlier in self.tried:
            if earlier.promoted == promoted:
                return earlier.off
        try:
            candidate = _quantized(self.model, self.options, promoted, self.exposure)
            self.tried.append(self.measured(candidate, promoted))
        except ConversionError as e:
            if not promoted or isinstance(e, ReferenceFailed):
                raise
            # A promotion whose params a kernel refuses (the quantize steps', or LiteRT's when it
            # prepares the file: a 16x8 conv's bias beyond its range): not a plan.
            log.debug("plan with %d nodes out of int8 left out: %s", len(promoted), first_line(e))
            return math.inf
        return self.tried[-1].off

    def _arithmetic(self) -> None:
        """Step 1, when the all-int8 model misses: all int8 with its weights rounded to nearest
        and its biases as they are; the better of the two is the plan's starting point (the
        rounding for the output and bias correction lose on some models, measured)."""
        if not self.options.layer_inputs:
            return
        plain = replace(self.options, layer_inputs={})
        other = self.measured(_quantized(self.model, plain, {}, self.exposure), {})
        if other.off < self.tried[0].off:
            self.options, self.tried[0], self.plan.arithmetic = plain, other, NEAREST

    def _everything(self, reason: str) -> tuple[_Regions, _Candidate]:
        """The all-int8 model's regions, and the candidate taking every node out of int8 for
        `reason`: the int8 nodes of the all-int8 model and every other source node of the float
        model (a node whose op a quantize step folded into another's in int8, a constant ADD
        after a MUL into its depthwise conv, is an op of its own once that other is out)."""
        regions = _Regions(None, self.tried[0].model, self.target)
        nodes = dict.fromkeys(regions.int8_nodes)
        nodes.update(dict.fromkeys(op.source for op in self.model.operators if op.source))
        return regions, _Candidate(dict.fromkeys(nodes, reason), math.inf)

    def _float_holds(self) -> bool:
        """Whether every int8 node out in float holds the target (on a target that runs float):
        when the float model itself misses it (an output that selects by rank, a reference that
        rounds as its own pairs say), no plan can hold it and the search is not run. The float
        model is a probe, not a plan: it is forgotten either way (the plan keeps int8 where int8
        holds, whatever the float model would cost; where the target cannot be measured, the
        user asked for an integer model and gets the best measured one), its measure kept in
        plan.float_round when it misses."""
        if "float" not in self.target.promotions:
            return True
        regions, everything = self._everything("no plan holds the target")
        holds = self.attempt(_assigned(everything, "float", regions)) <= 1
        self.tried.pop()
        probe = self.plan.rounds.pop()
        if self.metric is not None:
            self.plan.metric["float_file"] = self.plan.metric["scores"].pop()  # LiteRT's float score
        if not holds:
            self.plan.float_misses, self.plan.float_round = True, probe
        return holds

    def _regions(self, proto: onnx.ModelProto, samples: list) -> None:
        """Steps 2 to 4: the sensitivity, and the plans tried in LiteRT. A model the gated graph
        cannot run gets no int8 regions, with a warning."""
        from .sensitivity import GatedGraph

        try:
            self.graph = GatedGraph(proto, self.tried[0].model, self.float_weights, samples)
            self.sensitivity = _search(self.graph, self.tried[0].model, self.target, self.target_db,
                                       self.metric, self.attempt)
        except (ConversionError, ReferenceFailed) as e:
            self.plan.note = f"sensitivity not measured: {first_line(e)}"
            log.warning("warning: the precision plan has no int8 regions to offer: %s", self.plan.note)
            self.graph = self.sensitivity = None
            del self.tried[1:]
            self._everything_out()
            return
        self.plan.sensitivity_runs = self.sensitivity.runs

    def _everything_out(self, reason: str = "the plan could not measure which regions int8 holds") -> None:
        """Every int8 node out, in each integer form the target allows (16x8 kernels, hybrid
        ones: the weight-only plan on a CPU), cheapest first, until one holds: the plan when
        there are no regions to offer, or when none of the regions measured held. Never all float:
        the probe measured that (_float_holds)."""
        regions, everything = self._everything(reason)
        estimate = _Estimate(self.tried[0].model, self.target)
        forms = [_assigned(everything, form, regions) for form in self.target.promotions if form != "float"]
        for promoted in sorted((f for f in forms if f), key=estimate):
            if self.attempt(promoted) <= 1:
                return


def _check_count(model: Model, count: int) -> int:
    """How many of the first `count` samples the plans are checked on: fewer for outputs that
    hold more than CHECK_VALUES / count values a sample (CHECK_VALUES)."""
    values = sum(math.prod(max(int(d), 1) for d in model.arrays[name].shape) for name in model.outputs)
    return min(count, max(MIN_CHECK_SAMPLES, math.ceil(CHECK_VALUES / max(values, 1))))


def _promotions(proto: onnx.ModelProto, chosen: _Attempt) -> list[Promotion]:
    """The chosen plan's nodes out of int8, in graph order, each with where it went and why (a
    hybrid node without a hybrid kernel runs float)."""
    types = dict(zip(node_names(proto), (node.op_type for node in proto.graph.node)))
    position = {name: k for k, name in enumerate(types)}
    hybrid = {op.source for op in chosen.model.operators if precision_of(op, chosen.model) == HYBRID}
    found = []
    for node, (to, reason) in sorted(chosen.promoted.items(), key=lambda item: position.get(item[0], -1)):
        to = "float" if to == HYBRID and node not in hybrid else to
        found.append(Promotion(node, types.get(node, ""), f"kept {to}: {reason}", to))
    return found


class _Estimate:
    """A plan's cost on the target estimated from the all-int8 model, without building it: each
    op of a promoted node priced at its new precision (targets.cost prices the written plans)."""

    def __init__(self, all_int8: Model, target: Target):
        self.target = target
        self.base = cost(all_int8, target).ns
        self.ops: dict[str, list] = {}
        for op in all_int8.operators:
            precision = precision_of(op, all_int8)
            kernel = target.kernel(op.type, precision)
            hybrid = TFLITE_OPS[op.type].hybrid is not None if op.type in TFLITE_OPS else False
            self.ops.setdefault(op.source, []).append((op.type, work(op, all_int8),
                                                       kernel.ns if kernel else 0.0, hybrid))

    def __call__(self, promoted: dict[str, tuple[str, str]]) -> float:
        total = self.base
        for node, (to, _) in promoted.items():
            for op_type, amount, ns, hybrid in self.ops.get(node, ()):
                precision = "float" if to == HYBRID and not hybrid else to
                kernel = self.target.kernel(op_type, precision) or self.target.kernel(op_type, "float")
                total += amount * ((kernel.ns if kernel else ns) - ns)
        return total


def _search(graph, all_int8: Model, target: Target, target_db: float, metric: Metric | None, attempt):
    """Measures the sensitivity, then tries the candidates' forms in LiteRT
    (attempt(promoted)): those within the headroom cheapest first, then the closest others; with
    a metric, by bisection over the candidates in their cheapest forms."""
    from .sensitivity import measure, run_budget

    regions = _Regions(graph, all_int8, target)
    allowed = allowed_error(graph.slices, target_db)
    per_sample = sum(work(op, all_int8) for op in all_int8.operators)
    sensitivity = measure(graph, allowed, *run_budget(graph, per_sample))
    candidates = _candidates(sensitivity, graph, regions, allowed)
    estimate = _Estimate(all_int8, target)
    forms = []  # (predicted off, estimated cost, order, promoted)
    every = set(regions.int8_nodes)
    for k, candidate in enumerate(candidates):
        seen = []
        for form in target.promotions:
            promoted = _assigned(candidate, form, regions)
            # every int8 node to float is the float model, not a plan (the probe measured it)
            all_float = every <= promoted.keys() and all(to == "float" for to, _ in promoted.values())
            if promoted and promoted not in seen and not all_float:
                seen.append(promoted)
                forms.append((candidate.off, estimate(promoted), k, promoted))
    if metric is not None:
        cheapest = {}
        for off, spent, k, promoted in sorted(forms, key=lambda f: (f[2], f[1])):
            cheapest.setdefault(k, promoted)
        _bisect_metric(list(cheapest.values()), attempt)
        return sensitivity
    within = sorted((f for f in forms if f[0] <= HEADROOM), key=lambda f: (f[1], f[2]))
    others = sorted((f for f in forms if f[0] > HEADROOM), key=lambda f: (f[0], f[1], f[2]))
    for _, _, _, promoted in (within + others)[:MAX_ROUNDS]:
        if attempt(promoted) <= 1:
            break
    return sensitivity


def _bisect_metric(plans: list[dict], attempt) -> None:
    """With a metric: the smallest of the growing plans that holds it, by bisection (each step
    one LiteRT run of the samples), then the largest if none did."""
    low, high = 0, len(plans) - 1
    while low <= high:
        middle = (low + high) // 2
        if attempt(plans[middle]) <= 1:
            high = middle - 1
        else:
            low = middle + 1


def _costs(sensitivity, graph, kept: set[str], allowed: np.ndarray) -> list[TensorCost]:
    """The SHOWN_UNITS costliest units, alone and poisoned, in SQNR at the worst output."""
    from .sensitivity import sqnr_db

    outputs = ~graph.slices
    ranked = sorted(range(len(sensitivity.units)),
                    key=lambda k: (-float(np.max(sensitivity.units[k].alone / allowed)), k))[:SHOWN_UNITS]
    costs = []
    for k in ranked:
        unit = sensitivity.units[k]
        poisoned = loss = None
        if unit.poisoned is not None:
            before, after = (sqnr_db(e[outputs]) for e in unit.poisoned)
            poisoned = round(after, 1)
            loss = round(before - after, 1) if math.isfinite(before - after) else None
        costs.append(TensorCost(unit.tensors, unit.kinds[0] if len(unit.kinds) == 1 else "region",
                                round(sqnr_db(unit.alone[outputs]), 1), poisoned, loss,
                                bool(unit.nodes) and unit.nodes <= kept))
    return costs
